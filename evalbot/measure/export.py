"""What a sandbox sees of a ref: an export of its tree (no .git, nothing of the bot's checkout), with
the pinned harness laid over it and the corpora taken out.

`export_tree` = `git archive` of a commit or a tree id (the lead scores the merge of a PR into main,
`git merge-tree --write-tree`), then every file HARNESS_PATHS covers replaced by harness_rev's (files
the ref added under those patterns removed), then the `exclude` patterns removed (measured processes
never see the corpus texts: the bot sends token ids), then everything checked byte for byte. Files
are world-readable and directories 0755: the sandbox user reads them, nobody writes them.
"""

from __future__ import annotations

import io
import os
import shutil
import stat
import tarfile
from collections.abc import Sequence
from pathlib import Path

from evalbot.errors import HarnessPinError
from evalbot.measure import gitops

ARCHIVE_TIMEOUT_S = 600.0


def _archive(repo: Path, rev: str, dest: Path) -> None:
    try:
        data = gitops.git_bytes(repo, "archive", "--format=tar", rev, timeout=ARCHIVE_TIMEOUT_S)
        with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
            tar.extractall(dest, filter="data")  # no absolute paths, no .., no devices, no links out
    except (tarfile.TarError, OSError, gitops.GitError) as e:
        raise HarnessPinError(f"cannot export {rev[:12]} into {dest}: {e}") from None


def _walk(root: Path) -> list[str]:
    """Every file and link under root (relative, posix), links not followed."""
    out = []
    for here, dirs, files in os.walk(root):
        rel = Path(here).relative_to(root)
        for name in files + [d for d in dirs if (Path(here) / d).is_symlink()]:
            out.append((rel / name).as_posix())
    return out


def _remove(root: Path, patterns: Sequence[str]) -> None:
    for rel in _walk(root):
        if gitops.matches_any(rel, patterns):
            (root / rel).unlink()


def _real_dirs(root: Path, rel: str) -> Path:
    """root/rel's parent as real directories: a link or a file in the way (the ref's) is removed."""
    here = root
    for part in Path(rel).parts[:-1]:
        here = here / part
        if here.is_symlink() or (here.exists() and not here.is_dir()):
            here.unlink()
        if not here.exists():
            here.mkdir(mode=0o755)
    return root / rel


def _write(root: Path, entry: gitops.TreeEntry, blob: bytes) -> None:
    path = _real_dirs(root, entry.path)
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    if entry.mode == "120000":
        os.symlink(blob, path)
        return
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o755 if entry.mode == "100755" else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(blob)


def _permissions(root: Path) -> None:
    """Directories 0755, files 0644 (0755 if executable), owned by whoever exported them."""
    for here, dirs, files in os.walk(root):
        os.chmod(here, 0o755)
        for name in files:
            p = Path(here) / name
            if not p.is_symlink():
                mode = p.lstat().st_mode
                p.chmod(0o755 if mode & stat.S_IXUSR else 0o644)


def _verify(root: Path, wanted: Sequence[gitops.TreeEntry], patterns: Sequence[str], exclude: Sequence[str],
            blobs: dict[str, bytes]) -> None:
    kept = {e.path: e for e in wanted if not gitops.matches_any(e.path, exclude)}
    for path, e in kept.items():
        f = root / path
        if e.mode == "120000":
            ok = f.is_symlink() and os.readlink(f).encode("utf-8", "surrogateescape") == blobs[e.blob]
        else:
            ok = not f.is_symlink() and f.is_file() and f.read_bytes() == blobs[e.blob]
        if not ok:
            raise HarnessPinError(f"harness pin failed: {path} in the export of {root.name} differs from the harness tip")
    for rel in _walk(root):
        if rel.split("/", 1)[0] == ".git":
            raise HarnessPinError(f"the export {root.name} holds {rel}: a .git must never reach a sandbox")
        if gitops.matches_any(rel, exclude):
            raise HarnessPinError(f"the export {root.name} still holds {rel}, which is excluded")
        if gitops.matches_any(rel, patterns) and rel not in kept:
            raise HarnessPinError(f"harness pin failed: {rel} in the export {root.name} is not part of the harness tip")


def export_tree(repo: Path, rev: str, dest: Path, *, harness_rev: str, patterns: Sequence[str],
                exclude: Sequence[str] = ()) -> str:
    """Export `rev` (a commit or a tree id) into `dest` (created) with harness_rev's harness files,
    without the `exclude` patterns; returns the pinned harness's tree digest (gitops.tree_digest).
    Raises HarnessPinError, loudly, when any of it cannot be done."""
    wanted = gitops.harness_entries(repo, harness_rev, patterns)
    if not wanted:
        raise HarnessPinError(f"cannot pin the harness: HARNESS_PATHS matches no file at {harness_rev[:12]}")
    try:
        dest.mkdir(parents=True, mode=0o755)
    except FileExistsError:
        raise HarnessPinError(f"cannot export into {dest}: it exists already") from None
    blobs = gitops.read_blobs(repo, sorted({e.blob for e in wanted}))
    _archive(repo, rev, dest)
    try:
        _remove(dest, patterns)
        for e in wanted:
            if not gitops.matches_any(e.path, exclude):
                _write(dest, e, blobs[e.blob])
        _remove(dest, exclude)
        _permissions(dest)
    except OSError as e:
        raise HarnessPinError(f"cannot pin the harness from {harness_rev[:12]} into {dest.name}: {e}") from None
    _verify(dest, wanted, patterns, exclude, blobs)
    return gitops.tree_digest(wanted)


def remove_export(dest: Path) -> None:
    shutil.rmtree(dest, ignore_errors=True)

