"""The ledger's two stores, one behaviour (the state machine is `Ledger`): SQLite for one box, Redis
for many. Each implements only the storage primitives."""

from __future__ import annotations

import json
import sqlite3
import threading
from dataclasses import asdict, dataclass
from pathlib import Path

from evalbot.bot.jobs.ledger import FIELD_TYPES, QUEUED, JobRecord, Ledger, LedgerBusy, record_from_strings


@dataclass
class _Result:
    rowcount: int
    rows: list[tuple]
    names: list[str]


def _column(name: str, kind: str) -> str:
    sql_type = "INTEGER" if kind == "int" else "REAL" if kind == "float" else "TEXT"
    default = "0" if kind in ("int", "float") else "''"
    return f"{name} {sql_type} NOT NULL" + (" PRIMARY KEY" if name == "key" else f" DEFAULT {default}")


class SqliteLedger(Ledger):
    """One file under the state directory; shared by the service and the worker of one box.

    `busy_timeout`: how long a call waits for a lock held by another process (or thread) before it
    raises `LedgerBusy`. The webhook service keeps it short, so GitHub hears an answer in time."""

    def __init__(self, path: Path | str, busy_timeout: float = 30.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.busy_timeout = busy_timeout
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        self._db.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        self._db.execute("PRAGMA journal_mode=WAL")
        columns = ", ".join(_column(name, kind) for name, kind in FIELD_TYPES.items())
        self._db.execute(f"CREATE TABLE IF NOT EXISTS jobs ({columns})")
        have = {row[1] for row in self._db.execute("PRAGMA table_info(jobs)")}
        for name, kind in FIELD_TYPES.items():  # a ledger of an earlier version gains the new columns
            if name not in have:
                self._db.execute(f"ALTER TABLE jobs ADD COLUMN {_column(name, kind)}")
        self._db.execute("CREATE TABLE IF NOT EXISTS kv (ns TEXT NOT NULL, k TEXT NOT NULL, v TEXT NOT NULL, PRIMARY KEY (ns, k))")

    def _exec(self, sql: str, params: tuple = ()) -> _Result:
        """One statement, its rows read while the connection is still ours."""
        if not self._lock.acquire(timeout=self.busy_timeout):
            raise LedgerBusy(f"the ledger {self.path} is busy (another call has waited {self.busy_timeout:g}s)")
        try:
            cursor = self._db.execute(sql, params)
            names = [d[0] for d in cursor.description or ()]
            return _Result(cursor.rowcount, cursor.fetchall() if names else [], names)
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise LedgerBusy(f"the ledger {self.path} is locked: {exc}") from None
            raise
        finally:
            self._lock.release()

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
        kind = FIELD_TYPES[name]
        return int(value) if kind == "int" else float(value) if kind == "float" else value

    @staticmethod
    def _records(result: _Result) -> list[JobRecord]:
        return [JobRecord(**dict(zip(result.names, row))) for row in result.rows]

    def get(self, key):
        found = self._records(self._exec("SELECT * FROM jobs WHERE key = ?", (key,)))
        return found[0] if found else None

    def records(self):
        return self._records(self._exec("SELECT * FROM jobs ORDER BY created_at, key"))

    def queued(self):
        return self._records(self._exec("SELECT * FROM jobs WHERE state = ? ORDER BY created_at, key", (QUEUED,)))

    def _kv_insert(self, namespace, key, value):
        return self._exec("INSERT OR IGNORE INTO kv (ns, k, v) VALUES (?, ?, ?)", (namespace, key, value)).rowcount == 1

    def _kv_get(self, namespace, key):
        rows = self._exec("SELECT v FROM kv WHERE ns = ? AND k = ?", (namespace, key)).rows
        return rows[0][0] if rows else None

    def _kv_set(self, namespace, key, value):
        self._exec("INSERT OR REPLACE INTO kv (ns, k, v) VALUES (?, ?, ?)", (namespace, key, value))

    def _kv_delete(self, namespace, key):
        self._exec("DELETE FROM kv WHERE ns = ? AND k = ?", (namespace, key))

    def _kv_items(self, namespace):
        return dict(self._exec("SELECT k, v FROM kv WHERE ns = ?", (namespace,)).rows)

    def _kv_add(self, namespace, key, amount):
        self._exec(
            "INSERT INTO kv (ns, k, v) VALUES (?, ?, ?) ON CONFLICT (ns, k) DO UPDATE SET v = CAST(CAST(v AS REAL) + ? AS TEXT)",
            (namespace, key, repr(float(amount)), float(amount)),
        )

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
        return record_from_strings(raw) if raw else None

    def records(self):
        keys = sorted(self._redis.smembers(f"{self.ns}:jobs"))
        pipe = self._redis.pipeline()
        for key in keys:
            pipe.hgetall(self._job_key(key))
        found = [r for r in (record_from_strings(raw) for raw in pipe.execute() if raw) if r is not None]
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

    def _kv_add(self, namespace, key, amount):
        self._redis.hincrbyfloat(f"{self.ns}:kv:{namespace}", key, float(amount))

    def ping(self) -> None:
        self._redis.ping()

    def close(self):
        self._redis.close()
