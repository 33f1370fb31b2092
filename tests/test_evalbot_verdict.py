"""The verdict: gates -> REJECT, speedup + CI -> tier, infrastructure problems -> no verdict."""

import random

import pytest

from evalbot.decide.integrity import IntegrityReport
from evalbot.decide.records import Finding
from evalbot.decide.verdict import (compute_speedup, decide, infrastructure_error, not_evaluated_harness_changed,
                                    not_evaluated_needs_rebase)
from evalbot.testing import builders as b

S = b.settings()


@pytest.mark.parametrize(
    "rounds, tier",
    [
        ([1.00, 1.01, 0.99], "none"),
        ([1.025, 1.03, 1.028], "XS"),
        ([1.04, 1.05, 1.045], "S"),
        ([1.07, 1.08, 1.075], "M"),
        ([1.12, 1.15, 1.13], "L"),
        ([1.20, 1.25, 1.22], "XL"),
    ],
)
def test_tier_from_the_median_round(rounds, tier):
    v = decide(b.measurements(rounds, noise_floor=b.noise(0.005)), S)
    assert v.status == "scored"
    assert v.tier == tier
    assert v.labels == [f"eval-dspark:{tier}", f"eval:{tier}"]


def test_tier_is_the_band_of_the_ci_lower_bound_not_of_the_median():
    # median +19.5 % (XL's band) but the interval reaches down to +13 %: L, and the reason still shows the point
    v = decide(b.measurements([1.12, 1.19, 1.20, 1.21, 1.22, 1.14], noise_floor=b.noise(0.005)), S)
    assert v.status == "scored" and v.speedup.pct > 18 and 10 <= v.speedup.ci_low_pct < 18
    assert v.tier == "L" and v.labels == ["eval-dspark:L", "eval:L"]
    assert "+19.5%" in v.reason and "lower bound" in v.reason


def test_tier_reads_the_speedup_by_total_time_when_it_is_lower():
    """A PR fast on most rounds and slow on a few: the median and its interval say XL, what a user of every
    request sees (main's summed seconds over the PR's) is +5 %: the tier is S, and the reason says why."""
    rounds = [1.20, 1.21, 1.22, 1.20, 1.21, 1.22]
    c = b.cell(speedups=rounds)
    slow = [t.model_copy(update={"pr_s": t.pr_s * (1.45 if t.round % 3 == 2 else 1.0)}) for t in c.dspark_timed]
    c = c.model_copy(update={"dspark_timed": slow})
    m = b.measurements(rounds, cells=[c], noise_floor=b.noise(0.005))
    assert m.speedup_rounds == rounds and 3.5 <= m.dspark_total_pct < 6
    v = decide(m, S)
    assert v.status == "scored" and v.speedup.ci_low_pct > 18 and v.tier == "S", v.reason
    assert "by total time" in v.reason and "below the CI's lower bound" in v.reason
    honest = decide(b.measurements(rounds, noise_floor=b.noise(0.005)), S)
    assert honest.tier == "XL" and "by total time" not in honest.reason


def test_ci_including_zero_gives_none_even_with_a_big_median():
    v = decide(b.measurements([0.98, 1.30, 1.25], noise_floor=b.noise(0.0)), S)
    assert v.tier == "none"
    assert "includes zero" in v.reason


def test_ci_inside_noise_gives_none():
    v = decide(b.measurements([1.025, 1.03, 1.028], noise_floor=b.noise(0.03)), S)
    assert v.tier == "none"
    assert "noise floor" in v.reason


def test_one_round_gives_no_tier():
    v = decide(b.measurements([1.5]), S)
    assert v.status == "scored" and v.tier == "none"
    assert v.speedup is not None and v.speedup.ci_low_pct is None
    assert "single round" in v.reason


def test_any_failed_gate_rejects_whatever_the_speedup():
    m = b.measurements([1.3, 1.3, 1.3], cells=[b.cell(speedups=[1.3, 1.3, 1.3], verified=8)])
    v = decide(m, S)
    assert v.status == "rejected" and v.tier == "REJECT"
    assert v.labels == ["eval-dspark:REJECT", "eval:REJECT"]
    assert "losslessness" in v.reason
    assert v.speedup is not None and v.speedup.pct == pytest.approx(30.0)  # still reported


def test_missing_metric_rejects_fail_closed():
    v = decide(b.measurements([1.1, 1.1, 1.1], accuracy_summary=None), S)
    assert v.tier == "REJECT" and "accuracy" in v.reason


def test_the_bots_own_environment_failing_is_an_infrastructure_error():
    report = IntegrityReport(findings=[Finding(ref=None, where="sandbox", message="cannot start a harness server")])
    v = decide(b.measurements([1.1] * 3, integrity=report), S)
    assert v.status == "infra_error" and v.tier is None and v.labels == [] and v.infra.where == "sandbox"


def test_main_failing_its_own_checks_is_an_infrastructure_error_not_a_reject():
    report = IntegrityReport(findings=[Finding(ref="base", where="generate (main process 1)", message="exited",
                                               stderr_tail="Traceback")])
    v = decide(b.measurements([1.1] * 3, integrity=report), S)
    assert v.status == "infra_error" and "main's own process" in v.reason and v.infra.stderr_tail == "Traceback"


def test_mains_own_streams_not_being_its_continuation_is_an_infrastructure_error():
    c = b.cell().model_copy(update={"main_verified": 8, "main_streams": 9})
    v = decide(b.measurements([1.1] * 3, cells=[c]), S)
    assert v.status == "infra_error" and "the ruler is broken" in v.reason


def test_pr_side_findings_reject_with_their_reason_never_infra():
    report = IntegrityReport(findings=[Finding(ref="head", where="generate (PR process 2)",
                                               message="the process exited (or closed its pipes) during generate")])
    v = decide(b.measurements([1.5] * 3, integrity=report), S)
    assert v.status == "rejected" and v.tier == "REJECT" and "exited" in v.reason


def test_speedup_is_median_with_bootstrap_ci():
    sp = compute_speedup(b.measurements([1.05, 1.10, 1.07]), S)
    assert sp.ratio == pytest.approx(1.07)
    assert sp.pct == pytest.approx(7.0)
    assert sp.ci_low_pct == pytest.approx(5.0) and sp.ci_high_pct == pytest.approx(10.0)


def test_rounds_of_one_pairing_count_as_one_sample_of_process_variance():
    """Six rounds, but two pairings whose processes differ: the interval resamples pairings, so it spans
    the gap between them instead of reading six agreeing rounds."""
    rounds = [1.10, 1.10, 1.10, 1.00, 1.00, 1.00]
    clustered = compute_speedup(b.measurements(rounds, groups=[0, 0, 0, 1, 1, 1]), S)
    independent = compute_speedup(b.measurements(rounds, groups=[0, 1, 2, 3, 4, 5]), S)
    assert clustered.ci_low_pct == pytest.approx(0.0) and clustered.ci_high_pct == pytest.approx(10.0)
    assert clustered.ci_high_pct - clustered.ci_low_pct >= independent.ci_high_pct - independent.ci_low_pct


def test_no_tier_before_every_process_pairing_was_measured():
    """The budget ran out after four rounds over four of nine pairings: a big, tight-looking speedup
    is still no tier (process-to-process variance has not been sampled), and the reason says why."""
    m = b.measurements([1.08, 1.07, 1.09, 1.08], groups=[0, 1, 2, 3], processes_per_ref=3, noise_floor=b.noise(0.005))
    m = m.model_copy(update={"stop": m.stop.model_copy(update={"reason": "budget"})})
    v = decide(m, S)
    assert v.status == "scored" and v.tier == "none"
    assert "undecided: the budget ended after 4 rounds over 4 of the 9 process pairings" in v.reason
    full = b.measurements([1.08, 1.07, 1.09, 1.08, 1.08, 1.07, 1.09, 1.08, 1.08], groups=list(range(9)),
                          processes_per_ref=3, noise_floor=b.noise(0.005))
    assert decide(full, S).tier == "M"


def test_aa_never_rejects_and_never_wins_a_tier():
    rng = random.Random(11)
    for _ in range(200):
        noise = rng.uniform(0.003, 0.04)
        rounds = [1 + rng.uniform(-noise, noise) for _ in range(rng.choice([2, 3, 5]))]
        ar = [1 + rng.uniform(-noise, noise) for _ in rounds]
        m = b.measurements(
            rounds, cells=[b.cell(speedups=rounds, ar_ratios=ar)],
            guards=[b.guard("g", generation=[1 + rng.uniform(-noise, noise) for _ in rounds],
                            prefill=[1 + rng.uniform(-noise, noise) for _ in rounds])],
            noise_floor=b.noise(noise, calibrated=True),
        )
        v = decide(m, S)
        assert v.status == "scored", v.reason
        assert v.tier == "none", (rounds, noise, v.reason)


def test_not_evaluated_and_infra_constructors():
    v = not_evaluated_harness_changed(["harness/score.py", "harness/HARNESS_PATHS"])
    assert v.status == "not_evaluated" and v.tier is None and v.labels == []
    assert v.reason == "not evaluated: harness changed"
    assert v.changed_harness_paths == ["harness/HARNESS_PATHS", "harness/score.py"]
    e = infrastructure_error("main's side: generate (main process 1)", "no complete answer within 60 s", "tail")
    assert e.status == "infra_error" and e.infra.stderr_tail == "tail"
    r = not_evaluated_needs_rebase(["engine/model.py"], "dspark-needs-rebase")
    assert r.status == "not_evaluated" and r.labels == ["dspark-needs-rebase"] and "rebase" in r.reason


def _one_round(**cell_kw):
    """The 2-vCPU VM's A/A after its 180 s budget: one round over one of four pairings."""
    m = b.measurements([0.88], cells=[b.cell(speedups=[0.88], ar_ratios=[0.898], streams=1, **cell_kw)],
                       guards=[b.guard(generation=[0.95], prefill=[0.771])], processes_per_ref=2, noise_floor=b.noise(0.01))
    return m.model_copy(update={"stop": m.stop.model_copy(update={"reason": "budget"})})


def test_one_round_over_one_pairing_is_undecided_not_a_reject():
    """A no-op PR on two cores read AR 0.898x, a guard's prefill 0.771x and one verified stream per cell
    when the budget ended after one round: that is no evidence of a regression or of a lossy decoder."""
    v = decide(_one_round(), S)
    assert v.status == "scored" and v.tier == "none", v.reason
    assert v.reason.startswith("undecided: the budget ended after 1 rounds over 1 of the 4 process pairings")
    skipped = {g.gate for g in v.gates if g.status == "skipped"}
    assert {"ar", "lossless", "guard:qwen3-0.6b-shape"} <= skipped
    assert all(g.detail.startswith("undecided (the budget ended first)") for g in v.gates if g.status == "skipped")


def test_a_wrong_stream_is_conclusive_after_one_round():
    v = decide(_one_round(verified=0), S)
    assert v.status == "rejected" and "not main's greedy continuation" in v.reason


def test_the_same_slowdown_over_every_pairing_is_a_reject():
    ar = [0.898, 0.90, 0.89, 0.90]
    m = b.measurements([1.0] * 4, cells=[b.cell(speedups=[1.0] * 4, ar_ratios=ar, streams=4)], groups=[0, 1, 2, 3],
                       processes_per_ref=2, noise_floor=b.noise(0.01))
    v = decide(m, S)
    assert v.status == "rejected" and "AR decode" in v.reason


def test_a_gate_below_its_bar_with_an_interval_above_it_is_undecided_and_wins_no_tier():
    """A +20 % PR whose AR reads 0.94x over four noisy rounds (interval up to 1.0): neither a REJECT on
    a guess nor a tier while a gate is open."""
    ar = [0.80, 0.93, 0.95, 1.08]
    m = b.measurements([1.2, 1.21, 1.19, 1.2], cells=[b.cell(speedups=[1.2, 1.21, 1.19, 1.2], ar_ratios=ar, streams=4)],
                       groups=[0, 1, 2, 3], processes_per_ref=2, noise_floor=b.noise(0.01))
    m = m.model_copy(update={"stop": m.stop.model_copy(update={"reason": "budget"})})
    v = decide(m, S)
    assert v.status == "scored" and v.tier == "none" and v.labels == S.tiers.labels_for("none"), v.reason
    assert v.reason.startswith("undecided: after 4 rounds (the budget ended) AR decode read below its bar"), v.reason
    assert next(g for g in v.gates if g.gate == "ar").undecided


def test_stopping_goes_on_while_a_total_time_check_straddles_its_bar():
    """The median's interval sits in one band, but the PR's summed time reads below main's with an interval
    reaching above the bar: more rounds can still change the verdict, so the scoring does not stop."""
    from evalbot.decide.stopping import decided

    rounds = [1.20, 1.21, 1.22, 1.20, 1.21, 1.22]
    c = b.cell(speedups=rounds)
    uneven = [t.model_copy(update={"pr_s": 0.4 if t.round % 2 else 1.75}) for t in c.dspark_timed]
    m = b.measurements(rounds, cells=[c.model_copy(update={"dspark_timed": uneven})], noise_floor=b.noise(0.005))
    stop, why = decided(m, S)
    assert not stop and "DSpark by total time 0.930× is below its bar" in why
    assert decided(b.measurements(rounds, noise_floor=b.noise(0.005)), S)[0]
