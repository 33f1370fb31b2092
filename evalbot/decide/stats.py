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
    order = np.argsort(np.searchsorted(labels, groups), kind="stable")
    sizes = np.array([sum(1 for g in groups if g == lab) for lab in labels])
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    sorted_data = data[order]
    rng = np.random.default_rng(seed)
    n_groups, width = len(labels), int(sizes.max())
    picked = rng.integers(0, n_groups, size=(resamples, n_groups))  # groups, with replacement
    within = (rng.random((resamples, n_groups, width)) * sizes[picked][..., None]).astype(int)  # values in each
    values = sorted_data[starts[picked][..., None] + np.minimum(within, sizes[picked][..., None] - 1)]
    values = np.where(np.arange(width)[None, None, :] < sizes[picked][..., None], values, np.nan)
    medians = np.nanmedian(values.reshape(resamples, -1), axis=1)
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(medians, [alpha, 1.0 - alpha])
    return float(lo), float(hi)
