"""What a harness server may see of the bot's environment: an allow-list minus a deny-list (deny wins).
The sandbox adds the few variables it sets itself (its tree, its private /tmp and Triton cache)."""

from __future__ import annotations

import fnmatch
from collections.abc import Mapping, Sequence

from evalbot.settings import EnvPolicy


def _matches(name: str, patterns: Sequence[str]) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, p.upper()) for p in patterns)


def scrub_env(environ: Mapping[str, str], policy: EnvPolicy) -> dict[str, str]:
    """Allow-listed names that match no deny pattern. Deny wins."""
    return {k: v for k, v in environ.items() if _matches(k, policy.allow) and not _matches(k, policy.deny)}
