"""The DSpark drafter's sequential "Markov" pass: pick each drafted token in turn, re-ranking the
top-K candidates of that position by a low-rank bias from the previously drafted token:

    score_i(c) = base_i(c) + u[c] . v[prev_i]        prev_1 = last committed token, prev_i = draft_{i-1}

u = LM_head @ B and v = Embedding @ A^T are [V, r] tables precomputed from the head's factors, so a
step costs K dot products of length r. One program does all positions (they depend on each other).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.common import pdl_args, pdl_start


def markov_draft_reference(cand_ids: torch.Tensor, cand_vals: torch.Tensor, last: torch.Tensor, u: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    prev = int(last.reshape(-1)[0])
    for i in range(cand_ids.shape[0]):
        scores = cand_vals[i].float() + u[cand_ids[i]].float() @ v[prev].float()
        prev = int(cand_ids[i, int(torch.argmax(scores))])
        out[i] = prev
    return out


@triton.jit
def _markov_draft_kernel(ids_ptr, vals_ptr, last_ptr, u_ptr, v_ptr, out_ptr, P: tl.constexpr, K: tl.constexpr, R: tl.constexpr,
                         USE_PDL: tl.constexpr):
    pdl_start(USE_PDL)
    k = tl.arange(0, K)
    r = tl.arange(0, R)
    prev = tl.load(last_ptr).to(tl.int64)
    for i in tl.static_range(P):
        ids = tl.load(ids_ptr + i * K + k).to(tl.int64)
        vals = tl.load(vals_ptr + i * K + k).to(tl.float32)
        vp = tl.load(v_ptr + prev * R + r).to(tl.float32)
        uc = tl.load(u_ptr + ids[:, None] * R + r[None, :]).to(tl.float32)
        scores = vals + tl.sum(uc * vp[None, :], axis=1)
        best = tl.argmax(scores, axis=0)
        prev = tl.sum(tl.where(k == best, ids, 0), axis=0)
        tl.store(out_ptr + i, prev.to(out_ptr.dtype.element_ty))


def markov_draft_triton(cand_ids: torch.Tensor, cand_vals: torch.Tensor, last: torch.Tensor, u: torch.Tensor, v: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
    p, k = cand_ids.shape
    r = u.shape[1]
    assert cand_ids.is_contiguous() and cand_vals.is_contiguous() and k & (k - 1) == 0 and r & (r - 1) == 0
    _markov_draft_kernel[(1,)](cand_ids, cand_vals, last, u, v, out, P=p, K=k, R=r, num_warps=2, **pdl_args(cand_ids))
    return out
