"""Builders of plain data for tests of the decision core: contract lines, run records, measurements.

Every builder makes a *consistent* object (tps = tokens / seconds, lossless runs really lossless,
...) and takes keyword overrides, so a test changes exactly the one thing it is about.
"""

from __future__ import annotations

import statistics
from typing import Any

from evalbot.decide.contract import CompareLine, GuardLine, TauCheckLine
from evalbot.decide.measurements import ContextSummary, GuardSummary, Measurements
from evalbot.decide.noise import NoiseFloor
from evalbot.decide.records import RunRecord
from evalbot.settings import Settings

NONCE = "feedfacecafebeef"


def tau_line(
    *, ctx: int = 4096, new_tokens: int = 16, ar_tps: float = 90.0, dspark_tps: float = 80.0, reps: int = 3,
    tau: float = 2.0, lossy_runs: int = 0, nonce: str = NONCE, **overrides: Any,
) -> TauCheckLine:
    ar_tokens = [(ctx + 31 * i) % 997 for i in range(new_tokens)]
    streams = [list(ar_tokens) for _ in range(reps)]
    for i in range(lossy_runs):
        streams[i][new_tokens // 2] += 1
    ar_s = new_tokens / ar_tps
    dspark_s = [new_tokens / dspark_tps] * reps
    tps_runs = [new_tokens / s for s in dspark_s]
    hist = [0] * 8
    low = int(tau)
    hist[low] = round((1 - (tau - low)) * 100)
    if low + 1 < len(hist):
        hist[low + 1] = round((tau - low) * 100)
    fields: dict[str, Any] = dict(
        schema="dspark-harness/1", nonce=nonce, kind="tau_check", profile="gpu", prompt="prose",
        prompt_sha256="ab" * 32, ctx=ctx, new_tokens=new_tokens, ar_tps=ar_tps,
        dspark_tps=statistics.median(tps_runs), dspark_tps_runs=tps_runs, prefill_tps=10000.0,
        tau=sum(k * c for k, c in enumerate(hist)) / sum(hist), block_size=7, accept_hist=hist,
        lossless=lossy_runs == 0, lossless_runs=reps - lossy_runs, runs=reps, ar_tokens=ar_tokens,
        dspark_tokens=streams, ar_decode_s=ar_s, dspark_decode_s=dspark_s, model_sha256="11" * 32,
        drafter_sha256="22" * 32, device="NVIDIA H200", torch="2.13.0", triton="3.4.0",
    )
    fields.update(overrides)
    return TauCheckLine.model_validate(fields)


def guard_line(
    *, guard: str = "qwen3-0.6b-shape", ctx: int = 16384, decode_tps: float = 400.0, prefill_tps: float = 20000.0,
    reps: int = 5, nonce: str = NONCE, **overrides: Any,
) -> GuardLine:
    fields: dict[str, Any] = dict(
        schema="dspark-harness/1", nonce=nonce, kind="guard", guard=guard, ctx=ctx, decode_tps=decode_tps,
        prefill_tps=prefill_tps, reps=reps, decode_tps_reps=[decode_tps] * reps, prefill_tps_reps=[prefill_tps] * reps,
    )
    fields.update(overrides)
    return GuardLine.model_validate(fields)


def compare_line(*, top1: float = 1.0, kl: float = 0.0, positions: int = 512, ppl: float = 3.2) -> CompareLine:
    return CompareLine.model_validate(dict(
        schema="dspark-harness/1", nonce=NONCE, kind="compare", positions=positions, top1=top1, kl=kl,
        ppl_main=ppl, ppl_pr=ppl,
    ))


def record(program: str, ref: str, round: int, lines: list, wall_s: float = 100.0) -> RunRecord:
    return RunRecord(round=round, ref=ref, program=program, nonce=NONCE, argv=["python"], wall_s=wall_s,  # type: ignore[arg-type]
                     returncode=0, lines=lines)


def noise(value: float = 0.01, *, calibrated: bool = False, **per_metric: float) -> NoiseFloor:
    floor = NoiseFloor.default("box-1", "gpu", value).model_copy(update={"calibrated": calibrated, **per_metric})
    return floor


def context(
    *, ctx: int = 4096, speedups: list[float] | None = None, ar_ratios: list[float] | None = None,
    pr_tau: float | None = 2.0, main_tau: float | None = 2.0, runs: int = 9, lossless: int | None = None,
    main_dspark: float = 80.0, main_ar: float = 90.0,
) -> ContextSummary:
    speedups = [1.0, 1.0, 1.0] if speedups is None else speedups
    ar_ratios = [1.0] * len(speedups) if ar_ratios is None else ar_ratios
    return ContextSummary(
        prompt="prose", ctx=ctx, new_tokens=128, block_size=7,
        pr_dspark_tps=main_dspark * statistics.median(speedups) if speedups else None, main_dspark_tps=main_dspark,
        dspark_ratios=speedups, pr_ar_tps=main_ar * statistics.median(ar_ratios) if ar_ratios else None,
        main_ar_tps=main_ar, ar_ratios=ar_ratios, pr_prefill_tps=10000.0, main_prefill_tps=10000.0,
        pr_tau=pr_tau, main_tau=main_tau, pr_runs=runs, pr_lossless_runs=runs if lossless is None else lossless,
        main_runs=runs, main_lossless_runs=runs, ar_matches_main=True, pr_ar_stable=True,
    )


def guard(
    name: str = "qwen3-0.6b-shape", *, decode: list[float] | None = None, prefill: list[float] | None = None
) -> GuardSummary:
    decode = [1.0, 1.0, 1.0] if decode is None else decode
    prefill = [1.0, 1.0, 1.0] if prefill is None else prefill
    return GuardSummary(
        guard=name, ctx=16384, pr_decode_tps=400.0 * (statistics.median(decode) if decode else 1),
        main_decode_tps=400.0, pr_prefill_tps=20000.0 * (statistics.median(prefill) if prefill else 1),
        main_prefill_tps=20000.0, decode_ratios=decode, prefill_ratios=prefill,
    )


def measurements(
    speedups: list[float] | None = None, *, contexts: list[ContextSummary] | None = None,
    guards: list[GuardSummary] | None = None, compare: CompareLine | None | str = "default",
    noise_floor: NoiseFloor | None = None, **overrides: Any,
) -> Measurements:
    """A passing-everything measurement set whose DSpark speedup per round is `speedups`."""
    speedups = [1.0, 1.0, 1.0] if speedups is None else speedups
    if contexts is None:
        contexts = [context(speedups=speedups)]
    m = Measurements(
        profile="gpu", rounds=len(speedups), requested_reps=3, contexts=contexts,
        guards=[guard("qwen3-0.6b-shape"), guard("llama-3.2-1b-shape")] if guards is None else guards,
        speedup_rounds=speedups, compare=compare_line() if compare == "default" else compare,  # type: ignore[arg-type]
        device="NVIDIA H200", torch="2.13.0", triton="3.4.0", model_sha256="11" * 32, drafter_sha256="22" * 32,
        main_drafter_sha256="22" * 32, noise=noise_floor or noise(),
    )
    return m.model_copy(update=overrides)


def settings(**overrides: Any) -> Settings:
    return Settings.model_validate(overrides)
