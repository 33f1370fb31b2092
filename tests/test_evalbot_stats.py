"""Statistics: medians, geomeans and the crossed bootstrap interval the tier reads."""

import pytest

from evalbot.decide import stats


def test_median_mean_geomean():
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.mean([1.0, 2.0, 3.0]) == 2.0
    assert stats.geomean([1.0, 4.0]) == pytest.approx(2.0)
    for f in (stats.median, stats.mean, stats.geomean):
        with pytest.raises(ValueError):
            f([])
    with pytest.raises(ValueError, match="positive"):
        stats.geomean([1.0, 0.0])


def test_bootstrap_is_deterministic_for_a_seed():
    v, m, p = [1.01, 1.05, 0.99, 1.03, 1.02], [0, 1, 2, 0, 1], [0, 1, 2, 1, 2]
    assert stats.crossed_bootstrap_ci(v, m, p, seed=3) == stats.crossed_bootstrap_ci(v, m, p, seed=3)


def test_bootstrap_of_few_rounds_spans_them_and_one_value_has_zero_width():
    lo, hi = stats.crossed_bootstrap_ci([1.0, 1.1], [0, 1], [0, 1])
    assert lo == pytest.approx(1.0) and hi == pytest.approx(1.1)
    assert stats.crossed_bootstrap_ci([1.2], [0], [0]) == (1.2, 1.2)


def test_bootstrap_narrows_with_agreeing_rounds():
    wide = stats.crossed_bootstrap_ci([0.9, 1.1, 1.0, 0.95, 1.05], [0] * 5, [0] * 5)
    narrow = stats.crossed_bootstrap_ci([1.0, 1.001, 0.999, 1.0, 1.0005], [0] * 5, [0] * 5)
    assert narrow[1] - narrow[0] < wide[1] - wide[0]


def test_a_process_that_is_fast_all_along_moves_as_one_unit():
    """Nine pairings of 3 x 3 processes, two rounds each; one PR process is 6 % faster in every round
    it took part in, the others agree exactly. Two thirds of the rounds are 1.0, so the median of the
    rounds is 1.0, but a scoring that had started other processes could as well have had two fast ones:
    the interval reaches up to that."""
    mains = [i % 3 for i in range(18)]
    prs = [(i // 3) % 3 for i in range(18)]
    v = [1.06 if p == 2 else 1.0 for p in prs]
    lo, hi = stats.crossed_bootstrap_ci(v, mains, prs)
    assert lo == pytest.approx(1.0) and hi == pytest.approx(1.06)
    flat = stats.crossed_bootstrap_ci(v, list(range(18)), list(range(18)))  # every round processes of its own
    assert flat[1] - flat[0] <= hi - lo


# The 18 rounds (main's process, the PR's process, DSpark ratio) of an A/A scoring on the H200: a docs-only
# PR against main, both running the same engine (docs/perf-data/2026-12-01-ruler-gpu-v3/score-noop-2).
# Resampling the nine pairings as if they were independent gave +0.3 % ... +5.3 %: an interval that
# excludes zero on identical code, 0.04 points from a tier. The processes are the unit that varies.
H200_AA = [(0, 0, 1.05297), (1, 1, 1.10432), (2, 2, 1.10769), (0, 1, 1.00813), (1, 2, 1.02192), (2, 0, 1.08601),
           (0, 2, 1.01787), (1, 0, 1.05911), (2, 1, 0.98595), (0, 0, 1.04243), (1, 1, 0.90319), (2, 2, 1.00443),
           (0, 1, 1.01399), (1, 2, 1.02064), (2, 0, 0.99859), (0, 2, 1.02256), (1, 0, 1.02017), (2, 1, 0.99134)]


def test_the_h200_aa_scoring_includes_zero_when_processes_are_resampled():
    mains, prs, v = zip(*H200_AA)
    lo, hi = stats.crossed_bootstrap_ci(list(v), list(mains), list(prs), resamples=2000, seed=20240229)
    assert lo < 1.0 < hi
    assert hi - lo > 0.04


def test_bootstrap_argument_errors():
    with pytest.raises(ValueError, match="confidence"):
        stats.crossed_bootstrap_ci([1.0, 2.0], [0, 1], [0, 1], confidence=1.0)
    with pytest.raises(ValueError, match="one row and one column label per value"):
        stats.crossed_bootstrap_ci([1.0, 2.0], [0], [0, 1])
    with pytest.raises(ValueError, match="no values"):
        stats.crossed_bootstrap_ci([], [], [])
