"""Gates: pure functions from `Measurements` and `Thresholds` to pass / fail / skipped.

Any failed gate makes the verdict REJECT. Every gate fails closed: a metric that was not measured
is a failure naming what is missing, never a pass. Throughput gates compare the median per-round
PR/main ratio with `bar - noise` (the box's calibrated A/A noise), so run-to-run noise alone
cannot reject a PR.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from evalbot.decide.measurements import Measurements, format_ctx
from evalbot.decide.stats import median
from evalbot.settings import Thresholds

GateStatus = Literal["pass", "fail", "skipped"]


class GateResult(BaseModel):
    gate: str  # id: lossless, tau, accuracy, ar, guard:<name>, integrity, reverify
    title: str
    status: GateStatus
    detail: str
    missing: list[str] = Field(default_factory=list)


def _missing(gate: str, title: str, what: list[str]) -> GateResult:
    return GateResult(gate=gate, title=title, status="fail", detail=f"not measured: {', '.join(what)}", missing=what)


def gate_lossless(m: Measurements, th: Thresholds) -> GateResult:
    title = "losslessness"
    if not m.contexts:
        return _missing("lossless", title, ["DSpark runs"])
    problems, total = [], 0
    for c in m.contexts:
        total += c.pr_runs
        if c.pr_runs < th.min_lossless_runs:
            problems.append(f"{c.name}: only {c.pr_runs} runs (need {th.min_lossless_runs})")
        elif c.pr_lossless_runs != c.pr_runs:
            problems.append(f"{c.name}: {c.pr_runs - c.pr_lossless_runs} of {c.pr_runs} runs diverge from AR")
    if problems:
        return GateResult(gate="lossless", title=title, status="fail", detail="; ".join(problems))
    detail = f"DSpark matches the AR reference token-for-token in all {total} runs, compared by the bot"
    main_total = sum(c.main_runs for c in m.contexts)
    main_lossless = sum(c.main_lossless_runs for c in m.contexts)
    if main_lossless != main_total:  # worth knowing: main itself diverges
        detail += f" (note: main diverged in {main_total - main_lossless} of its {main_total} runs)"
    return GateResult(gate="lossless", title=title, status="pass", detail=detail)


def gate_tau(m: Measurements, th: Thresholds) -> GateResult:
    title = "tau floor"
    if not m.contexts:
        return _missing("tau", title, ["tau"])
    missing = [c.name for c in m.contexts if c.pr_tau is None or c.main_tau is None]
    if missing:
        return _missing("tau", title, [f"tau {n}" for n in missing])
    problems, shown = [], []
    for c in m.contexts:
        assert c.pr_tau is not None and c.main_tau is not None
        shown.append(f"{c.name} {c.pr_tau:.4f} vs main {c.main_tau:.4f}")
        if c.pr_tau < th.tau_ratio_min * c.main_tau:
            problems.append(f"{c.name}: τ {c.pr_tau:.4f} < {th.tau_ratio_min:g} × main {c.main_tau:.4f}")
    if problems:
        return GateResult(gate="tau", title=title, status="fail", detail="; ".join(problems))
    return GateResult(gate="tau", title=title, status="pass", detail=f"{'; '.join(shown)} (bar ≥ {th.tau_ratio_min:.0%})")


def gate_accuracy(m: Measurements, th: Thresholds) -> GateResult:
    title = "accuracy"
    c = m.compare
    if c is None:
        return _missing("accuracy", title, ["top-1 agreement", "KL"])
    bars = f"top1={c.top1:.3f} (bar ≥ {th.top1_min:g}) · KL={c.kl:.4f} (bar ≤ {th.kl_max:g})"
    problems = []
    if c.positions < th.min_compare_positions:
        problems.append(f"only {c.positions} positions compared (need {th.min_compare_positions})")
    if c.top1 < th.top1_min:
        problems.append(f"top1 {c.top1:.3f} < {th.top1_min:g}")
    if c.kl > th.kl_max:
        problems.append(f"KL {c.kl:.4f} > {th.kl_max:g}")
    if problems:
        return GateResult(gate="accuracy", title=title, status="fail", detail=f"{'; '.join(problems)} ({bars})")
    return GateResult(gate="accuracy", title=title, status="pass", detail=bars)


def gate_ar(m: Measurements, th: Thresholds) -> GateResult:
    title = "AR decode"
    if not m.contexts:
        return _missing("ar", title, ["AR tok/s"])
    missing = [c.name for c in m.contexts if not c.ar_ratios]
    if missing:
        return _missing("ar", title, [f"AR tok/s {n}" for n in missing])
    bar = th.ar_ratio_min - m.noise.ar_decode
    problems, shown = [], []
    for c in m.contexts:
        r = median(c.ar_ratios)
        shown.append(f"{c.name} {r:.3f}×")
        if r < bar:
            problems.append(f"{c.name}: AR {r:.3f}× main < {th.ar_ratio_min:g} − noise {m.noise.ar_decode:.3f}")
    if problems:
        return GateResult(gate="ar", title=title, status="fail", detail="; ".join(problems))
    return GateResult(gate="ar", title=title, status="pass", detail=f"{', '.join(shown)} (bar ≥ {bar:.3f}×)")


def gate_guards(m: Measurements, th: Thresholds) -> list[GateResult]:
    if not m.guards:
        return [_missing("guard", "guards", ["guard models"])]
    out = []
    decode_bar = th.guard_decode_ratio_min - m.noise.guard_decode
    prefill_bar = th.guard_prefill_ratio_min - m.noise.guard_prefill
    for g in m.guards:
        gate, title = f"guard:{g.guard}", f"{g.guard} guard @{format_ctx(g.ctx)}"
        missing = [w for w, r in (("decode", g.decode_ratios), ("prefill", g.prefill_ratios)) if not r]
        if missing:
            out.append(_missing(gate, title, [f"{g.guard} {w}" for w in missing]))
            continue
        dec, pre = median(g.decode_ratios), median(g.prefill_ratios)
        problems = []
        if dec < decode_bar:
            problems.append(f"decode {dec:.3f}× main (bar {decode_bar:.3f}×)")
        if pre < prefill_bar:
            problems.append(f"prefill {pre:.3f}× main (bar {prefill_bar:.3f}×)")
        shown = f"decode {g.pr_decode_tps:.1f} tok/s ({dec:.3f}×) · prefill {g.pr_prefill_tps:.0f} pp ({pre:.3f}×)"
        if problems:
            out.append(GateResult(gate=gate, title=title, status="fail", detail=f"regression: {'; '.join(problems)}"))
        else:
            out.append(GateResult(gate=gate, title=title, status="pass", detail=f"no regression — {shown}"))
    return out


def gate_integrity(m: Measurements) -> GateResult:
    findings = m.integrity.of("head")
    if findings:
        msgs = sorted({f.message for f in findings})
        return GateResult(gate="integrity", title="integrity", status="fail", detail="; ".join(msgs))
    w = m.integrity.wallclock
    detail = "token streams, run counts and timings consistent"
    if w.evaluated:
        detail += f"; wall clock confirms the claimed saving ({w.wall_saving_s:.2f} s of {w.claimed_saving_s:.2f} s)"
    return GateResult(gate="integrity", title="integrity", status="pass", detail=detail)


def gate_reverify(m: Measurements) -> GateResult:
    r = m.reverify
    title = "re-verification with main's build"
    if r.status == "not_run":
        return GateResult(gate="reverify", title=title, status="skipped", detail="not run (no reverifier installed)")
    if r.status == "passed":
        return GateResult(gate="reverify", title=title, status="pass",
                          detail=f"{r.streams_checked} streams are main's greedy continuation")
    detail = "; ".join(r.failures) if r.failures else (r.error or "failed")
    return GateResult(gate="reverify", title=title, status="fail", detail=detail)


def evaluate(m: Measurements, th: Thresholds) -> list[GateResult]:
    """Every gate, in the order the scorecard shows them."""
    return [
        gate_accuracy(m, th),
        gate_lossless(m, th),
        gate_tau(m, th),
        gate_ar(m, th),
        *gate_guards(m, th),
        gate_integrity(m),
        gate_reverify(m),
    ]
