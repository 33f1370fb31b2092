"""GitHubForge through PyGithub against the fake GitHub server (real HTTP on loopback)."""

from __future__ import annotations

import json

import pytest

from evalbot.forge.base import CHECK_NAME, Forge
from evalbot.report.scorecard import SCORECARD_MARKER_PREFIX
from evalbot.settings.tiers import NEEDS_REBASE_LABEL, TIER_LABEL_PREFIXES
from evalbot.forge.github import GitHubForge
from evalbot.forge.github_retry import ForgeRefused, ForgeUnavailable, RetryPolicy
from fakegithub import APP_LOGIN, FakeGitHub, fake_sha

REPO = "octo/dspark"


@pytest.fixture(scope="module")
def fake():
    with FakeGitHub() as server:
        yield server


@pytest.fixture
def gh(fake, tmp_path):
    fake.faults.clear()
    fake.add_repo(REPO)
    fake.add_pull(REPO, 7, title="Fuse the verify step")
    sleeps: list[float] = []
    forge = GitHubForge.from_token("app-token", REPO, base_url=fake.base_url, throttle=False, receipts_dir=tmp_path,
                                   retry=RetryPolicy(attempts=4), sleep=sleeps.append)
    forge.sleeps = sleeps
    return forge


def test_is_a_forge(gh):
    assert isinstance(gh, Forge)


def test_get_pull_maps_fields(gh, fake):
    pull = gh.get_pull(7)
    assert (pull.number, pull.title, pull.state, pull.base_ref, pull.draft, pull.mergeable) == (7, "Fuse the verify step", "open", "main", False, True)
    assert pull.head_sha == fake.repo(REPO).pulls[7].head_sha
    assert pull.author_association == "CONTRIBUTOR"


def test_list_open_pulls_skips_closed_and_pages(gh, fake):
    for n in range(8, 40):
        fake.add_pull(REPO, n)
    fake.repo(REPO).pulls[9].state = "closed"
    before = fake.count("GET", r"/pulls/\d+$")
    numbers = [p.number for p in gh.list_open_pulls()]
    assert 9 not in numbers and numbers[:2] == [7, 8] and len(numbers) == 32  # 2 pages of 30
    assert fake.count("GET", r"/pulls/\d+$") == before  # no per-PR fetch


def test_replace_labels_swaps_the_tier_pair_and_keeps_others(gh, fake):
    fake.repo(REPO).issue_labels[7] = ["eval-dspark:S", "eval:S", "bug", "dspark-needs-rebase"]
    gh.replace_labels(7, TIER_LABEL_PREFIXES, ["eval-dspark:L", "eval:L"])
    assert sorted(fake.labels_on(REPO, 7)) == sorted(["bug", "dspark-needs-rebase", "eval-dspark:L", "eval:L"])
    created = fake.repo(REPO).labels
    assert created["eval-dspark:L"]["color"] == "0e8a16" and "tier L" in created["eval-dspark:L"]["description"]


def test_replace_labels_is_idempotent(gh, fake):
    gh.replace_labels(7, TIER_LABEL_PREFIXES, ["eval-dspark:XS", "eval:XS"])
    writes = fake.count("POST", r"/labels$") + fake.count("DELETE", r"/labels/")
    gh.replace_labels(7, TIER_LABEL_PREFIXES, ["eval-dspark:XS", "eval:XS"])
    assert fake.count("POST", r"/labels$") + fake.count("DELETE", r"/labels/") == writes
    assert sorted(fake.labels_on(REPO, 7)) == ["eval-dspark:XS", "eval:XS"]


def test_add_and_remove_label(gh, fake):
    gh.add_label(7, NEEDS_REBASE_LABEL)
    assert NEEDS_REBASE_LABEL in fake.labels_on(REPO, 7)
    assert fake.repo(REPO).labels[NEEDS_REBASE_LABEL]["color"] == "fbca04"
    gh.remove_label(7, NEEDS_REBASE_LABEL)
    gh.remove_label(7, NEEDS_REBASE_LABEL)  # absent: no error
    assert NEEDS_REBASE_LABEL not in fake.labels_on(REPO, 7)


def test_sticky_comment_is_edited_in_place(gh, fake):
    first = gh.upsert_sticky_comment(7, f"{SCORECARD_MARKER_PREFIX} v1 sha=aaa -->", f"card one\n{SCORECARD_MARKER_PREFIX} v1 sha=aaa -->")
    gh.comment(7, "an unrelated comment")
    second = gh.upsert_sticky_comment(7, f"{SCORECARD_MARKER_PREFIX} v1 sha=bbb -->", "card two")
    assert first == second
    bodies = [c["body"] for c in fake.comments_on(REPO, 7)]
    assert len(bodies) == 2 and bodies[0].startswith("card two") and f"{SCORECARD_MARKER_PREFIX} v1 sha=bbb -->" in bodies[0]


def test_sticky_comment_ignores_a_marker_posted_by_someone_else(fake, tmp_path):
    fake.add_repo(REPO)
    fake.add_pull(REPO, 7)
    impostor = GitHubForge.from_token("pat-token", REPO, base_url=fake.base_url, throttle=False, receipts_branch="")
    impostor.comment(7, f"ha {SCORECARD_MARKER_PREFIX} -->")
    bot = GitHubForge.from_token("app-token", REPO, base_url=fake.base_url, throttle=False, bot_login=APP_LOGIN, receipts_branch="")
    bot.upsert_sticky_comment(7, f"{SCORECARD_MARKER_PREFIX} -->", "real card")
    comments = fake.comments_on(REPO, 7)
    assert [c["user"] for c in comments] == ["someone", APP_LOGIN] and comments[0]["body"].startswith("ha")


def test_sticky_comment_never_takes_over_a_users_marker_comment(fake):
    """An App with write access may edit anyone's comment (the fake allows it, as GitHub does): without
    `bot_login` the bot asks GitHub who it is and still edits only its own comment."""
    fake.add_repo(REPO)
    fake.add_pull(REPO, 7)
    GitHubForge.from_token("pat-token", REPO, base_url=fake.base_url, throttle=False).comment(7, f"x {SCORECARD_MARKER_PREFIX} -->")
    bot = GitHubForge.from_token("app-token", REPO, base_url=fake.base_url, throttle=False)  # no bot_login
    asked = fake.count("POST", r"^/graphql$")
    first = bot.upsert_sticky_comment(7, f"{SCORECARD_MARKER_PREFIX} -->", "card")
    assert bot.upsert_sticky_comment(7, f"{SCORECARD_MARKER_PREFIX} -->", "card two") == first
    comments = fake.comments_on(REPO, 7)
    assert [c["user"] for c in comments] == ["someone", APP_LOGIN]
    assert comments[0]["body"].startswith("x ") and comments[0]["edits"] == 0 and comments[1]["body"].startswith("card two")
    assert bot.identity() == APP_LOGIN and fake.count("POST", r"^/graphql$") == asked + 1  # asked once


def test_an_apps_identity_comes_from_its_slug_not_graphql(fake):
    """An installation token may not ask GraphQL's `viewer`: an App's forge learns its login from GET /app
    (`whoami`, which `from_app` sets), once, and never asks GraphQL."""
    fake.add_repo(REPO)
    fake.add_pull(REPO, 7)
    asked = []
    bot = GitHubForge.from_token("app-token", REPO, base_url=fake.base_url, throttle=False,
                                 whoami=lambda: asked.append(1) or APP_LOGIN)
    graphql = fake.count("POST", r"^/graphql$")
    first = bot.upsert_sticky_comment(7, f"{SCORECARD_MARKER_PREFIX} -->", "card")
    assert bot.upsert_sticky_comment(7, f"{SCORECARD_MARKER_PREFIX} -->", "card two") == first
    assert bot.identity() == APP_LOGIN and asked == [1] and fake.count("POST", r"^/graphql$") == graphql


def test_the_fake_lets_a_writer_app_edit_others_comments_like_github(fake):
    fake.add_repo(REPO)
    fake.add_pull(REPO, 7)
    cid = GitHubForge.from_token("pat-token", REPO, base_url=fake.base_url, throttle=False).comment(7, "theirs")
    bot = GitHubForge.from_token("app-token", REPO, base_url=fake.base_url, throttle=False)
    bot.repo.get_issue(7).get_comment(int(cid)).edit("edited by the app")
    assert fake.comments_on(REPO, 7)[0]["body"] == "edited by the app"


def test_permission_comes_from_github_and_is_cached(fake):
    fake.add_repo(REPO)
    fake.repo(REPO).permissions.update({"Maint": "maintain", "writer": "write", "reader": "read", "tri": "triage"})
    now = [1000.0]
    gh = GitHubForge.from_token("app-token", REPO, base_url=fake.base_url, throttle=False, clock=lambda: now[0])
    assert [gh.permission(n) for n in ("maint", "writer", "reader", "tri", "stranger")] == [
        "maintain", "write", "read", "triage", "none"]
    asked = fake.count("GET", r"/collaborators/.*/permission$")
    fake.repo(REPO).permissions["writer"] = "read"
    assert gh.permission("writer") == "write" and fake.count("GET", r"/collaborators/.*/permission$") == asked
    now[0] += 61
    assert gh.permission("writer") == "read"


def test_a_custom_role_counts_as_its_base_role(fake):
    """GitHub names a custom repository role in `role_name` and its base in `permission`."""
    fake.add_repo(REPO)
    fake.repo(REPO).permissions.update({"rm": "release-manager:admin", "bot": "ci-bot:write", "odd": "auditor:read"})
    gh = GitHubForge.from_token("app-token", REPO, base_url=fake.base_url, throttle=False)
    assert [gh.permission(n) for n in ("rm", "bot", "odd")] == ["admin", "write", "read"]


def test_permission_lookup_failure_raises(fake):
    fake.add_repo(REPO)
    fake.fail("GET", r"/collaborators/.*/permission$", 403, message="Resource not accessible by integration")
    gh = GitHubForge.from_token("app-token", REPO, base_url=fake.base_url, throttle=False)
    with pytest.raises(ForgeRefused):
        gh.permission("someone")


def test_check_run_lifecycle(gh, fake):
    head = fake.repo(REPO).pulls[7].head_sha
    check_id = gh.start_check(head, CHECK_NAME, "queued for scoring")
    gh.update_check(check_id, status="in_progress", title="scoring", summary="step 1")
    gh.update_check(check_id, status="completed", title="tier L", summary="| card |", conclusion="success", text="details")
    (run,) = fake.check_runs_for(REPO, head)
    assert run["name"] == CHECK_NAME and run["history"] == ["queued", "in_progress", "completed"]
    assert run["conclusion"] == "success" and run["output"]["summary"] == "| card |" and run["output"]["text"] == "details"


def test_check_summary_is_clipped_to_githubs_limit(gh, fake):
    head = fake.repo(REPO).pulls[7].head_sha
    check_id = gh.start_check(head, CHECK_NAME, "x")
    gh.update_check(check_id, status="completed", title="t", summary="y" * 70000, conclusion="neutral")
    (run,) = fake.check_runs_for(REPO, head)
    assert len(run["output"]["summary"]) <= 65535 and run["output"]["summary"].endswith("sticky comment)")


def test_personal_token_falls_back_to_commit_statuses(fake):
    fake.add_repo(REPO)
    pull = fake.add_pull(REPO, 7)
    forge = GitHubForge.from_token("pat-token", REPO, base_url=fake.base_url, throttle=False)
    check_id = forge.start_check(pull.head_sha, CHECK_NAME, "queued")
    forge.update_check(check_id, status="completed", title="DSpark eval: tier M", summary="card", conclusion="success")
    states = [(s["context"], s["state"]) for s in fake.repo(REPO).statuses]
    assert states == [(CHECK_NAME, "pending"), (CHECK_NAME, "success")]


def test_merge_passes_the_scored_sha_and_squashes(gh, fake):
    pull = fake.repo(REPO).pulls[7]
    result = gh.merge(7, pull.head_sha, "Fuse (#7)", "automerged")
    assert result.merged and result.sha == fake.repo(REPO).branches["main"]
    (merge,) = fake.repo(REPO).merges
    assert merge["method"] == "squash" and merge["sha"] == pull.head_sha


def test_merge_of_a_moved_head_is_refused(gh, fake):
    scored = fake.repo(REPO).pulls[7].head_sha
    fake.repo(REPO).pulls[7].head_sha = fake_sha("moved")
    result = gh.merge(7, scored, "t", "m")
    assert not result.merged and "head moved" in result.message
    assert fake.repo(REPO).merges == [] and fake.repo(REPO).pulls[7].state == "open"


def test_merge_of_an_unmergeable_pull_is_refused(gh, fake):
    fake.repo(REPO).pulls[7].mergeable = False
    result = gh.merge(7, fake.repo(REPO).pulls[7].head_sha, "t", "m")
    assert not result.merged and "not mergeable" in result.message


def test_close(gh, fake):
    gh.close(7)
    assert fake.repo(REPO).pulls[7].state == "closed"


def test_branch_head(gh, fake):
    assert gh.branch_head_sha("main") == fake.repo(REPO).branches["main"]


def test_receipt_goes_to_an_orphan_branch_and_locally(gh, fake, tmp_path):
    receipt = json.dumps({"verdict": "L", "signature": "abc"})
    url = gh.store_receipt(7, "a" * 40, receipt)
    again = gh.store_receipt(7, "a" * 40, receipt)  # same receipt twice: a no-op
    assert url == again and url.startswith(f"https://github.com/{REPO}/blob/evalbot-receipts/receipts/pr-7/{'a' * 40}-")
    repo = fake.repo(REPO)
    path = url.split("/blob/evalbot-receipts/", 1)[1]
    assert repo.files[("evalbot-receipts", path)] == receipt
    assert "README.md" in {p for (b, p) in repo.files if b == "evalbot-receipts"}
    assert (tmp_path / path).read_text() == receipt


def test_retries_5xx_then_succeeds(gh, fake):
    fake.fail("GET", r"/pulls/7$", 502, times=2)
    assert gh.get_pull(7).number == 7
    assert len(gh.sleeps) == 2 and gh.sleeps[0] < gh.sleeps[1] + 1


def test_secondary_rate_limit_waits_for_retry_after(gh, fake):
    fake.fail("POST", r"/comments$", 403, times=1, headers={"Retry-After": "7"},
              message="You have exceeded a secondary rate limit. Please wait a few minutes before you try again.")
    gh.comment(7, "hello")
    assert gh.sleeps == [7.0]
    assert [c["body"] for c in fake.comments_on(REPO, 7)] == ["hello"]


def test_gives_up_after_the_last_attempt(gh, fake):
    fake.fail("GET", r"/pulls/7$", 503, times=10)
    with pytest.raises(ForgeUnavailable, match="gave up after 4 attempt"):
        gh.get_pull(7)


def test_a_definite_no_is_not_retried(gh, fake):
    with pytest.raises(ForgeRefused) as err:
        gh.get_pull(404)
    assert err.value.status == 404 and gh.sleeps == []


def test_bad_token_is_refused_clearly(fake):
    fake.add_repo(REPO)
    forge = GitHubForge.from_token("wrong", REPO, base_url=fake.base_url, throttle=False)
    with pytest.raises(ForgeRefused, match="401"):
        forge.get_pull(1)


# -- the pure parts of the adapter ---------------------------------------------------------------------
from evalbot.forge.github import sticky_search_key  # noqa: E402
from evalbot.forge.github_labels import labels_to_change  # noqa: E402
from evalbot.forge.github_retry import is_rate_limited, retry_delay  # noqa: E402

POLICY = RetryPolicy(attempts=5, base_delay=1.0, max_delay=60.0, max_wait_for_reset=300.0)


@pytest.mark.parametrize(
    "attempt,status,headers,message,expected",
    [
        (0, 502, {}, "", 0.5),
        (2, 500, {}, "", 2.0),
        (0, None, None, "connection refused", 0.5),
        (0, 404, {}, "Not Found", None),
        (0, 422, {}, "Validation Failed", None),
        (0, 403, {}, "Resource not accessible by integration", None),
        (0, 403, {"Retry-After": "30"}, "secondary rate limit", 30.0),
        (0, 429, {"retry-after": "5"}, "", 5.0),
        (0, 403, {}, "You have exceeded a secondary rate limit", 60.0),
        (0, 403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "1100"}, "API rate limit exceeded", 101.0),
        (0, 403, {"X-RateLimit-Remaining": "0", "X-RateLimit-Reset": "99999"}, "API rate limit exceeded", None),
        (0, 403, {"Retry-After": "3600"}, "secondary rate limit", None),
        (4, 502, {}, "", None),
    ],
)
def test_retry_delay(attempt, status, headers, message, expected):
    assert retry_delay(attempt, status, headers, message, POLICY, now=1000.0, jitter=0.0) == expected


def test_rate_limit_detection():
    assert is_rate_limited(429, {}, "") and is_rate_limited(403, {"x-ratelimit-remaining": "0"}, "")
    assert not is_rate_limited(403, {"x-ratelimit-remaining": "12"}, "Must have admin rights")


@pytest.mark.parametrize(
    "current,new,remove,add",
    [
        ([], ["eval-dspark:S", "eval:S"], [], ["eval-dspark:S", "eval:S"]),
        (["eval-dspark:S", "eval:S", "bug"], ["eval-dspark:L", "eval:L"], ["eval-dspark:S", "eval:S"], ["eval-dspark:L", "eval:L"]),
        (["eval-dspark:L", "eval:L"], ["eval-dspark:L", "eval:L"], [], []),
        (["eval-dspark:L", "eval:S", "evaluation"], ["eval-dspark:L", "eval:L"], ["eval:S"], ["eval:L"]),
        (["eval-dspark:REJECT", "eval:REJECT"], [], ["eval-dspark:REJECT", "eval:REJECT"], []),
    ],
)
def test_labels_to_change(current, new, remove, add):
    assert labels_to_change(current, ("eval-dspark:", "eval:"), new) == (remove, add)


def test_sticky_search_key_ignores_the_changing_part_of_the_scorecard_marker():
    assert sticky_search_key(f"{SCORECARD_MARKER_PREFIX} v=1 head=abc -->") == SCORECARD_MARKER_PREFIX
    assert sticky_search_key("<!-- other -->") == "<!-- other -->"
