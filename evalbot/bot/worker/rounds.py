"""Automerge rounds: a round is every PR scored against one main SHA. When it is complete, gather what
the forge says about its PRs, let `evalbot.decide.automerge` choose (a pure function), and act: merge
the first candidate that merges, tell the others main moved, and score them again."""

from __future__ import annotations

import hashlib
import logging
from typing import TYPE_CHECKING

from evalbot.bot.jobs.ledger import DONE, JobRecord, UndecodableOutcome
from evalbot.bot.jobs.model import DecideRound, ScoreJob
from evalbot.bot.worker import approval
from evalbot.decide import automerge
from evalbot.forge.base import Forge
from evalbot.settings.tiers import NEEDS_REBASE_LABEL

if TYPE_CHECKING:
    from evalbot.bot.worker.worker import Worker

log = logging.getLogger("evalbot.worker")

ROUND_DECISION_RETRIES = 5


def round_fingerprint(records: list[JobRecord]) -> str:
    return hashlib.sha256(",".join(sorted(r.key for r in records)).encode()).hexdigest()[:16]


def decide_round(worker: Worker, repo: str, base_sha: str, attempt: int = 0) -> str:
    if not worker.automerge_enabled(repo):
        return "automerge off"
    records = worker.ledger.for_base(repo, base_sha)
    if not automerge.round_is_complete([r.state for r in records]):
        return "round still running"
    if worker.ledger.round_merged(repo, base_sha) is not None:
        return "round already merged"
    done = [r for r in records if r.state == DONE and r.outcome]
    if not done or not worker.ledger.claim_round(repo, base_sha, f"{round_fingerprint(done)}:{attempt}"):
        return "round decided elsewhere"
    try:
        return _decide_claimed_round(worker, repo, base_sha, done, attempt)
    except Exception as exc:  # GitHub trouble: the round is decided again later, never dropped
        log.warning("round %s@%s: %s; deciding again later", repo, base_sha[:12], exc)
        if attempt < ROUND_DECISION_RETRIES:
            worker.queue.submit_chore(DecideRound(repo=repo, base_sha=base_sha, attempt=attempt + 1), delay=60)
        return f"deferred: {type(exc).__name__}"


def _round_entries(forge: Forge, done: list[JobRecord]) -> list[automerge.RoundEntry]:
    entries: list[automerge.RoundEntry] = []
    for record in done:
        try:
            outcome = record.load_outcome()
        except UndecodableOutcome as exc:  # skipped, never unpickled: it cannot be merged
            log.error("%s; left out of the round", exc)
            continue
        pull = forge.get_pull(record.pr_number)
        entries.append(automerge.RoundEntry(
            pr_number=record.pr_number, scored_head_sha=record.head_sha, tier=outcome.tier or "",
            speedup=outcome.speedup, current_head_sha=pull.head_sha, mergeable=pull.mergeable,
            is_open=pull.state == "open", draft=pull.draft,
        ))
    return entries


def _decide_claimed_round(worker: Worker, repo: str, base_sha: str, done: list[JobRecord], attempt: int) -> str:
    forge = worker.forge_for(repo)
    if worker.main_head(forge) != base_sha:
        return "main moved; this round is moot"
    entries = _round_entries(forge, done)
    settings = worker.settings
    policy = automerge.AutomergePolicy(enabled=True, min_tier=settings.automerge_min_tier, tiers=settings.tiers)
    decision = automerge.choose_round_merge(entries, policy)
    by_pr = {e.pr_number: e for e in entries}
    for pr_number in decision.merge_candidates:
        entry = by_pr[pr_number]
        pull = forge.get_pull(pr_number)
        result = forge.merge(
            pr_number, entry.scored_head_sha,
            worker.render("gh_merge_title.txt.j2", title=pull.title, pr_number=pr_number).strip(),
            worker.render("gh_merge_message.md.j2", base_sha=base_sha, tier=entry.tier, speedup=entry.speedup,
                          head_sha=entry.scored_head_sha),
        )
        if not result.merged:
            log.info("automerge of #%d refused: %s", pr_number, result.message)
            continue
        worker.ledger.mark_round_merged(repo, base_sha, pr_number)
        rebased = automerge.prs_to_rebase(entries, pr_number)
        forge.comment(pr_number, worker.render("comment_automerged.md.j2", base_sha=base_sha, tier=entry.tier,
                                               speedup=entry.speedup, head_sha=entry.scored_head_sha, rebased=rebased,
                                               needs_rebase=NEEDS_REBASE_LABEL))
        mark_stale_and_requeue(worker, forge, repo, result.sha or None, only=set(rebased))
        return f"merged #{pr_number}"
    unknown = [n for n, why in decision.passed_over.items() if why == "mergeability not known yet"]
    if unknown and attempt < ROUND_DECISION_RETRIES:
        worker.queue.submit_chore(DecideRound(repo=repo, base_sha=base_sha, attempt=attempt + 1), delay=30)
    return f"no merge: {decision.reason}"


def mark_stale_and_requeue(worker: Worker, forge: Forge, repo: str, main_sha: str | None,
                           only: set[int] | None = None) -> int:
    """Main moved: every open PR into main is scored again against it; scored ones get needs-rebase."""
    main_sha = main_sha or worker.main_head(forge)
    queued = 0
    for pull in forge.list_open_pulls():
        if only is not None and pull.number not in only:
            continue
        if pull.draft or pull.base_ref != worker.settings.main_branch:
            continue
        if approval.needs_approval(worker, pull, repo):  # a fork PR nobody approved: still waits for /ok-to-test
            continue
        if any(worker.settings.tiers.is_tier_label(label) for label in pull.labels) or worker.ledger.for_pull(repo, pull.number):
            forge.add_label(pull.number, NEEDS_REBASE_LABEL)
        job = ScoreJob(repo=repo, pr_number=pull.number, head_sha=pull.head_sha, base_sha=main_sha, reason="main moved")
        queued += worker.queue.submit_score(job)
    return queued
