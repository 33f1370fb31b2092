"""One settings system for the whole bot (pydantic-settings): the model tree in `model` and
`sections`, the tier vocabulary in `tiers`, where values come from in `loading`."""

from evalbot.settings.loading import STATE_DIR_NAME, config_file, load_settings
from evalbot.settings.model import ScoringSettings, Settings, env_name
from evalbot.settings.measurement import GuardPlan, HarnessServer, ProfileSettings
from evalbot.settings.sections import EnvPolicy, IntegritySettings, SandboxSettings, StatsSettings, Thresholds
from evalbot.settings.tiers import TierBand, TierSettings

__all__ = [
    "STATE_DIR_NAME", "EnvPolicy", "GuardPlan", "HarnessServer", "IntegritySettings", "ProfileSettings", "SandboxSettings", "ScoringSettings", "Settings", "StatsSettings", "Thresholds", "TierBand",
    "TierSettings", "config_file", "env_name", "load_settings",
]
