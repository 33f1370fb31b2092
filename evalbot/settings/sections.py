"""The sections of the settings tree: plain frozen models, no I/O. `Settings` (evalbot.settings.model)
puts them together; `evalbot.settings.loading` fills them from a file and the environment."""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class Thresholds(_Strict):
    """Gate bars (any failure -> REJECT). Ratios are PR / main."""

    min_verified_streams: int = 3  # DSpark streams per cell re-verified by main's engine
    top1_min: float = 0.9
    kl_max: float = 0.1
    min_compare_positions: int = 512
    ar_ratio_min: float = 0.98
    guard_decode_ratio_min: float = 0.98
    guard_prefill_ratio_min: float = 0.98
    # Near-tie substitutions (a PR token that is not main's argmax but within the verify tolerance) may
    # be at most this share of the PR's verified DSpark tokens, over all cells and per cell, and always
    # `near_tie_allowance` of them. An honest kernel change read 24 in ~15k tokens (0.16 %); a decoder
    # that accepts drafts within ~0.45 logits of the top substitutes at the rate the runner-up sits
    # that close (5-28 % of positions on the bundled model).
    near_tie_max_share: float = 0.005
    near_tie_cell_max_share: float = 0.01  # per cell: fewer tokens, and cells differ in how often ties occur
    near_tie_allowance: int = 3
    # Each speed gate also reads the speedup by total time (main's summed seconds over the PR's on the
    # same windows), against its bar less the noise floor less this: the floor is calibrated on the
    # median, and a total weighs one stalled request (~9 % on a 2-vCPU VM) at 1/rounds where the median
    # drops it. A slow minority of rounds (the total a third of main's) is far beyond either.
    total_time_slack: float = 0.02


class IntegritySettings(_Strict):
    """What the bot holds each process's answers to (evalbot.decide.integrity)."""

    # A report of more seconds than the bot's clock saw (times 1 + this, plus the slack) cannot be true.
    clock_rel_tolerance: float = 0.02
    clock_slack_s: float = 0.005
    # A PR answer in less than this fraction of main's time on the same never-seen window was not computed.
    min_time_fraction: float = 0.2


class StatsSettings(_Strict):
    bootstrap_resamples: int = 2000
    bootstrap_seed: int = 20240229
    confidence: float = 0.95
    # Used for every metric until `evalbot calibrate` has measured this box and profile.
    default_noise_floor: float = 0.01
    # The stored floor is the A/A deviation of each gated statistic times this margin: a later A/A run may
    # stray a little further than the calibration rounds did.
    noise_margin: float = 1.5
    # A floor pools the last this-many A/A campaigns of its box, profile and engine version (each
    # `evalbot calibrate` adds one): one A/A is one draw of the noise, and a lucky one reads small.
    noise_pool: int = Field(default=5, ge=1)


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
    export_max_mb: int = 1024  # a ref's exported tree, in all (this repository's is ~32 MB); larger: refused
    export_max_file_mb: int = 256  # one file of it (this repository's largest is ~10 MB)
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
