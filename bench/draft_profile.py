"""Where a DSpark iteration's time goes on the GPU: the verify step, the greedy commit, the drafter's
context update and its draft pass, each timed alone as a CUDA graph, and the whole on-device iteration;
then the kernels of the drafter's passes and of the commit by GPU time (torch profiler, eager).

Random target weights in the bundled model's shape and the shipped drafter (speed does not depend on
the values; acceptance does, and is not measured here). Prints JSON lines, then the profiler tables.

    python bench/draft_profile.py [--contexts 1024,4096] [--replays 200] [--tree PATH] [--no-profile]
                                  [--head-configs 256:4,512:8] [--tree-nodes 7 --fanout 2]

--tree-nodes N: the drafts as a token tree of N (SpecOptions.tree_nodes, --fanout its tree_fanout): the verify is
the tree's N + 1 rows, its commit the tree commit, the draft pass the tree head's (this tree only).
--head-configs also times, per drafter-head launch configuration (kernels/tuning.py "head": vocabulary
entries per program : warps), the head alone (ten calls in one graph) and the whole draft pass.

Why (docs/perf.md, 2026-12-03): by the engine's own decode clock one DSpark iteration took ~1,000 us
at 1k on the H200 while its 7-row verify step alone took ~630 us.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]


def _args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--contexts", default="1024,4096")
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--drafter", default=None, help="a drafter directory (default: the shipped one)")
    ap.add_argument("--tree", default=None, help="import engine/ and kernels/ from this checkout (the previous main)")
    ap.add_argument("--no-profile", action="store_true", help="only the timings, not the profiler tables")
    ap.add_argument("--head-configs", default="", help="CHUNK:WARPS,... of the drafter's head to time (this tree only)")
    ap.add_argument("--tree-nodes", type=int, default=0, help="a token tree of this many drafts instead of the chain")
    ap.add_argument("--fanout", type=int, default=2)
    return ap.parse_args()


ARGS = _args()
for _p in (_ROOT / "bench", _ROOT / "tests" / "gpu", Path(ARGS.tree).resolve() if ARGS.tree else _ROOT):
    sys.path.insert(0, str(_p))

import torch  # noqa: E402

from engine.dspark import BUNDLED_DRAFTER, SpecOptions, use_drafter  # noqa: E402
from engine.dspark.drafter import load_drafter_files  # noqa: E402
from engine.dspark.speculate import _graphs_for, _prefill  # noqa: E402
from engine.generate import Engine  # noqa: E402
from models import random_ids, random_model  # noqa: E402


def replay_us(fn, replays: int) -> float:
    """Microseconds per call of an already-captured Replayable, median of 5 timed batches."""
    import statistics

    for _ in range(10):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(5):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(replays):
            fn()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000 / replays)
    return statistics.median(times)


def head_sweep(engine, s, g, ctx: int, configs: str, replays: int) -> None:
    """The drafter's head alone (ten calls in one graph) and the draft pass, per head launch configuration."""
    from engine.graphs import Replayable
    from kernels import tuning
    from kernels.draft_head import draft_head_triton

    rt = g.rt
    p = rt.c.proposals

    def head() -> None:
        draft_head_triton(rt.base_logits, rt.h[:p], s.io.tokens[:1], rt.markov_u, rt.markov_v, rt.conf_w, rt.conf_a,
                          rt.conf_b, rt.threshold, rt.drafts, rt.confidence, rt.depth, s.io.tokens)

    for spec in ["table"] + [c for c in configs.split(",") if c]:
        fields = {} if spec == "table" else dict(zip(("block_n", "num_warps"), (int(x) for x in spec.split(":"))))
        with tuning.override("head", **fields) if fields else contextlib.nullcontext():
            cfg = tuning.config_for("head", rt.base_logits.shape[1], rt.markov_u.shape[1])
            ten = Replayable(lambda: [head() for _ in range(10)], engine.model.device, True)
            draft = Replayable(rt.draft, engine.model.device, True)
        print(json.dumps({"ctx": ctx, "head_config": spec, "block_n": cfg.block_n, "num_warps": cfg.num_warps,
                          "head_us": replay_us(ten, max(1, replays // 10)) / 10, "draft_us": replay_us(draft, replays)}), flush=True)


def verify_and_commit(engine, s, m: int, tree: bool) -> None:
    """The verify and its commit, eager, as the engine runs them (a previous main's checkout may have no
    Transformer.step(commit=), no trees and no Session.commit)."""
    if hasattr(s, "step_commit"):
        engine.model.step(s.io, m, s.cache, tree=tree, commit=s.step_commit())
    elif tree:
        engine.model.step(s.io, m, s.cache, tree=True)
        s.commit(m, True)
    else:
        engine.model.step(s.io, m, s.cache)
        engine.model.ops.greedy_commit(s.io.logits, s.io.tokens, s.io.positions, s.io.kv_end, s.out_tokens, s.state, m)


def main() -> int:
    args = ARGS
    if not torch.cuda.is_available():
        print("draft_profile: needs CUDA", file=sys.stderr)
        return 2
    engine = Engine(loaded=random_model(), device="cuda")
    files = load_drafter_files(args.drafter or BUNDLED_DRAFTER)
    tree = {"tree_nodes": args.tree_nodes, "tree_fanout": args.fanout} if args.tree_nodes else {}
    use_drafter(engine, files, SpecOptions(confidence_threshold=0.0, idle_min_accept=0.0, narrow_below_ctx=0, **tree))
    m = args.tree_nodes + 1 if tree else files.config.block_size
    for ctx in (int(c) for c in args.contexts.split(",")):
        ids = random_ids(ctx, engine.config.vocab_size, seed=ctx)
        # room for every replay below to move the position (random target weights accept ~nothing:
        # +1 a commit, ~900 in all)
        s = engine.session(ctx, 2048, capture_layers=files.config.target_layers)
        g = _graphs_for(engine, s)
        with torch.inference_mode():
            last_logits, _ = _prefill(engine, s, g, ids)
            first = int(torch.argmax(last_logits))
            s.io.set_rows([first], ctx)
            s.state.copy_(torch.tensor([1, ctx, 0, 0, ctx], device="cuda"))
            g.draft_only()
            verify = s.step(m, commit=False, **({"tree": True} if tree else {}))
            one_row = s.step(1, commit=False)
            row = {
                "ctx": ctx,
                "step_1row_us": replay_us(one_row, args.replays),
                "step_1row_commit_us": replay_us(g.greedy_step[1], args.replays // 4),
                "step_verify_us": replay_us(verify, args.replays),
                "step_verify_commit_us": replay_us(g.tree_step if tree else g.greedy_step[m], args.replays // 4),
                "ctx_update_us": replay_us(g.ctx_only, args.replays),
                "draft_us": replay_us(g.draft_only, args.replays),
                "ctx_and_draft_us": replay_us(g.ctx_and_draft, args.replays),
                "iteration_us": replay_us(g.fused_chunk(1), args.replays // 4),
            }
            chunk8 = g.fused_chunk(8)
            row["iteration_in_chunk8_us"] = replay_us(chunk8, max(1, args.replays // 32)) / 8
            row["tree"] = args.tree or "this"
            row["tree_nodes"] = args.tree_nodes
            print(json.dumps(row), flush=True)
            if args.head_configs:
                head_sweep(engine, s, g, ctx, args.head_configs, args.replays)
            if args.no_profile:
                continue
            from torch.profiler import ProfilerActivity, profile

            rt = g.rt
            for name, fn in (("ctx_update+draft (eager)", lambda: (rt.ctx_update(), rt.draft())),
                             ("verify + commit (eager)", lambda: verify_and_commit(engine, s, m, bool(tree)))):
                for _ in range(3):
                    fn()
                torch.cuda.synchronize()
                with profile(activities=[ProfilerActivity.CUDA]) as prof:
                    for _ in range(20):
                        fn()
                    torch.cuda.synchronize()
                print(f"== ctx {ctx}: {name}, 20 calls", flush=True)
                print(prof.key_averages().table(sort_by="cuda_time_total", row_limit=30, max_name_column_width=70), flush=True)
        del s, g
    return 0


if __name__ == "__main__":
    sys.exit(main())
