"""The example PRs under examples/prs/ that `evalbot demo` scores: reading them, applying each as a
branch, and judging a verdict against the one its README expects.

An example is a directory examples/prs/NN-slug/ with `patch.diff` (`git diff` against main) and a
README.md that starts with a front matter block naming its title and the verdict it should get:

    ---
    title: Accept every draft without checking it
    expect: REJECT            # tier | REJECT | not evaluated | none
    failing: lossless         # REJECT only: gate ids that must be among the failed gates
    expect-gpu: REJECT        # optional: a different expectation on the gpu profile
    ---
"""

from __future__ import annotations

import tempfile
from dataclasses import dataclass
from pathlib import Path

from evalbot.decide.outcome import ScoreOutcome
from evalbot.errors import EvalbotError, GitError
from evalbot.measure import gitops
from evalbot.settings import ScoringSettings

EXAMPLES_DIR = Path("examples") / "prs"
BRANCH_PREFIX = "demo/"
BASE_BRANCH = "main"
EXPECTATIONS = ("tier", "REJECT", "not evaluated", "none")
_IDENTITY = {  # the example commits' author, whatever the box's git config says
    "GIT_AUTHOR_NAME": "DSpark EvalBot demo",
    "GIT_AUTHOR_EMAIL": "evalbot-demo@localhost",
    "GIT_COMMITTER_NAME": "DSpark EvalBot demo",
    "GIT_COMMITTER_EMAIL": "evalbot-demo@localhost",
}


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


def verdict_matches(example: Example, outcome: ScoreOutcome, settings: ScoringSettings) -> bool:
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


def is_measured(repo: Path, example: Example, settings: ScoringSettings) -> bool:
    """Whether scoring the example measures anything (a PR that edits the harness is not measured)."""
    base = gitops.resolve(repo, BASE_BRANCH)
    patterns = gitops.read_manifest(repo, base, settings.harness_manifest, label=BASE_BRANCH)
    return not gitops.harness_changes(repo, base, gitops.resolve(repo, example.branch), patterns)
