"""Shared test helpers: payload fixtures, signed webhook posts, a real redis-server, fake scorers."""

from __future__ import annotations

import copy
import json
import os
import shutil
import socket
import subprocess
import time
import uuid
from collections.abc import Callable
from pathlib import Path

import pytest

from evalbot.forge.base import CHECK_NAME
from evalbot.report.scorecard import SCORECARD_MARKER_PREFIX
from evalbot.settings.tiers import TIER_LABEL_PREFIXES
from evalbot.bot.webhook.signature import sign
from evalbot.decide.outcome import CheckReport, ReceiptInfo, ScoreOutcome
from evalbot.decide.verdict import Speedup, Verdict

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "github"
FIXTURE_REPO = "Codertocat/Hello-World"  # the repository of GitHub's example payloads
FIXTURE_MAIN = "master"
SECRET = "It's a Secret to Everybody"


def payload(name: str) -> dict:
    """A fresh copy of one of GitHub's example payloads."""
    return copy.deepcopy(json.loads((FIXTURES / f"{name}.json").read_text()))


def comment_payload(body: str, association: str = "OWNER", login: str = "Codertocat", on_pull: bool = True, **kw) -> dict:
    data = payload("issue_comment.created")
    data["comment"]["body"] = body
    data["comment"]["author_association"] = association
    data["comment"]["user"]["login"] = login
    data["comment"]["user"]["type"] = kw.get("user_type", "User")
    data["sender"]["login"] = login
    data["sender"]["type"] = kw.get("user_type", "User")
    if on_pull:
        data["issue"]["pull_request"] = {"html_url": f"https://github.com/{FIXTURE_REPO}/pull/{data['issue']['number']}"}
    return data


def webhook_headers(body: bytes, event: str, delivery: str | None = None, secret: str = SECRET) -> dict:
    return {
        "X-GitHub-Event": event,
        "X-GitHub-Delivery": delivery or str(uuid.uuid4()),
        "X-Hub-Signature-256": sign(secret, body),
        "Content-Type": "application/json",
    }


def post_event(client, event: str, data: dict, delivery: str | None = None, secret: str = SECRET):
    body = json.dumps(data).encode()
    return client.post("/webhook", content=body, headers=webhook_headers(body, event, delivery, secret))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_until_healthy(base: str, what: str, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    """Until `base`/healthz answers 200; fails the test when `proc` exits first or `timeout` passes."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(base + "/healthz", timeout=0.5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if proc is not None and proc.poll() is not None:
            pytest.fail(f"{what} exited (status {proc.returncode}) before it answered /healthz")
        if time.monotonic() > deadline:
            pytest.fail(f"{what} did not come up in {timeout:.0f} s")
        time.sleep(0.1)


@pytest.fixture
def redis_url(tmp_path):
    """A real redis-server on a free loopback port, for this test only."""
    binary = shutil.which("redis-server")
    if binary is None:
        pytest.skip("redis-server is not installed (apt-get install -y redis-server)")
    port = free_port()
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", "--dir", str(tmp_path)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while True:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                break
        except OSError:
            if time.monotonic() > deadline or proc.poll() is not None:
                proc.kill()
                pytest.fail("redis-server did not start")
            time.sleep(0.05)
    yield f"redis://127.0.0.1:{port}/0"
    proc.terminate()
    proc.wait(timeout=10)


def fake_outcome(job, tier: str = "M", speedup: float = 0.08) -> ScoreOutcome:
    """What a fake scorer returns: a real ScoreOutcome (the worker keeps it in its ledger as JSON),
    with the tier and speedup the test wants and a small scorecard and receipt."""
    rejected = tier == "REJECT"
    card = f"| DSpark eval | {tier} |\n| head | {job.head_sha[:12]} |\n| main | {job.base_sha[:12]} |"
    receipt = json.dumps({"pr": job.pr_number, "head": job.head_sha, "main": job.base_sha, "tier": tier}, sort_keys=True)
    verdict = Verdict(
        status="rejected" if rejected else "scored", tier=tier, labels=[f"eval-dspark:{tier}", f"eval:{tier}"], reason="fake",
        speedup=Speedup(ratio=1 + speedup, pct=speedup * 100, rounds=3, confidence=0.95, noise_pct=0.0),
    )
    return ScoreOutcome(
        repo=job.repo, base_ref="main", head_ref=f"pr-{job.pr_number}", base_sha=job.base_sha, head_sha=job.head_sha,
        harness_ref="origin/main", harness_sha=job.base_sha, profile="cpu", rounds=3, box="fake-box",
        pr_number=job.pr_number, verdict=verdict, started_at="2026-01-01T00:00:00Z", scorecard=card,
        receipt=ReceiptInfo(path="", signed=False, envelope=receipt),
        check=CheckReport(conclusion="failure" if rejected else "success", title=f"DSpark eval: {tier}", summary=card),
    )


def basic_publisher(outcome: ScoreOutcome, forge, pr_number: int, check_id: str | None = None) -> None:
    """A stand-in for evalbot.pipeline.publish: labels, sticky card, completed check run, receipt."""
    forge.replace_labels(pr_number, TIER_LABEL_PREFIXES, [f"eval-dspark:{outcome.tier}", f"eval:{outcome.tier}"])
    receipt_ref = forge.store_receipt(pr_number, outcome.head_sha, outcome.receipt.envelope)
    forge.upsert_sticky_comment(pr_number, f"{SCORECARD_MARKER_PREFIX} v1 -->", f"{outcome.scorecard}\n\nreceipt: {receipt_ref}")
    if check_id is None:
        check_id = forge.start_check(outcome.head_sha, CHECK_NAME, "scored")
    forge.update_check(check_id, status="completed", title=outcome.check.title, summary=outcome.scorecard,
                       conclusion=outcome.check.conclusion)


def basic_publisher_factory(settings) -> Callable:
    return basic_publisher


def slow_scorer_factory(settings) -> Callable:
    """For worker subprocesses: sleeps FAKE_SCORER_SECONDS, leaving marks in FAKE_SCORER_MARKS."""
    seconds = float(os.environ.get("FAKE_SCORER_SECONDS", "0"))
    marks = Path(os.environ["FAKE_SCORER_MARKS"])
    marks.mkdir(parents=True, exist_ok=True)

    def score(job, progress):
        tag = f"pr{job.pr_number}-{os.getpid()}"
        (marks / f"{tag}.started").write_text(job.key)
        progress("pretending to measure")
        time.sleep(seconds)
        (marks / f"{tag}.finished").write_text(job.key)
        return fake_outcome(job, tier="S", speedup=0.04)

    return score


def child_scorer_factory(settings) -> Callable:
    """For worker subprocesses: a scorer that starts a long-running child in its own session, as the
    harness runner does, and kills it in a `finally` when interrupted (the measurement's contract).
    Writes the child's pid to FAKE_SCORER_MARKS/<pr>.child."""
    import signal

    marks = Path(os.environ["FAKE_SCORER_MARKS"])
    marks.mkdir(parents=True, exist_ok=True)

    def score(job, progress):
        progress("running the harness")
        child = subprocess.Popen(["sleep", "600"], start_new_session=True)
        (marks / f"pr{job.pr_number}.child").write_text(str(child.pid))
        try:
            while True:
                try:
                    child.wait(timeout=0.2)
                    break
                except subprocess.TimeoutExpired:
                    continue
        finally:
            if child.poll() is None:
                os.killpg(child.pid, signal.SIGKILL)
                child.wait()
                (marks / f"pr{job.pr_number}.killed").write_text(str(child.pid))
        return fake_outcome(job)

    return score
