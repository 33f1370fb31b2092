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
        harness_ref="origin/main", harness_sha=BASE, harness_digest="9d" * 32, candidate_sha="c4" * 20,
        candidate_tree="7e" * 20, engine_digest="e1" * 32, profile="gpu", rounds=6, box="h200-a", pr_number=878,
        verdict=verdict, measurements=measurements,
        started_at="2026-03-01T10:00:00Z", finished_at="2026-03-01T10:41:07Z",
        receipt=ReceiptInfo(path="/srv/dspark/.evalbot/receipts/x.intoto.json", signed=True, keyid="5e" * 32),
    )
    fields.update(kw)
    return ScoreOutcome(**fields)


def scored() -> ScoreOutcome:
    noise = b.noise(0.006, calibrated=True, ar_decode=0.004, rounds=6, measured_at="2026-02-28T09:00:00Z")
    speedups = [1.097, 1.091, 1.102, 1.088, 1.095, 1.099]
    m = b.measurements(
        speedups, groups=[0, 1, 2, 3, 0, 1], processes_per_ref=2,
        cells=[
            b.cell(corpus="code", ctx=4096, speedups=speedups, ar_ratios=[0.999, 0.998, 1.0, 1.0, 1.001, 0.999],
                   main_dspark=1340.2, main_ar=1133.0, pr_tau=2.41, main_tau=2.41),
            b.cell(corpus="prose", ctx=4096, speedups=[1.05, 1.06, 1.055, 1.052, 1.058, 1.054],
                   main_dspark=1198.5, main_ar=1131.2, pr_tau=1.45, main_tau=1.45),
        ],
        guards=[b.guard("qwen3-0.6b-shape", generation=[0.999, 1.0, 1.001]), b.guard("llama-3.2-1b-shape")],
        accuracy_summary=b.accuracy(top1=1.0, kl=0.0, ppl=3.204),
        noise_floor=noise,
    )
    for x in m.cells:  # the lengths this campaign drew from its seed (measure.plan.drawn_lengths)
        x.lengths = [3977]
    for x in m.guards:
        x.lengths = [15688]
    return _outcome(decide(m, b.settings()), m)


def rejected() -> ScoreOutcome:
    speedups = [1.25, 1.3, 1.28]
    m = b.measurements(
        speedups,
        cells=[b.cell(speedups=speedups, ar_ratios=[0.93, 0.94, 0.935], streams=9, verified=7)],
        accuracy_summary=b.accuracy(top1=0.97, kl=0.02),
    )
    return _outcome(decide(m, b.settings()), m, receipt=ReceiptInfo(path="/r.json", signed=False))


def not_evaluated() -> ScoreOutcome:
    v = not_evaluated_harness_changed(["harness/serve.py", "harness/HARNESS_PATHS"])
    return _outcome(v, head_ref="wip/`rm -rf`|x")


def infra() -> ScoreOutcome:
    v = infrastructure_error(
        "start-up (main-2)", "the harness server did not start: exited with status 1",
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
    assert first == scorecard_marker(HEAD) == f"{SCORECARD_MARKER_PREFIX} v=2 head={HEAD} -->"


def test_scorecard_has_every_row_users_had():
    text = render_scorecard(scored())
    rows = [
        "| label |", "| measured |", "| cells |", "| profile |", "| PR DSpark tok/s |", "| main DSpark tok/s |",
        "| speedup vs main |", "| PR AR tok/s (floor) |", "| main AR tok/s (floor) |", "| AR vs main (floor) |",
        "| DSpark vs AR |", "| reported by the processes |", "| own-clock check |", "| accuracy, per position |",
        "| PPL PR / main |", "| rounds |", "| windows |", "| noise floor |", "| harness |", "| Polaris receipt |",
        "| PR commit |", "| main commit |", "| reason |",
    ]
    for row in rows:
        assert row in text, row
    assert "95% CI" in text and "`eval-dspark:M`" in text
    assert "code@4k" in text and "prose@4k" in text
    assert "Measured on box `h200-a`" in text or "box `h200-a`" in text


def test_rejected_scorecard_names_the_failures():
    text = render_scorecard(rejected())
    assert "`eval-dspark:REJECT`" in text
    assert "2 of 9" in text  # the streams main's engine did not confirm
    assert "collected, not signed (no key configured)" in text


def test_untrusted_text_cannot_break_out():
    text = render_scorecard(not_evaluated())
    assert "`wip/'rm -rf'\\|x`" in text  # no backtick escape, no table break
    infra_text = render_scorecard(infra())
    assert infra_text.count("```") == 2  # only our own fence
    assert "illegal memory access \\| x" not in infra_text  # inside the code block, left verbatim
