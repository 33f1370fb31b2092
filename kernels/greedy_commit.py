"""Greedy accept-and-commit on the device, so the decode loop needs no host round trip per token.

Rows 0..M-1 of `logits` come from one step whose input tokens were [last, d_1, .., d_{M-1}]
(M = 1 is plain AR decode). t_i = argmax(logits_i). The longest prefix with d_{i+1} == t_i is
accepted (j drafts), and t_0..t_j are committed: the j accepted drafts plus the bonus token t_j.
The kernel appends them to `out_tokens`, and rewrites the step's own inputs for the next step:
tokens[0] = t_j, positions[i] = base + i, kv_end[i] = base + i + 1 where base = old base + j + 1.

state (int64[5]): [n_committed, base_position, last_accepted_j, steps, previous_base_position]
(the last one is the position of row 0 of the step just committed: where the DSpark drafter finds
the rows whose hidden states it turns into context).

On Triton the row argmaxes come first, from a grid of (row, vocabulary chunk) programs that each write
their chunk's max and its first index; the commit's one program then reduces ARGMAX_CHUNK-wide partials
instead of walking M x V logits alone (that walk took 88 us of a 7-row DSpark iteration's ~1,000 on the
H200, docs/perf.md 2026-12-03). The first index of the largest value wins, as in torch.argmax.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.common import pdl_args, pdl_start

STATE_COMMITTED, STATE_BASE, STATE_ACCEPTED, STATE_STEPS, STATE_PREV_BASE = 0, 1, 2, 3, 4
STATE_SIZE = 5


def greedy_commit_reference(
    logits: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, kv_end: torch.Tensor,
    out_tokens: torch.Tensor, state: torch.Tensor, m: int, hist: torch.Tensor | None = None,
) -> None:
    """hist (optional, int64): hist[j + 1] += 1 for the j drafts accepted (the on-device loop's histogram)."""
    t = torch.argmax(logits[:m].float(), dim=-1)
    j = 0
    while j < m - 1 and int(tokens[j + 1]) == int(t[j]):
        j += 1
    n = int(state[STATE_COMMITTED])
    out_tokens[n : n + j + 1] = t[: j + 1].to(out_tokens.dtype)
    base = int(state[STATE_BASE]) + j + 1
    tokens[0] = t[j]
    rows = positions.shape[0]
    positions.copy_(torch.arange(base, base + rows, dtype=positions.dtype))
    kv_end.copy_(positions + 1)
    state[STATE_PREV_BASE] = state[STATE_BASE]
    state[STATE_COMMITTED] = n + j + 1
    state[STATE_BASE] = base
    state[STATE_ACCEPTED] = j
    state[STATE_STEPS] += 1
    if hist is not None:
        hist[j + 1] += 1


ARGMAX_CHUNK = 2048  # vocabulary entries per program of the argmax pass


@triton.jit
def _argmax_partial_kernel(logits_ptr, pmax_ptr, pidx_ptr, V, NCH, CHUNK: tl.constexpr, USE_PDL: tl.constexpr):
    """Program (row, c): the max of logits[row, c*CHUNK : (c+1)*CHUNK] and its first index."""
    pdl_start(USE_PDL)
    row = tl.program_id(0)
    c = tl.program_id(1)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    vals = tl.load(logits_ptr + row * V + offs, mask=offs < V, other=float("-inf")).to(tl.float32)
    best = tl.max(vals, axis=0)
    idx = tl.argmax(vals, axis=0, tie_break_left=True).to(tl.int64) + c * CHUNK
    tl.store(pmax_ptr + row * NCH + c, best)
    tl.store(pidx_ptr + row * NCH + c, idx)


@triton.jit
def row_argmax(pmax_ptr, pidx_ptr, row, NCH, BLOCK_S: tl.constexpr):
    """Row `row`'s argmax from its chunks' partials (max, first index): the smallest index among the chunks
    holding the max, as torch.argmax picks. Also the drafter head's first draft (kernels/draft_head.py)."""
    s = tl.arange(0, BLOCK_S)
    vals = tl.load(pmax_ptr + row * NCH + s, mask=s < NCH, other=float("-inf"))
    idx = tl.load(pidx_ptr + row * NCH + s, mask=s < NCH, other=2**62)
    best = tl.max(vals, axis=0)
    return tl.min(tl.where(vals == best, idx, 2**62), axis=0)


@triton.jit
def _greedy_commit_kernel(
    pmax_ptr, pidx_ptr, tokens_ptr, positions_ptr, kv_end_ptr, out_ptr, state_ptr, hist_ptr,
    M, NCH, ROWS, BLOCK_S: tl.constexpr, BLOCK_ROWS: tl.constexpr, HAS_HIST: tl.constexpr, USE_PDL: tl.constexpr,
):
    pdl_start(USE_PDL)
    accepted = tl.min(tl.zeros([BLOCK_ROWS], tl.int64), axis=0)
    still = accepted == 0
    n = tl.load(state_ptr + 0)
    last = tl.load(tokens_ptr + 0).to(tl.int64)
    for i in range(0, M):
        t = row_argmax(pmax_ptr, pidx_ptr, i, NCH, BLOCK_S)
        keep = i <= accepted
        tl.store(out_ptr + n + i, t.to(out_ptr.dtype.element_ty), mask=keep)
        last = tl.where(keep, t, last)
        nxt = tl.load(tokens_ptr + i + 1, mask=i + 1 < M, other=-1).to(tl.int64)
        still = still & (i + 1 < M) & (nxt == t)
        accepted = tl.where(still, accepted + 1, accepted)
    old_base = tl.load(state_ptr + 1)
    base = old_base + accepted + 1
    tl.store(tokens_ptr + 0, last.to(tokens_ptr.dtype.element_ty))
    r = tl.arange(0, BLOCK_ROWS)
    tl.store(positions_ptr + r, (base + r).to(positions_ptr.dtype.element_ty), mask=r < ROWS)
    tl.store(kv_end_ptr + r, (base + r + 1).to(kv_end_ptr.dtype.element_ty), mask=r < ROWS)
    tl.store(state_ptr + 0, n + accepted + 1)
    tl.store(state_ptr + 1, base)
    tl.store(state_ptr + 2, accepted)
    tl.store(state_ptr + 3, tl.load(state_ptr + 3) + 1)
    tl.store(state_ptr + 4, old_base)
    if HAS_HIST:
        tl.store(hist_ptr + accepted + 1, tl.load(hist_ptr + accepted + 1) + 1)


def greedy_commit_triton(
    logits: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, kv_end: torch.Tensor,
    out_tokens: torch.Tensor, state: torch.Tensor, m: int, hist: torch.Tensor | None = None,
) -> None:
    v = logits.shape[-1]
    rows = positions.shape[0]
    nch = triton.cdiv(v, ARGMAX_CHUNK)
    # fresh each call: inside a CUDA-graph capture they come from (and stay in) the graph's own pool
    pmax = torch.empty((m, nch), dtype=torch.float32, device=logits.device)
    pidx = torch.empty((m, nch), dtype=torch.int64, device=logits.device)
    pdl = pdl_args(logits)
    _argmax_partial_kernel[(m, nch)](logits, pmax, pidx, v, nch, CHUNK=ARGMAX_CHUNK, num_warps=4, **pdl)
    _greedy_commit_kernel[(1,)](
        pmax, pidx, tokens, positions, kv_end, out_tokens, state, hist if hist is not None else state, m, nch, rows,
        BLOCK_S=triton.next_power_of_2(nch), BLOCK_ROWS=triton.next_power_of_2(max(rows, 2)), HAS_HIST=hist is not None,
        num_warps=1, **pdl,
    )


def rows_from_base_reference(state: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    """out[r] = state[STATE_PREV_BASE] + r: the positions of the rows the step just committed ran at (where the
    DSpark drafter writes its context for them). No host reads (capturable)."""
    r = torch.arange(out.shape[0], device=out.device, dtype=torch.int64)
    return out.copy_(state[STATE_PREV_BASE] + r)


@triton.jit
def _rows_from_base_kernel(state_ptr, out_ptr, ROWS, BLOCK_ROWS: tl.constexpr, USE_PDL: tl.constexpr):
    pdl_start(USE_PDL)
    r = tl.arange(0, BLOCK_ROWS)
    base = tl.load(state_ptr + 4)  # STATE_PREV_BASE
    tl.store(out_ptr + r, (base + r).to(out_ptr.dtype.element_ty), mask=r < ROWS)


def rows_from_base_triton(state: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    _rows_from_base_kernel[(1,)](state, out, out.shape[0], BLOCK_ROWS=triton.next_power_of_2(max(out.shape[0], 2)),
                                 num_warps=1, **pdl_args(out))
    return out
