"""Tiers: every band boundary, confidence and noise rules, labels."""

import pytest

from evalbot.settings import TierBand, TierSettings
from evalbot.decide.tiers import all_tier_names, band_for, labels_for, tier_for

T = TierSettings()
SURE = (50.0, 60.0)  # a CI far from zero and noise


@pytest.mark.parametrize(
    "pct, band",
    [
        (-30.0, "none"), (0.0, "none"), (1.99, "none"), (2.0, "XS"), (3.49, "XS"), (3.5, "S"), (5.99, "S"),
        (6.0, "M"), (9.99, "M"), (10.0, "L"), (17.99, "L"), (18.0, "XL"), (250.0, "XL"),
    ],
)
def test_band_boundaries(pct, band):
    assert band_for(pct, T) == band
    if pct > 0.5:  # the tier is the band of the CI's lower bound
        assert tier_for(pct + 20.0, (pct, pct + 30.0), 0.5, T) == band


def test_tier_is_the_band_of_the_lower_bound_not_the_point():
    # a true +17 % PR whose point estimate happens to read +19 % is still L, not XL
    assert tier_for(19.0, (12.0, 26.0), 1.0, T) == "L"
    assert tier_for(7.0, (4.0, 10.0), 1.0, T) == "S"
    assert tier_for(7.0, (6.0, 8.0), 1.0, T) == "M"
    # clears zero and the floor but not the smallest band: none, however big the point
    assert tier_for(30.0, (1.5, 60.0), 1.0, T) == "none"
    # the lower bound's band boundary is inclusive too (float arithmetic)
    assert tier_for(20.0, ((1.035 - 1) * 100, 30.0), 0.5, T) == "S"


@pytest.mark.parametrize("ratio, band", [(1.02, "XS"), (1.035, "S"), (1.06, "M"), (1.10, "L"), (1.18, "XL")])
def test_boundaries_survive_float_arithmetic(ratio, band):
    # (1.035 - 1) * 100 is 3.4999999999999996; the boundary must still count as inclusive.
    assert band_for((ratio - 1) * 100, T) == band


def test_ci_including_zero_is_none_however_big_the_point():
    assert tier_for(25.0, (-0.1, 40.0), 0.0, T) == "none"
    assert tier_for(25.0, (0.0, 40.0), 0.0, T) == "none"


def test_ci_not_clearing_noise_is_none():
    assert tier_for(4.0, (0.9, 6.0), 1.0, T) == "none"
    assert tier_for(4.0, (1.1, 6.0), 1.0, T) == "none"  # clears the floor, but +1.1 % is below XS
    assert tier_for(4.0, (3.6, 6.0), 4.0, T) == "none"  # an S lower bound inside a 4 % floor
    assert tier_for(4.0, (3.6, 6.0), 1.0, T) == "S"


def test_no_interval_or_no_speedup_is_none():
    assert tier_for(30.0, None, 0.0, T) == "none"
    assert tier_for(None, (1.0, 2.0), 0.0, T) == "none"


def test_labels_pair_and_prefixes():
    assert labels_for("S", T) == ["eval-dspark:S", "eval:S"]
    assert labels_for("REJECT", T) == ["eval-dspark:REJECT", "eval:REJECT"]
    assert labels_for(None, T) == []


def test_bands_come_from_config():
    custom = TierSettings(bands=[TierBand(name="small", min_pct=1.0), TierBand(name="big", min_pct=5.0)])
    assert band_for(0.99, custom) == "none"
    assert band_for(1.0, custom) == "small"
    assert band_for(5.0, custom) == "big"
    assert all_tier_names(custom) == ["none", "small", "big", "REJECT"]


@pytest.mark.parametrize("bands", [[], [("a", 3.0), ("b", 2.0)], [("a", 0.0)], [("a", 2.0), ("b", 2.0)]])
def test_bad_bands_are_refused(bands):
    with pytest.raises(ValueError):
        TierSettings(bands=[TierBand(name=n, min_pct=p) for n, p in bands])
