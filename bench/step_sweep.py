"""Time the whole captured decode/verify step on the GPU, and search the step kernels' launch
configurations by that time (random weights in the bundled model's shape, or a guard's with --shape:
speed does not depend on the values, so nothing needs staging). Prints JSON lines.

    python bench/step_sweep.py [--sweep] [--tree PATH] [--contexts 1024,4096]

- Without --sweep: the step (1 row and 7 rows) at each context with the table of kernels/tuning.py,
  with programmatic dependent launch on and off (DSPARK_PDL=0); each line's `step` is "default".
- --sweep: coordinate descent at the last context, 1 row: each kind's candidates in turn, the best
  kept, then the table and the best found, side by side at every context. The last line is the best
  table, ready for kernels/tuning.py.
- --attn-splits 0,128,256: the step (1 and 7 rows) at each context with each number of keys per attention
  split (0: default_split), two passes, splits alternating.
- --sweep --axes: the same descent, each kernel's fields varied one at a time from its current entry.
- --tables JSON: {"name": {"kind:NxK": {fields}}, ...}: the step (1 and 7 rows) at each context with each
  named table put over kernels/tuning.py's (an empty one: the table as it is), two passes, the tables
  alternating; with --breakdown also each kernel alone per table.
- --switch VAR: the step (1 and 7 rows) at each context with a kernel switch of bench/gpu_timing.py
  (SWITCH_CACHES) on and off, two passes, alternating.
- --per-graph 1,4,16: the step (1 and 7 rows) at each context captured that many times over in one graph, per
  step, two passes: how much a graph boundary between steps costs (a step alone per replay has no programmatic
  dependent launch into the next one, and waits for the graph's completion).
- --token-tree: the verify of a token tree (TREE_SHAPE, 8 rows: each row's keys gathered from its ancestors'
  slots) against one row and chains of 7 and 8 rows at each context, three passes, alternating.
- --shape NAME: a guard shape's random model instead of the bundled one (with --sweep: its own table keys).
- --tree PATH: import engine/ and kernels/ from another checkout (the previous main), to time its
  step with this same clock.

A step is one CUDA-graph replay of Transformer.step (every layer's kernels and the LM head, not the
greedy commit or the host); the figure is the median over 5 batches of 200 replays, in microseconds.
"""

from __future__ import annotations

import argparse
import json
import sys
from dataclasses import asdict, replace
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]


def _args():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tree", default=None, help="import engine/ and kernels/ from this checkout")
    ap.add_argument("--contexts", default="1024,4096")
    ap.add_argument("--sweep", action="store_true")
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--table", default=None, help="JSON {\"kind:NxK\": {block_n, block_k, num_warps, num_stages}} put into "
                    "kernels.tuning.TABLE first (a sweep's best_table line)")
    ap.add_argument("--breakdown", action="store_true",
                    help="also each step kernel alone: one launch per layer in one graph, microseconds per launch")
    ap.add_argument("--axes", action="store_true",
                    help="with --sweep: candidates one field at a time from the current table (AXES), not CANDIDATES")
    ap.add_argument("--kinds", default=None, help="with --sweep: only these kernels (comma-separated: qkv, o_proj, gate_up, down, attn, combine, lm_head)")
    ap.add_argument("--prefetch-off", action="store_true", help="also every figure with DSPARK_L2_PREFETCH=0")
    ap.add_argument("--shape", default=None, help="a guard shape's name (harness.profiles) instead of the bundled model's")
    ap.add_argument("--tables", default=None,
                    help="JSON {name: table} (a table as --table takes): each timed at each context and row count, "
                    "two passes, alternating")
    ap.add_argument("--switch", default=None, help="a kernel switch (gpu_timing.SWITCH_CACHES) timed on and off, alternating")
    ap.add_argument("--per-graph", default=None,
                    help="only the step at each context and row count, captured this many times per graph (comma-separated), "
                    "microseconds per step, two passes")
    ap.add_argument("--token-tree", action="store_true",
                    help="the verify of a token tree (TREE_SHAPE, 8 rows) against chains of 7 and 8 rows and one row, alternating")
    ap.add_argument("--attn-splits", default=None,
                    help="only the step at each context and row count with these keys per attention split "
                    "(comma-separated; 0 = default_split), each split's pass after the other, twice")
    return ap.parse_args()


ARGS = _args()
sys.path.insert(0, str(_ROOT / "tests" / "gpu"))
sys.path.insert(0, str(Path(ARGS.tree).resolve() if ARGS.tree else _ROOT))

import torch  # noqa: E402

from engine.model import StepIO, Transformer  # noqa: E402
from gpu_timing import load_table, set_switch, step_capacity, step_us, time_graph  # noqa: E402
from kernels import tuning  # noqa: E402
from models import random_model  # noqa: E402


def step_shapes(c) -> dict[str, tuple[str, int, int]]:
    """(kind, N, K) of each step kernel of a model configuration: the keys kernels.tuning looks up."""
    return {"qkv": ("qkv", c.q_dim + 2 * c.kv_dim, c.dim), "o_proj": ("linear", c.dim, c.q_dim),
            "gate_up": ("swiglu", c.ffn_dim, c.dim), "down": ("linear", c.dim, c.ffn_dim),
            "attn": ("attn", c.n_heads, c.head_dim), "combine": ("combine", c.n_heads, c.head_dim),
            "lm_head": ("lm_head", c.vocab_size, c.dim)}


LC = tuning.LaunchConfig
# --token-tree's tree: a best-first tree's usual shape at 7 drafts (the root's first two children, the first
# grown three deep, the second two), 8 rows
TREE_SHAPE = [-1, 0, 0, 1, 1, 2, 3, 5]
CANDIDATES = {
    "qkv": [LC(block_n=bn, block_k=bk, num_warps=w, num_stages=s) for bn in (0, 16) for bk in (64, 128)
            for w, s in ((4, 4), (2, 4))],
    "o_proj": [LC(block_n=bn, block_k=bk, num_warps=w, num_stages=s) for bn in (16, 32) for bk in (64, 128, 192)
               for w, s in ((4, 4), (2, 3))],
    "gate_up": [LC(block_n=bn, block_k=bk, num_warps=w, num_stages=s) for bn in (16, 32) for bk in (64, 128)
                for w, s in ((4, 4), (4, 3), (8, 3))],
    "down": [LC(block_n=bn, block_k=bk, num_warps=w, num_stages=s) for bn in (16, 32) for bk in (128, 256)
             for w, s in ((2, 3), (4, 3), (4, 4))],
    "attn": [LC(block_n=0, block_k=bk, num_warps=w, num_stages=s) for bk in (32, 64) for w, s in ((2, 2), (4, 2), (2, 3))],
    "combine": [LC(block_n=0, block_k=0, num_warps=w, num_stages=1) for w in (1, 2, 4, 8)],
    "lm_head": [LC(block_n=bn, block_k=bk, num_warps=w, num_stages=3) for bn in (64, 128, 256) for bk in (64, 128)
                for w in (4, 8)],
}
_LINEAR_AXES = {"block_n": (16, 32, 64), "block_k": (64, 128, 256), "num_warps": (1, 2, 4, 8), "num_stages": (2, 3, 4, 5)}
AXES = {  # --axes: each field's values, tried one field at a time from the current best
    "qkv": {**_LINEAR_AXES, "block_n": (0, 16, 32)},
    "o_proj": _LINEAR_AXES, "gate_up": _LINEAR_AXES, "down": _LINEAR_AXES,
    "attn": {"block_k": (32, 64), "num_warps": (1, 2, 4, 8), "num_stages": (1, 2, 3, 4)},
    "combine": {"num_warps": (1, 2, 4, 8)},
    "lm_head": {"block_n": (64, 128, 256), "block_k": (64, 128), "num_warps": (4, 8), "num_stages": (2, 3, 4)},
}


def candidates(name: str, shape: tuple[str, int, int]):
    """The sweep's candidates for one kernel: CANDIDATES[name], or with --axes one field changed at a
    time from the configuration in force when it is drawn (so an accepted change carries forward)."""
    if not ARGS.axes:
        yield from CANDIDATES[name]
        return
    for field, values in AXES[name].items():
        for v in values:
            yield replace(tuning.config_for(*shape), **{field: v})


def breakdown(model: Transformer, ctx: int, replays: int) -> dict[str, float]:
    """Each kernel kind alone: one launch per layer (that layer's weights, from HBM) in one graph."""
    from kernels.decode_attention import attention_combine, attention_triton
    from kernels.fused_linear import fused_linear_triton
    from kernels.qkv_rope import qkv_rope_triton

    c = model.config
    L = model.layers
    cap = step_capacity(ctx)
    cache = model.new_cache(cap)
    io = StepIO(model, cap)
    dev = "cuda"
    x = torch.randn(1, c.dim, device=dev)
    a = torch.randn(1, c.q_dim, device=dev, dtype=model.dtype)
    h = torch.randn(1, c.ffn_dim, device=dev, dtype=model.dtype)
    q = torch.randn(1, c.n_heads, c.head_dim, device=dev, dtype=model.dtype)
    pos = torch.tensor([ctx], device=dev, dtype=torch.int32)
    st = torch.zeros(1, dtype=torch.int32, device=dev)
    en = torch.tensor([ctx + 1], dtype=torch.int32, device=dev)
    kinds = {
        "qkv": lambda: [qkv_rope_triton(x, lw.attn_norm, lw.wqkv, None, None, None, model.cos, model.sin, pos, cache.k[i, 0],
                                        cache.v[i, 0], c.n_heads, c.n_kv_heads, c.norm_eps) for i, lw in enumerate(L)],
        "attn": lambda: [attention_triton(q, cache.k[i, 0], cache.v[i, 0], st, en, io.workspace) for i in range(c.n_layers)],
        "combine": lambda: [attention_combine(io.workspace, 1, a) for _ in range(c.n_layers)],
        "o_proj": lambda: [fused_linear_triton(a, lw.wo, residual=x) for lw in L],
        "gate_up": lambda: [fused_linear_triton(x, lw.w_gate, norm_weight=lw.ffn_norm, eps=c.norm_eps, up_weight=lw.w_up,
                                                out_dtype=model.dtype) for lw in L],
        "down": lambda: [fused_linear_triton(h, lw.w_down, residual=x) for lw in L],
        "lm_head": lambda: [fused_linear_triton(x, model.lm_head, norm_weight=model.norm, eps=c.norm_eps, out_dtype=torch.float32)],
    }
    return {k: time_graph(fn, replays) / (1 if k == "lm_head" else c.n_layers) for k, fn in kinds.items()}


def set_entry(shape: tuple[str, int, int], cfg: tuning.LaunchConfig | None) -> None:
    """Put `cfg` in the table for `shape` (None: no entry, the kind's default)."""
    if cfg is None:
        tuning.TABLE.pop(shape, None)
    else:
        tuning.TABLE[shape] = cfg


def confirmed(model, ctx: int, shape, cand: tuning.LaunchConfig, old: tuning.LaunchConfig | None) -> float:
    """A candidate that beat the best once, timed again against the entry it would replace (candidate,
    entry, candidate, entry): its slower time if it won both pairs by 0.5 %, else inf. On 2026-12-04 a single
    timing at --replays 100 "gained" 0.5 % with a configuration identical to the one in force."""
    times = []
    for cfg in (cand, old, cand, old):
        set_entry(shape, cfg)
        times.append(step_us(model, ctx, 1, ARGS.replays))
    set_entry(shape, cand)
    won = times[0] < times[1] * 0.995 and times[2] < times[3] * 0.995
    return max(times[0], times[2]) if won else float("inf")


def emit(**kw) -> None:
    print(json.dumps(kw), flush=True)


def main() -> int:
    if not torch.cuda.is_available():
        print("step_sweep: needs CUDA", file=sys.stderr)
        return 2
    contexts = [int(c) for c in ARGS.contexts.split(",")]
    if ARGS.shape:
        from harness.profiles import guard_shape

        loaded = random_model(guard_shape(ARGS.shape), max_seq_len=max(contexts) + 1024)
    else:
        loaded = random_model()
    model = Transformer(loaded.config, loaded.weights, "cuda")
    tree = str(ARGS.tree or "this tree")
    if ARGS.table:
        load_table(ARGS.table)
    if ARGS.switch:
        for rep in range(2):
            for on in (True, False):
                set_switch(ARGS.switch, on)
                for ctx in contexts:
                    for rows in (1, 7):
                        emit(tree=tree, switch=ARGS.switch, on=on, rep=rep, ctx=ctx, rows=rows,
                             us=step_us(model, ctx, rows, ARGS.replays))
        set_switch(ARGS.switch, True)
        return 0
    if ARGS.tables:
        base = dict(tuning.TABLE)
        named = json.loads(ARGS.tables)
        for rep in range(2):
            for name, table in named.items():
                tuning.TABLE.clear()
                tuning.TABLE.update(base)
                load_table(table)
                for ctx in contexts:
                    for rows in (1, 7):
                        try:
                            us = step_us(model, ctx, rows, ARGS.replays)
                        except Exception as exc:  # a table whose kernels do not compile (registers, shared memory)
                            emit(tree=tree, table=name, ctx=ctx, error=str(exc).splitlines()[0][:160])
                            continue
                        emit(tree=tree, table=name, rep=rep, ctx=ctx, rows=rows, us=us)
                if ARGS.breakdown and rep == 1:
                    emit(tree=tree, table=name, ctx=contexts[-1], breakdown_us=breakdown(model, contexts[-1], ARGS.replays))
        tuning.TABLE.clear()
        tuning.TABLE.update(base)
        return 0
    if ARGS.per_graph:
        for rep in range(2):
            for k in (int(v) for v in ARGS.per_graph.split(",")):
                for ctx in contexts:
                    for rows in (1, 7):
                        emit(tree=tree, per_graph=k, rep=rep, ctx=ctx, rows=rows,
                             us=step_us(model, ctx, rows, ARGS.replays, per_graph=k))
        return 0
    if ARGS.token_tree:
        for rep in range(3):
            for ctx in contexts:
                for name, rows, parents in (("one row", 1, None), ("chain", 7, None), ("chain", 8, None),
                                            ("tree", len(TREE_SHAPE), TREE_SHAPE)):
                    emit(tree=tree, verify=name, rep=rep, ctx=ctx, rows=rows,
                         us=step_us(model, ctx, rows, ARGS.replays, parents=parents))
        return 0
    if ARGS.attn_splits:
        from kernels.decode_attention import default_split

        for rep in range(2):
            for split in (int(v) for v in ARGS.attn_splits.split(",")):
                for ctx in contexts:
                    cap = step_capacity(ctx)
                    s = split or default_split(cap)
                    for rows in (1, 7):
                        try:
                            us = step_us(model, ctx, rows, ARGS.replays, split=s)
                        except Exception as exc:  # a split whose combine does not compile (registers, shared memory)
                            emit(shape=loaded.config.name, attn_split=s, ctx=ctx, error=str(exc).splitlines()[0][:160])
                            continue
                        emit(tree=tree, shape=loaded.config.name, rep=rep, attn_split=s, default=not split, ctx=ctx,
                             rows=rows, us=us)
        return 0
    if not ARGS.sweep:
        for pdl, pf in ((True, True), (False, True)) + (((True, False),) if ARGS.prefetch_off else ()):
            set_switch("DSPARK_PDL", pdl)
            set_switch("DSPARK_L2_PREFETCH", pf)
            for ctx in contexts:
                for rows in (1, 7):
                    emit(tree=tree, step="default", pdl=pdl, prefetch=pdl and pf, ctx=ctx, rows=rows,
                         us=step_us(model, ctx, rows, ARGS.replays))
            if ARGS.breakdown and pdl:
                emit(tree=tree, pdl=pdl, prefetch=pf, ctx=contexts[-1], breakdown_us=breakdown(model, contexts[-1], ARGS.replays))
        set_switch("DSPARK_PDL", True)
        set_switch("DSPARK_L2_PREFETCH", True)
        return 0
    set_switch("DSPARK_PDL", True)
    table = dict(tuning.TABLE)
    ctx = contexts[-1]
    best_us = step_us(model, ctx, 1, ARGS.replays)
    shapes = step_shapes(loaded.config)  # the bundled model's, or --shape's
    emit(tree=tree, sweep="start", ctx=ctx, us=best_us, table={k: asdict(tuning.config_for(*s)) for k, s in shapes.items()})
    for name, shape in shapes.items():
        if ARGS.kinds and name not in ARGS.kinds.split(","):
            continue
        for cand in candidates(name, shape):
            if cand == tuning.config_for(*shape):
                continue
            old = tuning.TABLE.get(shape)
            set_entry(shape, cand)
            try:
                us = step_us(model, ctx, 1, ARGS.replays)
            except Exception as exc:  # a configuration that does not compile (shared memory, registers)
                emit(kernel=name, cfg=asdict(cand), error=str(exc).splitlines()[0][:160])
                us = float("inf")
            emit(kernel=name, cfg=asdict(cand), ctx=ctx, us=us)
            if us < best_us * 0.995:  # perhaps a real gain: both timed again, alternating, before it is kept
                us = confirmed(model, ctx, shape, cand, old)
                emit(kernel=name, cfg=asdict(cand), ctx=ctx, confirmed_us=us)
                if us != float("inf"):
                    best_us = us
                    continue
            set_entry(shape, old)
    best = dict(tuning.TABLE)
    for label, t in (("table", table), ("best", best)):
        tuning.TABLE.clear()
        tuning.TABLE.update(t)
        for c in contexts:
            for rows in (1, 7):
                emit(tree=tree, config=label, ctx=c, rows=rows, us=step_us(model, c, rows, ARGS.replays))
    emit(best_table={f"{k[0]}:{k[1]}x{k[2]}": asdict(v) for k, v in best.items()},
         changed=[f"{k[0]}:{k[1]}x{k[2]}" for k in best if table.get(k) != best[k]])
    return 0


if __name__ == "__main__":
    sys.exit(main())
