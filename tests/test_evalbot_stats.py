"""Statistics: medians, geomeans and the clustered bootstrap interval the tier reads."""

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
    v, g = [1.01, 1.05, 0.99, 1.03, 1.02], [0, 1, 2, 3, 4]
    assert stats.cluster_bootstrap_ci(v, g, seed=3) == stats.cluster_bootstrap_ci(v, g, seed=3)


def test_bootstrap_of_few_rounds_spans_them_and_one_value_has_zero_width():
    lo, hi = stats.cluster_bootstrap_ci([1.0, 1.1], [0, 1])
    assert lo == pytest.approx(1.0) and hi == pytest.approx(1.1)
    assert stats.cluster_bootstrap_ci([1.2], [0]) == (1.2, 1.2)


def test_bootstrap_narrows_with_agreeing_rounds():
    wide = stats.cluster_bootstrap_ci([0.9, 1.1, 1.0, 0.95, 1.05], range(5))
    narrow = stats.cluster_bootstrap_ci([1.0, 1.001, 0.999, 1.0, 1.0005], range(5))
    assert narrow[1] - narrow[0] < wide[1] - wide[0]


def test_groups_resample_as_units():
    """Rounds of one pairing move together: ten agreeing rounds in two pairings that disagree give the
    interval of two samples, not of ten."""
    v = [1.0] * 5 + [1.2] * 5
    lo, hi = stats.cluster_bootstrap_ci(v, [0] * 5 + [1] * 5)
    assert lo == pytest.approx(1.0) and hi == pytest.approx(1.2)
    flat = stats.cluster_bootstrap_ci(v, list(range(10)))
    assert flat[1] - flat[0] <= hi - lo


def test_bootstrap_argument_errors():
    with pytest.raises(ValueError, match="confidence"):
        stats.cluster_bootstrap_ci([1.0, 2.0], [0, 1], confidence=1.0)
    with pytest.raises(ValueError, match="one group label per value"):
        stats.cluster_bootstrap_ci([1.0, 2.0], [0])
    with pytest.raises(ValueError, match="no values"):
        stats.cluster_bootstrap_ci([], [])
