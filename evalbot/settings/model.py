"""The one settings tree: what a score is decided with (`ScoringSettings`, recorded in every receipt)
and how the bot is deployed (`Settings`: the webhook service, the queue, the worker).

Constructing `Settings()` gives the defaults only; `evalbot.settings.loading.load_settings` adds the
settings file, the secrets and the environment. Field names are the file keys; the environment
variable of a field is `EVALBOT_<FIELD>`, of a nested one `EVALBOT_<SECTION>__<FIELD>`.
"""

from __future__ import annotations

import re
import socket
from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import Field, ValidationInfo, field_validator
from pydantic_settings import BaseSettings, NoDecode, PydanticBaseSettingsSource, SettingsConfigDict

from evalbot.errors import ConfigError
from evalbot.settings.measurement import HarnessServer, ProfileSettings, default_profiles
from evalbot.settings.sections import EnvPolicy, IntegritySettings, SandboxSettings, StatsSettings, Thresholds
from evalbot.settings.tiers import DEFAULT_MIN_TIER, TierSettings

ENV_PREFIX = "EVALBOT_"
ENV_NESTED_DELIMITER = "__"
_REPO_NAME = re.compile(r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")


def _deep_merge(base: dict[str, Any], override: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = _deep_merge(out[key], value)
        else:
            out[key] = value
    return out


def _comma_set(value: Any) -> Any:
    """`REJECT,none` from the environment; a list from a file."""
    if isinstance(value, str):
        return frozenset(part.strip() for part in value.split(",") if part.strip())
    return value


class ScoringSettings(BaseSettings):
    """Every number the bot decides with, and how it measures. Recorded in each receipt."""

    model_config = SettingsConfigDict(
        env_prefix=ENV_PREFIX, env_nested_delimiter=ENV_NESTED_DELIMITER, extra="forbid", frozen=True,
    )

    thresholds: Thresholds = Field(default_factory=Thresholds)
    tiers: TierSettings = Field(default_factory=TierSettings)
    integrity: IntegritySettings = Field(default_factory=IntegritySettings)
    stats: StatsSettings = Field(default_factory=StatsSettings)
    profiles: dict[str, ProfileSettings] = Field(default_factory=default_profiles)
    harness: HarnessServer = Field(default_factory=HarnessServer)
    env: EnvPolicy = Field(default_factory=EnvPolicy)
    sandbox: SandboxSettings = Field(default_factory=SandboxSettings)
    # The harness profile when a command or job names none; None: gpu where CUDA is available, else cpu.
    profile: str | None = None
    harness_manifest: str = "harness/HARNESS_PATHS"
    remote: str = "origin"  # the harness comes from <remote>/<base> when that ref exists; the worker fetches from it
    signing_key: Path | None = None  # the Ed25519 private key that signs receipts; None: "collected, not signed"
    box: str | None = None  # name of the measuring box (noise floors, box lock, worker ids); None: the host name
    templates_dir: Path | None = None  # None: the templates shipped in evalbot/report/templates/
    stderr_tail_lines: int = 30
    # Score the merge of the PR into main's tip (what would land), not the PR head as it stands.
    score_merge: bool = True

    @classmethod
    def settings_customise_sources(
        cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource, **_: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        # Plain construction reads nothing from outside; load_settings() adds the file, secrets, environment.
        return (init_settings,)

    @field_validator("profiles", mode="before")
    @classmethod
    def _profiles_extend_the_defaults(cls, value: Any) -> Any:
        # `[profiles.gpu] budget_s = 300` changes that one field; every other default stays.
        if isinstance(value, dict):
            defaults = {name: p.model_dump() for name, p in default_profiles().items()}
            return _deep_merge(defaults, {k: (v.model_dump() if isinstance(v, ProfileSettings) else v) for k, v in value.items()})
        return value

    @field_validator("profile")
    @classmethod
    def _known_profile(cls, value: str | None, info: ValidationInfo) -> str | None:
        known = info.data.get("profiles") or {}
        if value is not None and known and value not in known:
            raise ValueError(f"must name a profile ({', '.join(sorted(known))}), got {value!r}")
        return value

    def profile_settings(self, name: str) -> ProfileSettings:
        try:
            return self.profiles[name]
        except KeyError:
            known = ", ".join(sorted(self.profiles))
            raise ConfigError(f"unknown profile {name!r} (known: {known})") from None

    def box_name(self) -> str:
        return self.box or socket.gethostname()

    def scoring_dump(self) -> dict[str, Any]:
        """What the receipt records of the settings (the key's path is not the verifier's business)."""
        return self.model_dump(mode="json", include=set(ScoringSettings.model_fields) - {"signing_key"})


class Settings(ScoringSettings):
    """The scoring settings plus the deployment: webhook service, queue and worker (docs/deploy.md)."""

    repo: str = ""  # owner/name of the repository served
    main_branch: str = "main"
    webhook_secret: str = Field(default="", repr=False, exclude=True)
    max_body_bytes: int = 2 * 1024 * 1024
    github_api_url: str = "https://api.github.com"
    github_token: str = Field(default="", repr=False, exclude=True)
    github_app_id: str = ""
    github_app_private_key_path: str = ""
    github_installation_id: str = ""
    github_throttle: bool = True  # PyGithub's pause between requests and writes (GitHub asks for it)
    bot_login: str = ""  # the bot's own login, e.g. dspark-evalbot[bot]; unset: asked of GitHub (the sticky is only its own)
    state_dir: Path = Path(".evalbot")
    redis_url: str = Field(default="", repr=False, exclude=True)  # set: queue, ledger, dedupe in Redis (many boxes)
    automerge: bool = False  # the default until a maintainer says /automerge on|off
    automerge_min_tier: str = DEFAULT_MIN_TIER
    close_on: Annotated[frozenset[str], NoDecode] = frozenset()  # tiers that close the PR, e.g. {"REJECT", "none"}
    command_allowlist: Annotated[frozenset[str], NoDecode] = frozenset()
    receipts_branch: str = "evalbot-receipts"  # empty: receipts are kept only under state_dir
    heartbeat_seconds: float = 15.0
    stale_after_seconds: float = 120.0
    sweep_seconds: float = 30.0
    publish_retry_seconds: float = 60.0
    busy_retry_seconds: float = 15.0  # a job that finds its box busy goes back to the queue for this long
    infra_retry_seconds: float = 60.0  # wait before scoring again after an infrastructure error
    progress_seconds: float = 10.0  # at most one check-run progress update per this many seconds
    max_attempts: int = 3
    worker_threads: int = 2
    checkout_dir: Path = Path(".")  # this box's clone of the repository (remote `remote`, normally GitHub)
    # private texts <name>.txt the windows are cut from, outside the repository; None: main's harness/prompts
    # (public: contributors can tune on them; fine for the demo and CI, not for a paid-speedup bot)
    corpora_dir: Path | None = None
    # factories "module:function" taking Settings and returning the scorer / the publisher
    scorer: str = "evalbot.bot.worker.scoring:pipeline_scorer"
    publisher: str = "evalbot.bot.worker.scoring:pipeline_publisher"
    # -- GitHub conventions, the service's limits, the dashboard (docs/deploy.md) --
    public_url: str = ""  # e.g. https://evalbot.example.org: the check run's Details link and the dashboard's
    require_ok_to_test: bool = True  # fork PRs by non-maintainers wait for a maintainer's /ok-to-test
    refusal_window_seconds: float = 3600.0  # one refusal (or help, or usage) reply per person and PR per window
    webhook_deadline_seconds: float = 8.0  # every delivery is answered within this (GitHub gives up after 10 s)
    ledger_busy_seconds: float = 2.0  # how long the webhook waits for a locked ledger before answering 503
    client_timeout_seconds: float = 10.0  # a connection must deliver its whole request within this
    max_connections: int = 256  # open connections the service keeps (the oldest stalled one makes room)
    forge_retry_seconds: float = 30.0  # GitHub unreachable when a job starts: wait this, doubling, at most 10 min
    stop_timeout_seconds: float = 20.0  # SIGTERM: how long the worker waits for the interrupted score to unwind
    dashboard: bool = True  # serve /dashboard from `evalbot serve`
    history_db: Path | None = None  # the history's SQLite file; None: <state dir>/history.sqlite3 (bot), <repo>/.evalbot/ (CLI)
    log_format: Literal["json", "text"] = "json"  # `serve` and `worker` logs: JSON lines (structlog), or plain text

    @field_validator("public_url")
    @classmethod
    def _http_url(cls, value: str) -> str:
        if value and not re.match(r"^https?://[^\s/]+(/[^\s]*)?$", value):
            raise ValueError(f"must be an http(s):// URL, got {value!r}")
        return value.rstrip("/")

    @field_validator("webhook_deadline_seconds", "ledger_busy_seconds", "client_timeout_seconds", "forge_retry_seconds",
                     "stop_timeout_seconds", "refusal_window_seconds")
    @classmethod
    def _positive_seconds(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be above 0")
        return value

    @field_validator("automerge", "github_throttle", "require_ok_to_test", "dashboard", mode="before")
    @classmethod
    def _empty_is_off(cls, value: Any) -> Any:
        return False if isinstance(value, str) and not value.strip() else value

    @field_validator("close_on", "command_allowlist", mode="before")
    @classmethod
    def _split_commas(cls, value: Any) -> Any:
        return _comma_set(value)

    @field_validator("repo")
    @classmethod
    def _owner_slash_name(cls, value: str) -> str:
        if value and not _REPO_NAME.match(value):
            raise ValueError(f"must look like owner/name, got {value!r}")
        return value

    @field_validator("automerge_min_tier")
    @classmethod
    def _a_tier_above_none(cls, value: str, info: ValidationInfo) -> str:
        tiers: TierSettings = info.data.get("tiers") or TierSettings()
        if value not in tiers.order[1:]:
            raise ValueError(f"must be one of {', '.join(tiers.order[1:])}, got {value!r}")
        return value

    @field_validator("close_on")
    @classmethod
    def _closing_tiers(cls, value: frozenset[str], info: ValidationInfo) -> frozenset[str]:
        tiers: TierSettings = info.data.get("tiers") or TierSettings()
        unknown = value - {tiers.reject_name, tiers.none_name}
        if unknown:
            raise ValueError(f"may hold only {tiers.reject_name} and {tiers.none_name}, got {sorted(unknown)}")
        return value

    @field_validator("max_body_bytes")
    @classmethod
    def _at_least_a_kilobyte(cls, value: int) -> int:
        if value < 1024:
            raise ValueError("must be at least 1024")
        return value

    @field_validator("heartbeat_seconds")
    @classmethod
    def _positive_beat(cls, value: float) -> float:
        if value <= 0:
            raise ValueError("must be above 0")
        return value

    @field_validator("stale_after_seconds")
    @classmethod
    def _longer_than_a_beat(cls, value: float, info: ValidationInfo) -> float:
        beat = info.data.get("heartbeat_seconds")
        if beat is not None and value <= beat:
            raise ValueError(f"must exceed heartbeat_seconds ({beat:g})")
        return value

    @field_validator("max_attempts", "worker_threads", "max_connections")
    @classmethod
    def _at_least_one(cls, value: int) -> int:
        if value < 1:
            raise ValueError("must be at least 1")
        return value

    @property
    def queue_db_path(self) -> Path:
        return self.state_dir / "queue.sqlite3"

    @property
    def ledger_db_path(self) -> Path:
        return self.state_dir / "ledger.sqlite3"

    @property
    def receipts_dir(self) -> Path:
        return self.state_dir / "receipts"

    @property
    def history_path(self) -> Path:
        return self.history_db or self.state_dir / "history.sqlite3"

    @property
    def box_lock_path(self) -> Path:
        return self.state_dir / f"box-{self.box_name()}.lock"

    def require(self, *names: str) -> None:
        """Fail with one clear message listing every required setting that is empty."""
        missing = [env_name(name) for name in names if not getattr(self, name)]
        if missing:
            raise ConfigError("missing setting(s): " + ", ".join(missing))


def env_name(*path: str) -> str:
    """The environment variable of a setting: ("stats", "confidence") -> EVALBOT_STATS__CONFIDENCE."""
    return ENV_PREFIX + ENV_NESTED_DELIMITER.join(path).upper()
