"""The DSpark drafter as a torch module: the training-time definition of the math that
engine/dspark/drafter.py runs with the step kernels at inference. Both must agree (tests check it).

Shapes: caps [B, T, n_cap*D] target residuals at the capture layers; tokens [B, T]; anchors [B, A]
(position of the last committed token of each block). Block j of batch b holds positions
anchors[b, j] + 0..block_size-1: [token at the anchor, MASK, ...]. It sees the context features at
positions [anchor - window, anchor) and, non-causally, its own block.
"""

from __future__ import annotations

import math

import torch
import torch.nn as nn
import torch.nn.functional as F

from engine.dspark.config import DrafterConfig
from engine.rope import rope_tables
from kernels.prefill import rope_rotate


def rms(x: torch.Tensor, w: torch.Tensor, eps: float) -> torch.Tensor:
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps) * w.float()).to(x.dtype)


def rope(x: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """x [..., heads, hd]; cos/sin broadcastable to [..., 1, hd/2]."""
    return rope_rotate(x, cos, sin).to(x.dtype)


class DraftLayer(nn.Module):
    def __init__(self, c: DrafterConfig):
        super().__init__()
        d, h, kv, hd, f = c.dim, c.n_heads, c.n_kv_heads, c.head_dim, c.ffn_dim
        init = lambda *s, std: nn.Parameter(torch.randn(*s) * std)  # noqa: E731
        self.attn_norm = nn.Parameter(torch.ones(d))
        self.wq = init(h * hd, d, std=d**-0.5)
        self.wk = init(kv * hd, d, std=d**-0.5)
        self.wv = init(kv * hd, d, std=d**-0.5)
        self.wo = init(d, h * hd, std=0.02 / math.sqrt(2 * c.n_layers))
        self.ffn_norm = nn.Parameter(torch.ones(d))
        self.w_gate = init(f, d, std=d**-0.5)
        self.w_up = init(f, d, std=d**-0.5)
        self.w_down = init(d, f, std=0.02 / math.sqrt(2 * c.n_layers))


class DrafterModule(nn.Module):
    def __init__(self, c: DrafterConfig, embed: torch.Tensor, lm_head: torch.Tensor):
        super().__init__()
        self.c = c
        d = c.dim
        n_in = len(c.target_layers) * d
        self.fc = nn.Parameter(torch.randn(d, n_in) * n_in**-0.5)
        self.hidden_norm = nn.Parameter(torch.ones(d))
        self.mask_emb = nn.Parameter(embed.float().mean(0).clone())
        self.layers = nn.ModuleList([DraftLayer(c) for _ in range(c.n_layers)])
        self.final_norm = nn.Parameter(torch.ones(d))
        self.markov_a = nn.Parameter(torch.randn(c.markov_rank, d) * d**-0.5)
        self.markov_b = nn.Parameter(torch.zeros(d, c.markov_rank))
        self.conf_w = nn.Parameter(torch.zeros(d))
        self.conf_a = nn.Parameter(torch.zeros(()))
        self.conf_b = nn.Parameter(torch.zeros(()))
        self.register_buffer("embed", embed, persistent=False)
        self.register_buffer("lm_head", lm_head, persistent=False)

    # -- pieces shared with inference ---------------------------------------------------------
    def context_features(self, caps: torch.Tensor) -> torch.Tensor:
        return rms(caps @ self.fc.t().to(caps.dtype), self.hidden_norm, self.c.norm_eps)

    def markov_tables(self) -> tuple[torch.Tensor, torch.Tensor]:
        """u = LM_head @ B and v = Embedding @ A^T, [V, r]: bias(prev -> c) = u[c] . v[prev]."""
        return self.lm_head @ self.markov_b.to(self.lm_head.dtype), self.embed @ self.markov_a.t().to(self.embed.dtype)

    # -- training forward ----------------------------------------------------------------------
    def forward(self, caps: torch.Tensor, tokens: torch.Tensor, anchors: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor):
        """Returns (logits [B, A, P, V] with the Markov bias under teacher forcing,
        base logits [B, A, P, V] without it, final hidden h [B, A, P, D]); P = block_size - 1."""
        c = self.c
        b = tokens.shape[0]
        t = caps.shape[1]  # context positions (the last token of a sequence is never context)
        a = anchors.shape[1]
        bs = c.block_size
        dev = tokens.device
        dt = caps.dtype
        feat = self.context_features(caps)  # [B, T, D]
        offs = torch.arange(bs, device=dev)
        blk_pos = anchors[:, :, None] + offs  # [B, A, bs]
        first = self.embed[torch.gather(tokens, 1, anchors)].to(dt)  # [B, A, D]
        x = torch.cat([first[:, :, None], self.mask_emb.to(dt).expand(b, a, bs - 1, c.dim)], dim=2)
        x = x.reshape(b, a * bs, c.dim)
        # attention mask [B, 1, A*bs, T + A*bs]
        ctx_pos = torch.arange(t, device=dev)
        anc = anchors.repeat_interleave(bs, dim=1)  # [B, A*bs]
        ctx_ok = (ctx_pos[None, None, :] < anc[:, :, None]) & (ctx_pos[None, None, :] >= anc[:, :, None] - c.window)
        blk_id = torch.arange(a, device=dev).repeat_interleave(bs)
        blk_ok = (blk_id[:, None] == blk_id[None, :]).expand(b, -1, -1)
        mask = torch.cat([ctx_ok, blk_ok], dim=2)[:, None]
        cos_c, sin_c = cos[:t][None, :, None, :], sin[:t][None, :, None, :]
        bp = blk_pos.reshape(b, a * bs)
        cos_b, sin_b = cos[bp][:, :, None, :], sin[bp][:, :, None, :]
        h_, kv, hd = c.n_heads, c.n_kv_heads, c.head_dim
        for layer in self.layers:
            cn = rms(feat, layer.attn_norm, c.norm_eps)
            ck = rope((cn @ layer.wk.t().to(dt)).reshape(b, t, kv, hd), cos_c, sin_c)
            cv = (cn @ layer.wv.t().to(dt)).reshape(b, t, kv, hd)
            xn = rms(x, layer.attn_norm, c.norm_eps)
            q = rope((xn @ layer.wq.t().to(dt)).reshape(b, a * bs, h_, hd), cos_b, sin_b)
            bk = rope((xn @ layer.wk.t().to(dt)).reshape(b, a * bs, kv, hd), cos_b, sin_b)
            bv = (xn @ layer.wv.t().to(dt)).reshape(b, a * bs, kv, hd)
            k = torch.cat([ck, bk], dim=1).transpose(1, 2)
            v = torch.cat([cv, bv], dim=1).transpose(1, 2)
            o = F.scaled_dot_product_attention(q.transpose(1, 2), k, v, attn_mask=mask, enable_gqa=True)
            x = x + o.transpose(1, 2).reshape(b, a * bs, h_ * hd) @ layer.wo.t().to(dt)
            xn = rms(x, layer.ffn_norm, c.norm_eps)
            x = x + (F.silu(xn @ layer.w_gate.t().to(dt)) * (xn @ layer.w_up.t().to(dt))) @ layer.w_down.t().to(dt)
        h = rms(x, self.final_norm, c.norm_eps).reshape(b, a, bs, c.dim)[:, :, 1:]  # [B, A, P, D]
        base = h @ self.lm_head.t().to(dt)
        u, v_tab = self.markov_tables()
        prev = torch.gather(tokens, 1, (blk_pos[:, :, :-1]).reshape(b, -1)).reshape(b, a, bs - 1)
        logits = base + v_tab[prev].to(dt) @ u.t().to(dt)
        return logits, base, h

    def confidence_logit(self, h: torch.Tensor, base: torch.Tensor) -> torch.Tensor:
        """Per-position acceptance logit from the final hidden and the base distribution's top log-prob."""
        top = (base.float().max(-1).values - torch.logsumexp(base.float(), -1))
        return h.float() @ self.conf_w.float() + self.conf_a * top + self.conf_b

    # -- export --------------------------------------------------------------------------------
    def export(self) -> dict[str, torch.Tensor]:
        """Weights by inference name: matrices bf16, norms and the confidence head float32."""
        out = {"fc": self.fc, "hidden_norm": self.hidden_norm, "mask_emb": self.mask_emb,
               "final_norm": self.final_norm, "markov_a": self.markov_a, "markov_b": self.markov_b,
               "conf_w": self.conf_w, "conf_a": self.conf_a.reshape(1), "conf_b": self.conf_b.reshape(1)}
        for i, layer in enumerate(self.layers):
            for name, p in layer.named_parameters():
                out[f"layers.{i}.{name}"] = p
        keep_f32 = ("norm", "conf_", "mask_emb")
        return {k: (v.detach().float() if any(s in k for s in keep_f32) else v.detach().to(torch.bfloat16)).contiguous().cpu()
                for k, v in out.items()}

    @classmethod
    def from_weights(cls, c: DrafterConfig, weights: dict[str, torch.Tensor], embed: torch.Tensor, lm_head: torch.Tensor) -> "DrafterModule":
        m = cls(c, embed, lm_head)
        with torch.no_grad():
            for name, p in m.named_parameters():
                key = name
                src = weights[key]
                p.copy_(src.reshape(p.shape).to(p.dtype))
        return m


def rope_for(c: DrafterConfig, n_positions: int, device) -> tuple[torch.Tensor, torch.Tensor]:
    from engine.config import RopeScaling

    return rope_tables(c.head_dim, c.rope_theta, RopeScaling(), n_positions, device)
