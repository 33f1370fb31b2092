"""Render what users read (sticky scorecard, check summary/title, calibration report) from templates/.

The templates hold every word; this module only picks the template and supplies small
formatting helpers. Untrusted text (branch names, stderr of PR code) is neutralised by the
`code`, `cell` and `fence` filters.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

from evalbot.forge.base import SCORECARD_MARKER_PREFIX
from evalbot.gates import GateResult
from evalbot.measurements import ContextSummary, format_ctx
from evalbot.noise import NoiseFloor
from evalbot.outcome import CheckReport, ScoreOutcome
from evalbot.stats import median

SCORECARD_VERSION = 1
DEFAULT_TEMPLATES = Path(__file__).resolve().parent.parent / "templates"

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


def templates_dir(configured: Path | None = None) -> Path:
    if configured is not None:
        return configured
    env = os.environ.get("EVALBOT_TEMPLATES_DIR")
    return Path(env) if env else DEFAULT_TEMPLATES


# ---------------------------------------------------------------------------------------------
# Filters


def short(sha: str, n: int = 12) -> str:
    return (sha or "")[:n] or "—"


def pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.1f}%"


def ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}×"


def cell(text: Any) -> str:
    """Keep a value inside one markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def fence(text: str) -> str:
    """Keep untrusted text inside a fenced code block."""
    return str(text).replace("```", "'''")


def code(text: Any, limit: int = 80) -> str:
    value = " ".join(str(text).split()).replace("`", "'")
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    return f"`{value}`"


@lru_cache(maxsize=4)
def _environment(root: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(root),
        undefined=jinja2.StrictUndefined,
        autoescape=False,  # markdown, not HTML
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(short=short, pct=pct, ratio=ratio, cell=cell, fence=fence, code=code)
    env.globals.update(scorecard_marker=scorecard_marker)
    return env


def render(name: str, templates: Path | None = None, **context: Any) -> str:
    env = _environment(str(templates_dir(templates)))
    try:
        template = env.get_template(name)
    except jinja2.TemplateNotFound:
        raise FileNotFoundError(f"template {name} not found in {templates_dir(templates)}") from None
    return template.render(**context).strip() + "\n"


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
    return render(name, templates, **_context(outcome))


def check_report(outcome: ScoreOutcome, templates: Path | None = None) -> CheckReport:
    status = outcome.verdict.status
    conclusion = {"scored": "success", "rejected": "failure"}.get(status, "neutral")
    ctx = _context(outcome)
    return CheckReport(
        conclusion=conclusion,  # type: ignore[arg-type]
        title=render("check_title.txt.j2", templates, **ctx).strip(),
        summary=render("check_summary.md.j2", templates, **ctx),
    )


def render_calibration(floor: NoiseFloor, path: Path, templates: Path | None = None) -> str:
    return render("calibration.md.j2", templates, floor=floor, path=path)
