"""Webhook event -> actions for the queue. A pure function: no I/O, no clock, no forge."""

from __future__ import annotations

from dataclasses import dataclass, field

from evalbot.bot import commands
from evalbot.bot.jobs.model import Action, MainMoved, Reply, RescoreRequest, ScoreJob, SetAutomerge
from evalbot.bot.webhook import payloads

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
        repo=event.repository.full_name,
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
    repo, number = event.repository.full_name, event.issue.number
    login, association = event.comment.user.login, event.comment.author_association
    if event.issue.pull_request is None:
        return Routed(
            actions=[Reply(repo=repo, pr_number=number, template="comment_not_a_pull.md.j2", context={"login": login})],
            note="commands work on pull requests only",
        )
    actions: list[Action] = []
    for item in parsed:
        if isinstance(item, commands.CommandError):
            spec = commands.COMMANDS[item.name]
            actions.append(
                Reply(
                    repo=repo,
                    pr_number=number,
                    template="comment_command_usage.md.j2",
                    context={"login": login, "usage": spec.usage, "help": spec.help, "problem": item.problem},
                )
            )
            continue
        if not commands.may_run(item.name, association, login, policy.command_allowlist):
            actions.append(
                Reply(
                    repo=repo,
                    pr_number=number,
                    template="comment_refusal.md.j2",
                    context={"login": login, "command": commands.COMMANDS[item.name].usage},
                )
            )
            continue
        actions.append(_command_action(item, repo, number, login))
    return Routed(actions=actions, note=f"{len(actions)} command action(s)")


def _command_action(cmd: commands.Command, repo: str, number: int, login: str) -> Action:
    if cmd.name == "rescore":
        return RescoreRequest(repo=repo, pr_number=number, requested_by=login)
    if cmd.name == "automerge":
        return SetAutomerge(repo=repo, pr_number=number, enabled=cmd.arg == "on", requested_by=login)
    help_rows = [{"usage": s.usage, "help": s.help} for s in commands.COMMANDS.values()]
    return Reply(repo=repo, pr_number=number, template="comment_help.md.j2", context={"login": login, "commands": help_rows})


def _route_push(event: payloads.PushEvent, policy: RoutingPolicy) -> Routed:
    if event.ref != f"refs/heads/{policy.main_branch}":
        return Routed(note=f"push to {event.ref} does not move {policy.main_branch}")
    if event.deleted or set(event.after) == {"0"}:
        return Routed(note=f"{policy.main_branch} was deleted; nothing to score against")
    return Routed(
        actions=[MainMoved(repo=event.repository.full_name, main_sha=event.after, before_sha=event.before)],
        note=f"{policy.main_branch} moved to {event.after[:12]}",
    )
