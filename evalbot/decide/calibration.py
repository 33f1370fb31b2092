"""A box's noise floor from A/A (main against itself, with the very machinery a score uses): pure."""

from __future__ import annotations

from evalbot.decide.measurements import summarize
from evalbot.decide.noise import NoiseFloor, utc_now
from evalbot.decide.records import Records
from evalbot.decide.stats import median
from evalbot.errors import EvalbotError


def noise_from_aa(records: Records, *, box: str, profile: str, engine: str, base_sha: str, margin: float,
                  minimum: float) -> NoiseFloor:
    """Each metric's floor is how far from 1 the very statistic its gate or tier reads strayed on the
    A/A run, times `margin`, never below `minimum`: the DSpark speedup and the AR ratio over all
    cells (median over rounds of the per-round geomean over cells), each cell's median AR ratio, each guard's median generation and
    prefill ratio (the largest over cells or guards). The statistic, not single requests: a floor
    taken from single requests would hold a median of many rounds to the noise of one."""
    m = summarize(records, noise=NoiseFloor.default(box, profile, 0.0, engine))
    ar = [median(c.ar_ratios) for c in m.cells if c.ar_ratios]
    gen = [median(g.generation_ratios) for g in m.guards if g.generation_ratios]
    pre = [median(g.prefill_ratios) for g in m.guards if g.prefill_ratios]
    if not (m.speedup_rounds and ar and m.ar_rounds):
        raise EvalbotError("calibration produced no paired measurements")
    pairings, seen = m.processes_per_ref ** 2, len(set(m.speedup_groups))
    if seen < pairings:  # a floor that has not seen every pairing understates the noise a score meets
        raise EvalbotError(f"calibration incomplete: {len(m.speedup_rounds)} rounds covered {seen} of the {pairings} "
                           "process pairings before the budget ran out; give it more time (--budget)")

    def floor(values: list[float]) -> float:
        return max(minimum, margin * max((abs(v - 1.0) for v in values), default=0.0))

    return NoiseFloor(
        box=box, profile=profile, engine=engine, source="calibration", rounds=m.rounds, base_sha=base_sha,
        measured_at=utc_now(), dspark_decode=floor([median(m.speedup_rounds)]),
        ar_decode=floor([median(m.ar_rounds)]), ar_cell=floor(ar),
        guard_decode=floor(gen), guard_prefill=floor(pre),
    )
