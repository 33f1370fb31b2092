"""Split-K attention of a few query rows against the KV cache (flash-decoding), for decode and verify.

Each query row r sees the keys [kv_start[r], kv_end[r]). AR decode is one row with kv_end = pos + 1;
the DSpark verify step is up to 7 rows at consecutive positions (causal); the drafter's block rows all
share one window (non-causal inside the block). One kernel serves all of them on purpose: a row's
result depends only on its own query, its own window and the cache, never on how many rows share
the launch (splits have fixed key boundaries, masked keys contribute exact zeros, the split
reduction has a fixed length), so verify and decode agree bit for bit.

Pass 1, grid (kv_heads, n_splits): each program takes split s = keys [s*split, (s+1)*split) for all
rows and all query heads of one KV head, and writes a normalised partial output and its log-sum-exp.
Pass 2, grid (rows, heads): combines the splits in a fixed order.
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl

from kernels.common import (UPCAST_DOT, l2_prefetch, mma, pdl_args, pdl_start, prefetch_lines, prefetch_on, preload_on, stamp,
                            stamp_now, trace_args)
from kernels.tuning import config_for

LOG2E = 1.4426950408889634


def attention_reference(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    kv_start: torch.Tensor,
    kv_end: torch.Tensor,
    scale: float | None = None,
    tree: torch.Tensor | None = None,
    positions: torch.Tensor | None = None,
) -> torch.Tensor:
    """q [M, H, D]; caches [KVH, CAP, D]. Attention over the whole cache with a mask: every shape is
    fixed by the capacity, so this too is batch-invariant (it is the CPU path). Returns [M, H*D].

    tree ([M', W] int, M' >= M: a token tree's ancestors, tree_rows) with `positions` (the rows' positions,
    row 0 the root at `base`): row r's key at position base + i (i <= its depth) is at slot base + tree[r, i].
    The scores are taken against the cache as it lies, put in position order for the mask and the softmax
    (the same values at the same places as for a chain or a lone row), and the probabilities put back at
    their slots for the product with V, where the tree's other slots hold exact zeros."""
    m, h, d = q.shape
    kvh, cap, _ = k_cache.shape
    g = h // kvh
    scale = scale if scale is not None else 1.0 / math.sqrt(d)
    qf = q.float().reshape(m, kvh, g, d).permute(1, 0, 2, 3).reshape(kvh, m * g, d)
    scores = torch.bmm(qf, k_cache.float().transpose(1, 2)) * scale  # [KVH, M*G, CAP]
    pos = torch.arange(cap, device=q.device)
    start = kv_start.repeat_interleave(g)
    end = kv_end.repeat_interleave(g)
    mask = (pos[None, :] >= start[:, None]) & (pos[None, :] < end[:, None])
    slot = None
    if tree is not None:
        slot = tree_slots_reference(tree[:m], positions[:m], cap).repeat_interleave(g, dim=0)  # [M*G, CAP]
        scores = scores.gather(-1, slot[None].expand(kvh, -1, -1))
    scores = scores.masked_fill(~mask[None], float("-inf"))
    p = torch.softmax(scores, dim=-1)
    if slot is not None:
        p = torch.zeros_like(p).scatter_add_(-1, slot[None].expand(kvh, -1, -1), p)
    out = torch.bmm(p, v_cache.float())  # [KVH, M*G, D]
    return out.reshape(kvh, m, g, d).permute(1, 0, 2, 3).reshape(m, h * d).to(q.dtype)


def tree_slots_reference(tree: torch.Tensor, positions: torch.Tensor, cap: int) -> torch.Tensor:
    """[M, CAP] int64: the slot of each row's key at each position (tree_slot, for every position at once).
    Reads the root's position on the host: the torch path is not captured."""
    m, w = tree.shape
    base = int(positions[0])
    slot = torch.arange(cap, device=tree.device).repeat(m, 1)
    for i in range(min(w, cap - base)):
        slot[:, base + i] = base + tree[:, i].long()
    return slot


@triton.jit
def attn_prefetch(kvh, split, k_ptr, v_ptr, CAP, cache_head_stride, HD: tl.constexpr, SPLIT: tl.constexpr,
                  PREFETCH_LINES: tl.constexpr, ELEM_BYTES: tl.constexpr, USE_PDL: tl.constexpr):
    """Ask L2 for a split's keys and values (all of it: the windows are not read before the wait)."""
    n_keys = tl.minimum(CAP - split * SPLIT, SPLIT)
    l2_prefetch(k_ptr + kvh * cache_head_stride + split * SPLIT * HD, n_keys * HD * ELEM_BYTES, PREFETCH_LINES, USE_PDL)
    l2_prefetch(v_ptr + kvh * cache_head_stride + split * SPLIT * HD, n_keys * HD * ELEM_BYTES, PREFETCH_LINES, USE_PDL)


@triton.jit
def attn_block(q, k, v, kpos, kv_start, kv_end, m_i, l_i, acc, scale_log2, IEEE: tl.constexpr, UPCAST: tl.constexpr):
    """One block of keys (positions kpos, loaded as k and v) folded into the running softmax (m_i, l_i, acc)."""
    s = mma(q, tl.trans(k), tl.zeros([q.shape[0], k.shape[0]], dtype=tl.float32), IEEE, UPCAST)
    s = s * scale_log2
    valid = (kpos[None, :] >= kv_start[:, None]) & (kpos[None, :] < kv_end[:, None])
    s = tl.where(valid, s, -1.0e30)
    m_new = tl.maximum(m_i, tl.max(s, axis=1))
    alpha = tl.exp2(m_i - m_new)
    p = tl.where(valid, tl.exp2(s - m_new[:, None]), 0.0)
    l_i = l_i * alpha + tl.sum(p, axis=1)
    acc = mma(p.to(v.dtype), v, acc * alpha[:, None], IEEE, UPCAST)
    return m_new, l_i, acc


@triton.jit
def attn_split_rows(kvh, q_ptr, start_ptr, end_ptr, M, H, G: tl.constexpr, HD: tl.constexpr, BLOCK_R: tl.constexpr,
                    CACHE: tl.constexpr):
    """The (row, query head) pairs of one KV head's group: their rows' windows and queries."""
    r = tl.arange(0, BLOCK_R)
    row = r // G
    head = kvh * G + r % G
    r_mask = row < M
    d = tl.arange(0, HD)
    kv_start = tl.load(start_ptr + row, mask=r_mask, other=0)
    kv_end = tl.load(end_ptr + row, mask=r_mask, other=0)
    q = tl.load(q_ptr + row[:, None] * (H * HD) + head[:, None] * HD + d[None, :], mask=r_mask[:, None], other=0.0,
                cache_modifier=CACHE)
    return row, head, r_mask, kv_start, kv_end, q


@triton.jit
def attn_split_store(split, row, head, r_mask, m_i, l_i, acc, out_ptr, lse_ptr, H, n_splits, HD: tl.constexpr):
    """A split's normalised partial output and its log-sum-exp (-inf where a row saw no key of it)."""
    d = tl.arange(0, HD)
    has = l_i > 0.0
    lse = tl.where(has, m_i + tl.log2(tl.where(has, l_i, 1.0)), float("-inf"))
    out = acc / tl.where(has, l_i, 1.0)[:, None]
    idx = (row * H + head) * n_splits + split
    tl.store(out_ptr + idx[:, None] * HD + d[None, :], out, mask=r_mask[:, None])
    tl.store(lse_ptr + idx, lse, mask=r_mask)


@triton.jit
def attn_block_load(k_ptr, v_ptr, kvh, cache_head_stride, at, in_cache, HD: tl.constexpr):
    """A block of keys and values of KV head kvh at cache slots `at` (loaded where in_cache, [BLOCK_KV, 1]):
    their addresses (to load them again) and their values."""
    d = tl.arange(0, HD)
    k_at = k_ptr + kvh * cache_head_stride + at[:, None] * HD + d[None, :]
    v_at = v_ptr + kvh * cache_head_stride + at[:, None] * HD + d[None, :]
    return k_at, v_at, tl.load(k_at, mask=in_cache, other=0.0), tl.load(v_at, mask=in_cache, other=0.0)


@triton.jit
def tree_slot(kpos, base, anc_ptr, tree_row, ANC_W: tl.constexpr):
    """The cache slot of key position kpos for a token tree's row `tree_row`: the tree's rows hold their
    keys at slots base + row, so the key a row sees at position base + i (i <= its depth) is its depth-i
    ancestor's, anc[tree_row, i]; positions before base are the committed prefix, at their own slots."""
    i = kpos - base
    fresh = (i >= 0) & (i < ANC_W)
    a = tl.load(anc_ptr + tree_row * ANC_W + i, mask=fresh, other=0)
    return tl.where(fresh, base + a, kpos)


@triton.jit
def tree_owned(split, base, pos, SPLIT: tl.constexpr):
    """Whether a row at position `pos` of a tree rooted at `base` sees a key of the tree in `split`: such
    (row, split) pairs are computed by the row's own programs, with the row's keys gathered (tree_slot)."""
    return (split >= base // SPLIT) & (split * SPLIT <= pos)


@triton.jit
def attn_split_tile(
    kvh, split, q_ptr, k_ptr, v_ptr, start_ptr, end_ptr, out_ptr, lse_ptr,
    M, H, CAP, cache_head_stride, n_splits, scale_log2,
    G: tl.constexpr, HD: tl.constexpr, SPLIT: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_KV: tl.constexpr,
    IEEE: tl.constexpr, UPCAST: tl.constexpr, CACHE: tl.constexpr,
    TREE: tl.constexpr = False, pos_ptr=None, anc_ptr=None, tree_row=-1, ANC_W: tl.constexpr = 8,
):
    """Pass 1 for one (KV head, split): every row and query head of the group against the split's keys.
    CACHE: the load cache modifier of q and the cache (see fused_linear.linear_tile). TREE (a token tree's
    verify, `pos_ptr` the rows' positions, `anc_ptr` their ancestors): with tree_row < 0 the rows whose keys
    in this split are the tree's are left to their own programs (tree_owned) and not stored; with
    tree_row >= 0 only that row is computed and stored, its keys gathered (tree_slot). The arithmetic on
    the keys is the same either way, so a tree's row gives the bits of the same row in a chain or alone."""
    row, head, r_mask, kv_start, kv_end, q = attn_split_rows(kvh, q_ptr, start_ptr, end_ptr, M, H, G, HD, BLOCK_R, CACHE)
    d = tl.arange(0, HD)
    lo = split * SPLIT
    hi = tl.minimum(lo + SPLIT, tl.max(kv_end, axis=0))
    keep = r_mask
    if TREE:
        base = tl.load(pos_ptr)
        if tree_row >= 0:
            keep = r_mask & (row == tree_row)
            hi = tl.minimum(lo + SPLIT, tl.load(pos_ptr + tree_row) + 1)
        else:
            keep = r_mask & (tree_owned(split, base, tl.load(pos_ptr + row, mask=r_mask, other=0), SPLIT) == 0)
    m_i = tl.full([BLOCK_R], -1.0e30, dtype=tl.float32)
    l_i = tl.zeros([BLOCK_R], dtype=tl.float32)
    acc = tl.zeros([BLOCK_R, HD], dtype=tl.float32)
    k_base = k_ptr + kvh * cache_head_stride
    v_base = v_ptr + kvh * cache_head_stride
    for kb in range(lo, hi, BLOCK_KV):
        kpos = kb + tl.arange(0, BLOCK_KV)
        in_cache = (kpos < CAP)[:, None]
        at = kpos
        if TREE:
            if tree_row >= 0:
                at = tree_slot(kpos, base, anc_ptr, tree_row, ANC_W)
        k = tl.load(k_base + at[:, None] * HD + d[None, :], mask=in_cache, other=0.0, cache_modifier=CACHE)
        v = tl.load(v_base + at[:, None] * HD + d[None, :], mask=in_cache, other=0.0, cache_modifier=CACHE)
        m_i, l_i, acc = attn_block(q, k, v, kpos, kv_start, kv_end, m_i, l_i, acc, scale_log2, IEEE, UPCAST)
    attn_split_store(split, row, head, keep, m_i, l_i, acc, out_ptr, lse_ptr, H, n_splits, HD)


@triton.jit(do_not_specialize=["M"])
def _attn_split_kernel(
    q_ptr, k_ptr, v_ptr, start_ptr, end_ptr, fresh_ptr, out_ptr, lse_ptr,
    M, H, CAP, cache_head_stride, n_splits, scale_log2,
    G: tl.constexpr, HD: tl.constexpr, SPLIT: tl.constexpr, BLOCK_R: tl.constexpr, BLOCK_KV: tl.constexpr,
    IEEE: tl.constexpr, UPCAST: tl.constexpr, PREFETCH_LINES: tl.constexpr, ELEM_BYTES: tl.constexpr,
    USE_PDL: tl.constexpr, PRELOAD: tl.constexpr, trace_ptr, TRACE: tl.constexpr,
    anc_ptr, TREE: tl.constexpr, ANC_W: tl.constexpr, FS: tl.constexpr,
):
    """TREE: programs (kvh, n_splits + r * FS + w) compute row r's split base // SPLIT + w alone, with its keys
    gathered (attn_split_tile); fresh_ptr holds the rows' positions."""
    kvh = tl.program_id(0)
    split = tl.program_id(1)
    pid = kvh * tl.num_programs(1) + split
    if TRACE:  # phase stamps (common.stamp): 2 and 3 only where the split is one block read before the wait
        stamp_now(trace_ptr, pid, 0)
    if TREE and split >= n_splits and PRELOAD:
        # A tree row's own split, one block: its keys gathered (tree_slot) and loaded before the dependency wait,
        # those of the tree's slots loaded again after it (the layer's QKV, the launch just before, writes them).
        # The rows' positions and ancestors are read before the wait too: the tree's drafter head wrote them
        # launches earlier, and a kernel two or more launches back is complete once the one just before has
        # passed its own wait (pdl_start), which this launch follows; from L2 (".cg": no stale copy in L1).
        tree_row = (split - n_splits) // FS
        base = tl.load(fresh_ptr, cache_modifier=".cg")
        own = base // SPLIT + (split - n_splits) % FS
        lo = own * SPLIT
        kpos = lo + tl.arange(0, BLOCK_KV)
        i = kpos - base
        in_tree = (i >= 0) & (i < ANC_W)
        at = tl.where(in_tree, base + tl.load(anc_ptr + tree_row * ANC_W + i, mask=in_tree, other=0, cache_modifier=".cg"),
                      kpos)
        mine = lo <= tl.load(fresh_ptr + tree_row, cache_modifier=".cg")  # the row sees a key of this split
        # (a row's second split is most often past its position: nothing to load)
        in_cache = ((kpos < CAP) & ((tl.zeros([BLOCK_KV], tl.int32) + mine.to(tl.int32)) > 0))[:, None]
        k_at, v_at, k, v = attn_block_load(k_ptr, v_ptr, kvh, cache_head_stride, at, in_cache, HD)
        pdl_start(USE_PDL)
        if TRACE:
            stamp_now(trace_ptr, pid, 1)
        row, head, r_mask, kv_start, kv_end, q = attn_split_rows(kvh, q_ptr, start_ptr, end_ptr, M, H, G, HD, BLOCK_R, "")
        again = in_cache & in_tree[:, None]
        k = tl.load(k_at, mask=again, other=k)
        v = tl.load(v_at, mask=again, other=v)
        m_i = tl.full([BLOCK_R], -1.0e30, dtype=tl.float32)
        l_i = tl.zeros([BLOCK_R], dtype=tl.float32)
        acc = tl.zeros([BLOCK_R, HD], dtype=tl.float32)
        if mine:
            m_i, l_i, acc = attn_block(q, k, v, kpos, kv_start, kv_end, m_i, l_i, acc, scale_log2, IEEE, UPCAST)
        keep = r_mask & (row == tree_row) & ((tl.zeros([BLOCK_R], tl.int32) + mine.to(tl.int32)) > 0)
        attn_split_store(own, row, head, keep, m_i, l_i, acc, out_ptr, lse_ptr, H, n_splits, HD)
    elif TREE and split >= n_splits:
        # a tree row's own split of several blocks: everything after the wait (attn_split_tile gathers the keys)
        pdl_start(USE_PDL)
        if TRACE:
            stamp_now(trace_ptr, pid, 1)
        tree_row = (split - n_splits) // FS
        own = tl.load(fresh_ptr) // SPLIT + (split - n_splits) % FS
        if own * SPLIT <= tl.load(fresh_ptr + tree_row):
            attn_split_tile(kvh, own, q_ptr, k_ptr, v_ptr, start_ptr, end_ptr, out_ptr, lse_ptr, M, H, CAP,
                            cache_head_stride, n_splits, scale_log2, G, HD, SPLIT, BLOCK_R, BLOCK_KV, IEEE, UPCAST, "",
                            True, fresh_ptr, anc_ptr, tree_row, ANC_W)
    elif PRELOAD:
        # The split is one block of keys (SPLIT == BLOCK_KV), loaded before the dependency wait: the kernel
        # before this one (the layer's QKV) writes the cache only at its rows' positions (fresh_ptr), and a
        # block holding one of them is loaded again after the wait. The arithmetic is attn_split_tile's.
        # The rows' positions are read before the wait too: the kernel launched just before an attention (its
        # QKV) never writes them (the greedy commit or the host does, kernels earlier), and every kernel two or
        # more launches back is complete once the one just before has passed its own wait (pdl_start), which
        # this one's launch follows. Read from L2 (".cg": no copy an earlier kernel left in this SM's L1). So
        # the block holding a fresh key issues its reload right after the wait, beside the queries' load,
        # rather than one round trip after it. (A tree's rows see the tree's keys only in their own programs:
        # no block is loaded again.)
        lo = split * SPLIT
        kpos = lo + tl.arange(0, BLOCK_KV)
        in_cache = (kpos < CAP)[:, None]
        k_at, v_at, k, v = attn_block_load(k_ptr, v_ptr, kvh, cache_head_stride, kpos, in_cache, HD)
        rr = tl.arange(0, BLOCK_R)
        fresh = tl.load(fresh_ptr + rr, mask=rr < M, other=-1, cache_modifier=".cg")
        written = tl.max(((fresh >= lo) & (fresh < lo + BLOCK_KV)).to(tl.int32), axis=0) > 0
        pdl_start(USE_PDL)
        if TRACE:
            stamp_now(trace_ptr, pid, 1)
        row, head, r_mask, kv_start, kv_end, q = attn_split_rows(kvh, q_ptr, start_ptr, end_ptr, M, H, G, HD, BLOCK_R, "")
        keep = r_mask
        if TREE:
            keep = r_mask & (tree_owned(split, tl.load(fresh_ptr), tl.load(fresh_ptr + row, mask=r_mask, other=0), SPLIT) == 0)
        elif written:
            k = tl.load(k_at, mask=in_cache, other=0.0)
            v = tl.load(v_at, mask=in_cache, other=0.0)
        if TRACE:
            stamp(trace_ptr, pid, 2, q)
        m_i = tl.full([BLOCK_R], -1.0e30, dtype=tl.float32)
        l_i = tl.zeros([BLOCK_R], dtype=tl.float32)
        acc = tl.zeros([BLOCK_R, HD], dtype=tl.float32)
        if lo < tl.minimum(lo + SPLIT, tl.max(kv_end, axis=0)):  # attn_split_tile's loop, one block
            m_i, l_i, acc = attn_block(q, k, v, kpos, kv_start, kv_end, m_i, l_i, acc, scale_log2, IEEE, UPCAST)
        if TRACE:
            stamp(trace_ptr, pid, 3, acc)
        attn_split_store(split, row, head, keep, m_i, l_i, acc, out_ptr, lse_ptr, H, n_splits, HD)
    else:
        if PREFETCH_LINES > 0:
            attn_prefetch(kvh, split, k_ptr, v_ptr, CAP, cache_head_stride, HD, SPLIT, PREFETCH_LINES, ELEM_BYTES, USE_PDL)
        pdl_start(USE_PDL)
        if TRACE:
            stamp_now(trace_ptr, pid, 1)
        attn_split_tile(kvh, split, q_ptr, k_ptr, v_ptr, start_ptr, end_ptr, out_ptr, lse_ptr, M, H, CAP,
                        cache_head_stride, n_splits, scale_log2, G, HD, SPLIT, BLOCK_R, BLOCK_KV, IEEE, UPCAST, "",
                        TREE, fresh_ptr, anc_ptr, -1, ANC_W)
    if TRACE:
        stamp_now(trace_ptr, pid, 4)


@triton.jit
def attn_combine_tile(row, head, part_ptr, lse_ptr, out_ptr, H, n_splits, HD: tl.constexpr, BLOCK_S: tl.constexpr,
                      CACHE: tl.constexpr, d0, BLOCK_D: tl.constexpr):
    """Pass 2 for one (row, query head): the splits combined in a fixed order; only the head's dimensions
    [d0, d0 + BLOCK_D) when BLOCK_D > 0 (the splits' weights are the same for every dimension)."""
    s = tl.arange(0, BLOCK_S)
    if BLOCK_D > 0:
        d = d0 + tl.arange(0, BLOCK_D)
    else:
        d = tl.arange(0, HD)
    base = (row * H + head) * n_splits
    lse = tl.load(lse_ptr + base + s, mask=s < n_splits, other=float("-inf"), cache_modifier=CACHE)
    # the partial outputs' load issued with the weights', before the weights' reduction (whose warp shuffles
    # it would otherwise wait behind: two round trips to L2 instead of one)
    part = tl.load(part_ptr + (base + s)[:, None] * HD + d[None, :], mask=(s < n_splits)[:, None], other=0.0,
                   cache_modifier=CACHE)
    mx = tl.max(lse, axis=0)
    mx = tl.where(mx == float("-inf"), 0.0, mx)
    w = tl.exp2(lse - mx)
    num = tl.sum(part * w[:, None], axis=0)
    den = tl.sum(w, axis=0)
    out = num / tl.where(den > 0.0, den, 1.0)
    tl.store(out_ptr + row * (H * HD) + head * HD + d, out.to(out_ptr.dtype.element_ty))


@triton.jit
def _attn_combine_kernel(part_ptr, lse_ptr, out_ptr, H, n_splits, HD: tl.constexpr, BLOCK_S: tl.constexpr,
                         BLOCK_D: tl.constexpr, USE_PDL: tl.constexpr, trace_ptr, TRACE: tl.constexpr):
    pid = tl.program_id(0) * tl.num_programs(1) + tl.program_id(1)
    if TRACE:  # phase stamps 0, 1 and 4 (common.stamp)
        stamp_now(trace_ptr, pid, 0)
    pdl_start(USE_PDL)
    if TRACE:
        stamp_now(trace_ptr, pid, 1)
    if BLOCK_D > 0:  # grid (rows, heads x HD / BLOCK_D): a slice of a head's dimensions per program
        head = tl.program_id(1) // (HD // BLOCK_D)
        d0 = (tl.program_id(1) % (HD // BLOCK_D)) * BLOCK_D
        attn_combine_tile(tl.program_id(0), head, part_ptr, lse_ptr, out_ptr, H, n_splits, HD, BLOCK_S, "", d0, BLOCK_D)
    else:
        attn_combine_tile(tl.program_id(0), tl.program_id(1), part_ptr, lse_ptr, out_ptr, H, n_splits, HD, BLOCK_S, "", 0, 0)
    if TRACE:
        stamp_now(trace_ptr, pid, 4)


MAX_SPLITS = 128  # splits a default split leaves at most (the combine takes them all in one tile)


def default_split(capacity: int) -> int:
    """Keys per split: the smallest power of two in [64, 1024] that leaves at most MAX_SPLITS splits.
    On the H200 (docs/perf.md, 2026-12-04) the fastest split at each capacity timed left 32-80 splits,
    whatever the model's KV heads: 64 keys at 2,048 and 5,120 slots of the bundled model, 128 at 9,216,
    256 for both guard shapes at 17,408; halving any of them (up to 160 splits) was slower, and so was
    doubling. (The rule before, two programs per SM, gave the guards 1,024 keys: 16-18 % slower steps.)"""
    split = 64
    while capacity > split * MAX_SPLITS and split < 1024:
        split *= 2
    return split


class AttentionWorkspace:
    """Scratch buffers of the split pass, sized once so a CUDA graph can capture them."""

    def __init__(self, max_rows: int, n_heads: int, head_dim: int, capacity: int, split: int, device, dtype=torch.float32):
        self.split = split
        self.max_rows = max_rows
        self.n_splits = triton.cdiv(capacity, split)
        self.part = torch.empty((max_rows, n_heads, self.n_splits, head_dim), dtype=dtype, device=device)
        self.lse = torch.empty((max_rows, n_heads, self.n_splits), dtype=torch.float32, device=device)


def attention_triton(
    q: torch.Tensor,
    k_cache: torch.Tensor,
    v_cache: torch.Tensor,
    kv_start: torch.Tensor,
    kv_end: torch.Tensor,
    workspace: AttentionWorkspace,
    out: torch.Tensor | None = None,
    scale: float | None = None,
    fresh: torch.Tensor | None = None,
    tree: torch.Tensor | None = None,
) -> torch.Tensor:
    """Attention of q's rows over the caches, each row over its keys [kv_start, kv_end), into out [M, H*D].
    fresh: the positions (int32, one per row of q) at which the kernel launched just before this one wrote
    these caches (the layer's QKV); keys elsewhere are then read before the dependency wait (preload_on).
    None: every key is read after it. tree: a token tree's ancestors ([rows, W] int32, see
    attention_reference), fresh then the rows' positions (required): the tree's keys lie at slots
    base + row, each row sees its own ancestors' at base + depth."""
    m, h, d = q.shape
    kvh, cap, _ = k_cache.shape
    g = h // kvh
    scale = scale if scale is not None else 1.0 / math.sqrt(d)
    if workspace.n_splits * workspace.split < cap:
        raise ValueError("attention workspace is smaller than the cache")
    split = workspace.split
    cfg = config_for("attn", h, d)
    block_kv = min(cfg.block_k, split)
    if split % block_kv:
        raise ValueError(f"split {split} must be a multiple of {block_kv}")
    if out is None:
        out = torch.empty((m, h * d), dtype=q.dtype, device=q.device)
    if m > workspace.max_rows:
        raise ValueError(f"attention workspace holds {workspace.max_rows} rows, got {m}")
    # The row tile is fixed by the workspace, never by m: part of what keeps rows batch-invariant.
    block_r = max(16, triton.next_power_of_2(workspace.max_rows * g))
    ns = workspace.n_splits
    pdl = pdl_args(q)
    preload = fresh is not None and split == block_kv and preload_on()
    if tree is not None:
        if fresh is None or fresh.dtype != torch.int32 or fresh.shape[0] < m:
            raise ValueError("attention: a tree needs the rows' int32 positions (fresh)")
        if tree.dtype != torch.int32 or tree.shape[0] < m or not tree.is_contiguous():
            raise ValueError("attention: tree must be a contiguous int32 [rows, width] table of ancestors")
    elif preload and (fresh.dtype != torch.int32 or fresh.shape[0] < m):
        raise ValueError("attention: fresh must hold an int32 position for each row of q")
    anc_w = tree.shape[1] if tree is not None else 1
    fs = 1 + triton.cdiv(anc_w - 1, split) if tree is not None else 0  # splits a tree's positions can span
    grid = (kvh, ns + m * fs)
    lines = prefetch_lines(split * d * k_cache.element_size()) if prefetch_on(pdl, k_cache.nbytes + v_cache.nbytes) else 0
    _attn_split_kernel[grid](
        q, k_cache, v_cache, kv_start, kv_end, fresh if (preload or tree is not None) else kv_end, workspace.part,
        workspace.lse, m, h, cap, k_cache.stride(0), ns, scale * LOG2E,
        G=g, HD=d, SPLIT=split, BLOCK_R=block_r, BLOCK_KV=block_kv, UPCAST=UPCAST_DOT, IEEE=q.dtype == torch.float32,
        PREFETCH_LINES=lines, ELEM_BYTES=k_cache.element_size(), PRELOAD=preload, num_warps=cfg.num_warps,
        num_stages=cfg.num_stages, **pdl, **trace_args("attn", grid[0] * grid[1], out),
        anc_ptr=tree if tree is not None else kv_end, TREE=tree is not None, ANC_W=anc_w, FS=max(fs, 1),
    )
    return attention_combine(workspace, m, out)


def attention_combine(workspace: AttentionWorkspace, m: int, out: torch.Tensor) -> torch.Tensor:
    """Pass 2 alone: rows 0..m-1 of the workspace's split partials combined into out [m, H*D] (what
    attention_triton launches after its split pass; bench/step_sweep.py --breakdown times it alone)."""
    h, d = workspace.part.shape[1], workspace.part.shape[3]
    ns = workspace.n_splits
    cfg = config_for("combine", h, d)
    block_d = cfg.block_n if 0 < cfg.block_n < d and d % cfg.block_n == 0 else 0  # block_n: dimensions per program
    grid = (m, h * (d // block_d if block_d else 1))
    _attn_combine_kernel[grid](
        workspace.part, workspace.lse, out, h, ns, HD=d, BLOCK_S=triton.next_power_of_2(ns), BLOCK_D=block_d,
        num_warps=cfg.num_warps, **pdl_args(out), **trace_args("combine", grid[0] * grid[1], out))
    return out
