"""A claimed job that goes back to the queue without a verdict: GitHub unreachable when it started, the worker
stopping, or another box measuring the very same tree. Each is put back *unspent* (its attempt given back) and
says so on its check run; none spends its requester's turn (the queue's round robin, `JobQueue.fair_order`):
a requester is marked served only when a measurement of theirs starts (`Worker._score_claimed`), and a tree
another box was measuring was not measured here."""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from evalbot.bot import metrics
from evalbot.bot.jobs.ledger import JobRecord
from evalbot.forge.base import Forge

if TYPE_CHECKING:
    from evalbot.bot.worker.worker import Worker

log = logging.getLogger("evalbot.worker")

FORGE_RETRY_MAX_SECONDS = 600.0


def put_back(worker: Worker, record: JobRecord, note: str, delay: float, *, unspent: bool = False, **counts: int) -> str:
    """Back to the queue, to run again in `delay` seconds (not earlier, whoever's turn comes: `not_before`; 0: any
    box may take it now); `unspent`: the attempt is given back."""
    now = worker.clock()
    attempts = max(0, record.attempts - 1) if unspent else None
    not_before = now + delay if delay else 0.0
    if worker.ledger.release(record.key, worker.worker_id, now, note, attempts=attempts, not_before=not_before, **counts):
        worker.queue.enqueue_key(record.key, delay=delay)
    return note


def forge_outage(worker: Worker, record: JobRecord, exc: Exception) -> str:
    """GitHub could not be reached when the job started: put it back, unspent, with growing waits."""
    waits = record.forge_waits + 1
    delay = min(FORGE_RETRY_MAX_SECONDS, worker.settings.forge_retry_seconds * 2 ** (waits - 1))
    note = f"GitHub unreachable when the job started ({type(exc).__name__}); trying again in {delay:.0f}s"
    put_back(worker, record, note, delay, unspent=True, forge_waits=waits)
    worker.ledger.bump(metrics.counter_key("forge_outage_requeues"))
    log.warning("job %s: %s", record.key, note)
    return f"waiting for GitHub: {note}"


def _queued_check(worker: Worker, forge: Forge, record: JobRecord, check_id: str, kind: str, why: str) -> None:
    """The check run back to "queued", saying what it waits for (templates gh_check_title_<kind>.txt.j2 and
    gh_check_<kind>.md.j2; a courtesy: the job is safe in the ledger either way)."""
    if not check_id:
        return
    try:
        summary = worker.render(f"gh_check_{kind}.md.j2", head_sha=record.head_sha, base_sha=record.base_sha,
                                box=worker.settings.box_name(), why=why)
        forge.update_check(check_id, status="queued", title=worker.render(f"gh_check_title_{kind}.txt.j2"), summary=summary,
                           details_url=worker.details_url(record))
    except Exception as exc:
        log.warning("could not mark check run %s as queued again: %s", check_id, exc)


def interrupted(worker: Worker, record: JobRecord, forge: Forge, check_id: str) -> str:
    """The worker is stopping: the job goes back to the queue unspent; the check run says so."""
    why = worker.guard.why or "stopping"
    put_back(worker, record, f"interrupted: {why}", 0.0, unspent=True)  # any box now; this one after its restart
    worker.ledger.bump(metrics.counter_key("scorings_interrupted"))
    _queued_check(worker, forge, record, check_id, "interrupted", why)
    log.info("job %s interrupted (%s); back in the queue", record.key, why)
    return "interrupted"


def tree_busy(worker: Worker, record: JobRecord, forge: Forge, check_id: str, why: str,
              turn: tuple[float | None, float]) -> str:
    """Another box measures this very tree against this main now (`decide.scorings.TreeBusy`): the job waits for
    that verdict, unspent; its requester's turn is given back (`turn`: their mark before this job started, and
    the one it set); the check run says what it waits for, not the step it stopped at."""
    note = put_back(worker, record, f"waiting: {why}", worker.settings.infra_retry_seconds, unspent=True)
    worker.ledger.restore_served(record.requested_by, *turn)
    _queued_check(worker, forge, record, check_id, "waiting", why)
    return note
