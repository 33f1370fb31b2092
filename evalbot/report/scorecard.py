"""The sticky scorecard, the check run's title and summary, and the calibration report, for an outcome.

The templates hold every word (evalbot/report/templates/); this module picks the template and
prepares the values it shows. Each scorecard starts with a hidden marker, so the forge finds the one
sticky comment to edit in place.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from evalbot.decide.measurements import CellSummary, format_ctx
from evalbot.decide.noise import NoiseFloor
from evalbot.decide.outcome import CheckReport, ScoreOutcome
from evalbot.decide.stats import median
from evalbot.report.render import pct, ratio, render, text

SCORECARD_MARKER_PREFIX = "<!-- dspark-evalbot:scorecard"
SCORECARD_VERSION = 2

GATE_ROW_TITLES = {
    "accuracy": "accuracy gate",
    "lossless": "losslessness gate",
    "ar": "AR decode gate",
    "integrity": "integrity (what the PR's processes sent)",
}
STOP_TEXT = {
    "decided": "decided",
    "budget": "the time budget was spent",
    "corpus": "no unseen windows were left",
    "max rounds": "the configured number of rounds was reached",
    "failure": "a process failed",
}


def scorecard_marker(head_sha: str) -> str:
    return f"{SCORECARD_MARKER_PREFIX} v={SCORECARD_VERSION} head={head_sha} -->"


def _join(cells: list[CellSummary], value: Callable[[CellSummary], str]) -> str:
    if not cells:
        return "—"
    if len(cells) == 1:
        return value(cells[0])
    return " · ".join(f"{c.name}: {value(c)}" for c in cells)


def _num(x: float | None, digits: int = 1) -> str:
    return "—" if x is None else f"{x:,.{digits}f}"


def noise_text(noise: NoiseFloor, calibrated_now: bool = False) -> str:
    core = (
        f"±{noise.dspark_decode * 100:.2f}% DSpark, ±{noise.ar_decode * 100:.2f}% AR (±{noise.ar_cell * 100:.2f}% one cell), "
        f"±{noise.guard_decode * 100:.2f}% / ±{noise.guard_prefill * 100:.2f}% guard generation / prefill"
    )
    if noise.calibrated:
        when = "calibrated by this scoring first" if calibrated_now else f"calibrated {noise.measured_at}"
        k = noise.campaigns
        return (f"{core} (A/A on `{noise.box}`, engine `{noise.engine[:12]}`: {k} campaign{'s' if k != 1 else ''} of fresh "
                f"processes, {noise.rounds} rounds; {when})")
    return f"{core} (default: box, profile and engine version not calibrated; run `evalbot calibrate`)"


def _context(outcome: ScoreOutcome) -> dict[str, Any]:
    verdict = outcome.verdict
    meas = outcome.measurements
    ctx: dict[str, Any] = {
        "outcome": outcome, "verdict": verdict, "meas": meas, "sp": verdict.speedup,
        "receipt_status": outcome.receipt.status_text if outcome.receipt else "not written",
        "scorecard_marker": scorecard_marker,
    }
    if meas is None:
        return ctx
    cells = meas.cells

    def ratio_of(ratios: list[float]) -> str:
        return pct((median(ratios) - 1) * 100) if ratios else "—"

    def dspark_vs_ar(c: CellSummary) -> str:
        pr = c.pr_dspark_tps / c.pr_ar_tps if c.pr_dspark_tps and c.pr_ar_tps else None
        main = c.main_dspark_tps / c.main_ar_tps if c.main_dspark_tps and c.main_ar_tps else None
        return f"{ratio(pr)} (main {ratio(main)})"

    def reported(c: CellSummary) -> str:
        return (f"DSpark {_num(c.pr_reported_dspark_tps)} (main {_num(c.main_reported_dspark_tps)}), "
                f"AR {_num(c.pr_reported_ar_tps)} (main {_num(c.main_reported_ar_tps)}) tok/s decode; "
                f"τ {_num(c.pr_tau, 2)} (main {_num(c.main_tau, 2)}, ceiling {c.block_size or '—'})")

    def ar_stream(c: CellSummary) -> str:
        if not c.ar_compared:
            return "not compared"
        if c.ar_equal == c.ar_compared:
            return f"identical to main's ({c.ar_compared} windows)"
        return f"{c.ar_compared - c.ar_equal} of {c.ar_compared} differ from main's (first at token {c.ar_first_divergence})"

    a = meas.accuracy
    accuracy_row = "not measured" if a is None else (
        f"{a.positions} positions: top-1 {a.top1:.3f}; KL(main‖PR) mean {a.kl_mean:.4f}, p50 "
        f"{a.kl_percentiles.get('p50', 0):.4f}, p90 {a.kl_percentiles.get('p90', 0):.4f}, p99 "
        f"{a.kl_percentiles.get('p99', 0):.4f}, max {a.kl_max:.4f} (full vocabulary)")
    pairs = sorted({(r.main_process, r.pr_process) for r in meas.round_summaries})
    stop = meas.stop
    stop_row = (f"{meas.rounds} rounds over {len(pairs)} of {meas.processes_per_ref ** 2} process pairings "
                f"({meas.processes_per_ref} processes per ref); stopped: {STOP_TEXT.get(stop.reason) or text(stop.reason, 80)}"
                f"{' — ' + text(stop.detail, 600) if stop and stop.detail else ''}; {meas.wall_s:.0f} s" if stop else f"{meas.rounds} rounds")
    # stop.detail may quote what a PR's process answered: through `text`, like every untrusted value
    drawn: dict[int, set[int]] = {}
    for x in [*cells, *meas.guards]:
        drawn.setdefault(x.ctx, set()).update(x.lengths)
    lengths_row = ", ".join(f"{format_ctx(n)}: {' / '.join(f'{v:,}' for v in sorted(vs))}" for n, vs in sorted(drawn.items()) if vs)
    ctx.update(
        cells=cells,
        lengths_row=lengths_row,
        cells_row=", ".join(c.name for c in cells) + (f" × {cells[0].new_tokens} new tokens" if cells else ""),
        per_cell=lambda field: _join(cells, lambda c: _num(getattr(c, field))),
        ar_vs_main=_join(cells, lambda c: ratio_of(c.ar_ratios)),
        dspark_vs_ar=_join(cells, dspark_vs_ar),
        reported_row=_join(cells, reported),
        ar_stream_row=_join(cells, ar_stream),
        accuracy_row=accuracy_row,
        stop_row=stop_row,
        gate_title=lambda g: GATE_ROW_TITLES.get(g.gate, g.title),
        noise_row=noise_text(meas.noise, outcome.calibrated_now),
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
