"""Measure launch configurations of the step kernels on the real model (GPU), then the whole step.

Each candidate is timed as a CUDA graph that launches the kernel once per layer with that layer's own
weights (so weights stream from HBM as in the real step, not from L2), replayed many times.
Prints one JSON line per measurement and, last, the best configuration per kind.
Usage: python bench/tune_step.py [--ctx 4096]"""

from __future__ import annotations

import argparse
import itertools
import json

import torch

from engine.generate import Engine
from gpu_timing import time_graph
from kernels import tuning
from kernels.decode_attention import AttentionWorkspace, attention_triton
from kernels.fused_linear import fused_linear_triton
from kernels.qkv_rope import qkv_rope_triton


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--ctx", type=int, default=4096)
    args = ap.parse_args()
    eng = Engine()
    m = eng.model
    c = m.config
    L = m.layers
    x = torch.randn(1, c.dim, device="cuda")
    a = torch.randn(1, c.q_dim, device="cuda", dtype=m.dtype)
    h = torch.randn(1, c.ffn_dim, device="cuda", dtype=m.dtype)
    cache = m.new_cache(eng.capacity_for(args.ctx, 128))
    pos = torch.tensor([args.ctx], device="cuda", dtype=torch.int32)
    kinds = {
        "qkv": lambda: [qkv_rope_triton(x, lw.attn_norm, lw.wqkv, None, None, None, m.cos, m.sin, pos, cache.k[i, 0], cache.v[i, 0], c.n_heads, c.n_kv_heads, c.norm_eps) for i, lw in enumerate(L)],
        "linear": lambda: [fused_linear_triton(a, lw.wo, residual=x, kind="linear") for lw in L],
        "down": lambda: [fused_linear_triton(h, lw.w_down, residual=x, kind="linear") for lw in L],
        "swiglu": lambda: [fused_linear_triton(x, lw.w_gate, norm_weight=lw.ffn_norm, up_weight=lw.w_up, out_dtype=m.dtype) for lw in L],
        "lm_head": lambda: [fused_linear_triton(x, m.lm_head, norm_weight=m.norm, out_dtype=torch.float32)],
    }
    best = {}
    for kind, fn in kinds.items():
        tk = "linear" if kind == "down" else kind
        grid = [dict(block_k=bk, num_warps=4, num_stages=3, **({} if kind == "qkv" else {"block_n": bn}))
                for bn, bk in itertools.product([16, 32, 64] if kind != "lm_head" else [64, 128, 256], [64, 128, 256])]
        if kind == "qkv":
            grid = [dict(t) for t in {tuple(sorted(g.items())) for g in grid}]
        results = []
        for cfg in grid:
            try:
                with tuning.override(tk, **cfg):
                    us = time_graph(fn, 30, batches=1)
            except Exception as exc:  # a config that does not compile (shared memory) is skipped
                print(json.dumps({"kind": kind, "cfg": cfg, "error": str(exc)[:120]}), flush=True)
                continue
            results.append((us, cfg))
            print(json.dumps({"kind": kind, "cfg": cfg, "us_per_layer": us / len(fn())}), flush=True)
        us, cfg = min(results, key=lambda r: r[0])
        for w, st in [(2, 3), (8, 3), (4, 2), (4, 4)]:
            c2 = dict(cfg, num_warps=w, num_stages=st)
            try:
                with tuning.override(tk, **c2):
                    us2 = time_graph(fn, 30, batches=1)
            except Exception:
                continue
            print(json.dumps({"kind": kind, "cfg": c2, "us_per_layer": us2 / len(fn())}), flush=True)
            if us2 < us:
                us, cfg = us2, c2
        best[kind] = (us / len(fn()), cfg)
    # attention: split size x inner block
    q = torch.randn(1, c.n_heads, c.head_dim, device="cuda", dtype=m.dtype)
    st = torch.zeros(1, dtype=torch.int32, device="cuda")
    en = torch.tensor([args.ctx], dtype=torch.int32, device="cuda")
    att = []
    for split in (64, 128, 256):
        ws = AttentionWorkspace(8, c.n_heads, c.head_dim, cache.capacity, split, "cuda")
        for bkv, w in [(64, 4), (32, 4), (64, 2), (64, 8)]:
            if bkv > split:
                continue
            with tuning.override("attn", block_k=bkv, num_warps=w):
                us = time_graph(lambda: [attention_triton(q, cache.k[i, 0], cache.v[i, 0], st, en, ws) for i in range(c.n_layers)], 30, batches=1) / c.n_layers
            att.append((us, split, bkv, w))
            print(json.dumps({"kind": "attn", "split": split, "block_kv": bkv, "num_warps": w, "us_per_layer": us}), flush=True)
    print(json.dumps({"best": {k: v for k, v in best.items()}, "best_attn": min(att)}), flush=True)


if __name__ == "__main__":
    main()
