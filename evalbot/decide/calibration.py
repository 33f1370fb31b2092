"""A box's noise floor from A/A rounds (base against itself): pure."""

from __future__ import annotations

from evalbot.decide.measurements import summarize
from evalbot.decide.noise import NoiseFloor, utc_now
from evalbot.decide.records import RunRecord
from evalbot.decide.stats import max_abs_deviation, median
from evalbot.errors import EvalbotError


def noise_from_aa(records: list[RunRecord], *, box: str, profile: str, rounds: int, base_sha: str,
                  margin: float) -> NoiseFloor:
    """The box's noise floor from A/A rounds (times `margin`).

    Each metric's floor is the deviation from 1 of the very statistic its gate or tier reads, taken
    on the A/A runs through the same `summarize` a score uses: the DSpark speedup (median over rounds
    of the per-round geomean over contexts), each context's median AR ratio, each guard's median
    decode and prefill ratio; the largest over contexts or guards. A floor taken from single runs
    instead would hold a median of several rounds to the noise of one run: on a noisy box it would
    hide every real change. The wall-time floor stays per run: the wall-clock cross-check looks at
    single runs.
    """
    m = summarize(records, profile=profile, rounds=rounds, requested_reps=0,
                  noise=NoiseFloor.default(box, profile, 0.0))
    ar = [median(c.ar_ratios) for c in m.contexts if c.ar_ratios]
    gdec = [median(g.decode_ratios) for g in m.guards if g.decode_ratios]
    gpre = [median(g.prefill_ratios) for g in m.guards if g.prefill_ratios]
    wall = [w.pr_wall_s / w.main_wall_s for w in m.walls if w.pr_wall_s and w.main_wall_s]
    if not (m.speedup_rounds and ar and gdec and gpre and wall):
        raise EvalbotError("calibration produced no paired measurements")
    return NoiseFloor(
        box=box, profile=profile, calibrated=True, rounds=rounds, base_sha=base_sha, measured_at=utc_now(),
        dspark_decode=margin * abs(median(m.speedup_rounds) - 1.0), ar_decode=margin * max_abs_deviation(ar),
        guard_decode=margin * max_abs_deviation(gdec), guard_prefill=margin * max_abs_deviation(gpre),
        tau_check_wall=margin * max_abs_deviation(wall),
    )
