"""Build and change the fake repository (see evalbot/testing/__init__.py)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

TEMPLATE = Path(__file__).resolve().parent / "fake_repo"
_IDENTITY = {
    "GIT_AUTHOR_NAME": "Fake Dev",
    "GIT_AUTHOR_EMAIL": "dev@example.invalid",
    "GIT_COMMITTER_NAME": "Fake Dev",
    "GIT_COMMITTER_EMAIL": "dev@example.invalid",
}


class FakeRepo:
    def __init__(self, path: Path) -> None:
        self.path = path

    def git(self, *args: str) -> str:
        env = dict(os.environ, **_IDENTITY)
        return subprocess.run(
            ["git", "-C", str(self.path), *args], check=True, capture_output=True, text=True, env=env
        ).stdout.strip()

    def sha(self, ref: str = "HEAD") -> str:
        return self.git("rev-parse", f"{ref}^{{commit}}")

    def knobs(self) -> dict[str, Any]:
        return json.loads((self.path / "knobs.json").read_text())

    def _apply(
        self, knobs: Mapping[str, Any] | None, files: Mapping[str, str] | None, delete: Iterable[str]
    ) -> None:
        if knobs:
            (self.path / "knobs.json").write_text(json.dumps({**self.knobs(), **knobs}, indent=1, sort_keys=True) + "\n")
        for rel, text in (files or {}).items():
            target = self.path / rel
            target.parent.mkdir(parents=True, exist_ok=True)
            target.write_text(text)
        for rel in delete:
            self.git("rm", "-q", "--", rel)

    def commit(
        self,
        message: str,
        *,
        knobs: Mapping[str, Any] | None = None,
        files: Mapping[str, str] | None = None,
        delete: Iterable[str] = (),
    ) -> str:
        """Commit on the checked-out branch."""
        self._apply(knobs, files, delete)
        self.git("add", "-A")
        self.git("commit", "-q", "--allow-empty", "-m", message)
        return self.sha()

    def branch(
        self,
        name: str,
        *,
        knobs: Mapping[str, Any] | None = None,
        files: Mapping[str, str] | None = None,
        delete: Iterable[str] = (),
        start: str = "main",
        message: str | None = None,
    ) -> str:
        """Create branch `name` from `start` with one commit, then go back to main."""
        self.git("checkout", "-q", "-b", name, start)
        try:
            return self.commit(message or f"{name}: change", knobs=knobs, files=files, delete=delete)
        finally:
            self.git("checkout", "-q", "main")

    def read(self, rel: str) -> str:
        return (self.path / rel).read_text()


# A harness profile sized for the fake engine (tests, the CLI's tests): one small context, 8 new tokens,
# two processes per ref, one fake guard. The fake engine's speeds are milliseconds per token.
FAKE_PROFILE: dict[str, Any] = {
    "contexts": [32], "new_tokens": 8, "processes": 2, "accuracy_positions": 16, "accuracy_ctx": 48,
    "guards": [{"name": "fake-guard", "ctx": 64, "new_tokens": 4}], "budget_s": 60, "request_timeout_s": 20,
    "startup_timeout_s": 120,
}


def fake_config_toml(noise_floor: float = 0.10) -> str:
    """A settings file (TOML) for scoring the fake repo: FAKE_PROFILE as the cpu profile and an
    uncalibrated floor wide enough for a sleeping fake engine on a busy VM."""
    p = FAKE_PROFILE
    guards = ", ".join(f'{{ name = "{g["name"]}", ctx = {g["ctx"]}, new_tokens = {g["new_tokens"]} }}' for g in p["guards"])
    lines = ["[stats]", f"default_noise_floor = {noise_floor}", "", "[thresholds]", "min_compare_positions = 32", "",
             "[profiles.cpu]"]
    lines += [f"{k} = {v}" for k, v in p.items() if k != "guards"]
    lines += [f"guards = [{guards}]", ""]
    return "\n".join(lines)


CORPUS_CHARS = 60_000  # per corpus: enough never-repeated windows for the tests' small contexts


def make_fake_repo(path: Path, knobs: Mapping[str, Any] | None = None) -> FakeRepo:
    """A git repo at `path` (branch main, one commit) holding the fake engine and a harness made of the
    real server (harness/serve.py, the real protocol) and slices of the real corpora."""
    import harness.serve
    from harness.prompts import PROMPTS_DIR

    shutil.copytree(TEMPLATE, path, dirs_exist_ok=True, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    shutil.copyfile(harness.serve.__file__, path / "harness" / "serve.py")
    (path / "harness" / "prompts").mkdir(exist_ok=True)
    for name in ("code", "prose"):
        text = (PROMPTS_DIR / f"{name}.txt").read_text(encoding="utf-8")[:CORPUS_CHARS]
        (path / "harness" / "prompts" / f"{name}.txt").write_text(text, encoding="utf-8")
    repo = FakeRepo(path)
    repo.git("init", "-q", "-b", "main")
    if knobs:
        repo._apply(knobs, None, ())
    repo.git("add", "-A")
    repo.git("commit", "-q", "-m", "fake engine and harness")
    return repo
