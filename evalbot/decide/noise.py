"""The noise floor of a box: how far PR/main ratios stray when PR *is* main (A/A).

`evalbot calibrate` runs base against itself and keeps, per metric, how far from 1 the statistic
its gate reads strayed (times a margin; `calibration.noise_from_aa`), in `.evalbot/noise-floor.json`,
keyed by box and profile. Gates subtract it from their bars
and the tier needs the speedup's CI to clear it, so an A/A run never REJECTs and never wins a tier.
"""

from __future__ import annotations

import json
import os
import tempfile
from datetime import datetime, timezone
from pathlib import Path

from pydantic import BaseModel, Field, ValidationError

from evalbot.errors import ConfigError

NOISE_FILE = "noise-floor.json"


class NoiseFloor(BaseModel):
    """Fractions (0.01 = 1%) per metric; `calibrated` False means the configured default."""

    box: str
    profile: str
    calibrated: bool = False
    dspark_decode: float
    ar_decode: float
    guard_decode: float
    guard_prefill: float
    tau_check_wall: float  # relative wall-time spread of a whole tau_check subprocess
    rounds: int = 0
    base_sha: str = ""
    measured_at: str = ""

    @classmethod
    def default(cls, box: str, profile: str, value: float) -> "NoiseFloor":
        return cls(
            box=box, profile=profile, calibrated=False, dspark_decode=value, ar_decode=value,
            guard_decode=value, guard_prefill=value, tau_check_wall=value,
        )


class NoiseFile(BaseModel):
    version: int = 1
    floors: dict[str, dict[str, NoiseFloor]] = Field(default_factory=dict)  # box -> profile -> floor


def noise_path(state_dir: Path) -> Path:
    return state_dir / NOISE_FILE


def _read(path: Path) -> NoiseFile:
    if not path.is_file():
        return NoiseFile()
    try:
        return NoiseFile.model_validate_json(path.read_bytes())
    except (ValidationError, ValueError) as e:
        raise ConfigError(f"{path} is not a valid noise-floor file ({e.__class__.__name__}); re-run `evalbot calibrate`") from None


def load_noise_floor(state_dir: Path, box: str, profile: str, default: float) -> NoiseFloor:
    floor = _read(noise_path(state_dir)).floors.get(box, {}).get(profile)
    return floor if floor is not None else NoiseFloor.default(box, profile, default)


def store_noise_floor(state_dir: Path, floor: NoiseFloor) -> Path:
    path = noise_path(state_dir)
    data = _read(path)
    data.floors.setdefault(floor.box, {})[floor.profile] = floor
    state_dir.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=state_dir, prefix=".noise-")
    with os.fdopen(fd, "w") as f:
        f.write(json.dumps(data.model_dump(mode="json"), indent=2, sort_keys=True) + "\n")
    os.replace(tmp, path)
    return path


def utc_now() -> str:
    return datetime.now(timezone.utc).replace(microsecond=0).isoformat().replace("+00:00", "Z")
