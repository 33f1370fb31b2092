"""Retrying GitHub: which failures are worth another try (5xx, network errors, primary and secondary
rate limits) and how long to wait, honouring Retry-After and X-RateLimit-Reset. Pure functions; the
adapter (evalbot.forge.github) sleeps and calls again."""

from __future__ import annotations

from dataclasses import dataclass


class ForgeUnavailable(RuntimeError):
    """GitHub kept failing (5xx, rate limits, network) after every retry."""


class ForgeRefused(RuntimeError):
    """GitHub answered a definite no (4xx other than rate limits); retrying will not help."""

    def __init__(self, what: str, status: int, message: str):
        super().__init__(f"{what}: GitHub answered {status}: {message}")
        self.status = status


@dataclass(frozen=True)
class RetryPolicy:
    attempts: int = 6
    base_delay: float = 1.0
    max_delay: float = 60.0
    max_wait_for_reset: float = 300.0  # a rate-limit reset further away than this is left to the outbox


def _header(headers: dict | None, name: str) -> str | None:
    if not headers:
        return None
    for key, value in headers.items():
        if key.lower() == name:
            return value
    return None


def is_rate_limited(status: int, headers: dict | None, message: str) -> bool:
    if status == 429:
        return True
    if status != 403:
        return False
    text = (message or "").lower()
    return (
        "rate limit" in text
        or _header(headers, "retry-after") is not None
        or _header(headers, "x-ratelimit-remaining") == "0"
    )


def retry_delay(
    attempt: int, status: int | None, headers: dict | None, message: str, policy: RetryPolicy, now: float, jitter: float
) -> float | None:
    """Seconds to wait before attempt `attempt + 1`, or None when this failure is not worth retrying.

    `status` None means a network error. `jitter` in [0, 1) spreads retries of many workers.
    """
    if attempt + 1 >= policy.attempts:
        return None
    backoff = min(policy.max_delay, policy.base_delay * (2**attempt)) * (0.5 + jitter / 2)
    if status is None or status >= 500:
        return backoff
    if not is_rate_limited(status, headers, message):
        return None
    retry_after = _header(headers, "retry-after")
    if retry_after and retry_after.strip().isdigit():
        wait = float(retry_after)
    elif _header(headers, "x-ratelimit-remaining") == "0" and (_header(headers, "x-ratelimit-reset") or "").isdigit():
        wait = max(0.0, float(_header(headers, "x-ratelimit-reset")) - now) + 1.0
    else:
        wait = max(60.0 * (2**attempt), backoff)  # GitHub: wait at least a minute on a secondary limit
    return wait if wait <= policy.max_wait_for_reset else None
