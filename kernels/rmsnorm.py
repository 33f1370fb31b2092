"""Fused RMSNorm: y = x / rms(x) * w, computed in float32, one program per row."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.common import pdl_args, pdl_start


def rmsnorm_reference(x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    xf = x.float()
    y = xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * weight.float()
    return y.to(out_dtype or x.dtype)


@triton.jit
def _rmsnorm_kernel(x_ptr, w_ptr, out_ptr, x_stride, out_stride, N, eps, BLOCK_N: tl.constexpr, USE_PDL: tl.constexpr):
    pdl_start(USE_PDL)
    row = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    mask = cols < N
    x = tl.load(x_ptr + row * x_stride + cols, mask=mask, other=0.0).to(tl.float32)
    rstd = 1.0 / tl.sqrt(tl.sum(x * x, axis=0) / N + eps)
    w = tl.load(w_ptr + cols, mask=mask, other=0.0).to(tl.float32)
    tl.store(out_ptr + row * out_stride + cols, (x * rstd * w).to(out_ptr.dtype.element_ty), mask=mask)


def rmsnorm_triton(x: torch.Tensor, weight: torch.Tensor, eps: float, out_dtype: torch.dtype | None = None) -> torch.Tensor:
    x2 = x.reshape(-1, x.shape[-1])
    if x2.stride(-1) != 1:
        x2 = x2.contiguous()
    out = torch.empty(x2.shape, dtype=out_dtype or x.dtype, device=x.device)
    n = x2.shape[-1]
    _rmsnorm_kernel[(x2.shape[0],)](x2, weight, out, x2.stride(0), out.stride(0), n, eps, BLOCK_N=triton.next_power_of_2(n),
                                  **pdl_args(x2))
    return out.reshape(x.shape)
