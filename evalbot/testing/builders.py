"""Builders of plain data for tests of the decision core: campaign records, measurements, outcomes.

Every builder makes a *consistent* object (the same windows for both refs of a round, token counts as
asked, verified streams really verified, ...) and takes keyword overrides, so a test changes exactly
the one thing it is about.
"""

from __future__ import annotations

import math
import statistics
from typing import Any

from evalbot.decide.accuracy import AccuracySummary
from evalbot.decide.measurements import CellSummary, GuardSummary, Measurements, RoundSummary, Timed
from evalbot.decide.noise import NoiseFloor
from evalbot.decide.records import Generation, ProcessInfo, Records, Reported, StopReason, Verification, WindowRef
from evalbot.settings import Settings


def noise(value: float = 0.01, *, calibrated: bool = False, **per_metric: float) -> NoiseFloor:
    floor = NoiseFloor.default("box-1", "gpu", value, engine="e" * 64)
    return floor.model_copy(update={"source": "calibration" if calibrated else "default", **per_metric})


def accuracy(*, top1: float = 1.0, kl: float = 0.0, positions: int = 1024, ppl: float = 3.2) -> AccuracySummary:
    return AccuracySummary(positions=positions, top1=top1, kl_mean=kl, kl_percentiles={"p50": kl, "p90": kl, "p99": kl},
                           kl_max=kl, kl_histogram=[positions, 0, 0, 0, 0, 0, 0, 0], ppl_main=ppl, ppl_pr=ppl)


def timed(ratios: list[float], main_s: float = 1.0) -> list[Timed]:
    """Per round main took main_s and the PR main_s / ratio (one process a side)."""
    return [Timed(round=i, main_process=0, pr_process=0, main_s=main_s, pr_s=main_s / r) for i, r in enumerate(ratios)]


def cell(
    *, corpus: str = "prose", ctx: int = 4096, speedups: list[float] | None = None, ar_ratios: list[float] | None = None,
    streams: int = 9, verified: int | None = None, main_dspark: float = 80.0, main_ar: float = 90.0,
    pr_tau: float | None = 2.0, main_tau: float | None = 2.0,
) -> CellSummary:
    speedups = [1.0, 1.0, 1.0] if speedups is None else speedups
    ar_ratios = [1.0] * len(speedups) if ar_ratios is None else ar_ratios
    return CellSummary(
        corpus=corpus, ctx=ctx, new_tokens=256, block_size=7,
        pr_dspark_tps=main_dspark * statistics.median(speedups) if speedups else None, main_dspark_tps=main_dspark,
        dspark_ratios=speedups, pr_ar_tps=main_ar * statistics.median(ar_ratios) if ar_ratios else None,
        main_ar_tps=main_ar, ar_ratios=ar_ratios, pr_reported_dspark_tps=main_dspark * 1.1,
        main_reported_dspark_tps=main_dspark * 1.1, pr_reported_ar_tps=main_ar * 1.1, main_reported_ar_tps=main_ar * 1.1,
        pr_tau=pr_tau, main_tau=main_tau, pr_streams=streams, pr_verified=streams if verified is None else verified,
        dspark_timed=timed(speedups), ar_timed=timed(ar_ratios), pr_tokens_verified=256 * streams, main_streams=streams, main_verified=streams, ar_compared=len(ar_ratios), ar_equal=len(ar_ratios),
        pr_worst_gap=2.5 if verified is not None and verified < streams else 0.0,  # a wrong draft: logits below
    )


def guard(name: str = "qwen3-0.6b-shape", *, generation: list[float] | None = None,
          prefill: list[float] | None = None) -> GuardSummary:
    generation = [1.0, 1.0, 1.0] if generation is None else generation
    prefill = [1.0, 1.0, 1.0] if prefill is None else prefill
    return GuardSummary(
        guard=name, ctx=16384, new_tokens=64,
        pr_generation_tps=200.0 * (statistics.median(generation) if generation else 1), main_generation_tps=200.0,
        pr_prefill_tps=50000.0 * (statistics.median(prefill) if prefill else 1), main_prefill_tps=50000.0,
        generation_ratios=generation, prefill_ratios=prefill, generation_timed=timed(generation, 0.5),
        prefill_timed=timed(prefill, 0.3), pr_streams=2 * len(generation), pr_verified=2 * len(generation),
    )


def measurements(
    speedups: list[float] | None = None, *, cells: list[CellSummary] | None = None, groups: list[int] | None = None,
    guards: list[GuardSummary] | None = None, accuracy_summary: AccuracySummary | None | str = "default",
    noise_floor: NoiseFloor | None = None, processes_per_ref: int = 1, **overrides: Any,
) -> Measurements:
    """A passing-everything measurement set whose DSpark speedup per round is `speedups`. One process per
    ref unless asked (then every round is a pairing of its own: `groups` says which)."""
    speedups = [1.0, 1.0, 1.0] if speedups is None else speedups
    groups = list(range(len(speedups))) if groups is None else groups
    if cells is None:
        cells = [cell(speedups=speedups)]
    n_ar = min((len(c.ar_ratios) for c in cells), default=0)
    ar_rounds = [math.exp(sum(math.log(c.ar_ratios[i]) for c in cells) / len(cells)) for i in range(n_ar)]
    m = Measurements(
        profile="gpu", rounds=len(speedups), processes_per_ref=processes_per_ref, cells=cells,
        guards=[guard("qwen3-0.6b-shape"), guard("llama-3.2-1b-shape")] if guards is None else guards,
        round_summaries=[RoundSummary(round=i, pairing=g, main_process=g % processes_per_ref,
                                      pr_process=g // processes_per_ref % processes_per_ref, dspark_ratio=r,
                                      ar_ratio=ar_rounds[i] if i < n_ar else None)
                         for i, (r, g) in enumerate(zip(speedups, groups))],
        speedup_rounds=speedups, speedup_groups=groups, ar_rounds=ar_rounds[:len(speedups)],
        accuracy=accuracy() if accuracy_summary == "default" else accuracy_summary,  # type: ignore[arg-type]
        device="NVIDIA H200", torch="2.13.0", triton="3.4.0", model_sha256="11" * 32, drafter_sha256="22" * 32,
        main_drafter_sha256="22" * 32, verify_tolerance=0.05, seed=12345,
        stop=StopReason(rounds=len(speedups), reason="decided", detail="test"),
        sandbox="bubblewrap 0.8.0 (test)", freezer="SIGSTOP", wall_s=60.0, noise=noise_floor or noise(),
    )
    return m.model_copy(update=overrides)


def settings(**overrides: Any) -> Settings:
    return Settings.model_validate(overrides)


# -- campaign records ------------------------------------------------------------------------------


def generation(*, ref: str, round: int = 0, pairing: int = 0, process: int = 0, corpus: str = "code", ctx: int = 256,
               mode: str = "dspark", model: str = "main", new_tokens: int = 16, bot_s: float = 1.0, offset: int = 0,
               tokens: list[int] | None = None, reported: Reported | None = None, seq: int = 0) -> Generation:
    sha = f"{corpus}-{offset}-{ctx}".ljust(64, "0")[:64]
    return Generation(
        round=round, pairing=pairing, ref=ref, process=process, corpus=corpus, ctx=ctx, mode=mode, model=model,  # type: ignore[arg-type]
        window=WindowRef(corpus=corpus, offset=offset, length=ctx, sha256=sha), new_tokens=new_tokens,
        tokens=list(range(new_tokens)) if tokens is None else tokens, bot_s=bot_s, seq=seq,
        reported=reported or Reported(prefill_s=0.1 * bot_s, decode_s=0.8 * bot_s, tau=2.0, accept_hist=[0, 4, 4, 0, 0, 0, 0, 0]),
    )


def records(pr_seconds: list[float], *, main_s: float = 1.0, ar_pr_seconds: list[float] | None = None,
            cells: tuple[tuple[str, int], ...] = (("code", 256), ("prose", 256)), processes: int = 2,
            **overrides: Any) -> Records:
    """Rounds of a campaign in which, per round, the PR took pr_seconds[r] where main took main_s (DSpark),
    on every cell; AR likewise with ar_pr_seconds (default: main's time). Every DSpark stream verified."""
    ar_pr_seconds = [main_s] * len(pr_seconds) if ar_pr_seconds is None else ar_pr_seconds
    gens, verifs, seq = [], [], 0
    pairings = [(i, (i + k) % processes) for k in range(processes) for i in range(processes)]
    for r, (pr_s, pr_ar) in enumerate(zip(pr_seconds, ar_pr_seconds)):
        pi = r % len(pairings)
        for corpus, ctx in cells:
            for mode, t in (("dspark", pr_s), ("ar", pr_ar)):
                off = 1000 * (seq + 1)
                for ref, secs, proc in (("base", main_s, pairings[pi][0]), ("head", t, pairings[pi][1])):
                    seq += 1
                    gens.append(generation(ref=ref, round=r, pairing=pi, process=proc, corpus=corpus, ctx=ctx, mode=mode,
                                           bot_s=secs, offset=off, seq=seq))
                    if mode == "dspark":
                        verifs.append(Verification(ref=ref, process=proc, round=r, corpus=corpus, ctx=ctx,  # type: ignore[arg-type]
                                                   window_sha256=gens[-1].window.sha256, tokens=16, tolerance=1e-3))
    fields: dict[str, Any] = dict(
        profile="cpu", processes_per_ref=processes, seed=7, generations=gens, verifications=verifs,
        processes=[ProcessInfo(ref=ref, index=i, startup_s=1.0, model_sha256="11" * 32, drafter_sha256="22" * 32,  # type: ignore[arg-type]
                               device="cpu", torch="2.13.0", triton="3.9.0", block_size=7)
                   for ref in ("base", "head") for i in range(processes)],
        stop=StopReason(rounds=len(pr_seconds), reason="decided"), wall_s=30.0, sandbox="OFF (test)", freezer="SIGSTOP",
    )
    fields.update(overrides)
    return Records(**fields)
