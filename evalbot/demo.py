"""`evalbot demo`: score the example PRs under examples/prs/ for real, on a scratch clone.

    clone the repository's committed HEAD as `main` ─▶ per example: branch demo/<NN-slug> = main +
    patch.diff ─▶ LocalForge.open_pull ─▶ pipeline.score_refs (main's engine re-verifies the PR's
    streams, as `evalbot score` does) ─▶ pipeline.publish ─▶ the verdict against the expected one

Nothing is faked: the real engine and harness measure every example, on the cpu profile (the gpu
profile when CUDA is available), so a newcomer sees a tier, a REJECT for a lossy shortcut, a REJECT
for an AR slowdown, "not evaluated" for a harness edit and "none" for a no-op, each with the
scorecard, labels, check run and receipt the local forge keeps (`evalbot status --repo <scratch>`).

An example is a directory examples/prs/NN-slug/ with `patch.diff` (`git diff` against main) and a
README.md that starts with a front matter block naming its title and the verdict it should get:

    ---
    title: Accept every draft without checking it
    expect: REJECT            # tier | REJECT | not evaluated | none
    failing: lossless         # REJECT only: gate ids that must be among the failed gates
    expect-gpu: REJECT        # optional: a different expectation on the gpu profile
    ---

The examples are read from the repository's working tree; the code they patch is its committed
HEAD. The box's noise floor (`.evalbot/noise-floor.json`, from `evalbot calibrate`) is carried into
the scratch clone, so the demo's gates allow for the same noise as `evalbot score` would; a box with
no floor for the profile calibrates in the scratch clone first (A/A), unless `--no-calibrate`.
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

from evalbot import gitops, pipeline
from evalbot.config import STATE_DIR_NAME, Settings, load_settings
from evalbot.errors import EvalbotError, GitError
from evalbot.forge.base import CHECK_NAME
from evalbot.forge.local import LocalForge
from evalbot.noise import NOISE_FILE, NoiseFloor, load_noise_floor
from evalbot.outcome import ScoreOutcome
from evalbot.progress import RichProgress
from evalbot.reverify import Reverifier, ReverifierFactory
from evalbot.runner import NullProgress, ProgressSink
from evalbot.scorecard import noise_text, render, render_calibration

EXAMPLES_DIR = Path("examples") / "prs"
BRANCH_PREFIX = "demo/"
BASE_BRANCH = "main"
EXPECTATIONS = ("tier", "REJECT", "not evaluated", "none")
EXIT_ALL_MATCHED, EXIT_MISMATCH = 0, 1
_IDENTITY = {  # the example commits' author, whatever the box's git config says
    "GIT_AUTHOR_NAME": "DSpark EvalBot demo",
    "GIT_AUTHOR_EMAIL": "evalbot-demo@localhost",
    "GIT_COMMITTER_NAME": "DSpark EvalBot demo",
    "GIT_COMMITTER_EMAIL": "evalbot-demo@localhost",
}


# ---------------------------------------------------------------------------------------------
# Examples


@dataclass(frozen=True)
class Example:
    slug: str  # the directory name, NN-slug
    path: Path
    title: str
    expect: str
    failing: tuple[str, ...] = ()
    expect_gpu: str | None = None

    @property
    def patch(self) -> Path:
        return self.path / "patch.diff"

    @property
    def branch(self) -> str:
        return BRANCH_PREFIX + self.slug

    def expected(self, profile: str) -> str:
        return self.expect_gpu if profile == "gpu" and self.expect_gpu else self.expect

    def expected_text(self, profile: str) -> str:
        exp = self.expected(profile)
        if exp == "REJECT" and self.failing:
            return f"REJECT ({', '.join(self.failing)})"
        return {"tier": "a tier"}.get(exp, exp)


def _front_matter(readme: Path) -> dict[str, str]:
    lines = readme.read_text(encoding="utf-8").splitlines()
    if not lines or lines[0].strip() != "---":
        raise EvalbotError(f"{readme} must start with a front matter block (a line `---`, `key: value` lines, `---`)")
    fields: dict[str, str] = {}
    for line in lines[1:]:
        if line.strip() == "---":
            return fields
        text = line.split(" #", 1)[0].strip()
        if not text:
            continue
        key, sep, value = text.partition(":")
        if not sep:
            raise EvalbotError(f"{readme}: front matter line {line!r} is not `key: value`")
        fields[key.strip().lower()] = value.strip()
    raise EvalbotError(f"{readme}: the front matter block is not closed with `---`")


def load_example(path: Path) -> Example:
    readme, patch = path / "README.md", path / "patch.diff"
    for need in (readme, patch):
        if not need.is_file():
            raise EvalbotError(f"example {path.name}: no {need.name} in {path}")
    fm = _front_matter(readme)
    unknown = sorted(set(fm) - {"title", "expect", "failing", "expect-gpu"})
    if unknown:
        raise EvalbotError(f"example {path.name}: unknown front matter key {unknown[0]!r} in {readme}")
    for key in ("expect", "expect-gpu"):
        if key in fm and fm[key] not in EXPECTATIONS:
            raise EvalbotError(f"example {path.name}: {key} is {fm[key]!r}; one of {', '.join(EXPECTATIONS)}")
    if not fm.get("title") or not fm.get("expect"):
        raise EvalbotError(f"example {path.name}: the front matter of {readme} needs `title:` and `expect:`")
    failing = tuple(g.strip() for g in fm.get("failing", "").split(",") if g.strip())
    return Example(path.name, path, fm["title"], fm["expect"], failing, fm.get("expect-gpu"))


def load_examples(examples_dir: Path, only: str | None = None) -> list[Example]:
    if not examples_dir.is_dir():
        raise EvalbotError(f"no example PRs: {examples_dir} is not a directory")
    dirs = sorted(p for p in examples_dir.iterdir() if p.is_dir() and not p.name.startswith("."))
    if not dirs:
        raise EvalbotError(f"no example PRs in {examples_dir}")
    if only is not None:
        # "02-lossy-shortcut", "lossy-shortcut" and "02" all name the same example
        picked = [p for p in dirs if only in (p.name, p.name.split("-", 1)[-1], p.name.split("-", 1)[0])]
        if not picked:
            raise EvalbotError(f"no example {only!r} (known: {', '.join(p.name for p in dirs)})")
        dirs = picked
    return [load_example(p) for p in dirs]


def verdict_matches(example: Example, outcome: ScoreOutcome, settings: Settings) -> bool:
    v, tiers = outcome.verdict, settings.tiers
    expected = example.expected(outcome.profile)
    if expected == "not evaluated":
        return v.status == "not_evaluated"
    if expected == "none":
        return v.status == "scored" and v.tier == tiers.none_name
    if expected == "tier":
        return v.status == "scored" and v.tier not in (None, tiers.none_name, tiers.reject_name)
    failed = {g.gate for g in v.failed_gates}
    return v.status == "rejected" and all(g in failed or any(f.startswith(g + ":") for f in failed) for g in example.failing)


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


def apply_example(repo: Path, base: str, example: Example, *, commit: bool = True) -> str:
    """Commit `base` + the example's patch as branch demo/<slug> (returns the commit), without touching
    the checkout. With commit=False only check that the patch applies (returns base's commit). A
    patch that no longer applies is an EvalbotError naming the example."""
    if example.patch.stat().st_size == 0:
        raise EvalbotError(f"example {example.slug}: {example.patch} is empty")
    base_sha = gitops.resolve(repo, base)
    with tempfile.TemporaryDirectory(prefix="evalbot-demo-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index"), **_IDENTITY}
        gitops.git(repo, "read-tree", base_sha, extra_env=env)
        check = [] if commit else ["--check"]  # a check writes no objects into the repository
        try:
            gitops.git(repo, "apply", "--cached", *check, "--whitespace=nowarn", str(example.patch.resolve()), extra_env=env)
        except GitError as e:
            detail = str(e).split(": ", 1)[-1]
            raise EvalbotError(
                f"example {example.slug}: {example.patch} no longer applies to {base} ({detail}); "
                f"remake it with `git diff {BASE_BRANCH}` on a branch that has the change"
            ) from None
        if not commit:
            return base_sha
        tree = gitops.git(repo, "write-tree", extra_env=env).strip()
        if tree == gitops.git(repo, "rev-parse", f"{base_sha}^{{tree}}").strip():
            raise EvalbotError(f"example {example.slug}: {example.patch} changes nothing")
        message = f"{example.title}\n\nExample PR examples/prs/{example.slug} (evalbot demo)."
        sha = gitops.git(repo, "commit-tree", tree, "-p", base_sha, "-m", message, extra_env=env).strip()
    gitops.git(repo, "update-ref", f"refs/heads/{example.branch}", sha)
    return sha


def default_profile() -> str:
    """gpu when CUDA is available (as the harness decides), else cpu."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return "cpu"
    return "gpu" if torch.cuda.is_available() else "cpu"


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


class _ClosingFactory:
    """Wraps a reverifier factory so the demo can stop each example's reverifier (a subprocess holding
    main's model) once that example is scored, instead of keeping one per example until exit."""

    def __init__(self, factory: ReverifierFactory) -> None:
        self.factory = factory
        self.made: list[Reverifier] = []

    def __call__(self, worktree: Path, profile: str) -> Reverifier | None:
        made = self.factory(worktree, profile)
        if made is not None:
            self.made.append(made)
        return made

    def close_all(self) -> None:
        while self.made:
            close = getattr(self.made.pop(), "close", None)
            if close is not None:
                close()


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


def _measured(repo: Path, example: Example, settings: Settings) -> bool:
    """Whether scoring the example measures anything (a PR that edits the harness is not measured)."""
    base = gitops.resolve(repo, BASE_BRANCH)
    patterns = gitops.read_manifest(repo, base, settings.harness_manifest, label=BASE_BRANCH)
    return not gitops.harness_changes(repo, base, gitops.resolve(repo, example.branch), patterns)


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
    reverify: bool = True,
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
    noise = load_noise_floor(state_dir, settings.box_name(), profile, settings.stats.default_noise_floor)
    # An uncalibrated box gates with a 1% default floor, which a CPU's run-to-run noise exceeds: a
    # no-op would be REJECTed by chance. So, unless told otherwise, the box measures its own noise
    # first (A/A, main against itself) — only if some example is going to be measured at all.
    calibrating = calibrate and not noise.calibrated and any(_measured(scratch, ex, settings) for ex in examples)
    forge = LocalForge(scratch)
    report = DemoReport(repo, source_sha, scratch, profile, noise, [])
    texts = settings.templates_dir
    say.write(render("demo_start.txt.j2", texts, report=report, examples=examples, noise_row=noise_text(noise),
                     calibrating=calibrating) + "\n")
    say.flush()
    if calibrating:
        t0 = time.perf_counter()
        floor, path = pipeline.calibrate(scratch, BASE_BRANCH, profile=profile, rounds=rounds, settings=settings,
                                         progress=_Labelled(progress or NullProgress(), "A/A calibration"))
        report.noise, report.calibration_seconds = floor, time.perf_counter() - t0
        say.write(render_calibration(floor, path, texts) + "\n")
        say.flush()
    factory = None
    if reverify:
        from evalbot.reverify_engine import engine_reverifier_factory

        factory = _ClosingFactory(engine_reverifier_factory(settings))
    for i, ex in enumerate(examples, 1):
        pull = forge.open_pull(ex.branch, BASE_BRANCH, ex.title, author="evalbot-demo")
        if tell is not None:
            tell.print(render("demo_example.txt.j2", texts, ex=ex, index=i, total=len(examples), pull=pull,
                              profile=profile).rstrip(), markup=False, highlight=False, soft_wrap=True)
        check_id = forge.start_check(pull.head_sha, CHECK_NAME, f"Scoring `{pull.head_sha[:12]}` against `{BASE_BRANCH}`…")
        t0 = time.perf_counter()
        try:
            outcome = pipeline.score_refs(
                scratch, BASE_BRANCH, ex.branch, profile=profile, rounds=rounds, settings=settings,
                pr_number=pull.number, progress=_Labelled(progress or NullProgress(), ex.slug),
                reverifier_factory=factory,
            )
        finally:
            if factory is not None:
                factory.close_all()
        published = pipeline.publish(outcome, forge, pull.number, settings, check_id=check_id)
        result = ExampleResult(ex, i, len(examples), pull.number, outcome, published, time.perf_counter() - t0,
                               verdict_matches(ex, outcome, settings))
        report.results.append(result)
        say.write(render("demo_verdict.txt.j2", texts, r=result, ex=ex, verdict=outcome.verdict,
                         sp=outcome.verdict.speedup, meas=outcome.measurements, profile=profile,
                         duration=_duration(result.seconds)) + "\n")
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
    reverify: bool = True,
) -> int:
    """`evalbot demo`: 0 when every example got the verdict its README expects, else 1."""
    repo = gitops.repo_root(Path(repo).resolve())
    settings = settings or load_settings(repo)
    examples = load_examples(examples_dir or repo / EXAMPLES_DIR, only)
    profile = profile or default_profile()
    settings.profile(profile)  # an unknown profile fails now
    if rounds is not None and rounds < 1:
        raise EvalbotError("--rounds must be at least 1")
    for ex in examples:  # a stale patch fails now, before the clone
        apply_example(repo, "HEAD", ex, commit=False)
    scratch, temporary = _prepare_dir(work_dir)
    keep = keep or not temporary
    dirty = bool(gitops.git(repo, "status", "--porcelain", "--untracked-files=no").strip())
    report: DemoReport | None = None
    try:
        with RichProgress(enabled=progress) as bars:
            report = score_examples(repo, scratch, examples, profile=profile, settings=settings, rounds=rounds,
                                    calibrate=calibrate, progress=bars, reverify=reverify, tell=bars.console)
        report.kept = keep
        sys.stdout.write(render("demo_summary.txt.j2", settings.templates_dir, report=report, dirty=dirty,
                                duration=_duration(report.seconds),
                                calibration=_duration(report.calibration_seconds or 0)))
        return EXIT_ALL_MATCHED if report.ok else EXIT_MISMATCH
    finally:
        if not keep:
            shutil.rmtree(scratch.parent if temporary else scratch, ignore_errors=True)


__all__ = ["Example", "DemoReport", "ExampleResult", "load_examples", "apply_example", "clone_head",
           "verdict_matches", "score_examples", "run_demo"]
