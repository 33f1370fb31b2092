"""The DSpark drafter's head: from the block's base logits (the LM head on its P draft rows) to the
drafted tokens, their confidences and the depth the confidence picks.

    first draft:   argmax over the whole vocabulary of  base_0(c) + u[c] . v[last]
    later drafts:  the top-K candidates of base_i, re-ranked by the previous draft's bias
                   score_i(c) = base_i(c) + u[c] . v[prev_i]   (the "Markov" pass, one after another)
    confidence_i = sigmoid(h_i . w + a * (max base_i - logsumexp base_i) + b)
    depth        = how many leading cumulative products of the confidences stay >= the threshold

u = LM_head @ B and v = Embedding @ A^T are [V, r] tables precomputed from the Markov head's factors.

On Triton it is three launches, where it was ~20 torch kernels (with it the draft pass went from 237
to 127 us on the H200: docs/perf.md, 2026-12-03):
1. a grid of (vocabulary chunk, row) programs: each row's chunk max and sum of exponentials; for row 0
   the biased first-draft score's chunk argmax; for the later rows the chunk's K largest entries (a
   bisection on the K-th largest value: 32 counts over the chunk in registers, no sort);
2. one program per later row: the K largest of the chunks' candidates (the row's top-K, as a set);
3. one program: the first draft, the Markov pass, the confidences and the depth, and the drafted
   tokens written straight into the target step's input rows 1..P.
Ties go to the smallest token id. The drafts may differ from the torch path's where two scores tie
to the last bit (another summation order); acceptance decides nothing else, and every committed
token is the target's own (lossless either way).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.common import pdl_args, pdl_start
from kernels.greedy_commit import row_argmax

HEAD_CHUNK = 2048  # vocabulary entries per program of pass 1
HEAD_SUB = 128  # rows of u read at a time for the first draft's bias


def markov_draft_reference(cand_ids: torch.Tensor, cand_vals: torch.Tensor, last: torch.Tensor, u: torch.Tensor, v: torch.Tensor,
                           out: torch.Tensor) -> torch.Tensor:
    prev = int(last.reshape(-1)[0])
    for i in range(cand_ids.shape[0]):
        scores = cand_vals[i].float() + u[cand_ids[i]].float() @ v[prev].float()
        prev = int(cand_ids[i, int(torch.argmax(scores))])
        out[i] = prev
    return out


def draft_head_reference(base: torch.Tensor, h: torch.Tensor, last: torch.Tensor, u: torch.Tensor, v: torch.Tensor,
                         conf_w: torch.Tensor, conf_a: torch.Tensor, conf_b: torch.Tensor, threshold: torch.Tensor,
                         k: int, drafts: torch.Tensor, confidence: torch.Tensor, depth: torch.Tensor,
                         tokens: torch.Tensor) -> None:
    """base [P, V] float32, h [P, D] float32, last [1] (the last committed token). Writes drafts [P],
    confidence [P], depth [] and tokens[1 : 1 + P] (the drafts)."""
    prev = v.index_select(0, last)  # [1, r]; a device-side gather, no host read
    first = base[0] + u.float() @ prev[0].float()
    drafts[0] = torch.argmax(first)
    vals, ids = torch.topk(base[1:], k, dim=-1)
    markov_draft_reference(ids, vals, drafts[:1], u, v, drafts[1:])
    top = base.max(-1).values - torch.logsumexp(base, -1)
    conf = torch.sigmoid(h @ conf_w + conf_a * top + conf_b)
    confidence.copy_(conf)
    depth.copy_((torch.cumprod(conf, 0) >= threshold).sum())
    tokens[1 : 1 + drafts.shape[0]] = drafts


@triton.jit
def _order_key(x):
    """float32 -> int64 with the same order (the float's bits, negative ones flipped)."""
    b = x.to(tl.int32, bitcast=True)
    return tl.where(b >= 0, b, b ^ 0x7FFFFFFF).to(tl.int64)


@triton.jit
def _top_k_select(key, valid, K: tl.constexpr):
    """Which entries are the K largest valid ones (all valid ones when there are fewer): a bisection on
    the K-th largest key (32 counts), then the ties at it taken in index order, smallest first."""
    lo = tl.min(tl.zeros_like(key), axis=0) - 2147483648  # count(key >= lo) >= K, or lo stays here
    hi = lo + 4294967296  # count(key >= hi) < K
    for _ in tl.static_range(32):
        mid = (lo + hi) >> 1
        enough = tl.sum(((key >= mid) & valid).to(tl.int32), axis=0) >= K
        lo = tl.where(enough, mid, lo)
        hi = tl.where(enough, hi, mid)
    above = valid & (key > lo)
    at = (valid & (key == lo)).to(tl.int32)
    need = K - tl.sum(above.to(tl.int32), axis=0)
    return above | ((at > 0) & (tl.cumsum(at, axis=0) <= need))


@triton.jit
def _head_chunk_kernel(base_ptr, u_ptr, v_ptr, last_ptr, rmax_ptr, rsum_ptr, fmax_ptr, fidx_ptr, cid_ptr, cval_ptr, V, NCH,
                       R: tl.constexpr, K: tl.constexpr, CHUNK: tl.constexpr, SUB: tl.constexpr, USE_PDL: tl.constexpr):
    """Pass 1, program (chunk c, row)."""
    pdl_start(USE_PDL)
    c = tl.program_id(0)
    row = tl.program_id(1)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    valid = offs < V
    x = tl.load(base_ptr + row * V + offs, mask=valid, other=float("-inf"))
    m = tl.max(x, axis=0)
    tl.store(rmax_ptr + row * NCH + c, m)
    tl.store(rsum_ptr + row * NCH + c, tl.sum(tl.exp(x - m), axis=0))
    if row == 0:
        r = tl.arange(0, R)
        vp = tl.load(v_ptr + tl.load(last_ptr).to(tl.int64) * R + r).to(tl.float32)
        best = tl.max(tl.full([SUB], float("-inf"), tl.float32), axis=0)
        best_idx = tl.min(tl.zeros([SUB], tl.int64), axis=0)
        for sub in tl.static_range(0, CHUNK, SUB):
            so = c * CHUNK + sub + tl.arange(0, SUB)
            xs = tl.load(base_ptr + so, mask=so < V, other=float("-inf"))
            uu = tl.load(u_ptr + so.to(tl.int64)[:, None] * R + r[None, :], mask=(so < V)[:, None], other=0.0).to(tl.float32)
            sc = xs + tl.sum(uu * vp[None, :], axis=1)
            cm = tl.max(sc, axis=0)
            ci = tl.argmax(sc, axis=0, tie_break_left=True).to(tl.int64) + c * CHUNK + sub
            better = cm > best
            best_idx = tl.where(better, ci, best_idx)
            best = tl.where(better, cm, best)
        tl.store(fmax_ptr + c, best)
        tl.store(fidx_ptr + c, best_idx)
    else:
        # the chunk's K largest, in index order, to slots [0, min(K, valid entries)) of its candidate list
        sel = _top_k_select(_order_key(x), valid, K)
        slot = tl.cumsum(sel.to(tl.int32), axis=0) - 1
        out = ((row - 1) * NCH + c) * K + slot
        tl.store(cid_ptr + out, offs.to(tl.int64), mask=sel)
        tl.store(cval_ptr + out, x, mask=sel)


@triton.jit
def _head_merge_kernel(cid_ptr, cval_ptr, ids_ptr, vals_ptr, V, NCH, K: tl.constexpr, CHUNK: tl.constexpr, BLOCK: tl.constexpr,
                       USE_PDL: tl.constexpr):
    """Pass 2, program (later row): the K largest of the row's chunk candidates (ids in increasing order)."""
    pdl_start(USE_PDL)
    row = tl.program_id(0)
    j = tl.arange(0, BLOCK)
    chunk = j // K
    valid = (chunk < NCH) & (j % K < tl.minimum(V - chunk * CHUNK, K))
    cid = tl.load(cid_ptr + row * NCH * K + j, mask=valid, other=0)
    cval = tl.load(cval_ptr + row * NCH * K + j, mask=valid, other=float("-inf"))
    sel = _top_k_select(_order_key(cval), valid, K)
    slot = tl.cumsum(sel.to(tl.int32), axis=0) - 1
    tl.store(ids_ptr + row * K + slot, cid, mask=sel)
    tl.store(vals_ptr + row * K + slot, cval, mask=sel)


@triton.jit
def _head_final_kernel(ids_ptr, vals_ptr, fmax_ptr, fidx_ptr, rmax_ptr, rsum_ptr, h_ptr, u_ptr, v_ptr, conf_w_ptr, conf_a_ptr,
                       conf_b_ptr, thr_ptr, drafts_ptr, conf_ptr, depth_ptr, tokens_ptr, NCH, D,
                       P: tl.constexpr, K: tl.constexpr, R: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_D: tl.constexpr,
                       USE_PDL: tl.constexpr):
    """Pass 3, one program: the first draft, the Markov pass, the confidences and the depth."""
    pdl_start(USE_PDL)
    s = tl.arange(0, BLOCK_S)
    prev = row_argmax(fmax_ptr, fidx_ptr, 0, NCH, BLOCK_S)  # the first draft, from pass 1's chunk argmaxes
    tl.store(drafts_ptr, prev)
    tl.store(tokens_ptr + 1, prev.to(tokens_ptr.dtype.element_ty))
    k = tl.arange(0, K)
    r = tl.arange(0, R)
    for i in tl.static_range(P - 1):
        ids = tl.load(ids_ptr + i * K + k)
        vals = tl.load(vals_ptr + i * K + k)
        vp = tl.load(v_ptr + prev * R + r).to(tl.float32)
        uc = tl.load(u_ptr + ids[:, None] * R + r[None, :]).to(tl.float32)
        scores = vals + tl.sum(uc * vp[None, :], axis=1)
        best = tl.max(scores, axis=0)
        prev = tl.min(tl.where(scores == best, ids, 2**62), axis=0)
        tl.store(drafts_ptr + 1 + i, prev)
        tl.store(tokens_ptr + 2 + i, prev.to(tokens_ptr.dtype.element_ty))
    d = tl.arange(0, BLOCK_D)
    w = tl.load(conf_w_ptr + d, mask=d < D, other=0.0)
    a = tl.load(conf_a_ptr)
    b = tl.load(conf_b_ptr)
    thr = tl.load(thr_ptr)
    cum = a * 0.0 + 1.0
    depth = tl.min(tl.zeros([BLOCK_S], tl.int64), axis=0)
    for p in tl.static_range(P):
        rm = tl.load(rmax_ptr + p * NCH + s, mask=s < NCH, other=float("-inf"))
        rs = tl.load(rsum_ptr + p * NCH + s, mask=s < NCH, other=0.0)
        mx = tl.max(rm, axis=0)
        lse = mx + tl.log(tl.sum(rs * tl.exp(rm - mx), axis=0))
        hv = tl.load(h_ptr + p * D + d, mask=d < D, other=0.0)
        z = tl.sum(hv * w, axis=0) + a * (mx - lse) + b
        conf = 1.0 / (1.0 + tl.exp(-z))
        tl.store(conf_ptr + p, conf)
        cum = cum * conf
        depth += (cum >= thr).to(tl.int64)
    tl.store(depth_ptr, depth)


def draft_head_triton(base: torch.Tensor, h: torch.Tensor, last: torch.Tensor, u: torch.Tensor, v: torch.Tensor,
                      conf_w: torch.Tensor, conf_a: torch.Tensor, conf_b: torch.Tensor, threshold: torch.Tensor,
                      k: int, drafts: torch.Tensor, confidence: torch.Tensor, depth: torch.Tensor,
                      tokens: torch.Tensor) -> None:
    p, vocab = base.shape
    r = u.shape[1]
    dim = h.shape[1]
    assert base.is_contiguous() and h.is_contiguous() and u.is_contiguous() and v.is_contiguous()
    assert k & (k - 1) == 0 and r & (r - 1) == 0 and k <= min(HEAD_CHUNK, vocab) and p >= 2
    dev = base.device
    nch = triton.cdiv(vocab, HEAD_CHUNK)
    # fresh each call: inside a CUDA-graph capture they come from (and stay in) the graph's own pool
    rmax = torch.empty((p, nch), dtype=torch.float32, device=dev)
    rsum = torch.empty((p, nch), dtype=torch.float32, device=dev)
    fmax = torch.empty(nch, dtype=torch.float32, device=dev)
    fidx = torch.empty(nch, dtype=torch.int64, device=dev)
    cid = torch.empty((p - 1, nch, k), dtype=torch.int64, device=dev)
    cval = torch.empty((p - 1, nch, k), dtype=torch.float32, device=dev)
    ids = torch.empty((p - 1, k), dtype=torch.int64, device=dev)
    vals = torch.empty((p - 1, k), dtype=torch.float32, device=dev)
    pdl = pdl_args(base)
    _head_chunk_kernel[(nch, p)](base, u, v, last, rmax, rsum, fmax, fidx, cid, cval, vocab, nch,
                                 R=r, K=k, CHUNK=HEAD_CHUNK, SUB=HEAD_SUB, num_warps=8, **pdl)
    _head_merge_kernel[(p - 1,)](cid, cval, ids, vals, vocab, nch, K=k, CHUNK=HEAD_CHUNK, BLOCK=triton.next_power_of_2(nch * k),
                                 num_warps=8, **pdl)
    _head_final_kernel[(1,)](ids, vals, fmax, fidx, rmax, rsum, h, u, v, conf_w, conf_a, conf_b, threshold, drafts, confidence, depth,
                             tokens, nch, dim, P=p, K=k, R=r, BLOCK_S=triton.next_power_of_2(nch),
                             BLOCK_D=triton.next_power_of_2(dim), num_warps=4, **pdl)
