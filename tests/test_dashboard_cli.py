"""`evalbot dashboard`: the bot's dashboard pages for a local repository's history (.evalbot/history.sqlite3,
written by `evalbot score --pr`, `calibrate` and `demo`), served as a process."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
from pathlib import Path

import httpx

from evalbot.history.store import SqliteHistory
from evalbot.testing import make_fake_repo
from fakegithub.helpers import free_port, wait_until_healthy
from test_history import MAIN, entry

ROOT = Path(__file__).resolve().parents[1]


def _env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("EVALBOT_")}
    env["PYTHONPATH"] = str(ROOT)
    return env


def test_dashboard_serves_the_local_history(tmp_path):
    repo = make_fake_repo(tmp_path / "repo")
    store = SqliteHistory(repo.path / ".evalbot" / "history.sqlite3")
    for e in [entry(0, repo=str(repo.path)), entry(1, repo=str(repo.path), pr=8),
              entry(0, repo=str(repo.path), kind="calibration", pr=None, status="calibrated")]:
        store.add(e)
    store.close()
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "evalbot", "dashboard", "--repo", str(repo.path), "--port", str(port)],
                            env=_env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_until_healthy(base, "evalbot dashboard", timeout=60, proc=proc)
        overview = httpx.get(base + "/dashboard", timeout=10)
        assert overview.status_code == 200 and "<svg" in overview.text
        assert MAIN[0][:7] in overview.text and MAIN[1][:7] in overview.text  # main's commits on the x axis
        assert "noise floor" in overview.text
        pull = httpx.get(base + "/dashboard/pr/8", timeout=10)
        assert pull.status_code == 200 and "per round" in pull.text
        assert httpx.get(base + "/", timeout=10, follow_redirects=True).url.path == "/dashboard"
    finally:
        proc.terminate()
        out, err = proc.communicate(timeout=30)
        print(err[-3000:])  # shown with a failure
    assert f"http://127.0.0.1:{port}/dashboard (3 entries" in out
    assert "Traceback" not in err


def test_a_taken_port_is_one_line(tmp_path):
    repo = make_fake_repo(tmp_path / "repo")
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run([sys.executable, "-m", "evalbot", "dashboard", "--repo", str(repo.path), "--port", str(port)],
                              env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in done.stderr
    assert len(done.stderr.strip().splitlines()) == 1


def test_a_bad_port_is_one_line(tmp_path):
    repo = make_fake_repo(tmp_path / "repo")
    done = subprocess.run([sys.executable, "-m", "evalbot", "dashboard", "--repo", str(repo.path), "--port", "70000"],
                          env=_env(), capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and done.stderr.strip() == "error: --port must be 1..65535, got 70000"
