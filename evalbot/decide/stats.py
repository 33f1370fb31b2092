"""Statistics, as pure functions over plain numbers.

The unit of evidence is the *round*: within a round both refs ran back to back (ABBA), so the
PR/main ratio of that round is a paired sample in which slow drift of the box cancels. The
speedup is the median of the per-round ratios; its confidence interval is a percentile bootstrap
of that median over rounds with a fixed seed (same data -> same interval, always).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    return float(np.median(np.asarray(values, dtype=float)))


def mean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("mean of no values")
    return float(np.mean(np.asarray(values, dtype=float)))


def geomean(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("geometric mean of no values")
    if any(v <= 0 for v in values):
        raise ValueError("geometric mean needs positive values")
    return float(math.exp(sum(math.log(v) for v in values) / len(values)))


def paired_ratios(pr: Sequence[float], main: Sequence[float]) -> list[float]:
    """PR / main within each round (the two lists are aligned by round)."""
    if len(pr) != len(main):
        raise ValueError(f"unpaired samples: {len(pr)} PR vs {len(main)} main")
    if any(m <= 0 for m in main):
        raise ValueError("main values must be positive")
    return [p / m for p, m in zip(pr, main)]


def bootstrap_ci(
    values: Sequence[float], *, resamples: int = 2000, seed: int = 0, confidence: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap CI of the median. One value gives a zero-width interval at it."""
    if not values:
        raise ValueError("bootstrap of no values")
    if not 0 < confidence < 1:
        raise ValueError("confidence must be in (0, 1)")
    data = np.asarray(values, dtype=float)
    if len(data) == 1:
        return float(data[0]), float(data[0])
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, len(data), size=(resamples, len(data)))
    medians = np.median(data[idx], axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(medians, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def max_abs_deviation(ratios: Sequence[float]) -> float:
    """The largest |r - 1| over A/A ratios: the noise floor an A/B difference must clear."""
    if not ratios:
        raise ValueError("no ratios")
    return float(max(abs(r - 1.0) for r in ratios))


def rel_close(a: float, b: float, tolerance: float) -> bool:
    """|a - b| <= tolerance * |b| (b the reference value)."""
    return abs(a - b) <= tolerance * abs(b)
