"""Webhook event -> actions for the queue. A pure function: no I/O, no clock, no forge.

Every action names the repository as the settings spell it (`RoutingPolicy.repo`): GitHub may send
the same repository in other letter case, and one PR must never become two jobs.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from evalbot.bot import commands
from evalbot.bot.jobs.model import (
    Action,
    ApproveForTesting,
    MainMoved,
    MergeGroupCheck,
    Reply,
    RescoreRequest,
    Rerun,
    ScoreJob,
    SetAutomerge,
)
from evalbot.bot.webhook import payloads
from evalbot.forge.base import CHECK_NAME

SCORED_PR_ACTIONS = frozenset({"opened", "synchronize", "reopened", "ready_for_review"})


@dataclass(frozen=True)
class RoutingPolicy:
    repo: str
    main_branch: str = "main"
    command_allowlist: frozenset[str] = frozenset()


@dataclass
class Routed:
    actions: list[Action] = field(default_factory=list)
    note: str = ""  # why nothing (or what) was done, returned to the sender


def route(event: str, payload: payloads._Model, policy: RoutingPolicy) -> Routed:
    repo = getattr(payload, "repository", None)
    if repo is not None and repo.full_name.lower() != policy.repo.lower():
        return Routed(note=f"repository {repo.full_name} is not served here")
    if isinstance(payload, payloads.PullRequestEvent):
        return _route_pull_request(payload, policy)
    if isinstance(payload, payloads.IssueCommentEvent):
        return _route_comment(payload, policy)
    if isinstance(payload, payloads.PushEvent):
        return _route_push(payload, policy)
    if isinstance(payload, (payloads.CheckRunEvent, payloads.CheckSuiteEvent)):
        return _route_rerequest(payload, policy)
    if isinstance(payload, payloads.MergeGroupEvent):
        return _route_merge_group(payload, policy)
    return Routed(note=f"event {event} needs no work")


def _route_pull_request(event: payloads.PullRequestEvent, policy: RoutingPolicy) -> Routed:
    pr = event.pull_request
    if event.action not in SCORED_PR_ACTIONS:
        return Routed(note=f"pull_request action {event.action} needs no score")
    if pr.draft:
        return Routed(note="draft pull requests are scored when marked ready for review")
    if pr.state != "open":
        return Routed(note="pull request is not open")
    if pr.base.ref != policy.main_branch:
        return Routed(note=f"pull request targets {pr.base.ref}, not {policy.main_branch}")
    job = ScoreJob(
        repo=policy.repo,
        pr_number=pr.number,
        head_sha=pr.head.sha,
        base_sha=pr.base.sha,
        reason=event.action,
        requested_by=event.sender.login,
    )
    return Routed(actions=[job], note=f"queued #{pr.number} at {pr.head.sha[:12]}")


def _route_comment(event: payloads.IssueCommentEvent, policy: RoutingPolicy) -> Routed:
    if event.action != "created":
        return Routed(note=f"issue_comment action {event.action} is ignored")
    if event.comment.user.is_bot or event.sender.is_bot:
        return Routed(note="comments by bots are ignored")
    parsed = commands.parse_commands(event.comment.body)
    if not parsed:
        return Routed(note="no command")
    repo, number = policy.repo, event.issue.number
    login, association = event.comment.user.login, event.comment.author_association
    # Replies anyone can provoke are rate-limited per person and PR (the worker keeps the count).
    rate_key = f"{repo.lower()}#{number}:{login.lower()}"
    if event.issue.pull_request is None:
        return Routed(
            actions=[Reply(repo=repo, pr_number=number, template="comment_not_a_pull.md.j2", context={"login": login},
                           rate_key=rate_key)],
            note="commands work on pull requests only",
        )
    item = parsed[0]  # one command per comment, so one comment makes at most one reply
    ignored = f"; {len(parsed) - 1} more ignored (one command per comment)" if len(parsed) > 1 else ""
    if isinstance(item, commands.CommandError):
        spec = commands.COMMANDS[item.name]
        reply = Reply(repo=repo, pr_number=number, template="comment_command_usage.md.j2",
                      context={"login": login, "usage": spec.usage, "help": spec.help, "problem": item.problem},
                      rate_key=rate_key)
        return Routed(actions=[reply], note=f"/{item.name} {item.problem}{ignored}")
    if not commands.may_run(item.name, association, login, policy.command_allowlist):
        reply = Reply(repo=repo, pr_number=number, template="comment_refusal.md.j2",
                      context={"login": login, "command": commands.COMMANDS[item.name].usage}, rate_key=rate_key)
        return Routed(actions=[reply], note=f"/{item.name} refused: {login} may not use it{ignored}")
    at = event.comment.created_at.timestamp() if event.comment.created_at else 0.0
    return Routed(actions=[_command_action(item, repo, number, login, rate_key, at)], note=f"/{item.name}{ignored}")


def _command_action(cmd: commands.Command, repo: str, number: int, login: str, rate_key: str,
                    commented_at: float = 0.0) -> Action:
    if cmd.name == "rescore":
        return RescoreRequest(repo=repo, pr_number=number, requested_by=login)
    if cmd.name == "ok-to-test":
        return ApproveForTesting(repo=repo, pr_number=number, requested_by=login, commented_at=commented_at)
    if cmd.name == "automerge":
        return SetAutomerge(repo=repo, pr_number=number, enabled=cmd.arg == "on", requested_by=login)
    help_rows = [{"usage": s.usage, "help": s.help} for s in commands.COMMANDS.values()]
    return Reply(repo=repo, pr_number=number, template="comment_help.md.j2", context={"login": login, "commands": help_rows},
                 rate_key=rate_key)


def _route_push(event: payloads.PushEvent, policy: RoutingPolicy) -> Routed:
    if event.ref != f"refs/heads/{policy.main_branch}":
        return Routed(note=f"push to {event.ref} does not move {policy.main_branch}")
    if event.deleted or set(event.after) == {"0"}:
        return Routed(note=f"{policy.main_branch} was deleted; nothing to score against")
    return Routed(
        actions=[MainMoved(repo=policy.repo, main_sha=event.after, before_sha=event.before)],
        note=f"{policy.main_branch} moved to {event.after[:12]}",
    )


_JOB_KEY_PR = re.compile(r"#(\d+)@")  # the external_id of our check runs is the job key: owner/name#N@head..base


def _route_rerequest(event: payloads.CheckRunEvent | payloads.CheckSuiteEvent, policy: RoutingPolicy) -> Routed:
    """The Re-run button on our check run (check_run) or on the whole suite (check_suite)."""
    if event.action != "rerequested":
        return Routed(note=f"{type(event).__name__} action {event.action} needs no work")
    if isinstance(event, payloads.CheckRunEvent):
        run = event.check_run
        if run.name != CHECK_NAME:
            return Routed(note=f"check run {run.name!r} is not {CHECK_NAME!r}")
        numbers = [p.number for p in run.pull_requests]
        found = _JOB_KEY_PR.search(run.external_id or "")
        if not numbers and found:  # a PR from a fork: GitHub lists no pull requests, our external_id names it
            numbers = [int(found.group(1))]
        head_sha = run.head_sha
    else:
        numbers, head_sha = [p.number for p in event.check_suite.pull_requests], event.check_suite.head_sha
    rerun = Rerun(repo=policy.repo, head_sha=head_sha, pr_numbers=sorted(set(numbers)), requested_by=event.sender.login)
    return Routed(actions=[rerun], note=f"re-run requested for {head_sha[:12]}")


_QUEUE_REF = re.compile(r"^(?:refs/heads/)?gh-readonly-queue/(?P<base>.+)/pr-(?P<number>\d+)-(?P<head>[0-9a-f]{40})$")


def _route_merge_group(event: payloads.MergeGroupEvent, policy: RoutingPolicy) -> Routed:
    if event.action != "checks_requested":
        return Routed(note=f"merge_group action {event.action} needs no work")
    group = event.merge_group
    if group.base_ref.removeprefix("refs/heads/") != policy.main_branch:
        return Routed(note=f"merge group into {group.base_ref}, not {policy.main_branch}")
    if not _QUEUE_REF.match(group.head_ref):
        return Routed(note=f"merge group ref {group.head_ref!r} names no pull request")
    check = MergeGroupCheck(repo=policy.repo, head_sha=group.head_sha, head_ref=group.head_ref, base_sha=group.base_sha)
    return Routed(actions=[check], note=f"merge group {group.head_sha[:12]}: carrying the PR's verdict")


def merge_group_pull(head_ref: str) -> tuple[int, str] | None:
    """(PR number, PR head SHA) named by a merge queue's ref, e.g. gh-readonly-queue/main/pr-104-<sha>."""
    found = _QUEUE_REF.match(head_ref)
    return (int(found.group("number")), found.group("head")) if found else None
