"""Small-M linear layers for the decode/verify step, with the neighbours fused in.

    out = [residual +] act( norm?(x) @ W^T )        act: identity, or SwiGLU silu(x@Wg^T) * (x@Wu^T)

One program owns BLOCK_N output columns for *all* rows (M <= BLOCK_M), walking K in a fixed order.
Because the tile shape and the K order never depend on M, a row's result is bit-identical whether
it is decoded alone (AR) or verified beside six draft rows (DSpark): the kernels are batch-invariant,
which is what makes speculative greedy decoding lossless token for token.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.greedy_commit import HeadArgmax, head_argmax, head_argmax_args
from kernels.common import (UPCAST_DOT, halves_back, l2_prefetch, latency_bound, lm_head_prefetch_on, mma3, mma_xw,
                            pdl_args, pdl_start, prefetch_lines, prefetch_on, stamp, stamp_now, trace_args, unroll_norm)

from kernels.rmsnorm import rmsnorm_reference
from kernels.tuning import config_for, k_slices, swapped

BLOCK_M = 16  # rows per launch; the step never has more than 8


class NormAhead:
    """An RMSNorm prepared by the kernel that writes its input (common.norm_ahead, DSPARK_NORM_AHEAD). The
    producer of x (a linear with the residual add: the o-proj for gate/up's norm, the down-proj for the next
    layer's QKV) also stores, from the values it writes, x * norm_weight rounded to `dtype` (`xw` [M, D]) and
    each of its programs' per-row sum of squares (`ss` [M, programs]). The consumer's K walk reads xw as its
    operand as it reads its weights, it adds the sums in a fixed order for rstd (loads that overlap the walk)
    and scales its sums by rstd after the walk: rstd * (bf16(x * w) @ W^T) rather than
    bf16(x * rstd * w) @ W^T, so the rounding differs from the norm done in the consumer. Every row's
    arithmetic is its own, whatever the other rows (batch-invariant). Pass an empty one as `ahead_out` to the
    producer, then the same one as `ahead` to the consumer (both fused_linear_* and qkv_rope_*)."""

    def __init__(self, norm_weight: torch.Tensor, dtype: torch.dtype):
        self.norm_weight = norm_weight
        self.dtype = dtype
        self.xw: torch.Tensor | None = None
        self.ss: torch.Tensor | None = None

    def fill_reference(self, y: torch.Tensor) -> None:
        """The producer's part, from the values it wrote (y): one part of sums per row."""
        yf = y.float()
        self.xw = (yf * self.norm_weight.float()).to(self.dtype)
        self.ss = yf.pow(2).sum(-1, keepdim=True)

    def operand(self, x: torch.Tensor, norm_weight: torch.Tensor, weight: torch.Tensor) -> torch.Tensor:
        """The consumer's check: this is x's norm, filled in by x's producer; returns xw."""
        if norm_weight is not self.norm_weight:
            raise ValueError("NormAhead: prepared for another norm weight than this kernel's")
        if self.xw is None or self.ss is None:
            raise ValueError("NormAhead: not filled in (pass it as ahead_out to the kernel that writes x first)")
        if tuple(self.xw.shape) != tuple(x.shape) or self.xw.dtype != weight.dtype or self.ss.shape[0] != x.shape[0]:
            raise ValueError(f"NormAhead: prepared for {tuple(self.xw.shape)} {self.xw.dtype}, this kernel reads "
                             f"{tuple(x.shape)} with {weight.dtype} weights")
        return self.xw

    def rstd_reference(self, k: int, eps: float) -> torch.Tensor:
        return 1.0 / torch.sqrt(self.ss.float().sum(-1) / k + eps)


def fused_linear_reference(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    norm_weight: torch.Tensor | None = None,
    eps: float = 1e-5,
    up_weight: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    ahead: NormAhead | None = None,
    ahead_out: NormAhead | None = None,
) -> torch.Tensor:
    """Plain-torch definition of the fused op (also the CPU path); `out` as in fused_linear_triton. ahead:
    x's norm prepared by its producer (NormAhead: the product of x * norm_weight, scaled by rstd after it);
    ahead_out: prepare the next norm from this op's output."""
    cdt = weight.dtype
    if ahead is not None:
        a = ahead.operand(x, norm_weight, weight)
        scale = ahead.rstd_reference(x.shape[-1], eps)[:, None]
    else:
        a = rmsnorm_reference(x, norm_weight, eps, out_dtype=cdt) if norm_weight is not None else x.to(cdt)
        scale = 1.0
    y = (a.float() @ weight.float().t()) * scale
    if bias is not None:
        y = y + bias.float()
    if up_weight is not None:
        y = torch.nn.functional.silu(y) * ((a.float() @ up_weight.float().t()) * scale)
    if residual is not None:
        y = y + residual.float()
    if out is not None:
        y = out.copy_(y)
    else:
        y = y.to(out_dtype or (residual.dtype if residual is not None else x.dtype))
    if ahead_out is not None:
        ahead_out.fill_reference(y)
    return y


@triton.jit
def linear_prefetch(pid, w_ptr, up_ptr, N, K, SWIGLU: tl.constexpr, BLOCK_N: tl.constexpr,
                    PREFETCH_LINES: tl.constexpr, ELEM_BYTES: tl.constexpr, USE_PDL: tl.constexpr):
    """Ask L2 for tile `pid`'s weight rows (contiguous: [pid*BLOCK_N, +BLOCK_N) x K), before a wait."""
    n_rows = tl.minimum(N - pid * BLOCK_N, BLOCK_N)
    l2_prefetch(w_ptr + pid * BLOCK_N * K, n_rows * K * ELEM_BYTES, PREFETCH_LINES, USE_PDL)
    if SWIGLU:
        l2_prefetch(up_ptr + pid * BLOCK_N * K, n_rows * K * ELEM_BYTES, PREFETCH_LINES, USE_PDL)


@triton.jit
def row_chunk(x_ptr, x_stride, rm, m_mask, kk, K, CACHE: tl.constexpr):
    """x[:, kk] as float32 (0 past K and past the rows): one chunk of an RMSNorm's pass over x."""
    return tl.load(x_ptr + rm[:, None] * x_stride + kk[None, :], mask=m_mask[:, None] & (kk[None, :] < K), other=0.0,
                   cache_modifier=CACHE).to(tl.float32)


@triton.jit
def row_squares(x_ptr, x_stride, rm, m_mask, kk, K, CACHE: tl.constexpr):
    """Per row, the sum of squares of x[:, kk] (float32): one chunk of an RMSNorm's pass over x."""
    xv = row_chunk(x_ptr, x_stride, rm, m_mask, kk, K, CACHE)
    return tl.sum(xv * xv, axis=1)


@triton.jit
def row_rstd(x_ptr, x_stride, rm, m_mask, K, eps, BLOCK_M: tl.constexpr, BLOCK_K: tl.constexpr, CACHE: tl.constexpr,
             UNROLL_NORM: tl.constexpr):
    """Per row, RMSNorm's 1 / sqrt(mean(x^2) + eps) from one pass over x[:, :K], before the product.
    UNROLL_NORM = K (0: a loop): the pass unrolled, the same arithmetic in the same order, so every
    chunk's load can be in flight at once (a loop without a dot is not software-pipelined: each chunk
    would wait for the one before)."""
    rk = tl.arange(0, BLOCK_K)
    ss = tl.zeros([BLOCK_M], dtype=tl.float32)
    if UNROLL_NORM > 0:
        # every chunk's load issued before the first chunk's reduction (whose warp shuffles the loads would
        # otherwise wait behind, one chunk at a time), then the chunks reduced and added in order, as in the loop
        xs = ()
        for k0 in tl.static_range(0, UNROLL_NORM, BLOCK_K):
            xs = xs + (row_chunk(x_ptr, x_stride, rm, m_mask, k0 + rk, K, CACHE),)
        for c in tl.static_range(len(xs)):
            ss += tl.sum(xs[c] * xs[c], axis=1)
    else:
        for k0 in range(0, K, BLOCK_K):
            ss += row_squares(x_ptr, x_stride, rm, m_mask, k0 + rk, K, CACHE)
    return 1.0 / tl.sqrt(ss / K + eps)


@triton.jit
def prepared_operand(xn_ptr, rm, m_mask, kk, k_mask, K):
    """The product's x operand at kk as x's producer prepared it (NormAhead's xw [M, K]; 0 past K and the rows)."""
    return tl.load(xn_ptr + rm[:, None] * K + kk[None, :], mask=m_mask[:, None] & k_mask[None, :], other=0.0)


@triton.jit
def ahead_sums(ss_ptr, rm, m_mask, P, BLOCK_P: tl.constexpr):
    """The P sums of squares per row that x's producer stored (NormAhead) [BLOCK_M, BLOCK_P], 0 past P: loaded
    before the K walk, added after it (ahead_rstd), so their round trip overlaps the walk."""
    rp = tl.arange(0, BLOCK_P)
    return tl.load(ss_ptr + rm[:, None] * P + rp[None, :], mask=m_mask[:, None] & (rp[None, :] < P), other=0.0)


@triton.jit
def ahead_rstd(sums, K, eps):
    """Per row, rstd from ahead_sums' parts, added in a fixed order."""
    return 1.0 / tl.sqrt(tl.sum(sums, axis=1) / K + eps)


@triton.jit
def ahead_scale(acc_a, acc_b, sums, K, eps):
    """A NormAhead consumer's two products after the walk, scaled by rstd from ahead_sums' parts."""
    rstd = ahead_rstd(sums, K, eps)
    return acc_a * rstd[:, None], acc_b * rstd[:, None]


@triton.jit
def norm_input(pid, x_ptr, x_stride, rm, m_mask, K, eps, ss_ptr, P, trace_ptr, BLOCK_M: tl.constexpr,
               BLOCK_K: tl.constexpr, BLOCK_P: tl.constexpr, CACHE: tl.constexpr, UNROLL_NORM: tl.constexpr,
               AHEAD: tl.constexpr, TRACE: tl.constexpr):
    """A norm kernel's input side, before its K walk: (rstd, sums). AHEAD: the producer's sums loaded (rstd
    comes from them after the walk, ahead_rstd; no stamp 2: the walk does not wait for it); otherwise rstd
    from the pass over x (row_rstd), then stamp 2."""
    rstd = tl.zeros([BLOCK_M], dtype=tl.float32)
    if AHEAD:
        sums = ahead_sums(ss_ptr, rm, m_mask, P, BLOCK_P)
    else:
        sums = tl.zeros([BLOCK_M, BLOCK_P], dtype=tl.float32)
        rstd = row_rstd(x_ptr, x_stride, rm, m_mask, K, eps, BLOCK_M, BLOCK_K, CACHE, UNROLL_NORM)
        if TRACE:
            stamp(trace_ptr, pid, 2, rstd)
    return rstd, sums


@triton.jit
def ahead_store(v, nw, xw_ptr, ss_ptr, pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    """The producer's part of a NormAhead: from its tile of x as written (v, float32), x * nw rounded into
    xw [M, N] and each row's sum of squares over the tile into ss [M, programs] at column pid."""
    rm = tl.arange(0, BLOCK_M)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    m_mask = rm < M
    n_mask = rn < N
    v = tl.where(n_mask[None, :], v, 0.0)
    tl.store(xw_ptr + rm[:, None] * N + rn[None, :], (v * nw[None, :]).to(xw_ptr.dtype.element_ty),
             mask=m_mask[:, None] & n_mask[None, :])
    tl.store(ss_ptr + rm * tl.num_programs(0) + pid, tl.sum(v * v, axis=1), mask=m_mask)


@triton.jit
def walk_operand(x_ptr, x_stride, rm, m_mask, kk, k_mask, K, rstd, norm_ptr, w_ptr, HAS_NORM: tl.constexpr,
                 CACHE: tl.constexpr, xn_ptr=None, PREPARED: tl.constexpr = False):
    """x's operand of one K step [BLOCK_M, BLOCK_K] at kk (0 past K and past the rows): read as x's producer
    prepared it (PREPARED: NormAhead's xw at xn_ptr), or loaded, normalised (HAS_NORM: x * rstd * norm_weight in
    float32) and rounded to the weights' dtype."""
    if PREPARED:
        a = prepared_operand(xn_ptr, rm, m_mask, kk, k_mask, K)
    else:
        xv = tl.load(x_ptr + rm[:, None] * x_stride + kk[None, :], mask=m_mask[:, None] & k_mask[None, :], other=0.0,
                     cache_modifier=CACHE)
        if HAS_NORM:
            nw = tl.load(norm_ptr + kk, mask=k_mask, other=0.0).to(tl.float32)
            xv = xv.to(tl.float32) * rstd[:, None] * nw[None, :]
        a = xv.to(w_ptr.dtype.element_ty)
    return a


@triton.jit
def _linear_k_block(acc, acc_up, kk, x_ptr, x_stride, rm, m_mask, rstd, norm_ptr, w_ptr, up_ptr, rn, n_mask, K,
                    HAS_NORM: tl.constexpr, SWIGLU: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr,
                    CACHE: tl.constexpr, xn_ptr=None, PREPARED: tl.constexpr = False, SWAP: tl.constexpr = False):
    """One BLOCK_K step of the product's K walk (PREPARED: x's operand read from xn_ptr, NormAhead; SWAP: the
    accumulators transposed, [BLOCK_N, BLOCK_M], common.mma_xw)."""
    k_mask = kk < K
    a = walk_operand(x_ptr, x_stride, rm, m_mask, kk, k_mask, K, rstd, norm_ptr, w_ptr, HAS_NORM, CACHE, xn_ptr, PREPARED)
    w = tl.load(w_ptr + rn[:, None] * K + kk[None, :], mask=n_mask[:, None] & k_mask[None, :], other=0.0)
    acc = mma_xw(a, w, acc, SWAP, IEEE, UPCAST)
    if SWIGLU:
        u = tl.load(up_ptr + rn[:, None] * K + kk[None, :], mask=n_mask[:, None] & k_mask[None, :], other=0.0)
        acc_up = mma_xw(a, u, acc_up, SWAP, IEEE, UPCAST)
    return acc, acc_up


@triton.jit
def _swiglu_walk_stacked(x_ptr, x_stride, rm, m_mask, rstd, norm_ptr, w_ptr, up_ptr, pid, N, K, HAS_NORM: tl.constexpr,
                         IEEE: tl.constexpr, UPCAST: tl.constexpr, CACHE: tl.constexpr, BLOCK_M: tl.constexpr,
                         BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, xn_ptr=None, PREPARED: tl.constexpr = False):
    """SwiGLU's K walk with the product computed transposed (swap_ab): tile `pid`'s BLOCK_N gate rows and its
    BLOCK_N up rows stacked as one tile of 2 * BLOCK_N weight rows (one product whose M is twice BLOCK_N: 64 with
    block_n 32), then (acc, acc_up) transposed back, each [BLOCK_M, BLOCK_N]."""
    r2 = tl.arange(0, 2 * BLOCK_N)
    rows = pid * BLOCK_N + r2 % BLOCK_N  # the tile's rows, for gate then for up
    rk = tl.arange(0, BLOCK_K)
    acc_t = tl.zeros([2 * BLOCK_N, BLOCK_M], dtype=tl.float32)
    for k0 in range(0, K, BLOCK_K):
        kk = k0 + rk
        k_mask = kk < K
        a = walk_operand(x_ptr, x_stride, rm, m_mask, kk, k_mask, K, rstd, norm_ptr, w_ptr, HAS_NORM, CACHE, xn_ptr, PREPARED)
        off = rows[:, None] * K + kk[None, :]
        w = tl.load(tl.where((r2 < BLOCK_N)[:, None], w_ptr + off, up_ptr + off), mask=(rows < N)[:, None] & k_mask[None, :],
                    other=0.0)
        acc_t = mma_xw(a, w, acc_t, True, IEEE, UPCAST)
    return halves_back(acc_t, BLOCK_N, BLOCK_M)


@triton.jit
def slices_x_block(x_ptr, x_stride, rm, m_mask, rstd, norm_ptr, w_ptr, xn_ptr, k0, K, KS, HAS_NORM: tl.constexpr,
                   PREPARED: tl.constexpr, CACHE: tl.constexpr, BLOCK_K: tl.constexpr, KSPLIT: tl.constexpr):
    """One step of a K walk in KSPLIT slices of KS: the step's positions kk [KSPLIT, BLOCK_K] (slice s from
    s*KS + k0), their mask, and x there as the product's operand [KSPLIT, BLOCK_M, BLOCK_K]: read from the
    operand x's producer prepared (PREPARED: NormAhead's xw) or loaded, normalised and rounded exactly as in
    _linear_k_block (0 past K and past the rows)."""
    kl = k0 + tl.arange(0, BLOCK_K)
    kk = tl.arange(0, KSPLIT)[:, None] * KS + kl[None, :]
    k_mask = (kl[None, :] < KS) & (kk < K)
    mask = m_mask[None, :, None] & k_mask[:, None, :]
    if PREPARED:
        a = tl.load(xn_ptr + rm[None, :, None] * K + kk[:, None, :], mask=mask, other=0.0)
    else:
        xv = tl.load(x_ptr + rm[None, :, None] * x_stride + kk[:, None, :], mask=mask, other=0.0, cache_modifier=CACHE)
        if HAS_NORM:
            nw = tl.load(norm_ptr + kk, mask=k_mask, other=0.0).to(tl.float32)
            xv = xv.to(tl.float32) * rstd[None, :, None] * nw[:, None, :]
        a = xv.to(w_ptr.dtype.element_ty)
    return kk, k_mask, a


@triton.jit
def _linear_walk_split(x_ptr, x_stride, rm, m_mask, rstd, norm_ptr, w_ptr, up_ptr, rn, n_mask, K, KS,
                       HAS_NORM: tl.constexpr, SWIGLU: tl.constexpr, UPCAST: tl.constexpr, CACHE: tl.constexpr,
                       BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr, KSPLIT: tl.constexpr,
                       xn_ptr=None, PREPARED: tl.constexpr = False):
    """The product's K walk as KSPLIT slices of KS walked side by side (slice s: [s*KS, (s+1)*KS) of K, the
    batch s of a 3-D product), then the slices' sums added in a fixed order."""
    acc = tl.zeros([KSPLIT, BLOCK_M, BLOCK_N], dtype=tl.float32)
    acc_up = tl.zeros([KSPLIT, BLOCK_M, BLOCK_N], dtype=tl.float32)
    for k0 in range(0, KS, BLOCK_K):
        kk, k_mask, a = slices_x_block(x_ptr, x_stride, rm, m_mask, rstd, norm_ptr, w_ptr, xn_ptr, k0, K, KS, HAS_NORM,
                                       PREPARED, CACHE, BLOCK_K, KSPLIT)
        w_mask = n_mask[None, None, :] & k_mask[:, :, None]
        w = tl.load(w_ptr + rn[None, None, :] * K + kk[:, :, None], mask=w_mask, other=0.0)  # [KSPLIT, BLOCK_K, BLOCK_N]
        acc = mma3(a, w, acc, UPCAST)
        if SWIGLU:
            u = tl.load(up_ptr + rn[None, None, :] * K + kk[:, :, None], mask=w_mask, other=0.0)
            acc_up = mma3(a, u, acc_up, UPCAST)
    return tl.sum(acc, axis=0), tl.sum(acc_up, axis=0)


@triton.jit
def linear_tile(
    pid, x_ptr, x_stride, norm_ptr, w_ptr, up_ptr, bias_ptr, res_ptr, res_stride, M, N, K, eps,
    HAS_NORM: tl.constexpr, SWIGLU: tl.constexpr, HAS_RES: tl.constexpr, HAS_BIAS: tl.constexpr,
    IEEE: tl.constexpr, UPCAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    CACHE: tl.constexpr, UNROLL_NORM: tl.constexpr, EARLY: tl.constexpr, trace_ptr=None, TRACE: tl.constexpr = False,
    KSPLIT: tl.constexpr = 1, KS=0, xn_ptr=None, ss_ptr=None, P=1,
    BLOCK_P: tl.constexpr = 1, AHEAD: tl.constexpr = False, SWAP: tl.constexpr = False,
):
    """Output tile `pid` (BLOCK_N columns, every row) of the fused op, float32. CACHE is the load cache
    modifier of x and the residual: ".cg" (L2 only) would read data another program of the same launch
    wrote; every launch today passes "". UNROLL_NORM: see row_rstd. EARLY: the
    residual and bias are loaded before the K walk (their latency overlaps it), for latency-bound shapes
    only (common.latency_bound). The same values are added at the same point, and the interpreter gives
    the same bits; compiled for the H200 the rounding differs slightly: with it, the bot's AR streams
    left the previous main's after 6-84 tokens, KL 0.0002, as they did with the ungated version alone
    (docs/perf.md, 2026-12-02 fourth and sixth sessions). Within
    one build a row's result still never depends on how many rows share the step. TRACE: phase stamps 2
    and 3 (common.stamp). KSPLIT > 1: the K walk in KSPLIT slices of KS (_linear_walk_split). AHEAD: x's norm
    prepared by x's producer (NormAhead): the walk reads x * norm_weight from xn_ptr, rstd comes from the P
    sums at ss_ptr and scales the product after the walk. SWAP: the product computed transposed (tuning's
    swap_ab; SwiGLU's gate and up rows stacked as one tile), the accumulators transposed back after the walk."""
    rm = tl.arange(0, BLOCK_M)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    rk = tl.arange(0, BLOCK_K)
    m_mask = rm < M
    n_mask = rn < N
    # RMSNorm: rstd per row from one pass over x, before the product. (Gathering the squares inside the
    # product's K walk instead, elementwise, saves that pass on the bundled shape but holds a
    # [BLOCK_M, BLOCK_K] fp32 tile through the walk: the 1B guard shape decoded 23 % slower with it,
    # docs/perf.md, 2026-12-02 third session.)
    if EARLY:
        if HAS_RES:
            res = tl.load(res_ptr + rm[:, None] * res_stride + rn[None, :], mask=m_mask[:, None] & n_mask[None, :],
                          other=0.0, cache_modifier=CACHE).to(tl.float32)
        if HAS_BIAS:
            bias = tl.load(bias_ptr + rn, mask=n_mask, other=0.0).to(tl.float32)
    rstd = tl.zeros([BLOCK_M], dtype=tl.float32)
    if HAS_NORM:
        rstd, sums = norm_input(pid, x_ptr, x_stride, rm, m_mask, K, eps, ss_ptr, P, trace_ptr, BLOCK_M,
                                BLOCK_K, BLOCK_P, CACHE, UNROLL_NORM, AHEAD, TRACE)
    if KSPLIT > 1:
        acc, acc_up = _linear_walk_split(x_ptr, x_stride, rm, m_mask, rstd, norm_ptr, w_ptr, up_ptr, rn, n_mask, K, KS,
                                         HAS_NORM, SWIGLU, UPCAST, CACHE, BLOCK_M, BLOCK_N, BLOCK_K, KSPLIT, xn_ptr, AHEAD)
    elif SWAP and SWIGLU:
        acc, acc_up = _swiglu_walk_stacked(x_ptr, x_stride, rm, m_mask, rstd, norm_ptr, w_ptr, up_ptr, pid, N, K, HAS_NORM,
                                           IEEE, UPCAST, CACHE, BLOCK_M, BLOCK_N, BLOCK_K, xn_ptr, AHEAD)
    elif SWAP:
        acc_t = tl.zeros([BLOCK_N, BLOCK_M], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            acc_t, _ = _linear_k_block(acc_t, acc_t, k0 + rk, x_ptr, x_stride, rm, m_mask, rstd, norm_ptr, w_ptr, up_ptr, rn,
                                       n_mask, K, HAS_NORM, False, IEEE, UPCAST, CACHE, xn_ptr, AHEAD, True)
        acc = tl.trans(acc_t)
        acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    else:
        acc = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        acc_up = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for k0 in range(0, K, BLOCK_K):
            acc, acc_up = _linear_k_block(acc, acc_up, k0 + rk, x_ptr, x_stride, rm, m_mask, rstd, norm_ptr, w_ptr, up_ptr,
                                          rn, n_mask, K, HAS_NORM, SWIGLU, IEEE, UPCAST, CACHE, xn_ptr, AHEAD)
    if AHEAD:
        acc, acc_up = ahead_scale(acc, acc_up, sums, K, eps)
    if TRACE:
        stamp(trace_ptr, pid, 3, acc + acc_up)
    if HAS_BIAS:
        if not EARLY:
            bias = tl.load(bias_ptr + rn, mask=n_mask, other=0.0).to(tl.float32)
        acc += bias[None, :]
    if SWIGLU:
        acc = acc / (1.0 + tl.exp(-acc)) * acc_up
    if HAS_RES:
        if not EARLY:
            res = tl.load(res_ptr + rm[:, None] * res_stride + rn[None, :], mask=m_mask[:, None] & n_mask[None, :],
                          other=0.0, cache_modifier=CACHE).to(tl.float32)
        acc += res
    return acc


@triton.jit
def store_tile(out_ptr, out_stride, acc, pid, M, N, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr):
    rm = tl.arange(0, BLOCK_M)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    tl.store(out_ptr + rm[:, None] * out_stride + rn[None, :], acc.to(out_ptr.dtype.element_ty), mask=(rm < M)[:, None] & (rn < N)[None, :])


@triton.jit(do_not_specialize=["M"])
def _fused_linear_kernel(
    x_ptr, x_stride, norm_ptr, w_ptr, up_ptr, bias_ptr, res_ptr, res_stride, out_ptr, out_stride,
    M, N, K, eps,
    HAS_NORM: tl.constexpr, SWIGLU: tl.constexpr, HAS_RES: tl.constexpr, HAS_BIAS: tl.constexpr,
    IEEE: tl.constexpr, UPCAST: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_K: tl.constexpr,
    PREFETCH_LINES: tl.constexpr, ELEM_BYTES: tl.constexpr, USE_PDL: tl.constexpr, UNROLL_NORM: tl.constexpr,
    EARLY: tl.constexpr, trace_ptr, TRACE: tl.constexpr, KSPLIT: tl.constexpr, KS, xn_ptr,
    ss_ptr, P, BLOCK_P: tl.constexpr, AHEAD: tl.constexpr, anw_ptr, xw_out_ptr, ss_out_ptr, AHEAD_OUT: tl.constexpr,
    SWAP: tl.constexpr, hp_ptr, hi_ptr, ha_ptr, hc_ptr, ht_ptr, hpos_ptr, hkv_ptr, hout_ptr, hst_ptr, hh_ptr, H_ROWS,
    H_BLOCK_S: tl.constexpr, H_BLOCK_ROWS: tl.constexpr, HEAD: tl.constexpr, H_COMMIT: tl.constexpr, H_HIST: tl.constexpr,
):
    """AHEAD: x's norm prepared by its producer (xn_ptr, ss_ptr, P: NormAhead); AHEAD_OUT: this launch prepares
    the next norm (weight anw_ptr) from its output into xw_out_ptr, ss_out_ptr. HEAD: the rows' argmaxes (and
    with H_COMMIT the greedy commit) after the logits (kernels.greedy_commit.HeadArgmax, head_argmax)."""
    pid = tl.program_id(0)
    if TRACE:
        stamp_now(trace_ptr, pid, 0)
    if PREFETCH_LINES > 0:
        linear_prefetch(pid, w_ptr, up_ptr, N, K, SWIGLU, BLOCK_N, PREFETCH_LINES, ELEM_BYTES, USE_PDL)
    if AHEAD_OUT:  # a weight no kernel writes: loaded before the wait
        rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
        anw = tl.load(anw_ptr + rn, mask=rn < N, other=0.0).to(tl.float32)
    pdl_start(USE_PDL)
    if TRACE:
        stamp_now(trace_ptr, pid, 1)
    acc = linear_tile(pid, x_ptr, x_stride, norm_ptr, w_ptr, up_ptr, bias_ptr, res_ptr, res_stride, M, N, K, eps,
                      HAS_NORM, SWIGLU, HAS_RES, HAS_BIAS, IEEE, UPCAST, BLOCK_M, BLOCK_N, BLOCK_K, "", UNROLL_NORM, EARLY,
                      trace_ptr, TRACE, KSPLIT, KS, xn_ptr, ss_ptr, P, BLOCK_P, AHEAD, SWAP)
    store_tile(out_ptr, out_stride, acc, pid, M, N, BLOCK_M, BLOCK_N)
    if AHEAD_OUT:
        ahead_store(acc.to(out_ptr.dtype.element_ty).to(tl.float32), anw, xw_out_ptr, ss_out_ptr, pid, M, N, BLOCK_M,
                    BLOCK_N)
    if HEAD:
        head_argmax(acc.to(out_ptr.dtype.element_ty).to(tl.float32), pid, M, N, tl.num_programs(0), hp_ptr, hi_ptr, ha_ptr,
                    hc_ptr, ht_ptr, hpos_ptr, hkv_ptr, hout_ptr, hst_ptr, hh_ptr, H_ROWS, BLOCK_M, BLOCK_N, H_BLOCK_S,
                    H_BLOCK_ROWS, H_COMMIT, H_HIST)
    if TRACE:
        stamp_now(trace_ptr, pid, 4)


def fused_linear_triton(
    x: torch.Tensor,
    weight: torch.Tensor,
    *,
    norm_weight: torch.Tensor | None = None,
    eps: float = 1e-5,
    up_weight: torch.Tensor | None = None,
    residual: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    out: torch.Tensor | None = None,
    out_dtype: torch.dtype | None = None,
    kind: str | None = None,
    ahead: NormAhead | None = None,
    ahead_out: NormAhead | None = None,
    head: HeadArgmax | None = None,
) -> torch.Tensor:
    """ahead: x's norm prepared by the launch that wrote x (NormAhead); ahead_out: prepare the next norm from
    this launch's output (a linear with a residual); head: the rows' argmaxes, and the greedy commit, in this
    launch (the LM head's: kernels.greedy_commit.HeadArgmax)."""
    m, k = x.shape
    n = weight.shape[0]
    if m > BLOCK_M:
        raise ValueError(f"fused_linear handles at most {BLOCK_M} rows, got {m}")
    assert weight.is_contiguous() and x.stride(-1) == 1
    if out is None:
        dt = out_dtype or (residual.dtype if residual is not None else x.dtype)
        out = torch.empty((m, n), dtype=dt, device=x.device)
    kind = kind or ("swiglu" if up_weight is not None else "lm_head" if n >= 16384 else "linear")
    cfg = config_for(kind, n, k)
    dummy = weight
    pdl = pdl_args(x)
    # only where the kernel is latency-bound (common.PREFETCH_MAX_BYTES); the LM head only with DSPARK_LM_HEAD_PREFETCH=1
    prefetch = (lm_head_prefetch_on(pdl, weight.nbytes) if kind == "lm_head"
                else prefetch_on(pdl, weight.nbytes * (2 if up_weight is not None else 1)))
    lines = prefetch_lines(cfg.block_n * k * weight.element_size()) if prefetch else 0
    grid = triton.cdiv(n, cfg.block_n)
    ksplit, ks = k_slices(cfg, k, weight.dtype)
    unroll = unroll_norm(k, cfg.block_k)
    xn = ahead.operand(x, norm_weight, weight) if ahead is not None else None
    if ahead_out is not None:
        if residual is None:
            raise ValueError("fused_linear: ahead_out needs the residual add (the launch that writes x)")
        ahead_out.xw = torch.empty((m, n), dtype=ahead_out.dtype, device=x.device)
        ahead_out.ss = torch.empty((m, grid), dtype=torch.float32, device=x.device)
    parts = ahead.ss.shape[1] if ahead is not None else 1
    _fused_linear_kernel[(grid,)](
        x, x.stride(0), norm_weight if norm_weight is not None else dummy, weight,
        up_weight if up_weight is not None else dummy, bias if bias is not None else dummy,
        residual if residual is not None else out, residual.stride(0) if residual is not None else 0,
        out, out.stride(0), m, n, k, eps,
        HAS_NORM=norm_weight is not None, SWIGLU=up_weight is not None, HAS_RES=residual is not None,
        HAS_BIAS=bias is not None, UPCAST=UPCAST_DOT, IEEE=weight.dtype == torch.float32,
        BLOCK_M=BLOCK_M, BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, num_warps=cfg.num_warps, num_stages=cfg.num_stages,
        PREFETCH_LINES=lines, ELEM_BYTES=weight.element_size(), UNROLL_NORM=unroll,
        EARLY=latency_bound(weight.nbytes * (2 if up_weight is not None else 1)), **pdl,
        KSPLIT=ksplit, KS=ks, xn_ptr=xn if xn is not None else weight,
        ss_ptr=ahead.ss if ahead is not None else out, P=parts, BLOCK_P=triton.next_power_of_2(parts),
        AHEAD=ahead is not None, anw_ptr=ahead_out.norm_weight if ahead_out is not None else dummy,
        xw_out_ptr=ahead_out.xw if ahead_out is not None else dummy,
        ss_out_ptr=ahead_out.ss if ahead_out is not None else out, AHEAD_OUT=ahead_out is not None, SWAP=swapped(cfg),
        **head_argmax_args(head, m, grid, x.device, dummy), **trace_args(kind, grid, out),
    )
    return out
