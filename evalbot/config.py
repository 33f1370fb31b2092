"""Every number the bot decides with, in one place.

Settings come from (later wins): the defaults below, a TOML or JSON file, then the environment.

- file: `--config PATH`, else `$EVALBOT_CONFIG`, else `<repo>/.evalbot/config.toml` if it exists.
  The file mirrors the model: `[thresholds] ar_ratio_min = 0.97`, `[profiles.gpu] rounds = 5`.
- environment: `EVALBOT_SIGNING_KEY` (path of the Ed25519 private key), `EVALBOT_BOX` (name of
  the measuring box), and any field as `EVALBOT__SECTION__FIELD=value` (value parsed as JSON when
  it parses, else taken as a string), e.g. `EVALBOT__PROFILES__GPU__ROUNDS=5`.

Unknown keys are errors: a typo in a threshold must not silently keep the default.
"""

from __future__ import annotations

import json
import os
import socket
import string
import tomllib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from evalbot.errors import ConfigError

STATE_DIR_NAME = ".evalbot"
PROGRAMS = ("tau_check", "score", "compare", "guard")


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Thresholds(_Strict):
    """Gate bars (any failure -> REJECT). Ratios are PR / main."""

    min_lossless_runs: int = 3
    tau_ratio_min: float = 0.95
    top1_min: float = 0.9
    kl_max: float = 0.1
    min_compare_positions: int = 512
    ar_ratio_min: float = 0.98
    guard_decode_ratio_min: float = 0.98
    guard_prefill_ratio_min: float = 0.98


class TierBand(_Strict):
    name: str
    min_pct: float  # lower bound, inclusive, of the DSpark decode speedup in percent


class TierSettings(_Strict):
    bands: list[TierBand] = Field(
        default_factory=lambda: [
            TierBand(name="XS", min_pct=2.0),
            TierBand(name="S", min_pct=3.5),
            TierBand(name="M", min_pct=6.0),
            TierBand(name="L", min_pct=10.0),
            TierBand(name="XL", min_pct=18.0),
        ]
    )
    none_name: str = "none"
    reject_name: str = "REJECT"
    label_prefixes: tuple[str, ...] = ("eval-dspark:", "eval:")

    @field_validator("bands")
    @classmethod
    def _ascending(cls, bands: list[TierBand]) -> list[TierBand]:
        if not bands:
            raise ValueError("at least one tier band is needed")
        lows = [b.min_pct for b in bands]
        if lows != sorted(lows) or len(set(lows)) != len(lows):
            raise ValueError("tier bands must have strictly ascending min_pct")
        if lows[0] <= 0:
            raise ValueError("the lowest tier must start above 0%")
        return bands


class IntegritySettings(_Strict):
    """Anti-forgery tolerances (evalbot.forgery)."""

    tps_rel_tolerance: float = 0.01  # tps must equal tokens / decode seconds within this
    # Wall-clock cross-check: a claimed decode saving of S seconds must show up as at least
    # `wallclock_min_fraction * S - slack` seconds less subprocess wall time, where slack is the
    # larger of `wallclock_slack_s` and the calibrated wall-time noise of the box.
    wallclock_min_fraction: float = 0.5
    wallclock_slack_s: float = 1.0
    # Streams shorter than new_tokens are plausible only if they end in one of these ids; with
    # none configured a short stream is accepted (the AR/DSpark comparison still binds it).
    eos_token_ids: list[int] = Field(default_factory=list)


class StatsSettings(_Strict):
    bootstrap_resamples: int = 2000
    bootstrap_seed: int = 20240229
    confidence: float = 0.95
    # Used for every metric until `evalbot calibrate` has measured this box and profile.
    default_noise_floor: float = 0.01
    # The stored floor is the A/A deviation of each gated statistic times this margin: a later A/A run may
    # stray a little further than the calibration rounds did.
    noise_margin: float = 1.5


class ProgramTimeouts(_Strict):
    tau_check: float = 1800.0
    score: float = 900.0
    compare: float = 300.0
    guard: float = 1800.0


class ProfileSettings(_Strict):
    rounds: int = 3
    reps: int = 3  # DSpark runs per context requested from harness.tau_check
    timeouts: ProgramTimeouts = Field(default_factory=ProgramTimeouts)

    @field_validator("rounds", "reps")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be at least 1")
        return v


def _default_profiles() -> dict[str, ProfileSettings]:
    return {
        "cpu": ProfileSettings(
            rounds=2,
            timeouts=ProgramTimeouts(tau_check=900, score=600, compare=300, guard=900),
        ),
        "gpu": ProfileSettings(rounds=3),
    }


class HarnessCommands(_Strict):
    """The exact argv (after the interpreter) of each harness program.

    Placeholders: {profile} {nonce} {reps} {out} {main_file} {pr_file}. Every program gets the
    run's nonce and must echo it on every line (docs/harness.md). `python` None = the bot's own
    interpreter (sys.executable).
    """

    python: str | None = None
    tau_check: list[str] = Field(
        default_factory=lambda: [
            "-m", "harness.tau_check", "--profile", "{profile}", "--reps", "{reps}", "--nonce", "{nonce}",
        ]
    )
    score: list[str] = Field(
        default_factory=lambda: [
            "-m", "harness.score", "--profile", "{profile}", "--out", "{out}", "--nonce", "{nonce}",
        ]
    )
    compare: list[str] = Field(
        default_factory=lambda: ["-m", "harness.compare", "{main_file}", "{pr_file}", "--nonce", "{nonce}"]
    )
    guard: list[str] = Field(
        default_factory=lambda: ["-m", "harness.guard", "--profile", "{profile}", "--nonce", "{nonce}"]
    )

    @model_validator(mode="after")
    def _known_placeholders(self) -> "HarnessCommands":
        allowed = {"profile", "nonce", "reps", "out", "main_file", "pr_file"}
        for program in PROGRAMS:
            for arg in getattr(self, program):
                for _, name, _, _ in string.Formatter().parse(arg):
                    if name is not None and name not in allowed:
                        raise ValueError(f"harness.{program}: unknown placeholder {{{name}}}")
            if not any("{nonce}" in arg for arg in getattr(self, program)):
                raise ValueError(f"harness.{program}: the command must pass {{nonce}}")
        return self

    def argv(self, program: str, python: str, **values: str) -> list[str]:
        return [python] + [arg.format_map(values) for arg in getattr(self, program)]


class EnvPolicy(_Strict):
    """What a harness subprocess may see of the bot's environment: allow-listed names that match
    no deny pattern (deny wins). Patterns are shell globs on the upper-cased name."""

    allow: list[str] = Field(
        default_factory=lambda: [
            "PATH", "HOME", "USER", "LOGNAME", "LANG", "LANGUAGE", "LC_*", "TERM", "TZ", "TMPDIR",
            "CUDA_VISIBLE_DEVICES", "CUDA_HOME", "CUDA_PATH", "CUDA_DEVICE_ORDER",
            "NVIDIA_VISIBLE_DEVICES", "LD_LIBRARY_PATH", "PYTORCH_CUDA_ALLOC_CONF",
            "TRITON_INTERPRET", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "TORCH_HOME",
            "HF_HOME", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE", "DSPARK_*",
        ]
    )
    deny: list[str] = Field(
        default_factory=lambda: [
            "*TOKEN*", "*SECRET*", "*KEY*", "*PASSWORD*", "*PASSWD*", "*CREDENTIAL*", "*AUTH*",
            "*COOKIE*", "*SESSION*", "*_PAT", "*PRIVATE*", "*SIGNING*",
            "GITHUB_*", "GH_*", "EVALBOT_*", "AWS_*", "AZURE_*", "GCP_*", "GOOGLE_*", "SSH_*",
            "GPG_*", "NPM_*", "PYPI_*", "TWINE_*", "HUEY_*", "REDIS_*", "DATABASE_*",
        ]
    )


class Sandbox(_Strict):
    """Who runs PR code. With `user` set, every harness child runs as that unprivileged account
    (setpriv when the bot is root, `sudo -n -u` otherwise), so it cannot read the bot's keys, tokens
    or state even from disk, and every process it left behind is killed after each run (a child that
    escapes its process group with setsid included). `no_network` (root only) gives each child an
    empty network namespace."""

    user: str | None = None
    no_network: bool = False


class Settings(_Strict):
    thresholds: Thresholds = Field(default_factory=Thresholds)
    tiers: TierSettings = Field(default_factory=TierSettings)
    integrity: IntegritySettings = Field(default_factory=IntegritySettings)
    stats: StatsSettings = Field(default_factory=StatsSettings)
    profiles: dict[str, ProfileSettings] = Field(default_factory=_default_profiles)
    harness: HarnessCommands = Field(default_factory=HarnessCommands)
    env: EnvPolicy = Field(default_factory=EnvPolicy)
    sandbox: Sandbox = Field(default_factory=Sandbox)
    default_profile: str = "cpu"
    # Packages a harness child must import from its own worktree (checked before any run).
    import_roots: list[str] = Field(default_factory=lambda: ["harness", "engine", "kernels"])
    harness_manifest: str = "harness/HARNESS_PATHS"
    remote: str = "origin"  # the harness comes from <remote>/<base> when that ref exists
    signing_key: Path | None = None
    box: str | None = None  # name of the measuring box (noise floors are kept per box)
    templates_dir: Path | None = None
    stderr_tail_lines: int = 30

    def profile(self, name: str) -> ProfileSettings:
        try:
            return self.profiles[name]
        except KeyError:
            known = ", ".join(sorted(self.profiles))
            raise ConfigError(f"unknown profile {name!r} (known: {known})") from None

    def box_name(self) -> str:
        return self.box or socket.gethostname()


def _deep_merge(base: dict[str, Any], override: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for key, value in override.items():
        if isinstance(value, Mapping) and isinstance(out.get(key), Mapping):
            out[key] = _deep_merge(dict(out[key]), value)
        else:
            out[key] = value
    return out


def read_config_file(path: Path) -> dict[str, Any]:
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise ConfigError(f"cannot read config file {path}: {e.strerror}") from None
    try:
        if path.suffix == ".json":
            data = json.loads(raw)
        else:
            data = tomllib.loads(raw.decode("utf-8"))
    except (ValueError, UnicodeDecodeError) as e:
        raise ConfigError(f"config file {path} does not parse: {e}") from None
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a table/object at the top")
    return data


def env_overrides(environ: Mapping[str, str]) -> dict[str, Any]:
    """`EVALBOT__A__B=v` -> {"a": {"b": v}}; plus the two short names."""
    out: dict[str, Any] = {}
    for name, raw in environ.items():
        if not name.startswith("EVALBOT__"):
            continue
        parts = [p.lower() for p in name[len("EVALBOT__") :].split("__") if p]
        if not parts:
            continue
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        node = out
        for part in parts[:-1]:
            node = node.setdefault(part, {})
            if not isinstance(node, dict):
                raise ConfigError(f"{name}: conflicts with another EVALBOT__ variable")
        node[parts[-1]] = value
    if environ.get("EVALBOT_SIGNING_KEY"):
        out["signing_key"] = environ["EVALBOT_SIGNING_KEY"]
    if environ.get("EVALBOT_BOX"):
        out["box"] = environ["EVALBOT_BOX"]
    return out


def load_settings(
    repo: Path | None = None,
    config_path: Path | None = None,
    environ: Mapping[str, str] | None = None,
) -> Settings:
    environ = os.environ if environ is None else environ
    data: dict[str, Any] = {}
    if config_path is None and environ.get("EVALBOT_CONFIG"):
        config_path = Path(environ["EVALBOT_CONFIG"])
    if config_path is None and repo is not None:
        candidate = repo / STATE_DIR_NAME / "config.toml"
        if candidate.is_file():
            config_path = candidate
    if config_path is not None:
        data = read_config_file(config_path)
    data = _deep_merge(data, env_overrides(environ))
    # Profiles given in a file extend/override the default ones field by field.
    if "profiles" in data and isinstance(data["profiles"], Mapping):
        defaults = {k: v.model_dump() for k, v in _default_profiles().items()}
        data["profiles"] = _deep_merge(defaults, data["profiles"])
    try:
        return Settings.model_validate(data)
    except ValidationError as e:
        where = f" ({config_path})" if config_path else ""
        first = e.errors()[0]
        loc = ".".join(str(p) for p in first["loc"])
        raise ConfigError(f"invalid setting {loc}{where}: {first['msg']}") from None
