"""Runner: scrubbed environment, ABBA schedule, process isolation, failure classification."""

import sys
import time

from evalbot.settings import EnvPolicy
from evalbot.decide.records import Step
from evalbot.measure.environment import NONCE_ENV, child_env, scrub_env
from evalbot.measure.harness_runner import abba_order, build_schedule, record_from
from evalbot.measure.process import ProcessResult, run_process
from evalbot.testing import builders as b

SECRETS = {
    "GITHUB_TOKEN": "ghp_x", "GH_TOKEN": "x", "EVALBOT_SIGNING_KEY": "/k", "EVALBOT_WEBHOOK_SECRET": "s",
    "AWS_SECRET_ACCESS_KEY": "a", "AWS_PROFILE": "p", "HF_TOKEN": "h", "OPENAI_API_KEY": "o", "DB_PASSWORD": "d",
    "SSH_AUTH_SOCK": "/tmp/s", "REDIS_URL": "redis://:pw@h", "DSPARK_API_TOKEN": "t", "MY_SECRET": "m",
}
SAFE = {"PATH": "/usr/bin", "HOME": "/home/bot", "LANG": "C.UTF-8", "LC_ALL": "C", "CUDA_VISIBLE_DEVICES": "0",
        "TRITON_INTERPRET": "1", "DSPARK_MODEL_DIR": "/models"}


def test_scrub_keeps_the_allow_list_and_drops_every_secret():
    env = scrub_env({**SECRETS, **SAFE, "RANDOM_THING": "x", "PYTHONPATH": "/evil"}, EnvPolicy())
    assert env == SAFE


def test_deny_wins_over_allow():
    policy = EnvPolicy(allow=["*"], deny=["*TOKEN*"])
    assert scrub_env({"A_TOKEN": "x", "B": "y"}, policy) == {"B": "y"}


def test_child_env_points_at_the_worktree(tmp_path):
    env = child_env({**SECRETS, **SAFE}, EnvPolicy(), tmp_path / "pr", tmp_path / "triton" / "head", "n1")
    assert env["PYTHONPATH"] == str(tmp_path / "pr")
    assert env["TRITON_CACHE_DIR"] == str(tmp_path / "triton" / "head")
    assert env[NONCE_ENV] == "n1"
    assert not set(SECRETS) & set(env)


def test_abba_order_alternates():
    assert abba_order(4) == [("base", "head"), ("head", "base"), ("base", "head"), ("head", "base")]


def test_schedule_runs_score_once_per_ref_and_every_program_every_round():
    steps = build_schedule(3)
    assert [(s.ref, s.program) for s in steps if s.round == 1] == [
        ("head", "tau_check"), ("head", "guard"), ("base", "tau_check"), ("base", "guard")]
    assert sum(1 for s in steps if s.program == "score") == 2
    assert all(s.round == 0 for s in steps if s.program == "score")
    assert sum(1 for s in steps if s.program == "tau_check") == 6


def test_timeout_kills_the_whole_process_group(tmp_path):
    marker = tmp_path / "grandchild-alive"
    grandchild = tmp_path / "grandchild.py"
    grandchild.write_text(f"import time\ntime.sleep(1.5)\nopen({str(marker)!r}, 'w')\n")
    child = tmp_path / "child.py"
    child.write_text(
        f"import subprocess, sys, time\nsubprocess.Popen([sys.executable, {str(grandchild)!r}])\ntime.sleep(60)\n"
    )
    t0 = time.perf_counter()
    res = run_process([sys.executable, str(child)], tmp_path, {"PATH": "/usr/bin:/bin"}, 0.5, tmp_path)
    assert res.timed_out and res.returncode is None
    assert time.perf_counter() - t0 < 5
    time.sleep(1.5)
    assert not marker.exists()


def test_stdout_and_stderr_are_captured_and_wall_time_measured(tmp_path):
    code = "import sys, time; time.sleep(0.2); print('out'); print('err', file=sys.stderr); sys.exit(3)"
    res = run_process([sys.executable, "-c", code], tmp_path, {"PATH": "/usr/bin:/bin"}, 10, tmp_path)
    assert (res.returncode, res.stdout.strip(), res.stderr_tail.strip()) == (3, "out", "err")
    assert 0.2 <= res.wall_s < 5


def _result(stdout="", returncode=0, timed_out=False, stderr=""):
    return ProcessResult(returncode=returncode, stdout=stdout, stderr_tail=stderr, wall_s=1.0, timed_out=timed_out)


STEP = Step(1, "head", "tau_check")
GOOD = b.tau_line().model_dump_json(by_alias=True)


def test_record_classification():
    ok = record_from(STEP, b.NONCE, [], _result(GOOD), 60, 10)
    assert ok.ok and len(ok.tau_lines()) == 1 and ok.label == "round 2: tau_check (PR)"
    crash = record_from(STEP, b.NONCE, [], _result("", 1, stderr="Traceback\nRuntimeError: CUDA"), 60, 1)
    assert crash.failure == "exited with status 1" and crash.stderr_tail == "RuntimeError: CUDA"
    late = record_from(STEP, b.NONCE, [], _result(GOOD, 1), 60, 10)
    assert "after printing results" in late.failure
    timeout = record_from(STEP, b.NONCE, [], _result(GOOD, None, True), 60, 10)
    assert timeout.failure == "timed out after 60 s" and not timeout.lines
    canned = record_from(STEP, "another-nonce", [], _result(GOOD), 60, 10)
    assert "nonce" in canned.failure
    err = '{"schema": "dspark-harness/1", "nonce": "%s", "kind": "error", "reason": "no GPU"}' % b.NONCE
    reported = record_from(STEP, b.NONCE, [], _result(err, 2), 60, 10)
    assert reported.failure == "tau_check reported an error: no GPU"


# The sandbox (bubblewrap) that replaced the sandbox user is tested in tests/test_sandbox*.py.


def test_an_interrupted_run_takes_its_child_group_down(tmp_path):
    """Ctrl-C or SIGTERM (the CLI turns it into KeyboardInterrupt) while a harness child runs: the
    child's whole process group is killed before the exception goes on, nothing keeps running."""
    import os
    import signal as _signal

    import pytest

    pidfile = tmp_path / "pid"
    code = f"sleep 30 & echo $$ > {pidfile}; wait"

    def interrupt(signum, frame):
        raise KeyboardInterrupt

    old = _signal.signal(_signal.SIGALRM, interrupt)
    _signal.setitimer(_signal.ITIMER_REAL, 1.0)
    try:
        with pytest.raises(KeyboardInterrupt):
            run_process(["sh", "-c", code], tmp_path, {"PATH": "/usr/bin:/bin"}, 60, tmp_path)
    finally:
        _signal.setitimer(_signal.ITIMER_REAL, 0)
        _signal.signal(_signal.SIGALRM, old)
    pgid = int(pidfile.read_text())
    deadline = time.time() + 5
    while time.time() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the child's process group outlived the interrupted run")
