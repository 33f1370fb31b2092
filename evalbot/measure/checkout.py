"""Checkout and exports: the job's commits in the box's clone, both refs side by side as exports, and
one ruler in both (every HARNESS_PATHS entry from the base branch tip, checked byte for byte).

`fetch_job_refs` runs in the worker (which holds no PR code): main from its branch, the PR from
refs/pull/N/head. `pin_harness` names the ruler; `exported_trees` makes the two trees the sandboxes see.
"""

from __future__ import annotations

import re
import subprocess
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from evalbot.errors import EvalbotError
from evalbot.measure import gitops
from evalbot.measure.export import MAX_EXPORT_BYTES, MAX_EXPORT_FILE_BYTES, export_tree, remove_export
from evalbot.settings import ScoringSettings

_SHA = re.compile(r"^[0-9a-f]{40}$")


class CheckoutError(RuntimeError):
    pass


def _git(checkout: Path, *args: str, timeout: float = 600) -> subprocess.CompletedProcess:
    return subprocess.run(["git", "-C", str(checkout), *args], capture_output=True, text=True, timeout=timeout,
                          env={"GIT_TERMINAL_PROMPT": "0", "PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": str(Path.home())})


def fetch_job_refs(checkout: Path, remote: str, main_branch: str, pr_number: int, head_sha: str, base_sha: str) -> None:
    for sha in (head_sha, base_sha):
        if not _SHA.match(sha):
            raise CheckoutError(f"not a commit SHA: {sha!r}")
    refspecs = [f"+refs/heads/{main_branch}:refs/remotes/{remote}/{main_branch}", f"+refs/pull/{pr_number}/head:refs/remotes/{remote}/pr/{pr_number}"]
    done = _git(checkout, "fetch", "--no-tags", "--quiet", remote, *refspecs)
    if done.returncode != 0:
        raise CheckoutError(f"git fetch from {remote} failed: {done.stderr.strip()[-500:]}")
    for sha, what in ((base_sha, f"main commit {base_sha[:12]}"), (head_sha, f"head {head_sha[:12]} of #{pr_number}")):
        if _git(checkout, "cat-file", "-e", f"{sha}^{{commit}}").returncode != 0:
            raise CheckoutError(f"{what} is not in {remote} any more (force-pushed?)")


@dataclass(frozen=True)
class PinnedHarness:
    """Both refs resolved, and the one ruler for them: the harness files at `harness_sha`."""

    repo: Path
    base_sha: str
    head_sha: str
    harness_ref: str
    harness_sha: str
    patterns: list[str]
    harness_digest: str


def pin_harness(repo: Path, base: str, head: str, settings: ScoringSettings, harness_ref: str | None = None) -> PinnedHarness:
    base_sha = gitops.resolve(repo, base)
    head_sha = gitops.resolve(repo, head)
    harness_ref = harness_ref or gitops.harness_source_ref(repo, base, settings.remote)
    harness_sha = gitops.resolve(repo, harness_ref)
    patterns = gitops.read_manifest(repo, harness_sha, settings.harness_manifest, label=harness_ref)
    entries = gitops.harness_entries(repo, harness_sha, patterns)
    return PinnedHarness(repo, base_sha, head_sha, harness_ref, harness_sha, patterns, gitops.tree_digest(entries))


# What no sandbox gets even from main's ruler: the corpora. The bot cuts every window from them itself
# (evalbot.measure.corpus); a process that could read them could look its prompts up.
SANDBOX_EXCLUDE = ("harness/prompts/",)


@contextmanager
def exported_trees(pinned: PinnedHarness, scratch: Path, names: tuple[str, str], shas: tuple[str, str], *,
                   max_bytes: int = MAX_EXPORT_BYTES, max_file_bytes: int = MAX_EXPORT_FILE_BYTES,
                   ) -> Iterator[tuple[Path, Path]]:
    """Two exports (`git archive`, no .git, world-readable) of `shas` under `scratch`, each with the
    pinned harness written over it and without SANDBOX_EXCLUDE; removed afterwards whatever happened.
    Each sandbox sees only its own (evalbot.measure.sandbox)."""
    dests = [scratch / name for name in names]
    try:
        for dest, sha in zip(dests, shas):
            digest = export_tree(pinned.repo, sha, dest, harness_rev=pinned.harness_sha, patterns=pinned.patterns,
                                 exclude=SANDBOX_EXCLUDE, max_bytes=max_bytes, max_file_bytes=max_file_bytes)
            if digest != pinned.harness_digest:  # belt and braces: the pin must name one ruler
                raise EvalbotError(f"harness pin failed: {dest.name} has harness digest {digest[:12]}, "
                                   f"expected {pinned.harness_digest[:12]}")
        yield dests[0], dests[1]
    finally:
        for dest in dests:
            remove_export(dest)
