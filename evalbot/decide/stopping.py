"""When a scoring has measured enough: adaptive stopping, as a pure function of what was measured.

More rounds are worth their time only while they could still change the verdict. A scoring stops
when the DSpark speedup's confidence interval lies within one tier band (or wholly below the lowest
tier), every AR and guard gate is clear of its bar on both sides of its interval, or a gate has
already failed for good (the PR's integrity or losslessness). Otherwise it goes on until the budget or
the corpus runs out, and the verdict says so.
"""

from __future__ import annotations

from evalbot.decide.gates import gate_integrity, ratio_ci, total_check
from evalbot.decide.measurements import Measurements
from evalbot.decide.stats import crossed_bootstrap_ci
from evalbot.decide.tiers import band_for
from evalbot.settings import ScoringSettings


def _ci(values: list[float], mains: list[int], prs: list[int], settings: ScoringSettings) -> tuple[float, float]:
    st = settings.stats
    return crossed_bootstrap_ci(values, mains, prs, resamples=min(st.bootstrap_resamples, 500),
                                seed=st.bootstrap_seed, confidence=st.confidence)


def final(m: Measurements) -> str | None:
    """Why no further round can change the verdict (a REJECT for good), else None. Checked after every
    round, before the minimum number of rounds too: a wrong stream needs no more evidence."""
    if gate_integrity(m).status == "fail":
        return "an integrity finding on the PR: no number of rounds can change the verdict"
    if any(c.pr_verified < c.pr_streams for c in m.cells):
        return "a DSpark stream that is not main's greedy continuation: REJECT whatever the speed"
    return None


def decided(m: Measurements, settings: ScoringSettings) -> tuple[bool, str]:
    th, tiers = settings.thresholds, settings.tiers
    why = final(m)
    if why is not None:
        return True, why
    if len(m.speedup_rounds) < 2:
        return False, "too few rounds for an interval"
    lo, hi = _ci(m.speedup_rounds, *m.speedup_processes(), settings)
    lo_pct, hi_pct = (lo - 1) * 100, (hi - 1) * 100
    floor_pct = m.noise.dspark_decode * 100
    lowest = tiers.bands[0].min_pct
    speed_done = hi_pct < lowest or (band_for(lo_pct, tiers) == band_for(hi_pct, tiers) and lo_pct > floor_pct)
    if not speed_done:
        return False, f"DSpark speedup CI {lo_pct:+.1f}% … {hi_pct:+.1f}% spans more than one tier"
    # Each speed gate's statistic against its bar, with the gates' own interval (fewer resamples).
    speed = [("AR over all cells", m.ar_rounds, m.ar_round_processes(), th.ar_ratio_min - m.noise.ar_decode)
             ] if len(m.cells) > 1 else []  # with one cell the gate reads that cell only (gates.gate_ar)
    speed += [(f"AR {c.name}", c.ar_ratios, c.ar_processes, th.ar_ratio_min - m.noise.ar_cell) for c in m.cells]
    for g in m.guards:
        speed += [(f"guard {g.guard} generation", g.generation_ratios, g.generation_processes,
                   th.guard_decode_ratio_min - m.noise.guard_decode),
                  (f"guard {g.guard} prefill", g.prefill_ratios, g.prefill_processes,
                   th.guard_prefill_ratio_min - m.noise.guard_prefill)]
    for what, values, procs, bar in speed:
        a, b = ratio_ci(values, procs, settings.stats, resamples=500) if len(values) >= 2 else (0.0, 2.0)
        if a < bar < b:
            return False, f"{what}: CI {a:.3f}× … {b:.3f}× straddles the bar {bar:.3f}×"
    # The same by total time (gates.total_check): a check still undecided needs more rounds.
    slack = th.total_time_slack
    totals = [("DSpark by total time", [c.dspark_timed for c in m.cells], 1.0 - m.noise.dspark_decode - slack),
              ("AR by total time", [c.ar_timed for c in m.cells], th.ar_ratio_min - m.noise.ar_decode - slack)]
    for g in m.guards:
        totals += [(f"guard {g.guard} generation by total time", [g.generation_timed],
                    th.guard_decode_ratio_min - m.noise.guard_decode - slack),
                   (f"guard {g.guard} prefill by total time", [g.prefill_timed],
                    th.guard_prefill_ratio_min - m.noise.guard_prefill - slack)]
    for what, groups, bar in totals:
        if groups and all(groups) and all(t.pr_s > 0 for grp in groups for t in grp):
            status, value, _ = total_check(groups, bar, settings.stats, resamples=500)
            if status == "undecided":
                return False, f"{what} {value:.3f}× is below its bar {bar:.3f}× with an interval that reaches above it"
    return True, f"DSpark speedup CI {lo_pct:+.1f}% … {hi_pct:+.1f}% within one tier, every speed gate clear"
