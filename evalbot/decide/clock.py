"""The processes' own clocks held against the bot's: shown on the scorecard, never a gate's figure."""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import BaseModel

from evalbot.decide.noise import NoiseFloor
from evalbot.decide.records import Generation
from evalbot.decide.stats import median


class ClockCheck(BaseModel):
    """The processes' own timings held against the bot's clock (per ref: median reported / bot)."""

    pr_reported_over_bot: float | None = None
    main_reported_over_bot: float | None = None
    flagged: bool = False  # the PR's own clock disagrees with the bot's beyond main's and the noise
    detail: str = ""


def clock_check(gens: Sequence[Generation], noise: NoiseFloor) -> ClockCheck:
    """How the processes' own clocks compare with the bot's: reported (prefill + decode) over the bot's
    seconds, median per ref. Main's ratio is the honest overhead of the pipes and JSON; a PR whose ratio
    is lower by more than the noise floor says it is faster than the bot saw it be."""
    def ratio(ref: str) -> float | None:
        rs = [(g.reported.prefill_s or 0.0) + (g.reported.decode_s or 0.0) for g in gens if g.ref == ref and g.round >= 0]
        bs = [g.bot_s for g in gens if g.ref == ref and g.round >= 0]
        vals = [r / b for r, b in zip(rs, bs) if b > 0 and r > 0]
        return median(vals) if vals else None

    pr, mn = ratio("head"), ratio("base")
    check = ClockCheck(pr_reported_over_bot=pr, main_reported_over_bot=mn)
    if pr is not None and mn is not None:
        margin = max(2 * noise.dspark_decode, 0.05)
        if pr < mn * (1 - margin):
            check.flagged = True
            check.detail = (f"the PR's process reports {pr:.0%} of the time the bot measured, main's {mn:.0%}: "
                            "its own clock says it is faster than it was (reported figures are not used)")
    return check
