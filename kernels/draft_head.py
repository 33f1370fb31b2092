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
        prev = row_argmax(pmax_ptr, pidx_ptr, 0, NCH, BLOCK_S, "")
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
    prev = row_argmax(pmax_ptr, pidx_ptr, 0, NCH, BLOCK_S, "")
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


# -- a token tree ---------------------------------------------------------------------------------------
# tree_head: instead of one chain, N drafts grown best-first (EAGLE-2's dynamic tree): every node's
# children are its top F candidates under the drafter's own distribution at the next depth,
# log_softmax(base_d + u . v[node's token]), scored by the sum of log-probabilities along their path;
# N times the best-scored candidate not yet taken becomes a node (ties: the first candidate generated)
# and, unless it is at the block's last depth, adds its own F candidates. Node k is the target step's row
# k (row 0 the last committed token): a node's parent is always an earlier row.


def tree_head_reference(base: torch.Tensor, u: torch.Tensor, v: torch.Tensor, n_nodes: int, fanout: int,
                        tokens: torch.Tensor, positions: torch.Tensor, kv_end: torch.Tensor, slots: torch.Tensor,
                        tree: torch.Tensor, parents: torch.Tensor) -> None:
    """base [P, V] float32 (the block's base logits), tokens[0] the last committed token at positions[0].
    Writes rows 1..n_nodes of the step's inputs: tokens, positions (base + depth), kv_end, slots (base + row),
    tree (the ancestors, StepIO.tree) and parents. No host reads (capturable)."""
    dev = base.device
    p, vocab = base.shape
    uf = u.float()
    n = n_nodes + 1
    tok = tokens[:1].clone()
    depth = torch.zeros(1, dtype=torch.int64, device=dev)
    score = torch.zeros(1, device=dev)
    cand_score = torch.full((n_nodes * fanout,), float("-inf"), device=dev)
    cand_tok = torch.zeros(n_nodes * fanout, dtype=torch.int64, device=dev)
    cand_parent = torch.zeros(n_nodes * fanout, dtype=torch.int64, device=dev)
    cand_depth = torch.zeros(n_nodes * fanout, dtype=torch.int64, device=dev)
    node_tok, node_depth, node_parent = [tok], [depth], [torch.full((1,), -1, dtype=torch.int64, device=dev)]
    for k in range(n_nodes):
        # node k's candidates: its top F children, at depth + 1 (none past the block's last depth)
        row = base.index_select(0, depth.clamp(max=p - 1))[0]
        logp = torch.log_softmax(row + uf @ v.index_select(0, tok)[0].float(), -1)
        top = logp.topk(fanout)
        live = depth < p
        cand_score[k * fanout : (k + 1) * fanout] = torch.where(live, score + top.values, float("-inf"))
        cand_tok[k * fanout : (k + 1) * fanout] = top.indices
        cand_parent[k * fanout : (k + 1) * fanout] = k
        cand_depth[k * fanout : (k + 1) * fanout] = depth + 1
        best = torch.argmax(cand_score).reshape(1)
        tok, depth, score = cand_tok[best], cand_depth[best], cand_score[best].clone()
        node_tok.append(tok)
        node_depth.append(depth)
        node_parent.append(cand_parent[best])
        cand_score[best] = float("-inf")
    toks = torch.cat(node_tok)
    depths = torch.cat(node_depth)
    pars = torch.cat(node_parent)
    at = positions[:1].long()
    tokens[1:n] = toks[1:]
    positions[:n] = (at + depths).to(positions.dtype)
    kv_end[:n] = (at + depths + 1).to(kv_end.dtype)
    r = torch.arange(slots.shape[0], device=dev)
    slots.copy_((at + r).to(slots.dtype))
    parents[:n] = pars.to(parents.dtype)
    i = torch.arange(tree.shape[1], device=dev)
    anc = [torch.zeros(tree.shape[1], dtype=torch.int64, device=dev)]
    for c in range(1, n):
        up = anc[0] * 0
        for a in range(c):  # the parent's ancestors (a one-hot pick: no host read of the parent)
            up = up + torch.where(pars[c] == a, anc[a], 0)
        anc.append(torch.where(i < depths[c], up, torch.where(i == depths[c], c, 0)))
    tree[:n] = torch.stack(anc).to(tree.dtype)


@triton.jit
def _tree_children(pval_ptr, pidx_ptr, pmax_ptr, psum_ptr, node, score, depth, NCH, P, F: tl.constexpr,
                   BLOCK_S: tl.constexpr, BLOCK_F: tl.constexpr):
    """Node `node`'s top F children from its expansion's chunk partials: [BLOCK_F] scores (the node's score
    plus each child's log-probability; -inf past F, or all of them where the node is at the last depth) and
    tokens. Ties: the smaller token id."""
    s = tl.arange(0, BLOCK_S)
    mx = tl.load(pmax_ptr + node * NCH + s, mask=s < NCH, other=float("-inf"))
    sm = tl.load(psum_ptr + node * NCH + s, mask=s < NCH, other=0.0)
    big = tl.max(mx, axis=0)
    lse = big + tl.log(tl.sum(sm * tl.exp(mx - big), axis=0))
    f = tl.arange(0, BLOCK_F)
    ok = (s[:, None] < NCH) & (f[None, :] < F)
    at2 = (node * NCH + s[:, None]) * F + f[None, :]
    vals = tl.load(pval_ptr + at2, mask=ok, other=float("-inf"))
    idxs = tl.load(pidx_ptr + at2, mask=ok, other=2**62)
    out_s = tl.full([BLOCK_F], float("-inf"), tl.float32)
    out_t = tl.zeros([BLOCK_F], tl.int64)
    live = depth < P
    for i in tl.static_range(F):
        best = tl.max(tl.max(vals, axis=1), axis=0)
        at = tl.min(tl.min(tl.where(vals == best, idxs, 2**62), axis=1), axis=0)  # the smallest token id among the best
        out_s = tl.where((f == i) & live, score + best - lse, out_s)
        out_t = tl.where(f == i, at, out_t)
        vals = tl.where(idxs == at, float("-inf"), vals)
    return out_s, out_t


@triton.jit
def _tree_pick(cand_s_ptr, cand_t_ptr, cand_p_ptr, cand_d_ptr, node_c_ptr, node_d_ptr, kid_s, kid_t, K: tl.constexpr,
               F: tl.constexpr, BLOCK_C: tl.constexpr, BLOCK_F: tl.constexpr):
    """Node K: the best candidate not yet taken among nodes 0..K-2's children (stored) and node K-1's (kid_s,
    kid_t). Returns (candidate id, token, parent, depth, score) and the candidate ids of node K-1's children."""
    c = tl.arange(0, BLOCK_C)
    old = c < (K - 1) * F
    sc = tl.load(cand_s_ptr + c, mask=old, other=float("-inf"))
    f = tl.arange(0, BLOCK_F)
    new_at = (K - 1) * F + f
    for i in tl.static_range(F):
        sc = tl.where(c == (K - 1) * F + i, tl.sum(tl.where(f == i, kid_s, 0.0), axis=0), sc)
    for j in tl.static_range(1, K):
        sc = tl.where(c == tl.load(node_c_ptr + j), float("-inf"), sc)
    best = tl.max(sc, axis=0)
    pick = tl.min(tl.where(sc == best, c, BLOCK_C), axis=0)
    is_new = pick >= (K - 1) * F
    kid = pick - (K - 1) * F
    tok_new = tl.sum(tl.where(f == kid, kid_t, 0), axis=0)
    tok_old = tl.load(cand_t_ptr + pick, mask=is_new == 0, other=0)
    par_old = tl.load(cand_p_ptr + pick, mask=is_new == 0, other=0)
    dep_old = tl.load(cand_d_ptr + pick, mask=is_new == 0, other=0)
    dep_new = tl.load(node_d_ptr + K - 1) + 1
    tok = tl.where(is_new, tok_new, tok_old)
    par = tl.where(is_new, K - 1, par_old)
    dep = tl.where(is_new, dep_new, dep_old)
    return pick, tok, par, dep, best, new_at


@triton.jit
def _tree_expand_kernel(base_ptr, u_ptr, v_ptr, tokens_ptr, pval_ptr, pidx_ptr, pmax_ptr, psum_ptr,
                        cand_s_ptr, cand_t_ptr, cand_p_ptr, cand_d_ptr, node_t_ptr, node_p_ptr, node_d_ptr, node_s_ptr,
                        node_c_ptr, V, NCH, P, K: tl.constexpr, F: tl.constexpr, R: tl.constexpr, CHUNK: tl.constexpr,
                        BLOCK_S: tl.constexpr, BLOCK_F: tl.constexpr, BLOCK_C: tl.constexpr, USE_PDL: tl.constexpr):
    """Launch K (grid: vocabulary chunks): pick node K (K = 0: the root, the last committed token), then its
    children's chunk partials: each chunk's max and sum of exponentials (for the log-softmax) and its top F."""
    ch = tl.program_id(0)
    offs = ch * CHUNK + tl.arange(0, CHUNK)
    valid = offs < V
    r = tl.arange(0, R)
    uu = tl.load(u_ptr + offs.to(tl.int64)[:, None] * R + r[None, :], mask=valid[:, None], other=0.0)  # constant
    pdl_start(USE_PDL)
    if K == 0:
        tok = tl.load(tokens_ptr).to(tl.int64)
        dep = tl.min(tl.zeros([2], tl.int32), axis=0)
        score = tl.sum(tl.zeros([2], tl.float32), axis=0)
        if ch == 0:
            tl.store(node_t_ptr, tok)
            tl.store(node_p_ptr, -1)
            tl.store(node_d_ptr, dep)
            tl.store(node_s_ptr, score)
            tl.store(node_c_ptr, -1)
    else:
        kid_s, kid_t = _tree_children(pval_ptr, pidx_ptr, pmax_ptr, psum_ptr, K - 1, tl.load(node_s_ptr + K - 1),
                                      tl.load(node_d_ptr + K - 1), NCH, P, F, BLOCK_S, BLOCK_F)
        pick, tok, par, dep, score, new_at = _tree_pick(cand_s_ptr, cand_t_ptr, cand_p_ptr, cand_d_ptr, node_c_ptr, node_d_ptr,
                                                        kid_s, kid_t, K, F, BLOCK_C, BLOCK_F)
        if ch == 0:
            f = tl.arange(0, BLOCK_F)
            tl.store(cand_s_ptr + new_at, kid_s, mask=f < F)
            tl.store(cand_t_ptr + new_at, kid_t, mask=f < F)
            tl.store(cand_p_ptr + new_at, tl.zeros([BLOCK_F], tl.int32) + K - 1, mask=f < F)
            tl.store(cand_d_ptr + new_at, tl.zeros([BLOCK_F], tl.int32) + tl.load(node_d_ptr + K - 1) + 1, mask=f < F)
            tl.store(node_t_ptr + K, tok)
            tl.store(node_p_ptr + K, par)
            tl.store(node_d_ptr + K, dep)
            tl.store(node_s_ptr + K, score)
            tl.store(node_c_ptr + K, pick)
    # node K's children over this chunk (the block's last depth has none: _tree_children gives them -inf)
    row = tl.minimum(dep, P - 1)
    x = tl.load(base_ptr + row * V + offs, mask=valid, other=float("-inf"))
    vp = tl.load(v_ptr + tok * R + r).to(tl.float32)
    sc = tl.where(valid, x + tl.sum(uu.to(tl.float32) * vp[None, :], axis=1), float("-inf"))
    m = tl.max(sc, axis=0)
    tl.store(pmax_ptr + K * NCH + ch, m)
    tl.store(psum_ptr + K * NCH + ch, tl.sum(tl.where(valid, tl.exp(sc - m), 0.0), axis=0))
    for i in tl.static_range(F):
        best = tl.max(sc, axis=0)
        at = tl.argmax(sc, axis=0, tie_break_left=True)
        tl.store(pval_ptr + (K * NCH + ch) * F + i, best)
        tl.store(pidx_ptr + (K * NCH + ch) * F + i, (at + ch * CHUNK).to(tl.int64))
        sc = tl.where(tl.arange(0, CHUNK) == at, float("-inf"), sc)


@triton.jit
def _tree_final_kernel(pval_ptr, pidx_ptr, pmax_ptr, psum_ptr, cand_s_ptr, cand_t_ptr, cand_p_ptr, cand_d_ptr,
                       node_t_ptr, node_p_ptr, node_d_ptr, node_s_ptr, node_c_ptr,
                       tokens_ptr, positions_ptr, kv_end_ptr, slots_ptr, tree_ptr, parents_ptr, NCH, P, ROWS,
                       K: tl.constexpr, F: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_F: tl.constexpr, BLOCK_C: tl.constexpr,
                       BLOCK_ROWS: tl.constexpr, W: tl.constexpr, USE_PDL: tl.constexpr):
    """One program: node K (the last), then the step's inputs for rows 0..K (StepIO.set_tree's)."""
    pdl_start(USE_PDL)
    kid_s, kid_t = _tree_children(pval_ptr, pidx_ptr, pmax_ptr, psum_ptr, K - 1, tl.load(node_s_ptr + K - 1),
                                  tl.load(node_d_ptr + K - 1), NCH, P, F, BLOCK_S, BLOCK_F)
    pick, tok, par, dep, score, new_at = _tree_pick(cand_s_ptr, cand_t_ptr, cand_p_ptr, cand_d_ptr, node_c_ptr, node_d_ptr,
                                                    kid_s, kid_t, K, F, BLOCK_C, BLOCK_F)
    rr = tl.arange(0, BLOCK_ROWS)
    inside = rr < K
    toks = tl.load(node_t_ptr + rr, mask=inside, other=0)
    toks = tl.where(rr == K, tok, toks)
    pars = tl.load(node_p_ptr + rr, mask=inside, other=0)
    pars = tl.where(rr == K, par, pars)
    deps = tl.load(node_d_ptr + rr, mask=inside, other=0)
    deps = tl.where(rr == K, dep, deps)
    base = tl.load(positions_ptr)
    rows = rr <= K
    tl.store(tokens_ptr + rr, toks.to(tokens_ptr.dtype.element_ty), mask=rows & (rr >= 1))
    tl.store(positions_ptr + rr, (base + deps).to(positions_ptr.dtype.element_ty), mask=rows)
    tl.store(kv_end_ptr + rr, (base + deps + 1).to(kv_end_ptr.dtype.element_ty), mask=rows)
    tl.store(slots_ptr + rr, (base + rr).to(slots_ptr.dtype.element_ty), mask=rr < ROWS)
    tl.store(parents_ptr + rr, pars.to(parents_ptr.dtype.element_ty), mask=rows)
    # ancestors: row c's depth-i ancestor, walking up from each row at once
    w = tl.arange(0, W)
    anc = tl.zeros([BLOCK_ROWS, W], tl.int32)
    cur = rr
    cur_d = deps
    for _ in tl.static_range(W):
        anc = tl.where((w[None, :] == cur_d[:, None]) & (cur_d[:, None] >= 0), cur[:, None], anc)
        nxt = tl.zeros([BLOCK_ROWS], tl.int32)
        for c in tl.static_range(BLOCK_ROWS):  # cur's parent (a gather over the few rows)
            nxt = tl.where(cur == c, tl.sum(tl.where(rr == c, pars, 0), axis=0), nxt)
        cur = nxt
        cur_d = cur_d - 1
    tl.store(tree_ptr + rr[:, None] * W + w[None, :], anc, mask=rows[:, None] & (w[None, :] < W))


def tree_head_triton(base: torch.Tensor, u: torch.Tensor, v: torch.Tensor, n_nodes: int, fanout: int,
                     tokens: torch.Tensor, positions: torch.Tensor, kv_end: torch.Tensor, slots: torch.Tensor,
                     tree: torch.Tensor, parents: torch.Tensor) -> None:
    """tree_head_reference on the GPU: n_nodes + 1 launches (n_nodes expansions, one per vocabulary chunk, and
    the last node with the step's inputs)."""
    p, vocab = base.shape
    r = u.shape[1]
    assert base.is_contiguous() and u.is_contiguous() and v.is_contiguous() and tree.is_contiguous()
    assert r & (r - 1) == 0 and n_nodes >= 1
    cfg = config_for("head", vocab, r)
    dev = base.device
    nch = triton.cdiv(vocab, cfg.block_n)
    n, f = n_nodes, fanout
    # fresh each call: inside a CUDA-graph capture they come from (and stay in) the graph's own pool
    pval = torch.empty((n, nch, f), dtype=torch.float32, device=dev)
    pidx = torch.empty((n, nch, f), dtype=torch.int64, device=dev)
    pmax = torch.empty((n, nch), dtype=torch.float32, device=dev)
    psum = torch.empty((n, nch), dtype=torch.float32, device=dev)
    cand_s = torch.empty(n * f, dtype=torch.float32, device=dev)
    cand_t = torch.empty(n * f, dtype=torch.int64, device=dev)
    cand_p = torch.empty(n * f, dtype=torch.int32, device=dev)
    cand_d = torch.empty(n * f, dtype=torch.int32, device=dev)
    node_t = torch.empty(n + 1, dtype=torch.int64, device=dev)
    node_p = torch.empty(n + 1, dtype=torch.int32, device=dev)
    node_d = torch.empty(n + 1, dtype=torch.int32, device=dev)
    node_s = torch.empty(n + 1, dtype=torch.float32, device=dev)
    node_c = torch.empty(n + 1, dtype=torch.int32, device=dev)
    blocks = dict(F=f, BLOCK_S=triton.next_power_of_2(nch), BLOCK_F=triton.next_power_of_2(max(f, 2)),
                  BLOCK_C=triton.next_power_of_2(max(n * f, 2)))
    pdl = pdl_args(base)
    scratch = (cand_s, cand_t, cand_p, cand_d, node_t, node_p, node_d, node_s, node_c)
    for k in range(n):
        _tree_expand_kernel[(nch,)](base, u, v, tokens, pval, pidx, pmax, psum, *scratch, vocab, nch, p, K=k, R=r,
                                    CHUNK=cfg.block_n, num_warps=cfg.num_warps, **blocks, **pdl)
    _tree_final_kernel[(1,)](pval, pidx, pmax, psum, *scratch, tokens, positions, kv_end, slots, tree, parents, nch, p,
                             slots.shape[0], K=n, BLOCK_ROWS=triton.next_power_of_2(max(slots.shape[0], n + 1)),
                             W=tree.shape[1], num_warps=4, **blocks, **pdl)
