"""Which harness profile this box measures with when nobody names one."""

from __future__ import annotations

import os

from evalbot.settings import ScoringSettings


def default_profile() -> str:
    """gpu where CUDA is available (as the harness itself decides), else cpu."""
    try:
        import torch  # imported here: only a command that needs the default pays for it
    except ImportError:  # pragma: no cover - torch is a dependency
        return "cpu"
    return "gpu" if torch.cuda.is_available() else "cpu"


def profile_for(settings: ScoringSettings, requested: str | None = None) -> str:
    """The profile to run: the one asked for, else the configured one, else this box's default."""
    return requested or settings.profile or default_profile()


def cpu_cores() -> int:
    """The cores this process may run on."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1
