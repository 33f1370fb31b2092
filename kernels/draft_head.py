"""The DSpark drafter's head: from the block's base logits (the LM head on its P draft rows) to the
drafted tokens, their confidences and the depth the confidence picks.

    draft_i      = argmax over the whole vocabulary of  base_i(c) + u[c] . v[prev_i]
                   prev_0 = the last committed token, prev_i = draft_{i-1} (the Markov bias, in order)
    confidence_i = sigmoid(h_i . w + a * (max base_i - logsumexp base_i) + b)
    depth        = how many leading cumulative products of the confidences stay >= the threshold

u = LM_head @ B and v = Embedding @ A^T are [V, r] tables precomputed from the Markov head's factors.
This is the drafter's own distribution as it was trained (module.py adds the bias over the whole
vocabulary); until 2026-12-04 the later drafts re-ranked only their position's top 64 base logits,
found by bisections that made the head ~45 us of a ~130 us draft pass on the H200.

On Triton it is P + 1 launches, one per draft and one for the confidences:
- depth i: a grid of vocabulary chunks. Each program loads its chunk of u (constant) and, from depth 1
  on, of base_i (the LM head, two launches back, wrote it) before its dependency wait; after it, it
  reduces the previous depth's chunk argmaxes to prev_i (row_argmax: the first index of the max, as
  torch.argmax), reads v[prev_i], and writes its chunk's biased max and first index; it also writes
  row i's unbiased chunk max and sum of exponentials for the confidence. Program 0 writes prev_i into
  drafts[i-1] and the target step's token row i.
- the last: one program reduces the last depth to its draft, then the confidences and the depth.
Ties go to the smallest token id. A draft may differ from the torch path's where two scores tie to
the last bit (another summation order); acceptance decides nothing else, and every committed token
is the target's own (lossless either way).
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from kernels.common import pdl_args, pdl_start
from kernels.greedy_commit import row_argmax
from kernels.tuning import config_for


def draft_head_reference(base: torch.Tensor, h: torch.Tensor, last: torch.Tensor, u: torch.Tensor, v: torch.Tensor,
                         conf_w: torch.Tensor, conf_a: torch.Tensor, conf_b: torch.Tensor, threshold: torch.Tensor,
                         drafts: torch.Tensor, confidence: torch.Tensor, depth: torch.Tensor, tokens: torch.Tensor) -> None:
    """base [P, V] float32, h [P, D] float32, last [1] (the last committed token). Writes drafts [P],
    confidence [P], depth [] and tokens[1 : 1 + P] (the drafts). No host reads (capturable)."""
    uf = u.float()
    prev = last.reshape(-1)[:1]
    for i in range(base.shape[0]):
        scores = base[i] + uf @ v.index_select(0, prev)[0].float()
        drafts[i : i + 1] = torch.argmax(scores).reshape(1)
        prev = drafts[i : i + 1]
    top = base.max(-1).values - torch.logsumexp(base, -1)
    conf = torch.sigmoid(h @ conf_w + conf_a * top + conf_b)
    confidence.copy_(conf)
    depth.copy_((torch.cumprod(conf, 0) >= threshold).sum())
    tokens[1 : 1 + drafts.shape[0]] = drafts


@triton.jit
def _head_depth_kernel(base_ptr, u_ptr, v_ptr, last_ptr, pmax_ptr, pidx_ptr, cmax_ptr, cidx_ptr, rmax_ptr, rsum_ptr,
                       drafts_ptr, tokens_ptr, V, NCH, ROW: tl.constexpr, R: tl.constexpr, CHUNK: tl.constexpr,
                       BLOCK_S: tl.constexpr, USE_PDL: tl.constexpr):
    """Draft ROW, program (vocabulary chunk c)."""
    c = tl.program_id(0)
    offs = c * CHUNK + tl.arange(0, CHUNK)
    valid = offs < V
    r = tl.arange(0, R)
    uu = tl.load(u_ptr + offs.to(tl.int64)[:, None] * R + r[None, :], mask=valid[:, None], other=0.0)  # constant
    if ROW == 0:  # base is the LM head's output, the launch just before: after the wait
        pdl_start(USE_PDL)
        x = tl.load(base_ptr + offs, mask=valid, other=float("-inf"))
        prev = tl.load(last_ptr).to(tl.int64)
    else:  # written two launches back or more: every program of the launch before has passed its wait
        x = tl.load(base_ptr + ROW * V + offs, mask=valid, other=float("-inf"))
        pdl_start(USE_PDL)
        prev = row_argmax(pmax_ptr, pidx_ptr, 0, NCH, BLOCK_S)
        if c == 0:
            tl.store(drafts_ptr + ROW - 1, prev)
            tl.store(tokens_ptr + ROW, prev.to(tokens_ptr.dtype.element_ty))
    m = tl.max(x, axis=0)
    tl.store(rmax_ptr + ROW * NCH + c, m)
    tl.store(rsum_ptr + ROW * NCH + c, tl.sum(tl.exp(x - m), axis=0))
    vp = tl.load(v_ptr + prev * R + r).to(tl.float32)
    sc = tl.where(valid, x + tl.sum(uu.to(tl.float32) * vp[None, :], axis=1), float("-inf"))
    tl.store(cmax_ptr + c, tl.max(sc, axis=0))
    tl.store(cidx_ptr + c, tl.argmax(sc, axis=0, tie_break_left=True).to(tl.int64) + c * CHUNK)


@triton.jit
def _head_final_kernel(pmax_ptr, pidx_ptr, rmax_ptr, rsum_ptr, h_ptr, conf_w_ptr, conf_a_ptr, conf_b_ptr, thr_ptr, drafts_ptr,
                       conf_ptr, depth_ptr, tokens_ptr, NCH, D, P: tl.constexpr, BLOCK_P: tl.constexpr, BLOCK_S: tl.constexpr,
                       BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr):
    """One program: the last draft, the confidences and the depth."""
    pdl_start(USE_PDL)
    prev = row_argmax(pmax_ptr, pidx_ptr, 0, NCH, BLOCK_S)
    p = tl.arange(0, BLOCK_P)
    s = tl.arange(0, BLOCK_S)
    d = tl.arange(0, BLOCK_D)
    rm = tl.load(rmax_ptr + p[:, None] * NCH + s[None, :], mask=(p[:, None] < P) & (s[None, :] < NCH), other=float("-inf"))
    rs = tl.load(rsum_ptr + p[:, None] * NCH + s[None, :], mask=(p[:, None] < P) & (s[None, :] < NCH), other=0.0)
    hv = tl.load(h_ptr + p[:, None] * D + d[None, :], mask=(p[:, None] < P) & (d[None, :] < D), other=0.0)
    w = tl.load(conf_w_ptr + d, mask=d < D, other=0.0)
    a = tl.load(conf_a_ptr)
    b = tl.load(conf_b_ptr)
    thr = tl.load(thr_ptr)
    tl.store(drafts_ptr + P - 1, prev)
    tl.store(tokens_ptr + P, prev.to(tokens_ptr.dtype.element_ty))
    mx = tl.max(rm, axis=1)
    mx_safe = tl.where(p < P, mx, 0.0)  # rows past P: no -inf - -inf, no log(0)
    lse = mx_safe + tl.log(tl.where(p < P, tl.sum(rs * tl.exp(rm - mx_safe[:, None]), axis=1), 1.0))
    z = tl.sum(hv * w[None, :], axis=1) + a * (mx_safe - lse) + b
    conf = 1.0 / (1.0 + tl.exp(-z))
    tl.store(conf_ptr + p, conf, mask=p < P)
    cum = a * 0.0 + 1.0
    depth = tl.min(tl.zeros([BLOCK_P], tl.int64), axis=0)
    for i in tl.static_range(P):  # the cumulative product in order, as torch.cumprod
        cum = cum * tl.sum(tl.where(p == i, conf, 0.0), axis=0)
        depth += (cum >= thr).to(tl.int64)
    tl.store(depth_ptr, depth)


def draft_head_triton(base: torch.Tensor, h: torch.Tensor, last: torch.Tensor, u: torch.Tensor, v: torch.Tensor,
                      conf_w: torch.Tensor, conf_a: torch.Tensor, conf_b: torch.Tensor, threshold: torch.Tensor,
                      drafts: torch.Tensor, confidence: torch.Tensor, depth: torch.Tensor, tokens: torch.Tensor) -> None:
    p, vocab = base.shape
    r = u.shape[1]
    dim = h.shape[1]
    assert base.is_contiguous() and h.is_contiguous() and u.is_contiguous() and v.is_contiguous()
    assert r & (r - 1) == 0 and p >= 1
    cfg = config_for("head", vocab, r)  # block_n = vocabulary entries per program
    dev = base.device
    nch = triton.cdiv(vocab, cfg.block_n)
    block_s = triton.next_power_of_2(nch)
    # fresh each call: inside a CUDA-graph capture they come from (and stay in) the graph's own pool
    rmax = torch.empty((p, nch), dtype=torch.float32, device=dev)
    rsum = torch.empty((p, nch), dtype=torch.float32, device=dev)
    cmax = torch.empty((p, nch), dtype=torch.float32, device=dev)  # depth i's biased chunk max and first index
    cidx = torch.empty((p, nch), dtype=torch.int64, device=dev)
    pdl = pdl_args(base)
    for i in range(p):
        prev_i = max(i - 1, 0)
        _head_depth_kernel[(nch,)](base, u, v, last, cmax[prev_i], cidx[prev_i], cmax[i], cidx[i], rmax, rsum, drafts, tokens,
                                   vocab, nch, ROW=i, R=r, CHUNK=cfg.block_n, BLOCK_S=block_s, num_warps=cfg.num_warps, **pdl)
    _head_final_kernel[(1,)](cmax[p - 1], cidx[p - 1], rmax, rsum, h, conf_w, conf_a, conf_b, threshold, drafts, confidence, depth,
                             tokens, nch, dim, P=p, BLOCK_P=triton.next_power_of_2(max(p, 2)), BLOCK_S=block_s,
                             BLOCK_D=triton.next_power_of_2(dim), num_warps=4, **pdl)
