"""Harness runs: each program in a fresh subprocess, refs interleaved ABBA, PR code kept at arm's length.

A child gets: its ref's worktree as working directory and PYTHONPATH, its ref's own Triton cache,
a per-run nonce (argv and DSPARK_HARNESS_NONCE) that every result line must echo, an environment
scrubbed down to an allow-list minus a deny-list, a timeout, and its own process group (killed
afterwards, stragglers included). The parent measures each child's wall-clock time itself.

A crash, a timeout, an `error` line or output outside the contract is a failed `RunRecord`;
the pipeline turns it into an infrastructure-error verdict, never a slow or lossy one.
"""

from __future__ import annotations

import contextlib
import fnmatch
import json
import os
import pwd
import secrets
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Literal, Protocol

from pydantic import BaseModel, Field

from evalbot.config import EnvPolicy, ProfileSettings, Sandbox, Settings
from evalbot.errors import ContractViolation, EvalbotError
from evalbot.results import CompareLine, GuardLine, HarnessReportedError, ScoreLine, TauCheckLine, parse_output

Ref = Literal["base", "head"]
Program = Literal["tau_check", "score", "compare", "guard"]
NONCE_ENV = "DSPARK_HARNESS_NONCE"
STDOUT_LIMIT = 64 * 1024 * 1024
STDERR_TAIL_BYTES = 64 * 1024

AnyLine = Annotated[TauCheckLine | ScoreLine | CompareLine | GuardLine, Field(discriminator="kind")]


# ---------------------------------------------------------------------------------------------
# Environment


def _matches(name: str, patterns: Sequence[str]) -> bool:
    upper = name.upper()
    return any(fnmatch.fnmatchcase(upper, p.upper()) for p in patterns)


def scrub_env(environ: Mapping[str, str], policy: EnvPolicy) -> dict[str, str]:
    """Allow-listed names that match no deny pattern. Deny wins."""
    return {k: v for k, v in environ.items() if _matches(k, policy.allow) and not _matches(k, policy.deny)}


def child_env(
    environ: Mapping[str, str], policy: EnvPolicy, worktree: Path, triton_cache: Path, nonce: str
) -> dict[str, str]:
    env = scrub_env(environ, policy)
    env.update(
        {
            "PYTHONPATH": str(worktree),
            "TRITON_CACHE_DIR": str(triton_cache),
            NONCE_ENV: nonce,
            "PYTHONHASHSEED": "0",
            "PYTHONUNBUFFERED": "1",
            "PYTHONNOUSERSITE": "1",
        }
    )
    env.setdefault("PATH", os.defpath)
    return env


# ---------------------------------------------------------------------------------------------
# Schedule


@dataclass(frozen=True)
class Step:
    round: int
    ref: Ref
    program: Program

    @property
    def label(self) -> str:
        who = "main" if self.ref == "base" else "PR"
        return f"round {self.round + 1}: {self.program} ({who})"


def abba_order(rounds: int) -> list[tuple[Ref, Ref]]:
    """AB, BA, AB, ... so neither ref always runs first (drift and warm-up cancel in pairs)."""
    return [("base", "head") if r % 2 == 0 else ("head", "base") for r in range(rounds)]


def build_schedule(rounds: int) -> list[Step]:
    """Every step in order. `score` (the log-prob dump, not timed) runs once per ref, in round 1."""
    steps: list[Step] = []
    for r, order in enumerate(abba_order(rounds)):
        for ref in order:
            if r == 0:
                steps.append(Step(r, ref, "score"))
            steps.append(Step(r, ref, "tau_check"))
            steps.append(Step(r, ref, "guard"))
    return steps


# ---------------------------------------------------------------------------------------------
# One subprocess


@dataclass
class ProcessResult:
    returncode: int | None
    stdout: str
    stderr_tail: str
    wall_s: float
    timed_out: bool
    stdout_too_big: bool = False


def _kill_group(pgid: int) -> None:
    try:
        os.killpg(pgid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def _read_tail(path: Path, limit: int) -> str:
    with open(path, "rb") as f:
        f.seek(0, os.SEEK_END)
        size = f.tell()
        f.seek(max(0, size - limit))
        return f.read().decode("utf-8", "replace")


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


def run_process(argv: Sequence[str], cwd: Path, env: Mapping[str, str], timeout: float, scratch: Path,
                sandbox: Sandbox | None = None) -> ProcessResult:
    """Run argv in its own session; outputs go to files (no pipe deadlock, bounded memory)."""
    if sandbox is not None and sandbox.user:
        argv = [*sandbox_prefix(sandbox), *argv]
        env = {**env, "PYTHONDONTWRITEBYTECODE": "1"}  # the worktree is not the sandbox user's to write
    out_path = scratch / f"stdout-{secrets.token_hex(4)}"
    err_path = scratch / f"stderr-{secrets.token_hex(4)}"
    with open(out_path, "wb") as out, open(err_path, "wb") as err:
        start = time.perf_counter()
        proc = subprocess.Popen(
            list(argv), cwd=cwd, env=dict(env), stdin=subprocess.DEVNULL, stdout=out, stderr=err,
            start_new_session=True,
        )
        timed_out = False
        try:
            proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            timed_out = True
            _kill_group(proc.pid)
            proc.wait()
        except BaseException:  # interrupted (Ctrl-C, SIGTERM via the CLI): take the child down with us
            _kill_group(proc.pid)
            proc.wait()
            if sandbox is not None and sandbox.user:
                kill_user_processes(sandbox.user)
            raise
        wall = time.perf_counter() - start
        _kill_group(proc.pid)  # stragglers must not run into the next measurement
        if sandbox is not None and sandbox.user:
            kill_user_processes(sandbox.user)
    too_big = out_path.stat().st_size > STDOUT_LIMIT
    stdout = "" if too_big else out_path.read_bytes().decode("utf-8", "replace")
    stderr_tail = _read_tail(err_path, STDERR_TAIL_BYTES)
    out_path.unlink(missing_ok=True)
    err_path.unlink(missing_ok=True)
    return ProcessResult(
        returncode=None if timed_out else proc.returncode,
        stdout=stdout,
        stderr_tail=stderr_tail,
        wall_s=wall,
        timed_out=timed_out,
        stdout_too_big=too_big,
    )


# ---------------------------------------------------------------------------------------------
# Records


class RunRecord(BaseModel):
    """What one harness subprocess gave: parsed lines and the parent's own measurements."""

    round: int
    ref: Ref
    program: Program
    nonce: str
    argv: list[str]
    wall_s: float
    returncode: int | None
    timed_out: bool = False
    failure: str | None = None  # None = the run is usable
    stderr_tail: str = ""
    lines: list[AnyLine] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def label(self) -> str:
        return Step(self.round, self.ref, self.program).label

    def tau_lines(self) -> list[TauCheckLine]:
        return [x for x in self.lines if isinstance(x, TauCheckLine)]

    def guard_lines(self) -> list[GuardLine]:
        return [x for x in self.lines if isinstance(x, GuardLine)]


def _tail_lines(text: str, n: int) -> str:
    return "\n".join(text.splitlines()[-n:])


def record_from(step: Step, nonce: str, argv: list[str], result: ProcessResult, timeout: float, tail_lines: int) -> RunRecord:
    rec = RunRecord(
        round=step.round, ref=step.ref, program=step.program, nonce=nonce, argv=argv,
        wall_s=result.wall_s, returncode=result.returncode, timed_out=result.timed_out,
        stderr_tail=_tail_lines(result.stderr_tail, tail_lines),
    )
    if result.timed_out:
        rec.failure = f"timed out after {timeout:.0f} s"
        return rec
    if result.stdout_too_big:
        rec.failure = f"printed more than {STDOUT_LIMIT // (1024 * 1024)} MiB on stdout"
        return rec
    try:
        lines = parse_output(result.stdout, step.program, nonce)
    except HarnessReportedError as e:
        rec.failure = str(e)
        return rec
    except ContractViolation as e:
        if result.returncode != 0:
            rec.failure = f"exited with status {result.returncode}"
        else:
            rec.failure = f"output outside the contract: {e}"
        return rec
    if result.returncode != 0:
        rec.failure = f"exited with status {result.returncode} after printing results"
        return rec
    rec.lines = lines  # type: ignore[assignment]
    return rec


# ---------------------------------------------------------------------------------------------
# The runner


class ProgressSink(Protocol):
    def begin(self, total: int) -> None: ...

    def step(self, label: str) -> None: ...

    def advance(self) -> None: ...


class NullProgress:
    def begin(self, total: int) -> None:
        pass

    def step(self, label: str) -> None:
        pass

    def advance(self) -> None:
        pass


class HarnessRunner:
    """Runs harness programs in the refs' worktrees. `worktrees` maps "base"/"head" to a path."""

    def __init__(
        self,
        settings: Settings,
        profile: str,
        worktrees: Mapping[Ref, Path],
        scratch: Path,
        environ: Mapping[str, str] | None = None,
        nonce_factory: Callable[[], str] = lambda: secrets.token_hex(16),
    ) -> None:
        self.settings = settings
        self.profile_name = profile
        self.profile: ProfileSettings = settings.profile(profile)
        self.worktrees = dict(worktrees)
        self.scratch = scratch
        self.environ = os.environ if environ is None else environ
        self.nonce_factory = nonce_factory
        self.python = settings.harness.python or sys.executable
        for ref in self.worktrees:
            cache = scratch / "triton" / ref
            cache.mkdir(parents=True, exist_ok=True)
            if settings.sandbox.user:
                cache.chmod(0o1777)  # the sandbox user compiles into it

    def dump_path(self, ref: Ref) -> Path:
        return self.scratch / f"logprobs-{ref}.json"

    def _run(self, step: Step, cwd_ref: Ref, **values: str) -> RunRecord:
        nonce = self.nonce_factory()
        argv = self.settings.harness.argv(
            step.program, self.python, profile=self.profile_name, nonce=nonce, reps=str(self.profile.reps), **values
        )
        env = child_env(self.environ, self.settings.env, self.worktrees[cwd_ref], self.scratch / "triton" / cwd_ref, nonce)
        timeout = getattr(self.profile.timeouts, step.program)
        result = run_process(argv, self.worktrees[cwd_ref], env, timeout, self.scratch, self.settings.sandbox)
        return record_from(step, nonce, argv, result, timeout, self.settings.stderr_tail_lines)

    def run_step(self, step: Step) -> RunRecord:
        values = {"out": str(self.dump_path(step.ref))} if step.program == "score" else {}
        rec = self._run(step, step.ref, **values)
        if rec.ok and step.program == "score":
            line = rec.lines[0]
            if not isinstance(line, ScoreLine) or Path(line.file) != self.dump_path(step.ref):
                rec.failure = "score: reported a file other than the --out it was given"
            elif not self.dump_path(step.ref).is_file():
                rec.failure = "score: the log-prob dump was not written"
        return rec

    def run_compare(self) -> RunRecord:
        """`compare MAIN PR`, run from main's worktree only: trusted code reads both dumps."""
        step = Step(0, "base", "compare")
        return self._run(step, "base", main_file=str(self.dump_path("base")), pr_file=str(self.dump_path("head")))

    def check_imports(self, ref: Ref) -> str | None:
        """Where would the child import the measured packages from? They must resolve inside the
        ref's worktree, never from the bot's own installation (an editable install, a stray path)."""
        names = list(self.settings.import_roots)
        code = (
            "import importlib.util, json, sys\n"
            "out = {}\n"
            "for name in sys.argv[1:]:\n"
            "    spec = importlib.util.find_spec(name)\n"
            "    out[name] = None if spec is None else (spec.origin or list(spec.submodule_search_locations or [''])[0])\n"
            "print(json.dumps(out))\n"
        )
        env = child_env(self.environ, self.settings.env, self.worktrees[ref], self.scratch / "triton" / ref, "preflight")
        result = run_process([self.python, "-c", code, *names], self.worktrees[ref], env, 60, self.scratch, self.settings.sandbox)
        try:
            found = json.loads(result.stdout)
        except ValueError:
            return f"could not inspect imports in the {ref} worktree (exit {result.returncode})"
        root = self.worktrees[ref].resolve()
        for name, origin in found.items():
            if origin is not None and root not in Path(origin).resolve().parents:
                return f"`{name}` imports from {origin}, outside the {ref} worktree"
        if found.get("harness") is None:
            return f"the {ref} worktree has no importable `harness` package"
        return None

    def run_all(self, rounds: int, progress: ProgressSink | None = None) -> list[RunRecord]:
        """The whole ABBA schedule then the comparison; stops at the first failed run."""
        progress = progress or NullProgress()
        steps = build_schedule(rounds)
        progress.begin(len(steps) + 1)
        records: list[RunRecord] = []
        for step in steps:
            progress.step(step.label)
            rec = self.run_step(step)
            records.append(rec)
            progress.advance()
            if not rec.ok:
                return records
        progress.step("compare (main's harness reads both dumps)")
        records.append(self.run_compare())
        progress.advance()
        return records
