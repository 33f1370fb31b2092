"""The drafter's context over a prompt's last window positions (the DSpark-only part of a request's
prefill): eager torch ops against the captured graph, in one process, per prompt length. Random weights in
the bundled model's shape and a random drafter (speed does not depend on the values). Host-inclusive
wall-clock times with the device synchronised, as a request sees them, median of --reps; then whole
DSpark requests (the engine's own prefill clock, which includes this part) with each path, and their
tokens against AR's. Prints JSON lines. Usage (GPU):
  python bench/prefill_context.py [--contexts 1024,4096,7936] [--reps 50] [--requests 10] [--profile]"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

import torch

_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_ROOT))
sys.path.insert(0, str(_ROOT / "tests" / "gpu"))

from gpu_timing import random_bundled_engine, wall_ms  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", default="1024,4096,7936")
    ap.add_argument("--reps", type=int, default=50)
    ap.add_argument("--requests", type=int, default=10)
    ap.add_argument("--new-tokens", type=int, default=256)
    ap.add_argument("--profile", action="store_true", help="also the top CUDA kernels of one eager target prefill per context")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of this script (no timing worth reading)")
    args = ap.parse_args()
    from engine.dspark.speculate import _graphs_for
    from models import random_ids

    dev = torch.device(args.device)
    engine, files = random_bundled_engine(args.device)
    for ctx in (int(c) for c in args.contexts.split(",")):
        ids = random_ids(ctx, engine.config.vocab_size, seed=ctx)
        s = engine.session(len(ids), args.new_tokens, capture_layers=files.config.target_layers)
        g = _graphs_for(engine, s)
        with torch.inference_mode():
            for _ in range(3):  # the prompt length's prefill graph is captured on its second sight
                _, captured, _ = engine.prefill(s, ids)
            eager = wall_ms(lambda: g.rt.prefill_context(captured, ctx), args.reps)
            graphed = wall_ms(lambda: g.prefill_context(captured, ctx), args.reps)
            target_ms = wall_ms(lambda: engine.prefill(s, ids), args.reps)
        ar = engine.generate(ids, args.new_tokens, stop_at_eos=False).tokens
        rows = {}
        keep = g.ctx_rows
        for label, rows_graph in (("eager", None), ("graph", keep), ("eager", None), ("graph", keep)):
            g.ctx_rows = rows_graph
            for _ in range(args.requests):
                r = engine.generate(ids, args.new_tokens, dspark=True, stop_at_eos=False)
                rows.setdefault(label, []).append((r.prefill_s * 1e3, r.tokens == ar))
        g.ctx_rows = keep
        print(json.dumps({
            "ctx": ctx, "random_weights": True, "window": files.config.window,
            "context_ms_eager": round(eager, 3), "context_ms_graph": round(graphed, 3),
            "target_prefill_ms": round(target_ms, 3),
            "dspark_request_prefill_ms_eager": round(statistics.median(p for p, _ in rows["eager"]), 3),
            "dspark_request_prefill_ms_graph": round(statistics.median(p for p, _ in rows["graph"]), 3),
            "requests_per_path": len(rows["graph"]),
            "lossless": {k: sum(ok for _, ok in v) for k, v in rows.items()},
        }), flush=True)
        if args.profile and dev.type == "cuda":  # where the target's own prefill spends its device time
            try:
                tokens = torch.tensor([ids], device=dev)
                with torch.inference_mode(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
                    engine.model.forward_full(tokens, s.cache, 0, files.config.target_layers, logits="last")
                    torch.cuda.synchronize()
                top = sorted(prof.key_averages(), key=lambda e: -e.device_time_total)[:12]
                print(json.dumps({"ctx": ctx, "eager_target_prefill_top_kernels_us": [
                    {"name": e.key[:90], "calls": e.count, "us": round(e.device_time_total, 1)} for e in top],
                    "device_us_total": round(sum(e.device_time_total for e in prof.key_averages()), 1)}), flush=True)
            except Exception as exc:  # a profiler problem must not cost the figures above
                print(json.dumps({"ctx": ctx, "profile_error": str(exc)[:200]}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
