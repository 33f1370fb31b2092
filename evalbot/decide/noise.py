"""The noise floor of a box: how far PR/main ratios stray when PR *is* main (A/A).

`evalbot calibrate` (and the first scoring on a box, profile and engine version, which calibrates
first) runs main against itself with the very machinery a score uses, and keeps, per metric, how far
from 1 the statistic its gate reads strayed (`calibration.noise_from_aa`).

One A/A is one draw of that deviation. On a noisy box, a lucky draw is far below what the next A/A
will do: on 2026-12-02 a calibration of the 2-vCPU VM read AR ±1.1 %, while twenty A/A scorings
spread with an SD of ~5 %, and one of them was REJECTed. So each calibration adds its campaign to the
ones already stored for the key. The floor is the margin times the largest deviation over the last
`stats.noise_pool` campaigns.

The floors are kept in `.evalbot/noise-floor.json`, keyed by box, profile and engine version (a digest
of main's measured code: engine/, kernels/, harness/). Gates subtract the floor from their bars, and
a tier needs the speedup's CI to clear it. So an A/A run should never REJECT and never win a tier.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from evalbot.errors import ConfigError

NOISE_FILE = "noise-floor.json"
NOISE_VERSION = 3  # 3: ar_decode is the pooled AR statistic, ar_cell the worst cell


class AAOutcome(BaseModel):
    """One A/A campaign (fresh processes, fresh windows): how far from 1 each gated statistic strayed,
    before the margin. A floor pools the last few of these (`calibration.floor_from_outcomes`)."""

    dspark_decode: float
    ar_decode: float
    ar_cell: float
    guard_decode: float
    guard_prefill: float
    rounds: int
    measured_at: str
    base_sha: str = ""


class NoiseFloor(BaseModel):
    """Fractions (0.01 = 1%) per metric. `source`: "default" (nothing measured: the configured default),
    "calibration" (A/A stored for this box, profile and engine version)."""

    box: str
    profile: str
    engine: str = ""  # digest of main's measured code the floor was taken with
    source: Literal["default", "calibration"] = "default"
    dspark_decode: float
    ar_decode: float  # the AR ratio over all cells (geomean per round, median over rounds)
    ar_cell: float  # one cell's AR ratio (median over rounds), the worst cell
    guard_decode: float
    guard_prefill: float
    rounds: int = 0  # over every pooled A/A campaign
    base_sha: str = ""
    measured_at: str = ""  # the newest pooled campaign
    aa: list[AAOutcome] = Field(default_factory=list)  # the pooled campaigns, oldest first

    @property
    def campaigns(self) -> int:
        return max(1, len(self.aa)) if self.calibrated else 0

    @property
    def calibrated(self) -> bool:
        return self.source == "calibration"

    @classmethod
    def default(cls, box: str, profile: str, value: float, engine: str = "") -> "NoiseFloor":
        return cls(box=box, profile=profile, engine=engine, source="default", dspark_decode=value, ar_decode=value,
                   ar_cell=value, guard_decode=value, guard_prefill=value)


class NoiseFile(BaseModel):
    version: int = NOISE_VERSION
    floors: dict[str, dict[str, dict[str, NoiseFloor]]] = Field(default_factory=dict)  # box -> profile -> engine

    def latest(self) -> list[NoiseFloor]:
        return [f for profiles in self.floors.values() for engines in profiles.values() for f in engines.values()]


def noise_path(state_dir: Path) -> Path:
    return state_dir / NOISE_FILE


def read_noise_file(path: Path) -> NoiseFile:
    if not path.is_file():
        return NoiseFile()
    try:
        raw = json.loads(path.read_bytes())
        if isinstance(raw, dict) and raw.get("version") != NOISE_VERSION:
            return NoiseFile()  # floors of an older measurement: measured differently, calibrate again
        return NoiseFile.model_validate(raw)
    except (ValidationError, ValueError) as e:
        raise ConfigError(f"{path} is not a valid noise-floor file ({e.__class__.__name__}); re-run `evalbot calibrate`") from None


def load_noise_floor(state_dir: Path, box: str, profile: str, engine: str) -> NoiseFloor | None:
    """The stored floor for this box, profile and engine version, or None (never measured)."""
    return read_noise_file(noise_path(state_dir)).floors.get(box, {}).get(profile, {}).get(engine)


def store_noise_floor(state_dir: Path, floor: NoiseFloor) -> Path:
    path = noise_path(state_dir)
    data = read_noise_file(path)
    data.floors.setdefault(floor.box, {}).setdefault(floor.profile, {})[floor.engine] = floor
    state_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=".noise-")
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(data.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
