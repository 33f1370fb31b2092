"""The target's prefill with its elementwise work as torch ops against the fused kernels (kernels/prefill.py,
add_rmsnorm: `Transformer.prefill_kernels`), in one process, per prompt length: random weights in the
bundled model's shape (speed does not depend on the values). Each path runs captured, as a request's
prefill does (the session's prefill graph is dropped and captured again when the path changes), in the
order torch, fused, torch, fused; host-inclusive wall-clock ms with the device synchronised, median of
--reps per pass. Then whether the two paths left the same bits (logits, captured residuals, KV cache)
and the same AR and DSpark greedy streams. Prints JSON lines. Usage (GPU):
  python bench/prefill_kernels.py [--contexts 1024,4096,7936] [--reps 30] [--profile]"""

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


def _top_kernels(model, tokens, cache, layers) -> dict:
    with torch.inference_mode(), torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CUDA]) as prof:
        model.forward_full(tokens, cache, 0, layers, logits="last")
        torch.cuda.synchronize()
    events = prof.key_averages()
    top = sorted(events, key=lambda e: -e.device_time_total)[:10]
    return {"top_kernels_us": [{"name": e.key[:80], "calls": e.count, "us": round(e.device_time_total, 1)} for e in top],
            "device_us_total": round(sum(e.device_time_total for e in events), 1),
            "launches": sum(e.count for e in events)}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", default="1024,4096,7936")
    ap.add_argument("--reps", type=int, default=30)
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--profile", action="store_true", help="also the top CUDA kernels of one eager prefill per path")
    ap.add_argument("--device", default="cuda", help="cpu: a smoke run of this script (no timing worth reading)")
    args = ap.parse_args()
    from models import random_ids

    dev = torch.device(args.device)
    engine, files = random_bundled_engine(args.device)
    model = engine.model
    layers = files.config.target_layers
    for ctx in (int(c) for c in args.contexts.split(",")):
        ids = random_ids(ctx, engine.config.vocab_size, seed=ctx + 1)
        s = engine.session(len(ids), args.new_tokens, capture_layers=layers)
        times: dict[str, list[float]] = {}
        state = {}
        streams = {}
        for fused in (False, True, False, True):
            label = "fused" if fused else "torch"
            model.prefill_kernels = fused
            s._prefills.clear()
            s._prefill_seen.clear()
            with torch.inference_mode():
                for _ in range(3):  # captured on its second sight, replayed from the third
                    logits, caps, _ = engine.prefill(s, ids)
                times.setdefault(label, []).append(wall_ms(lambda: engine.prefill(s, ids), args.reps))
                if label not in state:  # what this path leaves, from its first pass
                    state[label] = (logits.clone(), [c.clone() for c in caps], s.cache.k[:, :, :, :ctx].clone(),
                                    s.cache.v[:, :, :, :ctx].clone())
            if label not in streams:  # requests of this length share session s, so this path's prefill
                streams[label] = (engine.generate(ids, args.new_tokens, stop_at_eos=False).tokens,
                                  engine.generate(ids, args.new_tokens, dspark=True, stop_at_eos=False).tokens)
        a, b = state["torch"], state["fused"]
        print(json.dumps({
            "ctx": ctx, "random_weights": True,
            "prefill_ms_torch_ops": [round(t, 3) for t in times["torch"]],
            "prefill_ms_fused": [round(t, 3) for t in times["fused"]],
            "ratio": round(statistics.mean(times["torch"]) / statistics.mean(times["fused"]), 3),
            "same_bits": {"logits": torch.equal(a[0], b[0]), "captured": all(torch.equal(x, y) for x, y in zip(a[1], b[1])),
                          "k": torch.equal(a[2], b[2]), "v": torch.equal(a[3], b[3])},
            "ar_streams_equal": streams["torch"][0] == streams["fused"][0],
            "dspark_equals_ar": {k: v[1] == v[0] for k, v in streams.items()},
        }), flush=True)
        if args.profile and dev.type == "cuda":
            tokens = torch.tensor([ids], device=dev)
            for fused in (False, True):
                model.prefill_kernels = fused
                try:
                    print(json.dumps({"ctx": ctx, "path": "fused" if fused else "torch",
                                      **_top_kernels(model, tokens, s.cache, layers)}), flush=True)
                except Exception as exc:  # a profiler problem must not cost the figures above
                    print(json.dumps({"ctx": ctx, "profile_error": str(exc)[:200]}), flush=True)
        model.prefill_kernels = dev.type == "cuda"
    return 0


if __name__ == "__main__":
    sys.exit(main())
