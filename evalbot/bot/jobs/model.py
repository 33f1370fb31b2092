"""What travels through the queue: score jobs and light chores, as plain pydantic models."""

from __future__ import annotations

from typing import Annotated, Literal, Union

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class ScoreJob(_Model):
    """Score one PR head against one main SHA. Idempotent per (repo, PR, head SHA, base SHA)."""

    kind: Literal["score"] = "score"
    repo: str
    pr_number: int
    head_sha: str
    base_sha: str
    reason: str = ""  # opened, synchronize, rescore, main moved, ...
    requested_by: str = ""

    @property
    def key(self) -> str:
        return job_key(self.repo, self.pr_number, self.head_sha, self.base_sha)


# A maintainer asked to measure again (/rescore, the Re-run button): the scorer measures a tree it has
# measured before instead of re-issuing that verdict, and publishes the lowest tier (evalbot.decide.scorings).
FORCED_REASONS = ("rescore", "rerun", "re-run requested")


def job_key(repo: str, pr_number: int, head_sha: str, base_sha: str) -> str:
    return f"{repo}#{pr_number}@{head_sha}..{base_sha}"


class RescoreRequest(_Model):
    """`/rescore`: the worker looks up the PR's head and main, then submits a forced ScoreJob."""

    kind: Literal["rescore"] = "rescore"
    repo: str
    pr_number: int
    requested_by: str


class Rerun(_Model):
    """The check run's (or check suite's) Re-run button: score the PR again, like /rescore.

    `pr_numbers` comes from the event; GitHub leaves it empty for PRs from forks, and then the worker
    finds the open PRs whose head is `head_sha`."""

    kind: Literal["rerun"] = "rerun"
    repo: str
    head_sha: str
    pr_numbers: list[int] = Field(default_factory=list)
    requested_by: str = ""


class ApproveForTesting(_Model):
    """`/ok-to-test`: a maintainer lets the bot run this PR's code (a fork PR by a newcomer)."""

    kind: Literal["ok_to_test"] = "ok_to_test"
    repo: str
    pr_number: int
    requested_by: str
    commented_at: float = 0.0  # epoch seconds of the comment (0: unknown): a head pushed after it is not approved


class MergeGroupCheck(_Model):
    """A merge queue asks for the check on its merge commit: carry the PR's verdict over to it."""

    kind: Literal["merge_group"] = "merge_group"
    repo: str
    head_sha: str
    head_ref: str
    base_sha: str


class SetAutomerge(_Model):
    kind: Literal["automerge"] = "automerge"
    repo: str
    pr_number: int
    enabled: bool
    requested_by: str


class Reply(_Model):
    """A comment rendered from templates/<template> with `context`."""

    kind: Literal["reply"] = "reply"
    repo: str
    pr_number: int
    template: str
    context: dict[str, str | int | bool | list[str] | list[dict[str, str]]] = Field(default_factory=dict)
    # non-empty: at most one such reply per key and `refusal_window_seconds` (replies anyone can provoke)
    rate_key: str = ""


class MainMoved(_Model):
    """A push to main: every open PR's score is stale; mark them and queue them against the new main."""

    kind: Literal["main_moved"] = "main_moved"
    repo: str
    main_sha: str
    before_sha: str = ""


class AnnounceQueued(_Model):
    """Create the queued check run for a job as soon as it is accepted."""

    kind: Literal["announce"] = "announce"
    job_key: str


class Republish(_Model):
    """The PR's head came back to a head whose job is finished (a force-push back): publish its kept
    verdict again, so that the labels and scorecard describe the head the PR points at."""

    kind: Literal["republish"] = "republish"
    job_key: str


class DecideRound(_Model):
    """Try the automerge decision of the round against `base_sha` again (mergeability was unknown)."""

    kind: Literal["decide_round"] = "decide_round"
    repo: str
    base_sha: str
    attempt: int = 0


_CHORES = (RescoreRequest, SetAutomerge, Reply, MainMoved, AnnounceQueued, DecideRound, Rerun, ApproveForTesting,
           MergeGroupCheck, Republish)
Chore = Annotated[Union[_CHORES], Field(discriminator="kind")]  # type: ignore[valid-type]
Action = Annotated[Union[(ScoreJob, *_CHORES)], Field(discriminator="kind")]  # type: ignore[valid-type]
CHORE_ADAPTER: TypeAdapter = TypeAdapter(Chore)
