"""The forge Protocol: every method the bot calls on a code host, and nothing it reaches around.

Two adapters implement it: `evalbot.forge.local.LocalForge` (SQLite under .evalbot/, the embedded
default) and `evalbot.forge.github.GitHubForge` (PyGithub). The pipeline and the worker take a
`Forge`; the decision core never sees one.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol, runtime_checkable

CHECK_NAME = "DSpark eval"  # the check run (or commit status) the bot keeps on every scored head


@dataclass
class PullInfo:
    number: int
    head_sha: str
    head_ref: str
    base_ref: str
    base_sha: str = ""
    title: str = ""
    author: str = ""
    author_association: str = "NONE"
    draft: bool = False
    state: str = "open"  # open | closed | merged
    mergeable: bool | None = None
    labels: list[str] = field(default_factory=list)
    is_fork: bool = False  # the head lives in another repository (or a deleted fork)


@dataclass
class MergeResult:
    merged: bool
    sha: str = ""
    message: str = ""


@runtime_checkable
class Forge(Protocol):
    """What the bot needs from a code host. All methods are idempotent where the name says so."""

    def get_pull(self, number: int) -> PullInfo: ...

    def list_open_pulls(self) -> list[PullInfo]: ...

    def branch_head_sha(self, branch: str) -> str:
        """The commit a branch points at now (main, before a job runs and before a round merges)."""
        ...

    def replace_labels(self, number: int, prefixes: tuple[str, ...], new_labels: list[str]) -> None:
        """Remove every label starting with one of `prefixes`, then add `new_labels` (idempotent)."""
        ...

    def add_label(self, number: int, label: str) -> None: ...

    def remove_label(self, number: int, label: str) -> None: ...

    def upsert_sticky_comment(self, number: int, marker: str, body: str) -> str:
        """Edit the one comment containing `marker` in place, or create it. Returns its id."""
        ...

    def comment(self, number: int, body: str) -> str: ...

    def permission(self, login: str) -> str:
        """`login`'s role on the repository: admin, maintain, write, triage, read or none. Raises when it
        cannot be known; callers then refuse (a command, or running a fork's code)."""
        ...

    def start_check(self, head_sha: str, name: str, summary: str, *, external_id: str = "", details_url: str = "") -> str:
        """Create a check run in state queued/in_progress; returns its id. `external_id` names the job
        (GitHub hands it back when someone presses Re-run); `details_url` is the check's Details link."""
        ...

    def update_check(
        self,
        check_id: str,
        *,
        status: str,
        title: str,
        summary: str,
        conclusion: str | None = None,
        text: str | None = None,
        details_url: str = "",
    ) -> None: ...

    def store_receipt(self, number: int, head_sha: str, receipt_json: str) -> str:
        """Keep the signed receipt where users can fetch it; returns a reference (path or URL)."""
        ...

    def merge(self, number: int, expected_head_sha: str, title: str, message: str) -> MergeResult:
        """Squash-merge only if the head is still `expected_head_sha`."""
        ...

    def close(self, number: int) -> None: ...
