"""The local forge: SQLite under .evalbot/, PRs are branches, the Forge Protocol end to end."""

import pytest

from evalbot.errors import ForgeError
from evalbot.forge.base import Forge
from evalbot.report.scorecard import SCORECARD_MARKER_PREFIX
from evalbot.settings.tiers import TIER_LABEL_PREFIXES
from evalbot.forge.local import LocalForge
from evalbot.testing import make_fake_repo


@pytest.fixture
def repo(tmp_path):
    r = make_fake_repo(tmp_path / "repo")
    r.branch("feature", knobs={"dspark_speed": 2.0})
    return r


@pytest.fixture
def forge(repo):
    return LocalForge(repo.path)


def test_implements_the_protocol_and_keeps_state_out_of_git(forge, repo):
    assert isinstance(forge, Forge)
    assert forge.db_path == repo.path / ".evalbot" / "forge.sqlite3"
    assert repo.git("status", "--porcelain") == ""  # .evalbot/ ignores itself


def test_open_get_list(forge, repo):
    pull = forge.open_pull("feature", "main", "Faster drafts")
    assert (pull.number, pull.head_sha, pull.base_sha, pull.title) == (1, repo.sha("feature"), repo.sha("main"), "Faster drafts")
    assert [p.number for p in forge.list_open_pulls()] == [1]
    with pytest.raises(ForgeError, match="already has open PR #1"):
        forge.open_pull("feature", "main")
    with pytest.raises(ForgeError, match="no branch 'ghost'"):
        forge.open_pull("ghost")
    with pytest.raises(ForgeError, match="no local PR #9"):
        forge.get_pull(9)


def test_head_follows_the_branch(forge, repo):
    forge.open_pull("feature")
    repo.git("checkout", "-q", "feature")
    new = repo.commit("more", knobs={"dspark_speed": 2.5})
    repo.git("checkout", "-q", "main")
    assert forge.get_pull(1).head_sha == new


def test_labels_replace_by_prefix(forge):
    forge.open_pull("feature")
    forge.add_label(1, "keep-me")
    forge.replace_labels(1, TIER_LABEL_PREFIXES, ["eval-dspark:S", "eval:S"])
    forge.replace_labels(1, TIER_LABEL_PREFIXES, ["eval-dspark:M", "eval:M"])
    assert forge.get_pull(1).labels == ["keep-me", "eval-dspark:M", "eval:M"]
    forge.replace_labels(1, TIER_LABEL_PREFIXES, ["eval-dspark:M", "eval:M"])  # idempotent
    assert forge.get_pull(1).labels == ["keep-me", "eval-dspark:M", "eval:M"]
    forge.remove_label(1, "keep-me")
    assert forge.get_pull(1).labels == ["eval-dspark:M", "eval:M"]


def test_sticky_comment_is_edited_in_place(forge):
    forge.open_pull("feature")
    forge.comment(1, "a human comment")
    first = forge.upsert_sticky_comment(1, SCORECARD_MARKER_PREFIX, f"{SCORECARD_MARKER_PREFIX} v=1 head=a -->\nold")
    second = forge.upsert_sticky_comment(1, SCORECARD_MARKER_PREFIX, f"{SCORECARD_MARKER_PREFIX} v=1 head=b -->\nnew")
    assert first == second
    bodies = [c["body"] for c in forge.comments(1)]
    assert len(bodies) == 2 and bodies[1].endswith("new")


def test_checks_and_receipts(forge):
    pull = forge.open_pull("feature")
    cid = forge.start_check(pull.head_sha, "DSpark eval", "queued")
    forge.update_check(cid, status="completed", title="eval-dspark:S", summary="s", conclusion="success")
    (check,) = forge.checks(pull.head_sha)
    assert (check["status"], check["conclusion"], check["title"]) == ("completed", "success", "eval-dspark:S")
    with pytest.raises(ForgeError):
        forge.update_check("999", status="completed", title="", summary="")
    ref = forge.store_receipt(1, pull.head_sha, '{"payload": ""}')
    assert ref.endswith(".intoto.json") and open(ref).read() == '{"payload": ""}\n'
    assert forge.receipts(1)[0]["path"] == ref


def test_squash_merge_checks_the_head_and_lands_one_commit(forge, repo):
    pull = forge.open_pull("feature", title="Faster drafts")
    old_main = repo.sha("main")
    moved = forge.merge(1, "0" * 40, "t", "m")
    assert not moved.merged and "head moved" in moved.message
    result = forge.merge(1, pull.head_sha, "Faster drafts (#1)", "scored S")
    assert result.merged
    assert repo.sha("main") == result.sha
    assert repo.git("rev-parse", f"{result.sha}^") == old_main  # one squash commit on top of main
    assert '"dspark_speed": 2.0' in repo.git("show", f"{result.sha}:knobs.json")
    assert repo.git("status", "--porcelain") == ""  # the checked-out main was fast-forwarded cleanly
    assert forge.get_pull(1).state == "merged"
    assert forge.merges()[0]["merge_sha"] == result.sha
    assert not forge.merge(1, pull.head_sha, "t", "m").merged


def test_conflicting_merge_is_refused(forge, repo):
    repo.commit("main edits knobs", knobs={"dspark_speed": 0.5})
    pull = forge.open_pull("feature")
    before = repo.sha("main")
    result = forge.merge(1, pull.head_sha, "t", "m")
    assert not result.merged and "does not merge cleanly" in result.message
    assert repo.sha("main") == before


def test_close(forge):
    forge.open_pull("feature")
    forge.close(1)
    assert forge.get_pull(1).state == "closed"
    assert forge.list_open_pulls() == []
