"""The GitHub adapter of the Forge Protocol, over PyGithub.

- Labels: missing ones are created with a colour and description; a tier change removes every
  `eval-dspark:*` / `eval:*` label and adds the new pair, one label at a time, so labels that people
  set meanwhile are never overwritten.
- One sticky scorecard comment, found by its hidden marker among the comments the bot itself wrote
  and edited in place. The bot's login is `bot_login` or, unset, what GitHub says the token is
  (an App: `<slug>[bot]` from GET /app; a token: GraphQL `viewer`); a comment by anyone else is never
  edited, whatever it holds.
- Who may command the bot: the commenter's permission on the repository, from GitHub
  (`GET /repos/{owner}/{repo}/collaborators/{login}/permission`), cached for a minute.
- Check run "DSpark eval": queued -> in_progress -> completed. A token that may not write check runs
  (a personal access token) falls back to a commit status of the same name.
- Merge: squash, passing the scored head SHA; GitHub answers 409 if the head moved, so a moved head
  is never merged.
- Every call is retried with back-off on 5xx, connection errors and (secondary) rate limits; when the
  retries run out a `ForgeUnavailable` is raised and the worker keeps the verdict to publish later.
"""

from __future__ import annotations

import logging
import random
import time
import urllib.parse
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

import requests
from github import Auth, Github, GithubException, GithubIntegration, UnknownObjectException

from evalbot.forge import github_receipts
from evalbot.forge.base import MergeResult, PullInfo
from evalbot.forge.github_data import client as _client, error_message as _message, pull_info as _pull_info
from evalbot.forge.github_labels import label_style, labels_to_change
from evalbot.forge.github_retry import ForgeRefused, ForgeUnavailable, RetryPolicy, is_rate_limited, retry_delay
from evalbot.report.scorecard import SCORECARD_MARKER_PREFIX
from evalbot.settings.tiers import DEFAULT_TIERS, TierSettings

log = logging.getLogger("evalbot.forge.github")
T = TypeVar("T")

MAX_CHECK_TEXT = 65535  # GitHub's limit for a check run's output summary and text
STATUS_ID_PREFIX = "status:"
PERMISSION_CACHE_SECONDS = 60.0
ROLES = ("none", "read", "triage", "write", "maintain", "admin")  # GitHub's repository roles, weakest first


def sticky_search_key(marker: str) -> str:
    """The stable part of a marker: scorecard markers carry a schema version and head SHA that change."""
    return SCORECARD_MARKER_PREFIX if marker.startswith(SCORECARD_MARKER_PREFIX) else marker


def clip(text: str, limit: int = MAX_CHECK_TEXT) -> str:
    if len(text) <= limit:
        return text
    note = "\n\n… (truncated; the full text is in the sticky comment)"
    return text[: limit - len(note)] + note


_STATUS_STATE = {"success": "success", "neutral": "success", "skipped": "success", "failure": "failure",
                 "cancelled": "error", "timed_out": "error", "action_required": "failure"}


class GitHubForge:
    """`Forge` for one GitHub repository. Build with `from_token` / `from_app`, or pass a `Github`."""

    def __init__(
        self,
        client: Github,
        repo_full_name: str,
        *,
        retry: RetryPolicy = RetryPolicy(),
        receipts_branch: str = "evalbot-receipts",
        receipts_dir: Path | None = None,
        bot_login: str = "",
        html_base_url: str = "https://github.com",
        tiers: TierSettings = DEFAULT_TIERS,
        templates: Path | None = None,
        sleep: Callable[[float], None] = time.sleep,
        clock: Callable[[], float] = time.time,
        observer: Callable[[str, float], None] | None = None,
        whoami: Callable[[], str] | None = None,
    ):
        self.client = client
        self.repo_name = repo_full_name
        self.repo = client.get_repo(repo_full_name)  # lazy client: no request until needed
        self.retry = retry
        self.receipts_branch = receipts_branch
        self.receipts_dir = receipts_dir
        self.bot_login = bot_login
        self.html_base_url = html_base_url.rstrip("/")
        self.tiers, self.templates = tiers, templates
        self._sleep = sleep
        self._clock = clock
        self._observer = observer  # (kind of failure, seconds about to be waited): the bot's metrics
        self._known_labels: set[str] | None = None
        self._identity = bot_login.strip()
        self._whoami = whoami  # how to learn the bot's login when bot_login is unset (an App: its slug)
        self._permissions: dict[str, tuple[float, str]] = {}  # login (lower case) -> (when asked, role)

    @classmethod
    def from_token(cls, token: str, repo_full_name: str, *, base_url: str = "https://api.github.com", throttle: bool = True, **kwargs) -> "GitHubForge":
        return cls(_client(Auth.Token(token), base_url, throttle), repo_full_name, **kwargs)

    @classmethod
    def from_app(cls, app_id: str, private_key: str, installation_id: int, repo_full_name: str, *, base_url: str = "https://api.github.com", throttle: bool = True, **kwargs) -> "GitHubForge":
        # PyGithub refreshes the installation token (1 hour) by itself.
        app = Auth.AppAuth(int(app_id), private_key)
        auth = app.get_installation_auth(int(installation_id))

        def whoami() -> str:  # an installation token may not ask GraphQL's `viewer`; the App's JWT may ask GET /app
            return f"{GithubIntegration(auth=app, base_url=base_url).get_app().slug}[bot]"

        kwargs.setdefault("whoami", whoami)
        return cls(_client(auth, base_url, throttle), repo_full_name, **kwargs)

    # -- the retry edge ---------------------------------------------------------------------------
    def _call(self, what: str, fn: Callable[[], T]) -> T:
        attempt = 0
        while True:
            try:
                return fn()
            except GithubException as exc:
                status, headers, message = exc.status, exc.headers, _message(exc)
                error: Exception = exc
            except (requests.ConnectionError, requests.Timeout) as exc:
                status, headers, message, error = None, None, str(exc), exc
            delay = retry_delay(attempt, status, headers, message, self.retry, self._clock(), random.random())
            self._observe(status, headers, message, delay)
            if delay is None:
                if status is not None and status < 500 and not is_rate_limited(status, headers, message):
                    raise ForgeRefused(what, status, message) from None
                raise ForgeUnavailable(f"{what}: gave up after {attempt + 1} attempt(s): {status or 'network'} {message}") from error
            log.warning("%s failed (%s %s); retry %d in %.1fs", what, status or "network", message[:120], attempt + 1, delay)
            self._sleep(delay)
            attempt += 1

    def _observe(self, status: int | None, headers: dict | None, message: str, delay: float | None) -> None:
        if self._observer is None:
            return
        if status is None:
            kind = "network"
        elif is_rate_limited(status, headers, message):
            kind = "rate_limited"
        else:
            kind = "server_error" if status >= 500 else "refused"
        try:
            self._observer(kind, delay or 0.0)
        except Exception:  # noqa: BLE001 - counting must never break a call
            log.debug("the forge observer failed", exc_info=True)

    # -- pulls --------------------------------------------------------------------------------------
    def get_pull(self, number: int) -> PullInfo:
        return self._call(f"get pull #{number}", lambda: _pull_info(self.repo.get_pull(number), full=True))

    def list_open_pulls(self) -> list[PullInfo]:
        return self._call("list open pulls", lambda: [_pull_info(p, full=False) for p in self.repo.get_pulls(state="open")])

    def branch_head_sha(self, branch: str) -> str:
        return self._call(f"get branch {branch}", lambda: self.repo.get_branch(branch).commit.sha)

    def close(self, number: int) -> None:
        self._call(f"close #{number}", lambda: self.repo.get_pull(number).edit(state="closed"))

    def merge(self, number: int, expected_head_sha: str, title: str, message: str) -> MergeResult:
        def attempt() -> MergeResult:
            try:
                status = self.repo.get_pull(number).merge(
                    commit_title=title, commit_message=message, merge_method="squash", sha=expected_head_sha
                )
            except GithubException as exc:
                if exc.status == 409:
                    return MergeResult(False, message=f"head moved since {expected_head_sha[:12]} was scored; not merged")
                if exc.status in (405, 422):
                    return MergeResult(False, message=f"not mergeable: {_message(exc)}")
                raise
            return MergeResult(bool(status.merged), sha=status.sha or "", message=status.message or "")

        return self._call(f"merge #{number}", attempt)

    # -- labels -------------------------------------------------------------------------------------
    def _ensure_labels(self, names: list[str]) -> None:
        if self._known_labels is None:
            self._known_labels = self._call("list labels", lambda: {label.name for label in self.repo.get_labels()})
        for name in names:
            if name in self._known_labels:
                continue
            colour, description = label_style(name, self.tiers, self.templates)

            def create(name=name, colour=colour, description=description) -> None:
                try:
                    self.repo.create_label(name, colour, description)
                except GithubException as exc:
                    if exc.status != 422:  # 422: someone created it meanwhile
                        raise

            self._call(f"create label {name}", create)
            self._known_labels.add(name)

    def _issue_labels(self, number: int) -> list[str]:
        return self._call(f"labels of #{number}", lambda: [label.name for label in self.repo.get_issue(number).get_labels()])

    def replace_labels(self, number: int, prefixes: tuple[str, ...], new_labels: list[str]) -> None:
        remove, add = labels_to_change(self._issue_labels(number), prefixes, new_labels)
        for name in remove:
            self.remove_label(number, name)
        if add:
            self._ensure_labels(add)
            self._call(f"add labels to #{number}", lambda: self.repo.get_issue(number).add_to_labels(*add))

    def add_label(self, number: int, label: str) -> None:
        self._ensure_labels([label])
        self._call(f"add label {label} to #{number}", lambda: self.repo.get_issue(number).add_to_labels(label))

    def remove_label(self, number: int, label: str) -> None:
        def remove() -> None:
            try:
                self.repo.get_issue(number).remove_from_labels(label)
            except UnknownObjectException:
                pass  # already absent
            except GithubException as exc:
                if exc.status != 404:
                    raise

        self._call(f"remove label {label} from #{number}", remove)

    # -- who is who ---------------------------------------------------------------------------------
    def identity(self) -> str:
        """The bot's own login: `bot_login`, else `<slug>[bot]` for an App (GET /app), else GraphQL `viewer` for a token."""
        if not self._identity and self._whoami is not None:
            self._identity = self._call("who am I (GET /app)", self._whoami)
        if not self._identity:
            def viewer() -> str:
                _, data = self.client.requester.graphql_query("query { viewer { login } }", {})
                return str(((data.get("data") or {}).get("viewer") or {}).get("login") or "")

            self._identity = self._call("who am I (GraphQL viewer)", viewer)
            if not self._identity:
                raise ForgeRefused("who am I (GraphQL viewer)", 200, "GitHub named no login; set EVALBOT_BOT_LOGIN")
        return self._identity

    def permission(self, login: str) -> str:
        """`login`'s role on the repository: admin, maintain, write, triage, read or none (no access, or
        no such user). Asked of GitHub, cached for PERMISSION_CACHE_SECONDS; a failure raises (callers refuse)."""
        key, now = login.lower(), self._clock()
        cached = self._permissions.get(key)
        if cached and now - cached[0] < PERMISSION_CACHE_SECONDS:
            return cached[1]

        def ask() -> str:
            url = f"{self.repo.url}/collaborators/{urllib.parse.quote(login, safe='')}/permission"
            try:
                _, data = self.client.requester.requestJsonAndCheck("GET", url)
            except UnknownObjectException:
                return "none"
            # a custom role names itself in role_name; `permission` is then its base (admin, write, read, none)
            for given in (data.get("role_name"), data.get("permission")):
                role = str(given or "").lower()
                role = {"pull": "read", "push": "write"}.get(role, role)
                if role in ROLES:
                    return role
            return "none"

        role = self._call(f"permission of {login}", ask)
        self._permissions[key] = (now, role)
        return role

    # -- comments -----------------------------------------------------------------------------------
    def upsert_sticky_comment(self, number: int, marker: str, body: str) -> str:
        if marker not in body:
            body = f"{body.rstrip()}\n\n{marker}\n"
        key = sticky_search_key(marker)
        me = self.identity().lower()

        def find():
            # only a comment the bot wrote: an App may edit anyone's, and a marker is easy to copy
            for comment in self.repo.get_issue(number).get_comments():
                if key in (comment.body or "") and comment.user is not None and comment.user.login.lower() == me:
                    return comment
            return None

        existing = self._call(f"find sticky comment on #{number}", find)
        if existing is not None:
            try:
                self._call(f"edit comment {existing.id}", lambda: existing.edit(body))
                return str(existing.id)
            except ForgeRefused as exc:
                if exc.status not in (403, 404):  # not ours to edit, or deleted meanwhile: post a new one
                    raise
        return self.comment(number, body)

    def comment(self, number: int, body: str) -> str:
        return str(self._call(f"comment on #{number}", lambda: self.repo.get_issue(number).create_comment(body).id))

    # -- check runs (commit statuses when check runs are not allowed) --------------------------------
    def start_check(self, head_sha: str, name: str, summary: str, *, external_id: str = "", details_url: str = "") -> str:
        def create() -> str:
            extra = {k: v for k, v in (("external_id", external_id), ("details_url", details_url)) if v}
            run = self.repo.create_check_run(name=name, head_sha=head_sha, status="queued",
                                             output={"title": name, "summary": clip(summary)}, **extra)
            return str(run.id)

        try:
            return self._call(f"create check run on {head_sha[:12]}", create)
        except ForgeRefused as exc:
            if exc.status != 403:
                raise
            log.warning("token may not write check runs; using a commit status instead")
            self._post_status(head_sha, name, "pending", summary)
            return f"{STATUS_ID_PREFIX}{head_sha}:{name}"

    def update_check(self, check_id: str, *, status: str, title: str, summary: str, conclusion: str | None = None,
                     text: str | None = None, details_url: str = "") -> None:
        if check_id.startswith(STATUS_ID_PREFIX):
            head_sha, name = check_id[len(STATUS_ID_PREFIX):].split(":", 1)
            state = "pending" if status != "completed" else _STATUS_STATE.get(conclusion or "", "error")
            self._post_status(head_sha, name, state, title)
            return
        output = {"title": title[:255], "summary": clip(summary)}
        if text:
            output["text"] = clip(text)
        fields: dict = {"status": status, "output": output}
        if details_url:
            fields["details_url"] = details_url
        if status == "completed":
            fields["conclusion"] = conclusion or "failure"  # a completed check never passes by default
        self._call(f"update check run {check_id}", lambda: self.repo.get_check_run(int(check_id)).edit(**fields))

    def _post_status(self, head_sha: str, context: str, state: str, description: str) -> None:
        commit = self.repo.get_commit(head_sha)
        self._call(
            f"commit status on {head_sha[:12]}",
            lambda: commit.create_status(state=state, description=" ".join(description.split())[:140], context=context),
        )

    # -- receipts -------------------------------------------------------------------------------------
    def store_receipt(self, number: int, head_sha: str, receipt_json: str) -> str:
        """Keep the receipt locally, and on the receipts branch when configured (forge/github_receipts.py)."""
        return github_receipts.store_receipt(self, number, head_sha, receipt_json)


__all__ = ["GitHubForge", "labels_to_change", "label_style", "sticky_search_key"]
