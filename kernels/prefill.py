"""The prefill's elementwise work between its GEMMs, fused (engine.model.Transformer.forward_full on CUDA).

A prefill is cuBLAS GEMMs and a flash-attention kernel with elementwise passes between them, and on a
long prompt those passes were a third of its time (docs/perf.md, 2026-12-03: 5.9 of 15.9 ms at 7,936
tokens): RoPE alone was about twenty launches per layer (casts, the rotate-half products, a cat), then
the cache writes, SiLU and its product. Here each is one launch:

- `rope_prefill_triton`: q and k of every head rotated (after the per-head RMSNorm of Qwen3-style
  models), k and v written into the KV cache at their positions;
- `silu_mul_triton`: SwiGLU's silu(gate) * up.

(The residual add and the next norm are one launch too: kernels/rmsnorm.py, `add_rmsnorm_triton`.)
Each keeps its plain-torch reference, which is the CPU path. On CUDA they compute the reference's
bits: the same float32 operations in the same order, no fused multiply-adds (enable_fp_fusion=False),
IEEE division and the accurate exp where torch uses them (tests/gpu checks the bits; under the CPU
interpreter they agree to rounding).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.common import UPCAST_DOT, pdl_args, pdl_start
from kernels.rmsnorm import rmsnorm_reference

try:  # the accurate expf of CUDA's libdevice, which torch's own SiLU uses
    from triton.language.extra import libdevice
except ImportError:  # pragma: no cover - every supported triton has it
    libdevice = None

EXACT = not UPCAST_DOT  # compiled for a GPU (not the interpreter, which has no libdevice)
BLOCK_T = 64  # tokens per RoPE program


def rope_rotate(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """RoPE's rotation of x [..., head_dim] (rotate-half layout) in float32; cos/sin [..., head_dim/2]
    broadcastable against x's halves. The one plain-torch definition: the prefill and decode references,
    the drafter's context rows and its training module all call it."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half].float(), x[..., half:].float()
    return torch.cat((x1 * cos - x2 * sin, x2 * cos + x1 * sin), dim=-1)


def rope_reference(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., T, heads, head_dim]; cos/sin [T, head_dim/2] already gathered at the tokens' positions."""
    return rope_rotate(x, cos[:, None, :], sin[:, None, :]).to(x.dtype)


def rope_prefill_reference(
    qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, start: int, n_heads: int, n_kv_heads: int,
    head_dim: int, q_norm: torch.Tensor | None, k_norm: torch.Tensor | None, eps: float,
    k_dst: torch.Tensor | None = None, v_dst: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """qkv [B, T, (H + 2 KVH) * D] (the QKV projection, bias added) at positions start..start+T-1; cos/sin
    the whole tables [positions, D/2]. Returns q [B, T, H, D] and k [B, T, KVH, D] rotated (contiguous)
    and v [B, T, KVH, D] (a view of qkv); with k_dst/v_dst ([B, KVH, capacity, D]) k and v are also
    written at those positions."""
    b, t, _ = qkv.shape
    q, k, v = qkv.split([n_heads * head_dim, n_kv_heads * head_dim, n_kv_heads * head_dim], dim=-1)
    q = q.reshape(b, t, n_heads, head_dim)
    k = k.reshape(b, t, n_kv_heads, head_dim)
    v = v.reshape(b, t, n_kv_heads, head_dim)
    if q_norm is not None:
        q = rmsnorm_reference(q, q_norm, eps, out_dtype=qkv.dtype)
        k = rmsnorm_reference(k, k_norm, eps, out_dtype=qkv.dtype)
    c, s = cos[start : start + t], sin[start : start + t]
    q = rope_reference(q, c, s)
    k = rope_reference(k, c, s)
    if k_dst is not None:
        k_dst[:, :, start : start + t] = k.transpose(1, 2)
        v_dst[:, :, start : start + t] = v.transpose(1, 2)
    return q, k, v


@triton.jit
def _rope_prefill_kernel(
    qkv_ptr, cos_ptr, sin_ptr, qn_ptr, kn_ptr, q_ptr, k_ptr, kd_ptr, vd_ptr,
    R, T, start, eps, d_b, d_h, d_p,
    H: tl.constexpr, KVH: tl.constexpr, HD: tl.constexpr, HAS_QKNORM: tl.constexpr, TO_CACHE: tl.constexpr,
    BLOCK_T: tl.constexpr, USE_PDL: tl.constexpr,
):
    """Program (token block, head): heads 0..H-1 are q's, H..H+KVH-1 k's (and the same v head, copied).
    d_b, d_h, d_p: the destination cache's batch, head and position strides."""
    pdl_start(USE_PDL)
    HALF: tl.constexpr = HD // 2
    NQKV: tl.constexpr = (H + 2 * KVH) * HD
    head = tl.program_id(1)
    r = tl.program_id(0).to(tl.int64) * BLOCK_T + tl.arange(0, BLOCK_T)
    r_mask = r < R
    pos = start + r % T
    d = tl.arange(0, HALF)
    mask = r_mask[:, None]
    src = qkv_ptr + r[:, None] * NQKV + head * HD + d[None, :]
    x1 = tl.load(src, mask=mask, other=0.0)
    x2 = tl.load(src + HALF, mask=mask, other=0.0)
    is_q = head < H
    if HAS_QKNORM:  # rmsnorm_reference over the head, rounded to the activations' dtype, then RoPE
        x1f = x1.to(tl.float32)
        x2f = x2.to(tl.float32)
        rstd = 1.0 / tl.sqrt((tl.sum(x1f * x1f, axis=1) + tl.sum(x2f * x2f, axis=1)) / HD + eps)
        if is_q:
            w1 = tl.load(qn_ptr + d).to(tl.float32)
            w2 = tl.load(qn_ptr + HALF + d).to(tl.float32)
        else:
            w1 = tl.load(kn_ptr + d).to(tl.float32)
            w2 = tl.load(kn_ptr + HALF + d).to(tl.float32)
        x1 = (x1f * rstd[:, None] * w1[None, :]).to(x1.dtype)
        x2 = (x2f * rstd[:, None] * w2[None, :]).to(x2.dtype)
    c = tl.load(cos_ptr + pos[:, None] * HALF + d[None, :], mask=mask, other=0.0)
    s = tl.load(sin_ptr + pos[:, None] * HALF + d[None, :], mask=mask, other=0.0)
    a = x1.to(tl.float32)
    bb = x2.to(tl.float32)
    o1 = (a * c - bb * s).to(q_ptr.dtype.element_ty)
    o2 = (bb * c + a * s).to(q_ptr.dtype.element_ty)
    if is_q:
        dst = q_ptr + r[:, None] * (H * HD) + head * HD + d[None, :]
        tl.store(dst, o1, mask=mask)
        tl.store(dst + HALF, o2, mask=mask)
    else:
        kvh = head - H
        dst = k_ptr + r[:, None] * (KVH * HD) + kvh * HD + d[None, :]
        tl.store(dst, o1, mask=mask)
        tl.store(dst + HALF, o2, mask=mask)
        if TO_CACHE:
            row = (r // T) * d_b + kvh * d_h + pos * d_p
            tl.store(kd_ptr + row[:, None] + d[None, :], o1, mask=mask)
            tl.store(kd_ptr + row[:, None] + HALF + d[None, :], o2, mask=mask)
            vsrc = qkv_ptr + r[:, None] * NQKV + (H + KVH + kvh) * HD + d[None, :]
            tl.store(vd_ptr + row[:, None] + d[None, :], tl.load(vsrc, mask=mask, other=0.0), mask=mask)
            tl.store(vd_ptr + row[:, None] + HALF + d[None, :], tl.load(vsrc + HALF, mask=mask, other=0.0), mask=mask)


def rope_prefill_triton(
    qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, start: int, n_heads: int, n_kv_heads: int,
    head_dim: int, q_norm: torch.Tensor | None, k_norm: torch.Tensor | None, eps: float,
    k_dst: torch.Tensor | None = None, v_dst: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """rope_prefill_reference in one launch."""
    b, t, n = qkv.shape
    if n != (n_heads + 2 * n_kv_heads) * head_dim or not qkv.is_contiguous():
        raise ValueError(f"rope_prefill: qkv must be contiguous [B, T, {(n_heads + 2 * n_kv_heads) * head_dim}], "
                         f"got {tuple(qkv.shape)}")
    if head_dim % 2 or (head_dim // 2) & (head_dim // 2 - 1):
        raise ValueError(f"rope_prefill: head_dim/2 must be a power of two, got head_dim {head_dim}")
    if cos.shape[0] < start + t:
        raise ValueError(f"rope_prefill: the RoPE tables hold {cos.shape[0]} positions, need {start + t}")
    to_cache = k_dst is not None
    if to_cache and (k_dst.stride() != v_dst.stride() or k_dst.stride(-1) != 1 or k_dst.shape[2] < start + t):
        raise ValueError("rope_prefill: the cache destinations must share strides and hold the positions")
    q = torch.empty((b, t, n_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    k = torch.empty((b, t, n_kv_heads, head_dim), dtype=qkv.dtype, device=qkv.device)
    v = qkv[..., (n_heads + n_kv_heads) * head_dim :].reshape(b, t, n_kv_heads, head_dim)
    has_norm = q_norm is not None
    kd, vd = (k_dst, v_dst) if to_cache else (k, k)
    strides = (k_dst.stride(0), k_dst.stride(1), k_dst.stride(2)) if to_cache else (0, 0, 0)
    grid = (triton.cdiv(b * t, BLOCK_T), n_heads + n_kv_heads)
    _rope_prefill_kernel[grid](
        qkv, cos, sin, q_norm if has_norm else cos, k_norm if has_norm else cos, q, k, kd, vd,
        b * t, t, start, eps, *strides,
        H=n_heads, KVH=n_kv_heads, HD=head_dim, HAS_QKNORM=has_norm, TO_CACHE=to_cache, BLOCK_T=BLOCK_T,
        num_warps=4, enable_fp_fusion=False, **pdl_args(qkv),
    )
    return q, k, v


def silu_mul_reference(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    return torch.nn.functional.silu(gate) * up


@triton.jit
def _silu_mul_kernel(g_ptr, u_ptr, out_ptr, N, BLOCK: tl.constexpr, EXACT: tl.constexpr, USE_PDL: tl.constexpr):
    """silu(g) rounded to the activations' dtype, then its product with u, as torch computes them: x / (1 +
    exp(-x)) in float32 with the accurate exp and IEEE division on the GPU."""
    pdl_start(USE_PDL)
    i = tl.program_id(0).to(tl.int64) * BLOCK + tl.arange(0, BLOCK)
    m = i < N
    g = tl.load(g_ptr + i, mask=m, other=0.0)
    gf = g.to(tl.float32)
    if EXACT:
        s = tl.math.div_rn(gf, 1.0 + libdevice.exp(-gf))
    else:
        s = gf / (1.0 + tl.exp(-gf))
    s = s.to(g.dtype).to(tl.float32)
    u = tl.load(u_ptr + i, mask=m, other=0.0).to(tl.float32)
    tl.store(out_ptr + i, (s * u).to(out_ptr.dtype.element_ty), mask=m)


def silu_mul_triton(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
    """silu_mul_reference in one launch (same shapes and dtype, contiguous)."""
    if gate.shape != up.shape or gate.dtype != up.dtype or not (gate.is_contiguous() and up.is_contiguous()):
        raise ValueError(f"silu_mul: gate and up must be contiguous with one shape and dtype, got "
                         f"{tuple(gate.shape)} {gate.dtype} and {tuple(up.shape)} {up.dtype}")
    out = torch.empty_like(gate)
    n = gate.numel()
    block = 2048
    _silu_mul_kernel[(triton.cdiv(n, block),)](gate, up, out, n, BLOCK=block, EXACT=EXACT and libdevice is not None,
                                               num_warps=4, enable_fp_fusion=False, **pdl_args(gate))
    return out
