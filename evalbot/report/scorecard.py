"""The sticky scorecard, the check run's title and summary, and the calibration report, for an outcome.

The templates hold every word (evalbot/report/templates/); this module picks the template and
prepares the values it shows. Each scorecard starts with a hidden marker, so the forge finds the one
sticky comment to edit in place.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalbot.decide.gates import GateResult
from evalbot.decide.measurements import ContextSummary, format_ctx
from evalbot.decide.noise import NoiseFloor
from evalbot.decide.outcome import CheckReport, ScoreOutcome
from evalbot.decide.stats import median
from evalbot.report.render import pct, ratio, render

SCORECARD_MARKER_PREFIX = "<!-- dspark-evalbot:scorecard"
SCORECARD_VERSION = 1

GATE_ROW_TITLES = {
    "accuracy": "accuracy gate",
    "lossless": "losslessness gate",
    "tau": "mean accept τ floor",
    "ar": "AR decode gate",
    "integrity": "integrity (anti-forgery)",
    "reverify": "re-verification with main's build",
}


def scorecard_marker(head_sha: str) -> str:
    return f"{SCORECARD_MARKER_PREFIX} v={SCORECARD_VERSION} head={head_sha} -->"


# ---------------------------------------------------------------------------------------------
# The scorecard's view of an outcome


def _join_contexts(contexts: list[ContextSummary], value: Callable[[ContextSummary], str]) -> str:
    if len(contexts) == 1:
        return value(contexts[0])
    return " · ".join(f"{c.name}: {value(c)}" for c in contexts)


def _num(x: float | None, digits: int = 2) -> str:
    return "—" if x is None else f"{x:.{digits}f}"


def noise_text(noise: NoiseFloor) -> str:
    core = (
        f"±{noise.dspark_decode * 100:.1f}% DSpark decode, ±{noise.ar_decode * 100:.1f}% AR, "
        f"±{noise.guard_decode * 100:.1f}% / ±{noise.guard_prefill * 100:.1f}% guard decode / prefill"
    )
    if noise.calibrated:
        return f"{core} (A/A-calibrated on `{noise.box}`, {noise.rounds} rounds, {noise.measured_at})"
    return f"{core} (default: this box is not calibrated; run `evalbot calibrate`)"


def _context(outcome: ScoreOutcome) -> dict[str, Any]:
    verdict = outcome.verdict
    meas = outcome.measurements
    ctx: dict[str, Any] = {
        "outcome": outcome,
        "verdict": verdict,
        "meas": meas,
        "sp": verdict.speedup,
        "receipt_status": outcome.receipt.status_text if outcome.receipt else "not written",
        "scorecard_marker": scorecard_marker,
    }
    if meas is None:
        return ctx
    contexts = meas.contexts

    def per_context(field: str) -> str:
        return _join_contexts(contexts, lambda c: _num(getattr(c, field)))

    def ar_vs(c: ContextSummary) -> str:
        return pct((median(c.ar_ratios) - 1) * 100) if c.ar_ratios else "—"

    def dspark_vs_ar(c: ContextSummary) -> str:
        pr = c.pr_dspark_tps / c.pr_ar_tps if c.pr_dspark_tps and c.pr_ar_tps else None
        main = c.main_dspark_tps / c.main_ar_tps if c.main_dspark_tps and c.main_ar_tps else None
        return f"{ratio(pr)} (main {ratio(main)})"

    def tau(c: ContextSummary) -> str:
        return f"{_num(c.pr_tau, 3)} (main {_num(c.main_tau, 3)}, ceiling {c.block_size or '—'})"

    def ar_stream(c: ContextSummary) -> str:
        if c.ar_matches_main is None:
            return "not compared"
        if c.ar_matches_main:
            return "identical to main's"
        return f"differs from main's at token {c.ar_first_divergence}"

    def gate_title(g: GateResult) -> str:
        return GATE_ROW_TITLES.get(g.gate, g.title)

    prompts = sorted({c.prompt for c in contexts})
    scored_at = (
        f"ctx={', '.join(format_ctx(c) for c in sorted({c.ctx for c in contexts}))} "
        f"(prompt{'s' if len(prompts) != 1 else ''} {', '.join(prompts)})"
        if contexts else "nothing measured"
    )
    orders = ", ".join("main→PR" if r % 2 == 0 else "PR→main" for r in range(outcome.rounds))
    ctx.update(
        contexts=contexts,
        scored_at=scored_at,
        per_context=per_context,
        ar_vs_main=_join_contexts(contexts, ar_vs) if contexts else "—",
        dspark_vs_ar=_join_contexts(contexts, dspark_vs_ar) if contexts else "—",
        tau_row=_join_contexts(contexts, tau) if contexts else "—",
        ar_stream_row=_join_contexts(contexts, ar_stream) if contexts else "—",
        gate_title=gate_title,
        noise_row=noise_text(meas.noise),
        orders=orders,
        format_ctx=format_ctx,
    )
    return ctx


def render_scorecard(outcome: ScoreOutcome, templates: Path | None = None) -> str:
    """The sticky comment body (marker first) for any outcome."""
    name = {
        "not_evaluated": "scorecard_not_evaluated.md.j2",
        "infra_error": "scorecard_infra_error.md.j2",
    }.get(outcome.verdict.status, "scorecard.md.j2")
    return render(name, templates=templates, **_context(outcome))


def check_report(outcome: ScoreOutcome, templates: Path | None = None) -> CheckReport:
    status = outcome.verdict.status
    conclusion = {"scored": "success", "rejected": "failure"}.get(status, "neutral")
    ctx = _context(outcome)
    return CheckReport(
        conclusion=conclusion,  # type: ignore[arg-type]
        title=render("check_title.txt.j2", templates=templates, **ctx).strip(),
        summary=render("check_summary.md.j2", templates=templates, **ctx),
    )


def render_calibration(floor: NoiseFloor, path: Path, templates: Path | None = None) -> str:
    return render("calibration.md.j2", templates=templates, floor=floor, path=path)
