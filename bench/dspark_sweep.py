"""DSpark beside AR on real text, in one process: tau, decode tok/s, losslessness, and a sweep of the
speculation policy (confidence threshold x maximum depth) so the defaults are measured, not guessed;
with --trees, the chain (0) against token trees of that many drafts (SpecOptions.tree_nodes, each with
every fanout of --fanouts) under the backend's default policy instead. Prints JSON lines, then a summary
table. Usage:
  python bench/dspark_sweep.py [--drafter DIR] [--contexts 1024,4096,7936] [--reps 3] [--trees 0,7 --fanouts 2,4]"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics

from engine.dspark import SpecOptions, attach_drafter
from engine.generate import Engine
from harness.prompts import exact_prompt


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--drafter", default=None)
    ap.add_argument("--contexts", default="1024,4096,7936")
    ap.add_argument("--new-tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--thresholds", default="0,0.2,0.35,0.5")
    ap.add_argument("--depths", default="2,4,6")
    ap.add_argument("--trees", default=None, help="tree sizes in drafts (0: the chain), instead of the threshold x depth sweep")
    ap.add_argument("--fanouts", default="4")
    args = ap.parse_args()
    eng = Engine()
    attach_drafter(eng, args.drafter)
    rows = []
    for ctx in [int(c) for c in args.contexts.split(",")]:
        for prompt in ("code", "prose"):
            ids = exact_prompt(eng.tokenizer, prompt, ctx)
            eng.generate(ids, args.new_tokens, stop_at_eos=False)
            ar = [eng.generate(ids, args.new_tokens, stop_at_eos=False) for _ in range(args.reps)]
            ar_tps = statistics.median(r.decode_tps for r in ar)
            for thr, depth, opts in policies(args, eng):
                eng.spec_options = opts
                eng.generate(ids, args.new_tokens, dspark=True, stop_at_eos=False)
                ds = [eng.generate(ids, args.new_tokens, dspark=True, stop_at_eos=False) for _ in range(args.reps)]
                row = {"ctx": ctx, "prompt": prompt, "threshold": thr, "max_depth": depth, "ar_tps": round(ar_tps, 1),
                       "dspark_tps": round(statistics.median(r.decode_tps for r in ds), 1),
                       "tau": round(statistics.median(r.stats["tau"] for r in ds), 3),
                       "lossless_runs": sum(r.tokens == ar[0].tokens for r in ds), "runs": len(ds),
                       "accept_hist": ds[0].stats["accept_hist"], "plain_steps": ds[0].stats["plain_steps"]}
                if args.trees is not None:
                    row.update(tree_nodes=opts.tree_nodes, fanout=opts.tree_fanout)
                row["speedup"] = round(row["dspark_tps"] / ar_tps, 3)
                print(json.dumps(row), flush=True)
                rows.append(row)
            eng.spec_options = SpecOptions(time_phases=True)
            t = eng.generate(ids, args.new_tokens, dspark=True, stop_at_eos=False)
            print(json.dumps({"ctx": ctx, "prompt": prompt, "phases": {"draft_s": t.stats["draft_s"], "verify_s": t.stats["verify_s"],
                              "decode_s": t.decode_s, "iterations": t.stats["target_forwards"]}}), flush=True)
    print("ctx   prompt thr  depth  AR tok/s  DSpark tok/s  speedup  tau   lossless")
    for r in rows:
        name = f"tree {r['tree_nodes']}/{r['fanout']}" if "tree_nodes" in r else f"{r['threshold']:<4} {r['max_depth']:<5}"
        print(f"{r['ctx']:<5} {r['prompt']:<6} {name:<10}  {r['ar_tps']:>8}  {r['dspark_tps']:>12}  {r['speedup']:>7}  {r['tau']:<5} {r['lossless_runs']}/{r['runs']}")


def policies(args, eng):
    """(threshold, depth, SpecOptions) to measure: the threshold x depth grid, or with --trees the backend's
    default policy verifying the chain (0) or trees of each size and fanout."""
    if args.trees is None:
        return [(float(t), int(d), SpecOptions(confidence_threshold=float(t), mid_depth=int(d)))
                for t in args.thresholds.split(",") for d in args.depths.split(",")]
    base = SpecOptions.for_backend(eng.model.ops.backend)
    out = []
    for n in (int(x) for x in args.trees.split(",")):
        for f in ([4] if n == 0 else [int(x) for x in args.fanouts.split(",")]):
            out.append((base.confidence_threshold, base.mid_depth, dataclasses.replace(base, tree_nodes=n, tree_fanout=f)))
    return out


if __name__ == "__main__":
    main()
