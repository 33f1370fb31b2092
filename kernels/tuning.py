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


DEFAULTS = {
    "linear": LaunchConfig(),
    "swiglu": LaunchConfig(),
    "lm_head": LaunchConfig(block_n=128),
    "qkv": LaunchConfig(block_n=0),  # one program per head
    "attn": LaunchConfig(block_n=0, block_k=64, num_warps=4, num_stages=2),  # block_k = keys per inner block
}

# (kind, N, K) -> LaunchConfig, measured on an H200.
TABLE: dict[tuple[str, int, int], LaunchConfig] = {}

_overrides: dict[str, LaunchConfig] = {}


def config_for(kind: str, n: int, k: int) -> LaunchConfig:
    if kind in _overrides:
        return _overrides[kind]
    return TABLE.get((kind, n, k), DEFAULTS[kind])


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
