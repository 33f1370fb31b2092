"""Every layer of the decode/verify step in one launch: a persistent kernel.

At batch 1 the bundled model's step is launch-bound, not bandwidth-bound: a layer is six kernels of
3-7 us each (QKV+RoPE, attention splits, their combine, o-proj, gate/up, down) against ~1.6 us of
weight traffic (docs/perf.md). Here one program per SM walks the step's phases in order:

    g = 0                 the embedding gather (one tile per row)
    g = 1 + 6*layer + p   p = 0 QKV+RoPE+cache write, 1 attention splits, 2 their combine,
                          3 o-proj + residual, 4 RMSNorm + gate/up + SwiGLU, 5 down-proj + residual

and does its share of phase g's tiles once every tile of phase g-1 is done. A phase's tiles are the
very functions the separate kernels run (`linear_tile`, `qkv_rope_tile`, `attn_split_tile`,
`attn_combine_tile`, `embedding_row`): one source, the same fixed tile shapes and K order, so a row's
result still never depends on how many rows share the step (batch invariance, what keeps DSpark
lossless). The LM head and the greedy commit stay separate kernels after it. Its linears walk K in one
slice and normalise x in every step: a table entry's k_split (kernels/tuning.py) and a norm prepared by x's
producer (kernels/fused_linear.NormAhead, DSPARK_NORM_AHEAD) apply to the separate kernels only, so there the
two steps round those sums differently (tests/gpu and tests/test_model.py compare them within a tolerance).

Synchronisation: counter g (int32, global memory) counts phase g's finished tiles. A tile's program
waits for all its threads' stores (CTA barrier), then adds 1 with release semantics; a program
starting phase g polls counter g-1 with acquire semantics until it holds phase g-1's tile count. Data
another program wrote in this launch is loaded with the ".cg" modifier (L2, never a stale L1 line).
Before polling, a program asks L2 for its first tile's weights, so the weight traffic overlaps the
wait. The last program to finish resets the counters for the next launch.

What it needs: every program resident at once (grid = the SM count, one program each; the kernel
fits one per SM). Every wait is bounded: a program that polls MAX_SPIN times gives up, sets the error
word and runs on, so a bug shows as an error (`check_persistent`) instead of a hung GPU.

Under TRITON_INTERPRET=1 programs run one after another, so there the kernel is launched once per
phase (SYNC=False): the same tile code, with kernel boundaries as the barriers (tests/test_model.py).
"""

from __future__ import annotations

import math
import os

import torch
import triton
import triton.language as tl

from kernels.common import UPCAST_DOT, pdl_args, pdl_start, prefetch_env_on, prefetch_lines, unroll_norm
from kernels.decode_attention import LOG2E, attn_combine_tile, attn_prefetch, attn_split_tile
from kernels.embedding import embedding_row
from kernels.fused_linear import BLOCK_M, linear_prefetch, linear_tile, store_tile
from kernels.qkv_rope import qkv_prefetch, qkv_rope_tile
from kernels.tuning import config_for

PHASES_PER_LAYER = 6
MAX_SPIN = 1 << 20  # polls before a wait gives up (~1 s): an error, never a hang


def phase_count(n_layers: int) -> int:
    return 1 + PHASES_PER_LAYER * n_layers


@triton.jit
def _wait(cnt_ptr, expect, ok, err_ptr, SYNC: tl.constexpr, MAX_SPIN: tl.constexpr):
    """Poll counter `cnt_ptr` (acquire) until it reaches `expect`; False once any wait of this program gave up."""
    if SYNC:
        if ok:
            it = 0
            while (tl.atomic_add(cnt_ptr, 0, sem="acquire", scope="gpu") < expect) & (it < MAX_SPIN):
                it += 1
            if it >= MAX_SPIN:
                tl.atomic_xchg(err_ptr, 1)
                ok = it < 0
        tl.debug_barrier()
    return ok


@triton.jit
def _signal(cnt_ptr, SYNC: tl.constexpr):
    """One tile done: every thread's stores first (CTA barrier), then +1 with release semantics."""
    if SYNC:
        tl.debug_barrier()
        tl.atomic_add(cnt_ptr, 1, sem="release", scope="gpu")


@triton.jit(do_not_specialize=["M", "g_first", "g_last", "n_programs"])
def _persistent_step_kernel(
    tok_ptr, embed_ptr, pos_ptr, start_ptr, end_ptr,
    x_ptr, q_ptr, a_ptr, h_ptr, part_ptr, lse_ptr, capture_ptr, slot_ptr, cnt_ptr, err_ptr,
    attn_norm_ptr, wqkv_ptr, bqkv_ptr, qn_ptr, kn_ptr, cos_ptr, sin_ptr, k_ptr, v_ptr,
    wo_ptr, ffn_norm_ptr, wg_ptr, wu_ptr, wd_ptr,
    M, D, F, H, KVH, CAP, layer_cache_stride, cache_head_stride, capture_slot_stride, capture_row_stride, n_splits, eps,
    scale_log2,
    g_first, g_last, n_programs,
    HD: tl.constexpr, G: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_QKNORM: tl.constexpr, IEEE: tl.constexpr,
    UPCAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_D: tl.constexpr,
    QKV_BK: tl.constexpr, QKV_SUB: tl.constexpr, SPLIT: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_KV: tl.constexpr,
    BLOCK_S: tl.constexpr, O_BN: tl.constexpr, O_BK: tl.constexpr, GU_BN: tl.constexpr, GU_BK: tl.constexpr,
    DN_BN: tl.constexpr, DN_BK: tl.constexpr,
    QKV_UNROLL: tl.constexpr, GU_UNROLL: tl.constexpr, EARLY: tl.constexpr,
    QKV_LINES: tl.constexpr, ATTN_LINES: tl.constexpr, O_LINES: tl.constexpr, GU_LINES: tl.constexpr,
    DN_LINES: tl.constexpr, ELEM_BYTES: tl.constexpr,
    SYNC: tl.constexpr, MAX_SPIN: tl.constexpr, USE_PDL: tl.constexpr, WAIT: tl.constexpr, WORK: tl.constexpr,
):
    pid = tl.program_id(0)
    pdl_start(USE_PDL)
    WAITS: tl.constexpr = SYNC and WAIT  # WAIT / WORK off: bench probes only (wrong results)
    QD = H * HD
    NQKV = (H + 2 * KVH) * HD
    ok = pid >= 0
    for g in range(g_first, g_last + 1):
        if g == 0:
            for item in range(pid, M, n_programs):
                if WORK:
                    embedding_row(item, tok_ptr, embed_ptr, x_ptr, D, BLOCK_D)
                _signal(cnt_ptr, SYNC)
        else:
            layer = (g - 1) // 6
            p = (g - 1) % 6
            l64 = layer.to(tl.int64)
            k_l = k_ptr + l64 * layer_cache_stride
            v_l = v_ptr + l64 * layer_cache_stride
            if p == 0:  # RMSNorm + QKV + RoPE + cache write
                n = (H + 2 * KVH) * QKV_SUB
                w = wqkv_ptr + l64 * NQKV * D
                if QKV_LINES > 0:
                    if pid < n:
                        qkv_prefetch(pid, w, D, HD, QKV_SUB, QKV_LINES, ELEM_BYTES, SYNC)
                ok = _wait(cnt_ptr + g - 1, tl.where(layer == 0, M, tl.cdiv(D, DN_BN)), ok, err_ptr, WAITS, MAX_SPIN)
                for item in range(pid, n, n_programs):
                    if WORK:
                        qkv_rope_tile(item, x_ptr, D, attn_norm_ptr + l64 * D, w, bqkv_ptr + l64 * NQKV,
                                      qn_ptr + l64 * HD, kn_ptr + l64 * HD, cos_ptr, sin_ptr, pos_ptr,
                                      q_ptr, k_l, v_l, cache_head_stride, M, D, eps, H, KVH,
                                      HD, HAS_BIAS, HAS_QKNORM, IEEE, UPCAST, BLOCK_M, QKV_BK, QKV_SUB, ".cg", QKV_UNROLL, EARLY)
                    _signal(cnt_ptr + g, SYNC)
            elif p == 1:  # attention: one tile per (KV head, split)
                n = KVH * n_splits
                if ATTN_LINES > 0:
                    if pid < n:
                        attn_prefetch(pid // n_splits, pid % n_splits, k_l, v_l, CAP, cache_head_stride, HD, SPLIT,
                                      ATTN_LINES, ELEM_BYTES, SYNC)
                ok = _wait(cnt_ptr + g - 1, (H + 2 * KVH) * QKV_SUB, ok, err_ptr, WAITS, MAX_SPIN)
                for item in range(pid, n, n_programs):
                    if WORK:
                        attn_split_tile(item // n_splits, item % n_splits, q_ptr, k_l, v_l, start_ptr, end_ptr, part_ptr,
                                        lse_ptr, M, H, CAP, cache_head_stride, n_splits, scale_log2,
                                        G, HD, SPLIT, BLOCK_R, BLOCK_KV, IEEE, UPCAST, ".cg")
                    _signal(cnt_ptr + g, SYNC)
            elif p == 2:  # the splits combined: one tile per (row, query head)
                ok = _wait(cnt_ptr + g - 1, KVH * n_splits, ok, err_ptr, WAITS, MAX_SPIN)
                for item in range(pid, M * H, n_programs):
                    if WORK:
                        attn_combine_tile(item // H, item % H, part_ptr, lse_ptr, a_ptr, H, n_splits, HD, BLOCK_S, ".cg", 0, 0)
                    _signal(cnt_ptr + g, SYNC)
            elif p == 3:  # o-proj + residual, in place on x (a tile reads and writes only its own columns)
                n = tl.cdiv(D, O_BN)
                w = wo_ptr + l64 * D * QD
                if O_LINES > 0:
                    if pid < n:
                        linear_prefetch(pid, w, w, D, QD, False, O_BN, O_LINES, ELEM_BYTES, SYNC)
                ok = _wait(cnt_ptr + g - 1, M * H, ok, err_ptr, WAITS, MAX_SPIN)
                for item in range(pid, n, n_programs):
                    if WORK:
                        acc = linear_tile(item, a_ptr, QD, w, w, w, w, x_ptr, D, M, D, QD, eps,
                                          False, False, True, False, IEEE, UPCAST, BLOCK_M, O_BN, O_BK, ".cg", 0, EARLY)
                        store_tile(x_ptr, D, acc, item, M, D, BLOCK_M, O_BN)
                    _signal(cnt_ptr + g, SYNC)
            elif p == 4:  # RMSNorm + gate/up + SwiGLU
                n = tl.cdiv(F, GU_BN)
                w = wg_ptr + l64 * F * D
                u = wu_ptr + l64 * F * D
                if GU_LINES > 0:
                    if pid < n:
                        linear_prefetch(pid, w, u, F, D, True, GU_BN, GU_LINES, ELEM_BYTES, SYNC)
                ok = _wait(cnt_ptr + g - 1, tl.cdiv(D, O_BN), ok, err_ptr, WAITS, MAX_SPIN)
                for item in range(pid, n, n_programs):
                    if WORK:
                        acc = linear_tile(item, x_ptr, D, ffn_norm_ptr + l64 * D, w, u, w, x_ptr, D, M, F, D, eps,
                                          True, True, False, False, IEEE, UPCAST, BLOCK_M, GU_BN, GU_BK, ".cg", GU_UNROLL, EARLY)
                        store_tile(h_ptr, F, acc, item, M, F, BLOCK_M, GU_BN)
                    _signal(cnt_ptr + g, SYNC)
            else:  # down-proj + residual, in place on x; the residual also to its capture slot, if any
                n = tl.cdiv(D, DN_BN)
                w = wd_ptr + l64 * D * F
                if DN_LINES > 0:
                    if pid < n:
                        linear_prefetch(pid, w, w, D, F, False, DN_BN, DN_LINES, ELEM_BYTES, SYNC)
                ok = _wait(cnt_ptr + g - 1, tl.cdiv(F, GU_BN), ok, err_ptr, WAITS, MAX_SPIN)
                slot = tl.load(slot_ptr + layer)
                for item in range(pid, n, n_programs):
                    if WORK:
                        acc = linear_tile(item, h_ptr, F, w, w, w, w, x_ptr, D, M, D, F, eps,
                                          False, False, True, False, IEEE, UPCAST, BLOCK_M, DN_BN, DN_BK, ".cg", 0, EARLY)
                        store_tile(x_ptr, D, acc, item, M, D, BLOCK_M, DN_BN)
                        if slot >= 0:
                            store_tile(capture_ptr + slot * capture_slot_stride, capture_row_stride, acc, item, M, D, BLOCK_M, DN_BN)
                    _signal(cnt_ptr + g, SYNC)
    if SYNC:  # the last program out resets every counter (and its own) for the next launch
        tl.debug_barrier()
        done = tl.atomic_add(cnt_ptr + g_last + 1, 1, sem="acq_rel", scope="gpu")
        if done == n_programs - 1:
            for i0 in range(0, g_last + 2, 256):
                offs = i0 + tl.arange(0, 256)
                tl.store(cnt_ptr + offs, tl.zeros([256], dtype=tl.int32), mask=offs < g_last + 2)


class PersistentBuffers:
    """What the persistent step writes besides the cache and the logits: the residual stream, q, the
    attention output, the SwiGLU output, the phase counters and the error word; sized once per StepIO
    so a CUDA graph can capture the launch."""

    def __init__(self, config, rows: int, capture_layers: tuple[int, ...], device, dtype):
        c = config
        self.x = torch.zeros((rows, c.dim), dtype=torch.float32, device=device)
        self.q = torch.zeros((rows, c.q_dim), dtype=dtype, device=device)
        self.a = torch.zeros((rows, c.q_dim), dtype=dtype, device=device)
        self.h = torch.zeros((rows, c.ffn_dim), dtype=dtype, device=device)
        self.counters = torch.zeros(phase_count(c.n_layers) + 1, dtype=torch.int32, device=device)
        self.error = torch.zeros(1, dtype=torch.int32, device=device)
        slots = [-1] * c.n_layers
        for k, layer in enumerate(capture_layers):
            slots[layer] = k
        self.slots = torch.tensor(slots, dtype=torch.int32, device=device)


def check_persistent(bufs: PersistentBuffers) -> None:
    """Raise if a wait of the persistent step ever gave up (a host read: call it outside capture)."""
    if int(bufs.error.item()):
        raise RuntimeError("the persistent step kernel timed out waiting for a phase: its results are wrong")


def persistent_step_triton(model, io, m: int, cache, bufs: PersistentBuffers) -> torch.Tensor:
    """Rows 0..m-1 of `io` through every layer of `model` (its `stacked` weights); returns the final
    residual stream bufs.x[:m] (float32), ready for the LM head. Capture slots get each capture
    layer's residual, as in `Transformer.step`."""
    c = model.config
    sw = model.stacked
    dev = model.device
    hd, h, kvh, d, f = c.head_dim, c.n_heads, c.n_kv_heads, c.dim, c.ffn_dim
    g_per_kv = h // kvh
    ws = io.workspace
    split, ns = ws.split, ws.n_splits
    cap = cache.k.shape[3]
    if ns * split < cap:
        raise ValueError("attention workspace is smaller than the cache")
    attn_cfg = config_for("attn", h, hd)
    block_kv = min(attn_cfg.block_k, split)
    qkv_cfg = config_for("qkv", sw["wqkv"].shape[1], d)
    sub = 1 if (c.qk_norm or not qkv_cfg.block_n) else max(1, (hd // 2) // max(qkv_cfg.block_n, 16))
    o_cfg = config_for("linear", d, c.q_dim)
    gu_cfg = config_for("swiglu", f, d)
    dn_cfg = config_for("linear", d, f)
    eb = sw["wqkv"].element_size()
    on_gpu = dev.type == "cuda"
    pdl = pdl_args(io.tokens)
    lines = prefetch_lines if on_gpu and prefetch_env_on() else (lambda n_bytes: 0)  # DSPARK_L2_PREFETCH=0: none
    n_layers = c.n_layers
    kw = dict(
        HD=hd, G=g_per_kv, HAS_BIAS="bqkv" in sw, HAS_QKNORM=c.qk_norm, IEEE=sw["wqkv"].dtype == torch.float32,
        UPCAST=UPCAST_DOT, BLOCK_M=BLOCK_M, BLOCK_D=triton.next_power_of_2(d),
        QKV_BK=qkv_cfg.block_k, QKV_SUB=sub, SPLIT=split, BLOCK_R=max(16, triton.next_power_of_2(ws.max_rows * g_per_kv)),
        BLOCK_KV=block_kv, BLOCK_S=triton.next_power_of_2(ns), O_BN=o_cfg.block_n, O_BK=o_cfg.block_k,
        GU_BN=gu_cfg.block_n, GU_BK=gu_cfg.block_k, DN_BN=dn_cfg.block_n, DN_BK=dn_cfg.block_k,
        QKV_UNROLL=unroll_norm(d, qkv_cfg.block_k), GU_UNROLL=unroll_norm(d, gu_cfg.block_k),
        EARLY=True,  # the persistent step is only the default where every layer is small (latency-bound)
        QKV_LINES=lines((hd // 2 // sub) * d * eb), ATTN_LINES=lines(split * hd * cache.k.element_size()),
        O_LINES=lines(o_cfg.block_n * c.q_dim * eb), GU_LINES=lines(gu_cfg.block_n * d * eb),
        DN_LINES=lines(dn_cfg.block_n * f * eb), ELEM_BYTES=eb, MAX_SPIN=MAX_SPIN,
    )
    dummy = sw["wqkv"]
    args = (
        io.tokens, model.embed, io.positions, io.kv_start, io.kv_end,
        bufs.x, bufs.q, bufs.a, bufs.h, ws.part, ws.lse, io.capture if io.capture.numel() else bufs.x, bufs.slots, bufs.counters, bufs.error,
        sw["attn_norm"], sw["wqkv"], sw.get("bqkv", dummy), sw.get("q_norm", sw["attn_norm"]), sw.get("k_norm", sw["attn_norm"]),
        model.cos, model.sin, cache.k, cache.v,
        sw["wo"], sw["ffn_norm"], sw["w_gate"], sw["w_up"], sw["w_down"],
        m, d, f, h, kvh, cap, cache.k.stride(0), cache.k.stride(2), io.capture.stride(0) if io.capture.numel() else 0,
        io.capture.stride(1) if io.capture.numel() else 0, ns,
        c.norm_eps, (1.0 / math.sqrt(hd)) * LOG2E,
    )
    assert cache.k.shape[1] == 1 and cache.k.is_contiguous() and cache.v.is_contiguous()
    if on_gpu:
        n_prog = torch.cuda.get_device_properties(dev).multi_processor_count
        warps, stages, probe = launch_shape()
        _persistent_step_kernel[(n_prog,)](*args, 0, phase_count(n_layers) - 1, n_prog, SYNC=True,
                                           WAIT=probe != "nowork-nowait" and probe != "nowait", WORK=not probe.startswith("nowork"),
                                           num_warps=warps, num_stages=stages, **kw, **pdl)
    else:  # the interpreter runs programs one after another: one launch per phase
        counts = _phase_tiles(m, c, sub, ns, kw)
        for g in range(phase_count(n_layers)):
            n = counts[0 if g == 0 else 1 + (g - 1) % PHASES_PER_LAYER]
            _persistent_step_kernel[(n,)](*args, g, g, n, SYNC=False, USE_PDL=False, WAIT=True, WORK=True, **kw)
    return bufs.x[:m]


def launch_shape() -> tuple[int, int, str]:
    """(num_warps, num_stages, probe) of the launch. Bench switches (bench/persistent_probe.py), read when a
    step is launched or captured: DSPARK_PERSISTENT_WARPS, DSPARK_PERSISTENT_STAGES, and
    DSPARK_PERSISTENT_PROBE = nowait (no waits: the tiles' own time) | nowork (no tiles: the waits' own
    time) | nowork-nowait (neither), each of which computes wrong results and is for timing only."""
    probe = os.environ.get("DSPARK_PERSISTENT_PROBE", "")
    if probe not in ("", "nowait", "nowork", "nowork-nowait"):
        raise ValueError(f"DSPARK_PERSISTENT_PROBE={probe!r}: expected nowait, nowork or nowork-nowait")
    return int(os.environ.get("DSPARK_PERSISTENT_WARPS", "4")), int(os.environ.get("DSPARK_PERSISTENT_STAGES", "2")), probe


def _phase_tiles(m: int, c, sub: int, n_splits: int, kw: dict) -> list[int]:
    """Tiles of the embedding phase, then of each layer phase p = 0..5."""
    return [m, (c.n_heads + 2 * c.n_kv_heads) * sub, c.n_kv_heads * n_splits, m * c.n_heads,
            triton.cdiv(c.dim, kw["O_BN"]), triton.cdiv(c.ffn_dim, kw["GU_BN"]), triton.cdiv(c.dim, kw["DN_BN"])]
