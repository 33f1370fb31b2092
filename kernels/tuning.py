"""Launch configurations of the step kernels, fixed per weight shape.

A configuration depends only on (kind, N, K) — never on the number of rows — so a row's arithmetic is
the same in AR decode and in a DSpark verify. The table holds what bench/tune_step.py measured on the
H200 (docs/perf.md); shapes not in it get the defaults.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class LaunchConfig:
    block_n: int = 32
    block_k: int = 64
    num_warps: int = 4
    num_stages: int = 3
    # QKV and the linears: the K walk split into k_split slices walked side by side as the batches of one 3-D
    # product (with k_split == num_warps, one warp per slice), their sums added after the walk: k_split
    # times fewer steps, each a k_split-wide batch. The sums group differently from k_split = 1 (other
    # rounding; still independent of the number of rows).
    k_split: int = 1
    # The product computed transposed, W @ x^T (acc [block_n, rows]), so that the weight tile's rows are the MMA's M:
    # on Hopper a tile of 64 weight rows (QKV: a whole head; SwiGLU: block_n 32, gate's and up's rows stacked; a
    # linear: block_n 64) then runs on the warpgroup MMA (wgmma: both operands read from shared memory, a K step's
    # four products issued back to back and awaited once) instead of mma.sync's chain of dependent products with
    # their shared-memory loads; rows' tiles stay 16. K in one slice (k_split 1). Each row's sums are still its
    # own; their rounding may differ from the untransposed product's (the tensor cores' instructions differ).
    swap_ab: bool = False


DEFAULTS = {
    "linear": LaunchConfig(block_n=16, block_k=128, num_warps=4, num_stages=4),
    "swiglu": LaunchConfig(block_n=32, block_k=128, num_warps=4, num_stages=4),
    "lm_head": LaunchConfig(block_n=128),
    "qkv": LaunchConfig(block_n=0, block_k=64, num_warps=4, num_stages=4),  # one program per head
    "attn": LaunchConfig(block_n=0, block_k=64, num_warps=2, num_stages=2),  # block_k = keys per inner block
    # the splits' combine: block_n = a head's dimensions per program (0: the whole head)
    "combine": LaunchConfig(block_n=0, block_k=0, num_warps=4, num_stages=1),
    # the drafter's head (kernels/draft_head.py), keyed by (vocabulary, Markov rank): block_n = vocabulary
    # entries per program of each draft's launch
    "head": LaunchConfig(block_n=256, block_k=0, num_warps=4, num_stages=1),
}

# (kind, N, K) -> LaunchConfig, chosen on an H200 by the whole captured step's time (bench/step_sweep.py
# --sweep: coordinate descent, random weights in the bundled model's shape, 1 row), with programmatic
# dependent launch and the L2 prefetch on. First swept at ctx 4096 on 2026-12-02, while RMSNorm was
# folded into the K walk; swept again at ctx 7936 on 2026-12-04 with the unrolled norm pass and the
# early epilogue, which changed qkv (one program per head again, 128-wide K steps, 4 warps) and gate/up
# (128-wide K steps): the step 3-5 % faster at 1k, 4k and 7936, 1 and 7 rows (docs/perf.md). QKV's 5
# pipeline stages (was 4) from a one-field-at-a-time descent at 4k, confirmed by re-timing and again in
# three later calls: the step 1-1.5 % faster at 4k and 7936 (docs/perf.md, 2026-12-04 thirteenth session).
# With each norm prepared by x's producer (fused_linear.NormAhead) QKV and gate/up walk 64-wide K steps,
# gate/up with 5 stages: the step 2.4 % faster at 4k (seventeenth session); then the table `both_swap` of
# docs/perf-data/2026-12-04-next-calls/tables/ (QKV and gate/up computed transposed), picked on the H200 in
# the nineteenth session and landed in the twentieth: the step 4-8 % faster; then QKV's transposed walk with
# 6 stages (was 5): the step 1.7 % faster at 4k, 1 row, 1.3 % at 7 rows, within 0.3 % at 1k and 7936
# (docs/perf.md, 2026-12-05 twentieth session, `swap-tables.jsonl`).
TABLE: dict[tuple[str, int, int], LaunchConfig] = {
    ("qkv", 960, 576): LaunchConfig(block_n=0, block_k=64, num_warps=4, num_stages=6, swap_ab=True),
    # The o-proj and the down-proj walk K in four slices side by side (k_split, one warp each; 64-wide steps):
    # the step 1.9-2.3 % faster (down) and 0.6-0.9 % (o-proj) at 1k and 4k, 1 and 7 rows; QKV and gate/up,
    # whose steps also normalise x, 8-12 % slower that way (docs/perf.md, 2026-12-04 sixteenth session).
    ("linear", 576, 576): LaunchConfig(block_n=16, block_k=64, num_warps=4, num_stages=4, k_split=4),
    ("linear", 576, 1536): LaunchConfig(block_n=16, block_k=64, num_warps=4, num_stages=4, k_split=4),
    ("swiglu", 1536, 576): LaunchConfig(block_n=32, block_k=64, num_warps=4, num_stages=5, swap_ab=True),
    ("lm_head", 49152, 576): LaunchConfig(block_n=128, block_k=64, num_warps=4, num_stages=3),
    # block_k = keys per inner block, at most the split's: a split of 64 keys (contexts to ~7,800) is one block
    # of 64; from ~7,900 the split is 128 keys, one block of 128, so it too is read before the dependency
    # wait (decode_attention `fresh`): the step at 7936 0.7 % (1 row) / 0.9 % (7 rows) faster than in two
    # blocks of 64 (docs/perf.md, 2026-12-04 fourteenth session).
    ("attn", 9, 64): LaunchConfig(block_n=0, block_k=128, num_warps=4, num_stages=2),
    # The guard shapes (harness.profiles; real models' shapes: Llama-3.2-1B, Qwen3-0.6B), swept on 2026-12-04
    # at ctx 16384 (`bench/step_sweep.py --shape NAME --sweep --axes --contexts 16384`), each change kept
    # only after winning a re-timing: the 1B shape's step 10 % faster (1 row; 6 % at 7 rows), the 0.6B
    # shape's 4 % (3 %); shapes before had the kinds' defaults (docs/perf.md, thirteenth session).
    ("qkv", 3072, 2048): LaunchConfig(block_n=0, block_k=128, num_warps=4, num_stages=4),
    ("linear", 2048, 2048): LaunchConfig(block_n=16, block_k=128, num_warps=2, num_stages=3),
    ("linear", 2048, 8192): LaunchConfig(block_n=16, block_k=256, num_warps=2, num_stages=4),
    ("attn", 32, 64): LaunchConfig(block_n=0, block_k=64, num_warps=2, num_stages=3),
    ("combine", 32, 64): LaunchConfig(block_n=0, block_k=0, num_warps=2, num_stages=1),
    ("qkv", 4096, 1024): LaunchConfig(block_n=0, block_k=128, num_warps=4, num_stages=5),
    ("linear", 1024, 3072): LaunchConfig(block_n=16, block_k=256, num_warps=2, num_stages=5),
}

_overrides: dict[str, LaunchConfig] = {}


def k_slices(cfg: LaunchConfig, k: int, weight_dtype) -> tuple[int, int]:
    """(slices, slice length) of a K walk of length k under cfg: cfg.k_split slices of a multiple of 16
    (each slice's rows stay 16-byte aligned for cp.async), the last masked at k; one slice for float32
    weights (their products run on the CUDA cores' IEEE path, which the 3-D product does not take)."""
    import torch

    if cfg.k_split not in (1, 2, 4, 8):
        raise ValueError(f"k_split must be 1, 2, 4 or 8, got {cfg.k_split}")
    s = 1 if weight_dtype == torch.float32 else cfg.k_split
    return s, 16 * -(-(-(-k // s)) // 16)


def swapped(cfg: LaunchConfig) -> bool:
    """Whether a launch under cfg computes its product transposed (LaunchConfig.swap_ab)."""
    if cfg.swap_ab and cfg.k_split != 1:
        raise ValueError(f"swap_ab walks K in one slice, got k_split {cfg.k_split}")
    return cfg.swap_ab


def config_for(kind: str, n: int, k: int) -> LaunchConfig:
    if kind in _overrides:
        return _overrides[kind]
    if (kind, n, k) in TABLE:
        return TABLE[(kind, n, k)]
    if kind == "linear" and k >= 1024:  # long reductions: fewer, wider K steps (what the tuner found)
        return LaunchConfig(block_n=16, block_k=256, num_warps=2, num_stages=3)
    return DEFAULTS[kind]


@contextlib.contextmanager
def override(kind: str, **fields):
    """For the tuner: every launch of `kind` uses these fields until the block ends."""
    old = _overrides.get(kind)
    _overrides[kind] = replace(config_for(kind, -1, -1) if old is None else old, **fields)
    try:
        yield
    finally:
        if old is None:
            _overrides.pop(kind, None)
        else:
            _overrides[kind] = old
