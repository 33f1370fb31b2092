"""The parts of GitHub's webhook payloads the bot reads, validated with pydantic.

Only the fields used are declared; everything else is ignored. A payload that lacks one of them or
has the wrong type is a `PayloadError` (a 400), never a crash.
"""

from __future__ import annotations

from datetime import datetime

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

Sha = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{40}$")]
Login = Annotated[str, StringConstraints(min_length=1, max_length=100)]


class PayloadError(ValueError):
    pass


class _Model(BaseModel):
    model_config = ConfigDict(extra="ignore", frozen=True)


class Repository(_Model):
    full_name: Annotated[str, StringConstraints(pattern=r"^[A-Za-z0-9_.-]+/[A-Za-z0-9_.-]+$")]
    default_branch: str | None = None


class Account(_Model):
    login: Login
    type: str = "User"

    @property
    def is_bot(self) -> bool:
        return self.type == "Bot" or self.login.endswith("[bot]")


class RepoRef(_Model):
    full_name: str = ""


class GitRef(_Model):
    ref: str
    sha: Sha
    repo: RepoRef | None = None  # None: the fork was deleted


class PullRequest(_Model):
    number: int = Field(gt=0)
    state: str
    draft: bool = False
    head: GitRef
    base: GitRef
    user: Account
    author_association: str = "NONE"


class PullRequestEvent(_Model):
    action: str
    number: int = Field(gt=0)
    pull_request: PullRequest
    repository: Repository
    sender: Account


class Issue(_Model):
    number: int = Field(gt=0)
    state: str = "open"
    pull_request: dict | None = None  # present only when the issue is a pull request


class Comment(_Model):
    id: int
    body: Annotated[str, StringConstraints(max_length=65536)] = ""
    user: Account
    author_association: str = "NONE"
    created_at: datetime | None = None  # when it was written (an /ok-to-test approves the head of that moment)


class IssueCommentEvent(_Model):
    action: str
    issue: Issue
    comment: Comment
    repository: Repository
    sender: Account


class PushEvent(_Model):
    ref: str
    before: Sha
    after: Sha
    deleted: bool = False
    repository: Repository


class PullRef(_Model):
    """A pull request as check runs and check suites name it (empty for PRs from forks)."""

    number: int = Field(gt=0)


class CheckRun(_Model):
    id: int
    name: str
    head_sha: Sha
    external_id: str | None = None
    pull_requests: list[PullRef] = Field(default_factory=list)


class CheckRunEvent(_Model):
    action: str
    check_run: CheckRun
    repository: Repository
    sender: Account


class CheckSuite(_Model):
    id: int
    head_sha: Sha
    pull_requests: list[PullRef] = Field(default_factory=list)


class CheckSuiteEvent(_Model):
    action: str
    check_suite: CheckSuite
    repository: Repository
    sender: Account


class MergeGroup(_Model):
    head_sha: Sha
    head_ref: str
    base_sha: Sha
    base_ref: str


class MergeGroupEvent(_Model):
    action: str
    merge_group: MergeGroup
    repository: Repository
    sender: Account


class PingEvent(_Model):
    zen: str = ""
    hook_id: int | None = None


EVENT_MODELS: dict[str, type[_Model]] = {
    "ping": PingEvent,
    "pull_request": PullRequestEvent,
    "issue_comment": IssueCommentEvent,
    "push": PushEvent,
    "check_run": CheckRunEvent,
    "check_suite": CheckSuiteEvent,
    "merge_group": MergeGroupEvent,
}


def parse_event(event: str, payload: object) -> _Model:
    model = EVENT_MODELS[event]
    if not isinstance(payload, dict):
        raise PayloadError("payload must be a JSON object")
    try:
        return model.model_validate(payload)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "payload"
        raise PayloadError(f"{event} payload: {where}: {first['msg']}") from None
