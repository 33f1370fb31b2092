"""Greedy accept-and-commit on the device, so the decode loop needs no host round trip per token.

Rows 0..M-1 of `logits` come from one step whose input tokens were [last, d_1, .., d_{M-1}]
(M = 1 is plain AR decode). t_i = argmax(logits_i). The longest prefix with d_{i+1} == t_i is
accepted (j drafts), and t_0..t_j are committed: the j accepted drafts plus the bonus token t_j.
The kernel appends them to `out_tokens`, and rewrites the step's own inputs for the next step:
tokens[0] = t_j, positions[i] = base + i, kv_end[i] = base + i + 1 where base = old base + j + 1.

state (int64[5]): [n_committed, base_position, last_accepted_j, steps, previous_base_position]
(the last one is the position of row 0 of the step just committed: where the DSpark drafter finds
the rows whose hidden states it turns into context).

On Triton the row argmaxes come from partials: each (row, chunk of the vocabulary) has its max and first
index, and one program reduces them instead of walking M x V logits alone (that walk took 88 us of a 7-row
DSpark iteration's ~1,000 on the H200, docs/perf.md 2026-12-03). The engine's steps have the LM head's own
launch write them, one per output tile, and its last program reduce them and run a chain's commit
(HeadArgmax: no launch of its own); on its own (greedy_commit_triton without `argmax`) an argmax pass of
(row, ARGMAX_CHUNK) programs writes them first. The first index of the largest value wins, as in torch.argmax.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import triton
import triton.language as tl

from kernels.common import pdl_args, pdl_start

STATE_COMMITTED, STATE_BASE, STATE_ACCEPTED, STATE_STEPS, STATE_PREV_BASE = 0, 1, 2, 3, 4
STATE_SIZE = 5


def greedy_commit_reference(
    logits: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, kv_end: torch.Tensor,
    out_tokens: torch.Tensor, state: torch.Tensor, m: int, hist: torch.Tensor | None = None,
    argmax: torch.Tensor | None = None,
) -> None:
    """hist (optional, int64): hist[j + 1] += 1 for the j drafts accepted (the on-device loop's histogram)."""
    t = torch.argmax(logits[:m].float(), dim=-1)
    j = 0
    while j < m - 1 and int(tokens[j + 1]) == int(t[j]):
        j += 1
    commit_rows_reference(t[: j + 1], tokens, positions, kv_end, out_tokens, state, hist)


def commit_rows_reference(committed: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, kv_end: torch.Tensor,
                          out_tokens: torch.Tensor, state: torch.Tensor, hist: torch.Tensor | None) -> None:
    """The commit's writes once the j accepted drafts and the bonus (`committed`, j + 1 tokens) are known: the
    output, the next step's inputs (the bonus at base = old base + j + 1, rows consecutive) and the state."""
    j = committed.shape[0] - 1
    n = int(state[STATE_COMMITTED])
    out_tokens[n : n + j + 1] = committed.to(out_tokens.dtype)
    base = int(state[STATE_BASE]) + j + 1
    tokens[0] = committed[j]
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
def row_argmax(pmax_ptr, pidx_ptr, row, NCH, BLOCK_S: tl.constexpr, CACHE: tl.constexpr):
    """Row `row`'s argmax from its chunks' partials (max, first index): the smallest index among the chunks
    holding the max, as torch.argmax picks. Also the drafter head's first draft (kernels/draft_head.py).
    CACHE ".cg": the partials were stored by other programs of the same launch (head_argmax); else ""."""
    s = tl.arange(0, BLOCK_S)
    vals = tl.load(pmax_ptr + row * NCH + s, mask=s < NCH, other=float("-inf"), cache_modifier=CACHE)
    idx = tl.load(pidx_ptr + row * NCH + s, mask=s < NCH, other=2**62, cache_modifier=CACHE)
    best = tl.max(vals, axis=0)
    return tl.min(tl.where(vals == best, idx, 2**62), axis=0)


@triton.jit
def row_argmaxes(pmax_ptr, pidx_ptr, M, NCH, BLOCK_S: tl.constexpr, BLOCK_ROWS: tl.constexpr, CACHE: tl.constexpr):
    """Rows 0..M-1's argmaxes (row_argmax) as a [BLOCK_ROWS] int64 vector (0 after M)."""
    r = tl.arange(0, BLOCK_ROWS)
    t = tl.zeros([BLOCK_ROWS], tl.int64)
    for i in range(0, M):
        t = tl.where(r == i, row_argmax(pmax_ptr, pidx_ptr, i, NCH, BLOCK_S, CACHE), t)
    return t


@triton.jit
def commit_writes(c, j, tokens_ptr, positions_ptr, kv_end_ptr, out_ptr, state_ptr, hist_ptr, ROWS,
                  BLOCK_ROWS: tl.constexpr, HAS_HIST: tl.constexpr):
    """The commit's writes once the j accepted drafts and the bonus are known (commit_rows_reference):
    c [BLOCK_ROWS] int64, the committed tokens c[0..j] in order (the bonus c[j])."""
    r = tl.arange(0, BLOCK_ROWS)
    n = tl.load(state_ptr + 0)
    tl.store(out_ptr + n + r, c.to(out_ptr.dtype.element_ty), mask=r <= j)
    old_base = tl.load(state_ptr + 1)
    base = old_base + j + 1
    tl.store(tokens_ptr + 0, tl.sum(tl.where(r == j, c, 0), axis=0).to(tokens_ptr.dtype.element_ty))
    tl.store(positions_ptr + r, (base + r).to(positions_ptr.dtype.element_ty), mask=r < ROWS)
    tl.store(kv_end_ptr + r, (base + r + 1).to(kv_end_ptr.dtype.element_ty), mask=r < ROWS)
    tl.store(state_ptr + 0, n + j + 1)
    tl.store(state_ptr + 1, base)
    tl.store(state_ptr + 2, j.to(tl.int64))
    tl.store(state_ptr + 3, tl.load(state_ptr + 3) + 1)
    tl.store(state_ptr + 4, old_base)
    if HAS_HIST:
        tl.store(hist_ptr + j + 1, tl.load(hist_ptr + j + 1) + 1)


@triton.jit
def commit_chain(t, tokens_ptr, positions_ptr, kv_end_ptr, out_ptr, state_ptr, hist_ptr, M, ROWS,
                 BLOCK_ROWS: tl.constexpr, HAS_HIST: tl.constexpr):
    """The greedy commit of a chain's rows 0..M-1 from their argmaxes t [BLOCK_ROWS]: j = the longest prefix
    with tokens[i + 1] == t[i] (at most M - 1), then t[0..j] committed (commit_writes)."""
    r = tl.arange(0, BLOCK_ROWS)
    nxt = tl.load(tokens_ptr + r + 1, mask=r + 1 < M, other=-1).to(tl.int64)
    match = (r + 1 < M) & (nxt == t)
    j = tl.min(tl.where(match, BLOCK_ROWS, r), axis=0)  # the first row whose draft after it missed
    commit_writes(t, j, tokens_ptr, positions_ptr, kv_end_ptr, out_ptr, state_ptr, hist_ptr, ROWS, BLOCK_ROWS, HAS_HIST)


@triton.jit
def _greedy_commit_kernel(
    pmax_ptr, pidx_ptr, argmax_ptr, tokens_ptr, positions_ptr, kv_end_ptr, out_ptr, state_ptr, hist_ptr,
    M, NCH, ROWS, BLOCK_S: tl.constexpr, BLOCK_ROWS: tl.constexpr, HAS_HIST: tl.constexpr, ARGMAX: tl.constexpr,
    USE_PDL: tl.constexpr,
):
    """ARGMAX: the rows' argmaxes read from argmax_ptr (left by the LM head's launch, HeadArgmax), else
    reduced from the argmax pass's partials."""
    pdl_start(USE_PDL)
    r = tl.arange(0, BLOCK_ROWS)
    if ARGMAX:
        t = tl.load(argmax_ptr + r, mask=r < M, other=0)
    else:
        t = row_argmaxes(pmax_ptr, pidx_ptr, M, NCH, BLOCK_S, BLOCK_ROWS, "")
    commit_chain(t, tokens_ptr, positions_ptr, kv_end_ptr, out_ptr, state_ptr, hist_ptr, M, ROWS, BLOCK_ROWS, HAS_HIST)


@dataclass
class HeadArgmax:
    """What the LM head's launch does after its logits (kernels.fused_linear.fused_linear_triton(head=)): every
    program stores its tile's per-row max and first index; the last program to finish (an atomic count, reset
    by that program) reduces them to each row's argmax, the first index of the max as torch.argmax picks, into
    `argmax`, and with `commit` (tokens, positions, kv_end, out_tokens, state, hist or None) also runs the greedy
    commit of the chain's rows (greedy_commit's writes). So an AR step and its commit are one launch less two,
    and a tree's commit reads the argmaxes instead of a pass of its own. `count` is int32 [1], zero between
    launches; every launch that shares it runs one at a time (one stream)."""

    argmax: torch.Tensor
    count: torch.Tensor
    commit: tuple | None = None


@triton.jit
def head_argmax(vals, pid, M, N, NT, pmax_ptr, pidx_ptr, argmax_ptr, count_ptr, tokens_ptr, positions_ptr, kv_end_ptr,
                out_ptr, state_ptr, hist_ptr, ROWS, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr, BLOCK_S: tl.constexpr,
                BLOCK_ROWS: tl.constexpr, COMMIT: tl.constexpr, HAS_HIST: tl.constexpr):
    """HeadArgmax inside the LM head's launch: vals [BLOCK_M, BLOCK_N] float32, tile `pid` of NT's logits as
    stored (columns pid * BLOCK_N ..)."""
    rm = tl.arange(0, BLOCK_M)
    rn = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    vals = tl.where((rn < N)[None, :], vals, float("-inf"))
    tl.store(pmax_ptr + rm * NT + pid, tl.max(vals, axis=1), mask=rm < M)
    tl.store(pidx_ptr + rm * NT + pid, tl.argmax(vals, axis=1, tie_break_left=True).to(tl.int64) + pid * BLOCK_N,
             mask=rm < M)
    tl.debug_barrier()  # every thread's partials stored before the count
    ticket = tl.atomic_add(count_ptr, 1, sem="acq_rel", scope="gpu")
    if ticket == NT - 1:  # the last program: every tile's partials are stored
        r = tl.arange(0, BLOCK_ROWS)
        t = row_argmaxes(pmax_ptr, pidx_ptr, M, NT, BLOCK_S, BLOCK_ROWS, ".cg")
        tl.store(argmax_ptr + r, t, mask=r < M)
        if COMMIT:
            commit_chain(t, tokens_ptr, positions_ptr, kv_end_ptr, out_ptr, state_ptr, hist_ptr, M, ROWS, BLOCK_ROWS,
                         HAS_HIST)
        tl.store(count_ptr, 0)


def head_argmax_args(head: HeadArgmax | None, m: int, tiles: int, device, dummy: torch.Tensor) -> dict:
    """fused_linear_triton's arguments for HeadArgmax (or its absence)."""
    if head is None:
        return dict(hp_ptr=dummy, hi_ptr=dummy, ha_ptr=dummy, hc_ptr=dummy, ht_ptr=dummy, hpos_ptr=dummy, hkv_ptr=dummy,
                    hout_ptr=dummy, hst_ptr=dummy, hh_ptr=dummy, H_ROWS=1, H_BLOCK_S=1, H_BLOCK_ROWS=2, HEAD=False,
                    H_COMMIT=False, H_HIST=False)
    if head.argmax.shape[0] < m:
        raise ValueError(f"HeadArgmax: {m} rows, argmax holds {head.argmax.shape[0]}")
    # fresh each call: inside a CUDA-graph capture they come from (and stay in) the graph's own pool
    pmax = torch.empty((m, tiles), dtype=torch.float32, device=device)
    pidx = torch.empty((m, tiles), dtype=torch.int64, device=device)
    tokens, positions, kv_end, out_tokens, state, hist = head.commit if head.commit is not None else (dummy,) * 5 + (None,)
    rows = positions.shape[0] if head.commit is not None else 1
    return dict(hp_ptr=pmax, hi_ptr=pidx, ha_ptr=head.argmax, hc_ptr=head.count, ht_ptr=tokens, hpos_ptr=positions,
                hkv_ptr=kv_end, hout_ptr=out_tokens, hst_ptr=state, hh_ptr=hist if hist is not None else state,
                H_ROWS=rows, H_BLOCK_S=triton.next_power_of_2(tiles), H_BLOCK_ROWS=triton.next_power_of_2(max(rows, m, 2)),
                HEAD=True, H_COMMIT=head.commit is not None, H_HIST=hist is not None)


def _argmax_partials(logits: torch.Tensor, m: int, argmax: torch.Tensor | None, pdl: dict):
    """The argmax pass's partials of rows 0..m-1 (pmax, pidx, chunks), or (argmax, argmax, chunks) where the
    LM head's launch left the argmaxes (the commit kernels then read those)."""
    v = logits.shape[-1]
    nch = triton.cdiv(v, ARGMAX_CHUNK)
    if argmax is not None:
        return argmax, argmax, nch
    # fresh each call: inside a CUDA-graph capture they come from (and stay in) the graph's own pool
    pmax = torch.empty((m, nch), dtype=torch.float32, device=logits.device)
    pidx = torch.empty((m, nch), dtype=torch.int64, device=logits.device)
    _argmax_partial_kernel[(m, nch)](logits, pmax, pidx, v, nch, CHUNK=ARGMAX_CHUNK, num_warps=4, **pdl)
    return pmax, pidx, nch


def greedy_commit_triton(
    logits: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, kv_end: torch.Tensor,
    out_tokens: torch.Tensor, state: torch.Tensor, m: int, hist: torch.Tensor | None = None,
    argmax: torch.Tensor | None = None,
) -> None:
    """argmax: the rows' argmaxes, left by the LM head's launch (HeadArgmax); without, an argmax pass first."""
    rows = positions.shape[0]
    pdl = pdl_args(logits)
    pmax, pidx, nch = _argmax_partials(logits, m, argmax, pdl)
    _greedy_commit_kernel[(1,)](
        pmax, pidx, argmax if argmax is not None else pidx, tokens, positions, kv_end, out_tokens, state,
        hist if hist is not None else state, m, nch, rows,
        BLOCK_S=triton.next_power_of_2(nch), BLOCK_ROWS=triton.next_power_of_2(max(rows, 2)), HAS_HIST=hist is not None,
        ARGMAX=argmax is not None, num_warps=1, **pdl,
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


# -- a token tree's commit ------------------------------------------------------------------------------
# The verify's rows are a tree (row 0 the last committed token, row c a draft whose parent row is
# parents[c] < c, at position base + its depth, its keys at slot base + c). The commit walks it from the
# root: at row `node` the target's argmax t_node is accepted if a child of `node` holds it (the first such
# child: a tree never holds one token twice under one parent); the walk's rows path[0..j] give the j
# accepted drafts and the bonus t_{path[j]}, committed as the chain's are. Their keys and values (every
# layer) and their captured residuals are then moved to where a chain would have put them (slot and
# capture row base + i, i), so the cache holds the committed text in order and the next step is the
# chain's.


def tree_path_reference(t: torch.Tensor, tokens: torch.Tensor, parents: torch.Tensor, m: int) -> list[int]:
    """The accepted rows from the root: t [m] the rows' argmaxes."""
    path, node = [0], 0
    for _ in range(m - 1):
        nxt = [c for c in range(1, m) if int(parents[c]) == node and int(tokens[c]) == int(t[node])]
        if not nxt:
            break
        node = nxt[0]
        path.append(node)
    return path


def tree_commit_reference(
    logits: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, kv_end: torch.Tensor,
    out_tokens: torch.Tensor, state: torch.Tensor, m: int, parents: torch.Tensor, slots: torch.Tensor,
    k_cache: torch.Tensor, v_cache: torch.Tensor, capture_rows: torch.Tensor, hist: torch.Tensor | None = None,
    argmax: torch.Tensor | None = None,
) -> None:
    """greedy_commit_reference for a tree (see above). k_cache, v_cache [layers, kv_heads, capacity, head_dim]
    (or with a batch dimension of one after layers); capture_rows [rows, width]; slots[0] the root's slot."""
    t = torch.argmax(logits[:m].float(), dim=-1)
    path = tree_path_reference(t, tokens, parents, m)
    j = len(path) - 1
    base_slot = int(slots[0])
    if j:
        src = torch.tensor([base_slot + p for p in path[1:]], device=k_cache.device)
        dst = torch.arange(base_slot + 1, base_slot + 1 + j, device=k_cache.device)
        for cache in (k_cache, v_cache):
            cache.index_copy_(-2, dst, cache.index_select(-2, src))
        rows = torch.tensor(path[1:], device=capture_rows.device)
        capture_rows[1 : 1 + j] = capture_rows.index_select(0, rows)
    commit_rows_reference(t[torch.tensor(path, device=t.device)], tokens, positions, kv_end, out_tokens, state, hist)


@triton.jit
def tree_walk(t, tokens_ptr, parents_ptr, M, BLOCK_ROWS: tl.constexpr):
    """The accepted path as a [BLOCK_ROWS] vector (path[i] for i <= j, 0 after) and j, from the rows' argmaxes t."""
    r = tl.arange(0, BLOCK_ROWS)
    toks = tl.load(tokens_ptr + r, mask=r < M, other=-1).to(tl.int64)
    par = tl.load(parents_ptr + r, mask=(r >= 1) & (r < M), other=-1)
    path = tl.zeros([BLOCK_ROWS], tl.int32)
    node = tl.min(path, axis=0)  # 0: the root
    j = node
    going = node == 0
    for i in range(1, M):
        want = tl.sum(tl.where(r == node, t, 0), axis=0)
        hit = (par == node) & (toks == want) & going
        nxt = tl.min(tl.where(hit, r, BLOCK_ROWS), axis=0)
        going = going & (nxt < BLOCK_ROWS)
        node = tl.where(going, nxt, node)
        j = tl.where(going, i, j)
        path = tl.where((r == i) & going, nxt, path)
    return path, j


@triton.jit
def _tree_commit_kernel(
    pmax_ptr, pidx_ptr, argmax_ptr, tokens_ptr, parents_ptr, slots_ptr, positions_ptr, kv_end_ptr, out_ptr, state_ptr,
    hist_ptr, k_ptr, v_ptr, cap_ptr, layer_stride, head_stride, cap_width, M, NCH, ROWS, KVH,
    HD: tl.constexpr, BLOCK_S: tl.constexpr, BLOCK_ROWS: tl.constexpr, BLOCK_C: tl.constexpr, HAS_HIST: tl.constexpr,
    ARGMAX: tl.constexpr, USE_PDL: tl.constexpr,
):
    """Program 0 commits (greedy_commit's stores); programs 1.. move a (layer, k or v, KV head)'s path keys,
    the last cdiv(cap_width, BLOCK_C) programs a slice of the captured rows. Every program walks the tree
    itself from the rows' argmaxes (ARGMAX: left by the LM head's launch at argmax_ptr, HeadArgmax; else
    reduced from the argmax pass's partials), so no program waits for another."""
    pdl_start(USE_PDL)
    pid = tl.program_id(0)
    r = tl.arange(0, BLOCK_ROWS)
    if ARGMAX:
        t = tl.load(argmax_ptr + r, mask=r < M, other=0)
    else:
        t = row_argmaxes(pmax_ptr, pidx_ptr, M, NCH, BLOCK_S, BLOCK_ROWS, "")
    path, j = tree_walk(t, tokens_ptr, parents_ptr, M, BLOCK_ROWS)
    moved = (r >= 1) & (r <= j)
    if pid == 0:
        # t at the path's rows, in order: the accepted drafts and the bonus
        c = tl.zeros([BLOCK_ROWS], tl.int64)
        for i in range(0, M):
            at = tl.sum(tl.where(r == i, path, 0), axis=0)
            c = tl.where(r == i, tl.sum(tl.where(r == at, t, 0), axis=0), c)
        commit_writes(c, j, tokens_ptr, positions_ptr, kv_end_ptr, out_ptr, state_ptr, hist_ptr, ROWS, BLOCK_ROWS, HAS_HIST)
    elif pid <= tl.num_programs(0) - tl.cdiv(cap_width, BLOCK_C) - 1:
        q = pid - 1  # (layer, k or v, head)
        head = q % KVH
        kv = (q // KVH) % 2
        layer = q // (2 * KVH)
        base_slot = tl.load(slots_ptr + 0)
        d = tl.arange(0, HD)
        src = (base_slot + path).to(tl.int64)
        dst = (base_slot + r).to(tl.int64)
        off = layer.to(tl.int64) * layer_stride + head * head_stride
        if kv == 0:
            keys = tl.load(k_ptr + off + src[:, None] * HD + d[None, :], mask=moved[:, None], other=0.0)
            tl.debug_barrier()  # every source read before any destination is written: they may overlap
            tl.store(k_ptr + off + dst[:, None] * HD + d[None, :], keys, mask=moved[:, None])
        else:
            values = tl.load(v_ptr + off + src[:, None] * HD + d[None, :], mask=moved[:, None], other=0.0)
            tl.debug_barrier()
            tl.store(v_ptr + off + dst[:, None] * HD + d[None, :], values, mask=moved[:, None])
    else:
        c0 = (pid - (tl.num_programs(0) - tl.cdiv(cap_width, BLOCK_C))) * BLOCK_C
        cc = c0 + tl.arange(0, BLOCK_C)
        mk = moved[:, None] & (cc[None, :] < cap_width)
        rows_cap = tl.load(cap_ptr + path[:, None].to(tl.int64) * cap_width + cc[None, :], mask=mk, other=0.0)
        tl.debug_barrier()
        tl.store(cap_ptr + r[:, None].to(tl.int64) * cap_width + cc[None, :], rows_cap, mask=mk)


TREE_CAPTURE_BLOCK = 512  # captured columns per program of the tree commit


def tree_commit_triton(
    logits: torch.Tensor, tokens: torch.Tensor, positions: torch.Tensor, kv_end: torch.Tensor,
    out_tokens: torch.Tensor, state: torch.Tensor, m: int, parents: torch.Tensor, slots: torch.Tensor,
    k_cache: torch.Tensor, v_cache: torch.Tensor, capture_rows: torch.Tensor, hist: torch.Tensor | None = None,
    argmax: torch.Tensor | None = None,
) -> None:
    """argmax: the rows' argmaxes, left by the LM head's launch (HeadArgmax); without, an argmax pass first."""
    rows = positions.shape[0]
    kc, vc = (c.reshape(c.shape[0], -1, c.shape[-2], c.shape[-1]) for c in (k_cache, v_cache))  # [layers, kv_heads, cap, hd]
    layers, kvh, _, hd = kc.shape
    assert kc.is_contiguous() and vc.is_contiguous() and capture_rows.is_contiguous()
    width = capture_rows.shape[1]
    pdl = pdl_args(logits)
    pmax, pidx, nch = _argmax_partials(logits, m, argmax, pdl)
    grid = 1 + layers * 2 * kvh + triton.cdiv(width, TREE_CAPTURE_BLOCK)
    _tree_commit_kernel[(grid,)](
        pmax, pidx, argmax if argmax is not None else pidx, tokens, parents, slots, positions, kv_end, out_tokens, state,
        hist if hist is not None else state, kc, vc, capture_rows, kc.stride(0), kc.stride(1), width, m, nch, rows, kvh,
        HD=hd, BLOCK_S=triton.next_power_of_2(nch), BLOCK_ROWS=triton.next_power_of_2(max(rows, 2)),
        BLOCK_C=TREE_CAPTURE_BLOCK, HAS_HIST=hist is not None, ARGMAX=argmax is not None, num_warps=4, **pdl,
    )
