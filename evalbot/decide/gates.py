"""Gates: pure functions from `Measurements` and `Thresholds` to pass / fail.

Any failed gate makes the verdict REJECT. Every gate fails closed: a metric that was not measured is
a failure naming what is missing, never a pass. Every figure a gate reads was measured from outside
the PR's process: speeds by the bot's clock (end to end, median of the per-round PR/main ratios,
compared with `bar - noise`, so the box's A/A noise alone cannot reject), losslessness by main's
engine re-verifying every DSpark stream, accuracy from both refs' full-vocabulary log-probs by the
bot. What a process says about its own speed or tau is shown on the scorecard and gates nothing.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from evalbot.decide.measurements import Measurements, format_ctx
from evalbot.decide.stats import median
from evalbot.settings import Thresholds

GateStatus = Literal["pass", "fail", "skipped"]


class GateResult(BaseModel):
    gate: str  # id: accuracy, lossless, ar, guard:<name>, integrity
    title: str
    status: GateStatus
    detail: str
    missing: list[str] = Field(default_factory=list)


SHORT_OF_STREAMS = "verified DSpark streams"  # lossless: fewer streams verified than the bar asks for


def _missing(gate: str, title: str, what: list[str]) -> GateResult:
    return GateResult(gate=gate, title=title, status="fail", detail=f"not measured: {', '.join(what)}", missing=what)


def gate_lossless(m: Measurements, th: Thresholds) -> GateResult:
    title = "losslessness"
    if not m.cells:
        return _missing("lossless", title, ["DSpark streams"])
    problems, short, total, ties = [], [], 0, 0
    for c in m.cells:
        total += c.pr_streams
        ties += c.pr_near_ties
        if c.pr_verified != c.pr_streams:  # one wrong stream is conclusive, however few were checked
            problems.append(f"{c.name}: {c.pr_streams - c.pr_verified} of {c.pr_streams} DSpark streams are not "
                            "main's greedy continuation")
        elif c.pr_streams < th.min_verified_streams:
            short.append(f"{c.name}: only {c.pr_streams} DSpark streams verified (need {th.min_verified_streams})")
    if problems:
        return GateResult(gate="lossless", title=title, status="fail", detail="; ".join(problems + short))
    if short:  # too little evidence is not evidence of a lossy decoder: missing, not failed
        return GateResult(gate="lossless", title=title, status="fail", detail="; ".join(short),
                          missing=[SHORT_OF_STREAMS])
    detail = (f"all {total} DSpark streams are main's greedy continuation, token by token, teacher-forced by main's "
              "engine in main's own process")
    if ties:
        detail += f" ({ties} token{'s' if ties != 1 else ''} at near-ties within {m.verify_tolerance:g} logits)"
    return GateResult(gate="lossless", title=title, status="pass", detail=detail)


def gate_accuracy(m: Measurements, th: Thresholds) -> GateResult:
    title = "accuracy"
    a = m.accuracy
    if a is None:
        return _missing("accuracy", title, ["top-1 agreement", "KL"])
    bars = (f"top1={a.top1:.3f} (bar ≥ {th.top1_min:g}) · KL={a.kl_mean:.4f} over the full vocabulary "
            f"(bar ≤ {th.kl_max:g}; p90 {a.kl_percentiles.get('p90', 0):.4f}, max {a.kl_max:.4f})")
    problems = []
    if a.positions < th.min_compare_positions:
        problems.append(f"only {a.positions} positions compared (need {th.min_compare_positions})")
    if a.top1 < th.top1_min:
        problems.append(f"top1 {a.top1:.3f} < {th.top1_min:g}")
    if a.kl_mean > th.kl_max:
        problems.append(f"KL {a.kl_mean:.4f} > {th.kl_max:g}")
    if problems:
        return GateResult(gate="accuracy", title=title, status="fail", detail=f"{'; '.join(problems)} ({bars})")
    return GateResult(gate="accuracy", title=title, status="pass", detail=bars)


def gate_ar(m: Measurements, th: Thresholds) -> GateResult:
    title = "AR decode"
    if not m.cells:
        return _missing("ar", title, ["AR tok/s"])
    missing = [c.name for c in m.cells if not c.ar_ratios]
    if missing:
        return _missing("ar", title, [f"AR tok/s {n}" for n in missing])
    bar = th.ar_ratio_min - m.noise.ar_decode
    problems, shown = [], []
    for c in m.cells:
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
    gen_bar = th.guard_decode_ratio_min - m.noise.guard_decode
    pre_bar = th.guard_prefill_ratio_min - m.noise.guard_prefill
    for g in m.guards:
        gate, title = f"guard:{g.guard}", f"{g.guard} guard @{format_ctx(g.ctx)}"
        missing = [w for w, r in (("generation", g.generation_ratios), ("prefill", g.prefill_ratios)) if not r]
        if missing:
            out.append(_missing(gate, title, [f"{g.guard} {w}" for w in missing]))
            continue
        gen, pre = median(g.generation_ratios), median(g.prefill_ratios)
        problems = []
        if gen < gen_bar:
            problems.append(f"prefill + {g.new_tokens} tokens {gen:.3f}× main (bar {gen_bar:.3f}×)")
        if pre < pre_bar:
            problems.append(f"prefill {pre:.3f}× main (bar {pre_bar:.3f}×)")
        shown = (f"prefill + {g.new_tokens} tokens {g.pr_generation_tps or 0:.1f} tok/s ({gen:.3f}×) · "
                 f"prefill {g.pr_prefill_tps or 0:.0f} tok/s ({pre:.3f}×)")
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
    return GateResult(gate="integrity", title="integrity", status="pass",
                      detail="every answer well-formed, of the length asked for, no faster than it could be, "
                             "no report the bot's clock contradicts")


def evaluate(m: Measurements, th: Thresholds) -> list[GateResult]:
    """Every gate, in the order the scorecard shows them."""
    return [gate_accuracy(m, th), gate_lossless(m, th), gate_ar(m, th), *gate_guards(m, th), gate_integrity(m)]
