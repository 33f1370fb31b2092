"""The ledger and the queue carry JSON, never pickle: a row or a message that holds a pickle (here one
that would run a shell command when loaded) or garbage is logged and skipped, and the sweeper and the
worker go on. Whoever can write the ledger or the queue must not get to run code in the worker."""

from __future__ import annotations

import logging
import os
import pickle

import pytest
from fakegithub.helpers import fake_outcome

from evalbot.bot.jobs.ledger import FAILED, RUNNING, SCORED, record_from_strings
from evalbot.bot.jobs.ledger_stores import SqliteLedger
from evalbot.bot.jobs.model import ScoreJob
from evalbot.bot.jobs.queue import JobQueue, make_huey
from evalbot.bot.jobs.serializer import JsonSerializer, UndecodableMessage
from evalbot.bot.worker.worker import Worker
from evalbot.settings import load_settings

REPO = "octo/dspark"
JOB = ScoreJob(repo=REPO, pr_number=3, head_sha="a" * 40, base_sha="b" * 40, reason="opened")


class _RunsAShell:
    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        return (os.system, (f"touch {self.marker}",))


class _NoForge:
    def __getattr__(self, name):
        raise AssertionError(f"a skipped row must not reach the forge ({name})")


def _worker(tmp_path, published: list) -> Worker:
    settings = load_settings(environ={}, repo=REPO, box="box-a", state_dir=tmp_path / "state")
    queue = JobQueue(make_huey(settings), SqliteLedger(settings.ledger_db_path))
    worker = Worker(queue, lambda repo: _NoForge(), lambda job, progress: None,
                    lambda outcome, forge, n, check: published.append(outcome), settings)
    queue.bind(worker)
    return worker


def _scored_row(ledger, outcome_text: str) -> None:
    ledger.submit(JOB, 1.0)
    assert ledger.claim(JOB.key, "box-a/1/x", 1.0)
    assert ledger._update(JOB.key, {"state": (RUNNING,)}, {"state": SCORED, "outcome": outcome_text, "updated_at": "1.0"})


@pytest.mark.parametrize("kind", ["pickle", "base64 pickle", "garbage JSON", "another model's JSON"])
def test_an_undecodable_ledger_row_is_skipped_never_executed(tmp_path, caplog, kind):
    import base64

    marker = tmp_path / "pwned"
    payload = pickle.dumps(_RunsAShell(marker), protocol=0).decode("latin-1")
    text = {
        "pickle": payload,
        "base64 pickle": base64.b64encode(payload.encode("latin-1")).decode(),  # what the ledger held before
        "garbage JSON": '{"verdict": ',
        "another model's JSON": '{"tier": "XL", "speedup": 0.5}',
    }[kind]
    published: list = []
    worker = _worker(tmp_path, published)
    _scored_row(worker.ledger, text)
    with caplog.at_level(logging.ERROR, logger="evalbot.worker"):
        assert worker.sweep()["published"] == 0  # the sweeper goes on
    assert not marker.exists() and published == []
    record = worker.ledger.get(JOB.key)
    assert record.state == FAILED and "not a ScoreOutcome in JSON" in record.note
    assert "not a ScoreOutcome in JSON" in caplog.text
    assert worker.sweep()["published"] == 0  # and it is not tried again


def test_a_kept_outcome_round_trips_as_json(tmp_path):
    published: list = []
    worker = _worker(tmp_path, published)
    worker.ledger.submit(JOB, 1.0)
    worker.ledger.claim(JOB.key, "box-a/1/x", 1.0)
    outcome = fake_outcome(JOB, "XL", 0.3)
    assert worker.ledger.record_outcome(JOB.key, "box-a/1/x", outcome, 2.0)
    stored = worker.ledger.get(JOB.key).outcome
    assert stored.startswith("{") and worker.ledger.get(JOB.key).load_outcome() == outcome


def test_an_undecodable_round_entry_is_left_out(tmp_path, caplog):
    from evalbot.bot.worker.rounds import _round_entries

    record = record_from_strings({"key": "k", "repo": REPO, "pr_number": "3", "head_sha": "a" * 40,
                                  "base_sha": "b" * 40, "outcome": "garbage"})
    with caplog.at_level(logging.ERROR, logger="evalbot.worker"):
        assert _round_entries(_NoForge(), [record]) == []
    assert "left out of the round" in caplog.text


def test_a_redis_row_that_does_not_parse_is_skipped(caplog):
    with caplog.at_level(logging.ERROR, logger="evalbot.ledger"):
        assert record_from_strings({"key": "k", "repo": REPO, "pr_number": "three"}) is None
    assert "does not decode" in caplog.text


def test_the_queue_writes_json_and_skips_a_pickled_message(tmp_path, caplog):
    marker = tmp_path / "pwned"
    published: list = []
    worker = _worker(tmp_path, published)
    huey = worker.queue.huey
    assert isinstance(huey.serializer, JsonSerializer)
    worker.queue.enqueue_key("no-such-job")
    (raw,) = [data for data in huey.storage.enqueued_items()]
    assert raw.lstrip().startswith(b"{")  # what a JSON message looks like on disk
    huey.storage.flush_queue()
    huey.storage.enqueue(pickle.dumps(_RunsAShell(marker)), 0)  # someone who can write the queue
    huey.storage.enqueue(b"\x00 not json", 0)
    huey.storage.enqueue(b"[1, 2]", 0)  # JSON, but not a message
    worker.queue.enqueue_key("no-such-job")
    with caplog.at_level(logging.ERROR, logger="evalbot.queue"):
        assert worker.queue.drain() == 1  # the good message still runs
    assert not marker.exists()
    assert caplog.text.count("skipped") >= 3


def test_the_serializer_refuses_what_is_not_a_message():
    serializer = JsonSerializer()
    for data in (b'{"__message__": [1, 2]}', b'{"__message__": {"name": 3}}', b'{"__message__": {"name": "x", "evil": 1}}', b"\xff"):
        with pytest.raises(UndecodableMessage):
            serializer.deserialize(data)


def test_a_chore_that_does_not_decode_is_skipped(tmp_path, caplog):
    published: list = []
    worker = _worker(tmp_path, published)
    with caplog.at_level(logging.ERROR, logger="evalbot.queue"):
        assert worker.queue._run_chore({"kind": "reply", "repo": 1}) == "skipped: undecodable chore"
    assert "does not decode" in caplog.text
