"""What crosses into a sandbox (evalbot.measure.export) and how the bot runs git (evalbot.measure.gitops):
an export of a ref with main's harness, no .git, no corpora; git with no hooks, no credential
helpers, and a timeout on every call."""

from __future__ import annotations

import os
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from evalbot.errors import GitError, HarnessPinError
from evalbot.measure import gitops
from evalbot.measure.checkout import pin_harness
from evalbot.measure.export import export_tree
from evalbot.settings import ScoringSettings
from evalbot.testing import make_fake_repo


@pytest.fixture
def repo(tmp_path):
    r = make_fake_repo(tmp_path / "repo")
    r.commit("corpora", files={"harness/prompts/code.txt": "corpus text\n", "harness/prompts/SOURCES.md": "sources\n"})
    return r


def _patterns(repo) -> list[str]:
    return gitops.read_manifest(repo.path, repo.sha("main"), "harness/HARNESS_PATHS")


def _files(root: Path) -> dict[str, bytes]:
    return {p.relative_to(root).as_posix(): (os.readlink(p).encode() if p.is_symlink() else p.read_bytes())
            for p in sorted(root.rglob("*")) if p.is_file() or p.is_symlink()}


def test_an_export_is_the_tree_without_git_world_readable(repo, tmp_path):
    main = repo.sha("main")
    digest = export_tree(repo.path, main, tmp_path / "out" / "main-1", harness_rev=main, patterns=_patterns(repo))
    dest = tmp_path / "out" / "main-1"
    assert _files(dest) == {path: (repo.path / path).read_bytes() for path in repo.git("ls-files").split("\n")}
    assert not (dest / ".git").exists()
    for p in [dest, *dest.rglob("*")]:
        mode = stat.S_IMODE(p.lstat().st_mode)
        assert mode in ((0o755,) if p.is_dir() else (0o644, 0o755)), (p, oct(mode))
    assert digest == pin_harness(repo.path, "main", "main", ScoringSettings()).harness_digest


def test_the_pinned_harness_replaces_the_refs_and_what_it_added_goes(repo, tmp_path):
    head = repo.branch("pr", files={"harness/serve.py": "print('forged')\n", "harness/extra.py": "x = 1\n",
                                    "engine/new.py": "y = 2\n"})
    main = repo.sha("main")
    dest = tmp_path / "pr-1"
    export_tree(repo.path, head, dest, harness_rev=main, patterns=_patterns(repo))
    assert (dest / "harness" / "serve.py").read_text().strip() == repo.git("show", f"{main}:harness/serve.py")
    assert not (dest / "harness" / "extra.py").exists()  # under the manifest: only the pinned files
    assert (dest / "engine" / "new.py").read_text() == "y = 2\n"  # the PR's own code stays


def test_a_merge_tree_id_exports_and_corpora_are_excluded(repo, tmp_path):
    head = repo.branch("pr", files={"engine/new.py": "y = 2\n"})
    repo.commit("main moves", files={"kernels/more.py": "z = 3\n"})
    main = repo.sha("main")
    tree = repo.git("merge-tree", "--write-tree", main, head).split()[0]
    assert repo.git("cat-file", "-t", tree) == "tree"
    dest = tmp_path / "merged"
    exclude = ["harness/prompts/*.txt"]
    digest = export_tree(repo.path, tree, dest, harness_rev=main, patterns=_patterns(repo), exclude=exclude)
    assert (dest / "engine" / "new.py").exists() and (dest / "kernels" / "more.py").exists()
    assert not (dest / "harness" / "prompts" / "code.txt").exists()
    assert (dest / "harness" / "prompts" / "SOURCES.md").read_text() == "sources\n"
    assert digest == pin_harness(repo.path, "main", "main", ScoringSettings()).harness_digest  # excluded files included


def test_a_harness_made_a_symlink_is_replaced_by_the_real_one(repo, tmp_path):
    repo.git("checkout", "-q", "-b", "evil")
    repo.git("rm", "-rq", "harness")
    (repo.path / "elsewhere").mkdir()
    (repo.path / "elsewhere" / "serve.py").write_text("print('forged')\n")
    os.symlink("elsewhere", repo.path / "harness")
    head = repo.commit("harness is a link now")
    repo.git("checkout", "-q", "main")
    dest = tmp_path / "evil"
    export_tree(repo.path, head, dest, harness_rev=repo.sha("main"), patterns=_patterns(repo))
    assert (dest / "harness").is_dir() and not (dest / "harness").is_symlink()
    assert (dest / "harness" / "serve.py").read_text() == (repo.path / "harness" / "serve.py").read_text()
    assert (dest / "elsewhere" / "serve.py").read_text() == "print('forged')\n"


def test_a_link_out_of_the_tree_fails_loudly(repo, tmp_path):
    repo.git("checkout", "-q", "-b", "out")
    os.symlink("/etc/shadow", repo.path / "engine" / "shadow")
    head = repo.commit("a link out")
    repo.git("checkout", "-q", "main")
    with pytest.raises(HarnessPinError, match="cannot export"):
        export_tree(repo.path, head, tmp_path / "x", harness_rev=repo.sha("main"), patterns=_patterns(repo))
    with pytest.raises(HarnessPinError, match="exists already"):
        export_tree(repo.path, repo.sha("main"), tmp_path, harness_rev=repo.sha("main"), patterns=_patterns(repo))


def _require_sandbox() -> None:
    """Skip where bubblewrap cannot run, unless CI demands the sandbox (DSPARK_REQUIRE_SANDBOX=1)."""
    from evalbot.testing.sandbox_check import sandbox_unavailable

    why = sandbox_unavailable()
    if why:
        pytest.skip(why)


def test_a_sandbox_runs_an_export(repo, tmp_path):
    from evalbot.measure.proc import SandboxedProcess
    from evalbot.measure.sandbox import SandboxSpec
    from evalbot.settings import SandboxSettings

    _require_sandbox()
    dest = tmp_path / "exports" / "pr-1"
    export_tree(repo.path, repo.sha("main"), dest, harness_rev=repo.sha("main"), patterns=_patterns(repo),
                exclude=["harness/prompts/*.txt"])
    model = tmp_path / "m.gguf"
    model.write_bytes(b"m")
    for p in (tmp_path, tmp_path / "exports"):
        p.chmod(0o755)
    spec = SandboxSpec("pr-1", dest, model, {"PATH": "/usr/bin:/bin"})
    code = "import harness, engine, os; print(harness.__file__, os.path.exists('harness/prompts/code.txt'))"
    with SandboxedProcess.start(spec, [sys.executable, "-c", code], SandboxSettings()) as proc:
        out = proc.stdout.read().decode().split()
        assert proc.wait(60) == 0, proc.stderr_tail()
    assert out == ["/work/tree/harness/__init__.py", "False"]


# ---------------------------------------------------------------------------------------------
# git as the bot runs it


HOOKS = ("post-checkout", "pre-commit", "post-commit", "reference-transaction", "post-index-change",
         "pre-auto-gc", "post-rewrite", "pre-push", "fsmonitor-watchman")


def _plant(hooks_dir: Path, marker: Path) -> None:
    hooks_dir.mkdir(parents=True, exist_ok=True)
    for name in HOOKS:
        hook = hooks_dir / name
        hook.write_text(f"#!/bin/sh\necho {name} >> {marker}\n")
        hook.chmod(0o755)


def test_no_hook_planted_in_the_checkout_runs_during_any_bot_git_call(repo, tmp_path):
    marker = tmp_path / "hook-ran"
    _plant(repo.path / ".git" / "hooks", marker)
    _plant(tmp_path / "configured-hooks", marker)
    head = repo.branch("pr", files={"engine/new.py": "y = 2\n"})
    repo.git("config", "core.fsmonitor", f"echo fsmonitor >> {marker}; false")
    # the planted hook works: plain git runs it
    subprocess.run(["git", "-C", str(repo.path), "worktree", "add", "-q", "--detach", str(tmp_path / "plain"), "main"],
                   check=True, capture_output=True)
    assert "post-checkout" in marker.read_text()
    subprocess.run(["git", "-C", str(repo.path), "worktree", "remove", "--force", str(tmp_path / "plain")], check=True)
    marker.unlink()
    repo.git("config", "core.hooksPath", str(tmp_path / "configured-hooks"))

    main = gitops.resolve(repo.path, "main")
    patterns = gitops.read_manifest(repo.path, main, "harness/HARNESS_PATHS")
    gitops.harness_changes(repo.path, main, head, patterns)
    wt = tmp_path / "wt"
    gitops.git(repo.path, "worktree", "add", "--detach", str(wt), head)
    gitops.git(wt, "status", "--porcelain")
    gitops.git(wt, "-c", "user.name=x", "-c", "user.email=x@x", "commit", "-qam", "in a worktree", check=False)
    gitops.git(repo.path, "worktree", "remove", "--force", str(wt))
    export_tree(repo.path, head, tmp_path / "export", harness_rev=main, patterns=patterns)
    gitops.git(repo.path, "gc", "--auto")
    gitops.git(repo.path, "update-ref", "refs/heads/moved", head)
    assert not marker.exists(), marker.read_text()


def test_no_credential_helper_and_no_prompt(repo, tmp_path):
    marker = tmp_path / "helper-ran"
    repo.git("config", "credential.helper", f"!f() {{ touch {marker}; echo username=u; echo password=p; }}; f")
    t0 = time.monotonic()
    with pytest.raises(GitError, match="git credential fill"):
        gitops.git(repo.path, "credential", "fill", input_bytes=b"protocol=https\nhost=example.invalid\n\n", timeout=30)
    assert not marker.exists() and time.monotonic() - t0 < 20  # refused at once, nothing asked


def test_every_git_call_has_a_timeout_that_kills_what_it_started(tmp_path, monkeypatch):
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "git").write_text(f"#!/bin/sh\nsleep 60 &\necho $! > {tmp_path / 'child'}\nwait\n")
    (fake / "git").chmod(0o755)
    monkeypatch.setenv("PATH", f"{fake}:{os.environ['PATH']}")
    t0 = time.monotonic()
    with pytest.raises(GitError, match=r"^git fetch --no-tags origin: timed out after 0.5 s$"):
        gitops.git(tmp_path, "fetch", "--no-tags", "origin", "main", timeout=0.5)
    assert time.monotonic() - t0 < 10
    child = int((tmp_path / "child").read_text())
    deadline = time.monotonic() + 5
    while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
        time.sleep(0.05)  # (a zombie until init reaps it)
    st = Path(f"/proc/{child}/stat")
    assert not st.exists() or st.read_text().rsplit(")", 1)[1].split()[0] in ("Z", "X")


def test_an_interpreter_under_tmp_runs_in_the_sandbox(repo, tmp_path):
    """A CI checkout under /tmp has its venv there: the sandbox's /tmp is a fresh tmpfs, and the
    directories above the bound interpreter must be made in it, walkable by the sandbox user."""
    from evalbot.measure.proc import SandboxedProcess
    from evalbot.measure.sandbox import SandboxSpec
    from evalbot.settings import SandboxSettings

    _require_sandbox()
    if not str(tmp_path).startswith("/tmp/"):
        pytest.skip(f"pytest's temporary directory {tmp_path} is not under /tmp")
    bin_dir = tmp_path / "deep" / "venv" / "bin"
    bin_dir.mkdir(parents=True)
    (bin_dir / "python").symlink_to(os.path.realpath(sys.executable))
    dest = tmp_path / "tree"
    export_tree(repo.path, repo.sha("main"), dest, harness_rev=repo.sha("main"), patterns=_patterns(repo))
    model = tmp_path / "m.gguf"
    model.write_bytes(b"m")
    spec = SandboxSpec("pr-1", dest, model, {"PATH": "/usr/bin:/bin"})
    with SandboxedProcess.start(spec, [str(bin_dir / "python"), "-c", "print('ran')"], SandboxSettings()) as proc:
        out = proc.stdout.read().decode()
        assert proc.wait(60) == 0, proc.stderr_tail()
    assert out.strip() == "ran"


def test_a_tree_past_the_size_caps_is_refused_in_one_line_before_it_fills_disk_or_memory(repo, tmp_path):
    """A few kB of git objects inflate to a large file (the red team's was 315 MB from 0.8 MB): the
    archive is streamed and refused at the first member past a cap, with nothing large written."""
    from evalbot.measure.export import MAX_EXPORT_FILE_BYTES, ExportTooLarge

    big = tmp_path / "zeros.bin"
    with open(big, "wb") as f:
        f.truncate(8 << 20)
    (repo.path / "engine" / "data").mkdir(parents=True)
    os.replace(big, repo.path / "engine" / "data" / "pad.bin")
    repo.git("add", "-A")
    repo.git("commit", "-qm", "pad")
    head = repo.sha("HEAD")
    main = repo.sha("main")
    with pytest.raises(ExportTooLarge) as e:
        export_tree(repo.path, head, tmp_path / "pr-1", harness_rev=main, patterns=_patterns(repo),
                    max_file_bytes=4 << 20)
    assert e.value.rev == head and "engine/data/pad.bin has 8 MB, more than the 4 MB a file may have" in str(e.value)
    assert "\n" not in str(e.value)
    assert not (tmp_path / "pr-1" / "engine" / "data" / "pad.bin").exists()
    with pytest.raises(ExportTooLarge, match="more than 6 MB in all"):
        export_tree(repo.path, head, tmp_path / "pr-2", harness_rev=main, patterns=_patterns(repo), max_bytes=6 << 20)
    # the defaults are far above this repository's own tree, and the same tree exports under them
    assert MAX_EXPORT_FILE_BYTES >= 10 * max(int(line.split()[3]) for line in subprocess.run(
        ["git", "ls-tree", "-r", "-l", "HEAD"], cwd=Path(__file__).resolve().parents[1], capture_output=True,
        text=True).stdout.splitlines() if line.split()[3] != "-")
    export_tree(repo.path, head, tmp_path / "pr-3", harness_rev=main, patterns=_patterns(repo))
    assert (tmp_path / "pr-3" / "engine" / "data" / "pad.bin").stat().st_size == 8 << 20
