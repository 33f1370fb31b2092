"""The sweeper thread: calls `Worker.sweep` every few seconds; a failed sweep is logged and tried again."""

from __future__ import annotations

import logging
import threading
from typing import Protocol

log = logging.getLogger("evalbot.worker")


class Sweepable(Protocol):
    def sweep(self) -> dict[str, int]: ...


class Sweeper(threading.Thread):
    def __init__(self, worker: Sweepable, interval: float):
        super().__init__(name="evalbot-sweeper", daemon=True)
        self.worker, self.interval = worker, interval
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                self.worker.sweep()
            except Exception:
                log.exception("sweep failed; trying again in %.0fs", self.interval)
