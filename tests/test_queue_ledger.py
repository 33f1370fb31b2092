"""The job ledger's state machine, the same on SQLite and on a real redis-server."""

from __future__ import annotations

import threading

import pytest

from evalbot.bot.jobs.boxlock import BoxLock
from evalbot.bot.jobs.ledger import DONE, FAILED, QUEUED, RUNNING, SCORED, SUPERSEDED
from evalbot.bot.jobs.ledger_stores import RedisLedger, SqliteLedger
from evalbot.bot.jobs.model import ScoreJob
from fakegithub.helpers import fake_outcome, redis_url  # noqa: F401  (redis_url: a pytest fixture)

JOB = ScoreJob(repo="o/r", pr_number=3, head_sha="a" * 40, base_sha="b" * 40, reason="opened")
T = 1000.0


@pytest.fixture(params=["sqlite", "redis"])
def ledger(request, tmp_path):
    if request.param == "sqlite":
        yield SqliteLedger(tmp_path / "ledger.sqlite3")
    else:
        yield RedisLedger(request.getfixturevalue("redis_url"))


def test_submit_is_idempotent(ledger):
    assert ledger.submit(JOB, T)
    assert not ledger.submit(JOB, T + 1)
    record = ledger.get(JOB.key)
    assert (record.state, record.pr_number, record.head_sha, record.attempts, record.created_at) == (QUEUED, 3, "a" * 40, 0, T)
    assert record.job == JOB


def test_the_life_of_a_job(ledger):
    ledger.submit(JOB, T)
    assert ledger.claim(JOB.key, "box/1/a", T + 1)
    assert not ledger.claim(JOB.key, "box/2/b", T + 1)  # exactly one worker
    assert ledger.heartbeat(JOB.key, "box/1/a", T + 5) and not ledger.heartbeat(JOB.key, "box/2/b", T + 5)
    outcome = fake_outcome(JOB, "XL", 0.25)
    assert not ledger.record_outcome(JOB.key, "box/2/b", outcome, T + 6)
    assert ledger.record_outcome(JOB.key, "box/1/a", outcome, T + 6)
    record = ledger.get(JOB.key)
    assert record.state == SCORED and record.load_outcome() == outcome and record.attempts == 1
    assert ledger.note_publish_failure(JOB.key, T + 7, "502")
    assert ledger.get(JOB.key).publish_attempts == 1
    assert ledger.finish(JOB.key, DONE, T + 8, "published")
    assert ledger.get(JOB.key).state == DONE
    assert not ledger.submit(JOB, T + 9)
    assert ledger.submit(JOB, T + 9, force=True)  # /rescore
    record = ledger.get(JOB.key)
    assert record.state == QUEUED and record.attempts == 0 and record.outcome == ""


def test_force_never_duplicates_a_job_in_flight(ledger):
    ledger.submit(JOB, T)
    ledger.claim(JOB.key, "box/1/a", T)
    assert not ledger.submit(JOB, T, force=True)
    assert ledger.get(JOB.key).state == RUNNING


def test_only_one_of_many_threads_claims(ledger):
    ledger.submit(JOB, T)
    wins = []
    barrier = threading.Barrier(8)

    def race(i):
        barrier.wait()
        if ledger.claim(JOB.key, f"box/{i}/x", T):
            wins.append(i)

    threads = [threading.Thread(target=race, args=(i,)) for i in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(wins) == 1 and ledger.get(JOB.key).worker_id == f"box/{wins[0]}/x"


def test_stale_running_jobs_are_requeued(ledger):
    ledger.submit(JOB, T)
    ledger.claim(JOB.key, "box/1/a", T)
    ledger.heartbeat(JOB.key, "box/1/a", T + 50)
    assert ledger.requeue_stale(T + 100, stale_after=60) == []
    assert ledger.requeue_stale(T + 111, stale_after=60) == [JOB.key]
    record = ledger.get(JOB.key)
    assert record.state == QUEUED and "stopped beating" in record.note
    assert not ledger.heartbeat(JOB.key, "box/1/a", T + 112)  # the old worker learns it lost the job


def test_orphans_of_a_box(ledger):
    other = ScoreJob(repo="o/r", pr_number=4, head_sha="c" * 40, base_sha="b" * 40)
    ledger.submit(JOB, T)
    ledger.submit(other, T)
    ledger.claim(JOB.key, "gpu-1/77/a", T)
    ledger.claim(other.key, "gpu-2/78/b", T)
    assert ledger.requeue_orphans_of("gpu-1", T) == [JOB.key]
    assert ledger.get(other.key).state == RUNNING


def test_finish_rules(ledger):
    ledger.submit(JOB, T)
    assert ledger.finish(JOB.key, SUPERSEDED, T, "head moved")
    assert not ledger.finish(JOB.key, FAILED, T)  # already finished
    with pytest.raises(ValueError):
        ledger.finish(JOB.key, RUNNING, T)


def test_queries(ledger):
    other = ScoreJob(repo="o/r", pr_number=4, head_sha="c" * 40, base_sha="d" * 40)
    ledger.submit(JOB, T)
    ledger.submit(other, T + 1)
    assert [r.key for r in ledger.for_base("o/r", "b" * 40)] == [JOB.key]
    assert [r.key for r in ledger.for_pull("o/r", 4)] == [other.key]
    assert [r.key for r in ledger.in_states(QUEUED)] == [JOB.key, other.key]
    assert ledger.set_check_id(JOB.key, "123") and ledger.get(JOB.key).check_id == "123"


def test_deliveries_flags_and_rounds(ledger):
    assert ledger.remember_delivery("d-1", T)
    assert not ledger.remember_delivery("d-1", T + 1)
    ledger.forget_delivery("d-1")
    assert ledger.remember_delivery("d-1", T + 2)
    ledger.remember_delivery("d-old", T - 10_000)
    assert ledger.prune_deliveries(T - 1) == 1 and ledger.remember_delivery("d-old", T)
    assert ledger.get_flag("automerge:o/r") is None
    ledger.set_flag("automerge:o/r", "on")
    assert ledger.get_flag("automerge:o/r") == "on"
    assert ledger.claim_round("o/r", "b" * 40, "fp:0") and not ledger.claim_round("o/r", "b" * 40, "fp:0")
    assert ledger.round_merged("o/r", "b" * 40) is None
    ledger.mark_round_merged("o/r", "b" * 40, 3)
    assert ledger.round_merged("o/r", "b" * 40) == 3


def test_unknown_keys(ledger):
    assert ledger.get("nope") is None
    assert not ledger.claim("nope", "w", T)
    assert not ledger.finish("nope", DONE, T)


def test_box_lock_excludes_threads_and_processes(tmp_path):
    first, second = BoxLock(tmp_path / "box.lock"), BoxLock(tmp_path / "box.lock")
    assert first.try_acquire() and not second.try_acquire()
    first.release()
    assert second.try_acquire()
    second.release()
    first.release()  # releasing twice is harmless



def test_one_creator_per_check_run_until_the_job_is_reopened(ledger):
    assert ledger.submit(JOB, 1.0)
    assert ledger.claim_check(JOB.key, "box-a")
    assert not ledger.claim_check(JOB.key, "box-b")  # a second box must not create another
    assert ledger.claim(JOB.key, "box-a", 2.0)
    assert ledger.finish(JOB.key, DONE, 3.0, worker_id="box-a")
    assert ledger.submit(JOB, 4.0, force=True)  # /rescore re-opens it: a fresh check run
    assert ledger.claim_check(JOB.key, "box-b")
