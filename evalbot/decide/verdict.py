"""The verdict: pure function of the measurements and the settings.

Four outcomes:
- scored: every gate passed; tier none/XS/S/M/L/XL: the band of the speedup CI's lower bound (decide/tiers);
- rejected: some gate failed; tier REJECT. Anything wrong with what the PR's own processes did or sent
  (a crash, a timeout, forged or malformed output, an impossible timing) is the integrity gate failing;
- not_evaluated: the PR changes the harness; no tier, no labels;
- infra_error: main's side or the bot's own environment failed (a main process crashed, main's streams
  are not its own greedy continuation, the sandbox could not start); no tier, no labels. Never read as
  slow or lossy, and never the PR's fault.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

from evalbot.decide.gates import SHORT_OF_STREAMS, GateResult, evaluate
from evalbot.decide.measurements import Measurements
from evalbot.decide.stats import crossed_bootstrap_ci, median
from evalbot.decide.tiers import tier_for
from evalbot.settings import ScoringSettings

Status = Literal["scored", "rejected", "not_evaluated", "infra_error"]


class Speedup(BaseModel):
    """DSpark decode speedup of the PR over main: median per-round ratio and its bootstrap CI."""

    ratio: float
    pct: float
    ci_low_pct: float | None = None  # None: fewer than two rounds, no interval
    ci_high_pct: float | None = None
    rounds: int
    confidence: float
    noise_pct: float


class InfraFailure(BaseModel):
    where: str  # e.g. "main's side: generate (main process 2)"
    message: str
    stderr_tail: str = ""


class Verdict(BaseModel):
    status: Status
    tier: str | None = None
    labels: list[str] = Field(default_factory=list)
    reason: str
    gates: list[GateResult] = Field(default_factory=list)
    speedup: Speedup | None = None
    changed_harness_paths: list[str] = Field(default_factory=list)
    conflicts: list[str] = Field(default_factory=list)  # paths where the PR does not merge into main's tip
    infra: InfraFailure | None = None

    @property
    def failed_gates(self) -> list[GateResult]:
        return [g for g in self.gates if g.status == "fail"]


def compute_speedup(m: Measurements, settings: ScoringSettings) -> Speedup | None:
    if not m.speedup_rounds:
        return None
    st = settings.stats
    ratio = median(m.speedup_rounds)
    lo = hi = None
    if len(m.speedup_rounds) >= 2:
        mains, prs = m.speedup_processes()
        lo_r, hi_r = crossed_bootstrap_ci(
            m.speedup_rounds, mains, prs, resamples=st.bootstrap_resamples, seed=st.bootstrap_seed,
            confidence=st.confidence,
        )
        lo, hi = (lo_r - 1) * 100, (hi_r - 1) * 100
    return Speedup(
        ratio=ratio, pct=(ratio - 1) * 100, ci_low_pct=lo, ci_high_pct=hi, rounds=len(m.speedup_rounds),
        confidence=st.confidence, noise_pct=m.noise.dspark_decode * 100,
    )


def _fmt_pct(x: float) -> str:
    return f"{x:+.1f}%"


def _scored_reason(tier: str, sp: Speedup | None, settings: ScoringSettings) -> str:
    if sp is None:
        return "no DSpark decode speedup could be computed"
    if sp.ci_low_pct is None or sp.ci_high_pct is None:
        return f"DSpark decode {_fmt_pct(sp.pct)} from a single round: no confidence interval, no tier"
    ci = f"{sp.confidence:.0%} CI {_fmt_pct(sp.ci_low_pct)} … {_fmt_pct(sp.ci_high_pct)}"
    if tier != settings.tiers.none_name:
        return f"DSpark decode {_fmt_pct(sp.pct)} ({ci}, {sp.rounds} rounds; tier from the CI's lower bound)"
    if sp.ci_low_pct <= 0:
        return f"no measurable DSpark decode speedup: {_fmt_pct(sp.pct)} and the {ci} includes zero"
    if sp.ci_low_pct <= sp.noise_pct:
        return f"no measurable DSpark decode speedup: the {ci} does not clear the noise floor (±{sp.noise_pct:.1f}%)"
    return f"DSpark decode {_fmt_pct(sp.pct)} ({ci}): the CI's lower bound is below the smallest tier"


def decide(m: Measurements, settings: ScoringSettings) -> Verdict:
    integrity = m.integrity
    env = integrity.of(None)
    if env:
        f = env[0]
        return infrastructure_error(f.where or "the bot's environment", f.message, f.stderr_tail)
    main_problems = integrity.of("base")
    if main_problems:
        f = main_problems[0]
        return infrastructure_error(
            f"main's side: {f.where}" if f.where else "main's side",
            "main's own process failed the bot's checks: " + "; ".join(x.message for x in main_problems[:3]), f.stderr_tail)
    broken = [c.name for c in m.cells if c.main_verified != c.main_streams]
    if broken:
        return infrastructure_error("main's side", "main's own DSpark streams are not main's greedy continuation "
                                    f"({', '.join(broken)}): the ruler is broken, no PR can be judged with it")

    gates = evaluate(m, settings.thresholds, settings.stats)
    if m.stop is not None and m.stop.reason == "failure" and any(g.gate == "integrity" and g.status == "fail" for g in gates):
        # The PR's process failed before everything was measured: what is missing is not a verdict on
        # it (a crash is never read as lossy or slow); the failure is.
        gates = [g.model_copy(update={"status": "skipped", "detail": "not measured: the PR's process failed first"})
                 if g.missing else g for g in gates]
    pairings, seen = m.processes_per_ref ** 2, len(set(m.speedup_groups))
    # Too few rounds to judge: a slower-looking AR or guard over fewer pairings than exist has not
    # sampled process-to-process variance (an A/A on two cores read AR 0.90x after one round), and too
    # few verified streams are no evidence of a lossy decoder. Undecided, never a REJECT; a wrong
    # stream, an integrity finding and a measured accuracy failure stay conclusive, and a metric that
    # was not measured at all still fails closed.
    ended = m.stop is not None and m.stop.reason in ("budget", "corpus")
    why = f"the {m.stop.reason}" if ended else "the run"  # type: ignore[union-attr]
    short = {g.gate for g in gates if (g.status == "fail" or g.undecided)
             and ((ended and g.missing == [SHORT_OF_STREAMS]) or (seen < pairings and _speed_gate(g.gate)))}
    undecided = [g.title for g in gates if g.gate in short]
    gates = [g.model_copy(update={"status": "skipped", "undecided": True,
                                  "detail": f"undecided ({why} ended first): {g.detail.removeprefix('undecided: ')}"})
             if g.gate in short else g for g in gates]
    # A speed gate whose median is below its bar but whose interval reaches above it (gates.speed_check).
    straddling = [g.title for g in gates if g.undecided and g.gate not in short]
    speedup = compute_speedup(m, settings)
    failed = [g for g in gates if g.status == "fail"]
    if failed:
        tier = settings.tiers.reject_name
        reason = "REJECT — " + "; ".join(f"{g.title}: {g.detail}" for g in failed)
        return Verdict(
            status="rejected", tier=tier, labels=settings.tiers.labels_for(tier), reason=reason, gates=gates,
            speedup=speedup,
        )
    ci = (speedup.ci_low_pct, speedup.ci_high_pct) if speedup and speedup.ci_low_pct is not None else None
    # The tier reads the lower of the CI's lower bound and the speedup by total time (what a user sees:
    # a PR slow on a minority of rounds moves the median of the rounds not at all).
    total = m.dspark_total_pct
    by_total = ci is not None and total is not None and total < ci[0]
    tier = tier_for(
        speedup.pct if speedup else None, (total, ci[1]) if by_total else ci,  # type: ignore[index]
        m.noise.dspark_decode * 100, settings.tiers,
    )
    reason = _scored_reason(tier, speedup, settings)
    if by_total and tier != settings.tiers.none_name:
        reason = reason.replace("tier from the CI's lower bound", f"tier from the speedup by total time, {_fmt_pct(total)}, "
                                "below the CI's lower bound")
    elif by_total and speedup is not None and speedup.ci_low_pct is not None and speedup.ci_low_pct > speedup.noise_pct:
        reason = (f"DSpark decode {_fmt_pct(speedup.pct)} by the median of rounds, but {_fmt_pct(total)} by total time "
                  "(main's summed seconds over the PR's): below the smallest tier")
    if undecided:
        tier = settings.tiers.none_name
        reason = (f"undecided: the {m.stop.reason if m.stop else 'run'} ended after {len(m.speedup_rounds)} rounds over "  # type: ignore[union-attr]
                  f"{seen} of the {pairings} process pairings, too few to judge {', '.join(undecided)}; no REJECT and "
                  "no tier on that (a larger budget or /rescore decides)")
    elif straddling:
        tier = settings.tiers.none_name
        reason = (f"undecided: after {len(m.speedup_rounds)} rounds ({why} ended) {', '.join(straddling)} read below "
                  "its bar with an interval that reaches above it; no REJECT and no tier on that (a larger budget or "
                  f"/rescore decides). {reason}")
    elif tier != settings.tiers.none_name and seen < pairings:
        # A process can be faster or slower than its siblings for the whole run: an interval over fewer
        # pairings than exist has not sampled that variance, and it reads narrower than it is.
        tier = settings.tiers.none_name
        why = f"the {m.stop.reason}" if m.stop is not None and m.stop.reason != "decided" else "the run"
        reason = (f"undecided: {why} ended after {len(m.speedup_rounds)} rounds over {seen} of the {pairings} process "
                  f"pairings; no tier before every pairing is measured (DSpark {_fmt_pct(speedup.pct)} so far; "
                  "a larger budget or /rescore decides)")  # type: ignore[union-attr]
    return Verdict(
        status="scored", tier=tier, labels=settings.tiers.labels_for(tier), reason=reason, gates=gates,
        speedup=speedup,
    )


def _speed_gate(gate: str) -> bool:
    return gate in ("ar", "dspark") or gate.startswith("guard:")


def not_evaluated_harness_changed(paths: list[str]) -> Verdict:
    return Verdict(
        status="not_evaluated",
        reason="not evaluated: harness changed",
        changed_harness_paths=sorted(paths),
    )


def not_evaluated_needs_rebase(conflicts: list[str], label: str) -> Verdict:
    """The PR does not merge cleanly into main's tip: there is nothing that would land to measure."""
    return Verdict(
        status="not_evaluated", labels=[label], conflicts=sorted(conflicts),
        reason=f"not evaluated: the PR does not merge into main's tip (conflicts in {', '.join(sorted(conflicts)[:5])}); rebase it",
    )


def infrastructure_error(where: str, message: str, stderr_tail: str = "") -> Verdict:
    return Verdict(
        status="infra_error",
        reason=f"infrastructure error ({where}): {message}",
        infra=InfraFailure(where=where, message=message, stderr_tail=stderr_tail),
    )
