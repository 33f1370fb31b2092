"""Who runs PR code: the argv prefix that drops a harness child to the sandbox user (and, as root, out
of the network), and the sweep that kills whatever that user still runs after a child finished."""

from __future__ import annotations

import contextlib
import os
import pwd
import signal
import time

from evalbot.errors import EvalbotError
from evalbot.settings import Sandbox


def sandbox_prefix(sandbox: Sandbox) -> list[str]:
    """The argv prefix that drops a child to the sandbox user (and, as root, out of the network)."""
    if not sandbox.user:
        if sandbox.no_network:
            raise EvalbotError("sandbox.no_network needs sandbox.user")
        return []
    try:
        pw = pwd.getpwnam(sandbox.user)
    except KeyError:
        raise EvalbotError(f"sandbox user {sandbox.user!r} does not exist") from None
    if os.geteuid() == 0:
        net = ["unshare", "--net", "--"] if sandbox.no_network else []
        return [*net, "setpriv", f"--reuid={pw.pw_uid}", f"--regid={pw.pw_gid}", "--clear-groups", "--"]
    if sandbox.no_network:
        raise EvalbotError("sandbox.no_network needs the bot to run as root (unshare --net)")
    return ["sudo", "-n", "-u", sandbox.user, "--"]


def user_processes(uid: int) -> list[int]:
    """Live (non-zombie) processes of a uid, from /proc."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            if os.stat(f"/proc/{entry}").st_uid != uid:
                continue
            with open(f"/proc/{entry}/stat") as f:
                state = f.read().rsplit(")", 1)[1].split()[0]
        except (OSError, IndexError):
            continue
        if state not in ("Z", "X"):
            pids.append(int(entry))
    return pids


def kill_user_processes(user: str, attempts: int = 20) -> None:
    """Everything the sandbox user still runs after a child finished: nothing may outlive a run."""
    uid = pwd.getpwnam(user).pw_uid
    for _ in range(attempts):
        alive = user_processes(uid)
        if not alive:
            return
        for pid in alive:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        time.sleep(0.05)
