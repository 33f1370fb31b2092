"""Gates: each bar, each missing metric failing closed, noise allowance, A/A never rejects."""

import random

import pytest

from evalbot.settings import Thresholds
from evalbot.decide.integrity import Finding, IntegrityReport
from evalbot.decide.gates import evaluate, gate_accuracy, gate_ar, gate_guards, gate_integrity, gate_lossless, gate_reverify, gate_tau
from evalbot.decide.reverify import ReverifySummary
from evalbot.testing import builders as b

TH = Thresholds()


def by_gate(results):
    return {r.gate: r for r in results}


def test_everything_passes_on_a_clean_measurement():
    results = evaluate(b.measurements([1.05, 1.06, 1.05]), TH)
    assert all(r.status in ("pass", "skipped") for r in results)
    assert by_gate(results)["reverify"].status == "skipped"


# -- losslessness --------------------------------------------------------------------------------

def test_lossless_fails_on_one_diverging_run():
    m = b.measurements(contexts=[b.context(runs=9, lossless=8)])
    r = gate_lossless(m, TH)
    assert r.status == "fail" and "1 of 9" in r.detail


def test_lossless_notes_a_lossy_main():
    c = b.context(runs=9)
    c = c.model_copy(update={"main_lossless_runs": 7})
    r = gate_lossless(b.measurements(contexts=[c]), TH)
    assert r.status == "pass" and "main diverged in 2 of its 9 runs" in r.detail


def test_lossless_needs_enough_runs():
    assert gate_lossless(b.measurements(contexts=[b.context(runs=2)]), TH).status == "fail"
    assert gate_lossless(b.measurements(contexts=[b.context(runs=3)]), TH).status == "pass"


def test_lossless_fails_closed_without_runs():
    r = gate_lossless(b.measurements(contexts=[]), TH)
    assert r.status == "fail" and r.missing


def test_every_context_must_be_lossless():
    m = b.measurements(contexts=[b.context(ctx=1024), b.context(ctx=4096, lossless=0)])
    assert gate_lossless(m, TH).status == "fail"


# -- tau ---------------------------------------------------------------------------------------------

@pytest.mark.parametrize("pr_tau, status", [(1.90, "pass"), (1.8999, "fail"), (2.5, "pass")])
def test_tau_floor_is_95_percent_of_main(pr_tau, status):
    m = b.measurements(contexts=[b.context(pr_tau=pr_tau, main_tau=2.0)])
    assert gate_tau(m, TH).status == status


@pytest.mark.parametrize("pr_tau, main_tau", [(None, 2.0), (2.0, None)])
def test_tau_missing_fails_closed(pr_tau, main_tau):
    r = gate_tau(b.measurements(contexts=[b.context(pr_tau=pr_tau, main_tau=main_tau)]), TH)
    assert r.status == "fail" and r.missing


# -- accuracy ----------------------------------------------------------------------------------------

@pytest.mark.parametrize(
    "top1, kl, positions, status",
    [
        (0.9, 0.1, 512, "pass"),
        (0.8999, 0.0, 512, "fail"),
        (1.0, 0.1001, 512, "fail"),
        (1.0, 0.0, 511, "fail"),
    ],
)
def test_accuracy_bars(top1, kl, positions, status):
    m = b.measurements(compare=b.compare_line(top1=top1, kl=kl, positions=positions))
    assert gate_accuracy(m, TH).status == status


def test_accuracy_missing_compare_fails_closed():
    r = gate_accuracy(b.measurements(compare=None), TH)
    assert r.status == "fail" and "not measured" in r.detail


# -- AR and guards, with noise -------------------------------------------------------------------

def test_ar_regression_beyond_noise_fails():
    m = b.measurements(contexts=[b.context(ar_ratios=[0.96, 0.965, 0.96])], noise_floor=b.noise(0.01))
    assert gate_ar(m, TH).status == "fail"


def test_ar_dip_within_noise_passes():
    m = b.measurements(contexts=[b.context(ar_ratios=[0.972, 0.975, 0.971])], noise_floor=b.noise(0.01))
    assert gate_ar(m, TH).status == "pass"  # bar 0.98 - 0.01


def test_ar_bar_exactly_met_passes():
    m = b.measurements(contexts=[b.context(ar_ratios=[0.98, 0.98, 0.98])], noise_floor=b.noise(0.0))
    assert gate_ar(m, TH).status == "pass"


def test_ar_is_gated_per_context():
    m = b.measurements(
        contexts=[b.context(ctx=1024, ar_ratios=[1.2] * 3), b.context(ctx=4096, ar_ratios=[0.9] * 3)],
        noise_floor=b.noise(0.0),
    )
    r = gate_ar(m, TH)
    assert r.status == "fail" and "4k" in r.detail


def test_ar_missing_fails_closed():
    m = b.measurements(contexts=[b.context(speedups=[1.0], ar_ratios=[])])
    assert gate_ar(m, TH).status == "fail"


@pytest.mark.parametrize("decode, prefill, status", [
    ([0.99] * 3, [0.99] * 3, "pass"),
    ([0.95] * 3, [1.0] * 3, "fail"),
    ([1.0] * 3, [0.95] * 3, "fail"),
])
def test_each_guard_decode_and_prefill(decode, prefill, status):
    m = b.measurements(guards=[b.guard("a"), b.guard("b", decode=decode, prefill=prefill)], noise_floor=b.noise(0.0))
    results = by_gate(gate_guards(m, TH))
    assert results["guard:a"].status == "pass"
    assert results["guard:b"].status == status


def test_guards_missing_fail_closed():
    assert gate_guards(b.measurements(guards=[]), TH)[0].status == "fail"
    m = b.measurements(guards=[b.guard("a", decode=[])])
    assert gate_guards(m, TH)[0].status == "fail"


# -- integrity and re-verification ----------------------------------------------------------------

def test_integrity_fails_on_head_findings_only():
    report = IntegrityReport(findings=[Finding(ref="head", message="implausible timings: x")])
    assert gate_integrity(b.measurements(integrity=report)).status == "fail"
    report = IntegrityReport(findings=[Finding(ref="base", message="x")])
    assert gate_integrity(b.measurements(integrity=report)).status == "pass"  # main's problems: infra, not gate


@pytest.mark.parametrize("status, gate_status", [("not_run", "skipped"), ("passed", "pass"), ("failed", "fail")])
def test_reverify_gate(status, gate_status):
    m = b.measurements(reverify=ReverifySummary(status=status, streams_checked=3))
    assert gate_reverify(m).status == gate_status


# -- A/A never rejects ------------------------------------------------------------------------------

def test_aa_within_the_calibrated_noise_never_fails_a_gate():
    rng = random.Random(5)
    for _ in range(300):
        noise = rng.uniform(0.002, 0.05)

        def aa(n=3):
            return [1 + rng.uniform(-noise, noise) for _ in range(n)]

        m = b.measurements(
            contexts=[b.context(ctx=c, speedups=aa(), ar_ratios=aa()) for c in (1024, 4096)],
            guards=[b.guard("a", decode=aa(), prefill=aa()), b.guard("b", decode=aa(), prefill=aa())],
            noise_floor=b.noise(noise, calibrated=True),
        )
        failed = [r for r in evaluate(m, TH) if r.status == "fail"]
        assert not failed, failed
