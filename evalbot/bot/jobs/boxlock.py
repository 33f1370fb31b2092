"""One scoring job at a time per GPU box: an exclusive flock on a file of the box's own disk.

The kernel drops the lock when the holding process dies, so a killed worker never leaves the box
locked. Each acquisition opens the file anew, so two threads of one process exclude each other too.
"""

from __future__ import annotations

import fcntl
import os
from pathlib import Path


class BoxLock:
    def __init__(self, path: Path | str):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = None

    def try_acquire(self) -> bool:
        if self._fd is not None:
            raise RuntimeError("BoxLock is not re-entrant")
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            return False
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        self._fd = fd
        return True

    def release(self) -> None:
        if self._fd is None:
            return
        fcntl.flock(self._fd, fcntl.LOCK_UN)
        os.close(self._fd)
        self._fd = None

    @property
    def held(self) -> bool:
        return self._fd is not None
