"""Harness runs: each program in a fresh subprocess, refs interleaved ABBA, PR code kept at arm's length.

A child gets: its ref's worktree as working directory and PYTHONPATH, its ref's own Triton cache,
a per-run nonce (argv and DSPARK_HARNESS_NONCE) that every result line must echo, an environment
scrubbed down to an allow-list minus a deny-list, a timeout, and its own process group (killed
afterwards, stragglers included). The parent measures each child's wall-clock time itself.

A crash, a timeout, an `error` line or output outside the contract is a failed `RunRecord`;
the pipeline turns it into an infrastructure-error verdict, never a slow or lossy one.
"""

from __future__ import annotations

import json
import os
import secrets
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Protocol

from evalbot.decide.contract import HarnessReportedError, ScoreLine, parse_output
from evalbot.decide.records import Ref, RunRecord, Step
from evalbot.errors import ContractViolation
from evalbot.measure.environment import child_env
from evalbot.measure.process import STDOUT_LIMIT, ProcessResult, run_process
from evalbot.settings import ProfileSettings, ScoringSettings

# ---------------------------------------------------------------------------------------------
# Schedule


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
# Records


def record_from(step: Step, nonce: str, argv: list[str], result: ProcessResult, timeout: float, tail_lines: int) -> RunRecord:
    rec = RunRecord(
        round=step.round, ref=step.ref, program=step.program, nonce=nonce, argv=argv,
        wall_s=result.wall_s, returncode=result.returncode, timed_out=result.timed_out,
        stderr_tail="\n".join(result.stderr_tail.splitlines()[-tail_lines:]),
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
        settings: ScoringSettings,
        profile: str,
        worktrees: Mapping[Ref, Path],
        scratch: Path,
        environ: Mapping[str, str] | None = None,
    ) -> None:
        self.settings = settings
        self.profile_name = profile
        self.profile: ProfileSettings = settings.profile_settings(profile)
        self.worktrees = dict(worktrees)
        self.scratch = scratch
        self.environ = os.environ if environ is None else environ
        self.python = settings.harness.python or sys.executable
        for ref in self.worktrees:
            cache = scratch / "triton" / ref
            cache.mkdir(parents=True, exist_ok=True)
            if settings.sandbox.user:
                cache.chmod(0o1777)  # the sandbox user compiles into it

    def dump_path(self, ref: Ref) -> Path:
        return self.scratch / f"logprobs-{ref}.json"

    def _run(self, step: Step, cwd_ref: Ref, **values: str) -> RunRecord:
        nonce = secrets.token_hex(16)  # 128 bits per run: canned output cannot carry it
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
