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


def pigeonhole_weights(rows: Sequence[int], cols: Sequence[int], units: Sequence[int], resamples: int,
                       rng: np.random.Generator) -> np.ndarray:
    """[resamples, n] weights of n values in a crossed resample (crossed_bootstrap_ci): main's processes
    (`rows`) and the PR's (`cols`) drawn with replacement, independently, each value counted as often as
    the product of its two processes' draws; with one process on both sides, `units` (each value's
    round, or the value itself) are drawn instead."""
    def draws(labels: np.ndarray) -> np.ndarray:  # how often each value's unit was drawn
        lab, idx = np.unique(labels, return_inverse=True)
        picks = rng.integers(0, len(lab), (resamples, len(lab)))
        counts = np.stack([np.bincount(p, minlength=len(lab)) for p in picks])
        return counts[:, idx]

    r, c = np.asarray(rows), np.asarray(cols)
    multi_r, multi_c = len(set(r.tolist())) > 1, len(set(c.tolist())) > 1
    if multi_r or multi_c:
        w = (draws(r) if multi_r else 1) * (draws(c) if multi_c else 1)
    else:
        w = draws(np.asarray(units))
    return np.broadcast_to(w, (resamples, len(r)))


def crossed_bootstrap_ci(
    values: Sequence[float], rows: Sequence[int], cols: Sequence[int], *, resamples: int = 2000, seed: int = 0,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Percentile bootstrap CI of the median for values that come from crossed sources: each value (a
    round) was measured by one of main's processes (`rows`) and one of the PR's (`cols`), and every
    process took part in several rounds. Both sets of processes are samples: another scoring starts
    other processes. So a resample draws main's processes with replacement and the PR's processes with
    replacement, independently, and counts each round as often as the product of its two processes'
    draws (the pigeonhole bootstrap, Owen 2007, "The pigeonhole bootstrap", Ann. Appl. Stat.); the
    median is the weighted one. A process that is fast or slow for the whole scoring widens the
    interval as it should. Resampling the pairings as if they were independent (nine pairings share
    three processes a side) gave an interval that excluded zero on identical code on the H200
    (docs/perf.md). A side with a single process cannot be resampled: with one on both sides the
    rounds themselves are resampled (a plain bootstrap), with one on one side the other side's."""
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
    rng = np.random.default_rng(seed)
    r, c = np.asarray(rows)[order], np.asarray(cols)[order]
    w = pigeonhole_weights(r, c, np.arange(len(data)), resamples, rng)
    total = w.sum(axis=1)
    cum = np.cumsum(w, axis=1)
    half = total[:, None] / 2.0
    lo_i = np.argmax(cum >= half, axis=1)  # the weighted median: the two middle values, averaged
    hi_i = np.argmax(cum > half, axis=1)
    medians = (data[lo_i] + data[hi_i]) / 2.0
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(medians, [alpha, 1.0 - alpha])
    return float(lo), float(hi)
