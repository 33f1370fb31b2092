"""From a campaign's records to `Measurements`: the plain data the decision core (gates, tier) reads.

Pure: no I/O. Every speed a gate or tier reads is the bot's own clock around one request, end to end
(prefill + the requested new tokens): `new_tokens / bot_s`. The unit of replication is the round (one
pair of processes, every cell on fresh windows measured by both, back to back): a round's ratio is
main's seconds over the PR's on the same window (> 1: the PR is faster). What a process said about
its own decode time and tau is summarised apart, as `reported_*`: shown on the scorecard, never gated.
A metric that was not measured stays None / empty, and the gates fail closed on it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence

from pydantic import BaseModel, Field

from evalbot.decide.accuracy import AccuracySummary
from evalbot.decide.clock import ClockCheck, clock_check
from evalbot.decide.integrity import IntegrityReport, check_records, first_divergence
from evalbot.decide.noise import NoiseFloor
from evalbot.decide.records import Generation, Records, StopReason
from evalbot.decide.stats import geomean, mean, median
from evalbot.settings import IntegritySettings


def format_ctx(ctx: int) -> str:
    return f"{ctx // 1024}k" if ctx >= 1024 and ctx % 1024 == 0 else str(ctx)


class Timed(BaseModel):
    """One paired request: main's and the PR's bot-clock seconds on the same window, and who served it."""

    round: int
    main_process: int
    pr_process: int
    main_s: float
    pr_s: float


def total_ratio(timed: Sequence[Timed]) -> float | None:
    """Main's seconds over the PR's, summed over the same windows: the speedup a user of every request
    sees, where a median of per-round ratios does not see a slow minority of rounds at all."""
    pr_s = sum(t.pr_s for t in timed)
    return sum(t.main_s for t in timed) / pr_s if timed and pr_s > 0 else None


class CellSummary(BaseModel):
    corpus: str
    ctx: int  # the nominal length, which names the cell
    new_tokens: int = 0
    lengths: list[int] = Field(default_factory=list)  # the exact prompt lengths timed (drawn from the seed)
    # bot-timed, end to end, medians over rounds (tok/s = new_tokens / bot seconds)
    pr_dspark_tps: float | None = None
    main_dspark_tps: float | None = None
    pr_ar_tps: float | None = None
    main_ar_tps: float | None = None
    dspark_ratios: list[float] = Field(default_factory=list)  # per round: main s / PR s on one window
    ar_ratios: list[float] = Field(default_factory=list)
    ar_processes: list[tuple[int, int]] = Field(default_factory=list)  # (main's, the PR's process) per AR ratio
    dspark_timed: list[Timed] = Field(default_factory=list)  # the seconds behind dspark_ratios (same order)
    ar_timed: list[Timed] = Field(default_factory=list)
    # what the processes reported about themselves (decode only, their own clocks): never gated
    pr_reported_dspark_tps: float | None = None
    main_reported_dspark_tps: float | None = None
    pr_reported_ar_tps: float | None = None
    main_reported_ar_tps: float | None = None
    pr_tau: float | None = None
    main_tau: float | None = None
    block_size: int | None = None
    # losslessness: every DSpark stream teacher-forced by main's engine in main's process
    pr_streams: int = 0
    pr_verified: int = 0
    pr_tokens_verified: int = 0  # tokens of the PR's DSpark streams teacher-forced by main's engine
    pr_near_ties: int = 0  # tokens that differ from main's argmax within the near-tie tolerance
    pr_worst_gap: float = 0.0  # the largest gap (logits below main's top) of a PR token that is not main's argmax
    main_streams: int = 0
    main_verified: int = 0
    # the PR's AR streams against main's on the same windows (reported, not gated)
    ar_compared: int = 0
    ar_equal: int = 0
    ar_first_divergence: int | None = None

    @property
    def name(self) -> str:
        return f"{self.corpus}@{format_ctx(self.ctx)}"

    @property
    def dspark_total_ratio(self) -> float | None:
        return total_ratio(self.dspark_timed)

    @property
    def ar_total_ratio(self) -> float | None:
        return total_ratio(self.ar_timed)


class GuardSummary(BaseModel):
    guard: str
    ctx: int  # nominal, as for a cell
    new_tokens: int = 0
    lengths: list[int] = Field(default_factory=list)
    pr_generation_tps: float | None = None  # new tokens / bot seconds, prefill at ctx included
    main_generation_tps: float | None = None
    pr_prefill_tps: float | None = None  # ctx / bot seconds of a one-token request
    main_prefill_tps: float | None = None
    generation_ratios: list[float] = Field(default_factory=list)
    prefill_ratios: list[float] = Field(default_factory=list)
    generation_processes: list[tuple[int, int]] = Field(default_factory=list)  # (main's, the PR's) per ratio
    prefill_processes: list[tuple[int, int]] = Field(default_factory=list)
    generation_timed: list[Timed] = Field(default_factory=list)  # the seconds behind the ratios (same order)
    prefill_timed: list[Timed] = Field(default_factory=list)
    pr_streams: int = 0  # the PR's streams of this guard teacher-forced by main's copy of it
    pr_verified: int = 0  # ... of which every token was that guard's argmax (within the near-tie tolerance)
    unverified: str = ""  # why the PR's guard streams were not (all) teacher-forced; "" if they were


class RoundSummary(BaseModel):
    round: int
    pairing: int
    main_process: int
    pr_process: int
    dspark_ratio: float | None = None  # geomean over cells
    ar_ratio: float | None = None  # geomean over cells


class Measurements(BaseModel):
    profile: str
    rounds: int
    processes_per_ref: int
    cells: list[CellSummary] = Field(default_factory=list)
    guards: list[GuardSummary] = Field(default_factory=list)
    round_summaries: list[RoundSummary] = Field(default_factory=list)
    speedup_rounds: list[float] = Field(default_factory=list)  # per round: geomean over cells (DSpark)
    speedup_groups: list[int] = Field(default_factory=list)  # the pairing of each of those rounds
    ar_rounds: list[float] = Field(default_factory=list)  # per round: geomean over cells of the AR ratios
    accuracy: AccuracySummary | None = None
    clock: ClockCheck = Field(default_factory=ClockCheck)
    device: str = ""
    torch: str = ""
    triton: str = ""
    model_sha256: str = ""
    drafter_sha256: str = ""
    main_drafter_sha256: str = ""
    integrity: IntegrityReport = Field(default_factory=IntegrityReport)
    verify_tolerance: float = 0.0
    stop: StopReason | None = None
    seed: int = 0
    corpora: str = ""  # where the windows' texts came from
    sandbox: str = ""
    freezer: str = ""
    wall_s: float = 0.0
    noise: NoiseFloor

    @property
    def dspark_total_ratio(self) -> float | None:
        """DSpark speedup by total time: per cell main's summed seconds over the PR's on the same windows,
        the geomean over cells (cells weigh as in the per-round speedup). None if a cell has no timings."""
        return _geomean_total([c.dspark_total_ratio for c in self.cells])

    @property
    def dspark_total_pct(self) -> float | None:
        """dspark_total_ratio as a speedup in percent (+26.5 = 26.5 % faster), for the tier."""
        r = self.dspark_total_ratio
        return None if r is None else (r - 1) * 100

    @property
    def ar_total_ratio(self) -> float | None:
        """AR by total time, as dspark_total_ratio."""
        return _geomean_total([c.ar_total_ratio for c in self.cells])

    def speedup_processes(self) -> tuple[list[int], list[int]]:
        """Main's process and the PR's process of each round in `speedup_rounds` (same order)."""
        rs = [r for r in self.round_summaries if r.dspark_ratio is not None]
        if len(rs) != len(self.speedup_rounds):
            raise ValueError("round summaries and speedup rounds disagree")
        return [r.main_process for r in rs], [r.pr_process for r in rs]

    def ar_round_processes(self) -> list[tuple[int, int]]:
        """(main's process, the PR's) of each round in `ar_rounds` (same order)."""
        rs = [r for r in self.round_summaries if r.ar_ratio is not None]
        if len(rs) != len(self.ar_rounds):
            raise ValueError("round summaries and AR rounds disagree")
        return [(r.main_process, r.pr_process) for r in rs]


def _geomean_total(ratios: list[float | None]) -> float | None:
    return geomean(ratios) if ratios and all(r is not None and r > 0 for r in ratios) else None  # type: ignore[arg-type]


def _timed(pair: dict[str, Generation], rnd: int) -> Timed:
    return Timed(round=rnd, main_process=pair["base"].process, pr_process=pair["head"].process,
                 main_s=pair["base"].bot_s, pr_s=pair["head"].bot_s)


def _med(values: Sequence[float]) -> float | None:
    return median(values) if values else None


def _tps(gs: Sequence[Generation]) -> float | None:
    return _med([g.new_tokens / g.bot_s for g in gs if g.bot_s > 0])


def _reported_tps(gs: Sequence[Generation]) -> float | None:
    return _med([len(g.tokens) / g.reported.decode_s for g in gs if g.reported.decode_s])


def _tau(gs: Sequence[Generation]) -> float | None:
    hist = [0] * max((len(g.reported.accept_hist) for g in gs), default=0)
    for g in gs:
        for k, n in enumerate(g.reported.accept_hist):
            hist[k] += n
    steps = sum(hist)
    return sum(k * n for k, n in enumerate(hist)) / steps if steps else None


def _pairs(gens: Sequence[Generation]) -> dict[tuple, dict[str, Generation]]:
    """Timed generations keyed by (round, model, mode, corpus, ctx, new_tokens, window), per ref."""
    out: dict[tuple, dict[str, Generation]] = defaultdict(dict)
    for g in gens:
        if g.round >= 0:
            out[(g.round, g.model, g.mode, g.corpus, g.ctx, g.new_tokens, g.window.sha256)][g.ref] = g
    return out


def summarize(records: Records, *, noise: NoiseFloor, integrity: IntegritySettings | None = None) -> Measurements:
    gens = records.generations
    pairs = _pairs(gens)
    main_gens = [g for g in gens if g.model == "main" and g.round >= 0]
    cells_seen = sorted({(g.corpus, g.ctx) for g in main_gens}, key=lambda k: (k[1], k[0]))
    verif = records.verifications
    cells = []
    for corpus, ctx in cells_seen:
        of = lambda ref, mode: [g for g in main_gens if g.ref == ref and g.mode == mode and g.corpus == corpus and g.ctx == ctx]  # noqa: E731
        mine_gens = [g for g in main_gens if g.corpus == corpus and g.ctx == ctx]
        c = CellSummary(corpus=corpus, ctx=ctx, new_tokens=max((g.new_tokens for g in mine_gens), default=0),
                        lengths=sorted({g.window.length for g in mine_gens}))
        c.pr_dspark_tps, c.main_dspark_tps = _tps(of("head", "dspark")), _tps(of("base", "dspark"))
        c.pr_ar_tps, c.main_ar_tps = _tps(of("head", "ar")), _tps(of("base", "ar"))
        c.pr_reported_dspark_tps, c.main_reported_dspark_tps = _reported_tps(of("head", "dspark")), _reported_tps(of("base", "dspark"))
        c.pr_reported_ar_tps, c.main_reported_ar_tps = _reported_tps(of("head", "ar")), _reported_tps(of("base", "ar"))
        c.pr_tau, c.main_tau = _tau(of("head", "dspark")), _tau(of("base", "dspark"))
        for key, pair in sorted(pairs.items()):
            if key[1] != "main" or key[3:5] != (corpus, ctx) or len(pair) != 2:
                continue
            ratio = pair["base"].bot_s / pair["head"].bot_s if pair["head"].bot_s > 0 else None
            if ratio is None:
                continue
            (c.dspark_ratios if key[2] == "dspark" else c.ar_ratios).append(ratio)
            (c.dspark_timed if key[2] == "dspark" else c.ar_timed).append(_timed(pair, key[0]))
            if key[2] == "ar":
                c.ar_processes.append((pair["base"].process, pair["head"].process))
                c.ar_compared += 1
                d = first_divergence(pair["head"].tokens, pair["base"].tokens)
                if d is None:
                    c.ar_equal += 1
                elif c.ar_first_divergence is None or d < c.ar_first_divergence:
                    c.ar_first_divergence = d
        mine = [v for v in verif if v.corpus == corpus and v.ctx == ctx and v.mode == "dspark" and v.model == "main"]
        c.pr_streams = sum(1 for v in mine if v.ref == "head")
        c.pr_verified = sum(1 for v in mine if v.ref == "head" and not v.mismatches)
        c.pr_tokens_verified = sum(v.tokens for v in mine if v.ref == "head")
        c.pr_near_ties = sum(len(v.near_ties) for v in mine if v.ref == "head")
        c.pr_worst_gap = max((v.worst_gap for v in mine if v.ref == "head"), default=0.0)
        c.main_streams = sum(1 for v in mine if v.ref == "base")
        c.main_verified = sum(1 for v in mine if v.ref == "base" and not v.mismatches)
        c.block_size = next((p.block_size for p in records.processes if p.block_size), None)
        cells.append(c)

    guards = []
    for name in sorted({g.model[6:] for g in gens if g.model.startswith("guard:")}):
        gg = [g for g in gens if g.model == f"guard:{name}" and g.round >= 0]
        if not gg:
            continue
        n = max(g.new_tokens for g in gg)
        gen = lambda ref: [g for g in gg if g.ref == ref and g.new_tokens == n]  # noqa: E731
        pre = lambda ref: [g for g in gg if g.ref == ref and g.new_tokens == 1]  # noqa: E731
        s = GuardSummary(guard=name, ctx=gg[0].ctx, new_tokens=n, unverified=records.guards_unverified,
                         lengths=sorted({g.window.length for g in gg}))
        checked = [v for v in verif if v.model == f"guard:{name}" and v.ref == "head"]
        s.pr_streams, s.pr_verified = len(checked), sum(1 for v in checked if not v.mismatches)
        s.pr_generation_tps, s.main_generation_tps = _tps(gen("head")), _tps(gen("base"))
        s.pr_prefill_tps = _med([g.window.length / g.bot_s for g in pre("head") if g.bot_s > 0])
        s.main_prefill_tps = _med([g.window.length / g.bot_s for g in pre("base") if g.bot_s > 0])
        for key, pair in sorted(pairs.items()):
            if key[1] != f"guard:{name}" or len(pair) != 2 or pair["head"].bot_s <= 0:
                continue
            r = pair["base"].bot_s / pair["head"].bot_s
            (s.generation_ratios if key[5] == n else s.prefill_ratios).append(r)
            (s.generation_processes if key[5] == n else s.prefill_processes).append(
                (pair["base"].process, pair["head"].process))
            (s.generation_timed if key[5] == n else s.prefill_timed).append(_timed(pair, key[0]))
        guards.append(s)

    rounds_seen = sorted({g.round for g in main_gens})
    round_summaries, speedup_rounds, groups, ar_rounds = [], [], [], []
    for r in rounds_seen:
        def of_round(mode: str) -> list[float]:
            return [pair["base"].bot_s / pair["head"].bot_s for key, pair in pairs.items()
                    if key[0] == r and key[1] == "main" and key[2] == mode and len(pair) == 2 and pair["head"].bot_s > 0]
        ratios, ar = of_round("dspark"), of_round("ar")
        any_g = next(g for g in main_gens if g.round == r)
        mp = next((g.process for g in main_gens if g.round == r and g.ref == "base"), -1)
        pp = next((g.process for g in main_gens if g.round == r and g.ref == "head"), -1)
        complete = len(ratios) == len(cells_seen) and ratios
        rs = RoundSummary(round=r, pairing=any_g.pairing, main_process=mp, pr_process=pp,
                          dspark_ratio=geomean(ratios) if complete else None,
                          ar_ratio=geomean(ar) if ar and len(ar) == len(cells_seen) else None)
        round_summaries.append(rs)
        if rs.dspark_ratio is not None:
            speedup_rounds.append(rs.dspark_ratio)
            groups.append(rs.pairing)
        if rs.ar_ratio is not None:
            ar_rounds.append(rs.ar_ratio)

    report = check_records(records, integrity or IntegritySettings())
    first = {p.ref: p for p in records.processes if p.index == 0}
    pr, mn = first.get("head"), first.get("base")
    return Measurements(
        profile=records.profile, rounds=len(rounds_seen), processes_per_ref=records.processes_per_ref,
        cells=cells, guards=guards, round_summaries=round_summaries, speedup_rounds=speedup_rounds,
        speedup_groups=groups, ar_rounds=ar_rounds, accuracy=AccuracySummary(**records.accuracy) if records.accuracy else None,
        clock=clock_check(gens, noise), device=(mn or pr).device if (mn or pr) else "",
        torch=(mn or pr).torch if (mn or pr) else "", triton=(mn or pr).triton if (mn or pr) else "",
        model_sha256=mn.model_sha256 if mn else "", drafter_sha256=pr.drafter_sha256 if pr else "",
        main_drafter_sha256=mn.drafter_sha256 if mn else "", integrity=report,
        verify_tolerance=verif[0].tolerance if verif else 0.0, stop=records.stop, seed=records.seed, corpora=records.corpora,
        sandbox=records.sandbox, freezer=records.freezer, wall_s=records.wall_s, noise=noise,
    )


def mean_or_none(values: Sequence[float]) -> float | None:
    return mean(values) if values else None
