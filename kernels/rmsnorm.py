"""Fused RMSNorm: y = x / rms(x) * w, computed in float32, one program per row; optionally with the
residual add in front of it (the prefill's `x = x + sublayer(x); h = norm(x)` in one pass)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.common import pdl_args, pdl_start


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype | None = None,
                      out: torch.Tensor | None = None) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    if out is not None:
        return out.copy_(y)
    return y.to(out_dtype or x.dtype)


def add_rmsnorm_reference(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, eps: float,
                          out_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """(s, norm(s)) with s = x + y in float32: the residual stream after a sublayer, and the next
    sublayer's input."""
    s = x.float() + y.float()
    return s, rmsnorm_reference(s, weight, eps, out_dtype=out_dtype or x.dtype)


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, out_ptr, x_stride, out_stride, res_ptr, res_stride, sum_ptr, sum_stride, N, eps,
                    BLOCK_N: tl.constexpr, HAS_RES: tl.constexpr, USE_PDL: tl.constexpr):
    """HAS_RES: x + res (float32) is stored to sum_ptr and normalised; the norm's arithmetic is the
    same code either way, so norm(x + res) here equals norm() of the sum stored alone, bit for bit."""
    pdl_start(USE_PDL)
    row = tl.program_id(0).to(tl.int64)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    if HAS_RES:
        x = x + tl.load(res_ptr + row * res_stride + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(sum_ptr + row * sum_stride + cols, x, mask=mask)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * out_stride + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def _rows(t: torch.Tensor) -> torch.Tensor:
    t2 = t.reshape(-1, t.shape[-1])
    return t2 if t2.stride(-1) == 1 else t2.contiguous()


def rmsnorm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype | None = None,
                   out: torch.Tensor | None = None) -> torch.Tensor:
    """out: rows to write into (x's shape, last dimension contiguous; its dtype wins over out_dtype)."""
    x2 = _rows(x)
    if out is None:
        out2 = torch.empty(x2.shape, dtype=out_dtype or x.dtype, device=x.device)
    else:
        if out.shape != x.shape or out.stride(-1) != 1 or (out.dim() != 2 and not out.is_contiguous()):
            raise ValueError(f"rmsnorm: out must have x's shape {tuple(x.shape)} and contiguous rows")
        out2 = out.reshape(-1, out.shape[-1])
    n = x2.shape[-1]
    _rmsnorm_kernel[(x2.shape[0],)](x2, weight, out2, x2.stride(0), out2.stride(0), x2, 0, out2, 0, n, eps,
                                    BLOCK_N=triton.next_power_of_2(n), HAS_RES=False, **pdl_args(x2))
    return out if out is not None else out2.reshape(x.shape)


def add_rmsnorm_triton(x: torch.Tensor, y: torch.Tensor, weight: torch.Tensor, eps: float,
                       out_dtype: torch.dtype | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """add_rmsnorm_reference in one launch: s (float32, a new tensor) and norm(s)."""
    if x.shape != y.shape:
        raise ValueError(f"add_rmsnorm: shapes differ, {tuple(x.shape)} and {tuple(y.shape)}")
    x2, y2 = _rows(x), _rows(y)
    s = torch.empty(x2.shape, dtype=torch.float32, device=x.device)
    out = torch.empty(x2.shape, dtype=out_dtype or x.dtype, device=x.device)
    n = x2.shape[-1]
    _rmsnorm_kernel[(x2.shape[0],)](x2, weight, out, x2.stride(0), out.stride(0), y2, y2.stride(0), s, s.stride(0), n,
                                    eps, BLOCK_N=triton.next_power_of_2(n), HAS_RES=True, **pdl_args(x2))
    return s.reshape(x.shape), out.reshape(x.shape)
