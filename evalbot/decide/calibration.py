"""A box's noise floor from A/A (main against itself, with the very machinery a score uses): pure."""

from __future__ import annotations

from evalbot.decide.measurements import Measurements, summarize
from evalbot.decide.noise import AAOutcome, NoiseFloor, utc_now
from evalbot.decide.records import Records
from evalbot.decide.stats import median
from evalbot.errors import EvalbotError


def aa_outcome(records: Records, *, base_sha: str) -> AAOutcome:
    """How far from 1 the very statistic each gate or tier reads strayed on this A/A campaign: the DSpark
    speedup and the AR ratio over all cells (median over rounds of the per-round geomean over cells),
    each cell's median AR ratio, each guard's median generation and prefill ratio (the largest over
    cells or guards). The statistic, not single requests: a floor taken from single requests would hold
    a median of many rounds to the noise of one."""
    return outcome_of(summarize(records, noise=NoiseFloor.default("", "", 0.0)), base_sha=base_sha)


def outcome_of(m: Measurements, *, base_sha: str) -> AAOutcome:
    """`aa_outcome` from an A/A campaign's summary (also what a receipt of an A/A scoring holds)."""
    ar = [median(c.ar_ratios) for c in m.cells if c.ar_ratios]
    gen = [median(g.generation_ratios) for g in m.guards if g.generation_ratios]
    pre = [median(g.prefill_ratios) for g in m.guards if g.prefill_ratios]
    if not (m.speedup_rounds and ar and m.ar_rounds):
        raise EvalbotError("calibration produced no paired measurements")
    pairings, seen = m.processes_per_ref ** 2, len(set(m.speedup_groups))
    if seen < pairings:  # a floor that has not seen every pairing understates the noise a score meets
        raise EvalbotError(f"calibration incomplete: {len(m.speedup_rounds)} rounds covered {seen} of the {pairings} "
                           "process pairings before the budget ran out; give it more time (--budget)")

    def dev(values: list[float]) -> float:
        return max((abs(v - 1.0) for v in values), default=0.0)

    return AAOutcome(dspark_decode=dev([median(m.speedup_rounds)]), ar_decode=dev([median(m.ar_rounds)]), ar_cell=dev(ar),
                     guard_decode=dev(gen), guard_prefill=dev(pre), rounds=m.rounds, measured_at=utc_now(), base_sha=base_sha)


def legacy_outcome(floor: NoiseFloor, margin: float) -> AAOutcome:
    """A floor stored before campaigns were pooled, as the one campaign it came from (its deviations are
    the floors over the margin; where the minimum clipped them, a little more than they were)."""
    return AAOutcome(dspark_decode=floor.dspark_decode / margin, ar_decode=floor.ar_decode / margin,
                     ar_cell=floor.ar_cell / margin, guard_decode=floor.guard_decode / margin,
                     guard_prefill=floor.guard_prefill / margin, rounds=floor.rounds, measured_at=floor.measured_at,
                     base_sha=floor.base_sha)


def floor_from_outcomes(outcomes: list[AAOutcome], *, box: str, profile: str, engine: str, margin: float,
                        minimum: float) -> NoiseFloor:
    """Each metric's floor: the margin times its largest deviation over the campaigns, never below `minimum`."""
    if not outcomes:
        raise EvalbotError("no A/A campaign to take a noise floor from")

    def floor(metric: str) -> float:
        return max(minimum, margin * max(getattr(o, metric) for o in outcomes))

    last = outcomes[-1]
    return NoiseFloor(box=box, profile=profile, engine=engine, source="calibration", rounds=sum(o.rounds for o in outcomes),
                      base_sha=last.base_sha, measured_at=last.measured_at, aa=list(outcomes),
                      **{k: floor(k) for k in ("dspark_decode", "ar_decode", "ar_cell", "guard_decode", "guard_prefill")})


def noise_from_aa(records: Records, *, box: str, profile: str, engine: str, base_sha: str, margin: float,
                  minimum: float, previous: NoiseFloor | None = None, pool: int = 1) -> NoiseFloor:
    """The floor after this A/A campaign: pooled with the last `pool - 1` campaigns of `previous` (the
    floor stored for the same box, profile and engine version, if any)."""
    outcomes: list[AAOutcome] = []
    if previous is not None and previous.calibrated and previous.engine == engine:
        outcomes = list(previous.aa) or [legacy_outcome(previous, margin)]
    outcomes.append(aa_outcome(records, base_sha=base_sha))
    return floor_from_outcomes(outcomes[-max(1, pool):], box=box, profile=profile, engine=engine, margin=margin,
                               minimum=minimum)
