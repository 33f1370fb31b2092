"""The queue: huey (SQLite on one box, Redis across boxes) carrying keys, the ledger carrying truth.

Messages hold only a job key or a small chore; the ledger decides whether a message still means
work. That is what makes duplicates harmless and lets recovery simply enqueue again.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from typing import Protocol

from huey import PriorityRedisHuey, SqliteHuey
from huey.api import Huey
from pydantic import ValidationError

from evalbot.bot.jobs.boxlock import BoxLock
from evalbot.bot.jobs.ledger import DONE, FAILED, QUEUED, SUPERSEDED, JobRecord, Ledger
from evalbot.bot.jobs.ledger_stores import RedisLedger, SqliteLedger
from evalbot.bot.jobs.model import CHORE_ADAPTER, Action, AnnounceQueued, Chore, Republish, ScoreJob
from evalbot.bot.jobs.serializer import JsonSerializer
from evalbot.settings import Settings

log = logging.getLogger("evalbot.queue")

QUEUE_NAME = "evalbot"
SCORE_TASK = "evalbot.score"
CHORE_TASK = "evalbot.chore"
CHORE_PRIORITY = 10  # chores (comments, check runs, toggles) overtake waiting score jobs
CHORE_RETRIES, CHORE_RETRY_DELAY = 5, 60
HEAD_CAME_BACK = ("synchronize", "reopened")  # a finished job submitted again for these: re-published (done) or re-scored (failed)


class QueueHandlers(Protocol):
    """The worker's side: what a dequeued message runs."""

    def run_score(self, key: str) -> str: ...

    def run_chore(self, chore: Chore) -> str: ...


def make_huey(settings: Settings) -> Huey:
    if settings.redis_url:
        return PriorityRedisHuey(QUEUE_NAME, url=settings.redis_url, results=False, serializer=JsonSerializer())
    settings.state_dir.mkdir(parents=True, exist_ok=True)
    return SqliteHuey(QUEUE_NAME, filename=str(settings.queue_db_path), results=False, serializer=JsonSerializer())


def make_ledger(settings: Settings, busy_timeout: float = 30.0) -> Ledger:
    if settings.redis_url:
        return RedisLedger(settings.redis_url)
    return SqliteLedger(settings.ledger_db_path, busy_timeout=busy_timeout)


class JobQueue:
    def __init__(self, huey: Huey, ledger: Ledger, clock: Callable[[], float] = time.time):
        self.huey = huey
        self.ledger = ledger
        self.clock = clock
        self._handlers: QueueHandlers | None = None
        self._score_task = huey.task(name=SCORE_TASK)(self._run_score)
        self._chore_task = huey.task(name=CHORE_TASK, priority=CHORE_PRIORITY, retries=CHORE_RETRIES,
                                     retry_delay=CHORE_RETRY_DELAY)(self._run_chore)

    @classmethod
    def from_settings(cls, settings: Settings, *, busy_timeout: float = 30.0) -> "JobQueue":
        return cls(make_huey(settings), make_ledger(settings, busy_timeout))

    # -- producer side (webhook, worker) -----------------------------------------------------------
    def submit(self, action: Action, *, force: bool = False) -> bool:
        """Queue an action from the webhook. False: the same score job is already known."""
        if isinstance(action, ScoreJob):
            return self.submit_score(action, force=force)
        self.submit_chore(action)
        return True

    def submit_score(self, job: ScoreJob, *, force: bool = False) -> bool:
        """Record the job in the ledger, then put its message on the queue. False: already known.

        The two writes are not one transaction. When the message could not be written after the
        ledger took the job (the webhook then answers 503), the job stays `queued` with `enqueued`
        0, and the next submission of the same job (GitHub's redelivery, a /rescore) writes the
        missing message instead of hearing "already queued"."""
        if not self.ledger.submit(job, self.clock(), force=force):
            known = self.ledger.get(job.key)
            if known is not None and known.state == QUEUED and not known.enqueued:
                self._enqueue_new(job.key)
                log.info("job %s had no queue message (an earlier write failed); written now", job.key)
                return True
            if known is not None and known.state == DONE and known.outcome and job.reason in HEAD_CAME_BACK:
                # the PR came back to a head scored before (a force-push back): its labels and scorecard
                # must describe that head again, not the one it left
                self.submit_chore(Republish(job_key=job.key))
                return True
            came_back = known is not None and (known.state == SUPERSEDED or (known.state == FAILED and job.reason in HEAD_CAME_BACK))
            if came_back and self.ledger.submit(job, self.clock(), force=True):
                # superseded when the PR left this head, or failed for the box's reasons: it is back, score it
                # (its stale labels go when the job is announced)
                self._enqueue_new(job.key)
                return True
            return False
        self._enqueue_new(job.key)
        return True

    def _enqueue_new(self, key: str) -> None:
        self._score_task(key)
        self.ledger.mark_enqueued(key)
        self.submit_chore(AnnounceQueued(job_key=key))

    def submit_chore(self, chore: Chore, *, delay: float | None = None) -> None:
        data = chore.model_dump()
        if delay:
            self._chore_task.schedule(args=(data,), delay=delay)
        else:
            self._chore_task(data)

    def enqueue_key(self, key: str, *, delay: float | None = None) -> None:
        """Put a message for a job the ledger already holds (recovery, retries)."""
        if delay:
            self._score_task.schedule(args=(key,), delay=delay)
        else:
            self._score_task(key)

    def recover(self, box: str, box_lock_path, stale_after: float) -> list[str]:
        """Make every job the ledger says is unfinished reachable by a message again.

        - jobs `running` on this box while no process here holds the box lock: their worker died;
        - jobs `running` anywhere whose heartbeat is older than `stale_after`;
        - jobs `queued`: their message may have been taken by a worker that died before claiming.
        Extra messages are harmless: a worker only runs a job it can claim in the ledger.
        """
        now = self.clock()
        keys: list[str] = []
        lock = BoxLock(box_lock_path)
        if lock.try_acquire():
            try:
                keys += self.ledger.requeue_orphans_of(box, now)
            finally:
                lock.release()
        keys += self.ledger.requeue_stale(now, stale_after)
        keys += [r.key for r in self.ledger.in_states(QUEUED)]
        unique = list(dict.fromkeys(keys))
        for key in unique:
            self.enqueue_key(key)
        if unique:
            log.info("recovered %d job(s): %s", len(unique), ", ".join(unique))
        return unique

    # -- consumer side -----------------------------------------------------------------------------
    def fair_order(self, now: float) -> list[JobRecord]:
        """The queued jobs that may run now, in the order to run them: round robin between requesters
        (whoever pushed the head or asked for the re-score, `ScoreJob.requested_by`), the requester served
        longest ago first (`Ledger.served`: when a job of theirs last started), each requester's jobs in their
        order of arrival. A message on the queue is a turn, not a claim on one job: the worker runs the first
        of these (`Worker.run_score`). So a contributor's burst of fifty PRs makes another's first PR wait for
        one of them, not fifty, and a requester who keeps queueing cannot keep anyone's job waiting for ever.
        Jobs put back to wait (`not_before`) are left out until then."""
        lines: dict[str, list[JobRecord]] = {}
        for r in sorted((r for r in self.ledger.queued() if r.not_before <= now), key=lambda r: (r.updated_at, r.key)):
            lines.setdefault(r.requested_by, []).append(r)
        served = self.ledger.served()
        turns = sorted(lines, key=lambda who: (served.get(who, 0.0), lines[who][0].updated_at, who))
        depth = max((len(line) for line in lines.values()), default=0)
        return [lines[who][i] for i in range(depth) for who in turns if i < len(lines[who])]

    def bind(self, handlers: QueueHandlers) -> None:
        self._handlers = handlers

    def _require_handlers(self) -> QueueHandlers:
        if self._handlers is None:
            raise RuntimeError("this JobQueue has no worker bound; run `evalbot worker` to consume it")
        return self._handlers

    def _run_score(self, key: str) -> str:
        return self._require_handlers().run_score(key)

    def _run_chore(self, data: dict) -> str:
        try:
            chore = CHORE_ADAPTER.validate_python(data)
        except ValidationError as exc:  # retrying would not make it readable
            log.error("skipped a chore that does not decode: %s", str(exc).splitlines()[0])
            return "skipped: undecodable chore"
        return self._require_handlers().run_chore(chore)

    def drain(self, *, max_tasks: int = 1000, include_scheduled_within: float = 0.0,
              should_stop: Callable[[], bool] | None = None) -> int:
        """Run queued messages in this thread until none is left (tests and `evalbot worker --burst`).

        Scheduled messages due within `include_scheduled_within` seconds are waited for and run too.
        `should_stop`: checked between messages (a SIGTERM in `--burst`).
        """
        ran = skipped = 0
        deadline = time.monotonic() + include_scheduled_within
        while ran + skipped < max_tasks and not (should_stop and should_stop()):
            for task in self.huey.read_schedule():
                self.huey.enqueue(task)
            try:
                task = self.huey.dequeue()
            except Exception as exc:  # an undecodable message: logged and dropped, the next one runs
                log.error("skipped a queue message that does not decode: %s", exc)
                skipped += 1
                continue
            if task is None:
                if self.huey.scheduled_count() and time.monotonic() < deadline:
                    time.sleep(0.05)
                    continue
                break
            self.huey.execute(task)
            ran += 1
        return ran

    def pending_count(self) -> int:
        return self.huey.pending_count()
