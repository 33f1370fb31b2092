"""The bot marks itself non-dumpable before it runs PR code, so a harness child of the same user cannot
read the token or the signing key out of /proc/<bot>/environ (or /proc/<bot>/mem)."""

from __future__ import annotations

import inspect
import os
import pwd
import shutil
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from evalbot import cli
from evalbot.bot.worker import main as worker_main

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl is Linux-only")
REPO = Path(__file__).resolve().parents[1]

# The "bot": started with a token in its environment, pops it (as the worker does), optionally marks
# itself non-dumpable, then starts a "PR" child of its own user that tries to read the bot's environ.
BOT = textwrap.dedent("""
    import importlib.util, os, subprocess, sys
    spec = importlib.util.spec_from_file_location("hardening", sys.argv[2])
    hardening = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(hardening)
    os.environ.pop("GITHUB_TOKEN")
    if sys.argv[1] == "1":
        assert hardening.make_undumpable()
    pr = "import os\\ntry:\\n print(open('/proc/%d/environ' % os.getppid(), 'rb').read().count(b'GITHUB_TOKEN=tok_secret'))\\nexcept PermissionError:\\n print('denied')"
    print(subprocess.run([sys.executable, "-c", pr], capture_output=True, text=True, env={}).stdout.strip())
""")


def _bot(flag: str) -> str:
    env = {"PATH": os.environ.get("PATH", ""), "GITHUB_TOKEN": "tok_secret"}
    python = sys.executable
    if os.getuid() == 0:  # root reads every /proc file: play both parts as an ordinary user
        python = "/usr/bin/python3"  # a venv's interpreter may live under root's home
        if not (shutil.which("setpriv") and os.access(python, os.X_OK)):
            pytest.skip("running as root without setpriv or /usr/bin/python3")
    cmd = [python, "-c", BOT, flag, str(REPO / "evalbot" / "measure" / "hardening.py")]
    if os.getuid() == 0:
        nobody = pwd.getpwnam("nobody")
        cmd = ["setpriv", f"--reuid={nobody.pw_uid}", f"--regid={nobody.pw_gid}", "--clear-groups", *cmd]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, check=True, cwd="/").stdout.strip()


def test_undumpable_bot_hides_its_startup_environment_from_same_user_children():
    assert _bot("0") == "1"  # popping the variable is not enough: /proc shows the start-up block
    assert _bot("1") == "denied"


def test_commands_that_run_pr_code_mark_the_process(monkeypatch, tmp_path):
    called = []
    monkeypatch.setattr(cli, "make_undumpable", lambda: called.append(True) or True)
    assert cli.RUNS_PR_CODE == {"score", "calibrate", "demo"}
    assert cli.main(["keygen", "--out", str(tmp_path / "k")]) == 0  # runs no PR code
    assert not called
    assert cli.main(["score", "--repo", str(tmp_path / "missing"), "--base", "a", "--head", "b"]) != 0
    assert called == [True]


def test_worker_entry_point_marks_the_process():
    assert "make_undumpable()" in inspect.getsource(worker_main.run_worker)
