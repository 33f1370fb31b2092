"""Statistics, as pure functions over plain numbers.

The unit of replication is the *round*: in a round one pair of processes (one of main's, one of the
PR's) measured every cell on the same fresh windows, back to back and ABBA, so the PR/main ratio of a
round is a paired sample in which slow drift of the box cancels. Rounds rotate through every pairing
of processes; rounds of one pairing share whatever that pair's processes have (placement, clocks,
caches), so the confidence interval is a bootstrap that resamples pairings first and rounds within
them (`cluster_bootstrap_ci`): variance between processes widens it instead of hiding. The point
estimate is the median of the round ratios. Fixed seed: same data -> same interval, always.
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
def cluster_bootstrap_ci(
    values: Sequence[float], groups: Sequence[int], *, resamples: int = 2000, seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap CI of the median when values come in groups that share a cause (rounds
    measured by the same pair of processes): each resample draws groups with replacement, then values
    within each drawn group, so variance between groups widens the interval instead of hiding.
    With a single group this is the plain bootstrap over values."""
    if not values:
        raise ValueError("bootstrap of no values")
    if len(values) != len(groups):
        raise ValueError("one group label per value")
    if not 0 < confidence < 1:
        raise ValueError("confidence must be in (0, 1)")
    data = np.asarray(values, dtype=float)
    if len(data) == 1:
        return float(data[0]), float(data[0])
    labels = sorted(set(groups))
    members = [np.flatnonzero(np.asarray(groups) == g) for g in labels]
    rng = np.random.default_rng(seed)
    medians = np.empty(resamples)
    for r in range(resamples):
        picked = rng.integers(0, len(members), size=len(members))
        idx = np.concatenate([members[i][rng.integers(0, len(members[i]), size=len(members[i]))] for i in picked])
        medians[r] = np.median(data[idx])
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(medians, [alpha, 1.0 - alpha])
    return float(lo), float(hi)
