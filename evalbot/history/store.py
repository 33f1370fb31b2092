"""Where the history lives: SQLite (one box, the default; `<state dir>/history.sqlite3`) or the same
Redis as the queue and the ledger (many boxes). Both keep each `HistoryEntry` as JSON (never a
pickle) with a few columns to select by; an entry that no longer decodes is skipped, logged."""

from __future__ import annotations

import logging
import sqlite3
import threading
from datetime import datetime
from pathlib import Path

from pydantic import ValidationError

from evalbot.history.schema import HistoryEntry, Kind

log = logging.getLogger("evalbot.history")

HISTORY_DB = "history.sqlite3"


def _epoch(stamp: str) -> float:
    try:
        return datetime.fromisoformat(stamp.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return 0.0


def _decode(raw: str | bytes | None) -> HistoryEntry | None:
    if raw is None:
        return None
    try:
        return HistoryEntry.model_validate_json(raw)
    except (ValidationError, ValueError) as exc:
        log.error("skipped a history entry that does not decode (%s)", type(exc).__name__)
        return None


def _matches(entry: HistoryEntry, repo: str | None, kind: Kind | None, pr_number: int | None) -> bool:
    return ((repo is None or entry.repo.lower() == repo.lower()) and (kind is None or entry.kind == kind)
            and (pr_number is None or entry.pr_number == pr_number))


class HistoryStore:
    """Every scoring and calibration, oldest first."""

    def add(self, entry: HistoryEntry) -> str:
        """Keep `entry` (the same scoring again replaces it); returns its id."""
        raise NotImplementedError

    def get(self, entry_id: str) -> HistoryEntry | None:
        raise NotImplementedError

    def entries(self, *, repo: str | None = None, kind: Kind | None = None, pr_number: int | None = None) -> list[HistoryEntry]:
        raise NotImplementedError

    def close(self) -> None:
        pass


class SqliteHistory(HistoryStore):
    def __init__(self, path: Path | str, busy_timeout: float = 30.0):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.Lock()
        self._db = sqlite3.connect(str(self.path), timeout=busy_timeout, isolation_level=None, check_same_thread=False)
        self._db.execute(f"PRAGMA busy_timeout={int(busy_timeout * 1000)}")
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS history (id TEXT PRIMARY KEY, kind TEXT NOT NULL, repo TEXT NOT NULL,"
            " pr_number INTEGER, finished REAL NOT NULL, body TEXT NOT NULL)"
        )
        self._db.execute("CREATE INDEX IF NOT EXISTS history_by_repo ON history (repo, kind, finished)")

    def add(self, entry):
        entry_id = entry.entry_id
        with self._lock:
            self._db.execute(
                "INSERT OR REPLACE INTO history (id, kind, repo, pr_number, finished, body) VALUES (?, ?, ?, ?, ?, ?)",
                (entry_id, entry.kind, entry.repo.lower(), entry.pr_number, _epoch(entry.finished_at), entry.model_dump_json()),
            )
        return entry_id

    def get(self, entry_id):
        with self._lock:
            row = self._db.execute("SELECT body FROM history WHERE id = ?", (entry_id,)).fetchone()
        return _decode(row[0]) if row else None

    def entries(self, *, repo=None, kind=None, pr_number=None):
        where, params = [], []
        for column, value in (("repo", repo.lower() if repo else None), ("kind", kind), ("pr_number", pr_number)):
            if value is not None:
                where.append(f"{column} = ?")
                params.append(value)
        sql = "SELECT body FROM history" + (f" WHERE {' AND '.join(where)}" if where else "") + " ORDER BY finished, id"
        with self._lock:
            rows = self._db.execute(sql, tuple(params)).fetchall()
        return [e for e in (_decode(r[0]) for r in rows) if e is not None]

    def close(self):
        with self._lock:
            self._db.close()


class RedisHistory(HistoryStore):
    """A hash of id -> entry JSON and a sorted set of ids by finishing time, beside the queue's keys."""

    def __init__(self, url: str, namespace: str = "evalbot", client=None):
        import redis  # SQLite-only deployments never need a Redis client

        self._redis = client or redis.Redis.from_url(url, decode_responses=True)
        self._entries, self._order = f"{namespace}:history:entries", f"{namespace}:history:order"

    def add(self, entry):
        entry_id = entry.entry_id
        pipe = self._redis.pipeline(transaction=True)
        pipe.hset(self._entries, entry_id, entry.model_dump_json())
        pipe.zadd(self._order, {entry_id: _epoch(entry.finished_at)})
        pipe.execute()
        return entry_id

    def get(self, entry_id):
        return _decode(self._redis.hget(self._entries, entry_id))

    def entries(self, *, repo=None, kind=None, pr_number=None):
        ids = self._redis.zrange(self._order, 0, -1)
        raws = self._redis.hmget(self._entries, ids) if ids else []
        found = [e for e in (_decode(r) for r in raws if r is not None) if e is not None]
        return [e for e in found if _matches(e, repo, kind, pr_number)]

    def close(self):
        self._redis.close()


def open_history(redis_url: str, sqlite_path: Path, busy_timeout: float = 30.0) -> HistoryStore:
    """Redis when the deployment shares one (`redis_url`), else the SQLite file `sqlite_path`."""
    if redis_url:
        return RedisHistory(redis_url)
    return SqliteHistory(sqlite_path, busy_timeout=busy_timeout)


def local_history(state_dir: Path, override: Path | None = None) -> SqliteHistory:
    """The history of a local repository (`evalbot score --pr`, `calibrate`, `demo`, `dashboard`):
    `<repo>/.evalbot/history.sqlite3`, or the `history_db` setting."""
    return SqliteHistory(override or state_dir / HISTORY_DB)


def recorded(store: HistoryStore, entry: HistoryEntry) -> str | None:
    """`store.add(entry)`, but a history that cannot be written never costs a verdict: logged, None."""
    try:
        return store.add(entry)
    except Exception as exc:  # noqa: BLE001 - the history is a view; the ledger and the forge hold the truth
        log.warning("could not record %s of %s in the history: %s: %s", entry.kind, entry.head_sha[:12], type(exc).__name__, exc)
        return None
