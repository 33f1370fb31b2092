"""Light work the webhook queues beside score jobs: the queued check run, replies, the automerge
toggle, /rescore, main moving, and a round decided again."""

from __future__ import annotations

from typing import TYPE_CHECKING

from evalbot.bot.jobs.ledger import QUEUED
from evalbot.bot.jobs.model import (
    AnnounceQueued,
    Chore,
    DecideRound,
    MainMoved,
    Reply,
    RescoreRequest,
    ScoreJob,
    SetAutomerge,
)
from evalbot.bot.worker.rounds import mark_stale_and_requeue
from evalbot.settings.tiers import NEEDS_REBASE_LABEL

if TYPE_CHECKING:
    from evalbot.bot.worker.worker import Worker


def run_chore(worker: Worker, chore: Chore) -> str:
    if isinstance(chore, AnnounceQueued):
        record = worker.ledger.get(chore.job_key)
        if record is None or record.state != QUEUED or record.check_id:
            return "no announcement needed"
        worker.start_check(worker.forge_for(record.repo), record)
        return "announced"
    if isinstance(chore, Reply):
        worker.forge_for(chore.repo).comment(chore.pr_number, worker.render(chore.template, **chore.context))
        return "replied"
    if isinstance(chore, SetAutomerge):
        worker.ledger.set_flag(f"automerge:{chore.repo}", "on" if chore.enabled else "off")
        worker.forge_for(chore.repo).comment(chore.pr_number, worker.render(
            "comment_automerge.md.j2", enabled=chore.enabled, login=chore.requested_by,
            min_tier=worker.settings.automerge_min_tier, needs_rebase=NEEDS_REBASE_LABEL))
        return f"automerge {'on' if chore.enabled else 'off'}"
    if isinstance(chore, RescoreRequest):
        return _rescore(worker, chore)
    if isinstance(chore, MainMoved):
        forge = worker.forge_for(chore.repo)
        return f"requeued {mark_stale_and_requeue(worker, forge, chore.repo, chore.main_sha)} PR(s)"
    if isinstance(chore, DecideRound):
        return worker.decide_round(chore.repo, chore.base_sha, chore.attempt)
    raise ValueError(f"unknown chore {chore!r}")


def _rescore(worker: Worker, chore: RescoreRequest) -> str:
    forge = worker.forge_for(chore.repo)
    pull = forge.get_pull(chore.pr_number)
    main_branch = worker.settings.main_branch
    refusal = None
    if pull.state != "open":
        refusal = f"the pull request is {pull.state}"
    elif pull.draft:
        refusal = "the pull request is a draft; mark it ready for review to have it scored"
    elif pull.base_ref != main_branch:
        refusal = f"the pull request targets {pull.base_ref}, not {main_branch}"
    if refusal:
        forge.comment(chore.pr_number, worker.render("comment_rescore_refused.md.j2", login=chore.requested_by, reason=refusal))
        return f"refused: {refusal}"
    job = ScoreJob(repo=chore.repo, pr_number=pull.number, head_sha=pull.head_sha, base_sha=worker.main_head(forge),
                   reason="rescore", requested_by=chore.requested_by)
    if worker.queue.submit_score(job, force=True):
        return "rescore queued"
    forge.comment(chore.pr_number, worker.render("comment_rescore_in_flight.md.j2", login=chore.requested_by,
                                                 head_sha=job.head_sha, base_sha=job.base_sha))
    return "already in flight"
