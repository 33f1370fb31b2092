"""Re-verification: re-check the PR's DSpark streams with *main's* build.

Comparing a PR's DSpark stream with the PR's own AR stream cannot catch a PR that breaks both the
same way. A reverifier runs main's engine teacher-forced over `prompt + tokens` and confirms that
every token is the argmax of main's model at its position (greedy decoding is deterministic, so a
lossless stream must pass; whether a near-tie, where batched and single-token kernels can round
differently, counts as a pass is the reverifier's call and should be documented there).

This module defines the hook and calls it; the engine side is `evalbot.measure.reverifier` (main's
own engine in a subprocess, `python -m harness.reverify --serve`). The pipeline takes a
`ReverifierFactory`: given main's worktree (with the pinned harness) and the profile it returns a
`Reverifier`, or None when re-verification is not available. When none is given the scorecard
says "not run" — it never pretends the check happened.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from pydantic import BaseModel

from evalbot.decide.contract import TauCheckLine


@dataclass(frozen=True)
class PromptSpec:
    """Which prompt a stream continues: the harness prompt `name` truncated to exactly `ctx`
    tokens with the checkpoint's tokenizer; `sha256` (of its token ids) lets the engine side
    confirm it rebuilt the same prompt."""

    name: str
    ctx: int
    sha256: str
    profile: str


class Reverifier(Protocol):
    def __call__(self, tokens: Sequence[int], prompt: PromptSpec) -> bool:
        """True iff every token is main's teacher-forced argmax after prompt + the tokens before it."""
        ...


ReverifierFactory = Callable[[Path, str], "Reverifier | None"]


class ReverifySummary(BaseModel):
    status: Literal["not_run", "passed", "failed", "error"] = "not_run"
    streams_checked: int = 0
    failures: list[str] = []
    error: str = ""


def reverify_streams(reverifier: Reverifier | None, lines: Sequence[TauCheckLine], profile: str) -> ReverifySummary:
    """Call the reverifier once per distinct DSpark stream of the PR (and its AR stream)."""
    if reverifier is None:
        return ReverifySummary(status="not_run")
    seen: set[tuple[str, int, tuple[int, ...]]] = set()
    checked, failures = 0, []
    try:
        for line in lines:
            prompt = PromptSpec(name=line.prompt, ctx=line.ctx, sha256=line.prompt_sha256, profile=profile)
            for stream in [line.ar_tokens, *line.dspark_tokens]:
                key = (line.prompt, line.ctx, tuple(stream))
                if key in seen:
                    continue
                seen.add(key)
                checked += 1
                if not reverifier(list(stream), prompt):
                    failures.append(f"{line.prompt}@{line.ctx}: a stream is not main's greedy continuation")
    except Exception as e:  # noqa: BLE001 - a broken reverifier is an infrastructure problem
        return ReverifySummary(status="error", streams_checked=checked, error=f"{type(e).__name__}: {e}")
    return ReverifySummary(
        status="failed" if failures else "passed", streams_checked=checked, failures=sorted(set(failures))
    )
