"""Token embedding gather into the float32 residual stream (one launch instead of gather + cast)."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.common import pdl_args, pdl_start


def embedding_reference(tokens: torch.Tensor, table: torch.Tensor) -> torch.Tensor:
    return table[tokens.long()].float()


@triton.jit
def embedding_row(row, tok_ptr, table_ptr, out_ptr, D, BLOCK_D: tl.constexpr):
    tok = tl.load(tok_ptr + row).to(tl.int64)
    d = tl.arange(0, BLOCK_D)
    vals = tl.load(table_ptr + tok * D + d, mask=d < D, other=0.0)
    tl.store(out_ptr + row * D + d, vals.to(tl.float32), mask=d < D)


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
