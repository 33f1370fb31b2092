"""Deployment settings for the webhook service and the worker, read from the environment.

Every value has one EVALBOT_* variable; docs/deploy.md lists them. A bad value is a clear
`SettingsError` naming the variable, never a traceback.
"""

from __future__ import annotations

import os
import re
import socket
from collections.abc import Mapping
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from evalbot.automerge import DEFAULT_MIN_TIER, TIER_ORDER

_REPO_NAME = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")
_TRUE = {"1", "true", "yes", "on"}
# Secrets may also come from files (systemd LoadCredential=, Kubernetes secrets): EVALBOT_<NAME>_FILE.
# A file keeps the secret out of /proc/<pid>/environ, which unsetenv() cannot scrub.
SECRET_FIELDS = ("webhook_secret", "github_token")
_FALSE = {"0", "false", "no", "off", ""}


class SettingsError(ValueError):
    """A setting is missing or malformed; the message names the environment variable."""


class BotSettings(BaseModel):
    model_config = ConfigDict(frozen=True)

    repo: str = ""  # owner/name of the repository served
    main_branch: str = "main"
    webhook_secret: str = Field(default="", repr=False)
    max_body_bytes: int = 2 * 1024 * 1024
    github_api_url: str = "https://api.github.com"
    github_token: str = Field(default="", repr=False)
    github_app_id: str = ""
    github_app_private_key_path: str = ""
    github_installation_id: str = ""
    github_throttle: bool = True  # PyGithub's pause between requests and writes (GitHub asks for it)
    bot_login: str = ""  # the bot's own login, e.g. dspark-evalbot[bot]; narrows the sticky-comment search
    state_dir: Path = Path(".evalbot")
    redis_url: str = ""  # set: queue, ledger and dedupe live in Redis (many boxes); unset: SQLite
    box_id: str = Field(default_factory=socket.gethostname)
    automerge_default: bool = False
    automerge_min_tier: str = DEFAULT_MIN_TIER
    close_on: frozenset[str] = frozenset()  # tiers that close the PR, e.g. {"REJECT", "none"}
    command_allowlist: frozenset[str] = frozenset()
    receipts_branch: str = "evalbot-receipts"  # empty: receipts are kept only under state_dir
    heartbeat_seconds: float = 15.0
    stale_after_seconds: float = 120.0
    sweep_seconds: float = 30.0
    publish_retry_seconds: float = 60.0
    busy_retry_seconds: float = 15.0  # a job that finds its box busy goes back to the queue for this long
    infra_retry_seconds: float = 60.0  # wait before scoring again after an infrastructure error
    max_attempts: int = 3
    worker_threads: int = 2
    checkout_dir: Path = Path(".")  # this box's clone of the repository (origin = GitHub)
    remote: str = "origin"
    profile: str = ""  # harness profile (cpu|gpu); empty: the evalbot config's default
    # factories "module:function" taking BotSettings and returning the scorer / the publisher
    scorer: str = "evalbot.worker:pipeline_scorer"
    publisher: str = "evalbot.worker:pipeline_publisher"

    @property
    def queue_db_path(self) -> Path:
        return self.state_dir / "queue.sqlite3"

    @property
    def ledger_db_path(self) -> Path:
        return self.state_dir / "ledger.sqlite3"

    @property
    def receipts_dir(self) -> Path:
        return self.state_dir / "receipts"

    def require(self, *names: str) -> None:
        """Fail with one clear message listing every required setting that is empty."""
        missing = [ENV_NAMES[n] for n in names if not getattr(self, n)]
        if missing:
            raise SettingsError("missing setting(s): " + ", ".join(missing))


ENV_NAMES: dict[str, str] = {name: "EVALBOT_" + name.upper() for name in BotSettings.model_fields}
ENV_NAMES["automerge_default"] = "EVALBOT_AUTOMERGE"


def _parse_bool(var: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise SettingsError(f"{var} must be on/off (1/0, true/false), got {raw!r}")


def _parse_set(raw: str) -> frozenset[str]:
    return frozenset(part.strip() for part in raw.split(",") if part.strip())


def settings_from_env(env: Mapping[str, str] | None = None, **overrides) -> BotSettings:
    """Build settings from EVALBOT_* variables (and explicit overrides, which win)."""
    env = os.environ if env is None else env
    values: dict = {}
    for name, field in BotSettings.model_fields.items():
        var = ENV_NAMES[name]
        if var not in env:
            continue
        raw = env[var]
        try:
            if field.annotation is bool:
                values[name] = _parse_bool(var, raw)
            elif field.annotation is int:
                values[name] = int(raw)
            elif field.annotation is float:
                values[name] = float(raw)
            elif name in ("close_on", "command_allowlist"):
                values[name] = _parse_set(raw)
            elif name in ("state_dir", "checkout_dir"):
                values[name] = Path(raw)
            else:
                values[name] = raw.strip()
        except ValueError as exc:
            if isinstance(exc, SettingsError):
                raise
            raise SettingsError(f"{var} must be a number, got {raw!r}") from None
    for name in SECRET_FIELDS:
        path = env.get(ENV_NAMES[name] + "_FILE")
        if path and name not in values:
            try:
                values[name] = Path(path).read_text().strip()
            except OSError as exc:
                raise SettingsError(f"{ENV_NAMES[name]}_FILE: cannot read {path}: {exc.strerror}") from None
    values.update(overrides)
    settings = BotSettings(**values)
    _validate(settings)
    return settings


def _validate(s: BotSettings) -> None:
    if s.repo and not _REPO_NAME.match(s.repo):
        raise SettingsError(f"EVALBOT_REPO must look like owner/name, got {s.repo!r}")
    if s.automerge_min_tier not in TIER_ORDER[1:]:
        raise SettingsError(
            f"EVALBOT_AUTOMERGE_MIN_TIER must be one of {', '.join(TIER_ORDER[1:])}, got {s.automerge_min_tier!r}"
        )
    unknown = s.close_on - {"REJECT", "none"}
    if unknown:
        raise SettingsError(f"EVALBOT_CLOSE_ON may hold only REJECT and none, got {sorted(unknown)}")
    if s.max_body_bytes < 1024:
        raise SettingsError("EVALBOT_MAX_BODY_BYTES must be at least 1024")
    if s.heartbeat_seconds <= 0 or s.stale_after_seconds <= s.heartbeat_seconds:
        raise SettingsError("EVALBOT_STALE_AFTER_SECONDS must exceed EVALBOT_HEARTBEAT_SECONDS (> 0)")
    if s.profile not in ("", "cpu", "gpu"):
        raise SettingsError(f"EVALBOT_PROFILE must be cpu or gpu, got {s.profile!r}")
    if s.max_attempts < 1 or s.worker_threads < 1:
        raise SettingsError("EVALBOT_MAX_ATTEMPTS and EVALBOT_WORKER_THREADS must be at least 1")
