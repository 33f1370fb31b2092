"""One GitHubForge per repository the worker serves, built from the settings (token or GitHub App)."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

from evalbot.errors import ConfigError
from evalbot.forge.base import Forge
from evalbot.settings import Settings, env_name


def github_forge_factory(settings: Settings, observer: Callable[[str, float], None] | None = None) -> Callable[[str], Forge]:
    from evalbot.forge.github import GitHubForge  # PyGithub only where GitHub is used

    cache: dict[str, Forge] = {}
    lock = threading.Lock()
    key_text = ""
    if settings.github_app_id:
        try:
            key_text = Path(settings.github_app_private_key_path).read_text()
        except OSError as exc:
            raise ConfigError(f"{env_name('github_app_private_key_path')}: cannot read "
                              f"{settings.github_app_private_key_path!r}: {exc.strerror}") from None
    elif not settings.github_token:
        raise ConfigError("set EVALBOT_GITHUB_TOKEN, or EVALBOT_GITHUB_APP_ID with EVALBOT_GITHUB_APP_PRIVATE_KEY_PATH "
                          "and EVALBOT_GITHUB_INSTALLATION_ID")

    def forge_for(repo: str) -> Forge:
        with lock:
            if repo not in cache:
                common = dict(base_url=settings.github_api_url, receipts_branch=settings.receipts_branch,
                              receipts_dir=settings.receipts_dir, bot_login=settings.bot_login,
                              throttle=settings.github_throttle, tiers=settings.tiers, templates=settings.templates_dir,
                              observer=observer)
                if settings.github_app_id:
                    cache[repo] = GitHubForge.from_app(settings.github_app_id, key_text, int(settings.github_installation_id),
                                                       repo, **common)
                else:
                    cache[repo] = GitHubForge.from_token(settings.github_token, repo, **common)
            return cache[repo]

    return forge_for
