"""Tier labels describe the PR's current head, or are not there: removed when a new head is queued and
after an infrastructure failure; a PR back at a head whose job is done gets that verdict again."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from evalbot.bot.jobs.ledger import DONE, JobRecord, UndecodableOutcome
from evalbot.forge.base import Forge, PullInfo

if TYPE_CHECKING:
    from evalbot.bot.worker.worker import Worker

log = logging.getLogger("evalbot.worker")


def clear(worker: Worker, forge: Forge, record: JobRecord, why: str, pull: PullInfo | None = None) -> bool:
    """Remove the PR's tier labels while `record`'s head is its current head (a label left from another
    head, or from before an infrastructure failure, must not stand). Never costs the job."""
    try:
        pull = pull or forge.get_pull(record.pr_number)
        if pull.head_sha != record.head_sha or not any(worker.settings.tiers.is_tier_label(x) for x in pull.labels):
            return False
        forge.replace_labels(record.pr_number, worker.settings.tiers.label_prefixes, [])
    except Exception as exc:  # noqa: BLE001 - the next publication replaces them anyway
        log.warning("could not remove the tier labels of #%d (%s): %s", record.pr_number, why, exc)
        return False
    log.info("#%d: tier labels removed (%s)", record.pr_number, why)
    return True


def clear_stale(worker: Worker, forge: Forge, record: JobRecord, pull: PullInfo | None = None) -> bool:
    """A new head was queued (a push): the labels of the head before it go now, not when it is scored."""
    if record.reason != "synchronize":
        return False
    return clear(worker, forge, record, f"new head {record.head_sha[:12]} queued", pull)


def republish(worker: Worker, key: str) -> str:
    """The PR is back at a head whose job is done (a force-push back): publish its kept verdict again."""
    record = worker.ledger.get(key)
    if record is None or record.state != DONE or not record.outcome:
        return "nothing to re-publish"
    try:
        outcome = record.load_outcome()
    except UndecodableOutcome as exc:
        log.error("%s", exc)
        return "not re-published: the kept verdict does not decode"
    forge = worker.forge_for(record.repo)
    if forge.get_pull(record.pr_number).head_sha != record.head_sha:
        return "not re-published: the PR moved on"
    worker.publisher(outcome, forge, record.pr_number, None)
    return f"re-published the verdict of {record.head_sha[:12]}"
