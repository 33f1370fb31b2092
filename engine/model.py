"""The transformer: packed weights, a static KV cache, and two forwards.

- `forward_full`: many tokens at once with plain torch ops (cuBLAS / SDPA on GPU): prefill, scoring,
  training features. Any batch size.
- `step`: the decode/verify step for at most STEP_ROWS rows of one sequence at given positions,
  through the kernels in `kernels/` (Triton on CUDA, their torch references on CPU). AR decode is a
  step with one row; DSpark verify is a step with 1 + d rows. Both run the same computation, and every
  step kernel is batch-invariant, so a row's logits do not depend on how many rows share the step.

Both return, on request, the residual stream after chosen layers (the DSpark drafter's context).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F

from engine.config import ModelConfig
from engine.rope import rope_tables
from kernels.common import norm_ahead
from kernels.decode_attention import AttentionWorkspace, attention_reference, attention_triton, default_split
from kernels.embedding import block_inputs_reference, block_inputs_triton, embedding_reference, embedding_triton
from kernels.fused_linear import NormAhead, fused_linear_reference, fused_linear_triton
from kernels.greedy_commit import (HeadArgmax, greedy_commit_reference, greedy_commit_triton, rows_from_base_reference,
                                   rows_from_base_triton, tree_commit_reference, tree_commit_triton)
from kernels.qkv_rope import qkv_rope_reference, qkv_rope_triton
from kernels.prefill import rope_prefill_reference, rope_prefill_triton, silu_mul_reference, silu_mul_triton
from kernels.rmsnorm import add_rmsnorm_triton, rmsnorm_reference, rmsnorm_triton

STEP_ROWS = 8  # 1 committed token + up to 6 drafts, padded to 8 on the CPU path


@dataclass
class LayerWeights:
    attn_norm: torch.Tensor
    wqkv: torch.Tensor
    bqkv: torch.Tensor | None
    q_norm: torch.Tensor | None
    k_norm: torch.Tensor | None
    wo: torch.Tensor
    ffn_norm: torch.Tensor
    w_gate: torch.Tensor
    w_up: torch.Tensor
    w_down: torch.Tensor


class Ops:
    """The step's kernels for one backend: 'triton' (CUDA, or CPU under TRITON_INTERPRET=1) or 'torch'."""

    def __init__(self, backend: str):
        if backend not in ("triton", "torch"):
            raise ValueError(f"unknown backend {backend!r}")
        self.backend = backend
        t = backend == "triton"
        self.rmsnorm = rmsnorm_triton if t else rmsnorm_reference
        self.embedding = embedding_triton if t else embedding_reference
        self.fused_linear = fused_linear_triton if t else fused_linear_reference
        self.qkv_rope = qkv_rope_triton if t else qkv_rope_reference
        self.greedy_commit = greedy_commit_triton if t else greedy_commit_reference
        self.tree_commit = tree_commit_triton if t else tree_commit_reference
        # the DSpark drafter's inputs: its block's rows and key windows, and the positions of the rows just committed
        self.block_inputs = block_inputs_triton if t else block_inputs_reference
        self.rows_from_base = rows_from_base_triton if t else rows_from_base_reference

    def attention(self, q, k_cache, v_cache, kv_start, kv_end, workspace, fresh=None, tree=None):
        """fresh: the positions the kernel just before wrote into these caches (attention_triton); tree: a
        token tree's ancestors (then fresh: the rows' positions)."""
        if self.backend == "triton":
            return attention_triton(q, k_cache, v_cache, kv_start, kv_end, workspace, fresh=fresh, tree=tree)
        return attention_reference(q, k_cache, v_cache, kv_start, kv_end, tree=tree, positions=fresh)


class KVCache:
    """Static cache [layers, batch, kv_heads, capacity, head_dim] for keys and values."""

    def __init__(self, config: ModelConfig, capacity: int, device, dtype, batch: int = 1):
        shape = (config.n_layers, batch, config.n_kv_heads, capacity, config.head_dim)
        self.k = torch.zeros(shape, device=device, dtype=dtype)
        self.v = torch.zeros(shape, device=device, dtype=dtype)
        self.capacity = capacity

    @property
    def batch(self) -> int:
        return self.k.shape[1]


class Transformer:
    def __init__(self, config: ModelConfig, weights: dict[str, torch.Tensor], device: str | torch.device = "cpu",
                 dtype: torch.dtype | None = None, backend: str | None = None):
        self.config = config
        self.device = torch.device(device)
        self.dtype = dtype or (torch.bfloat16 if self.device.type == "cuda" else torch.float32)
        self.ops = Ops(backend or ("triton" if self.device.type == "cuda" else "torch"))
        # forward_full's elementwise work through kernels/prefill.py (one launch each) instead of torch ops:
        # on CUDA; on the CPU the references, unless a test asks for the kernels under the interpreter.
        self.prefill_kernels = self.device.type == "cuda"
        cv = lambda t: t.to(device=self.device, dtype=self.dtype).contiguous()  # noqa: E731
        f32 = lambda t: t.to(device=self.device, dtype=torch.float32).contiguous()  # noqa: E731
        self.embed = cv(weights["embed"])
        self.lm_head = self.embed if config.tie_embeddings or "lm_head" not in weights else cv(weights["lm_head"])
        self.norm = f32(weights["norm"])
        self.layers: list[LayerWeights] = []
        for i in range(config.n_layers):
            p = f"layers.{i}."
            has_bias = config.qkv_bias and (p + "bq") in weights
            self.layers.append(LayerWeights(
                attn_norm=f32(weights[p + "attn_norm"]),
                wqkv=cv(torch.cat([weights[p + "wq"], weights[p + "wk"], weights[p + "wv"]], 0)),
                bqkv=cv(torch.cat([weights[p + "bq"], weights[p + "bk"], weights[p + "bv"]], 0)) if has_bias else None,
                q_norm=f32(weights[p + "q_norm"]) if config.qk_norm else None,
                k_norm=f32(weights[p + "k_norm"]) if config.qk_norm else None,
                wo=cv(weights[p + "wo"]),
                ffn_norm=f32(weights[p + "ffn_norm"]),
                w_gate=cv(weights[p + "w_gate"]),
                w_up=cv(weights[p + "w_up"]),
                w_down=cv(weights[p + "w_down"]),
            ))
        self._rope_len = 0
        self.cos = self.sin = None
        self.ensure_rope(min(config.max_seq_len, 4096))

    # -- helpers -------------------------------------------------------------------------------
    def ensure_rope(self, n_positions: int) -> None:
        if n_positions > self._rope_len:
            c = self.config
            self.cos, self.sin = rope_tables(c.head_dim, c.rope_theta, c.rope_scaling, n_positions, self.device)
            self._rope_len = n_positions

    def new_cache(self, capacity: int, batch: int = 1) -> KVCache:
        self.ensure_rope(capacity)
        return KVCache(self.config, capacity, self.device, self.dtype, batch)

    def _norm(self, x: torch.Tensor, w: torch.Tensor, out_dtype) -> torch.Tensor:
        if self.device.type == "cuda":
            return rmsnorm_triton(x, w, self.config.norm_eps, out_dtype=out_dtype)
        return rmsnorm_reference(x, w, self.config.norm_eps, out_dtype=out_dtype)

    def _add_norm(self, x: torch.Tensor, y: torch.Tensor, w: torch.Tensor | None) -> tuple[torch.Tensor, torch.Tensor | None]:
        """The residual stream after a sublayer's output y (float32), and the next sublayer's input
        (None after the last layer: the final norm may take only the last row)."""
        if w is not None and self.prefill_kernels:
            return add_rmsnorm_triton(x, y, w, self.config.norm_eps, out_dtype=self.dtype)
        x = x + y.float()
        return x, self._norm(x, w, self.dtype) if w is not None else None

    # -- many tokens at once (prefill, scoring, training) ----------------------------------------
    def forward_full(
        self,
        tokens: torch.Tensor,
        cache: KVCache | None = None,
        start: int = 0,
        capture_layers: tuple[int, ...] = (),
        logits: str = "last",
    ) -> tuple[torch.Tensor | None, list[torch.Tensor]]:
        """tokens [B, T] at positions start..start+T-1. With a cache, K/V are written there and the
        queries see the cached prefix. Returns (logits [B, T or 1, V] float32 or None, captured
        residuals [B, T, D] float32 after each layer in capture_layers)."""
        c = self.config
        b, t = tokens.shape
        end = start + t
        self.ensure_rope(end)
        fused = self.prefill_kernels
        x = self.embed[tokens].float()  # [B, T, D] residual stream in float32
        captured: list[torch.Tensor] = []
        want = set(capture_layers)
        n = len(self.layers)
        h = self._norm(x, self.layers[0].attn_norm, self.dtype) if n else None
        for i, lw in enumerate(self.layers):
            qkv = F.linear(h, lw.wqkv, lw.bqkv)
            dst = (cache.k[i, :b], cache.v[i, :b]) if cache is not None else (None, None)
            rope = rope_prefill_triton if fused else rope_prefill_reference
            q, k, v = rope(qkv, self.cos, self.sin, start, c.n_heads, c.n_kv_heads, c.head_dim, lw.q_norm, lw.k_norm,
                           c.norm_eps, *dst)
            q, k, v = (z.transpose(1, 2) for z in (q, k, v))  # [B, heads, T, D]
            if cache is not None and start > 0:
                k = cache.k[i, :b, :, :end]
                v = cache.v[i, :b, :, :end]
            if start == 0:
                o = F.scaled_dot_product_attention(q, k, v, is_causal=True, enable_gqa=True)
            elif t == 1:  # one new token sees the whole cached prefix: no mask, so the fast kernels apply
                o = F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
            else:
                qpos = torch.arange(start, end, device=self.device)
                mask = torch.arange(end, device=self.device)[None, :] <= qpos[:, None]
                o = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
            o = o.transpose(1, 2).reshape(b, t, c.q_dim)
            x, h = self._add_norm(x, F.linear(o, lw.wo), lw.ffn_norm)
            gate, up = F.linear(h, lw.w_gate), F.linear(h, lw.w_up)
            act = silu_mul_triton(gate, up) if fused else silu_mul_reference(gate, up)
            x, h = self._add_norm(x, F.linear(act, lw.w_down), self.layers[i + 1].attn_norm if i + 1 < n else None)
            if i in want:
                captured.append(x)
        if logits == "none":
            return None, captured
        if logits == "last":
            x = x[:, -1:]
        out = F.linear(self._norm(x, self.norm, self.dtype), self.lm_head).float()
        return out, captured

    # -- the decode / verify step ---------------------------------------------------------------
    def step(self, io: "StepIO", m: int, cache: KVCache, tree: bool = False, commit: "StepCommit | None" = None) -> None:
        """Runs rows 0..m-1 of `io` (tokens at io.positions, each seeing keys [kv_start, kv_end)),
        writing logits into io.logits and the residual after each capture layer into io.capture.
        On the torch backend all STEP_ROWS rows are computed (fixed shapes keep rows invariant).
        tree: the rows are a token tree (StepIO.set_tree): row r's keys go to slot io.slots[r] and it sees
        its ancestors' (io.tree); each row's logits are the bits it would get in a chain or alone.
        commit: the greedy commit of the m rows follows (a chain's or the tree's, kernels/greedy_commit.py),
        writing commit.out_tokens, commit.state and the next step's inputs. On Triton the LM head's launch
        leaves the rows' argmaxes (io.argmax) and runs a chain's commit itself (HeadArgmax); a tree's commit
        reads those argmaxes."""
        c = self.config
        ops = self.ops
        triton_path = ops.backend == "triton"
        rows = m if triton_path else STEP_ROWS
        pos = io.positions[:rows]
        x = ops.embedding(io.tokens[:rows], self.embed)
        # each norm prepared by the kernel that writes its input (kernels.fused_linear.NormAhead) where it pays
        ahead_qkv = triton_path and norm_ahead(self.layers[0].wqkv.nbytes)
        ahead_ffn = triton_path and norm_ahead(self.layers[0].w_gate.nbytes * 2)
        qkv_norm = None  # layer 0's input is the embedding's: its QKV normalises x itself
        for i, lw in enumerate(self.layers):
            kc, vc = cache.k[i, 0], cache.v[i, 0]
            q = ops.qkv_rope(x, lw.attn_norm, lw.wqkv, lw.bqkv, lw.q_norm, lw.k_norm, self.cos, self.sin,
                             pos if triton_path else pos.long(), kc, vc, c.n_heads, c.n_kv_heads, c.norm_eps, ahead=qkv_norm,
                             slots=io.slots[:rows] if tree else None)
            a = ops.attention(q, kc, vc, io.kv_start[:rows], io.kv_end[:rows], io.workspace, fresh=pos,
                              tree=io.tree if tree else None)
            ffn_norm = NormAhead(lw.ffn_norm, self.dtype) if ahead_ffn else None
            x = ops.fused_linear(a, lw.wo, residual=x, ahead_out=ffn_norm)
            h = ops.fused_linear(x, lw.w_gate, norm_weight=lw.ffn_norm, eps=c.norm_eps, up_weight=lw.w_up, out_dtype=self.dtype,
                                 ahead=ffn_norm)
            qkv_norm = NormAhead(self.layers[i + 1].attn_norm, self.dtype) if ahead_qkv and i + 1 < len(self.layers) else None
            slot = io.capture_slot.get(i)
            if slot is not None and triton_path:
                x = ops.fused_linear(h, lw.w_down, residual=x, out=io.capture[slot, :rows], ahead_out=qkv_norm)
            else:
                x = ops.fused_linear(h, lw.w_down, residual=x, ahead_out=qkv_norm)
                if slot is not None:
                    io.capture[slot, :rows].copy_(x)
        if triton_path:
            ops.fused_linear(x, self.lm_head, norm_weight=self.norm, eps=c.norm_eps, out=io.logits[:rows],
                             head=io.head_argmax(commit, tree))
        else:
            io.logits[:rows].copy_(ops.fused_linear(x, self.lm_head, norm_weight=self.norm, eps=c.norm_eps, out_dtype=torch.float32))
        self._commit_after(io, m, cache, tree, commit)

    def _commit_after(self, io: "StepIO", m: int, cache: KVCache, tree: bool, commit: "StepCommit | None") -> None:
        """Step(commit=)'s commit where the LM head's launch has not run it: a tree's, and the torch backend's."""
        if commit is None:
            return
        ops = self.ops
        argmax = io.argmax if ops.backend == "triton" else None
        if tree:
            ops.tree_commit(io.logits, io.tokens, io.positions, io.kv_end, commit.out_tokens, commit.state, m, io.parents,
                            io.slots, cache.k, cache.v, io.capture_rows, hist=commit.hist, argmax=argmax)
        elif argmax is None:
            ops.greedy_commit(io.logits, io.tokens, io.positions, io.kv_end, commit.out_tokens, commit.state, m,
                              hist=commit.hist)


@dataclass
class StepCommit:
    """The greedy commit that follows a step (Transformer.step(commit=)): where the committed tokens go, the
    session's state (kernels/greedy_commit.py) and, for the on-device DSpark loop, its histogram."""

    out_tokens: torch.Tensor
    state: torch.Tensor
    hist: torch.Tensor | None = None


class StepIO:
    """Static inputs of the step (so one CUDA graph can be replayed): tokens, positions, key windows,
    the attention workspace. The greedy-commit kernel rewrites them in place for the next step."""

    def __init__(self, model: Transformer, capacity: int, capture_layers: tuple[int, ...] = (), split: int | None = None):
        dev = model.device
        c = model.config
        self.capture_slot = {layer: k for k, layer in enumerate(capture_layers)}
        # Stored row-major ([STEP_ROWS, slots, D]) so the DSpark drafter reads a row's captured residuals as one
        # contiguous [slots * D] vector (capture_rows, a view: no copy); `capture` is the [slots, STEP_ROWS, D]
        # view the step writes a slot's rows through (row stride slots * D).
        rows_major = torch.zeros((STEP_ROWS, len(capture_layers), c.dim), dtype=torch.float32, device=dev)
        self.capture = rows_major.permute(1, 0, 2)
        self.capture_rows = rows_major.view(STEP_ROWS, len(capture_layers) * c.dim)
        self.logits = torch.zeros((STEP_ROWS, c.vocab_size), dtype=torch.float32, device=dev)
        self.tokens = torch.zeros(STEP_ROWS, dtype=torch.int64, device=dev)
        self.positions = torch.zeros(STEP_ROWS, dtype=torch.int32, device=dev)
        self.kv_start = torch.zeros(STEP_ROWS, dtype=torch.int32, device=dev)
        self.kv_end = torch.ones(STEP_ROWS, dtype=torch.int32, device=dev)
        # a token tree's verify (Transformer.step(tree=True)): each row's cache slot, its ancestors (tree[r, i]:
        # the row of r's depth-i ancestor, r itself at its depth) and parent (-1: the root, row 0); written by
        # the DSpark tree head before every tree verify (or set_tree), never by set_rows or the chain's commit
        self.slots = torch.zeros(STEP_ROWS, dtype=torch.int32, device=dev)
        self.tree = torch.zeros((STEP_ROWS, STEP_ROWS), dtype=torch.int32, device=dev)
        self.parents = torch.full((STEP_ROWS,), -1, dtype=torch.int32, device=dev)
        if split is None:
            split = default_split(capacity)
        self.workspace = AttentionWorkspace(STEP_ROWS, c.n_heads, c.head_dim, capacity, split, dev)
        # the rows' argmaxes the LM head's launch leaves with a commit, and its count (HeadArgmax)
        self.argmax = torch.zeros(STEP_ROWS, dtype=torch.int64, device=dev)
        self.head_count = torch.zeros(1, dtype=torch.int32, device=dev)

    def head_argmax(self, commit: StepCommit | None, tree: bool) -> HeadArgmax | None:
        """What the LM head's launch does for Transformer.step(commit=): the argmaxes; a chain's commit too."""
        if commit is None:
            return None
        chain = (self.tokens, self.positions, self.kv_end, commit.out_tokens, commit.state, commit.hist)
        return HeadArgmax(self.argmax, self.head_count, None if tree else chain)

    def set_rows(self, tokens: list[int] | torch.Tensor, base: int) -> None:
        """Row i holds tokens[i] at position base + i, causal (sees keys [0, base + i])."""
        n = len(tokens)
        self.tokens[:n] = torch.as_tensor(tokens, dtype=torch.int64)
        r = torch.arange(STEP_ROWS, dtype=torch.int32) + base
        self.positions.copy_(r)
        self.kv_start.zero_()
        self.kv_end.copy_(r + 1)

    def set_tree(self, tokens: list[int], parents: list[int], base: int) -> None:
        """Row 0 (tokens[0], parent -1) at position base, row c a child of row parents[c] < c at base + its
        depth; every row's keys at slot base + c (the rows after the tree's: a chain beyond it)."""
        n = len(tokens)
        if len(parents) != n or n > STEP_ROWS or parents[0] != -1 or any(not 0 <= p < c for c, p in enumerate(parents) if c):
            raise ValueError("a tree: at most STEP_ROWS rows, row 0 the root (-1), every other row's parent before it")
        self.set_rows(tokens, base)
        tree, depth = tree_ancestors(parents)
        pos = torch.tensor([base + d for d in depth], dtype=torch.int32)
        self.positions[:n] = pos
        self.kv_end[:n] = pos + 1
        self.slots.copy_(torch.arange(STEP_ROWS, dtype=torch.int32) + base)
        self.tree.copy_(tree)
        self.parents.copy_(torch.tensor(parents + list(range(n - 1, STEP_ROWS - 1)), dtype=torch.int32))


def tree_ancestors(parents: list[int]) -> tuple[torch.Tensor, list[int]]:
    """A tree's StepIO.tree ([STEP_ROWS, STEP_ROWS] int32, a chain past its rows) and its rows' depths."""
    tree = chain_tree(STEP_ROWS)
    depth = [0] * len(parents)
    for c in range(1, len(parents)):
        depth[c] = depth[parents[c]] + 1
        tree[c, : depth[c]] = tree[parents[c], : depth[c]]
        tree[c, depth[c]:] = 0
        tree[c, depth[c]] = c
    return tree, depth


def chain_tree(rows: int) -> torch.Tensor:
    """The ancestors of a chain (row r's depth-i ancestor is row i): [rows, rows] int32."""
    i = torch.arange(rows, dtype=torch.int32)
    return torch.where(i[None, :] <= i[:, None], i[None, :], torch.zeros((), dtype=torch.int32))
