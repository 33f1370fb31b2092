"""Keep a bot process's memory out of reach of the PR code it starts.

Popping a secret from `os.environ` does not take it out of `/proc/<pid>/environ`: that file shows the
environment block the process was started with, and `/proc/<pid>/mem` shows the rest of its memory.
Any process of the same user can read both. `prctl(PR_SET_DUMPABLE, 0)` makes those files owned by
root and refuses ptrace, so a harness child running as the bot's own user (`--no-sandbox`)
can no longer read the token or the signing key out of its parent. The flag survives
fork and is reset by exec, so it protects the bot and its forks, not the children it execs. A
sandbox (evalbot.measure.sandbox) is the real boundary: it also keeps files on disk away.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import logging
import sys

log = logging.getLogger(__name__)

PR_SET_DUMPABLE = 4
PR_GET_DUMPABLE = 3


def _libc():
    return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)


def make_undumpable() -> bool:
    """Mark this process non-dumpable (Linux). Returns whether it is now non-dumpable."""
    if not sys.platform.startswith("linux"):
        return False
    try:
        libc = _libc()
        if libc.prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) != 0:
            log.warning("prctl(PR_SET_DUMPABLE, 0) failed (errno %d)", ctypes.get_errno())
            return False
        return libc.prctl(PR_GET_DUMPABLE, 0, 0, 0, 0) == 0
    except OSError as e:  # no libc to load
        log.warning("cannot mark the process non-dumpable: %s", e)
        return False
