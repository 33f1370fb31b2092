"""While a head is scored: has the PR moved on? A push queues the new head's job; the scoring of the old
head then stops at its next progress step (`ScoringSuperseded`) instead of keeping the box for a
verdict that would never be published (publish refuses a moved head)."""

from __future__ import annotations

import logging
from collections.abc import Callable

from evalbot.bot.jobs.ledger import QUEUED, JobRecord, Ledger
from evalbot.forge.base import Forge

log = logging.getLogger("evalbot.worker")

HEAD_WATCH_SECONDS = 30.0  # the forge is asked at most this often


def head_watch(ledger: Ledger, forge: Forge, record: JobRecord, clock: Callable[[], float]) -> Callable[[], str | None]:
    """A check for the scoring's progress steps: why the PR moved on from `record`'s head, or None.
    The ledger says first (another head of this PR is queued; no request); the forge confirms, at most
    once per HEAD_WATCH_SECONDS. A forge that does not answer never stops a score."""
    last = [-1e18]

    def moved() -> str | None:
        if not any(r.head_sha != record.head_sha and r.state == QUEUED for r in ledger.for_pull(record.repo, record.pr_number)):
            return None
        now = clock()
        if now - last[0] < HEAD_WATCH_SECONDS:
            return None
        last[0] = now
        try:
            head = forge.get_pull(record.pr_number).head_sha
        except Exception as exc:  # noqa: BLE001 - the scoring goes on; publish checks the head again
            log.warning("could not ask #%d's head while scoring: %s", record.pr_number, exc)
            return None
        return None if head == record.head_sha else f"the PR moved to {head[:12]} while {record.head_sha[:12]} was scored"

    return moved
