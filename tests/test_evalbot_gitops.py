"""Git: resolving refs, the harness manifest, the pin/overlay, and the harness-changed check."""

import pytest

from evalbot.measure import gitops
from evalbot.errors import GitError, HarnessPinError
from evalbot.testing import make_fake_repo


@pytest.fixture
def repo(tmp_path):
    return make_fake_repo(tmp_path / "repo")


def test_manifest_parsing_and_matching():
    assert gitops.parse_manifest("# c\n./harness/\n  bench/*.txt  # why\n\n") == ["harness/", "bench/*.txt"]
    assert gitops.path_matches("harness/score.py", "harness/")
    assert gitops.path_matches("harness/score.py", "harness")
    assert gitops.path_matches("harness/prompts/a.txt", "harness/prompts")
    assert not gitops.path_matches("harness_old/x.py", "harness")
    assert gitops.path_matches("bench/prompts/prose.txt", "bench/prompts/*.txt")
    assert not gitops.path_matches("bench/prompts/prose.md", "bench/prompts/*.txt")
    assert gitops.path_matches("eval/sub/deep.py", "eval/*")


def test_resolve(repo):
    assert gitops.resolve(repo.path, "main") == repo.sha("main")
    with pytest.raises(GitError, match="cannot resolve 'nope'"):
        gitops.resolve(repo.path, "nope")
    with pytest.raises(GitError, match="invalid ref"):
        gitops.resolve(repo.path, "--all")


def test_not_a_repo(tmp_path):
    with pytest.raises(GitError, match="not inside a git repository"):
        gitops.repo_root(tmp_path)


def test_harness_source_prefers_the_remote_tip(repo, tmp_path):
    assert gitops.harness_source_ref(repo.path, "main") == "main"
    clone = tmp_path / "clone"
    repo.git("clone", "-q", str(repo.path), str(clone))
    assert gitops.harness_source_ref(clone, "main") == "origin/main"
    assert gitops.harness_source_ref(clone, "origin/main") == "origin/main"


def test_manifest_read_from_ref_includes_itself(repo):
    patterns = gitops.read_manifest(repo.path, "main", "harness/HARNESS_PATHS")
    assert patterns == ["harness/", "bench/prompts/*.txt", "harness/HARNESS_PATHS"]
    repo.commit("drop manifest", delete=["harness/HARNESS_PATHS"])
    with pytest.raises(HarnessPinError, match="does not exist"):
        gitops.read_manifest(repo.path, "main", "harness/HARNESS_PATHS")


def test_harness_changes_are_the_heads_own(repo):
    patterns = gitops.read_manifest(repo.path, "main", "harness/HARNESS_PATHS")
    repo.branch("engine-only", knobs={"dspark_speed": 2.0})
    repo.branch("touches-harness", files={"harness/settings.py": "NEW_TOKENS = 1\n"})
    repo.branch("touches-prompt", files={"bench/prompts/prose.txt": "short\n"})
    base = repo.sha("main")
    assert gitops.harness_changes(repo.path, base, repo.sha("engine-only"), patterns) == []
    assert gitops.harness_changes(repo.path, base, repo.sha("touches-harness"), patterns) == ["harness/settings.py"]
    assert gitops.harness_changes(repo.path, base, repo.sha("touches-prompt"), patterns) == ["bench/prompts/prose.txt"]
    # main moves its harness after the PR branched: not the PR's change (three-dot diff)
    repo.commit("main: new ruler", files={"harness/settings.py": "# v2\n" + repo.read("harness/settings.py")})
    assert gitops.harness_changes(repo.path, repo.sha("main"), repo.sha("engine-only"), patterns) == []


def test_overlay_gives_an_old_branch_mains_harness(repo, tmp_path):
    repo.commit("main: helper", files={"harness/old_helper.py": "X = 1\n"})
    repo.branch("old-pr", knobs={"dspark_speed": 2.0})
    new_settings = repo.read("harness/settings.py").replace("NEW_TOKENS = 24", "NEW_TOKENS = 12")
    repo.commit("main: new ruler", files={"harness/settings.py": new_settings}, delete=["harness/old_helper.py"])
    main_sha = repo.sha("main")
    patterns = gitops.read_manifest(repo.path, main_sha, "harness/HARNESS_PATHS")
    expected = gitops.tree_digest(gitops.harness_entries(repo.path, main_sha, patterns))
    with gitops.worktree(repo.path, repo.sha("old-pr"), tmp_path, "pr") as wt:
        assert "NEW_TOKENS = 24" in (wt / "harness/settings.py").read_text()
        digest = gitops.overlay_harness(repo.path, wt, main_sha, patterns)
        assert digest == expected
        assert "NEW_TOKENS = 12" in (wt / "harness/settings.py").read_text()
        assert not (wt / "harness/old_helper.py").exists()  # stale harness file removed
        assert '"dspark_speed": 2.0' in (wt / "knobs.json").read_text()  # the PR's own code stays
    assert not (tmp_path / "pr").exists()
    assert str(tmp_path / "pr") not in repo.git("worktree", "list")


def test_verify_overlay_catches_a_tampered_or_extra_file(repo, tmp_path):
    sha = repo.sha("main")
    patterns = gitops.read_manifest(repo.path, sha, "harness/HARNESS_PATHS")
    wanted = gitops.harness_entries(repo.path, sha, patterns)
    with gitops.worktree(repo.path, sha, tmp_path, "wt") as wt:
        gitops.verify_overlay(wt, wanted, patterns)
        (wt / "harness/extra.py").write_text("print('hi')\n")
        with pytest.raises(HarnessPinError, match="extra.py"):
            gitops.verify_overlay(wt, wanted, patterns)
        (wt / "harness/extra.py").unlink()
        (wt / "harness/score.py").write_text("# changed\n")
        with pytest.raises(HarnessPinError, match="differs"):
            gitops.verify_overlay(wt, wanted, patterns)


def test_overlay_with_no_matching_file_fails_loudly(repo, tmp_path):
    sha = repo.sha("main")
    with gitops.worktree(repo.path, sha, tmp_path, "wt") as wt:
        with pytest.raises(HarnessPinError, match="matches no file"):
            gitops.overlay_harness(repo.path, wt, sha, ["nothing/here/"])


def test_worktree_is_removed_even_on_error(repo, tmp_path):
    with pytest.raises(RuntimeError):
        with gitops.worktree(repo.path, repo.sha("main"), tmp_path, "wt"):
            raise RuntimeError("boom")
    assert not (tmp_path / "wt").exists()
