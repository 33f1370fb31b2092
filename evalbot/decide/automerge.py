"""The automerge choice: a pure function over one round's results.

A round is every PR scored against one main SHA. When the round is complete (no job for that SHA is
still queued or running) and automerge is on, the best eligible PR is merged (squash, guarded by
the scored head SHA) and every other open PR of the round is marked `dspark-needs-rebase` and scored
again against the new main. Nothing here talks to GitHub; the worker gathers the data and acts.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from evalbot.settings.tiers import DEFAULT_MIN_TIER, DEFAULT_TIERS, TierSettings


def tier_rank(tier: str, tiers: TierSettings = DEFAULT_TIERS) -> int:
    """-1 for REJECT and for anything that is not a known tier (an unknown tier never merges)."""
    return tiers.rank(tier)


@dataclass(frozen=True)
class RoundEntry:
    """One PR's result in a round, plus what the forge says about the PR right now."""

    pr_number: int
    scored_head_sha: str
    tier: str  # REJECT, none, XS, S, M, L, XL (evalbot.settings.tiers)
    speedup: float = 0.0  # decode speedup vs main; ranks PRs of one tier
    current_head_sha: str | None = None  # None: unknown (never merged on an unknown head)
    mergeable: bool | None = None  # None: GitHub has not computed it yet
    is_open: bool = True
    draft: bool = False


@dataclass(frozen=True)
class AutomergePolicy:
    enabled: bool = False
    min_tier: str = DEFAULT_MIN_TIER
    tiers: TierSettings = DEFAULT_TIERS

    def __post_init__(self) -> None:
        if self.min_tier not in self.tiers.order[1:]:
            raise ValueError(
                f"automerge minimum tier must be one of {', '.join(self.tiers.order[1:])}, got {self.min_tier!r}"
            )


@dataclass(frozen=True)
class RoundDecision:
    """`merge_candidates`: PR numbers, best first; the worker tries them in order and stops at the
    first merge that succeeds. `passed_over`: why each other PR of the round is not a candidate."""

    merge_candidates: tuple[int, ...] = ()
    passed_over: dict[int, str] = field(default_factory=dict)
    reason: str = ""

    @property
    def merges(self) -> bool:
        return bool(self.merge_candidates)


def why_not_eligible(entry: RoundEntry, policy: AutomergePolicy) -> str | None:
    """The reason this PR cannot be merged by the bot, or None if it can."""
    if entry.tier == policy.tiers.reject_name:
        return "rejected by a gate"
    if tier_rank(entry.tier, policy.tiers) < 0:
        return f"unknown tier {entry.tier!r}"
    if tier_rank(entry.tier, policy.tiers) < tier_rank(policy.min_tier, policy.tiers):
        return f"tier {entry.tier} is below the automerge minimum {policy.min_tier}"
    if not entry.is_open:
        return "no longer open"
    if entry.draft:
        return "is a draft"
    if entry.current_head_sha != entry.scored_head_sha:
        return "head moved since it was scored"
    if entry.mergeable is not True:
        return "not mergeable" if entry.mergeable is False else "mergeability not known yet"
    return None


def _is_current(entry: RoundEntry) -> bool:
    return entry.current_head_sha is not None and entry.current_head_sha == entry.scored_head_sha


def _rank_key(entry: RoundEntry, tiers: TierSettings) -> tuple:
    # Higher tier first, then the larger speedup, then the older PR (lower number) as a fair tiebreak.
    return (-tier_rank(entry.tier, tiers), -entry.speedup, entry.pr_number)


def choose_round_merge(entries: list[RoundEntry], policy: AutomergePolicy) -> RoundDecision:
    """Which PR of a finished round to merge. At most one merge lands per round (the worker stops
    at the first success), so the others are always compared against the main they will meet."""
    if not policy.enabled:
        return RoundDecision(reason="automerge is off")
    latest: dict[int, RoundEntry] = {}
    for entry in entries:  # a PR scored more than once in one round: the entry of the head it points at counts
        kept = latest.get(entry.pr_number)
        if kept is None or not _is_current(kept) or _is_current(entry):
            latest[entry.pr_number] = entry
    passed_over: dict[int, str] = {}
    eligible: list[RoundEntry] = []
    for entry in latest.values():
        why = why_not_eligible(entry, policy)
        if why is None:
            eligible.append(entry)
        else:
            passed_over[entry.pr_number] = why
    if not eligible:
        return RoundDecision(passed_over=passed_over, reason="no PR in this round is eligible")
    ranked = sorted(eligible, key=lambda e: _rank_key(e, policy.tiers))
    return RoundDecision(
        merge_candidates=tuple(e.pr_number for e in ranked),
        passed_over=passed_over,
        reason=f"best: #{ranked[0].pr_number} ({ranked[0].tier}, {ranked[0].speedup:+.1%})",
    )


def prs_to_rebase(entries: list[RoundEntry], merged_pr: int) -> list[int]:
    """After `merged_pr` landed, every other open PR of the round must be scored against the new main."""
    return sorted({e.pr_number for e in entries if e.pr_number != merged_pr and e.is_open})


def round_is_complete(job_states: list[str]) -> bool:
    """A round can be decided only when none of its jobs is still waiting, running or unpublished."""
    return bool(job_states) and not any(s in ("queued", "running", "scored") for s in job_states)
