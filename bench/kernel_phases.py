"""Where inside each step kernel the step's time goes: the captured decode step replayed with the phase
stamps of kernels/common.py compiled in (each program of each launch writes %globaltimer at its entry,
after its dependency wait, when its input is ready, when its product is in registers and at its end).
bench/step_timeline.py says how much each kernel adds to the step after its predecessor's end; this says
what that time is made of, for the program that ends last (the one the next kernel waits for):

    release   its dependency wait returning, after the predecessor's last program ended (the boundary: the
              predecessor's stores drained and the grid's completion seen)
    input     its input read (RMSNorm's pass over x; the attention's queries)
    product   the K walk (the attention: its block of keys)
    tail      what follows the product until its stores are issued (RoPE, SwiGLU, residual, the split's
              normalisation; for a kernel without stamps 2/3, everything after the wait)
    adds      its last program's end after the predecessor's (step_timeline's figure, without the last
              stores' drain, which the next kernel's release holds)

and, over all programs, how early the first one started, how far apart the programs pass the wait and end.
Per role (qkv, attn, combine, o_proj, gate_up, down, lm_head), the median over layers and replays, µs.
The stamps cost a few instructions per program (each timer read waits for the result it follows), so
the traced step is a little longer than the untraced one; both are printed. Random weights in the
bundled model's shape (speed does not depend on the values).

    python bench/kernel_phases.py [--contexts 4096] [--rows 1,7] [--replays 20] [--raw FILE] [--table JSON]
    python bench/kernel_phases.py --compare BEFORE.jsonl AFTER.jsonl       (each role's phases, before -> after)
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

PHASES = ("release", "input", "product", "tail", "adds")
AFTER_LINEAR = {"combine": "o_proj", "swiglu": "down"}  # a plain linear by what came before it


def roles(names: list[str]) -> list[str]:
    """The tracer's launch names (qkv, attn, combine, linear, swiglu, lm_head) as layer roles."""
    out = []
    for i, n in enumerate(names):
        if n == "linear":
            out.append(AFTER_LINEAR.get(names[i - 1] if i else "", "linear"))
        elif n == "swiglu":
            out.append("gate_up")
        else:
            out.append(n)
    return out


def program_phases(s: list[int], prev_end: int) -> dict:
    """One program's stamps [entry, waited, input, product, end] (ns; 0 = not stamped) as phases, µs."""
    waited, inp, prod, end = s[1], s[2], s[3], s[4]
    after_in = inp or waited
    after_prod = prod or after_in
    return {"release": (waited - prev_end) / 1e3, "input": (inp - waited) / 1e3 if inp else 0.0,
            "product": (prod - after_in) / 1e3 if prod else 0.0, "tail": (end - after_prod) / 1e3,
            "adds": (end - prev_end) / 1e3}


def launch_phases(stamps: list[list[int]], prev_end: int) -> dict:
    """A launch's programs' stamps -> the last-ending program's phases and the spread over programs, µs."""
    last = max(stamps, key=lambda s: s[4])
    row = program_phases(last, prev_end)
    row["first_start"] = (min(s[0] for s in stamps) - prev_end) / 1e3
    row["wait_spread"] = (max(s[1] for s in stamps) - min(s[1] for s in stamps)) / 1e3
    row["end_spread"] = (last[4] - min(s[4] for s in stamps)) / 1e3
    return row


def summarize(replays: list[list[list[list[int]]]], names: list[str]) -> dict:
    """replays: per replay, per launch, per program, the five stamps. Each launch after the first is read
    against its predecessor's last end; per role, medians over launches and replays."""
    rs = roles(names)
    per_role: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    steps = []
    for launches in replays:
        steps.append((max(s[4] for s in launches[-1]) - min(s[0] for s in launches[0])) / 1e3)
        for i in range(1, len(launches)):
            prev_end = max(s[4] for s in launches[i - 1])
            for k, v in launch_phases(launches[i], prev_end).items():
                per_role[rs[i]][k].append(v)
    out = {"traced_step_us": round(statistics.median(steps), 2), "roles": {}}
    for r, ph in per_role.items():
        out["roles"][r] = {"n": len(ph["adds"]) // len(replays),
                           **{k: round(statistics.median(v), 3) for k, v in ph.items()}}
    return out


def resolution_ns(replay: list[list[list[int]]]) -> int:
    """The smallest positive difference between two stamps of a replay (the timer's step, or less)."""
    vals = sorted({t for launch in replay for s in launch for t in s if t})
    diffs = [b - a for a, b in zip(vals, vals[1:]) if b > a]
    return min(diffs) if diffs else 0


def compare(before: dict, after: dict) -> list[str]:
    """Two runs' lines (the same context and rows) side by side: per role, each phase before -> after, and how
    far apart its programs end (end_spread, where both runs have it), µs."""
    out = [f"ctx {after['ctx']} rows {after['rows']}: step {before['step_us']:.1f} -> {after['step_us']:.1f} us"]
    for role, b in before["roles"].items():
        a = after["roles"].get(role)
        if a is not None:
            shown = PHASES + tuple(p for p in ("end_spread",) if p in a and p in b)
            out.append(f"  {role:8s} " + "  ".join(f"{p} {b[p]:.2f} -> {a[p]:.2f}" for p in shown))
    return out


def main() -> int:
    if len(sys.argv) == 4 and sys.argv[1] == "--compare":  # two files of this script's lines
        runs = [[json.loads(line) for line in Path(f).read_text().splitlines() if line.startswith("{")] for f in sys.argv[2:]]
        for before, after in zip(*runs):
            print("\n".join(compare(before, after)))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", default="4096")
    ap.add_argument("--rows", default="1,7")
    ap.add_argument("--replays", type=int, default=20)
    ap.add_argument("--raw", default="", help="also write two replays' stamps (ns from the step's first) here, JSON")
    ap.add_argument("--table", default="", help="a launch table put over kernels/tuning.py's (bench/step_sweep.py --table)")
    ap.add_argument("--shared-weights", action="store_true",
                    help="a probe: every layer reads layer 0's weights (7 MB, which stay in L2), to see the step without "
                    "its weights' trips to HBM (the values are wrong, the kernels' work the same)")
    args = ap.parse_args()
    import torch

    if not torch.cuda.is_available():
        print("kernel_phases: needs CUDA", file=sys.stderr)
        return 2
    from engine.generate import Engine
    from gpu_timing import capture_graph, load_table, step_inputs, step_us
    from kernels.common import Tracer, tracing
    from models import random_model

    if args.table:
        load_table(args.table)
    model = Engine(loaded=random_model(), device="cuda").model
    if args.shared_weights:
        from dataclasses import fields

        for lw in model.layers[1:]:
            for f in fields(lw):
                setattr(lw, f.name, getattr(model.layers[0], f.name))
    raw = []
    for ctx in (int(c) for c in args.contexts.split(",")):
        for rows in (int(r) for r in args.rows.split(",")):
            plain = step_us(model, ctx, rows)
            cache, io = step_inputs(model, ctx, rows)
            tracer = Tracer("cuda")
            def traced_step() -> None:
                tracer.rewind()  # the warm-up calls and the capture all take slots from 0
                model.step(io, rows, cache)

            with tracing(tracer):
                g = capture_graph(traced_step)
            reps = []
            for _ in range(args.replays):
                tracer.buf.zero_()
                g.replay()
                torch.cuda.synchronize()
                b = tracer.buf.cpu().tolist()
                reps.append([b[i][: tracer.grids[i]] for i in range(len(tracer.names))])
            row = {"ctx": ctx, "rows": rows, "shared_weights": args.shared_weights, "step_us": round(plain, 2),
                   "launches": len(tracer.names),
                   "resolution_ns": resolution_ns(reps[-1]), **summarize(reps, tracer.names)}
            print(json.dumps(row), flush=True)
            if args.raw:
                t0 = min(s[0] for s in reps[-1][0])
                raw.append({"ctx": ctx, "rows": rows, "names": roles(tracer.names),
                            "replays": [[[[t - t0 if t else 0 for t in s] for s in launch] for launch in rep] for rep in reps[-2:]]})
            del g, cache, io, tracer
    if args.raw:
        Path(args.raw).write_text(json.dumps(raw))
    return 0


if __name__ == "__main__":
    sys.exit(main())
