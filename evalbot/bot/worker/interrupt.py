"""Stopping a worker mid-score: SIGTERM becomes an exception in the thread that is scoring.

Signals reach only the main thread; the score runs in a consumer thread. `ScoringGuard.interrupt`
raises `ScoringInterrupted` (a KeyboardInterrupt) asynchronously in that thread, at its next Python
instruction: the measurement's own `finally` blocks kill every harness process of the scoring (the
runner waits on its children in short slices, so it sees the exception within a fraction of a
second), and the worker puts the job back in the queue and says so on the check run.
"""

from __future__ import annotations

import ctypes
import logging
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import TypeVar

log = logging.getLogger("evalbot.worker")
T = TypeVar("T")


class ScoringInterrupted(KeyboardInterrupt):
    """The worker is stopping: unwind the scoring (a BaseException, so `except Exception` lets it pass)."""


class ScoringSuperseded(KeyboardInterrupt):
    """The PR moved on while its head was being scored (a push queued the new head): the scoring stops at
    its next progress step instead of spending the box on a verdict that would never be published. A
    BaseException, as ScoringInterrupted, so the measurement's `finally` blocks still run."""


class ScoringGuard:
    """Knows which thread is inside a scorer call, and interrupts it on request."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._thread: int | None = None
        self.stopping = threading.Event()
        self.why = ""

    @contextmanager
    def scoring(self) -> Iterator[None]:
        with self._lock:
            if self.stopping.is_set():
                raise ScoringInterrupted(self.why or "the worker is stopping")
            self._thread = threading.get_ident()
        try:
            yield
        finally:
            with self._lock:
                self._thread = None

    def run(self, fn: Callable[[], T]) -> T:
        with self.scoring():
            return fn()

    def interrupt(self, why: str) -> bool:
        """Stop taking scores, and interrupt the one running now. True when one was running."""
        with self._lock:
            self.why = why
            self.stopping.set()
            thread = self._thread
            if thread is None:
                return False
            done = ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(thread), ctypes.py_object(ScoringInterrupted))
        if done != 1:
            log.error("could not interrupt the scoring thread (%s thread states changed)", done)
            return False
        log.info("interrupting the running scoring: %s", why)
        return True
