"""The receipts the GitHub adapter keeps: a local copy, and a file on an orphan receipts branch."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import TYPE_CHECKING

from github import GithubException, InputGitTreeElement, UnknownObjectException

from evalbot.report.render import render

if TYPE_CHECKING:
    from evalbot.forge.github import GitHubForge


def store_receipt(forge: GitHubForge, number: int, head_sha: str, receipt_json: str) -> str:
    """Keep the receipt locally, and on the receipts branch (an orphan branch) when configured.

    Returns the GitHub URL of the file, or the local path when no branch is configured. The file
    name holds a digest of the receipt, so storing the same receipt twice is a no-op.
    """
    digest = hashlib.sha256(receipt_json.encode()).hexdigest()[:16]
    relative = f"receipts/pr-{number}/{head_sha}-{digest}.json"
    local = None
    if forge.receipts_dir is not None:
        local = Path(forge.receipts_dir) / relative
        local.parent.mkdir(parents=True, exist_ok=True)
        local.write_text(receipt_json)
    if not forge.receipts_branch:
        return str(local) if local else ""
    _ensure_receipts_branch(forge)

    def put() -> None:
        try:
            forge.repo.create_file(relative, f"receipt for #{number} at {head_sha[:12]}", receipt_json, branch=forge.receipts_branch)
        except GithubException as exc:
            if exc.status != 422:  # 422: this very receipt is already there
                raise

    forge._call(f"store receipt for #{number}", put)
    return f"{forge.html_base_url}/{forge.repo_name}/blob/{forge.receipts_branch}/{relative}"


def _ensure_receipts_branch(forge: GitHubForge) -> None:
    ref = f"heads/{forge.receipts_branch}"

    def exists() -> bool:
        try:
            forge.repo.get_git_ref(ref).object  # the ref is lazy: reading it makes the request
            return True
        except UnknownObjectException:
            return False
        except GithubException as exc:
            if exc.status == 404:
                return False
            raise

    if forge._call("find receipts branch", exists):
        return
    readme = render("gh_receipts_readme.md.j2", templates=forge.templates, repo=forge.repo_name)

    def create() -> None:
        tree = forge.repo.create_git_tree([InputGitTreeElement("README.md", "100644", "blob", content=readme)])
        commit = forge.repo.create_git_commit("Receipts of the DSpark eval bot", tree, [])
        try:
            forge.repo.create_git_ref(f"refs/{ref}", commit.sha)
        except GithubException as exc:
            if exc.status != 422:  # 422: another worker created it meanwhile
                raise

    forge._call("create receipts branch", create)
