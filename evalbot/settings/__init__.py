"""One settings system for the whole bot (pydantic-settings): the model tree in `model` and
`sections`, the tier vocabulary in `tiers`, where values come from in `loading`."""

from evalbot.settings.loading import STATE_DIR_NAME, config_file, load_settings
from evalbot.settings.model import ScoringSettings, Settings, env_name
from evalbot.settings.sections import (
    PROGRAMS,
    EnvPolicy,
    HarnessCommands,
    IntegritySettings,
    ProfileSettings,
    ProgramTimeouts,
    SandboxSettings,
    StatsSettings,
    Thresholds,
)
from evalbot.settings.tiers import TierBand, TierSettings

__all__ = [
    "PROGRAMS", "STATE_DIR_NAME", "EnvPolicy", "HarnessCommands", "IntegritySettings", "ProfileSettings",
    "ProgramTimeouts", "SandboxSettings", "ScoringSettings", "Settings", "StatsSettings", "Thresholds", "TierBand",
    "TierSettings", "config_file", "env_name", "load_settings",
]
