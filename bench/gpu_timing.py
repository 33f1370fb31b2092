"""What the GPU benches share: time a function as a CUDA graph, time the whole captured decode/verify
step, and flip a kernel switch of kernels/common.py (an environment variable read through a cached
function) inside one process."""

from __future__ import annotations

import os
import statistics
import time

import torch

# The cached function of kernels/common.py that reads each switch
SWITCH_CACHES = {"DSPARK_PDL": "_pdl_on", "DSPARK_L2_PREFETCH": "prefetch_env_on",
                 "DSPARK_UNROLL_NORM": "unroll_env_on", "DSPARK_ATTN_PRELOAD": "preload_on",
                 "DSPARK_NORM_AHEAD": "norm_ahead_env_on", "DSPARK_LM_HEAD_PREFETCH": "lm_head_prefetch_env_on"}


def capture_graph(fn) -> torch.cuda.CUDAGraph:
    """`fn` captured as one CUDA graph, ready to time: two eager warm-up calls (compiles), the capture,
    20 untimed replays."""
    s = torch.cuda.Stream()
    s.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(s):
        for _ in range(2):
            fn()
    torch.cuda.current_stream().wait_stream(s)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    for _ in range(20):
        g.replay()
    torch.cuda.synchronize()
    return g


def time_graph(fn, replays: int = 200, batches: int = 5) -> float:
    """Microseconds per replay of `fn` captured as one CUDA graph (capture_graph), the median of `batches`
    timed batches of `replays`."""
    g = capture_graph(fn)
    times = []
    for _ in range(batches):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(replays):
            g.replay()
        b.record()
        torch.cuda.synchronize()
        times.append(a.elapsed_time(b) * 1000 / replays)
    del g
    return statistics.median(times)


def wall_ms(fn, reps: int) -> float:
    """Host-inclusive milliseconds of `fn()` with the device synchronised before and after (what a
    request sees), median of `reps` calls."""
    def sync() -> None:
        if torch.cuda.is_available():
            torch.cuda.synchronize()

    times = []
    for _ in range(reps):
        sync()
        t0 = time.perf_counter()
        fn()
        sync()
        times.append((time.perf_counter() - t0) * 1e3)
    return statistics.median(times)


def random_bundled_engine(device: str):
    """(engine, drafter files): random weights in the bundled model's shape (bf16 on CUDA, float32 on the
    CPU) and a random drafter attached, what the prefill benches time (speed does not depend on the
    values). Needs tests/gpu on sys.path (its models.py)."""
    from engine.dspark import SpecOptions, random_drafter, use_drafter
    from engine.generate import Engine
    from harness.guard import guard_model
    from models import MAX_SEQ, SMOLLM2_135M

    dev = torch.device(device)
    loaded = guard_model(SMOLLM2_135M, dev, torch.bfloat16 if dev.type == "cuda" else torch.float32, MAX_SEQ, seed=1234)
    engine = Engine(loaded=loaded, device=device)
    files = random_drafter(engine, seed=5)
    use_drafter(engine, files, SpecOptions())
    return engine, files


def load_table(text: str | dict) -> None:
    """Put a launch table ({"kind:NxK": LaunchConfig fields}, JSON text or a dict) over kernels/tuning.py's."""
    import json

    from kernels import tuning

    for key, cfg in (json.loads(text) if isinstance(text, str) else text).items():
        kind, nk = key.split(":")
        n, k = (int(v) for v in nk.split("x"))
        tuning.TABLE[(kind, n, k)] = tuning.LaunchConfig(**cfg)


def set_switch(var: str, on: bool) -> None:
    """Kernel feature `var` on (`var=1`) or off (`var=0`) for the launches and captures that follow;
    a checkout whose kernels lack the switch is left as it is."""
    from kernels import common

    os.environ[var] = "1" if on else "0"
    cached = getattr(common, SWITCH_CACHES[var], None)
    if cached is not None:
        cached.cache_clear()


def step_capacity(ctx: int) -> int:
    """The cache a timed step at position `ctx` gets: room for a request's new tokens and draft rows past
    it, in whole 1,024-slot blocks as the engine rounds them (2,048 / 5,120 / 9,216 at the bot's 1k, 4k
    and 7936 cells)."""
    return -(-(ctx + 256 + 64) // 1024) * 1024


def step_inputs(model, ctx: int, rows: int, split: int | None = None):
    """(cache, io) of a timed step: `rows` rows at positions ctx.. in a fresh cache sized for ctx + 320
    (step_capacity). engine.model is imported here, after the bench has put the checkout it times first
    on sys.path (bench/step_sweep.py --tree)."""
    from engine.model import StepIO

    cap = step_capacity(ctx)
    cache = model.new_cache(cap)
    io = StepIO(model, cap, split=split)
    io.set_rows(list(range(1000, 1000 + rows)), ctx)
    return cache, io


def step_us(model, ctx: int, rows: int, replays: int = 200, split: int | None = None, per_graph: int = 1,
            parents: list[int] | None = None) -> float:
    """Microseconds per replay of `model`'s captured step (every layer's kernels and the LM head) for
    `rows` rows at positions ctx.. (step_inputs). `split`: keys per attention split (None: the engine's
    default_split). `per_graph`: the step captured that many times over in one graph (the same inputs each
    time), microseconds per step. `parents`: the rows are a token tree of this shape (StepIO.set_tree,
    rows == len(parents)) rooted at ctx."""
    cache, io = step_inputs(model, ctx, rows, split)
    tree = parents is not None
    if tree:
        io.set_tree(list(range(1000, 1000 + rows)), parents, ctx)

    def steps() -> None:
        for _ in range(per_graph):
            if tree:
                model.step(io, rows, cache, tree=True)
            else:
                model.step(io, rows, cache)

    us = time_graph(steps, max(1, replays // per_graph)) / per_graph
    del cache, io
    return us
