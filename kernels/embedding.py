"""Token embedding gather into the float32 residual stream (one launch instead of gather + cast), and the
DSpark drafter's block inputs (its embedded rows and key windows in one launch)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.common import pdl_args, pdl_start


def embedding_reference(tokens: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    return table[tokens.long()].float()


@triton.jit
def table_row(tok, row, table_ptr, out_ptr, D, BLOCK_D: tl.constexpr):
    """out[row] = table[tok] in float32."""
    d = tl.arange(0, BLOCK_D)
    vals = tl.load(table_ptr + tok * D + d, mask=d < D, other=0.0)
    tl.store(out_ptr + row * D + d, vals.to(tl.float32), mask=d < D)


@triton.jit
def embedding_row(row, tok_ptr, table_ptr, out_ptr, D, BLOCK_D: tl.constexpr):
    table_row(tl.load(tok_ptr + row).to(tl.int64), row, table_ptr, out_ptr, D, BLOCK_D)


@triton.jit
def _embedding_kernel(tok_ptr, table_ptr, out_ptr, D, BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr):
    pdl_start(USE_PDL)
    embedding_row(tl.program_id(0), tok_ptr, table_ptr, out_ptr, D, BLOCK_D)


def embedding_triton(tokens: torch.Tensor, table: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
    m = tokens.shape[0]
    d = table.shape[1]
    if out is None:
        out = torch.empty((m, d), dtype=torch.float32, device=table.device)
    _embedding_kernel[(m,)](tokens, table, out, d, BLOCK_D=triton.next_power_of_2(d), **pdl_args(tokens))
    return out


def block_inputs_reference(tokens: torch.Tensor, positions: torch.Tensor, table: torch.Tensor, mask_id: int, window: int,
                           block_size: int, x_out: torch.Tensor, bounds_out: torch.Tensor) -> None:
    """The drafter's block [tokens[0], MASK, ..., MASK] at positions[0] + r, for R = x_out.shape[0] rows:
    x_out [R, D] float32 = their embeddings; bounds_out [2R] int32 = every row's key window, R starts
    max(0, positions[0] - window) then R ends positions[0] + block_size. No host reads (capturable)."""
    rows = x_out.shape[0]
    ids = torch.full((rows,), mask_id, dtype=torch.int64, device=table.device)
    ids[:1] = tokens[:1]
    x_out.copy_(table[ids].float())
    p = positions[:1].to(torch.int32)
    bounds_out[:rows] = (p - window).clamp(min=0)
    bounds_out[rows:] = p + block_size


@triton.jit
def _block_inputs_kernel(tok_ptr, pos_ptr, table_ptr, out_ptr, bounds_ptr, D, R, mask_id, window, block_size,
                         BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr):
    pdl_start(USE_PDL)
    r = tl.program_id(0)
    table_row(tl.where(r == 0, tl.load(tok_ptr).to(tl.int64), mask_id), r, table_ptr, out_ptr, D, BLOCK_D)
    p = tl.load(pos_ptr).to(tl.int32)
    tl.store(bounds_ptr + r, tl.maximum(p - window, 0))
    tl.store(bounds_ptr + R + r, p + block_size)


def block_inputs_triton(tokens: torch.Tensor, positions: torch.Tensor, table: torch.Tensor, mask_id: int, window: int,
                        block_size: int, x_out: torch.Tensor, bounds_out: torch.Tensor) -> None:
    rows, d = x_out.shape
    assert x_out.is_contiguous() and bounds_out.is_contiguous() and bounds_out.dtype == torch.int32 and bounds_out.numel() == 2 * rows
    _block_inputs_kernel[(rows,)](tokens, positions, table, x_out, bounds_out, d, rows, mask_id, window, block_size,
                                  BLOCK_D=triton.next_power_of_2(d), **pdl_args(x_out))
