"""`python -m evalbot serve`: real uvicorn on loopback, real HTTP."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from fakegithub.helpers import FIXTURE_REPO, SECRET, free_port, payload, wait_until_healthy, webhook_headers

ROOT = Path(__file__).resolve().parents[1]


def _env(tmp_path, **extra):
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALBOT_")}
    env.update(PYTHONPATH=str(ROOT), EVALBOT_REPO=FIXTURE_REPO, EVALBOT_MAIN_BRANCH="master", EVALBOT_STATE_DIR=str(tmp_path))
    env.update(extra)
    return env


@pytest.fixture
def served(tmp_path):
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "evalbot", "serve", "--host", "127.0.0.1", "--port", str(port), "--log-level", "warning"],
                            env=_env(tmp_path, EVALBOT_WEBHOOK_SECRET=SECRET), cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(base, "evalbot serve", proc=proc)
    except BaseException:
        proc.kill()
        print(proc.stdout.read().decode()[-3000:])  # shown with the failure
        raise
    yield base
    proc.terminate()
    proc.wait(timeout=10)


def test_serve_answers_a_signed_ping_and_queues_a_pull_request(served):
    ping = json.dumps(payload("ping")).encode()
    assert httpx.post(served + "/webhook", content=ping, headers=webhook_headers(ping, "ping")).json() == {"status": "pong"}
    body = json.dumps(payload("pull_request.opened")).encode()
    started = time.monotonic()
    response = httpx.post(served + "/webhook", content=body, headers=webhook_headers(body, "pull_request"))
    assert response.status_code == 202 and response.json()["status"] == "queued"
    assert time.monotonic() - started < 2  # answers fast: only the queue is touched


def test_serve_rejects_an_unsigned_post(served):
    assert httpx.post(served + "/webhook", content=b"{}", headers={"X-GitHub-Event": "ping"}).status_code == 401


def test_serve_refuses_to_start_without_a_secret(tmp_path):
    done = subprocess.run([sys.executable, "-m", "evalbot", "serve", "--port", str(free_port())], env=_env(tmp_path),
                          cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "missing setting(s): EVALBOT_WEBHOOK_SECRET" in done.stderr
    assert "Traceback" not in done.stderr


@pytest.mark.parametrize(
    "env,message",
    [
        ({"EVALBOT_REPO": "not a repo"}, "EVALBOT_REPO must look like owner/name"),
        ({"EVALBOT_MAX_BODY_BYTES": "lots"}, "EVALBOT_MAX_BODY_BYTES must be a number"),
        ({"EVALBOT_AUTOMERGE": "maybe"}, "EVALBOT_AUTOMERGE must be on/off"),
        ({"EVALBOT_CLOSE_ON": "XL"}, "EVALBOT_CLOSE_ON may hold only REJECT and none"),
    ],
)
def test_bad_settings_are_one_clear_line(tmp_path, env, message):
    done = subprocess.run([sys.executable, "-m", "evalbot", "worker", "--burst"], env=_env(tmp_path, **env), cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and message in done.stderr and "Traceback" not in done.stderr


def test_worker_without_credentials_says_what_to_set(tmp_path):
    done = subprocess.run([sys.executable, "-m", "evalbot", "worker", "--burst"], env=_env(tmp_path), cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "set EVALBOT_GITHUB_TOKEN" in done.stderr


def test_secrets_can_come_from_files(tmp_path):
    from evalbot.errors import ConfigError
    from evalbot.settings import load_settings

    secret_file = tmp_path / "webhook-secret"
    secret_file.write_text("from-a-file\n")
    assert load_settings(environ={"EVALBOT_WEBHOOK_SECRET_FILE": str(secret_file)}).webhook_secret == "from-a-file"
    with pytest.raises(ConfigError, match="EVALBOT_GITHUB_TOKEN_FILE: cannot read"):
        load_settings(environ={"EVALBOT_GITHUB_TOKEN_FILE": str(tmp_path / "missing")})
