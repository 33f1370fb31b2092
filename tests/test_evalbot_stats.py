"""Statistics: pure functions, deterministic, paired by round."""

import math

import pytest

from evalbot.decide import stats


def test_median_and_mean():
    assert stats.median([3.0, 1.0, 2.0]) == 2.0
    assert stats.median([4.0, 1.0, 2.0, 3.0]) == 2.5
    assert stats.mean([1.0, 2.0, 6.0]) == 3.0
    with pytest.raises(ValueError):
        stats.median([])


def test_geomean():
    assert stats.geomean([2.0, 8.0]) == pytest.approx(4.0)
    assert stats.geomean([1.1]) == pytest.approx(1.1)
    with pytest.raises(ValueError):
        stats.geomean([1.0, 0.0])


def test_paired_ratios_are_pr_over_main_per_round():
    assert stats.paired_ratios([110.0, 99.0], [100.0, 90.0]) == pytest.approx([1.1, 1.1])
    with pytest.raises(ValueError):
        stats.paired_ratios([1.0], [1.0, 2.0])
    with pytest.raises(ValueError):
        stats.paired_ratios([1.0], [0.0])


def test_bootstrap_is_deterministic_for_a_seed():
    values = [1.04, 1.06, 1.05, 1.03, 1.07]
    a = stats.bootstrap_ci(values, resamples=1000, seed=7)
    b = stats.bootstrap_ci(values, resamples=1000, seed=7)
    assert a == b
    lo, hi = a
    assert min(values) <= lo <= stats.median(values) <= hi <= max(values)


def test_bootstrap_of_few_rounds_spans_them():
    # With 2 or 3 rounds every resampled median is one of a few values; the 95% interval then
    # covers all rounds: a tier needs every round to agree, which is the conservative answer.
    lo, hi = stats.bootstrap_ci([1.02, 1.08, 1.05], resamples=2000, seed=1)
    assert lo == pytest.approx(1.02) and hi == pytest.approx(1.08)


def test_bootstrap_of_one_value_has_zero_width():
    assert stats.bootstrap_ci([1.1]) == (1.1, 1.1)


def test_bootstrap_narrows_with_agreeing_rounds():
    tight = stats.bootstrap_ci([1.05 + 0.001 * (i % 3) for i in range(30)], seed=3)
    loose = stats.bootstrap_ci([1.05 + 0.02 * ((i % 5) - 2) for i in range(30)], seed=3)
    assert tight[1] - tight[0] < loose[1] - loose[0]


def test_bootstrap_rejects_bad_confidence():
    with pytest.raises(ValueError):
        stats.bootstrap_ci([1.0, 2.0], confidence=1.0)


def test_max_abs_deviation_and_rel_close():
    assert stats.max_abs_deviation([0.99, 1.02, 1.0]) == pytest.approx(0.02)
    assert stats.rel_close(101.0, 100.0, 0.01)
    assert not stats.rel_close(101.1, 100.0, 0.01)
    assert math.isclose(stats.max_abs_deviation([1.0]), 0.0)
