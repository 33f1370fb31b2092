"""What users read, pinned by golden files. Regenerate with UPDATE_GOLDEN=1 (then review the diff)."""

import os
from pathlib import Path

import pytest

from evalbot.report.check_run import check_conclusion
from evalbot.report.scorecard import SCORECARD_MARKER_PREFIX
from evalbot.decide.outcome import ReceiptInfo, ScoreOutcome
from evalbot.report.scorecard import check_report, render_scorecard, scorecard_marker
from evalbot.testing import builders as b
from evalbot.decide.verdict import decide, infrastructure_error, not_evaluated_harness_changed

GOLDEN = Path(__file__).parent / "golden"
HEAD, BASE = "b545b4f2a" + "1" * 31, "f3b2e04" + "2" * 33


def _outcome(verdict, measurements=None, **kw) -> ScoreOutcome:
    fields = dict(
        repo="/srv/dspark", base_ref="main", head_ref="perf/narrow-depth", base_sha=BASE, head_sha=HEAD,
        harness_ref="origin/main", harness_sha=BASE, harness_digest="9d" * 32, profile="gpu", rounds=3, reps=3,
        box="h200-a", pr_number=878, verdict=verdict, measurements=measurements,
        started_at="2026-03-01T10:00:00Z", finished_at="2026-03-01T10:41:07Z",
        receipt=ReceiptInfo(path="/srv/dspark/.evalbot/receipts/x.intoto.json", signed=True, keyid="5e" * 32),
    )
    fields.update(kw)
    return ScoreOutcome(**fields)


def scored() -> ScoreOutcome:
    noise = b.noise(0.006, calibrated=True, ar_decode=0.004, rounds=6, measured_at="2026-02-28T09:00:00Z")
    m = b.measurements(
        [1.097, 1.091, 1.102],
        contexts=[
            b.context(ctx=4096, speedups=[1.097, 1.091, 1.102], ar_ratios=[0.999, 0.998, 1.0], main_dspark=74.82,
                      main_ar=90.23, pr_tau=1.0756, main_tau=1.0756),
            b.context(ctx=16384, speedups=[1.05, 1.06, 1.055], ar_ratios=[1.0, 1.001, 0.999], main_dspark=61.4,
                      main_ar=70.1, pr_tau=1.21, main_tau=1.2),
        ],
        guards=[b.guard("qwen3-8b-shape", decode=[0.999, 1.0, 1.001]), b.guard("qwen3-0.6b-shape")],
        compare=b.compare_line(top1=1.0, kl=0.0, ppl=3.204),
        noise_floor=noise,
    )
    return _outcome(decide(m, b.settings()), m)


def rejected() -> ScoreOutcome:
    m = b.measurements(
        [1.25, 1.3, 1.28],
        contexts=[b.context(speedups=[1.25, 1.3, 1.28], ar_ratios=[0.93, 0.94, 0.935], runs=9, lossless=7)],
        compare=b.compare_line(top1=0.97, kl=0.02),
    )
    return _outcome(decide(m, b.settings()), m, receipt=ReceiptInfo(path="/r.json", signed=False))


def not_evaluated() -> ScoreOutcome:
    v = not_evaluated_harness_changed(["harness/tau_check.py", "harness/HARNESS_PATHS"])
    return _outcome(v, head_ref="wip/`rm -rf`|x")


def infra() -> ScoreOutcome:
    v = infrastructure_error(
        "round 2: tau_check (PR)", "exited with status 1",
        "Traceback (most recent call last):\n```\nRuntimeError: CUDA error: an illegal memory access | x",
    )
    return _outcome(v)


CASES = {"scored": scored, "rejected": rejected, "not_evaluated": not_evaluated, "infra_error": infra}


def check_golden(name: str, text: str) -> None:
    path = GOLDEN / name
    if os.environ.get("UPDATE_GOLDEN") == "1":
        path.write_text(text)
    assert path.exists(), f"{path} missing: run with UPDATE_GOLDEN=1"
    assert text == path.read_text(), f"{name} changed: review, then UPDATE_GOLDEN=1"


@pytest.mark.parametrize("case", sorted(CASES))
def test_scorecard_golden(case):
    check_golden(f"scorecard_{case}.md", render_scorecard(CASES[case]()))


@pytest.mark.parametrize("case", sorted(CASES))
def test_check_golden(case):
    outcome = CASES[case]()
    report = check_report(outcome)
    # The conclusion pinned is the one published (pipeline.publish: report/check_run.py, the merge policy of
    # docs/deploy.md), not the check text's own default: not evaluated and infrastructure errors never pass.
    published = check_conclusion(outcome.verdict.status)
    check_golden(f"check_{case}.md", f"conclusion: {published}\ntitle: {report.title}\n\n{report.summary}")


@pytest.mark.parametrize("case", sorted(CASES))
def test_every_text_starts_with_the_sticky_marker(case):
    text = render_scorecard(CASES[case]())
    first = text.splitlines()[0]
    assert first == scorecard_marker(HEAD) == f"{SCORECARD_MARKER_PREFIX} v=1 head={HEAD} -->"


def test_scorecard_has_every_row_users_had():
    text = render_scorecard(scored())
    rows = [
        "| label |", "| scored at |", "| PR DSpark tok/s |", "| main DSpark tok/s |", "| speedup vs main |",
        "| PR AR tok/s (floor) |", "| main AR tok/s (floor) |", "| AR vs main (floor) |", "| DSpark vs AR |",
        "| mean accept τ |", "| accuracy gate |", "| losslessness gate |", "| mean accept τ floor |",
        "| qwen3-8b-shape guard @16k |", "| qwen3-0.6b-shape guard @16k |", "| PPL PR / main |",
        "| Polaris receipt |", "| PR commit |", "| main commit |", "| harness |", "| rounds |", "| noise floor |",
        "| reason |", "| integrity (anti-forgery) |", "| re-verification with main's build |",
    ]
    for row in rows:
        assert row in text, row
    assert "ceiling 7" in text and "95% CI" in text and "`eval-dspark:M` `eval:M`" in text
    assert "Measured on box `h200-a`" in text


def test_rejected_scorecard_names_the_failures():
    text = render_scorecard(rejected())
    assert "`eval-dspark:REJECT`" in text
    assert "❌ prose@4k: 2 of 9 runs diverge from AR" in text
    assert "collected, not signed (no key configured)" in text


def test_untrusted_text_cannot_break_out():
    text = render_scorecard(not_evaluated())
    assert "`wip/'rm -rf'\\|x`" in text  # no backtick escape, no table break
    infra_text = render_scorecard(infra())
    assert infra_text.count("```") == 2  # only our own fence
    assert "illegal memory access \\| x" not in infra_text  # inside the code block, left verbatim
