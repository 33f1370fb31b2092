"""The job ledger: the durable truth about every score job, beside the queue.

Huey acknowledges a message when a worker dequeues it, so a worker killed mid-job would lose the job.
The ledger closes that gap: each job has a state (queued -> running -> scored -> done, or superseded /
failed), every change is a compare-and-set, a running job carries its worker's heartbeat, and a
worker re-enqueues what a dead worker left behind (see `JobQueue.recover`). The verdict is kept here
(state `scored`) before anything is published, so a failed GitHub call never loses it.

Two backends with one behaviour: SQLite (one box, the default) and Redis (many boxes). Each only
implements a handful of storage primitives; the state machine lives once, in `Ledger`.
"""

from __future__ import annotations

import base64
import json
import sqlite3
import threading
from dataclasses import asdict, dataclass, fields
from pathlib import Path

from evalbot.jobs.model import ScoreJob

QUEUED, RUNNING, SCORED, DONE, SUPERSEDED, FAILED = "queued", "running", "scored", "done", "superseded", "failed"
STATES = (QUEUED, RUNNING, SCORED, DONE, SUPERSEDED, FAILED)
IN_FLIGHT = (QUEUED, RUNNING, SCORED)
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
    outcome: str = ""  # base64 of the pickled outcome, set when state becomes `scored`
    publish_attempts: int = 0
    note: str = ""
    created_at: float = 0.0
    updated_at: float = 0.0

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

    @property
    def outcome_bytes(self) -> bytes | None:
        return base64.b64decode(self.outcome) if self.outcome else None


_FIELD_TYPES = {f.name: f.type for f in fields(JobRecord)}


def _record_from_strings(raw: dict[str, str]) -> JobRecord:
    values: dict = {}
    for name, kind in _FIELD_TYPES.items():
        if name not in raw:
            continue
        value = raw[name]
        values[name] = int(value) if kind == "int" else float(value) if kind == "float" else value
    return JobRecord(**values)


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
             "check_id": "", "updated_at": repr(now)},
        )
        if reopened:
            self._kv_delete("check", job.key)  # the re-opened job gets a check run of its own
        return reopened

    def claim(self, key: str, worker_id: str, now: float) -> bool:
        return self._update(
            key, {"state": (QUEUED,)},
            {"state": RUNNING, "worker_id": worker_id, "heartbeat_at": repr(now), "updated_at": repr(now)},
            incr=("attempts",),
        )

    def heartbeat(self, key: str, worker_id: str, now: float) -> bool:
        return self._update(key, {"state": (RUNNING,), "worker_id": (worker_id,)}, {"heartbeat_at": repr(now)})

    def release(self, key: str, worker_id: str, now: float, note: str) -> bool:
        """running -> queued (an infrastructure error to retry)."""
        return self._update(
            key, {"state": (RUNNING,), "worker_id": (worker_id,)},
            {"state": QUEUED, "worker_id": "", "note": note, "updated_at": repr(now)},
        )

    def record_outcome(self, key: str, worker_id: str, outcome: bytes, now: float) -> bool:
        """running -> scored: the verdict is durable from here on, whatever happens to publication."""
        return self._update(
            key, {"state": (RUNNING,), "worker_id": (worker_id,)},
            {"state": SCORED, "outcome": base64.b64encode(outcome).decode(), "updated_at": repr(now)},
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

    def requeue_orphans_of(self, box_id: str, now: float) -> list[str]:
        """running jobs of this box -> queued. Only safe while holding the box lock (no live worker here)."""
        moved = []
        for record in self.records():
            if record.state == RUNNING and record.worker_id.split("/", 1)[0] == box_id:
                if self._update(
                    record.key, {"state": (RUNNING,), "worker_id": (record.worker_id,)},
                    {"state": QUEUED, "worker_id": "", "note": f"worker {record.worker_id} died", "updated_at": repr(now)},
                ):
                    moved.append(record.key)
        return moved

    def in_states(self, *states: str) -> list[JobRecord]:
        return [r for r in self.records() if r.state in states]

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


class SqliteLedger(Ledger):
    """One file under the state directory; shared by the service and the worker of one box."""

    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), timeout=30, isolation_level=None, check_same_thread=False)
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA busy_timeout=30000")
        columns = ", ".join(
            f"{name} {'INTEGER' if kind == 'int' else 'REAL' if kind == 'float' else 'TEXT'} NOT NULL"
            + (" PRIMARY KEY" if name == "key" else "")
            for name, kind in _FIELD_TYPES.items()
        )
        self._db.execute(f"CREATE TABLE IF NOT EXISTS jobs ({columns})")
        self._db.execute("CREATE TABLE IF NOT EXISTS kv (ns TEXT NOT NULL, k TEXT NOT NULL, v TEXT NOT NULL, PRIMARY KEY (ns, k))")

    def _exec(self, sql: str, params: tuple = ()) -> sqlite3.Cursor:
        with self._lock:
            return self._db.execute(sql, params)

    def _insert(self, record: JobRecord) -> bool:
        data = asdict(record)
        names = ", ".join(data)
        marks = ", ".join("?" for _ in data)
        return self._exec(f"INSERT OR IGNORE INTO jobs ({names}) VALUES ({marks})", tuple(data.values())).rowcount == 1

    def _update(self, key, expect, changes, incr=()):
        sets = [f"{name} = ?" for name in changes] + [f"{name} = {name} + 1" for name in incr]
        params: list = [self._typed(name, value) for name, value in changes.items()]
        where = ["key = ?"]
        params.append(key)
        for name, allowed in expect.items():
            where.append(f"{name} IN ({', '.join('?' for _ in allowed)})")
            params.extend(self._typed(name, value) for value in allowed)
        sql = f"UPDATE jobs SET {', '.join(sets)} WHERE {' AND '.join(where)}"
        return self._exec(sql, tuple(params)).rowcount == 1

    @staticmethod
    def _typed(name: str, value: str):
        kind = _FIELD_TYPES[name]
        return int(value) if kind == "int" else float(value) if kind == "float" else value

    def _row_to_record(self, cursor: sqlite3.Cursor, row: tuple) -> JobRecord:
        names = [d[0] for d in cursor.description]
        return JobRecord(**dict(zip(names, row)))

    def get(self, key):
        cursor = self._exec("SELECT * FROM jobs WHERE key = ?", (key,))
        row = cursor.fetchone()
        return self._row_to_record(cursor, row) if row else None

    def records(self):
        cursor = self._exec("SELECT * FROM jobs ORDER BY created_at, key")
        return [self._row_to_record(cursor, row) for row in cursor.fetchall()]

    def _kv_insert(self, namespace, key, value):
        return self._exec("INSERT OR IGNORE INTO kv (ns, k, v) VALUES (?, ?, ?)", (namespace, key, value)).rowcount == 1

    def _kv_get(self, namespace, key):
        row = self._exec("SELECT v FROM kv WHERE ns = ? AND k = ?", (namespace, key)).fetchone()
        return row[0] if row else None

    def _kv_set(self, namespace, key, value):
        self._exec("INSERT OR REPLACE INTO kv (ns, k, v) VALUES (?, ?, ?)", (namespace, key, value))

    def _kv_delete(self, namespace, key):
        self._exec("DELETE FROM kv WHERE ns = ? AND k = ?", (namespace, key))

    def _kv_items(self, namespace):
        return dict(self._exec("SELECT k, v FROM kv WHERE ns = ?", (namespace,)).fetchall())

    def close(self):
        with self._lock:
            self._db.close()


_REDIS_INSERT = """
if redis.call('EXISTS', KEYS[1]) == 1 then return 0 end
local data = cjson.decode(ARGV[1])
for name, value in pairs(data) do redis.call('HSET', KEYS[1], name, value) end
redis.call('SADD', KEYS[2], ARGV[2])
return 1
"""

_REDIS_UPDATE = """
if redis.call('EXISTS', KEYS[1]) == 0 then return 0 end
local expect = cjson.decode(ARGV[1])
for name, allowed in pairs(expect) do
  local current = redis.call('HGET', KEYS[1], name) or ''
  local ok = false
  for _, value in ipairs(allowed) do if current == value then ok = true end end
  if not ok then return 0 end
end
local changes = cjson.decode(ARGV[2])
for name, value in pairs(changes) do redis.call('HSET', KEYS[1], name, value) end
for _, name in ipairs(cjson.decode(ARGV[3])) do redis.call('HINCRBY', KEYS[1], name, 1) end
return 1
"""


class RedisLedger(Ledger):
    """Hashes in Redis, shared by every box; each transition is one Lua script (atomic)."""

    def __init__(self, url: str, namespace: str = "evalbot"):
        import redis  # imported here so SQLite-only deployments never need a Redis client

        self._redis = redis.Redis.from_url(url, decode_responses=True)
        self.ns = namespace
        self._insert_script = self._redis.register_script(_REDIS_INSERT)
        self._update_script = self._redis.register_script(_REDIS_UPDATE)

    def _job_key(self, key: str) -> str:
        return f"{self.ns}:job:{key}"

    def _insert(self, record):
        data = {name: (repr(v) if isinstance(v, float) else str(v)) for name, v in asdict(record).items()}
        return bool(self._insert_script(keys=[self._job_key(record.key), f"{self.ns}:jobs"], args=[json.dumps(data), record.key]))

    def _update(self, key, expect, changes, incr=()):
        # heartbeat_at is compared as the string it was stored as; repr() keeps floats exact both ways.
        expect_json = json.dumps({name: list(allowed) for name, allowed in expect.items()})
        return bool(self._update_script(keys=[self._job_key(key)], args=[expect_json, json.dumps(changes), json.dumps(list(incr))]))

    def get(self, key):
        raw = self._redis.hgetall(self._job_key(key))
        return _record_from_strings(raw) if raw else None

    def records(self):
        keys = sorted(self._redis.smembers(f"{self.ns}:jobs"))
        pipe = self._redis.pipeline()
        for key in keys:
            pipe.hgetall(self._job_key(key))
        found = [_record_from_strings(raw) for raw in pipe.execute() if raw]
        return sorted(found, key=lambda r: (r.created_at, r.key))

    def _kv_insert(self, namespace, key, value):
        return bool(self._redis.hsetnx(f"{self.ns}:kv:{namespace}", key, value))

    def _kv_get(self, namespace, key):
        return self._redis.hget(f"{self.ns}:kv:{namespace}", key)

    def _kv_set(self, namespace, key, value):
        self._redis.hset(f"{self.ns}:kv:{namespace}", key, value)

    def _kv_delete(self, namespace, key):
        self._redis.hdel(f"{self.ns}:kv:{namespace}", key)

    def _kv_items(self, namespace):
        return self._redis.hgetall(f"{self.ns}:kv:{namespace}")

    def close(self):
        self._redis.close()
