"""Tiers: the size of a verified DSpark decode speedup, as pure functions.

Bands (configurable, percent of PR over main): none < 2, XS [2, 3.5), S [3.5, 6), M [6, 10),
L [10, 18), XL >= 18 — lower bounds inclusive. The tier is the band of the confidence interval's
LOWER bound, not of the point estimate: the speedup the bot is confident of. A tier from the point
estimate is a coin flip near a band edge, and every fresh scoring (a push, a /rescore) is another
flip: a true +17 % read XL in about a quarter of scorings. The lower bound errs low, so luck rarely
buys a band. "none" whenever the interval includes zero or its lower bound does not clear the box's
noise floor, or when there is no interval at all (a single round). Any failed gate gives REJECT
instead. The scorecard still shows the point estimate and the interval. The names, their order and
the labels are defined once, in evalbot.settings.tiers.
"""

from __future__ import annotations

from evalbot.settings import TierSettings

_DIGITS = 9  # 1.035 - 1 is 0.034999...; compare percentages rounded, not raw floats


def band_for(pct: float, tiers: TierSettings) -> str:
    """The band a speedup of `pct` percent falls in (no confidence logic)."""
    pct = round(pct, _DIGITS)
    name = tiers.none_name
    for band in tiers.bands:
        if pct >= band.min_pct:
            name = band.name
    return name


def tier_for(
    pct: float | None, ci_pct: tuple[float, float] | None, noise_pct: float, tiers: TierSettings
) -> str:
    """Tier for a speedup `pct` with CI `ci_pct` (both in percent) on a box with `noise_pct` noise: the
    band of the CI's lower bound, once that bound clears zero and the noise floor."""
    if pct is None or ci_pct is None:
        return tiers.none_name
    low = round(ci_pct[0], _DIGITS)
    if low <= 0 or low <= round(noise_pct, _DIGITS):
        return tiers.none_name
    return band_for(low, tiers)


def labels_for(tier: str | None, tiers: TierSettings) -> list[str]:
    """`["eval-dspark:S", "eval:S"]`; no tier (not evaluated) -> no labels."""
    return tiers.labels_for(tier)


def all_tier_names(tiers: TierSettings) -> list[str]:
    return [*tiers.order, tiers.reject_name]
