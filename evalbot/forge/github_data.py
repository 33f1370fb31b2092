"""PyGithub at the edge: the client the adapter uses, and PyGithub's objects turned into our data
(`PullInfo`, an error's message)."""

from __future__ import annotations

import json

from github import Auth, Github, GithubException

from evalbot.forge.base import PullInfo


def client(auth: Auth.Auth, base_url: str, throttle: bool) -> Github:
    # PyGithub's own retries are off: _call retries, with back-off that tests can drive without sleeping.
    extra = {} if throttle else {"seconds_between_requests": None, "seconds_between_writes": None}
    return Github(auth=auth, base_url=base_url, retry=None, timeout=30, lazy=True, **extra)


def error_message(exc: GithubException) -> str:
    data = exc.data
    if isinstance(data, dict) and data.get("message"):
        return str(data["message"])
    return exc.message or (json.dumps(data)[:200] if data is not None else "")


def pull_info(pull, *, full: bool) -> PullInfo:
    # Properties, not raw_data: raw_data would fetch every PR of a listing once more.
    state = "merged" if (full and pull.merged) else pull.state
    return PullInfo(
        number=pull.number,
        head_sha=pull.head.sha,
        head_ref=pull.head.ref,
        base_ref=pull.base.ref,
        base_sha=pull.base.sha,
        title=pull.title or "",
        author=pull.user.login if pull.user else "",
        author_association=pull.author_association or "NONE",
        draft=bool(pull.draft),
        state=state,
        mergeable=pull.mergeable if full else None,
        labels=[label.name for label in pull.labels],
        is_fork=is_fork(pull),
    )


def is_fork(pull) -> bool:
    head_repo, base_repo = pull.head.repo, pull.base.repo
    if head_repo is None:  # the fork was deleted
        return True
    return (head_repo.full_name or "").lower() != (base_repo.full_name or "").lower()
