"""The sandbox PR code runs in: one bubblewrap (bwrap) sandbox per harness process.

Inside, a process sees its ref's exported tree read-only at TREE (cwd and PYTHONPATH, no .git), the
model read-only under MODEL_DIR, the Python installation read-only at its own paths, /usr and the
few /etc files the loader needs, a private size-capped /tmp that is discarded, a new /proc of its
own PID namespace, a minimal /dev (plus the NVIDIA nodes and a read-only /sys on a GPU box) — and
nothing else: no network (a new, empty network namespace), no IPC, no capabilities, no controlling
terminal. When the bot runs as root the process runs as uid/gid 65534 on the host (not root of a user
namespace, which would still own root's files): bwrap does the mounts as root, then `setpriv` drops
to the sandbox ids before the interpreter starts. As another user, bwrap's user namespace maps the
bot's own uid (the sandbox then relies on what it can see, not on file permissions).

`evalbot.measure.proc.SandboxedProcess` starts processes in it; `check_sandbox` says what it is, or
refuses with one line naming the package to install.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from evalbot.errors import EvalbotError
from evalbot.settings import SandboxSettings

TREE = Path("/work/tree")  # where a process sees its ref's tree (cwd, PYTHONPATH)
MODEL_DIR = Path("/work/model")  # where it sees the model file (read-only)
NOBODY = 65534
MISSING = "bubblewrap (bwrap) is not installed: apt-get install bubblewrap (or --no-sandbox for development)"
HOST_DIRS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")  # links into /usr on merged-/usr systems
ETC_FILES = ("/etc/ld.so.cache", "/etc/ld.so.conf", "/etc/ld.so.conf.d", "/etc/localtime", "/etc/alternatives")
GPU_DIRS = ("/usr/local/nvidia",)  # driver libraries outside /usr/lib on some images
SHM_MAX_MB = 256
BINDS = ("--ro-bind", "--ro-bind-try", "--dev-bind", "--ro-bind-data", "--symlink")
MOUNTED = ("/usr", "/proc", "/dev", "/tmp", "/sys")  # mounted whole: nothing above their contents to make


class SandboxUnavailable(EvalbotError):
    """The sandbox cannot run here: one line naming what to install (or --no-sandbox)."""


@dataclass(frozen=True)
class SandboxSpec:
    label: str  # "main-1", "pr-2": messages and the cgroup name
    tree: Path  # the ref's export on the host (read-only inside, at TREE)
    model: Path  # the model file on the host (read-only inside, at MODEL_DIR / model.name)
    env: Mapping[str, str]  # the environment the bot allows (already scrubbed); see sandbox_env
    gpu: bool = False  # bind the NVIDIA device nodes and driver dirs (and /sys, read-only)


def sandbox_env(env: Mapping[str, str], tree_inside: Path) -> dict[str, str]:
    """The process's whole environment: the scrubbed one plus what the sandbox itself sets."""
    out = dict(env)
    out.setdefault("PATH", "/usr/local/bin:/usr/bin:/bin")
    out.update({
        "HOME": "/tmp", "TMPDIR": "/tmp", "PYTHONPATH": str(tree_inside), "TRITON_CACHE_DIR": "/tmp/triton",
        "TRITON_HOME": "/tmp", "PYTHONDONTWRITEBYTECODE": "1", "PYTHONNOUSERSITE": "1",
    })
    return out


def sandbox_ids(settings: SandboxSettings) -> tuple[int, int]:
    """(uid, gid) inside: the settings, else 65534 for a root bot, else the bot's own."""
    root = os.geteuid() == 0
    uid = settings.uid if settings.uid is not None else (NOBODY if root else os.geteuid())
    gid = settings.gid if settings.gid is not None else (NOBODY if root else os.getegid())
    return uid, gid


def gpu_for(settings: SandboxSettings) -> bool:
    """Whether a sandbox on this box gets the GPU (for SandboxSpec.gpu): on, off, or auto."""
    return settings.gpu == "on" or (settings.gpu == "auto" and os.path.exists("/dev/nvidia0"))


def _size(mb: int) -> str:
    return f"{mb // 1024} GiB" if mb % 1024 == 0 else f"{mb} MiB"


def find_bwrap() -> str:
    path = shutil.which("bwrap")
    if path is None:
        raise SandboxUnavailable(MISSING)
    return path


def _setpriv() -> str:
    path = shutil.which("setpriv", path="/usr/bin:/bin:/usr/sbin:/sbin")
    if path is None:
        raise SandboxUnavailable("setpriv is not installed (the bot runs as root and drops PR code to the "
                                 "sandbox user with it): apt-get install util-linux (or --no-sandbox for development)")
    return path


def check_sandbox(settings: SandboxSettings) -> str:
    """What the sandbox is on this box, e.g. "bubblewrap 0.8.0: own user (65534), PID, network, IPC
    namespaces; read-only tree; 1 GiB private /tmp". Raises SandboxUnavailable when it is enabled
    and bwrap is missing or does not work here (it is tried once per process)."""
    if not settings.enabled:
        return "OFF (--no-sandbox)"
    bwrap = find_bwrap()
    uid, gid = sandbox_ids(settings)
    version = _probe(bwrap, uid, gid, os.geteuid() == 0)
    return (f"{version}: own user ({uid}), PID, network, IPC namespaces; read-only tree; "
            f"{_size(settings.tmp_size_mb)} private /tmp")


@functools.lru_cache(maxsize=8)
def _probe(bwrap: str, uid: int, gid: int, root: bool) -> str:
    try:
        out = subprocess.run([bwrap, "--version"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SandboxUnavailable(f"bubblewrap ({bwrap}) does not run: {e}; {MISSING}") from None
    version = out.stdout.strip() or "bubblewrap"
    true = shutil.which("true", path="/usr/bin:/bin") or "/bin/true"
    argv = [bwrap, "--perms", "0755", "--dir", "/work", *_namespaces(uid, gid, root), *_base_mounts(),
            "--perms", "1777", "--size", str(1 << 20), "--tmpfs", "/tmp", "--remount-ro", "/", "--chdir", "/tmp",
            "--", *_drop(uid, gid, root), true]  # every option a sandbox uses (bwrap >= 0.8 for --disable-userns)
    try:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=30, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as e:
        raise SandboxUnavailable(f"{version} cannot start a sandbox here: {e} (or --no-sandbox for development)") from None
    if done.returncode != 0:
        why = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        raise SandboxUnavailable(f"{version} cannot start a sandbox here ({why}); user namespaces or mount "
                                 "permissions are missing (or --no-sandbox for development)")
    return version


def _namespaces(uid: int, gid: int, root: bool) -> list[str]:
    args = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try",
            "--hostname", "evalbot-sandbox", "--die-with-parent", "--new-session", "--cap-drop", "ALL"]
    if root:  # real root does the mounts; setpriv (below) needs these three to drop to uid/gid
        args += ["--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--cap-add", "CAP_SETPCAP"]
    else:
        args += ["--unshare-user", "--disable-userns", "--uid", str(uid), "--gid", str(gid)]
    return args


def _drop(uid: int, gid: int, root: bool) -> list[str]:
    if not root:
        return []
    return [_setpriv(), f"--reuid={uid}", f"--regid={gid}", "--clear-groups", "--inh-caps=-all",
            "--bounding-set=-all", "--"]


def _base_mounts() -> list[str]:
    args = ["--ro-bind", "/usr", "/usr"]
    for d in HOST_DIRS:
        if os.path.islink(d):
            args += ["--symlink", os.readlink(d), d]
        elif os.path.isdir(d):
            args += ["--ro-bind", d, d]
    return args + ["--proc", "/proc", "--dev", "/dev"]


# ---------------------------------------------------------------------------------------------
# The Python installation: its prefixes and site-packages, at the same paths


def python_paths(interpreter: str) -> list[str]:
    """The directories `interpreter` needs (prefix, base prefix, exec prefixes, site-packages)."""
    if os.path.abspath(interpreter) == os.path.abspath(sys.executable):
        import site

        found = [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *site.getsitepackages()]
    else:
        found = _ask_interpreter(os.path.abspath(interpreter))
    real = os.path.realpath(interpreter)
    found += [os.path.dirname(os.path.abspath(interpreter)), os.path.dirname(real)]
    return _outermost(p for p in found if os.path.isdir(p))


@functools.lru_cache(maxsize=8)
def _ask_interpreter(interpreter: str) -> list[str]:
    code = ("import json, site, sys; print(json.dumps([sys.prefix, sys.base_prefix, sys.exec_prefix, "
            "sys.base_exec_prefix, *site.getsitepackages()]))")
    try:
        out = subprocess.run([interpreter, "-I", "-S", "-c", code], capture_output=True, text=True, timeout=60)
        return list(json.loads(out.stdout))
    except (OSError, ValueError, subprocess.TimeoutExpired):
        raise EvalbotError(f"cannot ask the interpreter {interpreter} where it lives") from None


def _outermost(paths) -> list[str]:
    """Real, absolute, de-duplicated paths, none inside another (nor under /usr, bound anyway)."""
    out: list[str] = ["/usr"]
    for p in sorted({os.path.realpath(p) for p in paths}):
        if not any(p == q or p.startswith(q.rstrip("/") + "/") for q in out):
            out.append(p)
    return out[1:]


def _refuse_wide(path: str) -> None:
    """A bind that would show the bot's home, its working directory (the checkout) or / itself."""
    for near in ("/", os.path.expanduser("~"), os.getcwd()):
        near = os.path.realpath(near)
        if path == near or near.startswith(path.rstrip("/") + "/"):
            raise SandboxUnavailable(f"the sandbox will not bind {path}: it holds {near} "
                                     "(install the interpreter elsewhere, e.g. a venv of its own)")


# ---------------------------------------------------------------------------------------------
# The command


def _data(args: list[str], fds: list[int], content: str, dest: str) -> None:
    """--ro-bind-data from a pipe (the content is small: it fits the pipe's buffer)."""
    r, w = os.pipe()
    os.write(w, content.encode())
    os.close(w)
    fds.append(r)
    args += ["--perms", "0644", "--ro-bind-data", str(r), dest]


def _gpu_mounts() -> list[str]:
    args = []
    for node in sorted(Path("/dev").glob("nvidia*")):
        args += ["--dev-bind", str(node), str(node)]
    for d in GPU_DIRS:
        args += ["--ro-bind-try", d, d]
    return args + ["--ro-bind", "/sys", "/sys"]


def _parents(args: list[str]) -> list[str]:
    """--dir (0755) for every directory above a mount point that bwrap would otherwise make itself,
    owner-only: the sandbox user must be able to walk down to what is bound for it."""
    dests = [args[i + 2] for i, a in enumerate(args) if a in BINDS and i + 2 < len(args)]
    dirs = sorted({str(p) for d in dests for p in Path(d).parents if str(p) not in ("/", *MOUNTED)
                   and not str(p).startswith(tuple(m + "/" for m in MOUNTED))})
    return [x for d in dirs for x in ("--perms", "0755", "--dir", d)]


def _tmp_parents(paths: Sequence[str]) -> list[str]:
    """The same for binds into /tmp (a CI checkout's venv): those directories live in the sandbox's new
    tmpfs, so they are made after it is mounted."""
    dirs = sorted({str(q) for p in paths if p.startswith("/tmp/") for q in Path(p).parents if str(q).startswith("/tmp/")})
    return [x for d in dirs for x in ("--perms", "0755", "--dir", d)]


def bwrap_command(spec: SandboxSpec, argv: Sequence[str], settings: SandboxSettings) -> tuple[list[str], list[int]]:
    """The bwrap argv that runs `argv` in the sandbox, and the pipe fds it reads (pass them, then close)."""
    if not argv:
        raise EvalbotError("nothing to run in the sandbox")
    bwrap = find_bwrap()
    root = os.geteuid() == 0
    uid, gid = sandbox_ids(settings)
    if not spec.tree.is_dir():
        raise EvalbotError(f"sandbox {spec.label}: the tree {spec.tree} is not a directory")
    if not spec.model.exists():
        raise EvalbotError(f"sandbox {spec.label}: the model {spec.model} does not exist")
    args = [bwrap, *_namespaces(uid, gid, root), *_base_mounts()]
    fds: list[int] = []
    try:
        for f in ETC_FILES:
            args += ["--ro-bind-try", f, f]
        _data(args, fds, f"root:x:0:0:root:/root:/usr/sbin/nologin\nsandbox:x:{uid}:{gid}:sandbox:/tmp:/usr/sbin/nologin\n",
              "/etc/passwd")
        _data(args, fds, f"root:x:0:\nsandbox:x:{gid}:\n", "/etc/group")
        shm = min(settings.tmp_size_mb, SHM_MAX_MB)
        args += ["--perms", "1777", "--size", str(shm << 20), "--tmpfs", "/dev/shm"]
        args += ["--perms", "1777", "--size", str(settings.tmp_size_mb << 20), "--tmpfs", "/tmp"]
        pythons = python_paths(argv[0])
        for p in pythons:
            _refuse_wide(p)
        args += _tmp_parents(pythons)
        for p in pythons:
            args += ["--ro-bind", p, p]
        if spec.gpu and settings.gpu != "off" or settings.gpu == "on":
            args += _gpu_mounts()
        for bind in settings.extra_ro_binds:
            src, _, dest = bind.partition(":")
            args += ["--ro-bind", src, dest or src]
        args += ["--ro-bind", str(spec.tree), str(TREE)]
        args += ["--ro-bind", str(spec.model), str(MODEL_DIR / spec.model.name)]
        args += ["--remount-ro", "/", "--chdir", str(TREE), "--", *_drop(uid, gid, root), *argv]
        args[1:1] = _parents(args)
    except BaseException:
        for fd in fds:
            os.close(fd)
        raise
    return args, fds
