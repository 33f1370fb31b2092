"""Scoring progress on the check run: the runner's steps become one-line updates, throttled."""

from __future__ import annotations

import logging
from collections.abc import Callable

log = logging.getLogger("evalbot.worker")

Progress = Callable[[str], None]  # one line: what the scorer is doing now


class CheckRunProgress:
    """Turns scorer progress into check-run summaries, at most one update per `min_interval` seconds."""

    def __init__(self, update: Callable[[str, list[str]], None], min_interval: float, clock: Callable[[], float]):
        self._update, self._min_interval, self._clock = update, min_interval, clock
        self._last = -1e18
        self.steps: list[str] = []

    def __call__(self, step: str) -> None:
        done = list(self.steps)
        self.steps.append(step)
        now = self._clock()
        if now - self._last < self._min_interval:
            return
        self._last = now
        try:
            self._update(step, done)
        except Exception as exc:  # progress is decoration; it never stops a score
            log.warning("progress update failed: %s", exc)


class RunnerProgress:
    """The campaign's ProgressSink (evalbot.measure.run) -> a one-line Progress."""

    def __init__(self, progress: Progress):
        self.progress, self.total, self.done = progress, 0, 0

    def begin(self, total: int) -> None:
        self.total = total

    def step(self, label: str) -> None:
        self.progress(f"{label} ({self.done}/{self.total} done)" if self.total else label)

    def advance(self) -> None:
        self.done += 1
