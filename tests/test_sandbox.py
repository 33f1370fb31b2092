"""The sandbox PR code runs in (evalbot.measure.sandbox, proc, freeze): real bwrap, real processes.

Each test starts a sandboxed Python that tries to reach something of the bot's (its environment,
its files, its keys, the other ref's tree, the network, the host's /tmp and disk, the process
table) and asserts it found or changed nothing. They skip only where bubblewrap cannot run at all,
with the reason; CI sets DSPARK_REQUIRE_SANDBOX=1 so that there they fail instead.
"""

from __future__ import annotations

import json
import os
import select
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import pytest

from evalbot.measure import ptable
from evalbot.measure.freeze import available_freezers
from evalbot.measure.proc import SandboxedProcess
from evalbot.measure.sandbox import (
    MODEL_DIR,
    TREE,
    SandboxSpec,
    SandboxUnavailable,
    bwrap_command,
    check_sandbox,
)
from evalbot.settings import SandboxSettings
from evalbot.testing.sandbox_check import sandbox_unavailable

ROOT = os.geteuid() == 0
MARKER = "evalbot-test-secret-3f9c"  # in the bot's environment and files; never inside
FREEZERS = available_freezers()


UNAVAILABLE = sandbox_unavailable()
pytestmark = pytest.mark.skipif(UNAVAILABLE is not None, reason=f"no sandbox here: {UNAVAILABLE}")


class Box:
    """Two ref exports, a model, and the bot's things around them (key, state dir, a repo's .git)."""

    def __init__(self, base: Path) -> None:
        self.base = base
        self.tree = base / "exports" / "pr-1"
        self.other = base / "exports" / "main-1"
        for t in (self.tree, self.other):
            (t / "pkg").mkdir(parents=True)
            (t / "pkg" / "__init__.py").write_text("WHERE = 'tree'\n")
        (self.other / "main-only.txt").write_text(MARKER)
        self.model = base / "models" / "model.gguf"
        self.model.parent.mkdir()
        self.model.write_bytes(b"GGUF model bytes")
        self.key = base / "signing.key"
        self.key.write_text(f"-----BEGIN PRIVATE KEY-----\n{MARKER}\n")
        self.key.chmod(0o600)
        self.state = base / "checkout" / ".evalbot"
        self.state.mkdir(parents=True)
        (self.state / "ledger.sqlite3").write_text(MARKER)
        subprocess.run(["git", "init", "-q", str(base / "checkout")], check=True)
        for p in [base, *base.rglob("*")]:
            if p.is_dir():
                p.chmod(0o755)

    def spec(self, label: str = "pr-1", **kw) -> SandboxSpec:
        return SandboxSpec(label, self.tree, self.model, {"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, **kw)

    def start(self, code: str, *args: str, settings: SandboxSettings | None = None, **kw) -> SandboxedProcess:
        return SandboxedProcess.start(self.spec(), [sys.executable, "-c", textwrap.dedent(code), *args],
                                      settings or SandboxSettings(), **kw)

    def run(self, code: str, *args: str, settings: SandboxSettings | None = None, timeout: float = 120, **kw):
        """(exit status, stdout parsed as JSON when it is, stderr tail) of a sandboxed program."""
        proc = self.start(code, *args, settings=settings, **kw)
        try:
            out = _read_all(proc, timeout)
            rc = proc.wait(timeout)
        finally:
            proc.kill()
        try:
            return rc, json.loads(out), proc.stderr_tail()
        except ValueError:
            return rc, out.decode(errors="replace"), proc.stderr_tail()


def _read_all(proc: SandboxedProcess, timeout: float) -> bytes:
    out, deadline = b"", time.monotonic() + timeout
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout.fileno()], [], [], 1)
        if ready:
            chunk = os.read(proc.stdout.fileno(), 65536)
            if not chunk:
                return out
            out += chunk
    raise AssertionError(f"no EOF within {timeout} s: {out[-500:]!r}")


def _read_line(proc: SandboxedProcess, timeout: float = 60) -> str:
    out, deadline = b"", time.monotonic() + timeout
    while not out.endswith(b"\n"):
        assert time.monotonic() < deadline, f"no line within {timeout} s; stderr: {proc.stderr_tail()}"
        if select.select([proc.stdout.fileno()], [], [], 0.5)[0]:
            chunk = os.read(proc.stdout.fileno(), 1)
            assert chunk, f"EOF; stderr: {proc.stderr_tail()}"
            out += chunk
    return out.decode().strip()


@pytest.fixture
def box(tmp_path, monkeypatch):
    monkeypatch.setenv("EVALBOT_TEST_SECRET", MARKER)  # the bot's environment holds a secret
    return Box(tmp_path)


# ---------------------------------------------------------------------------------------------
# What it sees


def test_it_sees_its_tree_the_model_and_python_and_runs_as_nobody(box):
    rc, found, err = box.run("""
        import json, os, pkg
        print(json.dumps({"uid": os.getuid(), "gid": os.getgid(), "groups": os.getgroups(), "cwd": os.getcwd(),
            "where": pkg.__file__, "model": open("/work/model/model.gguf").read(), "root": sorted(os.listdir("/")),
            "work": sorted(os.listdir("/work")), "etc": sorted(os.listdir("/etc")), "env": dict(os.environ),
            "caps": [l for l in open("/proc/self/status") if l.startswith(("CapEff", "CapBnd", "NoNewPrivs"))],
            "hostname": os.uname().nodename, "home_is_tmp": os.path.expanduser("~")}))
    """)
    assert rc == 0, err
    assert found["cwd"] == str(TREE) and found["where"] == str(TREE / "pkg" / "__init__.py")
    assert found["model"] == "GGUF model bytes"
    if ROOT:
        assert (found["uid"], found["gid"], found["groups"]) == (65534, 65534, [])
    assert set(found["root"]) <= {"bin", "sbin", "lib", "lib32", "lib64", "libx32", "usr", "etc", "proc", "dev", "tmp",
                                  "work", *Path(sys.prefix).parts[1:2], *Path(sys.base_prefix).parts[1:2]}
    assert {"model", "tree"} <= set(found["work"])
    assert set(found["etc"]) <= {"ld.so.cache", "ld.so.conf", "ld.so.conf.d", "localtime", "alternatives", "passwd", "group"}
    env = found["env"]
    assert env["HOME"] == env["TMPDIR"] == "/tmp" and env["PYTHONPATH"] == str(TREE)
    assert env["TRITON_CACHE_DIR"] == "/tmp/triton" and env["PYTHONDONTWRITEBYTECODE"] == "1"
    assert MARKER not in json.dumps(env)
    assert all(line.split()[1] in ("0000000000000000", "1") for line in found["caps"]), found["caps"]
    assert found["hostname"] == "evalbot-sandbox"


def test_the_interpreter_under_root_is_bound_alone(box):
    """The venv of this VM points into /root/.pyenv: exactly the install dir is bound, never /root
    (nor the bot's home, wherever it is)."""
    argv, fds = bwrap_command(box.spec(), [sys.executable, "-c", "pass"], SandboxSettings())
    for fd in fds:
        os.close(fd)
    binds = [argv[i + 1] for i, a in enumerate(argv) if a == "--ro-bind"]
    home = os.path.realpath(os.path.expanduser("~"))
    assert home not in binds and "/" not in binds and "/etc" not in binds
    assert os.path.realpath(sys.base_prefix) in binds
    rc, found, err = box.run("""
        import json, os, pwd, sys
        assert pwd.getpwuid(os.getuid()).pw_dir == "/tmp" and pwd.getpwnam("root").pw_dir == "/root"
        print(json.dumps(os.listdir(sys.argv[1]) if os.path.isdir(sys.argv[1]) else []))
    """, home)
    assert rc == 0, err
    visible = {Path(os.path.relpath(p, home)).parts[0] for p in binds if p.startswith(home + "/")}
    assert set(found) == visible  # the bot's home inside holds only the way down to the interpreter


def test_it_reads_nothing_of_the_bot(box):
    targets = [str(box.key), str(box.state / "ledger.sqlite3"), str(box.base / "checkout" / ".git" / "config"),
               "/etc/shadow", str(box.other / "main-only.txt"), str(Path.home() / ".bash_history"),
               f"/proc/{os.getpid()}/environ", f"/proc/{os.getppid()}/environ", "/root/.ssh/id_rsa"]
    rc, found, err = box.run("""
        import json, os, sys
        leaked, read = [], {}
        for path in sys.argv[1:]:
            try:
                read[path] = open(path, errors="replace").read()
            except OSError as e:
                read[path] = type(e).__name__
        for pid in [p for p in os.listdir("/proc") if p.isdigit()]:
            try:
                read["/proc/%s/environ" % pid] = open("/proc/%s/environ" % pid, errors="replace").read()
            except OSError as e:
                read["/proc/%s/environ" % pid] = type(e).__name__
        procs = {p: open("/proc/%s/cmdline" % p, "rb").read().split(b"\\0")[0].decode() for p in os.listdir("/proc") if p.isdigit()}
        print(json.dumps({"read": read, "procs": procs}))
    """, *targets)
    assert rc == 0, err
    assert MARKER not in json.dumps(found["read"]), found["read"]
    for path in targets[:6] + targets[-1:]:
        assert found["read"][path] in ("FileNotFoundError", "PermissionError"), (path, found["read"][path])
    assert {os.path.basename(c) for c in found["procs"].values()} <= {"bwrap", os.path.basename(sys.executable)}, found["procs"]
    assert len(found["procs"]) <= 3  # its own init, itself (and nothing of the host)


@pytest.mark.skipif(not ROOT, reason="file permissions decide only when the bot is root (as non-root, what is not bound is unreachable)")
def test_a_root_owned_0600_file_it_can_reach_is_unreadable(box):
    """uid 65534 on the host, not root of a user namespace (which would own root's files)."""
    secret = box.tree / "pkg" / "key.pem"
    secret.write_text(MARKER)
    secret.chmod(0o600)
    os.chown(secret, 0, 0)
    rc, found, err = box.run("""
        import json
        try:
            print(json.dumps(open("/work/tree/pkg/key.pem").read()))
        except PermissionError:
            print(json.dumps("denied"))
    """)
    assert (rc, found) == (0, "denied"), err


def test_it_changes_nothing_outside_its_tmp(box):
    name = f"evalbot-sandbox-probe-{os.getpid()}"
    rc, found, err = box.run("""
        import json, os, sys
        name = sys.argv[1]
        out = {}
        for path in ["/work/tree/" + name, "/work/tree/pkg/__init__.py", "/work/" + name, "/" + name, "/etc/" + name,
                     "/usr/" + name, "/dev/" + name, sys.prefix + "/" + name, "/tmp/" + name]:
            try:
                with open(path, "a") as f:
                    f.write("x")
                out[path] = "wrote"
            except OSError as e:
                out[path] = e.strerror
        print(json.dumps(out))
    """, name)
    assert rc == 0, err
    assert found.pop(f"/tmp/{name}") == "wrote"  # its own /tmp
    assert "wrote" not in found.values(), found
    assert not Path("/tmp", name).exists() and not (box.tree / name).exists() and not Path(sys.prefix, name).exists()
    assert (box.tree / "pkg" / "__init__.py").read_text() == "WHERE = 'tree'\n"


def test_tmp_is_private_and_capped(box):
    before = shutil.disk_usage(tempfile.gettempdir()).used
    rc, found, err = box.run("""
        import json, os
        written, error = 0, None
        try:
            with open("/tmp/fill", "wb") as f:
                while True:
                    f.write(b"x" * (1 << 20))
                    f.flush()
                    written += 1
        except OSError as e:
            error = e.errno
        print(json.dumps({"written_mb": written, "errno": error, "tmp": os.listdir("/tmp")}))
    """, settings=SandboxSettings(tmp_size_mb=8))
    assert rc == 0, err
    assert found["errno"] == 28 and found["written_mb"] <= 8  # ENOSPC at the cap
    assert shutil.disk_usage(tempfile.gettempdir()).used - before < 4 << 20  # none of it on the host disk


def test_no_network_not_even_the_hosts_loopback(box):
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    server.setblocking(False)
    port = server.getsockname()[1]
    rc, found, err = box.run("""
        import json, socket, sys
        out = {"interfaces": [name for _, name in socket.if_nameindex()]}
        for host in ("127.0.0.1", "10.0.2.2", "1.1.1.1"):
            try:
                socket.create_connection((host, int(sys.argv[1])), timeout=3).close()
                out[host] = "connected"
            except OSError as e:
                out[host] = type(e).__name__
        print(json.dumps(out))
    """, str(port))
    assert rc == 0, err
    assert found["interfaces"] == ["lo"]
    assert "connected" not in found.values(), found
    with pytest.raises(BlockingIOError):
        server.accept()  # nobody came
    server.close()


# ---------------------------------------------------------------------------------------------
# Nothing survives it; nothing of it runs while it is frozen


def _pid_namespace_members(ns: str) -> list[int]:
    out = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                if os.readlink(f"/proc/{entry}/ns/pid") == ns and ptable.stat(entry)[1] not in ("Z", "X"):
                    out.append(int(entry))
            except (OSError, TypeError):
                continue
    return out


LEAVE_BEHIND = """
    import os, subprocess, sys, time
    subprocess.Popen(["/bin/sh", "-c", "setsid sh -c 'sleep 300 & exec sleep 301' &"])  # a new session
    if os.fork() == 0:  # a double fork
        os.setsid()
        if os.fork() == 0:
            time.sleep(300)
        os._exit(0)
    time.sleep(1)
    print("left", flush=True)
    time.sleep(300)
"""


@pytest.mark.parametrize("freezer", FREEZERS)
def test_kill_leaves_nothing_behind(box, freezer):
    proc = box.start(LEAVE_BEHIND, freezer=freezer)
    assert _read_line(proc) == "left"
    tree = ptable.descendants(proc.pid)
    inner = [p for p in tree if p != proc.pid]
    assert len(tree) >= 6, tree  # bwrap, its init, python, two sleeps, the double-forked one
    namespace = os.readlink(f"/proc/{inner[-1]}/ns/pid")
    assert namespace != os.readlink("/proc/self/ns/pid")
    cgroups = list(proc._freezer.cgroups.dirs)
    proc.kill()
    proc.kill()  # idempotent
    assert not [p for p, s in tree.items() if ptable.alive(p, s)]
    assert _pid_namespace_members(namespace) == []  # the host's process table holds nothing of it
    assert not any(d.exists() for d in cgroups)
    assert proc.poll() is not None


@pytest.mark.parametrize("freezer", FREEZERS)
def test_kill_while_frozen(box, freezer):
    proc = box.start(LEAVE_BEHIND, freezer=freezer)
    assert _read_line(proc) == "left"
    tree = ptable.descendants(proc.pid)
    proc.freeze()
    proc.kill()
    assert not [p for p, s in tree.items() if ptable.alive(p, s)]


BOT = """
import json, sys, time
from pathlib import Path
from evalbot.measure import ptable
from evalbot.measure.proc import SandboxedProcess
from evalbot.measure.sandbox import SandboxSpec
from evalbot.settings import SandboxSettings
tree, model, freezer = sys.argv[1:4]
spec = SandboxSpec("pr-1", Path(tree), Path(model), {"PATH": "/usr/bin:/bin"})
code = "import subprocess, time; subprocess.Popen(['setsid', 'sleep', '300']); time.sleep(1); print('up', flush=True); time.sleep(300)"
proc = SandboxedProcess.start(spec, [sys.executable, "-c", code], SandboxSettings(), freezer=freezer)
proc.stdout.readline()
print(json.dumps({"tree": ptable.descendants(proc.pid), "cgroups": [str(d) for d in proc._freezer.cgroups.dirs]}), flush=True)
time.sleep(300)
"""


@pytest.mark.parametrize("freezer", FREEZERS)
def test_nothing_survives_the_bot_being_killed(box, freezer):
    """SIGKILL to the bot: bwrap dies with it (--die-with-parent), and its PID namespace with bwrap.
    The next sandbox removes the empty cgroups the dead bot left."""
    bot = subprocess.Popen([sys.executable, "-c", BOT, str(box.tree), str(box.model), freezer],
                           stdout=subprocess.PIPE, cwd=Path(__file__).resolve().parents[1])
    try:
        found = json.loads(bot.stdout.readline())
    finally:
        bot.kill()
        bot.wait()
    tree = {int(p): s for p, s in found["tree"].items()}
    assert len(tree) >= 4
    ptable.wait_until(lambda: not any(ptable.alive(p, s) for p, s in tree.items()), "the sandbox dying with the bot")
    box.run("print(1)")  # a new sandbox sweeps the dead bot's cgroups
    assert not any(Path(d).exists() for d in found["cgroups"])


def test_kill_after_it_died_by_itself(box):
    proc = box.start("print('bye')")
    assert _read_all(proc, 60) == b"bye\n"
    assert proc.wait(60) == 0
    cgroups = list(proc._freezer.cgroups.dirs)
    proc.kill()
    proc.kill()
    assert not any(d.exists() for d in cgroups)


def _cpu_ticks(proc: SandboxedProcess) -> int:
    total = 0
    for pid in proc._freezer.members():
        try:
            fields = Path(f"/proc/{pid}/stat").read_bytes().rsplit(b")", 1)[1].split()
            total += int(fields[11]) + int(fields[12])
        except OSError:
            pass
    return total


SPIN = """
    import threading, time
    def spin():
        while True:
            pass
    for _ in range(2):
        threading.Thread(target=spin, daemon=True).start()
    print("spinning", flush=True)
    time.sleep(300)
"""


@pytest.mark.parametrize("freezer", FREEZERS)
def test_freeze_stops_every_thread_and_is_fast(box, freezer, capsys):
    proc = box.start(SPIN, freezer=freezer)
    try:
        assert _read_line(proc) == "spinning"
        assert proc.freezer == freezer
        freezes, thaws = [], []
        for _ in range(20):
            t0 = time.perf_counter()
            proc.freeze()
            t1 = time.perf_counter()
            proc.thaw()
            freezes.append(t1 - t0)
            thaws.append(time.perf_counter() - t1)
        proc.freeze()
        frozen_at = _cpu_ticks(proc)
        time.sleep(0.5)
        frozen_for = _cpu_ticks(proc) - frozen_at
        proc.thaw()
        thawed_at = _cpu_ticks(proc)
        time.sleep(0.5)
        thawed_for = _cpu_ticks(proc) - thawed_at
    finally:
        proc.kill()
    freezes.sort()
    thaws.sort()
    with capsys.disabled():
        print(f"\n[sandbox] {freezer}: freeze median {freezes[10] * 1e3:.2f} ms (max {freezes[-1] * 1e3:.2f}), "
              f"thaw median {thaws[10] * 1e3:.2f} ms (max {thaws[-1] * 1e3:.2f}); CPU ticks in 0.5 s frozen "
              f"{frozen_for}, thawed {thawed_for}")
    assert frozen_for == 0
    assert thawed_for > 10  # two spinning threads run again
    assert freezes[10] < 0.05 and thaws[10] < 0.05


def test_the_pids_cap_holds_a_fork_bomb(box):
    proc = box.start("""
        import os, time
        n = 0
        try:
            while n < 200:
                if os.fork() == 0:
                    time.sleep(60)
                    os._exit(0)
                n += 1
        except OSError as e:
            print("stopped", n, e.errno, flush=True)
        else:
            print("forked", n, flush=True)
        time.sleep(60)
    """, settings=SandboxSettings(pids_max=24))
    try:
        if not proc.limits:
            pytest.skip("no pids controller this bot may use here")
        line = _read_line(proc)
    finally:
        proc.kill()
    assert line.startswith("stopped") and int(line.split()[1]) < 24 and line.split()[2] == "11", line  # EAGAIN


# ---------------------------------------------------------------------------------------------
# The pipes


def test_requests_and_answers_over_the_pipes_and_a_bounded_stderr(box):
    proc = box.start("""
        import sys
        sys.stderr.write("e" * (3 << 20) + "THE END")
        sys.stderr.flush()
        for line in sys.stdin.buffer:
            sys.stdout.buffer.write(b"echo " + line)
            sys.stdout.buffer.flush()
    """)
    try:
        for i in range(3):
            proc.stdin.write(b"request %d\n" % i)
            proc.stdin.flush()
            assert _read_line(proc) == f"echo request {i}"
        deadline = time.monotonic() + 30
        while not proc.stderr_tail(7).endswith("THE END") and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.stderr_tail(12) == "eeeeeTHE END"
        assert len(proc.stderr_tail(10 << 20)) <= 1 << 20  # only the tail is kept
        proc.stdin.close()
        assert proc.wait(30) == 0
    finally:
        proc.kill()


def test_a_crash_message_is_quoted_even_when_its_reader_lags(box, monkeypatch):
    """A server that crashes writes its reason on stderr and exits; the bot notices by its stdout closing
    and quotes the stderr tail at once. On a loaded box the thread reading stderr may not have read the
    reason yet (CI, 2026-12-04: the scorecard's crash quote was empty). With `settle` the tail waits for
    the exit and the reader to reach EOF; here the reader is made to lag on purpose."""
    from evalbot.measure import proc as proc_module

    run = proc_module._Tail._run

    def lagging(self):
        time.sleep(0.5)
        run(self)

    monkeypatch.setattr(proc_module._Tail, "_run", lagging)
    p = box.start("""
        import sys
        sys.stderr.write("CUDA error: an illegal memory access was encountered")
        sys.exit(3)
    """)
    try:
        assert _read_all(p, 60) == b""
        assert p.stderr_tail() == ""  # the race, made certain: the reader has not read it yet
        assert p.stderr_tail(settle=10) == "CUDA error: an illegal memory access was encountered"
    finally:
        p.kill()


# ---------------------------------------------------------------------------------------------
# Without the sandbox, and without bwrap


def test_bwrap_missing_is_one_line_naming_the_package(box, tmp_path, monkeypatch):
    empty = tmp_path / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    with pytest.raises(SandboxUnavailable) as e:
        check_sandbox(SandboxSettings())
    assert str(e.value) == ("bubblewrap (bwrap) is not installed: apt-get install bubblewrap "
                            "(or --no-sandbox for development)")
    with pytest.raises(SandboxUnavailable, match="apt-get install bubblewrap"):
        box.start("print(1)")
    assert check_sandbox(SandboxSettings(enabled=False)) == "OFF (--no-sandbox)"


def test_no_sandbox_runs_plainly_in_the_tree(box):
    proc = box.start("""
        import json, os, pkg
        print(json.dumps({"cwd": os.getcwd(), "uid": os.getuid(), "where": pkg.__file__}))
    """, settings=SandboxSettings(enabled=False))
    try:
        found = json.loads(_read_all(proc, 60))
    finally:
        proc.kill()
    assert proc.description == "OFF (--no-sandbox)"
    assert proc.tree_inside == box.tree and proc.model_inside == box.model
    assert found == {"cwd": str(box.tree), "uid": os.getuid(), "where": str(box.tree / "pkg" / "__init__.py")}


def test_gpu_binds_only_where_asked(box):
    def binds(spec, settings):
        argv, fds = bwrap_command(spec, [sys.executable], settings)
        for fd in fds:
            os.close(fd)
        return " ".join(argv)

    assert "--ro-bind /sys /sys" not in binds(box.spec(), SandboxSettings())
    assert "--ro-bind /sys /sys" in binds(box.spec(gpu=True), SandboxSettings())
    assert "--ro-bind /sys /sys" not in binds(box.spec(gpu=True), SandboxSettings(gpu="off"))
    assert "--ro-bind /sys /sys" in binds(box.spec(), SandboxSettings(gpu="on"))
    assert f"{box.model} {MODEL_DIR / 'model.gguf'}" in binds(box.spec(), SandboxSettings())


@pytest.mark.skipif(not ROOT or not Path("/usr/bin/python3").exists() or not shutil.which("setpriv"),
                    reason="needs root (to become another user) and a system python3")
def test_a_bot_that_is_not_root_gets_a_user_namespace(box, tmp_path):
    """As uid 65534, bwrap maps the bot's own uid; cgroups are not the bot's: SIGSTOP freezes."""
    here = Path(tempfile.mkdtemp(prefix="evalbot-nonroot-"))
    try:
        shutil.copytree(box.tree, here / "tree")
        shutil.copy(box.model, here / "model.gguf")
        for p in [here, *here.rglob("*")]:
            p.chmod(0o755)
        code = textwrap.dedent("""
            import json, os, sys
            from pathlib import Path
            from evalbot.measure.proc import SandboxedProcess
            from evalbot.measure.sandbox import SandboxSpec
            from evalbot.settings import SandboxSettings
            here = Path(sys.argv[1])
            spec = SandboxSpec("pr-1", here / "tree", here / "model.gguf", {"PATH": "/usr/bin:/bin"})
            p = SandboxedProcess.start(spec, ["/usr/bin/python3", "-c", "import os, pkg; print(os.getuid(), os.getcwd())"], SandboxSettings())
            out = p.stdout.read().decode()
            p.wait(); p.freeze(); p.thaw(); p.kill()
            print(json.dumps({"out": out, "freezer": p.freezer, "desc": p.description, "err": p.stderr_tail()}))
        """)
        site = next(p for p in sys.path if p.endswith("site-packages"))
        env = {"PATH": "/usr/bin:/bin", "PYTHONPATH": f"{Path(__file__).resolve().parents[1]}:{site}", "HOME": "/tmp"}
        done = subprocess.run(["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "/usr/bin/python3", "-c",
                               code, str(here)], capture_output=True, text=True, env=env, timeout=120, cwd="/tmp")
        if "cannot start a sandbox here" in done.stderr:
            pytest.skip(f"unprivileged user namespaces are off here: {done.stderr.strip().splitlines()[-1]}")
        assert done.returncode == 0, done.stderr
        found = json.loads(done.stdout)
        assert found["out"].split() == ["65534", str(TREE)], found
        assert found["freezer"] == "SIGSTOP" and "own user (65534)" in found["desc"]
    finally:
        shutil.rmtree(here, ignore_errors=True)


def test_signal_handling_is_its_own(box):
    """Ctrl-C at the terminal (SIGINT to the bot's process group) does not reach the sandbox."""
    proc = box.start("""
        import time
        print("up", flush=True)
        time.sleep(300)
    """)
    try:
        assert _read_line(proc) == "up"
        assert os.getpgid(proc.pid) != os.getpgid(0)
        os.killpg(os.getpgid(proc.pid), signal.SIGCONT)  # its own group: harmless, and not ours
        assert proc.poll() is None
    finally:
        proc.kill()
