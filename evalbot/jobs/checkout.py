"""Bring a job's two commits into the box's clone: main from its branch, the PR from refs/pull/N/head.

Runs in the worker (which holds no PR code); the scoring core then makes worktrees from these SHAs.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

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
