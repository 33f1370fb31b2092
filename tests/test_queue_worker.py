"""The worker end to end, in-process: huey on SQLite, the ledger, GitHubForge against the fake GitHub,
and a fake scorer (the real scoring core is exercised in test_github_e2e.py)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest

from evalbot.forge.base import CHECK_NAME
from evalbot.report.scorecard import SCORECARD_MARKER_PREFIX
from evalbot.settings.tiers import NEEDS_REBASE_LABEL
from evalbot.forge.github import GitHubForge
from evalbot.forge.github_retry import RetryPolicy
from evalbot.bot.jobs.boxlock import BoxLock
from evalbot.bot.jobs.ledger import DONE, FAILED, QUEUED, RUNNING, SCORED, SUPERSEDED
from evalbot.bot.jobs.model import MainMoved, Reply, RescoreRequest, ScoreJob, SetAutomerge
from evalbot.bot.jobs.queue import JobQueue, make_huey, make_ledger
from evalbot.settings import load_settings
from evalbot.bot.worker.secrets import SECRET_ENV_VARS, scrub_secrets_from_environment
from evalbot.bot.worker.worker import Worker
from evalbot.decide.scorings import TreeBusy
from fakegithub import FakeGitHub, fake_sha
from fakegithub.helpers import basic_publisher, fake_outcome

REPO = "octo/dspark"


class Clock:
    """The worker's clock: moves with real time (huey's delays are real seconds), and tests jump it ahead."""

    def __init__(self):
        self.now, self.t0 = 1_000_000.0, time.monotonic()

    def __call__(self):
        return self.now + (time.monotonic() - self.t0)


@pytest.fixture(scope="module")
def server():
    with FakeGitHub() as fake:
        yield fake


class Rig:
    """One box: a queue, a worker, a fake GitHub repo, and a scorer whose verdicts the test sets."""

    def __init__(self, server, tmp_path, **config):
        self.gh = server
        server.faults.clear()
        self.repo = server.add_repo(REPO)
        self.clock = Clock()
        settings = dict(repo=REPO, box="box-a", state_dir=tmp_path / "state", busy_retry_seconds=0.05, infra_retry_seconds=0,
                        progress_seconds=0, heartbeat_seconds=30)
        settings.update(config)
        settings = load_settings(environ={}, **settings)
        self.queue = JobQueue(make_huey(settings), make_ledger(settings), clock=self.clock)
        self.ledger = self.queue.ledger
        self.forge = GitHubForge.from_token("app-token", REPO, base_url=server.base_url, throttle=False,
                                            retry=RetryPolicy(attempts=2), sleep=lambda s: None, receipts_dir=tmp_path / "receipts")
        self.tiers: dict[int, tuple[str, float]] = {}
        self.scored: list[str] = []
        self.fail_scorer = 0
        self.busy_tree = 0
        self.worker = Worker(self.queue, lambda repo: self.forge, self.score, basic_publisher, settings, clock=self.clock)
        self.queue.bind(self.worker)

    def score(self, job, progress):
        progress("measuring")
        self.scored.append(job.key)
        if self.busy_tree:
            self.busy_tree -= 1
            raise TreeBusy("another scoring of this tree against this main is measuring it (job-on-box-b)")
        if self.fail_scorer:
            self.fail_scorer -= 1
            raise RuntimeError("GPU fell off the bus")
        tier, speedup = self.tiers.get(job.pr_number, ("M", 0.08))
        return fake_outcome(job, tier, speedup)

    def pull(self, number, **kw):
        return self.gh.add_pull(REPO, number, **kw)

    def job(self, number, **kw) -> ScoreJob:
        pull = self.repo.pulls[number]
        return ScoreJob(repo=REPO, pr_number=number, head_sha=kw.get("head", pull.head_sha),
                        base_sha=kw.get("base", self.repo.branches["main"]), reason="opened")

    def run(self, **kw) -> int:
        return self.queue.drain(**kw)


@pytest.fixture
def rig(server, tmp_path):
    return Rig(server, tmp_path)


def test_a_job_is_scored_and_published(rig):
    pull = rig.pull(1)
    job = rig.job(1)
    assert rig.queue.submit_score(job)
    rig.run()
    assert rig.ledger.get(job.key).state == DONE
    assert sorted(rig.gh.labels_on(REPO, 1)) == ["eval-dspark:M", "eval:M"]
    (card,) = rig.gh.comments_on(REPO, 1)
    assert SCORECARD_MARKER_PREFIX in card["body"] and pull.head_sha[:12] in card["body"]
    (run,) = rig.gh.check_runs_for(REPO, pull.head_sha)
    assert run["name"] == CHECK_NAME and run["history"][0] == "queued" and "in_progress" in run["history"]
    assert run["status"] == "completed" and run["conclusion"] == "success"
    assert any(path.startswith("receipts/pr-1/") for (branch, path) in rig.repo.files if branch == "evalbot-receipts")


def _as(rig, number, who):
    return rig.job(number).model_copy(update={"requested_by": who})


def test_one_requesters_burst_does_not_hold_another_requesters_job(rig):
    """Fair queuing: a contributor's burst of PRs queued first, then another contributor's PR: the second
    contributor's job runs after the burst's first job, not after all of it."""
    for n in (1, 2, 3, 4):
        rig.pull(n)
    burst = [_as(rig, n, "flood-bot") for n in (1, 2, 3)]
    for job in burst:
        rig.clock.now += 1
        assert rig.queue.submit_score(job)
    rig.clock.now += 1
    other = _as(rig, 4, "newcomer")
    assert rig.queue.submit_score(other)
    assert [r.key for r in rig.queue.fair_order(rig.clock())] == [burst[0].key, other.key, burst[1].key, burst[2].key]
    rig.run()
    assert rig.scored == [burst[0].key, other.key, burst[1].key, burst[2].key]
    assert all(rig.ledger.get(j.key).state == DONE for j in (*burst, other))


def test_a_requester_who_keeps_one_job_waiting_cannot_starve_anothers_second(rig):
    """The order is decided when a job is taken, not when it was queued: a requester who queues a new job the
    moment each of theirs starts (one always waiting, each its first) does not push back another
    requester's second PR for ever (it did with priorities fixed at enqueue)."""
    for n in range(1, 9):
        rig.pull(n)
    victim = [_as(rig, n, "victim") for n in (1, 2)]
    for job in victim:
        rig.clock.now += 1
        rig.queue.submit_score(job)
    numbers = iter(range(3, 9))

    def one_more():
        if (n := next(numbers, None)) is not None:
            rig.clock.now += 1
            rig.queue.submit_score(_as(rig, n, "flood-bot"))

    one_more()
    score = rig.worker.scorer

    def scoring(job, progress):
        if job.requested_by == "flood-bot":
            one_more()  # another one queued the moment one starts
        return score(job, progress)

    rig.worker.scorer = scoring
    rig.run()
    assert rig.scored[0] == victim[0].key and rig.scored[2] == victim[1].key and len(rig.scored) == 8
    assert rig.scored[1].startswith(f"{REPO}#3@")  # the round robin: victim, flood-bot, victim


def test_a_reopened_job_goes_to_the_back_of_its_requesters_line(rig):
    for n in (1, 2, 3):
        rig.pull(n)
    jobs = [_as(rig, n, "author") for n in (1, 2, 3)]
    for job in jobs:
        rig.clock.now += 1
        rig.ledger.submit(job, rig.clock())
    rig.ledger.finish(jobs[0].key, SUPERSEDED, rig.clock(), "a newer head")
    rig.clock.now += 1
    assert rig.ledger.submit(jobs[0].model_copy(update={"reason": "synchronize"}), rig.clock(), force=True)
    assert [r.key for r in rig.queue.fair_order(rig.clock())] == [jobs[1].key, jobs[2].key, jobs[0].key]


def test_the_same_job_twice_is_scored_once(rig):
    rig.pull(1)
    assert rig.queue.submit_score(rig.job(1))
    assert not rig.queue.submit_score(rig.job(1))
    rig.run()
    assert not rig.queue.submit_score(rig.job(1))  # done: a plain resubmission is a no-op
    rig.run()
    assert len(rig.scored) == 1


def test_forced_rescore_runs_again_and_edits_the_same_comment(rig):
    rig.pull(1)
    rig.queue.submit_score(rig.job(1))
    rig.run()
    rig.tiers[1] = ("L", 0.12)
    assert rig.queue.submit_score(rig.job(1), force=True)
    rig.run()
    assert len(rig.scored) == 2 and sorted(rig.gh.labels_on(REPO, 1)) == ["eval-dspark:L", "eval:L"]
    assert len(rig.gh.comments_on(REPO, 1)) == 1


def test_a_moved_head_supersedes_the_job_and_scores_the_new_head(rig):
    pull = rig.pull(1)
    old = rig.job(1)
    rig.queue.submit_score(old)
    pull.head_sha = fake_sha("new head")
    rig.run()
    assert rig.ledger.get(old.key).state == SUPERSEDED
    assert rig.scored == [rig.job(1).key]
    (stale_run,) = rig.gh.check_runs_for(REPO, old.head_sha)
    assert stale_run["conclusion"] == "skipped"


def _announcement_lands_when(rig, obj, method: str, job, delay: float = 0.3) -> list:
    """The queued announcement (another consumer thread) won the claim to create `job`'s check run; its
    create call returns `delay` seconds after the worker calls `obj.method`."""
    assert rig.ledger.claim_check(job.key, "box-a/1/announcer")
    real, timers = getattr(obj, method), []

    def lands():
        rig.ledger.set_check_id(job.key, rig.forge.start_check(job.head_sha, CHECK_NAME, "queued", external_id=job.key))

    def hooked(*args, **kwargs):
        if not timers:
            timers.append(threading.Timer(delay, lands))
            timers[0].start()
        return real(*args, **kwargs)

    setattr(obj, method, hooked)
    return timers


def test_a_superseded_job_closes_the_check_run_its_announcement_is_still_creating(rig):
    """Fails without the fix: the job ended with no check id, and the announcement's run, created a moment
    later, stayed `queued` on the old head forever."""
    pull = rig.pull(1)
    old = rig.job(1)
    rig.ledger.submit(old, rig.clock())
    rig.queue.enqueue_key(old.key)
    timers = _announcement_lands_when(rig, rig.ledger, "finish", old)
    pull.head_sha = fake_sha("new head")
    rig.run()
    timers[0].join()
    assert rig.ledger.get(old.key).state == SUPERSEDED
    (stale_run,) = rig.gh.check_runs_for(REPO, old.head_sha)
    assert stale_run["status"] == "completed" and stale_run["conclusion"] == "skipped"


def test_a_job_that_ends_before_its_announcement_gets_no_check_run(rig):
    """The announcement that comes after the end finds the claim taken and creates nothing."""
    pull = rig.pull(1)
    old = rig.job(1)
    rig.ledger.submit(old, rig.clock())
    rig.queue.enqueue_key(old.key)
    pull.head_sha = fake_sha("new head")
    rig.run()
    assert rig.ledger.get(old.key).state == SUPERSEDED
    rig.worker.check_wait_seconds = 0
    assert rig.worker.start_check(rig.forge, rig.ledger.get(old.key)) == ""  # the announcement, late
    assert rig.gh.check_runs_for(REPO, old.head_sha) == []


def test_a_moved_main_supersedes_the_job(rig):
    rig.pull(1)
    old = rig.job(1)
    rig.queue.submit_score(old)
    rig.repo.branches["main"] = fake_sha("main moved")
    rig.run()
    assert rig.ledger.get(old.key).state == SUPERSEDED and rig.scored == [rig.job(1).key]


def test_a_closed_pull_is_not_scored(rig):
    pull = rig.pull(1)
    rig.queue.submit_score(rig.job(1))
    pull.state = "closed"
    rig.run()
    assert rig.scored == [] and rig.ledger.get(rig.job(1).key).state == SUPERSEDED


def test_scorer_errors_are_retried_then_reported_as_not_a_verdict(rig):
    pull = rig.pull(1)
    rig.fail_scorer = 99
    rig.queue.submit_score(rig.job(1))
    rig.run()
    record = rig.ledger.get(rig.job(1).key)
    assert record.state == FAILED and record.attempts == 3 and len(rig.scored) == 3
    (run,) = rig.gh.check_runs_for(REPO, pull.head_sha)
    assert run["conclusion"] == "cancelled" and "not a verdict" in run["output"]["title"]
    assert rig.gh.labels_on(REPO, 1) == []


def test_one_scorer_error_then_success(rig):
    rig.pull(1)
    rig.fail_scorer = 1
    rig.queue.submit_score(rig.job(1))
    rig.run()
    assert rig.ledger.get(rig.job(1).key).state == DONE and len(rig.scored) == 2


def test_a_tree_measured_by_another_box_waits_unspent(rig):
    """TreeBusy (another box measures this very candidate tree): the job goes back to the queue after
    busy_retry_seconds without spending an attempt, however long the other box takes, then scores."""
    rig.pull(1)
    rig.busy_tree = 5  # more than max_attempts (3)
    rig.queue.submit_score(rig.job(1))
    rig.run(include_scheduled_within=3)
    record = rig.ledger.get(rig.job(1).key)
    assert record.state == DONE and len(rig.scored) == 6 and record.attempts == 1
    assert sorted(rig.gh.labels_on(REPO, 1)) == ["eval-dspark:M", "eval:M"]


def test_a_tree_busy_wait_says_so_on_the_check_run_and_gives_the_turn_back(rig):
    """While it waits for another box's measurement of its tree, the job's check run is "queued" and says what it
    waits for (it showed the step it stopped at, "in progress", before), and its requester's turn is given back:
    it measured nothing. Then it is scored, and the turn is spent."""
    pull = rig.pull(1)
    rig.ledger.mark_served("octocat", 5.0)  # an earlier job of theirs
    job = _as(rig, 1, "octocat")
    updates, real = [], rig.forge.update_check

    def update_check(check_id, **kw):
        updates.append((kw.get("status"), kw.get("title", ""), kw.get("summary", ""), rig.ledger.served().get("octocat")))
        return real(check_id, **kw)

    rig.forge.update_check = update_check
    rig.busy_tree = 1
    rig.queue.submit_score(job)
    rig.run(include_scheduled_within=3)
    assert rig.ledger.get(job.key).state == DONE and len(rig.scored) == 2
    waiting = [u for u in updates if u[0] == "queued"]
    assert len(waiting) == 1
    status, title, summary, served = waiting[0]
    assert "another box is measuring this tree" in title and "job-on-box-b" in summary and "not a verdict" in summary
    assert "Now:" not in summary and served == 5.0  # not the stale step; the turn given back
    assert [u[0] for u in updates].index("queued") < len(updates) - 1 and updates[-1][0] == "completed"
    assert rig.ledger.served()["octocat"] > 5.0  # the measurement that ran spent it
    (run,) = rig.gh.check_runs_for(REPO, pull.head_sha)
    assert run["conclusion"] == "success"


def test_a_job_superseded_on_its_turn_does_not_spend_its_requesters_turn(rig):
    """A requester's turn is spent when a measurement of theirs starts, not when a job of theirs is taken: a job
    found stale when taken (its PR moved on) measures nothing, so its replacement keeps the requester's place in
    the round robin. Before the fix the supersede marked them served, and the replacement went behind everyone."""
    for n in (1, 2, 3):
        rig.pull(n)
    earlier = _as(rig, 3, "regular")
    rig.queue.submit_score(earlier)
    rig.run()  # "regular" was served just now
    rig.clock.now += 1
    first = _as(rig, 1, "author")
    rig.queue.submit_score(first)
    rig.clock.now += 1
    second = _as(rig, 2, "regular")
    rig.queue.submit_score(second)
    rig.repo.pulls[1].head_sha = fake_sha("pushed")  # PR 1 moved on before its job's turn
    rig.run()
    assert rig.ledger.get(first.key).state == SUPERSEDED
    replacement = _as(rig, 1, "author").key  # the new head's job
    assert rig.scored == [earlier.key, replacement, second.key]


def test_a_failed_publication_keeps_the_verdict_and_the_sweeper_publishes_it(rig):
    rig.pull(1)
    rig.gh.fail("GET", r"/issues/1/labels$", 502, times=2)  # both attempts of the first publication
    rig.queue.submit_score(rig.job(1))
    rig.run()
    record = rig.ledger.get(rig.job(1).key)
    assert record.state == SCORED and record.publish_attempts == 1 and "verdict kept" in record.note
    assert rig.worker.sweep()["published"] == 0  # too soon: back-off
    rig.clock.now += 61
    assert rig.worker.sweep()["published"] == 1
    assert rig.ledger.get(rig.job(1).key).state == DONE and len(rig.scored) == 1
    assert sorted(rig.gh.labels_on(REPO, 1)) == ["eval-dspark:M", "eval:M"]


def test_job_of_a_dead_worker_on_this_box_runs_again(rig):
    rig.pull(1)
    job = rig.job(1)
    rig.ledger.submit(job, rig.clock())
    assert rig.ledger.claim(job.key, "box-a/4242/dead", rig.clock())  # claimed, then the process was killed
    assert rig.queue.recover("box-a", rig.worker.settings.box_lock_path, 120) == [job.key]
    rig.run()
    assert rig.ledger.get(job.key).state == DONE and rig.scored == [job.key]


def test_job_of_a_dead_worker_on_another_box_waits_for_its_heartbeat_to_go_stale(rig):
    rig.pull(1)
    job = rig.job(1)
    rig.ledger.submit(job, rig.clock())
    rig.ledger.claim(job.key, "box-b/99/x", rig.clock())
    assert rig.worker.sweep()["requeued"] == 0
    rig.clock.now += 121
    assert rig.worker.sweep()["requeued"] == 1
    rig.run()
    assert rig.ledger.get(job.key).state == DONE


def test_a_busy_box_puts_the_job_back(rig):
    rig.pull(1)
    rig.queue.submit_score(rig.job(1))
    held = BoxLock(rig.worker.settings.box_lock_path)
    assert held.try_acquire()
    rig.run()
    assert rig.scored == [] and rig.ledger.get(rig.job(1).key).state == QUEUED
    held.release()
    rig.run(include_scheduled_within=3)
    assert rig.ledger.get(rig.job(1).key).state == DONE


def test_a_check_run_announced_by_another_thread_mid_score_shows_progress_and_the_interruption(rig):
    """Fails without the fix: the queued announcement (another consumer thread) won the claim to create the
    check run, created it after the score started, and the score, holding an empty id, never updated it: a
    SIGTERM left it `queued` under its first title (CI, 2026-12-02)."""
    pull = rig.pull(1)
    job = rig.job(1)
    assert rig.queue.submit_score(job)
    assert rig.ledger.claim_check(job.key, "box-a/1/announcer")  # the announcement won the claim ...

    def announced_then_sigterm(j, progress):
        check_id = rig.forge.start_check(j.head_sha, CHECK_NAME, "queued", external_id=j.key)  # ... and lands now
        rig.ledger.set_check_id(j.key, check_id)
        progress("running the harness")
        assert rig.worker.guard.interrupt("SIGTERM")  # the worker's signal handler, from this thread
        for _ in range(1000):
            time.sleep(0.01)  # the interruption is raised here
        raise AssertionError("the score was not interrupted")

    rig.worker.scorer = announced_then_sigterm
    rig.worker.check_wait_seconds = 0  # the announcement lands only once the score is under way
    rig.run()
    record = rig.ledger.get(job.key)
    assert record.state == QUEUED and record.note.startswith("interrupted: SIGTERM")
    (run,) = rig.gh.check_runs_for(REPO, pull.head_sha)
    assert "in_progress" in run["history"] and run["status"] == "queued" and "interrupted" in run["output"]["title"]


def test_heartbeat_lost_means_the_result_is_dropped(rig):
    rig.pull(1)
    job = rig.job(1)

    def steal_midway(j, progress):
        rig.ledger._update(j.key, {}, {"worker_id": "box-z/1/thief"})  # another worker took it over
        return fake_outcome(j)

    rig.worker.scorer = steal_midway
    rig.queue.submit_score(job)
    rig.run()
    assert rig.ledger.get(job.key).state == RUNNING and rig.gh.labels_on(REPO, 1) == []


def test_main_moved_marks_scored_pulls_and_requeues_them(rig):
    rig.pull(1)
    rig.pull(2, draft=True)
    rig.pull(3)
    rig.queue.submit_score(rig.job(1))
    rig.run()
    new_main = fake_sha("pushed")
    rig.repo.branches["main"] = new_main
    rig.queue.submit_chore(MainMoved(repo=REPO, main_sha=new_main))
    rig.run()
    assert NEEDS_REBASE_LABEL not in rig.gh.labels_on(REPO, 1)  # re-scored against the new main: fresh again
    assert {k.split("..")[1] for k in rig.scored[1:]} == {new_main} and len(rig.scored) == 3  # #1 again, #3; not the draft


def test_main_moved_labels_needs_rebase_while_the_new_score_waits(rig):
    rig.pull(1)
    rig.queue.submit_score(rig.job(1))
    rig.run()
    rig.worker.scorer = lambda job, progress: (_ for _ in ()).throw(RuntimeError("box down"))
    rig.worker.settings = rig.worker.settings.model_copy(update={"max_attempts": 1})
    new_main = fake_sha("pushed again")
    rig.repo.branches["main"] = new_main
    rig.queue.submit_chore(MainMoved(repo=REPO, main_sha=new_main))
    rig.run()
    assert NEEDS_REBASE_LABEL in rig.gh.labels_on(REPO, 1)


def test_rescore_command_queues_a_forced_job(rig):
    rig.pull(1)
    rig.queue.submit_score(rig.job(1))
    rig.run()
    rig.queue.submit_chore(RescoreRequest(repo=REPO, pr_number=1, requested_by="maintainer"))
    rig.run()
    assert len(rig.scored) == 2


def test_rescore_of_a_closed_pull_is_answered(rig):
    rig.pull(1, state="closed")
    rig.queue.submit_chore(RescoreRequest(repo=REPO, pr_number=1, requested_by="maintainer"))
    rig.run()
    (reply,) = rig.gh.comments_on(REPO, 1)
    assert reply["body"].startswith("@maintainer, I did not queue a new score: the pull request is closed")


def test_automerge_toggle_is_persisted_and_acknowledged(rig):
    rig.pull(1)
    rig.gh.repo(REPO).permissions["owner"] = "admin"  # the worker asks GitHub: /automerge needs maintain or admin
    assert not rig.worker.automerge_enabled(REPO)
    rig.queue.submit_chore(SetAutomerge(repo=REPO, pr_number=1, enabled=True, requested_by="owner"))
    rig.run()
    assert rig.worker.automerge_enabled(REPO)
    assert "Automerge is now **on** (set by @owner)" in rig.gh.comments_on(REPO, 1)[0]["body"]


def test_replies_are_rendered_from_templates(rig):
    rig.pull(1)
    rig.queue.submit_chore(Reply(repo=REPO, pr_number=1, template="comment_refusal.md.j2", context={"login": "drive-by", "command": "/rescore"}))
    rig.run()
    body = rig.gh.comments_on(REPO, 1)[0]["body"]
    assert body.startswith("Thanks for the suggestion, @drive-by!") and "`/rescore`" in body


def _round(rig, tiers):
    for number, (tier, speedup) in tiers.items():
        rig.pull(number)
        rig.tiers[number] = (tier, speedup)
    rig.ledger.set_flag(f"automerge:{REPO}", "on")
    for number in tiers:
        rig.queue.submit_score(rig.job(number))
    rig.run()


def test_automerge_merges_the_best_of_the_round_and_requeues_the_rest(rig):
    base = rig.repo.branches["main"]
    _round(rig, {1: ("XS", 0.025), 2: ("L", 0.12), 3: ("REJECT", 0.30), 4: ("L", 0.11)})
    first, second = rig.repo.merges  # one merge per round: #2 now, #4 in the round against the new main
    assert first["number"] == 2 and first["method"] == "squash" and first["sha"] != rig.repo.pulls[1].head_sha
    assert rig.ledger.round_merged(REPO, base) == 2
    after_first = first["new_main"]
    for other in (1, 3, 4):  # re-queued against the new main and scored there
        assert rig.ledger.get(rig.job(other, base=after_first).key).state == DONE
    assert second["number"] == 4 and rig.ledger.round_merged(REPO, after_first) == 4
    assert "best pull request of the round" in rig.gh.comments_on(REPO, 2)[-1]["body"]
    assert "#1, #3, #4" in rig.gh.comments_on(REPO, 2)[-1]["body"]
    for still_open in (1, 3):  # scored again against the main after #4, so fresh again: no needs-rebase left
        assert rig.ledger.get(rig.job(still_open, base=second["new_main"]).key).state == DONE
        assert NEEDS_REBASE_LABEL not in rig.gh.labels_on(REPO, still_open)


def test_automerge_waits_for_the_whole_round(rig):
    rig.pull(1)
    rig.pull(2)
    rig.tiers[1] = ("XL", 0.3)
    rig.tiers[2] = ("none", 0.0)
    rig.ledger.set_flag(f"automerge:{REPO}", "on")
    rig.queue.submit_score(rig.job(1))
    rig.ledger.submit(rig.job(2), rig.clock())  # #2 is still queued (no message yet)
    rig.run()
    assert rig.repo.merges == []
    rig.queue.enqueue_key(rig.job(2).key)
    rig.run()
    assert [m["number"] for m in rig.repo.merges] == [1]


def test_automerge_off_merges_nothing(rig):
    _round(rig, {1: ("XL", 0.3)})
    rig.ledger.set_flag(f"automerge:{REPO}", "off")
    rig.queue.submit_score(rig.job(1), force=True)
    rig.run()
    assert len(rig.repo.merges) <= 1  # the first round (on) merged; with it off nothing more happens


def test_automerge_never_merges_a_moved_head(rig):
    rig.pull(1)
    rig.tiers[1] = ("XL", 0.3)
    rig.ledger.set_flag(f"automerge:{REPO}", "on")
    scored_head = rig.repo.pulls[1].head_sha

    def score_then_push(job, progress):
        outcome = fake_outcome(job, "XL", 0.3)
        return outcome

    rig.worker.scorer = score_then_push
    original_publisher = rig.worker.publisher

    def publish_then_author_pushes(outcome, forge, number, check_id):
        original_publisher(outcome, forge, number, check_id)
        rig.repo.pulls[1].head_sha = fake_sha("pushed after scoring")

    rig.worker.publisher = publish_then_author_pushes
    rig.queue.submit_score(rig.job(1))
    rig.queue.drain(max_tasks=3)
    assert rig.repo.merges == [] and rig.repo.pulls[1].head_sha != scored_head


def test_automerge_below_the_minimum_tier_merges_nothing(rig):
    _round(rig, {1: ("XS", 0.025), 2: ("none", 0.0)})
    assert rig.repo.merges == []


def test_close_on_reject_when_configured(server, tmp_path):
    rig = Rig(server, tmp_path, close_on=frozenset({"REJECT"}))
    rig.pull(1)
    rig.pull(2)
    rig.tiers[1] = ("REJECT", 0.0)
    rig.tiers[2] = ("none", 0.0)
    rig.queue.submit_score(rig.job(1))
    rig.queue.submit_score(rig.job(2))
    rig.run()
    assert rig.repo.pulls[1].state == "closed" and rig.repo.pulls[2].state == "open"
    assert "configured to close pull requests scored REJECT" in rig.gh.comments_on(REPO, 1)[-1]["body"]


def test_rejects_stay_open_by_default(rig):
    rig.pull(1)
    rig.tiers[1] = ("REJECT", 0.0)
    rig.queue.submit_score(rig.job(1))
    rig.run()
    assert rig.repo.pulls[1].state == "open"


def test_secrets_are_scrubbed_from_the_environment(monkeypatch):
    for name in SECRET_ENV_VARS:
        monkeypatch.setenv(name, "s3cr3t-" + name)
    scrub_secrets_from_environment()
    child = subprocess.run([sys.executable, "-c", "import os, json; print(json.dumps(dict(os.environ)))"], capture_output=True, text=True)
    assert "s3cr3t-" not in child.stdout
    assert not any(name in os.environ for name in SECRET_ENV_VARS)


# -- a tier label describes the PR's current head, or is not there ------------------------------------------
def _push(rig, number, sha):
    rig.repo.pulls[number].head_sha = sha
    job = ScoreJob(repo=REPO, pr_number=number, head_sha=sha, base_sha=rig.repo.branches["main"], reason="synchronize")
    return rig.queue.submit_score(job)


def test_a_new_head_loses_the_old_heads_labels_as_soon_as_it_is_queued(rig):
    pull = rig.pull(1)
    rig.queue.submit_score(rig.job(1))
    rig.run()
    assert sorted(rig.gh.labels_on(REPO, 1)) == ["eval-dspark:M", "eval:M"]
    seen = []
    scorer = rig.worker.scorer
    rig.worker.scorer = lambda job, progress: (seen.append(sorted(rig.gh.labels_on(REPO, 1))), scorer(job, progress))[1]
    _push(rig, 1, fake_sha("B"))
    rig.tiers[1] = ("S", 0.04)
    rig.run()
    assert seen == [[]]  # while B waited and was measured, no label of A stood on it
    assert sorted(rig.gh.labels_on(REPO, 1)) == ["eval-dspark:S", "eval:S"] and pull.head_sha == fake_sha("B")


def test_an_infrastructure_failure_removes_the_tier_labels(rig):
    rig.pull(1)
    rig.queue.submit_score(rig.job(1))
    rig.run()
    assert sorted(rig.gh.labels_on(REPO, 1)) == ["eval-dspark:M", "eval:M"]
    rig.fail_scorer = 99
    rescore = rig.job(1).model_copy(update={"reason": "rescore"})
    assert rig.queue.submit_score(rescore, force=True)
    rig.run()
    assert rig.ledger.get(rescore.key).state == FAILED
    assert rig.gh.labels_on(REPO, 1) == []


def test_a_force_push_back_to_a_scored_head_re_publishes_its_verdict(rig):
    pull = rig.pull(1)
    a, b = pull.head_sha, fake_sha("B")
    rig.tiers[1] = ("REJECT", 0.30)  # A: fast but lossy
    rig.queue.submit_score(rig.job(1))
    rig.run()
    assert sorted(rig.gh.labels_on(REPO, 1)) == ["eval-dspark:REJECT", "eval:REJECT"]
    rig.tiers[1] = ("XL", 0.20)  # B: the lossless variant
    _push(rig, 1, b)
    rig.run()
    assert sorted(rig.gh.labels_on(REPO, 1)) == ["eval-dspark:XL", "eval:XL"]
    assert _push(rig, 1, a)  # back to A: A's job is done; its verdict is published again, A is not measured again
    rig.run()
    assert sorted(rig.gh.labels_on(REPO, 1)) == ["eval-dspark:REJECT", "eval:REJECT"]
    assert len(rig.scored) == 2


def test_a_force_push_back_to_a_superseded_head_scores_it(rig):
    pull = rig.pull(1)
    a, b = pull.head_sha, fake_sha("B")
    rig.queue.submit_score(rig.job(1))
    _push(rig, 1, b)  # A is still queued when B arrives: A is superseded when its turn comes
    rig.run()
    assert rig.ledger.get(rig.job(1, head=a).key).state == SUPERSEDED
    assert _push(rig, 1, a)
    rig.run()
    assert rig.ledger.get(rig.job(1, head=a).key).state == DONE
    assert sorted(rig.gh.labels_on(REPO, 1)) == ["eval-dspark:M", "eval:M"]


def test_a_push_while_a_head_is_scored_stops_that_scoring_at_its_next_step(rig):
    """A contributor pushing again and again must not keep the box on verdicts that publish would refuse:
    once the new head's job is queued and GitHub confirms the move, the old scoring stops (its check run
    says superseded) and the new head is scored."""
    pull = rig.pull(1)
    old = rig.job(1)
    assert rig.queue.submit_score(old)
    steps = []

    def pushed_mid_score(j, progress):
        if j.head_sha != old.head_sha:
            return fake_outcome(j, "S", 0.05)
        progress("round 1")
        steps.append(1)
        pull.head_sha = fake_sha("pushed")  # the push lands, the webhook queues the new head
        rig.queue.submit_score(ScoreJob(repo=REPO, pr_number=1, head_sha=pull.head_sha, base_sha=old.base_sha,
                                        reason="synchronize"))
        progress("round 2")
        steps.append(2)
        raise AssertionError("the scoring went on after the PR moved")

    rig.worker.scorer = pushed_mid_score
    rig.run()
    record = rig.ledger.get(old.key)
    assert steps == [1] and record.state == SUPERSEDED and "moved to" in record.note
    (stopped,) = rig.gh.check_runs_for(REPO, old.head_sha)
    assert stopped["status"] == "completed" and stopped["conclusion"] != "success"
    assert sorted(rig.gh.labels_on(REPO, 1)) == ["eval-dspark:S", "eval:S"]  # the new head's verdict


def test_a_scoring_goes_on_when_nothing_newer_is_queued_or_github_does_not_answer(rig):
    rig.pull(1)
    job = rig.job(1)
    assert rig.queue.submit_score(job)

    def many_steps(j, progress):
        for i in range(5):
            progress(f"round {i + 1}")
        return fake_outcome(j)

    rig.worker.scorer = many_steps
    asked = rig.gh.count("GET", r"^/repos/octo/dspark/pulls/1$")
    rig.run()
    assert rig.ledger.get(job.key).state == DONE
    assert rig.gh.count("GET", r"^/repos/octo/dspark/pulls/1$") - asked <= 3  # no extra request per step


def test_github_down_while_the_authors_permission_is_asked_waits_instead_of_holding_the_pr(server, tmp_path):
    rig = Rig(server, tmp_path, forge_retry_seconds=0.01)
    rig.pull(1, head_repo="writer/dspark", author="writer", author_association="COLLABORATOR")
    rig.gh.repo(REPO).permissions["writer"] = "write"
    rig.gh.fail("GET", r"/collaborators/.*/permission$", 502, times=2)  # one short outage (the forge tries twice)
    job = rig.job(1)
    rig.queue.submit_score(job)
    rig.run(include_scheduled_within=5)
    assert rig.ledger.get(job.key).state == DONE and rig.scored == [job.key]
    assert "needs-ok-to-test" not in " ".join(rig.gh.labels_on(REPO, 1))


def test_a_push_back_to_a_head_whose_scoring_failed_scores_it_again(rig):
    pull = rig.pull(1)
    a = pull.head_sha
    rig.fail_scorer = 99  # the box fails on head A every time
    rig.queue.submit_score(rig.job(1))
    rig.run()
    assert rig.ledger.get(rig.job(1).key).state == FAILED
    rig.fail_scorer, rig.tiers[1] = 0, ("XL", 0.2)
    pull.head_sha = fake_sha("B")
    rig.queue.submit_score(ScoreJob(repo=REPO, pr_number=1, head_sha=pull.head_sha, base_sha=rig.repo.branches["main"],
                                    reason="synchronize"))
    rig.run()
    assert sorted(rig.gh.labels_on(REPO, 1)) == ["eval-dspark:XL", "eval:XL"]
    pull.head_sha, rig.tiers[1] = a, ("S", 0.05)  # force-push back to A
    assert rig.queue.submit_score(ScoreJob(repo=REPO, pr_number=1, head_sha=a, base_sha=rig.repo.branches["main"],
                                           reason="synchronize"))
    rig.run()
    assert sorted(rig.gh.labels_on(REPO, 1)) == ["eval-dspark:S", "eval:S"]  # A's own verdict, not B's labels
