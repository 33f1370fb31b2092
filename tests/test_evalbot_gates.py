"""Gates: each bar, each missing metric failing closed, the noise allowance, A/A never rejects."""

import random

import pytest

from evalbot.decide.gates import (evaluate, gate_accuracy, gate_ar, gate_dspark_total, gate_guards, gate_integrity,
                                  gate_lossless, total_ci)
from evalbot.decide.integrity import IntegrityReport
from evalbot.decide.measurements import summarize
from evalbot.decide.records import Finding
from evalbot.settings import StatsSettings, Thresholds
from evalbot.testing import builders as b

TH = Thresholds()


def by_gate(results):
    return {r.gate: r for r in results}


def test_everything_passes_on_a_clean_measurement():
    results = evaluate(b.measurements([1.05, 1.06, 1.05]), TH)
    assert [r.status for r in results] == ["pass"] * len(results)
    assert set(by_gate(results)) == {"accuracy", "lossless", "dspark", "ar", "guard:qwen3-0.6b-shape", "guard:llama-3.2-1b-shape",
                                     "integrity"}


# -- losslessness: main's engine re-verified every DSpark stream ------------------------------------

def test_lossless_fails_on_one_stream_that_is_not_mains_continuation():
    r = gate_lossless(b.measurements(cells=[b.cell(streams=9, verified=8)]), TH)
    assert r.status == "fail" and "1 of 9" in r.detail and "not main's greedy continuation" in r.detail


def test_one_wrong_stream_is_named_even_before_enough_were_checked():
    # the scoring stops at the first wrong stream: the reason is the wrong stream, not the count
    r = gate_lossless(b.measurements(cells=[b.cell(streams=1, verified=0).model_copy(update={"pr_worst_gap": 1.75})]), TH)
    assert r.status == "fail" and "1 of 1 DSpark streams are not main's greedy continuation" in r.detail
    assert "a token 1.75 logits below main's top; near-ties allowed within 0.05" in r.detail


def test_lossless_reports_near_ties():
    c = b.cell(streams=9).model_copy(update={"pr_near_ties": 2, "pr_worst_gap": 0.125})
    r = gate_lossless(b.measurements(cells=[c]), TH)
    assert r.status == "pass" and "2 tokens at near-ties within 0.05 logits, the widest 0.125" in r.detail


def _gpu_streams(ties_per_stream, *, rounds=30, gap=0.122):
    """A GPU-profile campaign: 2 cells x `rounds` rounds of 256-token PR DSpark streams (15,360 tokens at
    30 rounds), verified at the 0.5-logit tolerance; ties_per_stream(i) near-ties in the i-th PR stream."""
    rec = b.records([0.8] * rounds)
    for v in rec.verifications:
        v.tolerance = 0.5
    for i, v in enumerate(x for x in rec.verifications if x.ref == "head"):
        n = ties_per_stream(i)
        v.tokens, v.tolerance, v.near_ties, v.worst_gap = 256, 0.5, list(range(3, 3 + n)), gap if n else 0.0
    return summarize(rec, noise=b.noise(0.01))


def test_near_ties_at_an_honest_kernel_changes_rate_pass():
    # the H200 kernel change: 24 near-ties in 60 streams (~15k tokens), the widest 0.122
    m = _gpu_streams(lambda i: 1 if i < 24 else 0)
    assert sum(c.pr_tokens_verified for c in m.cells) == 15360 and sum(c.pr_near_ties for c in m.cells) == 24
    r = gate_lossless(m, TH)
    assert r.status == "pass", r.detail
    assert "24 tokens at near-ties within 0.5 logits, the widest 0.122: 0.16% of 15360 tokens, bar 0.50%" in r.detail


def test_a_decoder_accepting_drafts_near_the_top_fails_on_its_near_tie_share():
    """Accepting a draft within ~0.45 logits of the top 'verifies' token by token (each is a near-tie),
    but substitutes at the rate ties occur: 8 per 256-token stream here (3.1 %), not 0.16 %."""
    m = _gpu_streams(lambda i: 8, gap=0.45)
    r = gate_lossless(m, TH)
    assert r.status == "fail" and not r.missing, r.detail
    assert r.detail.startswith("480 of 15360 verified DSpark tokens are near-tie substitutions (not main's argmax, "
                               "within 0.5 logits): 3.12% > bar 0.50%"), r.detail
    assert "code@256: 240 near-tie substitutions in 7680 tokens (3.12% > bar 1.00% per cell)" in r.detail
    # in one cell only: 2 per stream pass (0.39 % in all, 0.78 % in the cell), 3 do not
    one = _gpu_streams(lambda i: 2 if i % 2 == 0 else 0)  # code@256 streams come first in each round
    assert gate_lossless(one, TH).status == "pass"  # 60 of 15360 = 0.39 %, 0.78 % in its cell
    one = _gpu_streams(lambda i: 3 if i % 2 == 0 else 0)
    r = gate_lossless(one, TH)
    assert r.status == "fail" and "code@256: 90 near-tie substitutions in 7680 tokens (1.17% > bar 1.00%" in r.detail


def test_a_few_near_ties_in_a_few_tokens_are_allowed():
    m = _gpu_streams(lambda i: 1 if i < 3 else 0, rounds=3)  # 3 ties in 1,536 tokens: the allowance
    assert gate_lossless(m, TH).status == "pass"
    m = _gpu_streams(lambda i: 2 if i < 4 else 0, rounds=3)  # 8 in 1,536 (0.52 %)
    assert gate_lossless(m, TH).status == "fail"


def test_lossless_needs_enough_streams_and_fails_closed_without_any():
    assert gate_lossless(b.measurements(cells=[b.cell(streams=2)]), TH).status == "fail"
    assert gate_lossless(b.measurements(cells=[b.cell(streams=3)]), TH).status == "pass"
    r = gate_lossless(b.measurements(cells=[]), TH)
    assert r.status == "fail" and r.missing


def test_every_cell_must_be_lossless():
    m = b.measurements(cells=[b.cell(ctx=1024), b.cell(ctx=4096, verified=0)])
    assert gate_lossless(m, TH).status == "fail"


# -- accuracy: the bot's own full-vocabulary KL ----------------------------------------------------

@pytest.mark.parametrize("top1, kl, status", [(0.95, 0.05, "pass"), (0.89, 0.05, "fail"), (0.95, 0.11, "fail"),
                                              (0.9, 0.1, "pass")])
def test_accuracy_bars(top1, kl, status):
    r = gate_accuracy(b.measurements(accuracy_summary=b.accuracy(top1=top1, kl=kl)), TH)
    assert r.status == status and "full vocabulary" in r.detail


def test_accuracy_needs_enough_positions_and_fails_closed():
    assert gate_accuracy(b.measurements(accuracy_summary=b.accuracy(positions=100)), TH).status == "fail"
    r = gate_accuracy(b.measurements(accuracy_summary=None), TH)
    assert r.status == "fail" and r.missing == ["top-1 agreement", "KL"]


# -- AR and guards: bot-timed, against bar - noise --------------------------------------------------

def test_ar_gate_allows_the_noise_floor():
    quiet = b.measurements(cells=[b.cell(ar_ratios=[0.975, 0.975, 0.975])], noise_floor=b.noise(0.0))
    noisy = b.measurements(cells=[b.cell(ar_ratios=[0.975, 0.975, 0.975])], noise_floor=b.noise(0.01))
    assert gate_ar(quiet, TH).status == "fail" and gate_ar(noisy, TH).status == "pass"


def test_ar_gate_reads_every_cell_and_fails_closed():
    m = b.measurements(cells=[b.cell(ctx=1024), b.cell(ctx=4096, ar_ratios=[0.9, 0.9, 0.9])])
    r = gate_ar(m, TH)
    assert r.status == "fail" and "prose@4k" in r.detail
    assert gate_ar(b.measurements(cells=[b.cell(ar_ratios=[])]), TH).missing


def test_guards_gate_generation_and_prefill_separately():
    slow_gen = gate_guards(b.measurements(guards=[b.guard(generation=[0.9, 0.9, 0.9])]), TH)[0]
    slow_pre = gate_guards(b.measurements(guards=[b.guard(prefill=[0.9, 0.9, 0.9])]), TH)[0]
    assert slow_gen.status == "fail" and "prefill + 64 tokens 0.900×" in slow_gen.detail
    assert slow_pre.status == "fail" and "prefill 0.900×" in slow_pre.detail
    assert gate_guards(b.measurements(guards=[]), TH)[0].status == "fail"
    assert gate_guards(b.measurements(guards=[b.guard(prefill=[])]), TH)[0].missing


# -- integrity -------------------------------------------------------------------------------------

def test_integrity_fails_on_a_pr_finding_only():
    pr = IntegrityReport(findings=[Finding(ref="head", message="forged")])
    main = IntegrityReport(findings=[Finding(ref="base", message="main broke")])
    assert gate_integrity(b.measurements(integrity=pr)).status == "fail"
    assert gate_integrity(b.measurements(integrity=main)).status == "pass"  # main's side is the verdict's business


def test_aa_measurements_never_reject():
    rng = random.Random(0)
    for _ in range(200):
        noise = rng.uniform(0.002, 0.03)
        ratios = [1 + rng.uniform(-noise, noise) / 1.5 for _ in range(5)]
        m = b.measurements(ratios, cells=[b.cell(ar_ratios=ratios)], noise_floor=b.noise(noise),
                           guards=[b.guard(generation=ratios, prefill=ratios)])
        assert all(r.status == "pass" for r in evaluate(m, TH))


# -- evidence, not a guess -----------------------------------------------------------------------------

def _ar(ratios, **noise):
    return b.measurements([1.0] * len(ratios), cells=[b.cell(speedups=[1.0] * len(ratios), ar_ratios=ratios)],
                          noise_floor=b.noise(0.01, **noise))


def test_a_speed_gate_rejects_only_when_its_interval_lies_below_the_bar():
    """On the 2-vCPU VM one pair of requests strays by ~9 % and a guard's median of four rounds fell on
    its bar: a median below the bar is a REJECT only when its whole interval is below it too."""
    noisy = gate_ar(_ar([0.80, 0.93, 0.95, 1.08]), TH)  # median 0.94 < 0.97, the interval reaches 1.0
    assert noisy.status == "skipped" and noisy.undecided and noisy.detail.startswith("undecided:"), noisy.detail
    assert "95% CI" in noisy.detail
    tight = gate_ar(_ar([0.93, 0.935, 0.94, 0.945]), TH)
    assert tight.status == "fail" and not tight.undecided and "95% CI" in tight.detail
    guard = gate_guards(b.measurements(guards=[b.guard(prefill=[0.80, 0.93, 0.95, 1.08])]), TH)[0]
    assert guard.status == "skipped" and guard.undecided
    guard = gate_guards(b.measurements(guards=[b.guard(prefill=[0.90, 0.91, 0.90, 0.91])]), TH)[0]
    assert guard.status == "fail" and guard.detail.startswith("regression:")


def test_a_small_ar_regression_on_every_cell_fails_on_the_pooled_statistic():
    """Six cells of evidence pooled per round: a 2.5 % AR slowdown everywhere that each cell's own
    (wider) floor allows is still caught by the AR ratio over all cells."""
    ratios = [0.974, 0.975, 0.976, 0.975, 0.974, 0.976]
    cells = [b.cell(corpus=c, ctx=x, speedups=[1.0] * 6, ar_ratios=ratios) for c in ("code", "prose") for x in (1024, 4096, 7936)]
    m = b.measurements([1.0] * 6, cells=cells, noise_floor=b.noise(0.01, ar_decode=0.001))
    r = gate_ar(m, TH)
    assert r.status == "fail" and r.detail.startswith("all cells: AR 0.975× main < 0.98 − noise 0.001"), r.detail
    ok = gate_ar(m.model_copy(update={"noise": b.noise(0.01)}), TH)
    assert ok.status == "pass" and ok.detail.startswith("all cells 0.975×"), ok.detail


def test_one_round_below_the_bar_has_no_interval_and_is_undecided():
    one = gate_ar(_ar([0.5]), TH)
    assert one.status == "skipped" and one.undecided and "95% CI" not in one.detail, one.detail


# -- total time: what a slow minority of rounds cannot hide from ------------------------------------------

def test_a_pr_slow_on_every_third_round_fails_on_total_time_though_its_median_is_fast():
    """The red team's PR: 1.3x on two rounds in three, 0.14x on every third (12 rounds, 2 processes a
    side). The median of the round ratios reads +30 %; main's summed seconds over the PR's read 0.35x."""
    pr = [1 / 1.3, 1 / 1.3, 1 / 0.14] * 4
    m = summarize(b.records(pr, processes=2), noise=b.noise(0.01))
    assert m.speedup_rounds == pytest.approx([1.3, 1.3, 0.14] * 4) and sorted(m.speedup_rounds)[6] == pytest.approx(1.3)
    assert m.dspark_total_ratio == pytest.approx(12 / (8 / 1.3 + 4 / 0.14)) and m.dspark_total_pct == pytest.approx(-65.4, abs=0.1)
    assert m.cells[0].dspark_total_ratio == pytest.approx(m.dspark_total_ratio)
    r = gate_dspark_total(m, TH)
    assert r.status == "fail" and r.detail.startswith(
        "slower than main in total: DSpark by total time 0.346× main < 1 − noise 0.010 − 0.02, median of rounds 1.300×"), r.detail
    lo, hi = total_ci([c.dspark_timed for c in m.cells], StatsSettings())  # every pairing has one slow round in three
    assert lo <= m.dspark_total_ratio <= hi < 0.97 and f"(95% CI {lo:.3f}× … {hi:.3f}×)" in r.detail


def test_an_ar_slowdown_on_a_minority_of_rounds_fails_the_ar_gate_on_total_time():
    ar = [1.0, 1.0, 2.0] * 4  # AR at main's speed two rounds in three, half of it on the third
    m = summarize(b.records([0.8] * 12, ar_pr_seconds=ar, processes=2), noise=b.noise(0.01))
    assert [c.ar_total_ratio for c in m.cells] == pytest.approx([0.75, 0.75]) and m.ar_total_ratio == pytest.approx(0.75)
    r = gate_ar(m, TH)
    assert r.status == "fail" and "all cells: AR by total time 0.750× main < 0.98 − noise 0.010 − 0.02" in r.detail, r.detail
    assert "code@256: AR by total time 0.750×" in r.detail and "all cells: AR 1.000×" not in r.detail
    # rounds on one process a side: the interval resamples rounds, and holds the total
    c = b.cell(speedups=[1.25] * 12, ar_ratios=[1.0, 1.0, 0.5] * 4)
    lo, hi = total_ci([c.ar_timed], StatsSettings())
    assert c.ar_total_ratio == pytest.approx(0.75) and lo < 0.75 < hi < 0.95, (lo, hi)


def test_a_guard_slow_on_a_minority_of_rounds_fails_on_total_time():
    g = b.guard(generation=[1.0, 1.0, 0.4] * 4)
    r = gate_guards(b.measurements(guards=[g]), TH)[0]
    assert r.status == "fail" and "prefill + 64 tokens by total time 0.667× main (bar 0.950×)" in r.detail, r.detail


def test_honest_noise_and_one_stalled_request_pass_on_total_time():
    """Ordinary noise: total time and median agree within it. One PR request stalled by 9 % (the 2-vCPU
    VM's stray pair) moves a total over six rounds by 1.5 %, inside the slack, where the median drops it."""
    rng = random.Random(3)
    for _ in range(50):
        sp = [1.0 + rng.uniform(-0.02, 0.02) for _ in range(6)]
        sp[rng.randrange(6)] /= 1.09
        ar = [1.0 + rng.uniform(-0.01, 0.01) for _ in range(6)]
        ar[rng.randrange(6)] /= 1.09
        m = b.measurements(sp, cells=[b.cell(speedups=sp, ar_ratios=ar)], noise_floor=b.noise(0.01),
                           guards=[b.guard(generation=ar, prefill=ar)])
        assert all(r.status == "pass" for r in evaluate(m, TH)), [r.detail for r in evaluate(m, TH) if r.status != "pass"]


def test_total_time_is_measured_or_the_gates_fail_closed():
    m = b.measurements(cells=[b.cell().model_copy(update={"dspark_timed": [], "ar_timed": []})])
    assert gate_dspark_total(m, TH).missing == ["DSpark total time prose@4k"]
    assert gate_ar(m, TH).missing == ["AR total time prose@4k"]
    g = b.guard().model_copy(update={"prefill_timed": []})
    assert gate_guards(b.measurements(guards=[g]), TH)[0].missing == ["qwen3-0.6b-shape prefill total time"]
