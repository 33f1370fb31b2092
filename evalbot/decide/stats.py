"""Statistics, as pure functions over plain numbers.

The unit of replication is the *round*: in a round one pair of processes (one of main's, one of the
PR's) measured every cell on the same fresh windows, back to back and ABBA, so the PR/main ratio of a
round is a paired sample in which slow drift of the box cancels. Rounds rotate through every pairing
of processes. A process can be fast or slow for its whole life (placement, clocks, caches), and the
processes of a scoring are a sample of the processes it could have started, so the confidence
interval resamples main's processes and the PR's processes independently, and rounds within them
(`crossed_bootstrap_ci`): variance between processes widens it instead of hiding. The point estimate
is the median of the round ratios. Fixed seed: same data -> same interval, always.
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


def crossed_bootstrap_ci(
    values: Sequence[float], rows: Sequence[int], cols: Sequence[int], *, resamples: int = 2000, seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap CI of the median for values that come from crossed sources: each value (a
    round) was measured by one of main's processes (`rows`) and one of the PR's (`cols`), and every
    process took part in several rounds. Both sets of processes are samples: another scoring starts
    other processes. So a resample draws main's processes with replacement and the PR's processes with
    replacement, independently (the pigeonhole bootstrap, Owen 2007), and weighs each round by how
    often its two processes were drawn, times a Poisson(1) draw for the round itself. The median is
    the weighted one. A process that is fast or slow for the whole scoring widens the interval as it
    should; resampling pairings as if they were independent (nine pairings share three processes a
    side) gave intervals that excluded zero on identical code on the H200 (docs/perf.md)."""
    if not values:
        raise ValueError("bootstrap of no values")
    if not len(values) == len(rows) == len(cols):
        raise ValueError("one row and one column label per value")
    if not 0 < confidence < 1:
        raise ValueError("confidence must be in (0, 1)")
    data = np.asarray(values, dtype=float)
    if len(data) == 1:
        return float(data[0]), float(data[0])
    order = np.argsort(data, kind="stable")
    data = data[order]
    r_lab, r_idx = np.unique(np.asarray(rows)[order], return_inverse=True)
    c_lab, c_idx = np.unique(np.asarray(cols)[order], return_inverse=True)
    rng = np.random.default_rng(seed)
    r_w = np.stack([np.bincount(d, minlength=len(r_lab)) for d in rng.integers(0, len(r_lab), (resamples, len(r_lab)))])
    c_w = np.stack([np.bincount(d, minlength=len(c_lab)) for d in rng.integers(0, len(c_lab), (resamples, len(c_lab)))])
    w = r_w[:, r_idx] * c_w[:, c_idx] * rng.poisson(1.0, (resamples, len(data)))
    total = w.sum(axis=1)
    keep = total > 0
    cum = np.cumsum(w[keep], axis=1)
    half = total[keep][:, None] / 2.0
    lo_i = np.argmax(cum >= half, axis=1)  # the weighted median: lower and upper middle, averaged
    hi_i = np.argmax(cum > half, axis=1)
    medians = (data[lo_i] + data[hi_i]) / 2.0
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(medians, [alpha, 1.0 - alpha])
    return float(lo), float(hi)
