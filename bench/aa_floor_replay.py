"""python bench/aa_floor_replay.py NOISE_FLOOR_JSON RECEIPT... — replay a series of A/A scorings (receipts of
a PR that changes no code, in the order they ran, all on one box, profile and engine version) under two
noise floors, with the bot's own verdict code (evalbot.decide.verdict.decide):

- `as scored`: the floor the scorings had, from the one calibration in NOISE_FLOOR_JSON;
- `pooled`: the floor the bot would have had if the calibration and every A/A before this one had been
  pooled (`calibration.floor_from_outcomes`, the last `stats.noise_pool` campaigns): a scoring is never
  judged by a floor that contains its own campaign.

Prints one line per scoring and the count of tiers and REJECTs under each. Receipts are read as
written (DSSE envelope, unsigned too); the settings are each receipt's own (thresholds, tiers, stats)."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalbot.decide.calibration import floor_from_outcomes, legacy_outcome, outcome_of  # noqa: E402
from evalbot.decide.measurements import Measurements  # noqa: E402
from evalbot.decide.noise import NoiseFloor, read_noise_file  # noqa: E402
from evalbot.decide.verdict import decide  # noqa: E402
from evalbot.report.receipt_view import read_receipt  # noqa: E402
from evalbot.settings import ScoringSettings  # noqa: E402


def verdict_text(v) -> str:
    sp = v.speedup
    ci = f"{sp.pct:+.1f}% ({sp.ci_low_pct:+.1f} … {sp.ci_high_pct:+.1f})" if sp and sp.ci_low_pct is not None else "—"
    return f"{v.tier:7s} {ci}"


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    floors = read_noise_file(Path(argv[0])).latest()
    if len(floors) != 1:
        print(f"error: {argv[0]} holds {len(floors)} floors; give the file of the one calibration", file=sys.stderr)
        return 2
    cal: NoiseFloor = floors[0]
    history = list(cal.aa) or [legacy_outcome(cal, ScoringSettings().stats.noise_margin)]
    counts = {"as scored": [0, 0], "pooled": [0, 0]}
    print(f"{'receipt':34s} {'as scored (floor AR/DSpark)':44s} {'pooled (floor AR/DSpark, campaigns)':50s}")
    for path in argv[1:]:
        pred = read_receipt(Path(path))[0]["predicate"]
        st = pred["method"]["settings"]
        settings = ScoringSettings(thresholds=st["thresholds"], tiers=st["tiers"], stats=st["stats"])
        m = Measurements.model_validate(pred["measurements"])
        if m.noise.engine != cal.engine or m.noise.box != cal.box:
            print(f"error: {path} was scored on another box or engine version than the calibration", file=sys.stderr)
            return 2
        prof = ScoringSettings().profiles[m.noise.profile]
        pool = history[-settings.stats.noise_pool:]
        pooled = floor_from_outcomes(pool, box=cal.box, profile=cal.profile, engine=cal.engine,
                                     margin=settings.stats.noise_margin, minimum=prof.min_noise_floor)
        row = [Path(path).name[:34].ljust(34)]
        for name, floor in (("as scored", m.noise), ("pooled", pooled)):
            v = decide(m.model_copy(update={"noise": floor}), settings)
            counts[name][0] += v.tier not in ("none", "REJECT")
            counts[name][1] += v.tier == "REJECT"
            extra = f", {len(pool)}" if name == "pooled" else ""
            row.append(f"{verdict_text(v)} ({floor.ar_decode:.1%}/{floor.dspark_decode:.1%}{extra})".ljust(44 if name == "as scored" else 50))
        print(" ".join(row))
        history.append(outcome_of(m, base_sha=m.noise.base_sha))
    for name, (tiers, rejects) in counts.items():
        print(f"{name}: {tiers} tiered, {rejects} REJECTed of {len(argv) - 1} A/A scorings")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
