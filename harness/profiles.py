"""Measurement profiles: what the harness runs on a GPU box and what fits CI on a CPU."""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass(frozen=True)
class GuardShape:
    """Another real model family's shape, with fixed-seed random weights (speed only, no quality)."""

    name: str
    arch: str
    vocab_size: int
    dim: int
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    ffn_dim: int
    rope_theta: float
    qk_norm: bool = False
    rope_scaling: dict | None = None


QWEN3_06B = GuardShape("qwen3-0.6b-shape", "qwen3", 151936, 1024, 28, 16, 8, 128, 3072, 1_000_000.0, qk_norm=True)
LLAMA32_1B = GuardShape("llama-3.2-1b-shape", "llama", 128256, 2048, 16, 32, 8, 64, 8192, 500_000.0,
                        rope_scaling={"kind": "llama3", "factor": 32.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                                      "original_max_position": 8192})
# The same families shrunk to run in seconds on two CPU cores.
QWEN3_TINY = GuardShape("qwen3-tiny-shape", "qwen3", 4096, 256, 4, 4, 2, 64, 768, 1_000_000.0, qk_norm=True)
LLAMA32_TINY = GuardShape("llama-3.2-tiny-shape", "llama", 4096, 256, 4, 8, 2, 32, 1024, 500_000.0,
                          rope_scaling=LLAMA32_1B.rope_scaling)


GUARD_SHAPES = {s.name: s for s in (QWEN3_06B, LLAMA32_1B, QWEN3_TINY, LLAMA32_TINY)}


def guard_shape(name: str) -> GuardShape:
    try:
        return GUARD_SHAPES[name]
    except KeyError:
        raise ValueError(f"unknown guard {name!r} (known: {', '.join(GUARD_SHAPES)})") from None


@dataclass(frozen=True)
class Profile:
    name: str
    contexts: tuple[int, ...]
    prompts: tuple[str, ...]
    new_tokens: int
    reps: int
    guards: tuple[GuardShape, ...]
    guard_ctx: int
    guard_new_tokens: int
    guard_reps: int
    score_positions: int
    top_k: int = 128


PROFILES = {
    # contexts within the bundled model's 8k limit (7936 + 128 new tokens + margin <= 8192)
    "gpu": Profile("gpu", (1024, 4096, 7936), ("code", "prose"), 128, 3, (QWEN3_06B, LLAMA32_1B), 16384, 64, 5, 1024),
    "cpu": Profile("cpu", (128,), ("code", "prose"), 16, 3, (QWEN3_TINY, LLAMA32_TINY), 256, 8, 5, 512),
}


def default_profile() -> str:
    return "gpu" if torch.cuda.is_available() else "cpu"


def get_profile(name: str | None) -> Profile:
    name = name or default_profile()
    if name not in PROFILES:
        raise ValueError(f"unknown profile {name!r} (known: {', '.join(PROFILES)})")
    return PROFILES[name]
