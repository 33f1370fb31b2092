"""One long-lived process in its own sandbox, talked to over pipes, frozen while another is timed.

    proc = SandboxedProcess.start(spec, [python, "-m", "harness.serve", "--model", str(MODEL_DIR / name)], settings)
    proc.stdin.write(request); proc.stdin.flush()      # buffered: flush after each request
    select([proc.stdout.fileno()], ...); proc.stdout.read(65536)   # raw: select() sees every byte
    proc.freeze(); ...; proc.thaw()
    proc.kill()                                          # nothing of it survives; idempotent

The process is started stopped: a `/bin/sh` that waits for one line on stdin, is moved into the
sandbox's cgroups while it waits, then execs bwrap (so nothing of the sandbox runs outside them).
stderr is read all the time by a thread into a bounded buffer (never to disk). bwrap's
`--die-with-parent` ties the sandbox to the *thread* that forked it (PR_SET_PDEATHSIG), so every
sandbox is forked by one spawner thread that lives as long as the bot: a sandbox started from a
short-lived thread is not killed when that thread ends, and none outlives the bot.
"""

from __future__ import annotations

import os
import queue
import subprocess
import threading
import time
from concurrent.futures import Future
from collections.abc import Sequence
from pathlib import Path
from typing import BinaryIO

from evalbot.errors import EvalbotError
from evalbot.measure.freeze import Freezer, make_freezer
from evalbot.measure.sandbox import MODEL_DIR, TREE, SandboxSpec, bwrap_command, check_sandbox, sandbox_env
from evalbot.settings import SandboxSettings

STDERR_KEEP = 1 << 20  # bytes of stderr kept (the tail)
GO = 'read -r _ || exit 125; exec "$@"'  # wait to be moved into the cgroups, then become the sandbox


class _Spawner:
    """One long-lived thread that forks every sandbox (see the module's docstring)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._queue: queue.SimpleQueue | None = None
        self._thread: threading.Thread | None = None
        self._pid = 0

    @staticmethod
    def _loop(jobs: queue.SimpleQueue) -> None:
        while True:
            fn, future = jobs.get()
            try:
                future.set_result(fn())
            except BaseException as e:  # noqa: BLE001 - handed to the caller
                future.set_exception(e)

    def run(self, fn):
        with self._lock:
            if self._thread is None or not self._thread.is_alive() or self._pid != os.getpid():
                self._queue, self._pid = queue.SimpleQueue(), os.getpid()
                self._thread = threading.Thread(target=self._loop, args=(self._queue,), daemon=True,
                                                name="evalbot-sandbox-spawner")
                self._thread.start()
            jobs = self._queue
        future: Future = Future()
        jobs.put((fn, future))
        return future.result()


_SPAWNER = _Spawner()


class _Tail:
    """The last STDERR_KEEP bytes of a stream, read by a daemon thread until EOF."""

    def __init__(self, stream: BinaryIO, name: str) -> None:
        self._buf = bytearray()
        self._lock = threading.Lock()
        self._stream = stream
        self.thread = threading.Thread(target=self._run, name=name, daemon=True)
        self.thread.start()

    def _run(self) -> None:
        fd = self._stream.fileno()
        while True:
            try:
                chunk = os.read(fd, 65536)
            except OSError:
                break
            if not chunk:
                break
            with self._lock:
                self._buf += chunk
                if len(self._buf) > STDERR_KEEP:
                    del self._buf[: len(self._buf) - STDERR_KEEP]

    def text(self, limit: int) -> str:
        with self._lock:
            data = bytes(self._buf[-limit:]) if limit > 0 else b""
        return data.decode("utf-8", "replace")


class SandboxedProcess:
    stdin: BinaryIO
    stdout: BinaryIO
    tree_inside: Path
    model_inside: Path
    description: str
    freezer: str

    def __init__(self, popen: subprocess.Popen, freezer: Freezer, spec: SandboxSpec, description: str,
                 tree_inside: Path, model_inside: Path) -> None:
        self._popen = popen
        self._freezer = freezer
        self._lock = threading.Lock()
        self._killed = False
        self.spec = spec
        self.label = spec.label
        self.pid = popen.pid  # the host pid of bwrap (of the process itself with --no-sandbox)
        self.stdin = popen.stdin  # type: ignore[assignment]
        self.stdout = popen.stdout  # type: ignore[assignment]
        self.description = description
        self.freezer = freezer.kind
        self.limits = list(freezer.cgroups.limits)
        self.tree_inside = tree_inside
        self.model_inside = model_inside
        self._stderr = _Tail(popen.stderr, f"stderr-{spec.label}")  # type: ignore[arg-type]

    @classmethod
    def start(cls, spec: SandboxSpec, argv: Sequence[str], settings: SandboxSettings, *,
              freezer: str | None = None) -> SandboxedProcess:
        """Start argv (argv[0]: the interpreter, a host path) in a new sandbox for `spec`.

        `freezer` forces "cgroup v2", "cgroup v1" or "SIGSTOP" (tests); default: the best this box has.
        """
        if settings.enabled:
            description = check_sandbox(settings)
            tree_inside, model_inside = TREE, MODEL_DIR / spec.model.name
            command, fds = bwrap_command(spec, argv, settings)
            cwd: Path | None = None
        else:
            description = check_sandbox(settings)
            tree_inside, model_inside = spec.tree, spec.model
            command, fds, cwd = list(argv), [], spec.tree
        env = sandbox_env(spec.env, tree_inside)
        frozen = None
        try:
            frozen = make_freezer(spec.label, settings, freezer)
            popen = _SPAWNER.run(lambda: subprocess.Popen(
                ["/bin/sh", "-c", GO, f"evalbot-sandbox-{spec.label}", *command], cwd=cwd, env=env,
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, bufsize=0,
                pass_fds=fds, start_new_session=True,
            ))
        except BaseException:
            if frozen is not None:
                frozen.remove()
            raise
        finally:
            for fd in fds:
                os.close(fd)
        try:
            frozen.attach(popen.pid)
        except BaseException as e:
            popen.kill()
            popen.wait()
            frozen.remove()
            raise EvalbotError(f"sandbox {spec.label}: cannot move it into its cgroup: {e}") from None
        stdin = os.fdopen(os.dup(popen.stdin.fileno()), "wb")  # buffered for the caller; raw stays ours
        popen.stdin.write(b"go\n")
        popen.stdin.close()
        popen.stdin = stdin
        return cls(popen, frozen, spec, description, tree_inside, model_inside)

    def stderr_tail(self, limit: int = 65536, settle: float = 0.0) -> str:
        """The last `limit` bytes of what it wrote on stderr (at most the last MiB is kept). `settle`:
        first wait up to that many seconds for the process to exit and for its stderr to be read to the
        end. A process that just failed wrote its reason a moment before the bot saw the failure (its
        stdout closing), and the reader thread may not have read that yet: without it, a crash's own
        message was missing from the scorecard on a loaded box (CI, 2026-12-04)."""
        if settle > 0:
            deadline = time.monotonic() + settle
            try:
                self._popen.wait(settle)
            except subprocess.TimeoutExpired:
                pass
            else:
                self._stderr.thread.join(max(0.0, deadline - time.monotonic()))
        return self._stderr.text(limit)

    def poll(self) -> int | None:
        return self._popen.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self._popen.wait(timeout)

    def freeze(self) -> None:
        """Every process and thread of the sandbox stopped; returns once they are."""
        with self._lock:
            if not self._killed:
                self._freezer.freeze()

    def thaw(self) -> None:
        with self._lock:
            if not self._killed:
                self._freezer.thaw()

    def kill(self) -> None:
        """Kill everything of the sandbox (setsid and double-forked processes too), reap it, remove
        its cgroups. Idempotent; safe after the process died."""
        with self._lock:
            if self._killed:
                return
            self._killed = True
            try:
                self._freezer.kill()
                self._popen.kill()
                self._popen.wait()
            finally:
                for stream in (self._popen.stdin, self._popen.stdout):
                    try:
                        stream.close()
                    except OSError:
                        pass
                self._stderr.thread.join(timeout=5)
                self._freezer.remove()

    def __enter__(self) -> SandboxedProcess:
        return self

    def __exit__(self, *exc: object) -> None:
        self.kill()
