"""What a sandbox sees of a ref: an export of its tree (no .git, nothing of the bot's checkout), with
the pinned harness laid over it and the corpora taken out.

`export_tree` = `git archive` of a commit or a tree id (the lead scores the merge of a PR into main,
`git merge-tree --write-tree`), then every file HARNESS_PATHS covers replaced by harness_rev's (files
the ref added under those patterns removed), then the `exclude` patterns removed (measured processes
never see the corpus texts: the bot sends token ids), then everything checked byte for byte. Files
are world-readable and directories 0755: the sandbox user reads them, nobody writes them.

The archive is streamed from git straight to disk, one file at a time, and refused (`ExportTooLarge`,
one line) as soon as a file or the whole tree is larger than the caps: a few kB of git objects can
inflate to gigabytes, which must fill neither the bot's memory nor its scratch disk.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import signal
import stat
import subprocess
import tarfile
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from evalbot.errors import HarnessPinError
from evalbot.measure import gitops

ARCHIVE_TIMEOUT_S = 600.0
# Far above this repository's own tree (~32 MB in ~1,000 files, the largest ~10 MB: the drafter).
MAX_EXPORT_BYTES = 1 << 30
MAX_EXPORT_FILE_BYTES = 256 << 20
MAX_EXPORT_FILES = 100_000


class ExportTooLarge(HarnessPinError):
    """A ref's tree is larger than a sandbox is given: a file, the whole tree or the number of files."""

    def __init__(self, message: str, rev: str = ""):
        super().__init__(message)
        self.rev = rev


def _archive(repo: Path, rev: str, dest: Path, *, max_bytes: int = MAX_EXPORT_BYTES,
             max_file_bytes: int = MAX_EXPORT_FILE_BYTES, max_files: int = MAX_EXPORT_FILES) -> None:
    """`git archive` streamed into `dest` member by member, each size checked before it is written."""
    errf = tempfile.TemporaryFile()  # a file, not a pipe: git's stderr can never block its stdout
    proc = subprocess.Popen(gitops.git_argv(repo, "archive", "--format=tar", rev), stdin=subprocess.DEVNULL,
                            stdout=subprocess.PIPE, stderr=errf, env=gitops.git_env(None), start_new_session=True)
    deadline = time.monotonic() + ARCHIVE_TIMEOUT_S
    total = files = 0
    try:
        with tarfile.open(fileobj=proc.stdout, mode="r|") as tar:
            for member in tar:
                if time.monotonic() > deadline:
                    raise gitops.GitError(f"git archive: timed out after {ARCHIVE_TIMEOUT_S:g} s")
                files += 1
                total += max(member.size, 0)
                if member.size > max_file_bytes:
                    raise ExportTooLarge(f"the tree of {rev[:12]} is too large to export: {member.name} has "
                                         f"{member.size / 1e6:.0f} MB, more than the {max_file_bytes / 1e6:.0f} MB a file may have", rev)
                if total > max_bytes:
                    raise ExportTooLarge(f"the tree of {rev[:12]} is too large to export: more than "
                                         f"{max_bytes / 1e6:.0f} MB in all", rev)
                if files > max_files:
                    raise ExportTooLarge(f"the tree of {rev[:12]} is too large to export: more than {max_files} files", rev)
                tar.extract(member, dest, filter="data")  # no absolute paths, no .., no devices, no links out
        if proc.wait(timeout=max(1.0, deadline - time.monotonic())) != 0:
            errf.seek(0)
            msg = errf.read(1 << 16).decode("utf-8", "replace").strip().splitlines()
            raise gitops.GitError(f"git archive: {msg[-1] if msg else 'failed'}")
    except ExportTooLarge:
        raise
    except (tarfile.TarError, OSError, gitops.GitError, subprocess.TimeoutExpired) as e:
        raise HarnessPinError(f"cannot export {rev[:12]} into {dest}: {e}") from None
    finally:
        if proc.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        for f in (proc.stdout, errf):
            with contextlib.suppress(OSError):
                f.close()


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
                exclude: Sequence[str] = (), max_bytes: int = MAX_EXPORT_BYTES,
                max_file_bytes: int = MAX_EXPORT_FILE_BYTES) -> str:
    """Export `rev` (a commit or a tree id) into `dest` (created) with harness_rev's harness files,
    without the `exclude` patterns; returns the pinned harness's tree digest (gitops.tree_digest).
    Raises HarnessPinError, loudly, when any of it cannot be done (ExportTooLarge: past the caps)."""
    wanted = gitops.harness_entries(repo, harness_rev, patterns)
    if not wanted:
        raise HarnessPinError(f"cannot pin the harness: HARNESS_PATHS matches no file at {harness_rev[:12]}")
    try:
        dest.mkdir(parents=True, mode=0o755)
    except FileExistsError:
        raise HarnessPinError(f"cannot export into {dest}: it exists already") from None
    blobs = gitops.read_blobs(repo, sorted({e.blob for e in wanted}))
    _archive(repo, rev, dest, max_bytes=max_bytes, max_file_bytes=max_file_bytes)
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

