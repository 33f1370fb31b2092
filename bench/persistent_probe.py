"""The persistent step (kernels/persistent_step.py) against the six kernels per layer, and where its time
goes: random weights in the bundled model's shape (no staging), the captured step at each context,
1 and 7 rows, microseconds per replay (bench/gpu_timing.time_graph). Prints JSON lines.

    python bench/persistent_probe.py [--contexts 1024,4096] [--replays 200]

Variants: the separate kernels with the RMSNorm pass looped and unrolled (DSPARK_UNROLL_NORM), the
persistent step at several launch shapes (DSPARK_PERSISTENT_WARPS / _STAGES), and a probe that
computes wrong results on purpose to split its time (DSPARK_PERSISTENT_PROBE: `nowait`, tiles only;
`nowork`, waits only; `nowork-nowait`, neither; docs/perf-data/2026-12-02-persistent-v2 has all three). Each real variant's logits are compared with the separate kernels' (max
absolute difference, and whether every row's argmax agrees).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_ROOT))
sys.path.insert(0, str(_ROOT / "tests" / "gpu"))

import torch  # noqa: E402

from engine.model import StepIO, Transformer  # noqa: E402
from gpu_timing import step_capacity, time_graph  # noqa: E402
from kernels import common  # noqa: E402
from models import random_model  # noqa: E402

U0, U1 = {"DSPARK_UNROLL_NORM": "0"}, {"DSPARK_UNROLL_NORM": "1"}
VARIANTS = [  # (name, persistent, env)
    ("separate", False, U0),
    ("separate-unrollnorm", False, U1),
    ("persistent-s4", True, {**U0, "DSPARK_PERSISTENT_STAGES": "4"}),
    ("persistent-s4-unrollnorm", True, {**U1, "DSPARK_PERSISTENT_STAGES": "4"}),
    ("persistent-s3-unrollnorm", True, {**U1, "DSPARK_PERSISTENT_STAGES": "3"}),
    ("probe-nowait-s4-unrollnorm", True, {**U1, "DSPARK_PERSISTENT_STAGES": "4", "DSPARK_PERSISTENT_PROBE": "nowait"}),
]
KNOBS = ("DSPARK_UNROLL_NORM", "DSPARK_PERSISTENT_STAGES", "DSPARK_PERSISTENT_WARPS", "DSPARK_PERSISTENT_PROBE")


def _set(env: dict) -> None:
    for k in KNOBS:
        os.environ.pop(k, None)
    os.environ.update(env)
    common.unroll_env_on.cache_clear()


def _step(model: Transformer, ctx: int, rows: int, replays: int) -> tuple[float, torch.Tensor]:
    cap = step_capacity(ctx)
    cache = model.new_cache(cap)
    torch.manual_seed(0)
    cache.k.normal_(0, 1)
    cache.v.normal_(0, 1)
    io = StepIO(model, cap)
    io.set_rows(list(range(1000, 1000 + rows)), ctx)
    us = time_graph(lambda: model.step(io, rows, cache), replays)
    io.set_rows(list(range(1000, 1000 + rows)), ctx)
    model.step(io, rows, cache)  # eager, once more, for the logits
    torch.cuda.synchronize()
    if io.persistent is not None and int(io.persistent.error.item()):
        raise RuntimeError("a wait of the persistent step gave up")
    return us, io.logits[:rows].clone()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", default="1024,4096")
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--only", default=None, help="comma-separated variant names")
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("persistent_probe: needs CUDA", file=sys.stderr)
        return 2
    loaded = random_model()
    models = {p: Transformer(loaded.config, loaded.weights, "cuda", persistent=p) for p in (False, True)}
    ref: dict[tuple[int, int], torch.Tensor] = {}
    for name, persistent, env in VARIANTS:
        if args.only and name not in args.only.split(","):
            continue
        _set(env)
        for ctx in (int(c) for c in args.contexts.split(",")):
            for rows in (1, 7):
                try:
                    us, logits = _step(models[persistent], ctx, rows, args.replays)
                except Exception as exc:  # a variant that does not compile or run: say so, go on
                    print(json.dumps({"variant": name, "ctx": ctx, "rows": rows, "error": str(exc).splitlines()[0][:200]}),
                          flush=True)
                    continue
                row = {"variant": name, "ctx": ctx, "rows": rows, "us": round(us, 1)}
                if name == "separate":
                    ref[(ctx, rows)] = logits
                elif not name.startswith("probe") and (ctx, rows) in ref:
                    r = ref[(ctx, rows)]
                    row.update(max_abs_diff=float((logits - r).abs().max()), bit_identical=bool(torch.equal(logits, r)),
                               argmax_agrees=bool(torch.equal(logits.argmax(-1), r.argmax(-1))))
                print(json.dumps(row), flush=True)
    _set({})
    return 0


if __name__ == "__main__":
    sys.exit(main())
