"""Attention input for the decode/verify step, one launch per layer:

    q, k, v = norm(x) @ Wqkv^T (+ bias);  per-head RMSNorm of q, k (Qwen3);  RoPE on q, k;
    k, v written into the KV cache at each row's position;  q returned.

One program owns one head (q heads, then k heads, then v heads) and computes its two rotate-half
halves as two accumulators, so RoPE happens in registers. Fixed tiles, fixed K order: batch-invariant
like every step kernel (see fused_linear.py).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.common import (UPCAST_DOT, halves_back, l2_prefetch, latency_bound, mma3, mma_xw, pdl_args, pdl_start,
                            prefetch_lines, prefetch_on, stamp, stamp_now, trace_args, unroll_norm)

from kernels.fused_linear import BLOCK_M, NormAhead, ahead_scale, norm_input, slices_x_block, walk_operand
from kernels.prefill import rope_rotate
from kernels.rmsnorm import rmsnorm_reference
from kernels.tuning import config_for, k_slices, swapped


def qkv_rope_reference(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    wqkv: torch.Tensor,
    bqkv: torch.Tensor | None,
    q_norm: torch.Tensor | None,
    k_norm: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
    eps: float,
    ahead: NormAhead | None = None,
    slots: torch.Tensor | None = None,
) -> torch.Tensor:
    """Returns q [M, n_heads, head_dim] (float32 math, cast to the cache dtype); writes k/v rows. ahead: x's
    norm prepared by x's producer (fused_linear.NormAhead). slots: the cache slot of each row's k/v where it
    is not the row's position (a token tree's rows: RoPE at base + depth, slot base + row)."""
    m = x.shape[0]
    hd = k_cache.shape[-1]
    cdt = wqkv.dtype
    if ahead is not None:
        y = (ahead.operand(x, norm_weight, wqkv).float() @ wqkv.float().t()) * ahead.rstd_reference(x.shape[-1], eps)[:, None]
    else:
        y = rmsnorm_reference(x, norm_weight, eps, out_dtype=cdt).float() @ wqkv.float().t()
    if bqkv is not None:
        y = y + bqkv.float()
    q = y[:, : n_heads * hd].reshape(m, n_heads, hd)
    k = y[:, n_heads * hd : (n_heads + n_kv_heads) * hd].reshape(m, n_kv_heads, hd)
    v = y[:, (n_heads + n_kv_heads) * hd :].reshape(m, n_kv_heads, hd)
    if q_norm is not None:
        q = rmsnorm_reference(q, q_norm, eps, out_dtype=torch.float32)
        k = rmsnorm_reference(k, k_norm, eps, out_dtype=torch.float32)
    c = cos[positions][:, None, :]
    s = sin[positions][:, None, :]
    q = rope_rotate(q, c, s)
    k = rope_rotate(k, c, s)
    at = positions if slots is None else slots.to(positions.dtype)
    k_cache[:, at] = k.transpose(0, 1).to(k_cache.dtype)
    v_cache[:, at] = v.transpose(0, 1).to(v_cache.dtype)
    return q.to(k_cache.dtype)


@triton.jit
def qkv_prefetch(pid, w_ptr, K, HD: tl.constexpr, SUB: tl.constexpr, PREFETCH_LINES: tl.constexpr,
                 ELEM_BYTES: tl.constexpr, USE_PDL: tl.constexpr):
    """Ask L2 for program `pid`'s weight rows, one range per rotate-half half, before a wait."""
    HALF: tl.constexpr = HD // 2
    HB: tl.constexpr = HALF // SUB
    row0 = (pid // SUB) * HD
    part = pid % SUB
    l2_prefetch(w_ptr + (row0 + part * HB) * K, HB * K * ELEM_BYTES, PREFETCH_LINES, USE_PDL)
    l2_prefetch(w_ptr + (row0 + HALF + part * HB) * K, HB * K * ELEM_BYTES, PREFETCH_LINES, USE_PDL)


@triton.jit
def _qkv_k_block(acc1, acc2, kk, x_ptr, x_stride, rm, m_mask, rstd, norm_ptr, w_ptr, row0, rh, K, HALF: tl.constexpr,
                 IEEE: tl.constexpr, UPCAST: tl.constexpr, CACHE: tl.constexpr, xn_ptr=None, PREPARED: tl.constexpr = False):
    """One BLOCK_K step of the K walk: both rotate-half halves of a head."""
    k_mask = kk < K
    a = walk_operand(x_ptr, x_stride, rm, m_mask, kk, k_mask, K, rstd, norm_ptr, w_ptr, True, CACHE, xn_ptr, PREPARED)
    w1 = tl.load(w_ptr + (row0 + rh)[:, None] * K + kk[None, :], mask=k_mask[None, :], other=0.0)
    w2 = tl.load(w_ptr + (row0 + HALF + rh)[:, None] * K + kk[None, :], mask=k_mask[None, :], other=0.0)
    return mma_xw(a, w1, acc1, False, IEEE, UPCAST), mma_xw(a, w2, acc2, False, IEEE, UPCAST)


@triton.jit
def _qkv_walk_swapped(x_ptr, x_stride, rm, m_mask, rstd, norm_ptr, w_ptr, row0, K, HD: tl.constexpr, IEEE: tl.constexpr,
                      UPCAST: tl.constexpr, CACHE: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, xn_ptr=None,
                      PREPARED: tl.constexpr = False):
    """The K walk of a whole head as one tile of HD weight rows, the product transposed (acc [HD, BLOCK_M];
    tuning.LaunchConfig.swap_ab), then its two rotate-half halves [BLOCK_M, HD / 2]."""
    HALF: tl.constexpr = HD // 2
    rd = tl.arange(0, HD)
    rk = tl.arange(0, BLOCK_K)
    acc_t = tl.zeros([HD, BLOCK_M], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        k_mask = kk < K
        a = walk_operand(x_ptr, x_stride, rm, m_mask, kk, k_mask, K, rstd, norm_ptr, w_ptr, True, CACHE, xn_ptr, PREPARED)
        w = tl.load(w_ptr + (row0 + rd)[:, None] * K + kk[None, :], mask=k_mask[None, :], other=0.0)
        acc_t = mma_xw(a, w, acc_t, True, IEEE, UPCAST)
    return halves_back(acc_t, HALF, BLOCK_M)  # rows [0, HALF) of the head are the first half, [HALF, HD) the second


@triton.jit
def _qkv_walk_split(x_ptr, x_stride, rm, m_mask, rstd, norm_ptr, w_ptr, row0, rh, K, KS, HALF: tl.constexpr,
                    UPCAST: tl.constexpr, CACHE: tl.constexpr, BLOCK_M: tl.constexpr, HB: tl.constexpr,
                    BLOCK_K: tl.constexpr, KSPLIT: tl.constexpr, xn_ptr=None, PREPARED: tl.constexpr = False):
    """Both halves' K walks as KSPLIT slices of KS side by side (fused_linear._linear_walk_split)."""
    acc1 = tl.zeros([KSPLIT, BLOCK_M, HB], dtype=tl.float32)
    acc2 = tl.zeros([KSPLIT, BLOCK_M, HB], dtype=tl.float32)
    for k0 in range(0, KS, BLOCK_K):
        kk, k_mask, a = slices_x_block(x_ptr, x_stride, rm, m_mask, rstd, norm_ptr, w_ptr, xn_ptr, k0, K, KS, True, PREPARED,
                                       CACHE, BLOCK_K, KSPLIT)
        w1 = tl.load(w_ptr + (row0 + rh)[None, None, :] * K + kk[:, :, None], mask=k_mask[:, :, None], other=0.0)
        w2 = tl.load(w_ptr + (row0 + HALF + rh)[None, None, :] * K + kk[:, :, None], mask=k_mask[:, :, None], other=0.0)
        acc1 = mma3(a, w1, acc1, UPCAST)
        acc2 = mma3(a, w2, acc2, UPCAST)
    return tl.sum(acc1, axis=0), tl.sum(acc2, axis=0)


@triton.jit
def qkv_rope_tile(
    pid, x_ptr, x_stride, norm_ptr, w_ptr, b_ptr, qn_ptr, kn_ptr, cos_ptr, sin_ptr, pos_ptr,
    q_ptr, k_cache_ptr, v_cache_ptr, cache_head_stride,
    M, K, eps, H, KVH,
    HD: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_QKNORM: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, SUB: tl.constexpr, CACHE: tl.constexpr, UNROLL_NORM: tl.constexpr,
    EARLY: tl.constexpr, trace_ptr=None, TRACE: tl.constexpr = False, KSPLIT: tl.constexpr = 1, KS=0, xn_ptr=None,
    ss_ptr=None, P=1, BLOCK_P: tl.constexpr = 1, AHEAD: tl.constexpr = False, SWAP: tl.constexpr = False,
    slot_ptr=None, SLOTS: tl.constexpr = False,
):
    """Program `pid` = (head, part): SUB programs per head, part p owning the columns [p*HB, (p+1)*HB) of
    each rotate-half half (HB = HD/2/SUB), so RoPE's pairs (i, i + HD/2) stay in one program. CACHE: the
    load cache modifier of x, UNROLL_NORM the norm's pass unrolled or not, EARLY the positions, RoPE angles
    and bias loaded before the K walk (see fused_linear.linear_tile). TRACE: phase stamps 2 and 3
    (common.stamp). KSPLIT > 1: the K walk in KSPLIT slices of KS (_qkv_walk_split). AHEAD: x's norm prepared by
    x's producer (fused_linear.linear_tile). SWAP (SUB == 1): the head's product computed transposed
    (_qkv_walk_swapped). SLOTS: k/v stored at slot_ptr's slots instead of the rows' positions (a token tree's
    rows)."""
    HALF: tl.constexpr = HD // 2
    HB: tl.constexpr = HALF // SUB
    head = pid // SUB
    part = pid % SUB
    row0 = head * HD
    rm = tl.arange(0, BLOCK_M)
    rh = part * HB + tl.arange(0, HB)
    rk = tl.arange(0, BLOCK_K)
    m_mask = rm < M
    if EARLY:
        pos = tl.load(pos_ptr + rm, mask=m_mask, other=0)
        c = tl.load(cos_ptr + pos[:, None] * HALF + rh[None, :], mask=m_mask[:, None], other=0.0)
        s = tl.load(sin_ptr + pos[:, None] * HALF + rh[None, :], mask=m_mask[:, None], other=0.0)
        if HAS_BIAS:
            b1 = tl.load(b_ptr + row0 + rh).to(tl.float32)
            b2 = tl.load(b_ptr + row0 + HALF + rh).to(tl.float32)
    # RMSNorm's rstd first, from one pass over x (see fused_linear.py for why not inside the K walk), or after the
    # walk from the sums x's producer prepared (AHEAD)
    rstd, sums = norm_input(pid, x_ptr, x_stride, rm, m_mask, K, eps, ss_ptr, P, trace_ptr, BLOCK_M,
                            BLOCK_K, BLOCK_P, CACHE, UNROLL_NORM, AHEAD, TRACE)
    if SWAP:  # SUB == 1: the whole head
        acc1, acc2 = _qkv_walk_swapped(x_ptr, x_stride, rm, m_mask, rstd, norm_ptr, w_ptr, row0, K, HD, IEEE, UPCAST, CACHE,
                                       BLOCK_M, BLOCK_K, xn_ptr, AHEAD)
    elif KSPLIT > 1:
        acc1, acc2 = _qkv_walk_split(x_ptr, x_stride, rm, m_mask, rstd, norm_ptr, w_ptr, row0, rh, K, KS, HALF, UPCAST, CACHE,
                                     BLOCK_M, HB, BLOCK_K, KSPLIT, xn_ptr, AHEAD)
    else:
        acc1 = tl.zeros([BLOCK_M, HB], dtype=tl.float32)
        acc2 = tl.zeros([BLOCK_M, HB], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            acc1, acc2 = _qkv_k_block(acc1, acc2, k0 + rk, x_ptr, x_stride, rm, m_mask, rstd, norm_ptr, w_ptr, row0, rh, K,
                                      HALF, IEEE, UPCAST, CACHE, xn_ptr, AHEAD)
    if AHEAD:
        acc1, acc2 = ahead_scale(acc1, acc2, sums, K, eps)
    if TRACE:
        stamp(trace_ptr, pid, 3, acc1 + acc2)
    if HAS_BIAS:
        if not EARLY:
            b1 = tl.load(b_ptr + row0 + rh).to(tl.float32)
            b2 = tl.load(b_ptr + row0 + HALF + rh).to(tl.float32)
        acc1 += b1[None, :]
        acc2 += b2[None, :]
    if not EARLY:
        pos = tl.load(pos_ptr + rm, mask=m_mask, other=0)
    if head < H + KVH:
        if HAS_QKNORM:
            hss = tl.sum(acc1 * acc1, axis=1) + tl.sum(acc2 * acc2, axis=1)
            hr = 1.0 / tl.sqrt(hss / HD + eps)
            if head < H:
                n1 = tl.load(qn_ptr + rh).to(tl.float32)
                n2 = tl.load(qn_ptr + HALF + rh).to(tl.float32)
            else:
                n1 = tl.load(kn_ptr + rh).to(tl.float32)
                n2 = tl.load(kn_ptr + HALF + rh).to(tl.float32)
            acc1 = acc1 * hr[:, None] * n1[None, :]
            acc2 = acc2 * hr[:, None] * n2[None, :]
        if not EARLY:
            c = tl.load(cos_ptr + pos[:, None] * HALF + rh[None, :], mask=m_mask[:, None], other=0.0)
            s = tl.load(sin_ptr + pos[:, None] * HALF + rh[None, :], mask=m_mask[:, None], other=0.0)
        o1 = acc1 * c - acc2 * s
        o2 = acc2 * c + acc1 * s
    else:
        o1 = acc1
        o2 = acc2
    mask2 = m_mask[:, None]
    if head < H:
        base = q_ptr + rm[:, None] * (H * HD) + head * HD + rh[None, :]
        tl.store(base, o1.to(q_ptr.dtype.element_ty), mask=mask2)
        tl.store(base + HALF, o2.to(q_ptr.dtype.element_ty), mask=mask2)
    else:
        if SLOTS:
            at = tl.load(slot_ptr + rm, mask=m_mask, other=0)
        else:
            at = pos
        if head < H + KVH:
            base = k_cache_ptr + (head - H) * cache_head_stride + at[:, None] * HD + rh[None, :]
        else:
            base = v_cache_ptr + (head - H - KVH) * cache_head_stride + at[:, None] * HD + rh[None, :]
        tl.store(base, o1.to(k_cache_ptr.dtype.element_ty), mask=mask2)
        tl.store(base + HALF, o2.to(k_cache_ptr.dtype.element_ty), mask=mask2)


@triton.jit(do_not_specialize=["M"])
def _qkv_rope_kernel(
    x_ptr, x_stride, norm_ptr, w_ptr, b_ptr, qn_ptr, kn_ptr, cos_ptr, sin_ptr, pos_ptr,
    q_ptr, k_cache_ptr, v_cache_ptr, cache_head_stride,
    M, K, eps, H, KVH,
    HD: tl.constexpr, HAS_BIAS: tl.constexpr, HAS_QKNORM: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
    BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, SUB: tl.constexpr, PREFETCH_LINES: tl.constexpr,
    ELEM_BYTES: tl.constexpr, USE_PDL: tl.constexpr, UNROLL_NORM: tl.constexpr, EARLY: tl.constexpr,
    trace_ptr, TRACE: tl.constexpr, KSPLIT: tl.constexpr, KS, xn_ptr, ss_ptr, P,
    BLOCK_P: tl.constexpr, AHEAD: tl.constexpr, SWAP: tl.constexpr, slot_ptr, SLOTS: tl.constexpr,
):
    pid = tl.program_id(0)
    if TRACE:
        stamp_now(trace_ptr, pid, 0)
    if PREFETCH_LINES > 0:
        qkv_prefetch(pid, w_ptr, K, HD, SUB, PREFETCH_LINES, ELEM_BYTES, USE_PDL)
    pdl_start(USE_PDL)
    if TRACE:
        stamp_now(trace_ptr, pid, 1)
    qkv_rope_tile(pid, x_ptr, x_stride, norm_ptr, w_ptr, b_ptr, qn_ptr, kn_ptr, cos_ptr, sin_ptr, pos_ptr,
                  q_ptr, k_cache_ptr, v_cache_ptr, cache_head_stride, M, K, eps, H, KVH,
                  HD, HAS_BIAS, HAS_QKNORM, IEEE, UPCAST, BLOCK_M, BLOCK_K, SUB, "", UNROLL_NORM, EARLY, trace_ptr, TRACE,
                  KSPLIT, KS, xn_ptr, ss_ptr, P, BLOCK_P, AHEAD, SWAP, slot_ptr, SLOTS)
    if TRACE:
        stamp_now(trace_ptr, pid, 4)


def qkv_rope_triton(
    x: torch.Tensor,
    norm_weight: torch.Tensor,
    wqkv: torch.Tensor,
    bqkv: torch.Tensor | None,
    q_norm: torch.Tensor | None,
    k_norm: torch.Tensor | None,
    cos: torch.Tensor,
    sin: torch.Tensor,
    positions: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    n_heads: int,
    n_kv_heads: int,
    eps: float,
    q_out: torch.Tensor | None = None,
    ahead: NormAhead | None = None,
    slots: torch.Tensor | None = None,
) -> torch.Tensor:
    """ahead: x's norm prepared by the launch that wrote x (fused_linear.NormAhead); slots: see
    qkv_rope_reference (None: each row's k/v at its position, and the kernel loads no slots)."""
    m, k = x.shape
    hd = k_cache.shape[-1]
    if m > BLOCK_M:
        raise ValueError(f"qkv_rope handles at most {BLOCK_M} rows, got {m}")
    assert k_cache.is_contiguous() and v_cache.is_contiguous() and wqkv.is_contiguous()
    if q_out is None:
        q_out = torch.empty((m, n_heads, hd), dtype=k_cache.dtype, device=x.device)
    cfg = config_for("qkv", wqkv.shape[0], k)
    # block_n = columns per program of each rotate-half half (0: the whole head), at least 16 (the
    # product's tile); a per-head RMSNorm (qk_norm) needs the whole head in one program
    sub = 1 if (q_norm is not None or not cfg.block_n) else max(1, (hd // 2) // max(cfg.block_n, 16))
    swap = swapped(cfg)
    if swap and sub != 1:
        raise ValueError(f"qkv_rope: swap_ab takes a whole head per program (block_n 0), got block_n {cfg.block_n}")
    pdl = pdl_args(x)
    lines = prefetch_lines((hd // 2 // sub) * k * wqkv.element_size()) if prefetch_on(pdl, wqkv.nbytes) else 0
    grid = (n_heads + 2 * n_kv_heads) * sub
    ksplit, ks = k_slices(cfg, k, wqkv.dtype)
    unroll = unroll_norm(k, cfg.block_k)
    xn = ahead.operand(x, norm_weight, wqkv) if ahead is not None else None
    parts = ahead.ss.shape[1] if ahead is not None else 1
    _qkv_rope_kernel[(grid,)](
        x, x.stride(0), norm_weight, wqkv, bqkv if bqkv is not None else wqkv,
        q_norm if q_norm is not None else norm_weight, k_norm if k_norm is not None else norm_weight,
        cos, sin, positions, q_out, k_cache, v_cache, k_cache.stride(0),
        m, k, eps, n_heads, n_kv_heads,
        HD=hd, HAS_BIAS=bqkv is not None, HAS_QKNORM=q_norm is not None, UPCAST=UPCAST_DOT, IEEE=wqkv.dtype == torch.float32,
        BLOCK_M=BLOCK_M, BLOCK_K=cfg.block_k, SUB=sub, PREFETCH_LINES=lines, ELEM_BYTES=wqkv.element_size(),
        UNROLL_NORM=unroll, EARLY=latency_bound(wqkv.nbytes), KSPLIT=ksplit, KS=ks,
        xn_ptr=xn if xn is not None else wqkv,
        ss_ptr=ahead.ss if ahead is not None else q_out, P=parts, BLOCK_P=triton.next_power_of_2(parts),
        AHEAD=ahead is not None, SWAP=swap, slot_ptr=slots if slots is not None else positions, SLOTS=slots is not None,
        num_warps=cfg.num_warps, num_stages=cfg.num_stages, **pdl, **trace_args("qkv", grid, q_out),
    )
    return q_out
