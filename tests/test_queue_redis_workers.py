"""Real worker processes (`python -m evalbot worker`) on one queue: a real redis-server shared by two
boxes, and SQLite on one box; SIGKILL a worker mid-job and check that nothing is lost."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalbot.bot.jobs.ledger import DONE
from evalbot.bot.jobs.model import ScoreJob
from evalbot.bot.jobs.queue import JobQueue
from evalbot.settings import load_settings
from fakegithub import FakeGitHub
from fakegithub.helpers import redis_url  # noqa: F401  (pytest fixture)

REPO = "octo/dspark"
ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def github():
    with FakeGitHub() as fake:
        fake.add_repo(REPO)
        yield fake


class Box:
    """One worker process, as systemd would run it."""

    def __init__(self, name: str, tmp: Path, github: FakeGitHub, extra: dict):
        self.name, self.log = name, tmp / f"{name}.log"
        self.env = {
            **{k: v for k, v in os.environ.items() if not k.startswith("EVALBOT_")},
            "PYTHONPATH": f"{ROOT / 'tests'}{os.pathsep}{ROOT}",
            "EVALBOT_REPO": REPO, "EVALBOT_BOX": name, "EVALBOT_STATE_DIR": str(tmp / name),
            "EVALBOT_GITHUB_TOKEN": "app-token", "EVALBOT_GITHUB_API_URL": github.base_url, "EVALBOT_GITHUB_THROTTLE": "0",
            "EVALBOT_RECEIPTS_BRANCH": "", "EVALBOT_SCORER": "fakegithub.helpers:slow_scorer_factory",
            "EVALBOT_PUBLISHER": "fakegithub.helpers:basic_publisher_factory", "EVALBOT_HEARTBEAT_SECONDS": "0.2",
            "EVALBOT_STALE_AFTER_SECONDS": "1.5", "EVALBOT_SWEEP_SECONDS": "0.3", "EVALBOT_WORKER_THREADS": "2", "EVALBOT_BUSY_RETRY_SECONDS": "0.5",
            "FAKE_SCORER_MARKS": str(tmp / "marks"), "FAKE_SCORER_SECONDS": "1.0", **extra,
        }
        self.proc: subprocess.Popen | None = None

    def start(self) -> "Box":
        with open(self.log, "a") as log:
            self.proc = subprocess.Popen([sys.executable, "-m", "evalbot", "worker", "--log-level", "info"], env=self.env,
                                         stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        return self

    def kill(self) -> None:
        os.kill(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=10)

    def stop(self) -> None:
        if self.proc and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.kill()


def _wait(condition, timeout: float, what: str, boxes=()):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if condition():
            return
        time.sleep(0.1)
    logs = "\n".join(f"--- {b.name}\n{b.log.read_text()[-3000:]}" for b in boxes if b.log.exists())
    pytest.fail(f"timed out waiting for {what}\n{logs}")


def _submit(queue: JobQueue, github: FakeGitHub, numbers) -> list[ScoreJob]:
    jobs = []
    repo = github.repo(REPO)
    for n in numbers:
        pull = github.add_pull(REPO, n)
        job = ScoreJob(repo=REPO, pr_number=n, head_sha=pull.head_sha, base_sha=repo.branches["main"], reason="opened")
        assert queue.submit_score(job)
        jobs.append(job)
    return jobs


def _started(marks: Path, pid: int) -> list[Path]:
    return [p for p in marks.glob(f"*-{pid}.started") if not p.with_suffix(".finished").exists()] if marks.exists() else []


def test_two_boxes_share_a_redis_queue_and_a_killed_one_loses_nothing(tmp_path, redis_url, github):
    queue = JobQueue.from_settings(load_settings(environ={}, repo=REPO, redis_url=redis_url, state_dir=tmp_path / "producer"))
    jobs = _submit(queue, github, range(1, 5))
    extra = {"EVALBOT_REDIS_URL": redis_url}
    box1 = Box("gpu-1", tmp_path, github, extra).start()
    box2 = Box("gpu-2", tmp_path, github, extra).start()
    marks = tmp_path / "marks"
    try:
        _wait(lambda: _started(marks, box1.proc.pid), 30, "gpu-1 to start a job", [box1, box2])
        (victim,) = _started(marks, box1.proc.pid)
        box1.kill()  # mid-job: its ledger entry stays `running`, its heartbeat stops
        killed_pr = victim.name.split("-")[0]
        _wait(lambda: all(queue.ledger.get(j.key).state == DONE for j in jobs), 45, "every job to finish", [box1, box2])
    finally:
        box1.stop()
        box2.stop()
    for job in jobs:
        assert sorted(github.labels_on(REPO, job.pr_number)) == ["eval-dspark:S", "eval:S"]
        (run,) = github.check_runs_for(REPO, job.head_sha)
        assert run["status"] == "completed" and run["conclusion"] == "success"
    finished = {p.name.split("-")[0] for p in marks.glob("*.finished")}
    assert finished == {f"pr{j.pr_number}" for j in jobs}
    assert len(list(marks.glob(f"{killed_pr}-*.started"))) == 2  # started on gpu-1, finished on gpu-2
    assert list(marks.glob(f"{killed_pr}-{box2.proc.pid}.finished"))
    assert "stopped beating" in (tmp_path / "gpu-2.log").read_text() or queue.ledger.get(
        next(j for j in jobs if f"pr{j.pr_number}" == killed_pr).key).attempts == 2


def test_one_box_on_sqlite_killed_mid_job_runs_it_again_after_restart(tmp_path, github):
    box = Box("gpu-1", tmp_path, github, {"EVALBOT_STALE_AFTER_SECONDS": "3600"})  # only a restart can recover it
    queue = JobQueue.from_settings(load_settings(environ={}, repo=REPO, state_dir=tmp_path / "gpu-1"))
    (job,) = _submit(queue, github, [7])
    marks = tmp_path / "marks"
    box.start()
    try:
        _wait(lambda: _started(marks, box.proc.pid), 30, "the job to start", [box])
        first_pid = box.proc.pid
        box.kill()
        assert queue.ledger.get(job.key).state == "running"
        box.start()
        _wait(lambda: queue.ledger.get(job.key).state == DONE, 30, "the job to finish after the restart", [box])
    finally:
        box.stop()
    assert list(marks.glob(f"pr7-{first_pid}.started")) and not list(marks.glob(f"pr7-{first_pid}.finished"))
    assert list(marks.glob(f"pr7-{box.proc.pid}.finished"))
    assert sorted(github.labels_on(REPO, 7)) == ["eval-dspark:S", "eval:S"]
