"""Git, hardened (no hooks, no credential helpers, a timeout on every call): resolve refs, read the
harness manifest and its files from the base branch tip, spot harness edits, make the merge candidate.

One ruler for both refs: every file the base tip's `harness/HARNESS_PATHS` names is written from that
tip into both refs' exports (evalbot.measure.export; a stale harness file a ref carries is removed),
then checked byte for byte. If that cannot be done the run stops with `HarnessPinError` — measuring a
ref with its own copy of the harness once read a good PR as -47.5% (docs/shared prior-art).
"""

from __future__ import annotations

import atexit
import contextlib
import fnmatch
import hashlib
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from evalbot.errors import GitError, HarnessPinError

_GLOB_CHARS = set("*?[")


GIT_TIMEOUT_S = 600.0  # every git call's wall-clock limit (a fetch of a large repository included)
_no_hooks: Path | None = None


def no_hooks_dir() -> Path:
    """An empty directory of the bot's own: `core.hooksPath` for every git call, so no hook planted
    in a checkout's .git (or configured there) ever runs."""
    global _no_hooks
    if _no_hooks is None or not _no_hooks.is_dir():
        _no_hooks = Path(tempfile.mkdtemp(prefix="evalbot-nohooks-"))
        atexit.register(shutil.rmtree, _no_hooks, True)
    return _no_hooks


def git_argv(repo: Path, *args: str) -> list[str]:
    """git with hooks, credential helpers, askpass and fsmonitor turned off, in `repo`."""
    return ["git", "-c", f"core.hooksPath={no_hooks_dir()}", "-c", "credential.helper=", "-c", "core.askPass=",
            "-c", "core.fsmonitor=false", "-C", str(repo), *args]


def git_env(extra_env: Mapping[str, str] | None = None) -> dict[str, str]:
    return dict(os.environ, GIT_LITERAL_PATHSPECS="1", LC_ALL="C", GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="",
                SSH_ASKPASS="", **(extra_env or {}))


def run_git(repo: Path, *args: str, input_bytes: bytes | None = None, extra_env: Mapping[str, str] | None = None,
            timeout: float = GIT_TIMEOUT_S) -> tuple[int, bytes, bytes]:
    """(status, stdout, stderr) of one hardened git call; GitError naming the command on a timeout
    (git and whatever it started, e.g. a remote helper, are killed as one process group)."""
    proc = subprocess.Popen(
        git_argv(repo, *args), stdin=subprocess.PIPE if input_bytes is not None else subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=git_env(extra_env), start_new_session=True,
    )
    try:
        out, err = proc.communicate(input_bytes, timeout=timeout)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise GitError(f"git {' '.join(args[:3])}: timed out after {timeout:g} s") from None
    except BaseException:
        with contextlib.suppress(OSError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        raise
    return proc.returncode, out, err


def _failure(args: Sequence[str], err: bytes) -> GitError:
    msg = err.decode("utf-8", "replace").strip().splitlines()
    return GitError(f"git {' '.join(args[:3])}: {msg[-1] if msg else 'failed'}")


def git(
    repo: Path, *args: str, check: bool = True, input_bytes: bytes | None = None,
    extra_env: Mapping[str, str] | None = None, timeout: float = GIT_TIMEOUT_S,
) -> str:
    code, out, err = run_git(repo, *args, input_bytes=input_bytes, extra_env=extra_env, timeout=timeout)
    if check and code != 0:
        raise _failure(args, err)
    return out.decode("utf-8", "surrogateescape")


def git_bytes(repo: Path, *args: str, input_bytes: bytes | None = None, timeout: float = GIT_TIMEOUT_S) -> bytes:
    code, out, err = run_git(repo, *args, input_bytes=input_bytes, timeout=timeout)
    if code != 0:
        raise _failure(args, err)
    return out


def read_blobs(repo: Path, blobs: Sequence[str], timeout: float = GIT_TIMEOUT_S) -> dict[str, bytes]:
    """The contents of these blob ids, in one `git cat-file --batch`."""
    if not blobs:
        return {}
    out = git_bytes(repo, "cat-file", "--batch", input_bytes="".join(f"{b}\n" for b in blobs).encode(), timeout=timeout)
    found, pos = {}, 0
    for blob in blobs:
        end = out.index(b"\n", pos)
        header = out[pos:end].split()
        if len(header) != 3 or header[1] != b"blob":
            raise GitError(f"git cat-file: {blob[:12]} is not a blob")
        size = int(header[2])
        found[blob] = out[end + 1 : end + 1 + size]
        pos = end + 1 + size + 1
    return found


def repo_root(path: Path) -> Path:
    if not path.exists():
        raise GitError(f"{path} does not exist")
    try:
        top = git(path, "rev-parse", "--show-toplevel").strip()
    except GitError:
        raise GitError(f"{path} is not inside a git repository") from None
    return Path(top)


def resolve(repo: Path, ref: str) -> str:
    """The commit SHA a ref names; GitError with the ref in the message if it names none."""
    if not ref or ref.startswith("-"):
        raise GitError(f"invalid ref {ref!r}")
    out = git(repo, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}", check=False).strip()
    if not out:
        raise GitError(f"cannot resolve {ref!r} to a commit in {repo}")
    return out


def ref_exists(repo: Path, full_ref: str) -> bool:
    return bool(git(repo, "rev-parse", "--verify", "--quiet", full_ref, check=False).strip())


def harness_source_ref(repo: Path, base: str, remote: str = "origin") -> str:
    """Where the ruler comes from: the base branch tip, on the remote when the repo has one.

    `main` with an `origin/main` -> `origin/main`; a branch with no remote twin -> itself; a SHA
    or any other ref -> itself.
    """
    if base.startswith(("refs/", f"{remote}/")):
        return base
    if ref_exists(repo, f"refs/remotes/{remote}/{base}"):
        return f"{remote}/{base}"
    return base


def merge_base(repo: Path, a: str, b: str) -> str:
    out = git(repo, "merge-base", a, b, check=False).strip()
    if not out:
        raise GitError(f"{a[:12]} and {b[:12]} share no history")
    return out


# ---------------------------------------------------------------------------------------------
# HARNESS_PATHS: one path or glob per line, '#' comments. A plain path (or one ending in '/')
# covers itself and everything below it; a glob is matched with fnmatch against the whole path
# and against each of its parent directories.


def parse_manifest(text: str) -> list[str]:
    patterns = []
    for raw in text.splitlines():
        line = raw.split("#", 1)[0].strip()
        if line.startswith("./"):
            line = line[2:]
        if line:
            patterns.append(line)
    return patterns


def path_matches(path: str, pattern: str) -> bool:
    pattern = pattern.rstrip("/")
    if not pattern:
        return False
    parents = [path]
    parts = path.split("/")
    parents += ["/".join(parts[:i]) for i in range(1, len(parts))]
    if not (_GLOB_CHARS & set(pattern)):
        return any(p == pattern for p in parents)
    return any(fnmatch.fnmatchcase(p, pattern) for p in parents)


def matches_any(path: str, patterns: Sequence[str]) -> bool:
    return any(path_matches(path, p) for p in patterns)


def read_manifest(repo: Path, ref: str, manifest_path: str, label: str | None = None) -> list[str]:
    """The harness path patterns at `ref` (shown as `label`), the manifest itself always included."""
    where = f"{label} ({ref[:12]})" if label and label != ref else ref
    code, out, _ = run_git(repo, "show", f"{ref}:{manifest_path}")
    if code != 0:
        raise HarnessPinError(
            f"cannot pin the harness: {manifest_path} does not exist at {where} "
            "(the base branch must carry the harness manifest)"
        )
    patterns = parse_manifest(out.decode("utf-8", "replace"))
    if not patterns:
        raise HarnessPinError(f"cannot pin the harness: {manifest_path} at {where} lists no paths")
    if manifest_path not in patterns:
        patterns.append(manifest_path)
    return patterns


@dataclass(frozen=True)
class TreeEntry:
    mode: str
    blob: str
    path: str


def tree_entries(repo: Path, ref: str) -> list[TreeEntry]:
    out = git(repo, "ls-tree", "-r", "-z", "--full-tree", ref)
    entries = []
    for record in out.split("\0"):
        if not record:
            continue
        meta, path = record.split("\t", 1)
        mode, kind, blob = meta.split()
        if kind == "blob":
            entries.append(TreeEntry(mode, blob, path))
    return entries


def harness_entries(repo: Path, ref: str, patterns: Sequence[str]) -> list[TreeEntry]:
    return [e for e in tree_entries(repo, ref) if matches_any(e.path, patterns)]


def tree_digest(entries: Sequence[TreeEntry]) -> str:
    """sha256 over sorted `mode blob path` lines: names the exact ruler in the receipt."""
    h = hashlib.sha256()
    for e in sorted(entries, key=lambda e: e.path):
        h.update(f"{e.mode} {e.blob} {e.path}\n".encode("utf-8", "surrogateescape"))
    return h.hexdigest()


def changed_paths(repo: Path, base_sha: str, head_sha: str) -> list[str]:
    """Paths the head itself changed since it branched (three-dot diff, renames split in two)."""
    mb = merge_base(repo, base_sha, head_sha)
    out = git(repo, "diff", "--name-only", "--no-renames", "-z", mb, head_sha)
    return sorted(p for p in out.split("\0") if p)


def harness_changes(repo: Path, base_sha: str, head_sha: str, patterns: Sequence[str]) -> list[str]:
    return [p for p in changed_paths(repo, base_sha, head_sha) if matches_any(p, patterns)]


# ---------------------------------------------------------------------------------------------
# Scratch space


@contextmanager
def scratch_dir(prefix: str = "evalbot-") -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


# ---------------------------------------------------------------------------------------------
# What would land: the merge of the PR into main's tip


@dataclass(frozen=True)
class Candidate:
    """The merge of `head` into `base`: its tree and a commit object for it (parents base, head), or the
    paths that conflict."""

    tree: str = ""
    commit: str = ""
    conflicts: tuple[str, ...] = ()


def merge_candidate(repo: Path, base_sha: str, head_sha: str) -> Candidate:
    """`git merge-tree --write-tree` (no work tree, no index, no hooks): what squash-merging the PR onto
    main's current tip would give. A head that already contains the base tip merges to its own tree."""
    code, out, err_bytes = run_git(repo, "merge-tree", "--write-tree", "--name-only", "--no-messages", base_sha, head_sha)
    lines = out.decode("utf-8", "surrogateescape").splitlines()
    if code == 1 and lines:
        return Candidate(conflicts=tuple(sorted({p for p in lines[1:] if p})))
    if code != 0 or not lines:
        err = err_bytes.decode("utf-8", "replace").strip().splitlines()
        raise GitError(f"git merge-tree: {err[-1] if err else 'failed'}")
    tree = lines[0].strip()
    env = {"GIT_AUTHOR_NAME": "DSpark EvalBot", "GIT_AUTHOR_EMAIL": "evalbot@localhost",
           "GIT_COMMITTER_NAME": "DSpark EvalBot", "GIT_COMMITTER_EMAIL": "evalbot@localhost",
           "GIT_AUTHOR_DATE": "2000-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2000-01-01T00:00:00Z"}
    commit = git(repo, "commit-tree", tree, "-p", base_sha, "-p", head_sha, "-m",
                 f"evalbot candidate: {head_sha[:12]} merged into {base_sha[:12]}", extra_env=env).strip()
    return Candidate(tree=tree, commit=commit)


MEASURED_CODE = ("engine/", "kernels/", "harness/")
SHIPPED_DRAFTER = "engine/dspark/weights"  # where main's engine keeps the drafter it loads by default


def subtree(repo: Path, sha: str, path: str) -> str:
    """The git tree id of directory `path` in commit `sha`, read by the bot from the object store ("" when
    absent, or not a directory: a symlink or a file there)."""
    try:
        entry = git(repo, "ls-tree", sha, "--", path).split()  # [mode, type, id, path] or [] when absent
    except GitError:
        return ""
    return entry[2] if entry[1:2] == ["tree"] else ""


def code_digest(repo: Path, sha: str, prefixes: Sequence[str] = MEASURED_CODE) -> str:
    """Digest of the files under `prefixes` at `sha`: names main's engine version (the noise floor's key)."""
    return tree_digest([e for e in tree_entries(repo, sha) if e.path.startswith(tuple(prefixes))])
