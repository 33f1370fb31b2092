"""The automerge choice: a pure function over round results, tested exhaustively without HTTP."""

from __future__ import annotations

import itertools

import pytest

from evalbot.decide.automerge import (
    AutomergePolicy,
    RoundEntry,
    choose_round_merge,
    prs_to_rebase,
    round_is_complete,
    tier_rank,
    why_not_eligible,
)
from evalbot.settings.tiers import TIER_ORDER

ALL_TIERS = ("REJECT",) + TIER_ORDER
ON = AutomergePolicy(enabled=True, min_tier="S")


def entry(number, tier, speedup=0.0, **kw):
    head = kw.pop("head", f"{number:040x}")
    values = dict(current_head_sha=head, mergeable=True)
    values.update(kw)
    return RoundEntry(pr_number=number, scored_head_sha=head, tier=tier, speedup=speedup, **values)


def test_off_never_merges():
    assert not choose_round_merge([entry(1, "XL", 0.5)], AutomergePolicy(enabled=False)).merges


def test_empty_round():
    decision = choose_round_merge([], ON)
    assert not decision.merges and decision.reason == "no PR in this round is eligible"


@pytest.mark.parametrize("min_tier", TIER_ORDER[1:])
@pytest.mark.parametrize("tiers", list(itertools.product(ALL_TIERS, repeat=3)))
def test_every_combination_of_three_tiers(tiers, min_tier):
    """For every tier triple and threshold: the first candidate is the highest eligible tier, and
    exactly the PRs at or above the threshold (never REJECT) are candidates."""
    policy = AutomergePolicy(enabled=True, min_tier=min_tier)
    entries = [entry(n + 1, tier, speedup=0.01 * (n + 1)) for n, tier in enumerate(tiers)]
    decision = choose_round_merge(entries, policy)
    eligible = [e for e in entries if e.tier != "REJECT" and tier_rank(e.tier) >= tier_rank(min_tier)]
    assert set(decision.merge_candidates) == {e.pr_number for e in eligible}
    assert set(decision.passed_over) == {e.pr_number for e in entries} - {e.pr_number for e in eligible}
    if eligible:
        best = decision.merge_candidates[0]
        assert tier_rank(entries[best - 1].tier) == max(tier_rank(e.tier) for e in eligible)
        ranks = [tier_rank(entries[n - 1].tier) for n in decision.merge_candidates]
        assert ranks == sorted(ranks, reverse=True)
    assert "REJECT" not in {entries[n - 1].tier for n in decision.merge_candidates}


def test_within_a_tier_the_larger_speedup_wins_then_the_older_pr():
    decision = choose_round_merge([entry(5, "L", 0.12), entry(3, "L", 0.15), entry(4, "L", 0.15), entry(9, "XL", 0.18)], ON)
    assert decision.merge_candidates == (9, 3, 4, 5)


def test_a_higher_tier_beats_a_larger_raw_speedup():
    # a tier already accounts for confidence; M with a tight CI outranks S with a wild point estimate
    assert choose_round_merge([entry(1, "S", 0.09), entry(2, "M", 0.07)], ON).merge_candidates[0] == 2


@pytest.mark.parametrize(
    "changes,why",
    [
        (dict(tier="REJECT"), "rejected by a gate"),
        (dict(tier="none"), "below the automerge minimum"),
        (dict(tier="XS"), "below the automerge minimum"),
        (dict(tier="weird"), "unknown tier"),
        (dict(tier=""), "unknown tier"),
        (dict(is_open=False), "no longer open"),
        (dict(draft=True), "is a draft"),
        (dict(current_head_sha="f" * 40), "head moved"),
        (dict(current_head_sha=None), "head moved"),
        (dict(mergeable=False), "not mergeable"),
        (dict(mergeable=None), "mergeability not known yet"),
    ],
)
def test_each_reason_to_pass_a_pr_over(changes, why):
    values = dict(tier="XL", speedup=0.3)
    values.update(changes)
    tier = values.pop("tier")
    e = entry(1, tier, **values)
    assert why in why_not_eligible(e, ON)
    decision = choose_round_merge([e, entry(2, "S", 0.04)], ON)
    assert decision.merge_candidates == (2,) and why in decision.passed_over[1]


def test_a_rescored_pr_counts_once_with_its_latest_result():
    decision = choose_round_merge([entry(1, "XL", 0.3), entry(2, "M", 0.07), entry(1, "REJECT")], ON)
    assert decision.merge_candidates == (2,) and decision.passed_over == {1: "rejected by a gate"}


def test_the_entry_of_the_prs_current_head_counts_not_the_latest_created():
    # head A (REJECT: fast but lossy) scored, then B (XL), then a force-push back to A: A's job was done
    # already, so B's entry is the newest, but the PR points at A
    a, b = "a" * 40, "b" * 40
    rejected = RoundEntry(pr_number=1, scored_head_sha=a, tier="REJECT", current_head_sha=a, mergeable=True)
    lucky = RoundEntry(pr_number=1, scored_head_sha=b, tier="XL", speedup=0.3, current_head_sha=a, mergeable=True)
    for order in ([rejected, lucky], [lucky, rejected]):
        decision = choose_round_merge([*order, entry(2, "S", 0.04)], ON)
        assert decision.merge_candidates == (2,) and decision.passed_over == {1: "rejected by a gate"}


def test_prs_to_rebase_are_the_other_open_ones():
    entries = [entry(1, "L"), entry(2, "S"), entry(3, "REJECT"), entry(4, "M", is_open=False), entry(2, "S")]
    assert prs_to_rebase(entries, merged_pr=1) == [2, 3]


@pytest.mark.parametrize(
    "states,complete",
    [
        ([], False),
        (["done"], True),
        (["done", "superseded", "failed"], True),
        (["done", "queued"], False),
        (["done", "running"], False),
        (["done", "scored"], False),
    ],
)
def test_a_round_is_decided_only_when_nothing_is_in_flight(states, complete):
    assert round_is_complete(states) is complete


@pytest.mark.parametrize("bad", ["none", "XXL", "", "reject"])
def test_policy_rejects_a_bad_minimum_tier(bad):
    with pytest.raises(ValueError, match="automerge minimum tier"):
        AutomergePolicy(enabled=True, min_tier=bad)
