"""The job ledger: the durable truth about every score job, beside the queue.

Huey acknowledges a message when a worker dequeues it, so a worker killed mid-job would lose the job.
The ledger closes that gap: each job has a state (queued -> running -> scored -> done, or superseded /
failed), every change is a compare-and-set, a running job carries its worker's heartbeat, and a
worker re-enqueues what a dead worker left behind (see `JobQueue.recover`). The verdict is kept here
(state `scored`) before anything is published, so a failed GitHub call never loses it.

Two backends with one behaviour (`ledger_stores`): SQLite (one box, the default) and Redis (many
boxes). Each only implements a handful of storage primitives; the state machine lives once, in
`Ledger`. Outcomes are stored as JSON (`ScoreOutcome.model_dump_json`), never pickled: whoever can
write the ledger must not get to run code in the worker. A row that does not decode is skipped.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass, fields

from pydantic import ValidationError

from evalbot.bot.jobs.model import ScoreJob
from evalbot.decide.outcome import ScoreOutcome

log = logging.getLogger("evalbot.ledger")

QUEUED, RUNNING, SCORED, DONE, SUPERSEDED, FAILED = "queued", "running", "scored", "done", "superseded", "failed"
STATES = (QUEUED, RUNNING, SCORED, DONE, SUPERSEDED, FAILED)
FINISHED = (DONE, SUPERSEDED, FAILED)


@dataclass
class JobRecord:
    key: str
    repo: str
    pr_number: int
    head_sha: str
    base_sha: str
    reason: str = ""
    requested_by: str = ""
    state: str = QUEUED
    attempts: int = 0
    worker_id: str = ""
    heartbeat_at: float = 0.0
    check_id: str = ""
    outcome: str = ""  # the ScoreOutcome as JSON, set when state becomes `scored`
    publish_attempts: int = 0
    note: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0
    enqueued: int = 0  # 1 once a queue message for this (re)submission was written
    forge_waits: int = 0  # consecutive times GitHub was unreachable when the job was picked up
    not_before: float = 0.0  # a job put back to wait (an outage, a retry, its tree measured elsewhere): not run earlier

    @property
    def job(self) -> ScoreJob:
        return ScoreJob(
            repo=self.repo,
            pr_number=self.pr_number,
            head_sha=self.head_sha,
            base_sha=self.base_sha,
            reason=self.reason,
            requested_by=self.requested_by,
        )

    def load_outcome(self) -> ScoreOutcome:
        """The kept verdict; UndecodableOutcome when the row holds anything but a ScoreOutcome in JSON."""
        try:
            return ScoreOutcome.model_validate_json(self.outcome)
        except (ValidationError, ValueError) as exc:
            raise UndecodableOutcome(
                f"job {self.key}: the ledger's outcome is not a ScoreOutcome in JSON "
                f"({type(exc).__name__}); not loaded"
            ) from None


class LedgerBusy(RuntimeError):
    """The ledger did not answer in time (locked by another process, or a slow disk)."""


class UndecodableOutcome(ValueError):
    """A ledger row whose outcome does not decode (an old pickle, garbage, tampering): skipped."""


FIELD_TYPES = {f.name: f.type for f in fields(JobRecord)}


def record_from_strings(raw: dict[str, str]) -> JobRecord | None:
    """A record from string fields (Redis); None, logged, when a field does not parse."""
    values: dict = {}
    try:
        for name, kind in FIELD_TYPES.items():
            if name not in raw:
                continue
            value = raw[name]
            values[name] = int(value) if kind == "int" else float(value) if kind == "float" else value
        return JobRecord(**values)
    except (TypeError, ValueError) as exc:
        log.error("skipped a ledger row that does not decode (%s): %s", type(exc).__name__, str(raw.get("key", "?"))[:200])
        return None


class Ledger:
    """The state machine over a storage backend. All methods are safe across threads and processes."""

    # -- storage primitives, implemented by each backend ------------------------------------------
    def _insert(self, record: JobRecord) -> bool:
        raise NotImplementedError

    def _update(self, key: str, expect: dict[str, tuple[str, ...]], changes: dict[str, str], incr: tuple[str, ...] = ()) -> bool:
        """Apply `changes` (and +1 on `incr` fields) only if every field in `expect` holds one of its values."""
        raise NotImplementedError

    def get(self, key: str) -> JobRecord | None:
        raise NotImplementedError

    def records(self) -> list[JobRecord]:
        raise NotImplementedError

    def _kv_insert(self, namespace: str, key: str, value: str) -> bool:
        raise NotImplementedError

    def _kv_get(self, namespace: str, key: str) -> str | None:
        raise NotImplementedError

    def _kv_set(self, namespace: str, key: str, value: str) -> None:
        raise NotImplementedError

    def _kv_delete(self, namespace: str, key: str) -> None:
        raise NotImplementedError

    def _kv_items(self, namespace: str) -> dict[str, str]:
        raise NotImplementedError

    def _kv_add(self, namespace: str, key: str, amount: float) -> None:
        raise NotImplementedError

    # -- job state machine ------------------------------------------------------------------------
    def submit(self, job: ScoreJob, now: float, *, force: bool = False) -> bool:
        """Record a job as queued. False when the same job is already known (and not forced).

        `force` (a /rescore) re-opens a finished job; a job still queued, running or awaiting
        publication is never duplicated.
        """
        record = JobRecord(
            key=job.key, repo=job.repo, pr_number=job.pr_number, head_sha=job.head_sha, base_sha=job.base_sha,
            reason=job.reason, requested_by=job.requested_by, created_at=now, updated_at=now,
        )
        if self._insert(record):
            return True
        if not force:
            return False
        reopened = self._update(
            job.key,
            {"state": FINISHED},
            {"state": QUEUED, "attempts": "0", "worker_id": "", "outcome": "", "publish_attempts": "0",
             "note": f"re-opened: {job.reason}", "reason": job.reason, "requested_by": job.requested_by,
             "check_id": "", "enqueued": "0", "forge_waits": "0", "not_before": "0.0", "updated_at": repr(now)},
        )
        if reopened:
            self._kv_delete("check", job.key)  # the re-opened job gets a check run of its own
        return reopened

    def mark_enqueued(self, key: str) -> bool:
        return self._update(key, {"state": (QUEUED,)}, {"enqueued": "1"})

    def claim(self, key: str, worker_id: str, now: float) -> bool:
        return self._update(
            key, {"state": (QUEUED,)},
            {"state": RUNNING, "worker_id": worker_id, "heartbeat_at": repr(now), "updated_at": repr(now)},
            incr=("attempts",),
        )

    def heartbeat(self, key: str, worker_id: str, now: float) -> bool:
        return self._update(key, {"state": (RUNNING,), "worker_id": (worker_id,)}, {"heartbeat_at": repr(now)})

    def release(self, key: str, worker_id: str, now: float, note: str, *, attempts: int | None = None,
                forge_waits: int | None = None, not_before: float = 0.0) -> bool:
        """running -> queued (an infrastructure error to retry). `attempts` resets the count of scoring
        attempts (an attempt that never reached the scorer is given back); `forge_waits` counts outages;
        `not_before`: the job is not run before then (its own delayed message comes then)."""
        changes = {"state": QUEUED, "worker_id": "", "note": note, "updated_at": repr(now), "not_before": repr(not_before)}
        if attempts is not None:
            changes["attempts"] = str(attempts)
        if forge_waits is not None:
            changes["forge_waits"] = str(forge_waits)
        return self._update(key, {"state": (RUNNING,), "worker_id": (worker_id,)}, changes)

    def record_outcome(self, key: str, worker_id: str, outcome: ScoreOutcome, now: float) -> bool:
        """running -> scored: the verdict is durable from here on, whatever happens to publication."""
        return self._update(
            key, {"state": (RUNNING,), "worker_id": (worker_id,)},
            {"state": SCORED, "outcome": outcome.model_dump_json(by_alias=True), "updated_at": repr(now)},
        )

    def finish(self, key: str, state: str, now: float, note: str = "", *, worker_id: str | None = None) -> bool:
        if state not in FINISHED:
            raise ValueError(f"finish() takes one of {FINISHED}, not {state!r}")
        expect: dict[str, tuple[str, ...]] = {"state": (QUEUED, RUNNING, SCORED)}
        if worker_id is not None:
            expect = {"state": (RUNNING, SCORED), "worker_id": (worker_id,)}
        return self._update(key, expect, {"state": state, "note": note, "updated_at": repr(now)})

    def note_publish_failure(self, key: str, now: float, note: str) -> bool:
        return self._update(key, {"state": (SCORED,)}, {"note": note, "updated_at": repr(now)}, incr=("publish_attempts",))

    def set_check_id(self, key: str, check_id: str) -> bool:
        return self._update(key, {"state": STATES}, {"check_id": check_id})

    def claim_check(self, key: str, owner: str) -> bool:
        """Whether `owner` is the one to create this job's check run (atomic, across boxes): a queued
        announcement on one box and the job starting on another must not both create one."""
        return self._kv_insert("check", key, owner)

    def requeue_stale(self, now: float, stale_after: float) -> list[str]:
        """running jobs whose worker stopped beating -> queued. Returns the keys to enqueue again."""
        moved = []
        for record in self.records():
            if record.state == RUNNING and now - record.heartbeat_at > stale_after:
                if self._update(
                    record.key, {"state": (RUNNING,), "worker_id": (record.worker_id,), "heartbeat_at": (repr(record.heartbeat_at),)},
                    {"state": QUEUED, "worker_id": "", "note": f"worker {record.worker_id} stopped beating", "updated_at": repr(now)},
                ):
                    moved.append(record.key)
        return moved

    def requeue_orphans_of(self, box: str, now: float) -> list[str]:
        """running jobs of this box -> queued. Only safe while holding the box lock (no live worker here)."""
        moved = []
        for record in self.records():
            if record.state == RUNNING and record.worker_id.split("/", 1)[0] == box:
                if self._update(
                    record.key, {"state": (RUNNING,), "worker_id": (record.worker_id,)},
                    {"state": QUEUED, "worker_id": "", "note": f"worker {record.worker_id} died", "updated_at": repr(now)},
                ):
                    moved.append(record.key)
        return moved

    def in_states(self, *states: str) -> list[JobRecord]:
        return [r for r in self.records() if r.state in states]

    def mark_served(self, requester: str, now: float) -> None:
        """A job of `requester` started now (the queue's round robin: `JobQueue.fair_order`)."""
        self._kv_set("served", requester, repr(now))

    def served_at(self, requester: str) -> float | None:
        """When a job of `requester` last started (None: never, or a value that does not parse)."""
        value = self._kv_get("served", requester)
        try:
            return float(value) if value is not None else None
        except ValueError:
            return None

    def restore_served(self, requester: str, before: float | None, mark: float) -> None:
        """A job of `requester` that started at `mark` gave its turn back (it measured nothing): their mark as it
        was before, unless a later job of theirs has started since."""
        if self.served_at(requester) != mark:
            return
        if before is None:
            self._kv_delete("served", requester)
        else:
            self._kv_set("served", requester, repr(before))

    def served(self) -> dict[str, float]:
        """When a job of each requester last started (a value that does not parse counts as never)."""
        out = {}
        for who, value in self._kv_items("served").items():
            try:
                out[who] = float(value)
            except ValueError:
                continue
        return out

    def queued(self) -> list[JobRecord]:
        """The jobs waiting to run (a backend may select them without reading every finished job)."""
        return self.in_states(QUEUED)

    def for_base(self, repo: str, base_sha: str) -> list[JobRecord]:
        return [r for r in self.records() if r.repo == repo and r.base_sha == base_sha]

    def for_pull(self, repo: str, pr_number: int) -> list[JobRecord]:
        return [r for r in self.records() if r.repo == repo and r.pr_number == pr_number]

    # -- webhook deliveries, flags, rounds ----------------------------------------------------------
    def remember_delivery(self, delivery_id: str, now: float) -> bool:
        """True the first time a delivery id is seen; False for a replay."""
        return self._kv_insert("delivery", delivery_id, repr(now))

    def forget_delivery(self, delivery_id: str) -> None:
        self._kv_delete("delivery", delivery_id)

    def prune_deliveries(self, older_than: float) -> int:
        old = [k for k, v in self._kv_items("delivery").items() if float(v) < older_than]
        for key in old:
            self._kv_delete("delivery", key)
        return len(old)

    def claim_rate(self, key: str, now: float, window: float) -> bool:
        """True at most once per `key` and window of `window` seconds (rate-limited replies)."""
        bucket = int(now // max(window, 1.0))
        return self._kv_insert("rate", f"{key}@{bucket}", repr(now))

    def prune_rates(self, older_than: float) -> int:
        old = [k for k, v in self._kv_items("rate").items() if float(v) < older_than]
        for key in old:
            self._kv_delete("rate", key)
        return len(old)

    def bump(self, counter: str, amount: float = 1.0) -> None:
        """Add to a shared counter (exported by /metrics of `evalbot serve`, whichever box counted)."""
        self._kv_add("metric", counter, amount)

    def counters(self) -> dict[str, float]:
        return {k: float(v) for k, v in self._kv_items("metric").items()}

    def get_doc(self, namespace: str, name: str) -> str | None:
        """A document kept for the bot's boxes together (e.g. the scorings of each candidate tree)."""
        return self._kv_get(f"doc:{namespace}", name)

    def set_doc(self, namespace: str, name: str, text: str) -> None:
        self._kv_set(f"doc:{namespace}", name, text)

    def insert_doc(self, namespace: str, name: str, text: str) -> bool:
        """Write a document only if none has that name (one atomic step on every backend)."""
        return self._kv_insert(f"doc:{namespace}", name, text)

    def delete_doc(self, namespace: str, name: str) -> None:
        self._kv_delete(f"doc:{namespace}", name)

    def get_flag(self, name: str) -> str | None:
        return self._kv_get("flag", name)

    def set_flag(self, name: str, value: str) -> None:
        self._kv_set("flag", name, value)

    def claim_round(self, repo: str, base_sha: str, fingerprint: str) -> bool:
        """Exactly one worker decides a given round (same base, same finished jobs)."""
        return self._kv_insert("round", f"{repo}@{base_sha}:{fingerprint}", "claimed")

    def mark_round_merged(self, repo: str, base_sha: str, pr_number: int) -> None:
        self._kv_set("merged", f"{repo}@{base_sha}", str(pr_number))

    def round_merged(self, repo: str, base_sha: str) -> int | None:
        value = self._kv_get("merged", f"{repo}@{base_sha}")
        return int(value) if value else None

    def close(self) -> None:
        pass
