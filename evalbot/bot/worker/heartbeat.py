"""A running job's heartbeat in the ledger, from a daemon thread; a job whose beats stop is taken over."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

log = logging.getLogger("evalbot.worker")


class Heartbeat:
    """Beats for a running job from a daemon thread, until the ledger says another worker took it over."""

    def __init__(self, beat: Callable[[], bool], interval: float):
        self._beat, self._interval = beat, interval
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="evalbot-heartbeat", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                if not self._beat():  # taken over: the ledger will refuse this worker's verdict anyway
                    return
            except Exception:  # a transient ledger error: try again next beat
                log.warning("heartbeat failed", exc_info=True)

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)
