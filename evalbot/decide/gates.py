"""Gates: pure functions from `Measurements` and `Thresholds` to pass / fail.

Any failed gate makes the verdict REJECT. Every gate fails closed: a metric that was not measured is
a failure naming what is missing, never a pass. Every figure a gate reads was measured from outside
the PR's process: speeds by the bot's clock (end to end, median of the per-round PR/main ratios,
compared with `bar - noise`, so the box's A/A noise alone cannot reject), losslessness by main's
engine re-verifying every DSpark stream, accuracy from both refs' full-vocabulary log-probs by the
bot. What a process says about its own speed or tau is shown on the scorecard and gates nothing.

A speed gate REJECTs only on evidence: its median is below the bar *and* its confidence interval
(the same crossed bootstrap over both refs' processes as the DSpark speedup's) lies wholly below it.
A median below the bar whose interval still reaches above it is *undecided*: no REJECT, no tier (on
a 2-vCPU VM one pair of requests strays by ~9 %, and a median of four rounds fell on the bar).
"""

from __future__ import annotations

from typing import Literal

import numpy as np
from pydantic import BaseModel, Field

from evalbot.decide.accuracy import LSE_TOLERANCE
from evalbot.decide.measurements import Measurements, Timed, format_ctx, total_ratio
from evalbot.decide.stats import crossed_bootstrap_ci, geomean, median, pigeonhole_weights
from evalbot.settings import StatsSettings, Thresholds

GateStatus = Literal["pass", "fail", "skipped"]


class GateResult(BaseModel):
    gate: str  # id: accuracy, lossless, dspark, ar, guard:<name>, integrity
    title: str
    status: GateStatus
    detail: str
    missing: list[str] = Field(default_factory=list)
    undecided: bool = False  # status "skipped": the evidence is too thin either way (no REJECT, no tier)


SHORT_OF_STREAMS = "verified DSpark streams"  # lossless: fewer streams verified than the bar asks for


def _missing(gate: str, title: str, what: list[str]) -> GateResult:
    return GateResult(gate=gate, title=title, status="fail", detail=f"not measured: {', '.join(what)}", missing=what)


def _near_tie_bar(tokens: int, share: float, allowance: int) -> float:
    """How many near-tie substitutions `tokens` verified tokens may carry: the share, never fewer than the
    allowance (a handful of tokens cannot tell a rounding difference from a relaxed acceptance rule)."""
    return max(float(allowance), share * tokens)


def near_tie_problems(m: Measurements, th: Thresholds) -> list[str]:
    """Near-tie substitutions beyond the bar, over all cells and per cell. Each is a PR token that is not
    main's argmax but within the verify tolerance: honest rounding makes a few (0.16 % of tokens for a
    kernel change on the H200), a decoder that accepts drafts close to the top makes them at the rate
    ties occur (5-28 % of positions within 0.5 logits on the bundled model)."""
    tokens = sum(c.pr_tokens_verified for c in m.cells)
    ties = sum(c.pr_near_ties for c in m.cells)
    out = []
    if ties > _near_tie_bar(tokens, th.near_tie_max_share, th.near_tie_allowance):
        out.append(f"{ties} of {tokens} verified DSpark tokens are near-tie substitutions (not main's argmax, "
                   f"within {m.verify_tolerance:g} logits): {_share(ties, tokens)} > bar {th.near_tie_max_share:.2%} "
                   f"(at least {th.near_tie_allowance} allowed); a decoder accepting drafts that are not main's top")
    for c in m.cells:
        if c.pr_near_ties > _near_tie_bar(c.pr_tokens_verified, th.near_tie_cell_max_share, th.near_tie_allowance):
            out.append(f"{c.name}: {c.pr_near_ties} near-tie substitutions in {c.pr_tokens_verified} tokens "
                       f"({_share(c.pr_near_ties, c.pr_tokens_verified)} > bar {th.near_tie_cell_max_share:.2%} per cell)")
    return out


def _share(n: int, of: int) -> str:
    return f"{n / of:.2%}" if of else "all (no token count)"


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
                            f"main's greedy continuation (a token {c.pr_worst_gap:.3g} logits below main's top; "
                            f"near-ties allowed within {m.verify_tolerance:g})")
        elif c.pr_streams < th.min_verified_streams:
            short.append(f"{c.name}: only {c.pr_streams} DSpark streams verified (need {th.min_verified_streams})")
    problems += near_tie_problems(m, th)  # too many near-ties is conclusive too, not a lack of evidence
    if problems:
        return GateResult(gate="lossless", title=title, status="fail", detail="; ".join(problems + short))
    if short:  # too little evidence is not evidence of a lossy decoder: missing, not failed
        return GateResult(gate="lossless", title=title, status="fail", detail="; ".join(short),
                          missing=[SHORT_OF_STREAMS])
    detail = (f"all {total} DSpark streams are main's greedy continuation, token by token, teacher-forced by main's "
              "engine in main's own process")
    if ties:
        worst = max(c.pr_worst_gap for c in m.cells)
        tokens = sum(c.pr_tokens_verified for c in m.cells)
        detail += (f" ({ties} token{'s' if ties != 1 else ''} at near-ties within {m.verify_tolerance:g} logits, "
                   f"the widest {worst:.3g}: {_share(ties, tokens)} of {tokens} tokens, "
                   f"bar {th.near_tie_max_share:.2%})")
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
    if a.pr_unnormalised:  # a shifted dump lowers the KL by the shift: what it reads is not the PR's KL
        problems.insert(0, f"{a.pr_unnormalised} of {a.positions} of the PR's log-prob rows are not normalised "
                           f"(logsumexp up to {a.pr_worst_lse:+.4g}, must be 0 ± {LSE_TOLERANCE:g}): its KL is not a KL")
    if problems:
        return GateResult(gate="accuracy", title=title, status="fail", detail=f"{'; '.join(problems)} ({bars})")
    return GateResult(gate="accuracy", title=title, status="pass", detail=bars)


def ratio_ci(values: list[float], processes: list[tuple[int, int]], stats: StatsSettings,
             resamples: int | None = None) -> tuple[float, float]:
    """The CI of a median PR/main ratio, resampling main's and the PR's processes (stats.crossed_bootstrap_ci).
    Ratios without process labels (hand-made measurements) are resampled as independent rounds."""
    if len(processes) != len(values):
        processes = [(i, 0) for i in range(len(values))]
    return crossed_bootstrap_ci(values, [p[0] for p in processes], [p[1] for p in processes],
                                resamples=resamples or stats.bootstrap_resamples, seed=stats.bootstrap_seed,
                                confidence=stats.confidence)


def speed_check(values: list[float], processes: list[tuple[int, int]], bar: float, stats: StatsSettings,
                resamples: int | None = None) -> tuple[str, float, tuple[float, float] | None]:
    """("pass" | "fail" | "undecided", median, CI or None): pass when the median is at or above the bar,
    fail when the whole CI is below it, undecided when the median is below and the CI reaches above
    (or there is a single round, so no CI)."""
    med = median(values)
    if med >= bar:
        return "pass", med, None
    if len(values) < 2:  # one round has no interval: below the bar is a guess
        return "undecided", med, None
    lo, hi = ratio_ci(values, processes, stats, resamples)
    return ("fail" if hi < bar else "undecided"), med, (lo, hi)


def total_ci(groups: list[list[Timed]], stats: StatsSettings, resamples: int | None = None) -> tuple[float, float]:
    """Percentile bootstrap CI of the total-time ratio (per group main's summed seconds over the PR's, the
    geomean over groups), resampling as `crossed_bootstrap_ci` does: main's and the PR's processes
    independently when a side has several, else the rounds."""
    flat = [(gi, t) for gi, g in enumerate(groups) for t in g]
    n = resamples or stats.bootstrap_resamples
    w = pigeonhole_weights([t.main_process for _, t in flat], [t.pr_process for _, t in flat],
                           [t.round for _, t in flat], n, np.random.default_rng(stats.bootstrap_seed)).astype(float)
    m, p = np.array([t.main_s for _, t in flat]), np.array([t.pr_s for _, t in flat])
    logs = np.zeros(n)
    for gi in range(len(groups)):
        sel = np.array([g == gi for g, _ in flat])
        with np.errstate(divide="ignore", invalid="ignore"):  # a group left out of a resample: no value
            logs += np.log((w[:, sel] * m[sel]).sum(1) / (w[:, sel] * p[sel]).sum(1))
    alpha = (1.0 - stats.confidence) / 2.0
    lo, hi = np.nanquantile(np.exp(logs / len(groups)), [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def total_check(groups: list[list[Timed]], bar: float, stats: StatsSettings,
                resamples: int | None = None) -> tuple[str, float, tuple[float, float] | None]:
    """As speed_check, for the speedup by total time: pass at or above the bar, fail when the whole CI is
    below it, else undecided."""
    total = geomean([total_ratio(g) for g in groups])  # callers pass timed groups only (_untimed)
    if total >= bar:
        return "pass", total, None
    if len({t.round for g in groups for t in g}) < 2:
        return "undecided", total, None
    lo, hi = total_ci(groups, stats, resamples)
    return ("fail" if hi < bar else "undecided"), total, (lo, hi)


def _untimed(timed: list[Timed]) -> bool:
    return not timed or any(t.pr_s <= 0 for t in timed)


def _speed_gate(gate: str, title: str, checks: list[tuple[str, str, tuple[float, float] | None]],
                passed: str, failed_prefix: str = "") -> GateResult:
    """checks: (status, what against which bar, CI) per statistic; a failure beats an undecided."""
    def text(what: str, ci: tuple[float, float] | None) -> str:
        return what + (f" (95% CI {ci[0]:.3f}× … {ci[1]:.3f}×)" if ci else "")

    failed = [text(w, ci) for st, w, ci in checks if st == "fail"]
    if failed:
        return GateResult(gate=gate, title=title, status="fail", detail=failed_prefix + "; ".join(failed))
    open_ = [text(w, ci) for st, w, ci in checks if st == "undecided"]
    if open_:
        return GateResult(gate=gate, title=title, status="skipped", undecided=True,
                          detail="undecided: " + "; ".join(open_) + ": below the bar, but the interval reaches above it")
    return GateResult(gate=gate, title=title, status="pass", detail=passed)


def gate_ar(m: Measurements, th: Thresholds, stats: StatsSettings | None = None) -> GateResult:
    """The AR ratio over all cells (geomean per round, median over rounds: the statistic with the most
    evidence, for a regression everywhere) and each cell's median (for one that hits one context); and
    each of those by total time (main's summed seconds over the PR's), which a slow minority of rounds
    cannot hide from."""
    stats = stats or StatsSettings()
    title = "AR decode"
    if not m.cells:
        return _missing("ar", title, ["AR tok/s"])
    missing = [f"AR tok/s {c.name}" for c in m.cells if not c.ar_ratios]
    missing += [f"AR total time {c.name}" for c in m.cells if c.ar_ratios and _untimed(c.ar_timed)]
    if not m.ar_rounds and not missing:
        missing = ["AR tok/s over all cells in one round"]
    if missing:
        return _missing("ar", title, missing)
    checks, shown = [], []
    slack = th.total_time_slack
    if len(m.cells) > 1:  # with one cell the pooled statistic is that cell's
        bar = th.ar_ratio_min - m.noise.ar_decode
        st, r, ci = speed_check(m.ar_rounds, m.ar_round_processes(), bar, stats)
        checks.append((st, f"all cells: AR {r:.3f}× main < {th.ar_ratio_min:g} − noise {m.noise.ar_decode:.3f}", ci))
        st_t, t, ci_t = total_check([c.ar_timed for c in m.cells], bar - slack, stats)
        if st != "fail":  # a failed median says it already; the total speaks when the median does not
            checks.append((st_t, f"all cells: AR by total time {t:.3f}× main < {th.ar_ratio_min:g} − noise "
                                 f"{m.noise.ar_decode:.3f} − {slack:g}", ci_t))
        shown.append(f"all cells {r:.3f}× (bar ≥ {bar:.3f}×), by total time {t:.3f}× (bar ≥ {bar - slack:.3f}×); per cell ")
    cell_bar = th.ar_ratio_min - m.noise.ar_cell
    cells = []
    for c in m.cells:
        st, r, ci = speed_check(c.ar_ratios, c.ar_processes, cell_bar, stats)
        checks.append((st, f"{c.name}: AR {r:.3f}× main < {th.ar_ratio_min:g} − noise {m.noise.ar_cell:.3f}", ci))
        st_t, t, ci_t = total_check([c.ar_timed], cell_bar - slack, stats)
        if st != "fail":
            checks.append((st_t, f"{c.name}: AR by total time {t:.3f}× main < {th.ar_ratio_min:g} − noise "
                                 f"{m.noise.ar_cell:.3f} − {slack:g}", ci_t))
        cells.append(f"{c.name} {r:.3f}× (total {t:.3f}×)")
    return _speed_gate("ar", title, checks, "".join(shown) + f"{', '.join(cells)} (bar ≥ {cell_bar:.3f}×, "
                                                            f"by total time ≥ {cell_bar - slack:.3f}×)")


def gate_guards(m: Measurements, th: Thresholds, stats: StatsSettings | None = None) -> list[GateResult]:
    stats = stats or StatsSettings()
    if not m.guards:
        return [_missing("guard", "guards", ["guard models"])]
    out = []
    gen_bar = th.guard_decode_ratio_min - m.noise.guard_decode
    pre_bar = th.guard_prefill_ratio_min - m.noise.guard_prefill
    slack = th.total_time_slack
    for g in m.guards:
        gate, title = f"guard:{g.guard}", f"{g.guard} guard @{format_ctx(g.ctx)}"
        missing = [w for w, r in (("generation", g.generation_ratios), ("prefill", g.prefill_ratios)) if not r]
        missing += [f"{w} total time" for w, r, t in (("generation", g.generation_ratios, g.generation_timed),
                                                      ("prefill", g.prefill_ratios, g.prefill_timed))
                    if r and _untimed(t)]
        if missing:
            out.append(_missing(gate, title, [f"{g.guard} {w}" for w in missing]))
            continue
        sg, gen, cg = speed_check(g.generation_ratios, g.generation_processes, gen_bar, stats)
        sp, pre, cp = speed_check(g.prefill_ratios, g.prefill_processes, pre_bar, stats)
        tg, gen_t, ctg = total_check([g.generation_timed], gen_bar - slack, stats)
        tp, pre_t, ctp = total_check([g.prefill_timed], pre_bar - slack, stats)
        shown = (f"no regression — prefill + {g.new_tokens} tokens {g.pr_generation_tps or 0:.1f} tok/s ({gen:.3f}×, "
                 f"total {gen_t:.3f}×) · prefill {g.pr_prefill_tps or 0:.0f} tok/s ({pre:.3f}×, total {pre_t:.3f}×)"
                 f" · {_guard_streams(g)}")
        checks = [(sg, f"prefill + {g.new_tokens} tokens {gen:.3f}× main (bar {gen_bar:.3f}×)", cg),
                  (sp, f"prefill {pre:.3f}× main (bar {pre_bar:.3f}×)", cp)]
        if sg != "fail":  # a failed median says it already
            checks.append((tg, f"prefill + {g.new_tokens} tokens by total time {gen_t:.3f}× main "
                               f"(bar {gen_bar - slack:.3f}×)", ctg))
        if sp != "fail":
            checks.append((tp, f"prefill by total time {pre_t:.3f}× main (bar {pre_bar - slack:.3f}×)", ctp))
        out.append(_speed_gate(gate, title, checks, shown, failed_prefix="regression: "))
    return out


def _guard_streams(g) -> str:
    """What became of the PR's guard streams (a wrong one is an integrity finding, not this gate's)."""
    if g.pr_streams == 0:
        return "streams not verified" + (f" ({g.unverified})" if g.unverified else "")
    done = f"{g.pr_verified} of {g.pr_streams} streams teacher-forced by main's copy of the guard"
    return f"{done}; then not verified ({g.unverified})" if g.unverified else done


def gate_dspark_total(m: Measurements, th: Thresholds, stats: StatsSettings | None = None) -> GateResult:
    """DSpark not slower than main in total: per cell main's summed seconds over the PR's on the same
    windows, the geomean over cells, at least 1 − noise − slack. The tier reads the median of the
    per-round ratios, which a PR slow on a minority of rounds moves not at all (1.3× on two rounds in
    three and 0.14× on the third read +26.5 % where the total was 0.35×)."""
    stats = stats or StatsSettings()
    title = "DSpark total time"
    missing = [f"DSpark total time {c.name}" for c in m.cells if _untimed(c.dspark_timed)]
    if not m.cells or missing:
        return _missing("dspark", title, missing or ["DSpark total time"])
    bar = 1.0 - m.noise.dspark_decode - th.total_time_slack
    st, t, ci = total_check([c.dspark_timed for c in m.cells], bar, stats)
    med = f", median of rounds {median(m.speedup_rounds):.3f}×" if m.speedup_rounds else ""
    return _speed_gate("dspark", title, [
        (st, f"DSpark by total time {t:.3f}× main < 1 − noise {m.noise.dspark_decode:.3f} − {th.total_time_slack:g}"
             f"{med}", ci),
    ], f"DSpark by total time {t:.3f}× main (bar ≥ {bar:.3f}×){med}", failed_prefix="slower than main in total: ")


def gate_integrity(m: Measurements) -> GateResult:
    findings = m.integrity.of("head")
    if findings:
        msgs = sorted({f.message for f in findings})
        return GateResult(gate="integrity", title="integrity", status="fail", detail="; ".join(msgs))
    return GateResult(gate="integrity", title="integrity", status="pass",
                      detail="every answer well-formed, of the length asked for, no faster than it could be, "
                             "no report the bot's clock contradicts")


def evaluate(m: Measurements, th: Thresholds, stats: StatsSettings | None = None) -> list[GateResult]:
    """Every gate, in the order the scorecard shows them."""
    return [gate_accuracy(m, th), gate_lossless(m, th), gate_dspark_total(m, th, stats), gate_ar(m, th, stats),
            *gate_guards(m, th, stats), gate_integrity(m)]
