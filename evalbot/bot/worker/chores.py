"""Light work the webhook queues beside score jobs: the queued check run, replies, the automerge
toggle, /rescore, /ok-to-test, the Re-run button, a merge queue's check, main moving, and a round
decided again."""

from __future__ import annotations

from typing import TYPE_CHECKING

from evalbot.bot.jobs.ledger import DONE, QUEUED, UndecodableOutcome
from evalbot.bot.jobs.model import (
    AnnounceQueued,
    ApproveForTesting,
    Chore,
    DecideRound,
    MainMoved,
    MergeGroupCheck,
    Reply,
    Republish,
    RescoreRequest,
    Rerun,
    ScoreJob,
    SetAutomerge,
)
from evalbot.bot.webhook.routing import merge_group_pull
from evalbot.bot.worker import approval, tier_labels
from evalbot.bot.worker.rounds import mark_stale_and_requeue
from evalbot.forge.base import CHECK_NAME, Forge
from evalbot.report.check_run import AWAITING_APPROVAL_CONCLUSION, check_conclusion
from evalbot.settings.tiers import NEEDS_OK_TO_TEST_LABEL, NEEDS_REBASE_LABEL

if TYPE_CHECKING:
    from evalbot.bot.worker.worker import Worker


_COMMAND_OF = {SetAutomerge: "automerge", RescoreRequest: "rescore", ApproveForTesting: "ok-to-test"}


def run_chore(worker: Worker, chore: Chore) -> str:
    if (command := _COMMAND_OF.get(type(chore))) is not None:  # the commenter's role, asked of the forge now
        forge = worker.forge_for(chore.repo)
        if (why := approval.refusal(worker, forge, command, chore.requested_by)) is not None:
            forge.comment(chore.pr_number, worker.render("comment_permission_refused.md.j2", login=chore.requested_by, reason=why))
            return f"refused /{command} by {chore.requested_by}: {why}"
    if isinstance(chore, AnnounceQueued):
        record = worker.ledger.get(chore.job_key)
        if record is None or record.state != QUEUED:
            return "no announcement needed"
        forge = worker.forge_for(record.repo)
        tier_labels.clear_stale(worker, forge, record)
        if record.check_id:
            return "no announcement needed"
        worker.start_check(forge, record)
        return "announced"
    if isinstance(chore, Republish):
        return tier_labels.republish(worker, chore.job_key)
    if isinstance(chore, Reply):
        if chore.rate_key and not worker.ledger.claim_rate(chore.rate_key, worker.clock(), worker.settings.refusal_window_seconds):
            return f"not replied: {chore.rate_key} already had a reply in this window"
        worker.forge_for(chore.repo).comment(chore.pr_number, worker.render(chore.template, **chore.context))
        return "replied"
    if isinstance(chore, SetAutomerge):
        worker.ledger.set_flag(f"automerge:{chore.repo}", "on" if chore.enabled else "off")
        worker.forge_for(chore.repo).comment(chore.pr_number, worker.render(
            "comment_automerge.md.j2", enabled=chore.enabled, login=chore.requested_by,
            min_tier=worker.settings.automerge_min_tier, needs_rebase=NEEDS_REBASE_LABEL))
        return f"automerge {'on' if chore.enabled else 'off'}"
    if isinstance(chore, RescoreRequest):
        forge = worker.forge_for(chore.repo)
        return queue_current_head(worker, forge, chore.repo, chore.pr_number, chore.requested_by, "rescore", reply=True)
    if isinstance(chore, ApproveForTesting):
        forge = worker.forge_for(chore.repo)
        head = forge.get_pull(chore.pr_number).head_sha
        if (pushed := approval.pushed_after(worker, chore.repo, chore.pr_number, head, chore.commented_at)) is not None:
            forge.comment(chore.pr_number, worker.render("comment_rescore_refused.md.j2", login=chore.requested_by, reason=pushed))
            return f"refused /ok-to-test: {pushed}"
        approval.remember(worker, chore.repo, chore.pr_number, chore.requested_by, head)  # this head only
        forge.remove_label(chore.pr_number, NEEDS_OK_TO_TEST_LABEL)
        return queue_current_head(worker, forge, chore.repo, chore.pr_number, chore.requested_by, "ok-to-test", reply=True)
    if isinstance(chore, Rerun):
        return _rerun(worker, chore)
    if isinstance(chore, MergeGroupCheck):
        return _merge_group_check(worker, chore)
    if isinstance(chore, MainMoved):
        forge = worker.forge_for(chore.repo)
        return f"requeued {mark_stale_and_requeue(worker, forge, chore.repo, chore.main_sha)} PR(s)"
    if isinstance(chore, DecideRound):
        return worker.decide_round(chore.repo, chore.base_sha, chore.attempt)
    raise ValueError(f"unknown chore {chore!r}")


def queue_current_head(worker: Worker, forge: Forge, repo: str, number: int, requested_by: str, reason: str,
                       *, reply: bool) -> str:
    """Score PR `number` again: its current head against the current main (forced: even if done before).
    `reply`: say on the PR why not, when it cannot be (a comment asked; a Re-run button did not)."""
    pull = forge.get_pull(number)
    main_branch = worker.settings.main_branch
    refusal = None
    if pull.state != "open":
        refusal = f"the pull request is {pull.state}"
    elif pull.draft:
        refusal = "the pull request is a draft; mark it ready for review to have it scored"
    elif pull.base_ref != main_branch:
        refusal = f"the pull request targets {pull.base_ref}, not {main_branch}"
    if refusal:
        if reply:
            forge.comment(number, worker.render("comment_rescore_refused.md.j2", login=requested_by, reason=refusal))
        return f"refused: {refusal}"
    job = ScoreJob(repo=repo, pr_number=pull.number, head_sha=pull.head_sha, base_sha=worker.main_head(forge),
                   reason=reason, requested_by=requested_by)
    if worker.queue.submit_score(job, force=True):
        return f"{reason} queued"
    if reply:
        forge.comment(number, worker.render("comment_rescore_in_flight.md.j2", login=requested_by,
                                            head_sha=job.head_sha, base_sha=job.base_sha))
    return "already in flight"


def _rerun(worker: Worker, chore: Rerun) -> str:
    """The Re-run button of our check run or of its suite: score each PR of that head again."""
    forge = worker.forge_for(chore.repo)
    numbers = chore.pr_numbers or [p.number for p in forge.list_open_pulls() if p.head_sha == chore.head_sha]
    if not numbers:
        return f"no open pull request has head {chore.head_sha[:12]}"
    done = [queue_current_head(worker, forge, chore.repo, n, chore.requested_by, "re-run requested", reply=False)
            for n in numbers]
    return "; ".join(f"#{n}: {d}" for n, d in zip(numbers, done))


def _merge_group_check(worker: Worker, chore: MergeGroupCheck) -> str:
    """A merge queue needs "DSpark eval" on its merge commit. The bot does not measure that commit: it
    carries over the verdict of the queued PR at the head the queue names, when the bot scored it."""
    named = merge_group_pull(chore.head_ref)
    if named is None:
        return f"merge group ref {chore.head_ref!r} names no pull request"
    number, pr_head = named
    scored = [r for r in worker.ledger.for_pull(chore.repo, number) if r.head_sha == pr_head and r.state == DONE and r.outcome]
    outcome = None
    for record in sorted(scored, key=lambda r: r.updated_at, reverse=True):
        try:
            outcome = record.load_outcome()
            break
        except UndecodableOutcome:
            continue
    forge = worker.forge_for(chore.repo)
    context = dict(head_sha=chore.head_sha, base_sha=chore.base_sha, pr_number=number, pr_head=pr_head)
    if outcome is None or outcome.check is None:
        conclusion, title_text, summary = AWAITING_APPROVAL_CONCLUSION, "", ""
    else:
        conclusion, title_text, summary = check_conclusion(outcome.verdict.status), outcome.check.title, outcome.check.summary
    context.update(verdict_title=title_text, summary=summary, scored_base=outcome.base_sha if outcome else "")
    title = worker.render("gh_check_title_merge_group.txt.j2", **context).strip()
    body = worker.render("gh_check_merge_group.md.j2", **context)
    check_id = forge.start_check(chore.head_sha, CHECK_NAME, body, external_id=f"merge-group:{chore.head_sha}")
    forge.update_check(check_id, status="completed", title=title, summary=body, conclusion=conclusion)
    return f"merge group {chore.head_sha[:12]}: {conclusion}"
