"""`evalbot worker` as a process: SIGTERM in the middle of a score, start-up validation, JSON logs.

The worker runs as `python -m evalbot worker` against the fake GitHub, with a scorer that starts a
long-running child in its own session (as the harness runner does) and kills it when interrupted."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ed25519, rsa

from evalbot.bot.jobs.ledger import QUEUED
from evalbot.bot.jobs.model import ScoreJob
from evalbot.bot.jobs.queue import JobQueue
from evalbot.settings import load_settings
from fakegithub import FakeGitHub
from fakegithub.helpers import free_port

ROOT = Path(__file__).resolve().parents[1]
REPO = "octo/dspark"


def _env(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALBOT_")}
    env.update(PYTHONPATH=f"{ROOT}{os.pathsep}{ROOT / 'tests'}", EVALBOT_REPO=REPO, EVALBOT_STATE_DIR=str(tmp_path / "state"),
               EVALBOT_BOX="box-t", EVALBOT_CHECKOUT_DIR=str(tmp_path))
    env.update(extra)
    return env


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie has exited
        return f.read().split(")")[-1].split()[0] != "Z"


def test_sigterm_interrupts_the_score_kills_its_children_and_puts_the_job_back(tmp_path):
    """Fails without the fix: the worker exited at once, the harness child kept running, the job stayed
    `running` and its check run `in_progress`."""
    marks = tmp_path / "marks"
    with FakeGitHub() as gh:
        gh.add_repo(REPO)
        pull = gh.add_pull(REPO, 1)
        env = _env(tmp_path, EVALBOT_GITHUB_TOKEN="app-token", EVALBOT_GITHUB_API_URL=gh.base_url, EVALBOT_GITHUB_THROTTLE="0",
                   EVALBOT_SCORER="fakegithub.helpers:child_scorer_factory", EVALBOT_PUBLISHER="fakegithub.helpers:basic_publisher_factory",
                   EVALBOT_RECEIPTS_BRANCH="", FAKE_SCORER_MARKS=str(marks), EVALBOT_PROGRESS_SECONDS="0")
        settings = load_settings(environ=env)
        queue = JobQueue.from_settings(settings)
        job = ScoreJob(repo=REPO, pr_number=1, head_sha=pull.head_sha, base_sha=gh.repo(REPO).branches["main"], reason="opened")
        assert queue.submit_score(job)
        worker = subprocess.Popen([sys.executable, "-m", "evalbot", "worker"], env=env, cwd=tmp_path,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            deadline = time.monotonic() + 60
            # the score is running and its check run exists (the queued announcement, on another consumer
            # thread, may be the one that creates it)
            while not ((marks / "pr1.child").exists() and queue.ledger.get(job.key).check_id):
                assert worker.poll() is None, worker.communicate()[1][-3000:]
                assert time.monotonic() < deadline, "the score never started"
                time.sleep(0.1)
            child = int((marks / "pr1.child").read_text())
            assert _alive(child) and queue.ledger.get(job.key).state == "running"
            worker.send_signal(signal.SIGTERM)
            _, stderr = worker.communicate(timeout=60)
        finally:
            if worker.poll() is None:
                worker.kill()
        assert worker.returncode == 0, stderr[-3000:]
        assert not _alive(child) and (marks / "pr1.killed").exists()
        record = queue.ledger.get(job.key)
        assert record.state == QUEUED and record.attempts == 0 and record.note.startswith("interrupted: SIGTERM")
        (run,) = gh.check_runs_for(REPO, pull.head_sha)
        assert run["status"] == "queued" and "interrupted" in run["output"]["title"]
        lines = [json.loads(line) for line in stderr.splitlines() if line.startswith("{")]
        assert lines and all("level" in line and "timestamp" in line for line in lines)  # JSON logs, one object a line
        assert any(line.get("job") == job.key and "interrupted" in line["event"] for line in lines)
        assert "Traceback" not in stderr


# -- start-up validation: everything at once, one line each, exit 2 ---------------------------------------------------
def _pem(key) -> bytes:
    return key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())


@pytest.fixture
def keys(tmp_path):
    rsa_key = tmp_path / "app.pem"
    rsa_key.write_bytes(_pem(rsa.generate_private_key(public_exponent=65537, key_size=2048)))
    ed_key = tmp_path / "receipts.pem"
    ed_key.write_bytes(_pem(ed25519.Ed25519PrivateKey.generate()))
    return rsa_key, ed_key


def _worker(tmp_path, **env):
    return subprocess.run([sys.executable, "-m", "evalbot", "worker", "--burst"], env=_env(tmp_path, **env), cwd=tmp_path,
                          capture_output=True, text=True, timeout=60)


def _app(key, **more):
    values = dict(EVALBOT_GITHUB_APP_ID="123", EVALBOT_GITHUB_INSTALLATION_ID="456", EVALBOT_GITHUB_APP_PRIVATE_KEY_PATH=str(key),
                  EVALBOT_SCORER="fakegithub.helpers:slow_scorer_factory", FAKE_SCORER_MARKS="/tmp/unused-marks")
    values.update(more)
    return values


@pytest.mark.parametrize(
    "case, message",
    [
        ("missing key file", "EVALBOT_GITHUB_APP_PRIVATE_KEY_PATH: cannot read"),
        ("ed25519 app key", "is an Ed25519 key; a GitHub App's private key is RSA"),
        ("no installation id", "EVALBOT_GITHUB_INSTALLATION_ID is missing"),
        ("installation id typo", "EVALBOT_GITHUB_INSTALLATION_ID must be a number"),
        ("redis unreachable", "EVALBOT_REDIS_URL: cannot reach redis://***@127.0.0.1:"),
        ("scorer typo", "EVALBOT_SCORER: 'evalbot.bot.worker.scoring' has no 'pipline_scorer'"),
        ("signing key missing", "EVALBOT_SIGNING_KEY: cannot read signing key"),
        ("checkout not a clone", "EVALBOT_CHECKOUT_DIR:"),
        ("config typo", "thresholds.ar_ratio_mn in"),
    ],
)
def test_worker_start_up_validates_everything(tmp_path, keys, case, message):
    """Fails without the fix: a missing key file or unreachable Redis printed a traceback, and a missing
    installation id, an Ed25519 App key or a broken signing key started with exit 0 and failed later."""
    rsa_key, ed_key = keys
    env = {
        "missing key file": _app(tmp_path / "nope.pem"),
        "ed25519 app key": _app(ed_key),
        "no installation id": _app(rsa_key, EVALBOT_GITHUB_INSTALLATION_ID=""),
        "installation id typo": _app(rsa_key, EVALBOT_GITHUB_INSTALLATION_ID="45six"),
        "redis unreachable": _app(rsa_key, EVALBOT_REDIS_URL=f"redis://:secret@127.0.0.1:{free_port()}/0"),
        "scorer typo": _app(rsa_key, EVALBOT_SCORER="evalbot.bot.worker.scoring:pipline_scorer"),
        "signing key missing": _app(rsa_key, EVALBOT_SIGNING_KEY=str(tmp_path / "missing.pem")),
        "checkout not a clone": _app(rsa_key, EVALBOT_SCORER="evalbot.bot.worker.scoring:pipeline_scorer"),
        "config typo": _app(rsa_key, EVALBOT_CONFIG=str(_typo_config(tmp_path))),
    }[case]
    done = _worker(tmp_path, **env)
    assert done.returncode == 2, done.stderr[-2000:]
    assert message in done.stderr and "Traceback" not in done.stderr and "secret" not in done.stderr
    assert all(line.startswith("evalbot worker: ") for line in done.stderr.strip().splitlines())


def _typo_config(tmp_path: Path) -> Path:
    path = tmp_path / "config.toml"
    path.write_text("[thresholds]\nar_ratio_mn = 0.97\n")
    return path


def test_every_problem_is_reported_at_once(tmp_path, keys):
    _, ed_key = keys
    done = _worker(tmp_path, **_app(ed_key, EVALBOT_GITHUB_INSTALLATION_ID="", EVALBOT_SIGNING_KEY=str(tmp_path / "x.pem")))
    lines = done.stderr.strip().splitlines()
    assert done.returncode == 2 and len(lines) == 3, done.stderr
    assert any("INSTALLATION_ID" in line for line in lines) and any("Ed25519" in line for line in lines)
    assert any("SIGNING_KEY" in line for line in lines)


def test_a_valid_setup_starts(tmp_path, keys):
    rsa_key, _ = keys
    done = _worker(tmp_path, **_app(rsa_key))
    assert done.returncode == 0, done.stderr[-2000:]
