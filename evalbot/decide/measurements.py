"""From run records to `Measurements`: the plain data the decision core (gates, tier) reads.

Pure: no I/O. Throughput values are medians over rounds; ratios are per round (PR / main within
the same ABBA round). Losslessness is the parent's own count (`integrity.verified_lossless_runs`).
A metric that was not measured stays None / empty, and the gates fail closed on it.
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel, Field

from evalbot.decide.contract import CompareLine, GuardLine, TauCheckLine
from evalbot.decide.integrity import IntegrityReport, claimed_decode_s, first_divergence, verified_lossless_runs
from evalbot.decide.noise import NoiseFloor
from evalbot.decide.records import RunRecord
from evalbot.decide.reverify import ReverifySummary
from evalbot.decide.stats import geomean, mean, median


class ContextSummary(BaseModel):
    prompt: str
    ctx: int
    new_tokens: int | None = None
    block_size: int | None = None
    pr_dspark_tps: float | None = None
    main_dspark_tps: float | None = None
    dspark_ratios: list[float] = Field(default_factory=list)  # per round, PR / main
    pr_ar_tps: float | None = None
    main_ar_tps: float | None = None
    ar_ratios: list[float] = Field(default_factory=list)
    pr_prefill_tps: float | None = None
    main_prefill_tps: float | None = None
    pr_tau: float | None = None
    main_tau: float | None = None
    pr_runs: int = 0  # DSpark runs the PR made, all rounds
    pr_lossless_runs: int = 0  # of those, identical to the PR's AR stream (parent-verified)
    main_runs: int = 0
    main_lossless_runs: int = 0
    ar_matches_main: bool | None = None  # PR's AR stream == main's, every round (reported only)
    ar_first_divergence: int | None = None
    pr_ar_stable: bool | None = None  # PR's AR stream identical across rounds

    @property
    def name(self) -> str:
        return f"{self.prompt}@{format_ctx(self.ctx)}"


class GuardSummary(BaseModel):
    guard: str
    ctx: int
    pr_decode_tps: float | None = None
    main_decode_tps: float | None = None
    pr_prefill_tps: float | None = None
    main_prefill_tps: float | None = None
    decode_ratios: list[float] = Field(default_factory=list)
    prefill_ratios: list[float] = Field(default_factory=list)


class RoundWall(BaseModel):
    round: int
    order: str  # "main, PR" or "PR, main"
    main_wall_s: float | None = None
    pr_wall_s: float | None = None
    main_claimed_decode_s: float | None = None
    pr_claimed_decode_s: float | None = None


class Measurements(BaseModel):
    profile: str
    rounds: int
    requested_reps: int
    contexts: list[ContextSummary] = Field(default_factory=list)
    guards: list[GuardSummary] = Field(default_factory=list)
    speedup_rounds: list[float] = Field(default_factory=list)  # per round: geomean over contexts of PR/main DSpark tps
    compare: CompareLine | None = None
    walls: list[RoundWall] = Field(default_factory=list)
    device: str = ""
    torch: str = ""
    triton: str = ""
    model_sha256: str = ""
    drafter_sha256: str = ""
    main_drafter_sha256: str = ""
    integrity: IntegrityReport = Field(default_factory=IntegrityReport)
    reverify: ReverifySummary = Field(default_factory=ReverifySummary)
    noise: NoiseFloor


def format_ctx(ctx: int) -> str:
    return f"{ctx // 1024}k" if ctx >= 1024 and ctx % 1024 == 0 else str(ctx)


def _tau_by_round(records: Sequence[RunRecord], ref: str) -> dict[int, dict[tuple[str, int], TauCheckLine]]:
    out: dict[int, dict[tuple[str, int], TauCheckLine]] = {}
    for rec in records:
        if rec.program == "tau_check" and rec.ref == ref and rec.ok:
            out[rec.round] = {line.context_key: line for line in rec.tau_lines()}
    return out


def _guard_by_round(records: Sequence[RunRecord], ref: str) -> dict[int, dict[str, GuardLine]]:
    out: dict[int, dict[str, GuardLine]] = {}
    for rec in records:
        if rec.program == "guard" and rec.ref == ref and rec.ok:
            out[rec.round] = {line.guard: line for line in rec.guard_lines()}
    return out


def _med(values: list[float]) -> float | None:
    return median(values) if values else None


def _summarize_context(key: tuple[str, int], pr: dict, main: dict) -> ContextSummary:
    rounds = sorted(set(pr) | set(main))
    pr_lines = [pr[r][key] for r in rounds if key in pr.get(r, {})]
    main_lines = [main[r][key] for r in rounds if key in main.get(r, {})]
    paired = [(pr[r][key], main[r][key]) for r in rounds if key in pr.get(r, {}) and key in main.get(r, {})]
    any_line = (pr_lines or main_lines)[0]
    s = ContextSummary(prompt=key[0], ctx=key[1], new_tokens=any_line.new_tokens, block_size=any_line.block_size)
    if pr_lines:
        s.pr_dspark_tps = median([x.dspark_tps for x in pr_lines])
        s.pr_ar_tps = median([x.ar_tps for x in pr_lines])
        s.pr_prefill_tps = median([x.prefill_tps for x in pr_lines])
        s.pr_tau = mean([x.tau for x in pr_lines])
        s.pr_runs = sum(x.runs for x in pr_lines)
        s.pr_lossless_runs = sum(verified_lossless_runs(x) for x in pr_lines)
        s.pr_ar_stable = all(list(x.ar_tokens) == list(pr_lines[0].ar_tokens) for x in pr_lines)
    if main_lines:
        s.main_dspark_tps = median([x.dspark_tps for x in main_lines])
        s.main_ar_tps = median([x.ar_tps for x in main_lines])
        s.main_prefill_tps = median([x.prefill_tps for x in main_lines])
        s.main_tau = mean([x.tau for x in main_lines])
        s.main_runs = sum(x.runs for x in main_lines)
        s.main_lossless_runs = sum(verified_lossless_runs(x) for x in main_lines)
    if paired:
        s.dspark_ratios = [p.dspark_tps / m.dspark_tps for p, m in paired]
        s.ar_ratios = [p.ar_tps / m.ar_tps for p, m in paired]
        divergences = [first_divergence(p.ar_tokens, m.ar_tokens) for p, m in paired]
        s.ar_matches_main = all(d is None for d in divergences)
        s.ar_first_divergence = min((d for d in divergences if d is not None), default=None)
    return s


def _summarize_guard(name: str, pr: dict, main: dict) -> GuardSummary:
    rounds = sorted(set(pr) | set(main))
    pr_lines = [pr[r][name] for r in rounds if name in pr.get(r, {})]
    main_lines = [main[r][name] for r in rounds if name in main.get(r, {})]
    paired = [(pr[r][name], main[r][name]) for r in rounds if name in pr.get(r, {}) and name in main.get(r, {})]
    g = GuardSummary(guard=name, ctx=(pr_lines or main_lines)[0].ctx)
    g.pr_decode_tps = _med([x.decode_tps for x in pr_lines])
    g.main_decode_tps = _med([x.decode_tps for x in main_lines])
    g.pr_prefill_tps = _med([x.prefill_tps for x in pr_lines])
    g.main_prefill_tps = _med([x.prefill_tps for x in main_lines])
    g.decode_ratios = [p.decode_tps / m.decode_tps for p, m in paired]
    g.prefill_ratios = [p.prefill_tps / m.prefill_tps for p, m in paired]
    return g


def summarize(
    records: Sequence[RunRecord],
    *,
    profile: str,
    rounds: int,
    requested_reps: int,
    noise: NoiseFloor,
    integrity: IntegrityReport | None = None,
    reverify: ReverifySummary | None = None,
) -> Measurements:
    pr_tau, main_tau = _tau_by_round(records, "head"), _tau_by_round(records, "base")
    pr_guard, main_guard = _guard_by_round(records, "head"), _guard_by_round(records, "base")

    keys: list[tuple[str, int]] = []
    for by_round in (main_tau, pr_tau):
        for lines in by_round.values():
            keys += [k for k in lines if k not in keys]
    keys.sort(key=lambda k: (k[1], k[0]))
    contexts = [_summarize_context(k, pr_tau, main_tau) for k in keys]

    guard_names: list[str] = []
    for by_round in (main_guard, pr_guard):
        for lines in by_round.values():
            guard_names += [n for n in lines if n not in guard_names]
    guards = [_summarize_guard(n, pr_guard, main_guard) for n in guard_names]

    speedup_rounds = []
    for r in sorted(set(pr_tau) & set(main_tau)):
        if keys and all(k in pr_tau[r] and k in main_tau[r] for k in keys):
            speedup_rounds.append(geomean([pr_tau[r][k].dspark_tps / main_tau[r][k].dspark_tps for k in keys]))

    walls = []
    tau_recs = {(rec.round, rec.ref): rec for rec in records if rec.program == "tau_check" and rec.ok}
    for r in range(rounds):
        main_rec, pr_rec = tau_recs.get((r, "base")), tau_recs.get((r, "head"))
        walls.append(
            RoundWall(
                round=r + 1,
                order="main, PR" if r % 2 == 0 else "PR, main",
                main_wall_s=main_rec.wall_s if main_rec else None,
                pr_wall_s=pr_rec.wall_s if pr_rec else None,
                main_claimed_decode_s=claimed_decode_s(main_rec) if main_rec else None,
                pr_claimed_decode_s=claimed_decode_s(pr_rec) if pr_rec else None,
            )
        )

    compare = next((x for rec in records if rec.program == "compare" and rec.ok for x in rec.lines), None)
    pr_first = next((line for lines in pr_tau.values() for line in lines.values()), None)
    main_first = next((line for lines in main_tau.values() for line in lines.values()), None)
    first = pr_first or main_first
    return Measurements(
        profile=profile,
        rounds=rounds,
        requested_reps=requested_reps,
        contexts=contexts,
        guards=guards,
        speedup_rounds=speedup_rounds,
        compare=compare if isinstance(compare, CompareLine) else None,
        walls=walls,
        device=first.device if first else "",
        torch=first.torch if first else "",
        triton=first.triton if first else "",
        model_sha256=first.model_sha256 if first else "",
        drafter_sha256=pr_first.drafter_sha256 if pr_first else "",
        main_drafter_sha256=main_first.drafter_sha256 if main_first else "",
        integrity=integrity or IntegrityReport(),
        reverify=reverify or ReverifySummary(),
        noise=noise,
    )
