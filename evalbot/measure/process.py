"""One subprocess: started in its own session, outputs to files (no pipe deadlock, bounded memory),
timed by the parent, and killed with its whole process group afterwards (and on a timeout or an
interrupt), so nothing it started runs into the next measurement."""

from __future__ import annotations

import os
import secrets
import signal
import subprocess
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evalbot.settings import SandboxSettings

STDOUT_LIMIT = 64 * 1024 * 1024
STDERR_TAIL_BYTES = 64 * 1024


@dataclass
class ProcessResult:
    returncode: int | None
    stdout: str
    stderr_tail: str
    wall_s: float
    timed_out: bool
    stdout_too_big: bool = False


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_tail(path: Path, limit: int) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - limit))
        return f.read().decode("utf-8", "replace")


def run_process(argv: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float, scratch: Path,
                sandbox: SandboxSettings | None = None) -> ProcessResult:
    """Run argv in its own session; outputs go to files (no pipe deadlock, bounded memory).

    `sandbox` is accepted and not used: this runner is not sandboxed. PR code runs sandboxed in
    `evalbot.measure.proc.SandboxedProcess` (bubblewrap), which replaces it."""
    out_path = scratch / f"stdout-{secrets.token_hex(4)}"
    err_path = scratch / f"stderr-{secrets.token_hex(4)}"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            start_new_session=True,
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            proc.wait()
        except BaseException:  # interrupted (Ctrl-C, SIGTERM via the CLI): take the child down with us
            _kill_group(proc.pid)
            proc.wait()
            raise
        wall = time.perf_counter() - start
        _kill_group(proc.pid)  # stragglers must not run into the next measurement
    too_big = out_path.stat().st_size > STDOUT_LIMIT
    stdout = "" if too_big else out_path.read_bytes().decode("utf-8", "replace")
    stderr_tail = _read_tail(err_path, STDERR_TAIL_BYTES)
    out_path.unlink(missing_ok=True)
    err_path.unlink(missing_ok=True)
    return ProcessResult(
        returncode=None if timed_out else proc.returncode,
        stdout=stdout,
        stderr_tail=stderr_tail,
        wall_s=wall,
        timed_out=timed_out,
        stdout_too_big=too_big,
    )
