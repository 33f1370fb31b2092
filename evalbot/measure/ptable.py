"""The host's process table, read from /proc: a process tree, its states, killing it whole.

A pid is named with its start time everywhere, so a pid the kernel hands out again is never taken
for the process that had it.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Callable

from evalbot.errors import EvalbotError

WAIT_S = 10.0


def wait_until(done, what: str, timeout: float = WAIT_S) -> None:
    """Poll `done()` (sub-millisecond at first, then every 5 ms) until true; EvalbotError after timeout."""
    deadline = time.monotonic() + timeout
    pause = 0.0
    while not done():
        if time.monotonic() > deadline:
            raise EvalbotError(f"sandbox: {what} did not happen within {timeout:.0f} s")
        time.sleep(pause)
        pause = min(0.005, pause + 0.0001)


def stat(pid: int | str) -> tuple[int, str, int] | None:
    """(ppid, state, start time) of a process (or "pid/task/tid"), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            fields = f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), fields[0].decode(), int(fields[19])


def _children(pid: int) -> list[int] | None:
    """pid's children from /proc/<pid>/task/*/children (None where the kernel has no such file)."""
    out: list[int] = []
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    for tid in tids:
        try:
            with open(f"/proc/{pid}/task/{tid}/children") as f:
                out += [int(c) for c in f.read().split()]
        except FileNotFoundError:
            if not os.path.exists(f"/proc/{pid}/task/{tid}"):
                continue
            return None
        except OSError:
            continue
    return out


def _scan() -> dict[int, list[int]]:
    children: dict[int, list[int]] = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            st = stat(entry)
            if st is not None:
                children.setdefault(st[0], []).append(int(entry))
    return children


def descendants(*roots: int | None) -> dict[int, int]:
    """{pid: start time} of the roots and every live process below them."""
    out: dict[int, int] = {}
    table: dict[int, list[int]] | None = None
    todo = [r for r in roots if r is not None]
    while todo:
        pid = todo.pop()
        if pid in out:
            continue
        st = stat(pid)
        if st is None:
            continue
        out[pid] = st[2]
        kids = _children(pid) if table is None else None
        if kids is None:  # no children files: one scan of the whole table
            table = table if table is not None else _scan()
            kids = table.get(pid, [])
        todo += kids
    return out


def alive(pid: int, start: int) -> bool:
    st = stat(pid)
    return st is not None and st[2] == start and st[1] not in ("Z", "X")


def threads_stopped(pid: int) -> bool:
    """Every thread of pid stopped (or the process gone)."""
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return True
    for tid in tids:
        st = stat(f"{pid}/task/{tid}")
        if st is not None and st[1] not in ("T", "t", "Z", "X"):
            return False
    return True


def signal_all(pids, sig: int) -> None:
    for pid in pids:
        try:
            os.kill(pid, sig)
        except OSError:
            pass


def signal_until_stable(members: Callable[[], dict[int, int]], sig: int) -> dict[int, int]:
    """Send sig to every member, again and again until no new process appears; {pid: start} sent to."""
    sent: dict[int, int] = {}
    while True:
        new = {p: s for p, s in members().items() if sent.get(p) != s}
        if not new:
            return sent
        signal_all(new, sig)
        sent.update(new)


def kill_all(members: Callable[[], dict[int, int]], known: dict[int, int] | None = None) -> None:
    """SIGKILL every member (and the `known` ones) until no new one appears; returns once none of
    them is alive (a process leaves its cgroup and its parent while it exits: `known` waits for it)."""
    known = dict(known or {})
    signal_all(known, signal.SIGKILL)
    known.update(signal_until_stable(members, signal.SIGKILL))
    wait_until(lambda: not any(alive(p, s) for p, s in known.items()), "killing every process of the sandbox")
