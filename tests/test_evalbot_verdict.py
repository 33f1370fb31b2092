"""The verdict: gates -> REJECT, speedup + CI -> tier, infrastructure problems -> no verdict."""

import random

import pytest

from evalbot.decide.integrity import Finding, IntegrityReport
from evalbot.decide.reverify import ReverifySummary
from evalbot.testing import builders as b
from evalbot.decide.verdict import compute_speedup, decide, infrastructure_error, not_evaluated_harness_changed

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
    m = b.measurements([1.3, 1.3, 1.3], contexts=[b.context(speedups=[1.3, 1.3, 1.3], lossless=8)])
    v = decide(m, S)
    assert v.status == "rejected" and v.tier == "REJECT"
    assert v.labels == ["eval-dspark:REJECT", "eval:REJECT"]
    assert "losslessness" in v.reason
    assert v.speedup is not None and v.speedup.pct == pytest.approx(30.0)  # still reported


def test_missing_metric_rejects_fail_closed():
    v = decide(b.measurements([1.1, 1.1, 1.1], compare=None), S)
    assert v.tier == "REJECT" and "accuracy" in v.reason


def test_workload_mismatch_is_an_infrastructure_error():
    report = IntegrityReport(findings=[Finding(ref="head", kind="workload", message="prompt differs")])
    v = decide(b.measurements([1.1] * 3, integrity=report), S)
    assert v.status == "infra_error" and v.tier is None and v.labels == []


def test_main_failing_its_own_checks_is_an_infrastructure_error_not_a_reject():
    report = IntegrityReport(findings=[Finding(ref="base", message="implausible timings: ...")])
    v = decide(b.measurements([1.1] * 3, integrity=report), S)
    assert v.status == "infra_error" and "main's own results" in v.reason


def test_a_broken_reverifier_is_an_infrastructure_error():
    v = decide(b.measurements([1.1] * 3, reverify=ReverifySummary(status="error", error="boom")), S)
    assert v.status == "infra_error"


def test_failed_reverify_rejects():
    v = decide(b.measurements([1.1] * 3, reverify=ReverifySummary(status="failed", failures=["x"])), S)
    assert v.tier == "REJECT"


def test_head_integrity_finding_rejects_with_its_reason():
    report = IntegrityReport(findings=[Finding(ref="head", message="implausible timings: too fast")])
    v = decide(b.measurements([1.5] * 3, integrity=report), S)
    assert v.tier == "REJECT" and "implausible timings" in v.reason


def test_speedup_is_median_with_bootstrap_ci():
    sp = compute_speedup(b.measurements([1.05, 1.10, 1.07]), S)
    assert sp.ratio == pytest.approx(1.07)
    assert sp.pct == pytest.approx(7.0)
    assert sp.ci_low_pct == pytest.approx(5.0) and sp.ci_high_pct == pytest.approx(10.0)


def test_aa_never_rejects_and_never_wins_a_tier():
    rng = random.Random(11)
    for _ in range(200):
        noise = rng.uniform(0.003, 0.04)
        rounds = [1 + rng.uniform(-noise, noise) for _ in range(rng.choice([2, 3, 5]))]
        ar = [1 + rng.uniform(-noise, noise) for _ in rounds]
        m = b.measurements(
            rounds, contexts=[b.context(speedups=rounds, ar_ratios=ar)],
            guards=[b.guard("g", decode=[1 + rng.uniform(-noise, noise) for _ in rounds],
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
    e = infrastructure_error("round 1: tau_check (PR)", "timed out after 60 s", "tail")
    assert e.status == "infra_error" and e.infra.stderr_tail == "tail"
