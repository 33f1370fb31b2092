"""Differential accuracy over the full vocabulary, computed by the bot from both refs' log-probs.

Each ref's process returns its teacher-forced log-softmax over the whole vocabulary at the same
positions of the same windows (float32); the bot computes everything here. KL(main || PR) is summed
over every token of the vocabulary, not renormalised over top-k sets (which read logits scaled by 1.3
as KL 0.0996 where the full value is 0.155). A PR log-prob is floored at LOGPROB_FLOOR before the
sum, so a token the PR rules out entirely counts as a huge divergence, never as an undefined one.

The rows are the PR's own dump, so they are held to being log-probabilities: each row's logsumexp must
be 0 within LSE_TOLERANCE. A shifted dump (every log-prob + c) lowers KL(main || PR) by c, and the
per-row clamp at 0 would hide what is left: such rows are counted (`pr_unnormalised`), and the accuracy
gate fails on any, rather than renormalising what the PR sent and scoring it as if it had been right.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel

LOGPROB_FLOOR = -100.0
PERCENTILES = (50, 90, 99)
# |logsumexp| of a full-vocabulary float32 log-softmax row: ~1e-6 honestly (float32 rounding over ~150k
# terms stays far below); a dump off by more was not normalised by the PR.
LSE_TOLERANCE = 1e-3


class AccuracySummary(BaseModel):
    positions: int
    top1: float  # share of positions where both refs' argmax agree
    kl_mean: float  # mean over positions of KL(main || PR), full vocabulary, nats
    kl_percentiles: dict[str, float]  # "p50", "p90", "p99"
    kl_max: float
    kl_histogram: list[int]  # positions per bin of KL_EDGES
    ppl_main: float
    ppl_pr: float
    pr_unnormalised: int = 0  # PR rows whose logsumexp is not 0 within LSE_TOLERANCE
    pr_worst_lse: float = 0.0  # the PR row logsumexp furthest from 0 (signed)


KL_EDGES = (0.0, 1e-4, 1e-3, 1e-2, 0.05, 0.1, 0.5, 1.0, float("inf"))


def kl_rows(main_lp: np.ndarray, pr_lp: np.ndarray) -> np.ndarray:
    """Per-position KL(main || PR) in float64: sum_v p_main (log p_main - log p_pr)."""
    if main_lp.shape != pr_lp.shape or main_lp.ndim != 2:
        raise ValueError(f"log-prob arrays differ in shape: {main_lp.shape} vs {pr_lp.shape}")
    m = main_lp.astype(np.float64)
    p = np.maximum(pr_lp.astype(np.float64), LOGPROB_FLOOR)
    pm = np.exp(m)
    with np.errstate(invalid="ignore"):  # main's -inf (a token it rules out) contributes 0, not 0 * -inf
        terms = np.where(pm > 0, pm * (m - p), 0.0)
    return np.maximum(terms.sum(axis=1), 0.0)  # >= 0; rounding aside


def row_logsumexp(lp: np.ndarray) -> np.ndarray:
    """Per-row logsumexp in float64 (0 for a normalised log-softmax row); -inf for a row of -inf."""
    x = lp.astype(np.float64)
    top = x.max(axis=1, keepdims=True)
    safe = np.where(np.isfinite(top), top, 0.0)
    with np.errstate(divide="ignore"):
        return (np.log(np.exp(x - safe).sum(axis=1)) + safe[:, 0])


def main_non_finite(main_lp: np.ndarray) -> str | None:
    """Why main's log-probs cannot be the reference (NaN or +inf anywhere), or None. A -inf is a token
    main rules out (probability 0): allowed."""
    nan, pos = np.isnan(main_lp), np.isposinf(main_lp)
    if not (nan.any() or pos.any()):
        return None
    row = int(np.argwhere(nan | pos)[0][0])
    return f"{int(nan.sum())} NaN and {int(pos.sum())} +inf values, the first at position {row}"


def summarize_accuracy(main_lp: np.ndarray, pr_lp: np.ndarray, targets: Sequence[int]) -> AccuracySummary:
    """main_lp, pr_lp [positions, vocab]: log-probs predicting `targets` (the real next tokens)."""
    bad = main_non_finite(main_lp)
    if bad is not None:
        raise ValueError(f"main's log-probs are not usable: {bad}")
    pr_lp = np.nan_to_num(pr_lp, nan=LOGPROB_FLOOR, neginf=LOGPROB_FLOOR, posinf=0.0)
    n = main_lp.shape[0]
    t = np.asarray(targets, dtype=np.int64)
    if t.shape != (n,):
        raise ValueError(f"{len(t)} targets for {n} positions")
    kl = kl_rows(main_lp, pr_lp)
    lse = row_logsumexp(pr_lp)
    off = ~(np.abs(lse) <= LSE_TOLERANCE)
    worst = float(lse[np.argmax(np.abs(lse))]) if n else 0.0  # pr_lp is finite here
    rows = np.arange(n)
    hist, _ = np.histogram(kl, bins=np.asarray(KL_EDGES))
    return AccuracySummary(
        positions=n,
        top1=float((main_lp.argmax(1) == pr_lp.argmax(1)).mean()),
        kl_mean=float(kl.mean()),
        kl_percentiles={f"p{q}": float(np.percentile(kl, q)) for q in PERCENTILES},
        kl_max=float(kl.max()),
        kl_histogram=[int(x) for x in hist],
        ppl_main=float(np.exp(-np.maximum(main_lp[rows, t].astype(np.float64), LOGPROB_FLOOR).mean())),
        ppl_pr=float(np.exp(-np.maximum(pr_lp[rows, t].astype(np.float64), LOGPROB_FLOOR).mean())),
        pr_unnormalised=int(off.sum()), pr_worst_lse=worst,
    )
