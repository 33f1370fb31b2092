"""PLACEHOLDER until the sandbox layer lands (issue 12): a harness server process without a sandbox,
frozen with SIGSTOP on its process group. Same interface as the sandboxed one."""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Sequence
from pathlib import Path

from collections.abc import Mapping
from dataclasses import dataclass


@dataclass(frozen=True)
class SandboxSpec:
    label: str
    tree: Path
    model: Path
    env: Mapping[str, str]
    gpu: bool = False


class SandboxedProcess:
    def __init__(self, popen: subprocess.Popen, spec: SandboxSpec):
        self.popen = popen
        self.stdin = popen.stdin
        self.stdout = popen.stdout
        self.tree_inside: Path = spec.tree
        self.model_inside: Path = spec.model
        self.description = "OFF (no sandbox yet)"
        self.freezer = "SIGSTOP"
        self._err = bytearray()
        self._t = threading.Thread(target=self._drain, daemon=True)
        self._t.start()

    @classmethod
    def start(cls, spec: SandboxSpec, argv: Sequence[str], settings=None) -> "SandboxedProcess":
        env = {**spec.env, "PYTHONPATH": str(spec.tree), "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1"}
        p = subprocess.Popen(list(argv), cwd=spec.tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                             stderr=subprocess.PIPE, start_new_session=True)
        return cls(p, spec)

    def _drain(self) -> None:
        assert self.popen.stderr is not None
        for chunk in iter(lambda: self.popen.stderr.read1(65536), b""):
            self._err += chunk
            del self._err[:-65536]

    def stderr_tail(self, limit: int = 65536) -> str:
        return bytes(self._err[-limit:]).decode("utf-8", "replace")

    def _signal(self, sig: int) -> None:
        try:
            os.killpg(self.popen.pid, sig)
        except (ProcessLookupError, PermissionError):
            pass

    def freeze(self) -> None:
        self._signal(signal.SIGSTOP)

    def thaw(self) -> None:
        self._signal(signal.SIGCONT)

    def kill(self) -> None:
        self._signal(signal.SIGKILL)
        self._signal(signal.SIGCONT)
        try:
            self.popen.wait(timeout=10)
        except subprocess.TimeoutExpired:
            pass

    def poll(self) -> int | None:
        return self.popen.poll()
