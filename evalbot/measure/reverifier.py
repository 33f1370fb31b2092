"""The engine side of re-verification: main's own engine, in a subprocess started from main's
worktree (`python -m harness.reverify --serve`), re-checks every stream the PR reported. One process
serves all of a scoring's streams (one model load), and goes away with the reverifier."""

from __future__ import annotations

import atexit
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Mapping, Sequence
from pathlib import Path

from evalbot.decide.reverify import PromptSpec, Reverifier, ReverifierFactory
from evalbot.measure.environment import child_env
from evalbot.settings import ScoringSettings

REVERIFY_TIMEOUT_S = 600.0  # per request


class SubprocessReverifier:
    def __init__(self, python: str, worktree: Path, env: Mapping[str, str], timeout: float):
        self.timeout = timeout
        self.proc = subprocess.Popen(
            [python, "-m", "harness.reverify", "--serve"], cwd=worktree, env=dict(env), text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, start_new_session=True,
        )
        atexit.register(self.close)
        hello = self._read()
        if not hello.get("ready"):
            raise RuntimeError(f"reverifier did not start: {hello}")
        self.tolerance = hello.get("tolerance")
        self.worst_gap = 0.0

    def _read(self) -> dict:
        line = self.proc.stdout.readline() if self.proc.stdout else ""
        if not line:
            self.close()
            raise RuntimeError("the reverifier exited without answering")
        return json.loads(line)

    def __call__(self, tokens: Sequence[int], prompt: PromptSpec) -> bool:
        request = {"prompt": prompt.name, "ctx": prompt.ctx, "sha256": prompt.sha256, "tokens": list(tokens)}
        assert self.proc.stdin is not None
        self.proc.stdin.write(json.dumps(request) + "\n")
        self.proc.stdin.flush()
        answer = self._read()
        if answer.get("error"):
            raise RuntimeError(answer.get("reason", "reverifier error"))
        if answer.get("worst_gap") is not None:
            self.worst_gap = max(self.worst_gap, float(answer["worst_gap"]))
        return bool(answer["ok"])

    def close(self) -> None:
        if self.proc.poll() is None:
            try:
                if self.proc.stdin:
                    self.proc.stdin.close()
                self.proc.wait(timeout=10)
            except (subprocess.TimeoutExpired, OSError):
                self.proc.kill()

    def __del__(self) -> None:  # pragma: no cover - best effort
        self.close()


def engine_reverifier_factory(settings: ScoringSettings) -> ReverifierFactory:
    """A factory for pipeline.score_refs: (main's worktree, profile) -> a reverifier run by main's engine."""

    def factory(worktree: Path, profile: str) -> Reverifier | None:
        if not (worktree / "harness" / "reverify.py").is_file():
            return None  # a main without the reverify program: the scorecard says "not run"
        cache = Path(tempfile.mkdtemp(prefix="evalbot-reverify-triton-"))
        env = child_env(os.environ, settings.env, worktree, cache, nonce="reverify")
        return SubprocessReverifier(settings.harness.python or sys.executable, worktree, env, REVERIFY_TIMEOUT_S)

    return factory
