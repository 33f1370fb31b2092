"""`evalbot demo`: score the example PRs under examples/prs/ for real, on a scratch clone.

    clone the repository's committed HEAD as `main` ─▶ per example: branch demo/<NN-slug> = main +
    patch.diff ─▶ LocalForge.open_pull ─▶ pipeline.score_refs (exactly what `evalbot score` does)
    ─▶ pipeline.publish ─▶ the verdict against the expected one

Nothing is faked: the real engine and harness measure every example, on the cpu profile (the gpu
profile when CUDA is available), so a newcomer sees a tier, a REJECT for a lossy shortcut, a REJECT
for an AR slowdown, "not evaluated" for a harness edit and "none" for a no-op, each with the
scorecard, labels, check run and receipt the local forge keeps (`evalbot status --repo <scratch>`).

The examples (evalbot/examples.py says what one is) are read from the repository's working tree; the code they patch is its committed
HEAD. The box's noise floors (`.evalbot/noise-floor.json`, from `evalbot calibrate`) are carried into
the scratch clone, so the demo's gates allow for the same noise as `evalbot score` would; a box with
no floor for the profile and engine version calibrates in the scratch clone first (A/A), unless
`--no-calibrate`.
"""

from __future__ import annotations

import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from rich.console import Console

from evalbot import pipeline
from evalbot.decide.noise import NOISE_FILE, NoiseFloor, load_noise_floor
from evalbot.decide.outcome import ScoreOutcome
from evalbot.errors import EvalbotError
from evalbot.examples import (
    BASE_BRANCH,
    EXAMPLES_DIR,
    Example,
    apply_example,
    is_measured,
    load_examples,
    verdict_matches,
)
from evalbot.forge.base import CHECK_NAME
from evalbot.forge.local import LocalForge
from evalbot.history.adapter import record_scoring
from evalbot.history.store import local_history
from evalbot.measure import gitops
from evalbot.measure.device import profile_for
from evalbot.measure.run import ProgressSink
from evalbot.measure.progress import RichProgress
from evalbot.report.render import printable, render
from evalbot.report.scorecard import noise_text, render_calibration
from evalbot.settings import STATE_DIR_NAME, Settings, load_settings

EXIT_ALL_MATCHED, EXIT_MISMATCH = 0, 1


# ---------------------------------------------------------------------------------------------
# The scratch repository


def clone_head(source: Path, dest: Path) -> str:
    """Clone `source`'s committed HEAD into `dest` as branch main, with no remote (so the harness
    comes from this main, not from the source's branches). Returns the commit."""
    sha = gitops.resolve(source, "HEAD")
    gitops.git(dest.parent, "clone", "--quiet", "--no-checkout", str(source), str(dest))
    gitops.git(dest, "checkout", "--quiet", "-B", BASE_BRANCH, sha)
    gitops.git(dest, "remote", "remove", "origin")
    for ref in gitops.git(dest, "for-each-ref", "--format=%(refname)", "refs/heads/").split():
        if ref != f"refs/heads/{BASE_BRANCH}":
            gitops.git(dest, "update-ref", "-d", ref)
    return sha


def _prepare_dir(work_dir: Path | None) -> tuple[Path, bool]:
    """The directory to clone into, and whether the demo created it as a temporary one."""
    if work_dir is None:
        return Path(tempfile.mkdtemp(prefix="evalbot-demo-")) / "repo", True
    work_dir = work_dir.expanduser().resolve()
    if work_dir.exists() and (not work_dir.is_dir() or any(work_dir.iterdir())):
        raise EvalbotError(f"--work-dir {work_dir} exists and is not an empty directory")
    work_dir.mkdir(parents=True, exist_ok=True)
    return work_dir, False


# ---------------------------------------------------------------------------------------------
# Scoring


@dataclass
class ExampleResult:
    example: Example
    index: int
    total: int
    pr_number: int
    outcome: ScoreOutcome
    published: pipeline.PublishResult
    seconds: float
    matched: bool

    @property
    def got(self) -> str:
        v = self.outcome.verdict
        if v.status == "not_evaluated":
            return "not evaluated"
        if v.status == "infra_error":
            return "infrastructure error"
        if v.status == "rejected" and v.failed_gates:
            return f"{v.tier} ({', '.join(g.gate for g in v.failed_gates)})"
        return v.tier or "—"

    @property
    def label(self) -> str:
        return self.outcome.verdict.labels[0] if self.outcome.verdict.labels else self.got


@dataclass
class DemoReport:
    source: Path
    source_sha: str
    scratch: Path
    profile: str
    noise: NoiseFloor
    results: list[ExampleResult]
    seconds: float = 0.0
    calibration_seconds: float | None = None  # set when the demo measured the box's noise floor itself
    kept: bool = True

    @property
    def ok(self) -> bool:
        return bool(self.results) and all(r.matched for r in self.results)


class NullProgress:
    def begin(self, total: int) -> None:
        pass

    def step(self, label: str) -> None:
        pass

    def advance(self) -> None:
        pass


class _Labelled:
    """A progress sink that names the example in front of each harness step."""

    def __init__(self, sink: ProgressSink, prefix: str) -> None:
        self.sink, self.prefix = sink, prefix

    def begin(self, total: int) -> None:
        self.sink.begin(total)

    def step(self, label: str) -> None:
        self.sink.step(f"{self.prefix} · {label}")

    def advance(self) -> None:
        self.sink.advance()


def _duration(seconds: float) -> str:
    m, s = divmod(int(round(seconds)), 60)
    return f"{m}m{s:02d}s" if m else f"{s}s"


def score_examples(
    repo: Path,
    scratch: Path,
    examples: Sequence[Example],
    *,
    profile: str,
    settings: Settings,
    rounds: int | None = None,
    calibrate: bool = True,
    progress: ProgressSink | None = None,
    say: TextIO | None = None,
    tell: Console | None = None,
) -> DemoReport:
    """Clone, branch, open, score and publish every example; returns what each got."""
    started = time.perf_counter()
    say = say or sys.stdout
    source_sha = clone_head(repo, scratch)
    for ex in examples:  # every patch must apply before an hour of measuring starts
        apply_example(scratch, BASE_BRANCH, ex)
    state_dir = pipeline.state_dir_for(scratch)
    floors = repo / STATE_DIR_NAME / NOISE_FILE
    if floors.is_file():
        shutil.copyfile(floors, state_dir / NOISE_FILE)
    engine = gitops.code_digest(scratch, source_sha)
    stored = load_noise_floor(state_dir, settings.box_name(), profile, engine)
    noise = stored or NoiseFloor.default(settings.box_name(), profile, settings.stats.default_noise_floor, engine)
    # An uncalibrated box would gate with a 1% default floor, which a CPU's run-to-run noise can exceed: a
    # no-op could be REJECTed by chance. So, unless told otherwise, the box measures its own noise first
    # (A/A, main against itself) — only if some example is going to be measured at all.
    calibrating = calibrate and stored is None and any(is_measured(scratch, ex, settings) for ex in examples)
    forge = LocalForge(scratch)
    history = local_history(state_dir, settings.history_db)  # `evalbot dashboard --repo <scratch clone>` shows it
    report = DemoReport(repo, source_sha, scratch, profile, noise, [])
    texts = settings.templates_dir
    say.write(render("demo_start.txt.j2", templates=texts, report=report, examples=examples, noise_row=noise_text(noise),
                     calibrating=calibrating) + "\n")
    say.flush()
    if calibrating:
        t0 = time.perf_counter()
        floor, path = pipeline.calibrate(scratch, BASE_BRANCH, profile=profile, rounds=rounds, settings=settings,
                                         progress=_Labelled(progress or NullProgress(), "A/A calibration"))
        report.noise, report.calibration_seconds = floor, time.perf_counter() - t0
        say.write(render_calibration(floor, path, texts) + "\n")
        say.flush()
    for i, ex in enumerate(examples, 1):
        pull = forge.open_pull(ex.branch, BASE_BRANCH, ex.title, author="evalbot-demo")
        if tell is not None:
            tell.print(render("demo_example.txt.j2", templates=texts, ex=ex, index=i, total=len(examples), pull=pull,
                              profile=profile).rstrip(), markup=False, highlight=False, soft_wrap=True)
        check_id = forge.start_check(pull.head_sha, CHECK_NAME, f"Scoring `{pull.head_sha[:12]}` against `{BASE_BRANCH}`…")
        t0 = time.perf_counter()
        outcome = pipeline.score_refs(
            scratch, BASE_BRANCH, ex.branch, profile=profile, rounds=rounds, settings=settings,
            pr_number=pull.number, progress=_Labelled(progress or NullProgress(), ex.slug), calibrate_first=calibrate,
        )
        published = pipeline.publish(outcome, forge, pull.number, settings, check_id=check_id)
        record_scoring(history, outcome, repo=str(scratch), receipt_ref=published.receipt_ref)  # and its A/A floor
        result = ExampleResult(ex, i, len(examples), pull.number, outcome, published, time.perf_counter() - t0,
                               verdict_matches(ex, outcome, settings))
        report.results.append(result)
        say.write(printable(render("demo_verdict.txt.j2", templates=texts, r=result, ex=ex, verdict=outcome.verdict,
                                   sp=outcome.verdict.speedup, meas=outcome.measurements, profile=profile,
                                   duration=_duration(result.seconds))) + "\n")
        say.flush()
    report.seconds = time.perf_counter() - started
    return report


def run_demo(
    repo: Path,
    *,
    profile: str | None = None,
    work_dir: Path | None = None,
    keep: bool = False,
    only: str | None = None,
    rounds: int | None = None,
    calibrate: bool = True,
    settings: Settings | None = None,
    examples_dir: Path | None = None,
    progress: bool = True,
) -> int:
    """`evalbot demo`: 0 when every example got the verdict its README expects, else 1."""
    repo = gitops.repo_root(Path(repo).resolve())
    settings = settings or load_settings(repo)
    examples = load_examples(examples_dir or repo / EXAMPLES_DIR, only)
    profile = profile_for(settings, profile)
    settings.profile_settings(profile)  # an unknown profile fails now
    pipeline.check_rounds(rounds, settings.thresholds.min_verified_streams, settings.profile_settings(profile).processes)
    for ex in examples:  # a stale patch fails now, before the clone
        apply_example(repo, "HEAD", ex, commit=False)
    scratch, temporary = _prepare_dir(work_dir)
    keep = keep or not temporary
    dirty = bool(gitops.git(repo, "status", "--porcelain", "--untracked-files=no").strip())
    report: DemoReport | None = None
    try:
        with RichProgress(enabled=progress) as bars:
            report = score_examples(repo, scratch, examples, profile=profile, settings=settings, rounds=rounds,
                                    calibrate=calibrate, progress=bars, tell=bars.console)
        report.kept = keep
        sys.stdout.write(printable(render("demo_summary.txt.j2", templates=settings.templates_dir, report=report, dirty=dirty,
                                          duration=_duration(report.seconds),
                                          calibration=_duration(report.calibration_seconds or 0))))
        return EXIT_ALL_MATCHED if report.ok else EXIT_MISMATCH
    finally:
        if not keep:
            shutil.rmtree(scratch.parent if temporary else scratch, ignore_errors=True)


__all__ = ["DemoReport", "ExampleResult", "clone_head", "score_examples", "run_demo"]
