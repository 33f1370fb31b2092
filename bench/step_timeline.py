"""Where the captured decode step's time goes on the critical path: the step replayed as its CUDA graph
under the torch profiler (CUPTI records each kernel inside a graph replay), then, for every kernel, how
far its end lies past the end of the kernel before it (`adds`: its share of the step's length, what the
chain of programmatic dependent launches makes of it), how long it ran (`dur`: from its first program,
which PDL may start early, to its end) and when it started relative to its predecessor's end (`start`,
negative: launched early). Kernels are named by their role in a layer (qkv, attn, combine, o_proj,
gate_up, down) and summed over layers; `step` is first start to last end, per replay. Why: a kernel
that is faster alone is not always faster in the step (docs/perf.md, thirteenth and fifteenth sessions).
Random weights in the bundled model's shape (speed does not depend on the values).

    python bench/step_timeline.py [--contexts 4096] [--rows 1,7] [--replays 20]
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
for _p in (_ROOT, _ROOT / "bench", _ROOT / "tests" / "gpu"):
    sys.path.insert(0, str(_p))

ROLES_AFTER = {"combine": "o_proj", "o_proj": "gate_up", "gate_up": "down"}  # a linear kernel by what came before


def roles(names: list[str]) -> list[str]:
    """Each kernel of one step, in order, named by its role: the three linears of a layer follow its
    attention combine; the step's last linear is the LM head."""
    out, prev = [], ""
    for i, n in enumerate(names):
        if "qkv_rope" in n:
            r = "qkv"
        elif "attn_split" in n:
            r = "attn"
        elif "attn_combine" in n:
            r = "combine"
        elif "linear" in n:  # _fused_linear_kernel, or a probe's linear kernel in its place
            r = "lm_head" if "linear" not in "".join(names[i + 1:]) else ROLES_AFTER.get(prev, "linear")
        elif "embedding" in n:
            r = "embedding"
        else:
            r = n[:40]
        out.append(r)
        prev = r
    return out


def summarize(kernels: list[tuple[str, float, float]], per_step: int) -> dict:
    """kernels: (name, start us, end us) in start order over all replays; per_step kernels per replay."""
    steps = [kernels[i : i + per_step] for i in range(0, len(kernels) - per_step + 1, per_step)]
    adds, durs, starts = defaultdict(list), defaultdict(list), defaultdict(list)
    lengths = []
    for st in steps:
        names = roles([k[0] for k in st])
        lengths.append(st[-1][2] - st[0][1])
        totals = defaultdict(float)
        for j, (r, (_, s, e)) in enumerate(zip(names, st)):
            if j == 0:
                continue
            totals[r] += e - st[j - 1][2]
            durs[r].append(e - s)
            starts[r].append(s - st[j - 1][2])
        for r, v in totals.items():
            adds[r].append(v)
    counts = defaultdict(int)
    for r in roles([k[0] for k in steps[0]]):
        counts[r] += 1
    return {"step_us": statistics.median(lengths), "kernels": per_step,
            "roles": {r: {"n": counts[r], "adds_us": round(statistics.median(adds[r]), 2),
                          "adds_per_kernel_us": round(statistics.median(adds[r]) / counts[r], 3),
                          "dur_us": round(statistics.median(durs[r]), 3), "start_us": round(statistics.median(starts[r]), 3)}
                      for r in adds}}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", default="4096")
    ap.add_argument("--rows", default="1,7")
    ap.add_argument("--replays", type=int, default=20)
    args = ap.parse_args()
    import torch
    from torch.profiler import ProfilerActivity, profile

    if not torch.cuda.is_available():
        print("step_timeline: needs CUDA", file=sys.stderr)
        return 2
    from engine.generate import Engine
    from gpu_timing import capture_graph, step_inputs
    from models import random_model

    model = Engine(loaded=random_model(), device="cuda").model
    for ctx in (int(c) for c in args.contexts.split(",")):
        for rows in (int(r) for r in args.rows.split(",")):
            cache, io = step_inputs(model, ctx, rows)
            g = capture_graph(lambda: model.step(io, rows, cache))
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                for _ in range(args.replays):
                    g.replay()
                torch.cuda.synchronize()
            ks = sorted(((e.name, e.time_range.start, e.time_range.end) for e in prof.events()
                         if e.device_type == torch.autograd.DeviceType.CUDA and "Memcpy" not in e.name and "Memset" not in e.name),
                        key=lambda k: k[1])
            per_step = len(ks) // args.replays if ks else 0
            row = {"ctx": ctx, "rows": rows, "events": len(ks)}
            if per_step and len(ks) % args.replays == 0:
                row.update(summarize(ks, per_step))
            else:
                row["note"] = f"{len(ks)} kernel events over {args.replays} replays: not whole steps (graph kernels not traced?)"
            print(json.dumps(row), flush=True)
            del g, cache, io
    return 0


if __name__ == "__main__":
    sys.exit(main())
