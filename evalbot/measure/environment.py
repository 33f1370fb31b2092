"""What a harness child may see of the bot's environment: an allow-list minus a deny-list (deny wins),
plus the few variables the bot sets for it (its worktree, its Triton cache, the run's nonce)."""

from __future__ import annotations

import fnmatch
import os
from collections.abc import Mapping, Sequence
from pathlib import Path

from evalbot.settings import EnvPolicy

NONCE_ENV = "DSPARK_HARNESS_NONCE"


def _matches(name: str, patterns: Sequence[str]) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, p.upper()) for p in patterns)


def scrub_env(environ: Mapping[str, str], policy: EnvPolicy) -> dict[str, str]:
    """Allow-listed names that match no deny pattern. Deny wins."""
    return {k: v for k, v in environ.items() if _matches(k, policy.allow) and not _matches(k, policy.deny)}


def child_env(
    environ: Mapping[str, str], policy: EnvPolicy, worktree: Path, triton_cache: Path, nonce: str
) -> dict[str, str]:
    env = scrub_env(environ, policy)
    env.update(
        {
            "PYTHONPATH": str(worktree),
            "TRITON_CACHE_DIR": str(triton_cache),
            NONCE_ENV: nonce,
            "PYTHONHASHSEED": "0",
            "PYTHONUNBUFFERED": "1",
            "PYTHONNOUSERSITE": "1",
        }
    )
    env.setdefault("PATH", os.defpath)
    return env
