"""Where a DSpark iteration's time goes, on random weights in the bundled model's shape (no staging):
AR decode tok/s, and DSpark with an oracle drafter that is always right (tau = 7: the loop's ceiling)
and always wrong (tau = 1: pure overhead), at the harness contexts. Prints JSON lines.

    python bench/gpu_loop_probe.py [--contexts 1024,4096,7936] [--new 128] [--reps 3] [--loops host,device]

Each DSpark figure is measured for every loop in --loops: `host` (one host check per iteration) and
`device` (SpecOptions.device_loop: `loop_chunk` iterations per graph launch, the host checks per chunk).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_ROOT), str(_ROOT / "tests" / "gpu"), str(_ROOT / "tests")]

import torch  # noqa: E402

from engine.dspark import SpecOptions, random_drafter, use_drafter  # noqa: E402
from engine.dspark.drafter import DrafterRuntime  # noqa: E402
from engine.generate import Engine  # noqa: E402
from models import random_ids, random_model  # noqa: E402


class Oracle:
    def __init__(self, prompt_len, stream, right: bool, p: int):
        t = torch.zeros(prompt_len + len(stream) + 2 * p + 2, dtype=torch.int64)
        for k, tok in enumerate(stream):
            t[prompt_len + k] = tok if right else (tok + 1) % 49152
        self.table, self.off, self.p = t.cuda(), torch.arange(1, p + 1, device="cuda"), p

    def draft(self, rt):
        rt.step_io.tokens[1 : 1 + self.p] = self.table[rt.step_io.positions[0].long() + self.off]
        rt.depth.fill_(self.p)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", default="1024,4096,7936")
    ap.add_argument("--new", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--loops", default="host,device")
    a = ap.parse_args()
    loops = [x.strip() for x in a.loops.split(",") if x.strip()]
    e = Engine(loaded=random_model(), device="cuda")
    files = random_drafter(e, seed=0)
    orig = DrafterRuntime.draft
    for ctx in (int(c) for c in a.contexts.split(",")):
        ids = random_ids(ctx, e.config.vocab_size, seed=ctx)
        e.drafter = None
        e._session = None
        e.generate(ids, a.new, stop_at_eos=False)
        ar = [e.generate(ids, a.new, stop_at_eos=False) for _ in range(a.reps)]
        row = {"ctx": ctx, "ar_tps": statistics.median(r.decode_tps for r in ar)}
        stream = ar[0].tokens
        for loop in loops:
            opts = SpecOptions(
                confidence_threshold=0.0, idle_min_accept=0.0, narrow_below_ctx=0, device_loop=loop == "device"
            )
            for name, right in (("oracle_right", True), ("oracle_wrong", False)):
                o = Oracle(ctx, stream + [0] * 16, right, files.config.proposals)
                DrafterRuntime.draft = lambda rt, o=o: o.draft(rt)
                use_drafter(e, files, opts)
                e._session = None
                e.generate(ids, a.new, dspark=True, stop_at_eos=False)
                runs = [e.generate(ids, a.new, dspark=True, stop_at_eos=False) for _ in range(a.reps)]
                assert all(r.tokens == stream for r in runs), (loop, name)
                key = f"{loop}_{name}"
                row[key + "_tps"] = statistics.median(r.decode_tps for r in runs)
                row[key + "_tau"] = runs[0].stats["tau"]
                row[key + "_us_per_iter"] = (
                    1e6 * statistics.median(r.decode_s for r in runs) / runs[0].stats["target_forwards"]
                )
            DrafterRuntime.draft = orig
            use_drafter(e, files, opts)
            e._session = None
            e.generate(ids, a.new, dspark=True, stop_at_eos=False)
            runs = [e.generate(ids, a.new, dspark=True, stop_at_eos=False) for _ in range(a.reps)]
            assert all(r.tokens == stream for r in runs), (loop, "random_drafter")
            row[f"{loop}_random_drafter_tau"] = runs[0].stats["tau"]
            row[f"{loop}_random_drafter_us_per_iter"] = (
                1e6 * statistics.median(r.decode_s for r in runs) / runs[0].stats["target_forwards"]
            )
        print(json.dumps(row), flush=True)


if __name__ == "__main__":
    main()
