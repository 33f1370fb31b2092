"""Where settings come from (later wins): the defaults, a settings file, a secrets directory, the
`EVALBOT_*_FILE` secret files, the environment, then what the caller passes.

- file: `--config PATH`, else `$EVALBOT_CONFIG`, else `<repo>/.evalbot/config.toml` if it exists
  (`config_file`; for the bot, the repo is its checkout). TOML, or JSON when the name ends in .json.
  It mirrors the model: `[thresholds] ar_ratio_min = 0.97`, `[profiles.gpu] budget_s = 300`, `repo = "o/r"`.
- environment: `EVALBOT_<FIELD>` (`EVALBOT_REPO`, `EVALBOT_BOX`, `EVALBOT_SIGNING_KEY`) and
  `EVALBOT_<SECTION>__<FIELD>` for a nested one (`EVALBOT_PROFILES__GPU__ROUNDS=5`); lists and tables
  as JSON, `close_on` and `command_allowlist` comma-separated.
- secrets: `EVALBOT_WEBHOOK_SECRET_FILE` / `EVALBOT_GITHUB_TOKEN_FILE` name a file holding the secret,
  and `$EVALBOT_SECRETS_DIR` a directory of files named after the variables (systemd credentials):
  a file keeps the secret out of /proc/<pid>/environ, which unsetenv() cannot scrub.

Unknown keys are errors (a typo in a threshold must not silently keep the default), and every error
is one line naming the environment variable or the file key.
"""

from __future__ import annotations

import os
import re
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import ValidationError
from pydantic_settings import (
    BaseSettings,
    EnvSettingsSource,
    JsonConfigSettingsSource,
    PydanticBaseSettingsSource,
    SecretsSettingsSource,
    SettingsError,
    TomlConfigSettingsSource,
)
from pydantic_settings.sources.utils import parse_env_vars

from evalbot.errors import ConfigError
from evalbot.settings.model import ENV_NESTED_DELIMITER, ENV_PREFIX, Settings, env_name

STATE_DIR_NAME = ".evalbot"
CONFIG_ENV = "EVALBOT_CONFIG"
SECRETS_DIR_ENV = "EVALBOT_SECRETS_DIR"
SECRET_FILE_FIELDS = ("webhook_secret", "github_token")  # EVALBOT_<NAME>_FILE names a file holding it
_NOT_SETTINGS = {CONFIG_ENV, SECRETS_DIR_ENV, "EVALBOT_DEBUG"}  # EVALBOT_* variables that steer the loading
RENAMED = {"box_id": "box", "default_profile": "profile"}  # a name of an earlier version -> the setting now


def config_file(repo: Path | None, explicit: Path | None, environ: Mapping[str, str]) -> Path | None:
    """The settings file: `--config`, else `$EVALBOT_CONFIG`, else `<repo>/.evalbot/config.toml` if it
    exists. The one place that decides where the file lives."""
    if explicit is not None:
        return explicit
    if environ.get(CONFIG_ENV):
        return Path(environ[CONFIG_ENV])
    if repo is not None:
        candidate = repo / STATE_DIR_NAME / "config.toml"
        if candidate.is_file():
            return candidate
    return None


class _EnvironSource(EnvSettingsSource):
    """EnvSettingsSource over a given mapping (the caller's environment) instead of os.environ."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]):
        self._environ = environ
        super().__init__(settings_cls)

    def _load_env_vars(self) -> Mapping[str, str | None]:
        return parse_env_vars(self._environ, self.case_sensitive, self.env_ignore_empty, self.env_parse_none_str)


class _SecretFilesSource(PydanticBaseSettingsSource):
    """`EVALBOT_<NAME>_FILE=path`: the secret is the file's content (stripped)."""

    def __init__(self, settings_cls: type[BaseSettings], environ: Mapping[str, str]):
        super().__init__(settings_cls)
        self.values: dict[str, str] = {}
        for name in SECRET_FILE_FIELDS:
            var = env_name(name) + "_FILE"
            path = environ.get(var)
            if not path:
                continue
            try:
                self.values[name] = Path(path).read_text().strip()
            except OSError as exc:
                raise ConfigError(f"{var}: cannot read {path}: {exc.strerror}") from None

    def get_field_value(self, field: Any, field_name: str) -> tuple[Any, str, bool]:
        return self.values.get(field_name), field_name, False

    def __call__(self) -> dict[str, Any]:
        return dict(self.values)


def _file_source(settings_cls: type[BaseSettings], path: Path) -> PydanticBaseSettingsSource:
    try:
        path.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        if path.suffix == ".json":
            source: PydanticBaseSettingsSource = JsonConfigSettingsSource(settings_cls, json_file=path)
        else:
            source = TomlConfigSettingsSource(settings_cls, toml_file=path)
    except (ValueError, UnicodeDecodeError, tomllib.TOMLDecodeError) as e:
        raise ConfigError(f"config file {path} does not parse: {e}") from None
    data = source()
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a table/object at the top")
    return source


def _check_names(environ: Mapping[str, str]) -> None:
    """`EVALBOT_<SECTION>__...` must name a section (a typo there would otherwise be ignored), and a
    variable of an earlier version says what it is called now instead of being ignored."""
    for var in environ:
        upper = var.upper()
        old = upper[len(ENV_PREFIX):].lower() if upper.startswith(ENV_PREFIX) else ""
        if old in RENAMED:
            raise ConfigError(f"{var} is {env_name(RENAMED[old])} now")
        if not upper.startswith(ENV_PREFIX) or ENV_NESTED_DELIMITER not in upper[len(ENV_PREFIX):]:
            continue
        rest = upper[len(ENV_PREFIX):]
        section = rest.split(ENV_NESTED_DELIMITER, 1)[0].lower()
        if section not in Settings.model_fields:
            if rest.startswith("_"):  # the EVALBOT__SECTION__FIELD spelling of earlier versions
                raise ConfigError(f"{var}: settings variables are EVALBOT_<SECTION>__<FIELD> now (one underscore after EVALBOT)")
            raise ConfigError(f"{var}: there is no setting {section!r}")


def _has_path(data: Any, path: tuple) -> bool:
    for part in path:
        if not isinstance(data, dict) or part not in data:
            return False
        data = data[part]
    return True


def _problem(error: dict) -> str:
    value = error.get("input")
    kind = error["type"]
    if kind == "extra_forbidden":
        renamed = RENAMED.get(str(error["loc"][-1]))
        return f"is not a known setting (it is `{renamed}` now)" if renamed else "is not a known setting"
    if kind in ("int_parsing", "float_parsing", "int_from_float"):
        return f"must be a number, got {value!r}"
    if kind == "bool_parsing":
        return f"must be on/off (1/0, true/false), got {value!r}"
    message = error["msg"]
    if message.startswith("Value error, "):
        return message[len("Value error, "):]
    return f"is invalid: {message[0].lower()}{message[1:]}"


def _where(loc: tuple, sources: list[tuple[str, dict]]) -> str:
    """Name the setting as the user wrote it: the environment variable, or the key in the file."""
    for label, data in sources:
        if _has_path(data, loc[:1]) and (len(loc) == 1 or _has_path(data, loc)):
            if label == "env":
                return env_name(*map(str, loc))
            if label == "secret file":
                return env_name(str(loc[0])) + "_FILE"
            return f"{'.'.join(map(str, loc))} in {label}"
    return ".".join(map(str, loc))


def load_settings(
    repo: Path | None = None,
    config: Path | None = None,
    /,
    environ: Mapping[str, str] | None = None,
    **overrides: Any,
) -> Settings:
    """Settings for a repository (`repo`; the bot passes none and its checkout is used).

    `overrides` win over everything (tests; the CLI's flags). Raises ConfigError, one line.
    """
    try:
        return _load(repo, config, os.environ if environ is None else environ, overrides)
    except SettingsError as e:  # a value from the environment that is not the JSON its field needs
        field = re.search(r'field "(\w+)" from source "_EnvironSource"', str(e))
        if field:
            raise ConfigError(f"{env_name(field.group(1))} must be JSON (a list or a table)") from None
        raise ConfigError(f"invalid settings: {e}") from None


def _load(repo: Path | None, config: Path | None, given: Mapping[str, str], overrides: dict[str, Any]) -> Settings:
    environ = {k: v for k, v in given.items() if k.upper() not in _NOT_SETTINGS}
    _check_names(environ)
    if repo is None:
        found = _EnvironSource(Settings, environ)()
        repo = Path(overrides.get("checkout_dir") or found.get("checkout_dir") or ".")
    path = config_file(repo, config, given)
    secrets_dir = given.get(SECRETS_DIR_ENV)

    def customise(cls, settings_cls, init_settings, **_):
        sources: list[PydanticBaseSettingsSource] = [init_settings, _EnvironSource(settings_cls, environ),
                                                     _SecretFilesSource(settings_cls, environ)]
        if secrets_dir:
            sources.append(SecretsSettingsSource(settings_cls, secrets_dir=secrets_dir))
        if path is not None:
            sources.append(_file_source(settings_cls, path))
        return tuple(sources)

    loaded = type("LoadedSettings", (Settings,), {"settings_customise_sources": classmethod(customise)})
    try:
        # re-validated as a plain Settings, so what callers hold is the one importable (and picklable) class
        return Settings.model_validate(dict(loaded(**overrides)))
    except ValidationError as e:
        first = e.errors()[0]
        sources = [("env", _EnvironSource(Settings, environ)()), ("secret file", _SecretFilesSource(Settings, environ)())]
        if secrets_dir:
            sources.append((f"the secrets directory {secrets_dir}", SecretsSettingsSource(Settings, secrets_dir=secrets_dir)()))
        if path is not None:
            sources.append((str(path), _file_source(Settings, path)()))
        problem = _problem(first)
        joiner = " " if problem.startswith(("must ", "may ", "is ")) else ": "
        raise ConfigError(f"{_where(tuple(first['loc']), sources)}{joiner}{problem}") from None
