"""The DSpark drafter at inference: the math of module.py run through the step kernels on static
buffers, so that both of its passes can be captured as CUDA graphs.

- ctx_update(): turns the target step's captured residual rows (the rows it just committed, and
  garbage rows that later writes overwrite) into context features, and writes every draft layer's
  K/V for them at their positions. No extra target forward: the verify pass already computed them.
- draft(): runs the block [last committed token, MASK x 6] at positions P..P+6 (P = the last
  committed token's position), writing the 6 drafts straight into the target step's token rows
  1..6, the confidence of each and the depth the confidence picks; with tree_nodes, a token tree of that
  many drafts instead (kernels/draft_head.py's tree head: rows 1..tree_nodes, their positions, parents
  and ancestors in the step's inputs).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from engine.dspark.config import DrafterConfig
from engine.dspark.module import rope_for
from engine.errors import EngineError
from engine.model import STEP_ROWS, LayerWeights, Transformer
from kernels.decode_attention import AttentionWorkspace, default_split
from kernels.draft_head import draft_head_reference, draft_head_triton, tree_head_reference, tree_head_triton
from kernels.prefill import rope_rotate

WEIGHTS_FILE = "drafter.safetensors"
CONFIG_FILE = "drafter.json"


@dataclass
class DrafterFiles:
    config: DrafterConfig
    weights: dict[str, torch.Tensor]
    sha256: str
    path: Path


def load_drafter_files(path: str | Path) -> DrafterFiles:
    import hashlib

    root = Path(path)
    cfg_path, w_path = root / CONFIG_FILE, root / WEIGHTS_FILE
    if not cfg_path.is_file() or not w_path.is_file():
        raise EngineError(f"{root} is not a drafter directory (needs {CONFIG_FILE} and {WEIGHTS_FILE})")
    try:
        config = DrafterConfig.from_dict(json.loads(cfg_path.read_text()))
        weights = load_file(str(w_path))
    except (ValueError, KeyError, TypeError, OSError) as exc:
        raise EngineError(f"cannot read the drafter in {root}: {exc}") from exc
    digest = hashlib.sha256(w_path.read_bytes() + cfg_path.read_bytes()).hexdigest()
    return DrafterFiles(config, weights, digest, root)


def save_drafter_files(path: str | Path, config: DrafterConfig, weights: dict[str, torch.Tensor]) -> None:
    root = Path(path)
    root.mkdir(parents=True, exist_ok=True)
    save_file(weights, str(root / WEIGHTS_FILE))
    config.save(root / CONFIG_FILE)


def check_compatible(config: DrafterConfig, target: Transformer) -> None:
    tc = target.config
    if config.dim != tc.dim or config.vocab_size != tc.vocab_size:
        raise EngineError(f"drafter (dim {config.dim}, vocab {config.vocab_size}) does not fit the target (dim {tc.dim}, vocab {tc.vocab_size})")
    bad = [layer for layer in config.target_layers if not 0 <= layer < tc.n_layers]
    if bad:
        raise EngineError(f"drafter reads target layer {bad[0]}, but the target has {tc.n_layers} layers")


class DrafterRuntime:
    """Static buffers + the two passes for one capacity (one per Session)."""

    def __init__(self, target: Transformer, files: DrafterFiles, capacity: int, step_io, state: torch.Tensor, split: int | None = None,
                 tree_nodes: int = 0, tree_fanout: int = 4):
        c = self.c = files.config
        if tree_nodes and not 1 <= tree_nodes < STEP_ROWS:
            raise EngineError(f"a token tree of {tree_nodes} drafts does not fit the step's {STEP_ROWS} rows")
        if tree_nodes and (tree_fanout < 1 or sum(tree_fanout ** d for d in range(1, c.proposals + 1)) < tree_nodes):
            raise EngineError(f"a token tree of {tree_nodes} drafts cannot grow with a fanout of {tree_fanout} "
                              f"in {c.proposals} depths")
        self.tree_nodes, self.tree_fanout = tree_nodes, tree_fanout
        check_compatible(c, target)
        self.target = target
        self.ops = target.ops
        self.step_io = step_io
        self.state = state
        dev, dt = target.device, target.dtype
        w = files.weights
        cv = lambda t: t.to(device=dev, dtype=dt).contiguous()  # noqa: E731
        f32 = lambda t: t.to(device=dev, dtype=torch.float32).contiguous()  # noqa: E731
        self.fc = cv(w["fc"])
        self.hidden_norm = f32(w["hidden_norm"])
        self.final_norm = f32(w["final_norm"])
        self.layers = [
            LayerWeights(
                attn_norm=f32(w[f"layers.{i}.attn_norm"]),
                wqkv=cv(torch.cat([w[f"layers.{i}.wq"], w[f"layers.{i}.wk"], w[f"layers.{i}.wv"]], 0)),
                bqkv=None, q_norm=None, k_norm=None,
                wo=cv(w[f"layers.{i}.wo"]), ffn_norm=f32(w[f"layers.{i}.ffn_norm"]),
                w_gate=cv(w[f"layers.{i}.w_gate"]), w_up=cv(w[f"layers.{i}.w_up"]), w_down=cv(w[f"layers.{i}.w_down"]),
            )
            for i in range(c.n_layers)
        ]
        # [target embedding; MASK] so the block's embedding is one gather; the MASK id is vocab_size
        self.table = torch.cat([target.embed, w["mask_emb"].to(device=dev, dtype=dt)[None]], 0).contiguous()
        self.mask_id = c.vocab_size
        self.lm_head = target.lm_head
        a, b = w["markov_a"].to(dev, torch.float32), w["markov_b"].to(dev, torch.float32)
        self.markov_u = (target.lm_head.float() @ b).to(dt).contiguous()  # [V, r]
        self.markov_v = (target.embed.float() @ a.t()).to(dt).contiguous()  # [V, r]
        self.conf_w = f32(w["conf_w"])
        self.conf_a = f32(w["conf_a"]).reshape(())
        self.conf_b = f32(w["conf_b"]).reshape(())
        self.cos, self.sin = rope_for(c, capacity + STEP_ROWS, dev)
        # the drafter's own KV cache and static inputs
        shape = (c.n_layers, c.n_kv_heads, capacity, c.head_dim)
        self.k = torch.zeros(shape, device=dev, dtype=dt)
        self.v = torch.zeros(shape, device=dev, dtype=dt)
        if split is None:
            split = default_split(capacity)
        self.workspace = AttentionWorkspace(STEP_ROWS, c.n_heads, c.head_dim, capacity, split, dev)
        self.ctx_pos = torch.zeros(STEP_ROWS, device=dev, dtype=torch.int32 if self.ops.backend == "triton" else torch.int64)
        self.block_x = torch.zeros(self.rows, c.dim, device=dev)
        self.bounds = torch.zeros(2 * self.rows, device=dev, dtype=torch.int32)  # every block row's [start] * R + [end] * R
        self.threshold = torch.tensor(0.3, device=dev)
        # outputs
        p = c.proposals
        self.drafts = torch.zeros(p, dtype=torch.int64, device=dev)
        self.h = torch.zeros(STEP_ROWS, c.dim, device=dev)
        self.base_logits = torch.zeros(p, c.vocab_size, device=dev)
        self.confidence = torch.zeros(p, device=dev)
        self.depth = torch.zeros((), dtype=torch.int64, device=dev)

    @property
    def rows(self) -> int:
        # rows of the drafter's own launches: the block on Triton, padded to STEP_ROWS on the torch path
        return self.c.block_size if self.ops.backend == "triton" else STEP_ROWS

    def ctx_update(self) -> None:
        ops, c = self.ops, self.c
        feats_in = self.step_io.capture_rows  # [STEP_ROWS, slots * D], a view of the step's capture buffer
        pos = ops.rows_from_base(self.state, self.ctx_pos)  # the committed step's row positions
        feat = ops.rmsnorm(ops.fused_linear(feats_in, self.fc, out_dtype=torch.float32), self.hidden_norm, c.norm_eps)
        for i, lw in enumerate(self.layers):
            ops.qkv_rope(feat, lw.attn_norm, lw.wqkv, None, None, None, self.cos, self.sin, pos,
                         self.k[i], self.v[i], c.n_heads, c.n_kv_heads, c.norm_eps)

    def draft(self) -> None:
        ops, c = self.ops, self.c
        io = self.step_io
        rows = self.rows
        pos = io.positions[:rows]  # P + i: the greedy commit and set_rows keep the step's rows consecutive
        # the block [last committed token, MASK, ...] embedded, and every row's window [max(0, P - window),
        # P + block_size) (non-causal in the block), in one launch
        ops.block_inputs(io.tokens, io.positions, self.table, self.mask_id, c.window, c.block_size, self.block_x, self.bounds)
        kv_start, kv_end = self.bounds[:rows], self.bounds[rows:]
        x = self.block_x
        pos_arg = pos if ops.backend == "triton" else pos.long()
        for i, lw in enumerate(self.layers):
            q = ops.qkv_rope(x, lw.attn_norm, lw.wqkv, None, None, None, self.cos, self.sin, pos_arg,
                             self.k[i], self.v[i], c.n_heads, c.n_kv_heads, c.norm_eps)
            a = ops.attention(q, self.k[i], self.v[i], kv_start, kv_end, self.workspace, fresh=pos)
            x = ops.fused_linear(a, lw.wo, residual=x)
            hh = ops.fused_linear(x, lw.w_gate, norm_weight=lw.ffn_norm, eps=c.norm_eps, up_weight=lw.w_up, out_dtype=self.target.dtype)
            x = ops.fused_linear(hh, lw.w_down, residual=x)
        p = c.proposals
        h = ops.rmsnorm(x[1 : 1 + p], self.final_norm, c.norm_eps, out=self.h[:p])
        ops.fused_linear(h, self.lm_head, out_dtype=torch.float32, out=self.base_logits)
        if self.tree_nodes:
            # a token tree grown best-first from the same distributions: the target step's rows 1..tree_nodes
            tree = tree_head_triton if ops.backend == "triton" else tree_head_reference
            tree(self.base_logits, self.markov_u, self.markov_v, self.tree_nodes, self.tree_fanout, io.tokens, io.positions,
                 io.kv_end, io.slots, io.tree, io.parents)
            return
        # Each draft adds the Markov bias of the token before it (the last committed one for the first) over
        # the whole vocabulary, one after another, as the drafter was trained; the drafts land in the target
        # step's token rows 1..p (kernels/draft_head.py).
        head = draft_head_triton if ops.backend == "triton" else draft_head_reference
        head(self.base_logits, self.h[:p], io.tokens[:1], self.markov_u, self.markov_v, self.conf_w, self.conf_a,
             self.conf_b, self.threshold, self.drafts, self.confidence, self.depth, io.tokens)

    def prefill_context(self, captured: list[torch.Tensor], end: int) -> None:
        """Context K/V for prompt positions [max(0, end - window), end) from the prefill's captured
        residuals (each [1, T, D]); plain torch ops over many rows, the same math as ctx_update."""
        start = max(0, end - self.c.window)
        caps = torch.cat([t[0, start:end] for t in captured], dim=-1)  # [n, slots*D]
        self.context_rows(caps, torch.arange(start, end, device=caps.device))

    def context_rows(self, caps: torch.Tensor, pos: torch.Tensor) -> None:
        """The drafter's context K/V at positions `pos` ([n] int64, on the device) from the target's
        residuals there (`caps` [n, slots*D]). Shapes fixed by n and positions read from a tensor, so
        the speculation loop can capture it once for the window-long prompt tail (speculate._Graphs)."""
        c = self.c
        feat = _rms(caps.to(self.fc.dtype).float() @ self.fc.float().t(), self.hidden_norm, c.norm_eps)
        cos, sin = self.cos.index_select(0, pos)[:, None, :], self.sin.index_select(0, pos)[:, None, :]
        hd, kvh = c.head_dim, c.n_kv_heads
        for i, lw in enumerate(self.layers):
            kv = _rms(feat, lw.attn_norm, c.norm_eps).to(lw.wqkv.dtype).float() @ lw.wqkv[c.n_heads * hd :].float().t()
            k = kv[:, : kvh * hd].float().reshape(-1, kvh, hd)
            v = kv[:, kvh * hd :].reshape(-1, kvh, hd)
            k = rope_rotate(k, cos, sin)
            self.k[i].index_copy_(1, pos, k.transpose(0, 1).to(self.k.dtype))
            self.v[i].index_copy_(1, pos, v.transpose(0, 1).to(self.v.dtype))


def _rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w
