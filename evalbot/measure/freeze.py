"""Freezing, limiting and killing one sandbox's processes, and nothing else.

Three ways, best first:
- "cgroup v2": a cgroup of its own under the bot's (delegated) cgroup; `cgroup.freeze` and the
  "frozen 1" line of `cgroup.events`; `cgroup.kill`; pids.max / memory.max where those controllers
  are delegated.
- "cgroup v1": a cgroup of its own in the freezer hierarchy; `freezer.state` FROZEN / THAWED.
- "SIGSTOP": SIGSTOP / SIGCONT to every descendant of the sandbox's first process, repeated until no
  new one appears. In a sandbox that is every process of it (its PID namespace's orphans are
  reparented to its own init); with --no-sandbox a double fork escapes this one.

A process is moved into its cgroups before it runs anything (the caller starts it stopped, see
`evalbot.measure.proc`). pids.max comes from the v2 or the v1 pids hierarchy, whichever has it.
"""

from __future__ import annotations

import errno
import os
import re
import secrets
import signal
import time
from pathlib import Path

from evalbot.errors import EvalbotError
from evalbot.measure.ptable import descendants, kill_all, signal_all, signal_until_stable, threads_stopped, wait_until
from evalbot.settings import SandboxSettings

FREEZERS = ("cgroup v2", "cgroup v1", "SIGSTOP")
LEAF = "evalbot-bot"  # where the bot moves itself when its cgroup must delegate controllers (v2 rule)


class FreezerUnavailable(EvalbotError):
    pass


# ---------------------------------------------------------------------------------------------
# The hierarchies of this box


def _mounts() -> list[tuple[str, str, str, set[str]]]:
    """(fstype, mount point, mount root, super options) of every cgroup file system."""
    out = []
    with open("/proc/self/mountinfo") as f:
        for line in f:
            left, _, right = line.partition(" - ")
            parts, rparts = left.split(), right.split()
            if rparts and rparts[0] in ("cgroup", "cgroup2"):
                opts = set(rparts[2].split(",")) if len(rparts) > 2 else set()
                out.append((rparts[0], parts[4].replace("\\040", " "), parts[3], opts))
    return out


def _own_dir(kind: str, controller: str = "") -> Path | None:
    """This process's cgroup directory in the v2 hierarchy, or in the v1 one of `controller`."""
    with open("/proc/self/cgroup") as f:
        lines = [line.rstrip("\n").split(":", 2) for line in f]
    for fstype, point, root, opts in _mounts():
        if (kind == "v2") != (fstype == "cgroup2") or (kind == "v1" and controller not in opts):
            continue
        for _, ctrls, path in lines:
            if (kind == "v2" and ctrls == "") or (kind == "v1" and controller in ctrls.split(",")):
                rel = path[len(root):] if root != "/" and path.startswith(root) else path
                own = Path(point + rel.rstrip("/")) if rel != "/" else Path(point)
                if own.is_dir():
                    return own.parent if own.name == LEAF else own
    return None


def _name(label: str) -> str:
    return f"evalbot-{re.sub(r'[^A-Za-z0-9_.-]', '_', label)[:40]}-{os.getpid()}-{secrets.token_hex(3)}"


_STALE = re.compile(r"^evalbot-.*-(\d+)-[0-9a-f]{6}$")


def _sweep(parent: Path) -> None:
    """Remove the empty cgroups a bot that was killed left behind (its pid no longer runs)."""
    for entry in parent.iterdir():
        found = _STALE.match(entry.name)
        if found and entry.is_dir() and not os.path.exists(f"/proc/{found.group(1)}"):
            try:
                entry.rmdir()
            except OSError:
                pass  # not empty: something still runs in it, leave it be


def _v2_delegate(parent: Path, controller: str) -> bool:
    """Make `controller` available to parent's children (moving the bot into a leaf if it must)."""
    if controller in (parent / "cgroup.subtree_control").read_text().split():
        return True
    if controller not in (parent / "cgroup.controllers").read_text().split():
        return False
    for attempt in (1, 2):
        try:
            (parent / "cgroup.subtree_control").write_text(f"+{controller}")
            return True
        except OSError as e:
            if e.errno != errno.EBUSY or attempt == 2:
                return False
            leaf = parent / LEAF  # "no internal processes": the bot's processes go one level down
            leaf.mkdir(exist_ok=True)
            for pid in (parent / "cgroup.procs").read_text().split():
                try:
                    (leaf / "cgroup.procs").write_text(pid)
                except OSError:
                    pass
    return False


class Cgroups:
    """The cgroup directories of one sandbox (the freezer's, and those its limits live in)."""

    def __init__(self) -> None:
        self.dirs: list[Path] = []
        self.limits: list[str] = []

    def make(self, parent: Path, name: str) -> Path:
        path = parent / name
        path.mkdir()
        self.dirs.append(path)
        return path

    def attach(self, pid: int) -> None:
        for d in self.dirs:
            (d / "cgroup.procs").write_text(str(pid))

    def remove(self) -> None:
        for d in reversed(self.dirs):
            deadline = time.monotonic() + 10.0
            while d.exists():
                try:
                    d.rmdir()
                except OSError as e:
                    if e.errno != errno.EBUSY or time.monotonic() > deadline:
                        raise EvalbotError(f"sandbox: cannot remove cgroup {d}: {e.strerror}") from None
                    time.sleep(0.005)
        self.dirs.clear()

    def add_limits(self, name: str, settings: SandboxSettings, v2: Path | None) -> None:
        wants = {"pids": ("pids.max", str(settings.pids_max))}
        if settings.memory_max_mb:
            wants["memory"] = ("memory.max", str(settings.memory_max_mb << 20))
        for controller, (knob, value) in wants.items():
            if v2 is not None and _v2_delegate(v2.parent, controller) and (v2 / knob).exists():
                (v2 / knob).write_text(value)
                self.limits.append(f"{knob} {value} (v2)")
                continue
            parent = _own_dir("v1", controller) if controller == "pids" else None
            if parent is not None:
                try:
                    d = self.make(parent, name)
                    (d / knob).write_text(value)
                    self.limits.append(f"{knob} {value} (v1)")
                except OSError:
                    pass


class Freezer:
    """SIGSTOP / SIGCONT: the fallback, and the base of the other two. The sandbox's members are the
    first process's descendants and whatever its cgroups (a pids one, say) hold."""

    kind = "SIGSTOP"

    def __init__(self, cgroups: Cgroups | None = None) -> None:
        self.cgroups = cgroups or Cgroups()
        self.root: int | None = None

    def attach(self, pid: int) -> None:
        self.root = pid
        self.cgroups.attach(pid)

    def members(self) -> dict[int, int]:
        roots = [self.root]
        for d in self.cgroups.dirs:
            try:
                roots += [int(p) for p in (d / "cgroup.procs").read_text().split()]
            except OSError:
                continue
        return descendants(*roots)

    def freeze(self) -> None:
        stopped = signal_until_stable(self.members, signal.SIGSTOP)
        wait_until(lambda: all(threads_stopped(p) for p in stopped), "stopping the sandbox")

    def thaw(self) -> None:
        signal_all(self.members(), signal.SIGCONT)

    def _kill_cgroup(self) -> None:
        pass

    def kill(self) -> None:
        """Kill every member; return once none is alive (and its cgroups are empty)."""
        before = self.members()
        self._kill_cgroup()
        kill_all(self.members, before)

    def remove(self) -> None:
        self.cgroups.remove()


class CgroupV2Freezer(Freezer):
    kind = "cgroup v2"

    def __init__(self, cgroups: Cgroups, path: Path) -> None:
        super().__init__(cgroups)
        self.path = path

    def _events(self) -> dict[str, str]:
        return dict(line.split() for line in (self.path / "cgroup.events").read_text().splitlines())

    def freeze(self) -> None:
        (self.path / "cgroup.freeze").write_text("1")
        wait_until(lambda: self._events().get("frozen") == "1", "freezing the sandbox's cgroup")

    def thaw(self) -> None:
        (self.path / "cgroup.freeze").write_text("0")
        wait_until(lambda: self._events().get("frozen") == "0", "thawing the sandbox's cgroup")

    def _kill_cgroup(self) -> None:
        if (self.path / "cgroup.kill").exists():  # every process, frozen or not, at once (Linux 5.14+)
            (self.path / "cgroup.kill").write_text("1")

    def kill(self) -> None:
        super().kill()
        wait_until(lambda: self._events().get("populated") == "0", "emptying the sandbox's cgroup")


class CgroupV1Freezer(Freezer):
    kind = "cgroup v1"

    def __init__(self, cgroups: Cgroups, path: Path) -> None:
        super().__init__(cgroups)
        self.path = path

    def _state(self, want: str) -> bool:
        state = (self.path / "freezer.state").read_text().strip()
        if state != want and want == "FROZEN":
            (self.path / "freezer.state").write_text("FROZEN")  # FREEZING: ask again (cgroup-v1 freezer doc)
        return state == want

    def freeze(self) -> None:
        (self.path / "freezer.state").write_text("FROZEN")
        wait_until(lambda: self._state("FROZEN"), "freezing the sandbox's cgroup")

    def thaw(self) -> None:
        (self.path / "freezer.state").write_text("THAWED")
        wait_until(lambda: self._state("THAWED"), "thawing the sandbox's cgroup")

    def _kill_cgroup(self) -> None:
        (self.path / "freezer.state").write_text("FROZEN")  # nothing forks while it is being killed
        signal_all(self.members(), signal.SIGKILL)
        (self.path / "freezer.state").write_text("THAWED")

    def kill(self) -> None:
        super().kill()
        wait_until(lambda: not (self.path / "cgroup.procs").read_text().split(), "emptying the sandbox's cgroup")


def _try(kind: str, cgroups: Cgroups, name: str) -> Freezer | None:
    try:
        if kind == "cgroup v2":
            parent = _own_dir("v2")
            if parent is not None:
                path = cgroups.make(parent, name)
                if (path / "cgroup.freeze").exists():
                    return CgroupV2Freezer(cgroups, path)
        elif kind == "cgroup v1":
            parent = _own_dir("v1", "freezer")
            if parent is not None:
                path = cgroups.make(parent, name)
                if (path / "freezer.state").exists():
                    return CgroupV1Freezer(cgroups, path)
        else:
            return Freezer(cgroups)
    except OSError:
        pass
    cgroups.remove()
    return None


def make_freezer(label: str, settings: SandboxSettings, prefer: str | None = None) -> Freezer:
    """A freezer for one new sandbox (its cgroups made, limits set); `prefer` forces one kind."""
    if prefer is not None and prefer not in FREEZERS:
        raise EvalbotError(f"unknown freezer {prefer!r} (known: {', '.join(FREEZERS)})")
    name = _name(label)
    for parent in {_own_dir("v2"), _own_dir("v1", "freezer"), _own_dir("v1", "pids")} - {None}:
        try:
            _sweep(parent)
        except OSError:
            pass
    for kind in [prefer] if prefer else FREEZERS:
        cgroups = Cgroups()
        freezer = _try(kind, cgroups, name)
        if freezer is not None:
            try:
                cgroups.add_limits(name, settings, freezer.path if kind == "cgroup v2" else None)
            except OSError:
                pass
            return freezer
    raise FreezerUnavailable(f"sandbox {label}: no {prefer} here")


def available_freezers() -> list[str]:
    """The kinds this box offers (tests run each)."""
    out = []
    for kind in FREEZERS:
        cgroups = Cgroups()
        if _try(kind, cgroups, _name("probe")) is not None:
            out.append(kind)
        cgroups.remove()
    return out
