"""Rotary position tables (rotate-half layout), with the frequency scalings HF configs use."""

from __future__ import annotations

import math

import torch

from engine.config import RopeScaling


def inverse_frequencies(head_dim: int, theta: float, scaling: RopeScaling, max_positions: int) -> tuple[torch.Tensor, float]:
    """Returns (inv_freq [head_dim/2] float64, attention_factor) for the given scaling kind."""
    idx = torch.arange(0, head_dim, 2, dtype=torch.float64)
    kind = scaling.kind
    if kind == "dynamic" and scaling.original_max_position and max_positions > scaling.original_max_position:
        # Dynamic NTK: the base grows with the sequence length; our caches are static, so we use
        # the capacity as that length (HF recomputes per forward; identical within original_max).
        f = scaling.factor
        theta = theta * ((f * max_positions / scaling.original_max_position) - (f - 1)) ** (head_dim / (head_dim - 2))
    inv_freq = 1.0 / (theta ** (idx / head_dim))
    attention_factor = 1.0
    if kind == "linear":
        inv_freq = inv_freq / scaling.factor
    elif kind == "llama3":
        old = scaling.original_max_position
        low_wavelen = old / scaling.low_freq_factor
        high_wavelen = old / scaling.high_freq_factor
        wavelen = 2 * math.pi / inv_freq
        scaled = torch.where(wavelen > low_wavelen, inv_freq / scaling.factor, inv_freq)
        smooth = (old / wavelen - scaling.low_freq_factor) / (scaling.high_freq_factor - scaling.low_freq_factor)
        smoothed = (1 - smooth) * scaled / scaling.factor + smooth * scaled
        medium = (wavelen >= high_wavelen) & (wavelen <= low_wavelen)
        inv_freq = torch.where(medium, smoothed, scaled)
    elif kind == "yarn":
        old = scaling.original_max_position or max_positions
        factor = scaling.factor

        def correction_dim(rotations: float) -> float:
            return (head_dim * math.log(old / (rotations * 2 * math.pi))) / (2 * math.log(theta))

        low = max(math.floor(correction_dim(scaling.beta_fast)), 0)
        high = min(math.ceil(correction_dim(scaling.beta_slow)), head_dim - 1)
        if low == high:
            high += 0.001
        ramp = ((torch.arange(head_dim // 2, dtype=torch.float64) - low) / (high - low)).clamp(0, 1)
        extrapolation = 1 - ramp
        inv_freq = (inv_freq / factor) * (1 - extrapolation) + inv_freq * extrapolation
        attention_factor = 0.1 * math.log(factor) + 1.0 if factor > 1 else 1.0
    elif kind not in ("none", "dynamic"):
        raise ValueError(f"unsupported rope scaling {kind!r}")
    return inv_freq, attention_factor


def rope_tables(head_dim: int, theta: float, scaling: RopeScaling, max_positions: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
    """cos, sin tables [max_positions, head_dim/2] float32 (the two halves of rotate-half share them)."""
    inv_freq, attention_factor = inverse_frequencies(head_dim, theta, scaling, max_positions)
    pos = torch.arange(max_positions, dtype=torch.float64)
    angles = torch.outer(pos, inv_freq)
    cos = (angles.cos() * attention_factor).to(torch.float32)
    sin = (angles.sin() * attention_factor).to(torch.float32)
    return cos.to(device), sin.to(device)

