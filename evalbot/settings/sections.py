"""The sections of the settings tree: plain frozen models, no I/O. `Settings` (evalbot.settings.model)
puts them together; `evalbot.settings.loading` fills them from a file and the environment."""

from __future__ import annotations

import string
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

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


class IntegritySettings(_Strict):
    """Anti-forgery tolerances (evalbot.decide.integrity)."""

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


def default_profiles() -> dict[str, ProfileSettings]:
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


class SandboxSettings(_Strict):
    """Where PR code runs (evalbot.measure.sandbox, docs/deploy.md "Trust model"): a bubblewrap sandbox
    per harness process, on by default. `enabled = false` (`--no-sandbox`) is for development only and
    the scorecard says so."""

    enabled: bool = True
    # The sandbox's user and group. None: 65534 (nobody) when the bot runs as root; otherwise the bot's
    # own ids, mapped by bwrap's user namespace.
    uid: int | None = None
    gid: int | None = None
    tmp_size_mb: int = 1024  # the private /tmp: a tmpfs of this size, discarded with the sandbox
    memory_max_mb: int | None = None  # cgroup v2 memory.max of each sandbox, where the box delegates it
    pids_max: int = 512  # cgroup pids.max of each sandbox, where the box has the pids controller
    gpu: Literal["auto", "on", "off"] = "auto"  # bind the NVIDIA device nodes; auto: when /dev/nvidia0 exists
    extra_ro_binds: list[str] = Field(default_factory=list)  # more host paths, read-only: "PATH" or "SRC:DEST"

    @field_validator("uid", "gid")
    @classmethod
    def _an_id(cls, v: int | None) -> int | None:
        if v is not None and not 0 <= v < 2**32 - 1:
            raise ValueError("must be a uid/gid (0 .. 4294967294)")
        return v

    @field_validator("tmp_size_mb", "pids_max")
    @classmethod
    def _positive_size(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be at least 1")
        return v

    @field_validator("memory_max_mb")
    @classmethod
    def _positive_memory(cls, v: int | None) -> int | None:
        if v is not None and v < 64:
            raise ValueError("must be at least 64 (MiB) or unset")
        return v

    @field_validator("extra_ro_binds")
    @classmethod
    def _absolute_binds(cls, v: list[str]) -> list[str]:
        for bind in v:
            if any(not part.startswith("/") for part in bind.split(":", 1)):
                raise ValueError(f"must be absolute paths (PATH or SRC:DEST), got {bind!r}")
        return v

    @property
    def user(self) -> None:
        """There is no sandbox user any more (the old `[sandbox] user`); kept for the old runner."""
        return None
