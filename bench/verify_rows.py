"""What a verify of more rows costs: the captured step at 1, 7, 16 and 32 rows (random weights in the
bundled model's shape; speed does not depend on the values). Prints JSON lines.

    python bench/verify_rows.py [--contexts 1024,4096] [--rows 1,7,16,32]

The question it answers (docs/perf.md, 2026-12-02 fifth session): a token tree of the drafter's
candidates commits 1.2-1.6x the tokens per verify of today's 6-draft chain (bench/tree_tau.py) if it
verifies 16-32 rows instead of 7. That pays only where a 17- or 33-row step costs little more than the
7-row one. The engine sizes its step for 8 rows (engine.model.STEP_ROWS; the linear kernels' row tile
kernels.fused_linear.BLOCK_M = 16; the attention row tile follows STEP_ROWS). A step of more rows needs
both raised, which also makes every step's tiles bigger, so each row count is timed with the smallest
power-of-two capacity that holds it (`capacity` in each line; 8 is today's engine), and rows 1 and 7
also at the larger capacities, to show what raising them would cost AR and today's chain. Attention is
timed with causal rows at consecutive positions: a tree's mask reads the same keys.

A step is one CUDA-graph replay of Transformer.step (every layer's kernels and the LM head, not the
greedy commit or the host), the median over 5 batches of 200 replays, in microseconds.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
for _p in (_ROOT / "bench", _ROOT / "tests" / "gpu", _ROOT):
    if str(_p) not in sys.path:
        sys.path.insert(0, str(_p))

import torch  # noqa: E402

import engine.model as model_mod  # noqa: E402
import kernels.fused_linear as fused_linear  # noqa: E402
import kernels.qkv_rope as qkv_rope  # noqa: E402
from engine.model import Transformer  # noqa: E402
from gpu_timing import step_us  # noqa: E402
from models import random_model  # noqa: E402


@contextlib.contextmanager
def capacity(rows: int):
    """Within: steps sized for `rows` rows (the IO buffers and attention workspace made then,
    engine.model.STEP_ROWS, and the linear kernels' row tile, BLOCK_M, at least 16 as today). After:
    the engine's own sizes again."""
    saved = model_mod.STEP_ROWS, fused_linear.BLOCK_M, qkv_rope.BLOCK_M
    model_mod.STEP_ROWS = rows
    fused_linear.BLOCK_M = qkv_rope.BLOCK_M = max(16, rows)
    try:
        yield
    finally:
        model_mod.STEP_ROWS, fused_linear.BLOCK_M, qkv_rope.BLOCK_M = saved


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", default="1024,4096")
    ap.add_argument("--rows", default="1,7,16,32")
    ap.add_argument("--replays", type=int, default=200)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("verify_rows: needs CUDA", file=sys.stderr)
        return 2
    loaded = random_model()
    model = Transformer(loaded.config, loaded.weights, "cuda")
    rows_list = sorted({int(r) for r in args.rows.split(",")})
    caps = sorted({max(8, 1 << (r - 1).bit_length()) for r in rows_list})
    for ctx in (int(c) for c in args.contexts.split(",")):
        for cap in caps:
            with capacity(cap):
                for rows in rows_list:
                    if rows <= cap and (rows in (1, 7) or cap == max(8, 1 << (rows - 1).bit_length())):
                        us = step_us(model, ctx, rows, args.replays)
                        print(json.dumps({"ctx": ctx, "capacity": cap, "block_m": fused_linear.BLOCK_M, "rows": rows, "us": us}),
                              flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
