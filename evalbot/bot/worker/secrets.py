"""The worker keeps its secrets in memory only: nothing it starts can read them from its environment."""

from __future__ import annotations

import os

SECRET_ENV_VARS = ("EVALBOT_GITHUB_TOKEN", "EVALBOT_WEBHOOK_SECRET", "GITHUB_TOKEN", "GH_TOKEN", "EVALBOT_REDIS_URL")


def scrub_secrets_from_environment() -> None:
    for name in SECRET_ENV_VARS:
        os.environ.pop(name, None)
