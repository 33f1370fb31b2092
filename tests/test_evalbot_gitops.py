"""Git: resolving refs, the harness manifest and the harness-changed check (the pinned exports: test_sandbox_export)."""

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
    assert patterns == ["harness/", "harness/HARNESS_PATHS"]
    repo.commit("drop manifest", delete=["harness/HARNESS_PATHS"])
    with pytest.raises(HarnessPinError, match="does not exist"):
        gitops.read_manifest(repo.path, "main", "harness/HARNESS_PATHS")


def test_harness_changes_are_the_heads_own(repo):
    patterns = gitops.read_manifest(repo.path, "main", "harness/HARNESS_PATHS")
    repo.branch("engine-only", knobs={"dspark_speed": 2.0})
    repo.branch("touches-harness", files={"harness/settings.py": "NEW_TOKENS = 1\n"})
    repo.branch("touches-prompt", files={"harness/prompts/prose.txt": "short\n"})
    base = repo.sha("main")
    assert gitops.harness_changes(repo.path, base, repo.sha("engine-only"), patterns) == []
    assert gitops.harness_changes(repo.path, base, repo.sha("touches-harness"), patterns) == ["harness/settings.py"]
    assert gitops.harness_changes(repo.path, base, repo.sha("touches-prompt"), patterns) == ["harness/prompts/prose.txt"]
    # main moves its harness after the PR branched: not the PR's change (three-dot diff)
    repo.commit("main: new ruler", files={"harness/serve.py": "# v2\n" + repo.read("harness/serve.py")})
    assert gitops.harness_changes(repo.path, repo.sha("main"), repo.sha("engine-only"), patterns) == []
