"""The webhook edge under faults (issue 14): a queue write that fails after the ledger took the job, a
locked ledger, a repository name in other letter case, and GitHub's Re-run button and merge queue."""

from __future__ import annotations

import sqlite3
import time

import pytest
from starlette.testclient import TestClient

from evalbot.bot.jobs.ledger import QUEUED
from evalbot.bot.jobs.queue import JobQueue, make_huey, make_ledger
from evalbot.bot.webhook.app import create_app
from fakegithub.helpers import FIXTURE_REPO, payload
from test_webhook_app import Harness


@pytest.fixture
def hook(tmp_path):
    return Harness(tmp_path)


# -- a queue write that fails after the ledger insert ---------------------------------------------------
def test_a_failed_queue_write_does_not_strand_the_job(hook, monkeypatch):
    """Fails without the fix: the redelivery heard "already queued" and no message was ever written,
    so nothing ran until a worker restarted (and recovered every queued job)."""
    task = hook.queue._score_task
    calls = {"n": 0}

    def flaky(*args, **kwargs):
        calls["n"] += 1
        if calls["n"] == 1:
            raise ConnectionError("redis went away mid-delivery")
        return task(*args, **kwargs)

    monkeypatch.setattr(hook.queue, "_score_task", flaky)
    data = payload("pull_request.opened")
    first = hook.post("pull_request", data, delivery="d-strand")
    assert first.status_code == 503 and "redeliver" in first.json()["error"]
    (record,) = hook.queue.ledger.records()
    assert record.state == QUEUED and not record.enqueued and hook.score_keys() == []
    again = hook.post("pull_request", data, delivery="d-strand")  # GitHub's redelivery
    assert again.status_code == 202 and again.json()["status"] == "queued"
    assert hook.score_keys() == [record.key] and hook.queue.ledger.get(record.key).enqueued
    assert hook.post("pull_request", data).json()["status"] == "already queued"  # and now it is
    assert hook.score_keys() == [record.key]


# -- a locked or slow ledger ----------------------------------------------------------------------------------
def test_a_locked_ledger_is_answered_in_time_and_healthz_says_so(tmp_path):
    """Fails without the fix: each delivery hung 30 s on the lock and answered 500, and /healthz (a read)
    stayed green."""
    hook = Harness(tmp_path, ledger_busy_seconds=0.5, webhook_deadline_seconds=3)
    hook.queue = JobQueue(make_huey(hook.settings), make_ledger(hook.settings, busy_timeout=hook.settings.ledger_busy_seconds))
    hook.client = TestClient(create_app(hook.settings, hook.queue))  # as `evalbot serve` builds it
    assert hook.client.get("/healthz").status_code == 200
    locker = sqlite3.connect(tmp_path / "ledger.sqlite3", isolation_level=None)
    locker.execute("BEGIN EXCLUSIVE")
    try:
        started = time.monotonic()
        response = hook.post("pull_request", payload("pull_request.opened"), delivery="d-locked")
        took = time.monotonic() - started
        assert response.status_code == 503 and "redeliver" in response.json()["error"], response.text
        assert took < 3.5  # GitHub waits 10 s
        health = hook.client.get("/healthz")
        assert health.status_code == 503 and "ledger" in health.json()["error"]
    finally:
        locker.execute("ROLLBACK")
        locker.close()
    assert hook.post("pull_request", payload("pull_request.opened"), delivery="d-locked").json()["status"] == "queued"
    assert hook.client.get("/healthz").status_code == 200


def test_the_service_opens_its_ledger_with_a_short_lock_wait(tmp_path):
    from evalbot.bot.jobs.queue import JobQueue
    from evalbot.settings import load_settings

    settings = load_settings(environ={}, repo=FIXTURE_REPO, state_dir=tmp_path, ledger_busy_seconds=1.5)
    assert JobQueue.from_settings(settings, busy_timeout=settings.ledger_busy_seconds).ledger.busy_timeout == 1.5


# -- one PR, one job, whatever the letter case ---------------------------------------------------------------
def test_repository_name_in_other_letter_case_is_the_same_job(hook):
    """Fails without the fix: "codertocat/hello-world" made a second job for the same PR."""
    data = payload("pull_request.opened")
    assert hook.post("pull_request", data).json()["status"] == "queued"
    data["repository"]["full_name"] = FIXTURE_REPO.lower()
    assert hook.post("pull_request", data).json()["status"] == "already queued"
    (key,) = hook.score_keys()
    assert key.startswith(FIXTURE_REPO + "#")
    comment = payload("issue_comment.created")
    comment["repository"]["full_name"] = FIXTURE_REPO.upper()
    comment["comment"]["body"], comment["comment"]["author_association"] = "/rescore", "OWNER"
    comment["issue"]["pull_request"] = {"html_url": "x"}
    hook.post("issue_comment", comment)
    assert [c["repo"] for c in hook.chores() if c["kind"] == "rescore"] == [FIXTURE_REPO]


# -- GitHub's buttons: Re-run, re-run all, the merge queue -------------------------------------------------------
def test_check_run_rerequested_for_our_check_queues_a_rerun(hook):
    """Fails without the fix: `rerequested` answered {"status": "ignored"} and the button did nothing."""
    data = payload("check_run.rerequested")
    data["repository"]["full_name"] = FIXTURE_REPO
    data["check_run"]["name"] = "DSpark eval"
    data["check_run"]["external_id"] = f"{FIXTURE_REPO}#12@{'a' * 40}..{'b' * 40}"  # a fork PR: pull_requests is []
    response = hook.post("check_run", data)
    assert response.status_code == 202 and response.json()["status"] == "queued"
    (chore,) = hook.chores()
    assert chore == {"kind": "rerun", "repo": FIXTURE_REPO, "head_sha": data["check_run"]["head_sha"], "pr_numbers": [12],
                     "requested_by": data["sender"]["login"]}


def test_rerequested_checks_of_other_apps_are_ignored(hook):
    data = payload("check_run.rerequested")
    data["repository"]["full_name"] = FIXTURE_REPO  # its check run is "randscape", not ours
    assert "is not 'DSpark eval'" in hook.post("check_run", data).json()["note"] and hook.chores() == []


def test_check_suite_rerequested_queues_a_rerun_of_its_pulls(hook):
    data = payload("check_suite.rerequested")
    assert hook.post("check_suite", data).json()["status"] == "queued"
    (chore,) = hook.chores()
    assert chore["kind"] == "rerun" and chore["pr_numbers"] == [2] and chore["head_sha"] == data["check_suite"]["head_sha"]


def test_merge_group_asks_for_the_check_on_the_queue_commit(tmp_path):
    data = payload("merge_group.checks_requested")
    hook = Harness(tmp_path, repo=data["repository"]["full_name"], main_branch="main")
    assert hook.post("merge_group", data).json()["status"] == "queued"
    (chore,) = hook.chores()
    assert chore["kind"] == "merge_group" and chore["head_sha"] == data["merge_group"]["head_sha"]
    assert chore["head_ref"].endswith("pr-104-929f8209d40f77f4abc622a499c93a83babdbe64")


def test_merge_groups_into_other_branches_are_ignored(tmp_path):
    data = payload("merge_group.checks_requested")
    hook = Harness(tmp_path, repo=data["repository"]["full_name"], main_branch="release")
    assert "not release" in hook.post("merge_group", data).json()["note"] and hook.chores() == []


# -- one comment, one reply ------------------------------------------------------------------------------------
def test_one_comment_makes_at_most_one_reply(hook):
    """Fails without the fix: a comment of five misused commands queued five replies."""
    from fakegithub.helpers import comment_payload

    body = "\n".join(["/automerge maybe", "/rescore now", "/automerge", "/evalbot help", "/rescore please"])
    hook.post("issue_comment", comment_payload(body, "NONE", login="drive-by"))
    (reply,) = hook.chores()
    assert reply["kind"] == "reply" and reply["rate_key"] == f"{FIXTURE_REPO.lower()}#{payload('issue_comment.created')['issue']['number']}:drive-by"


def test_a_maintainer_comment_runs_its_first_command_only(hook):
    from fakegithub.helpers import comment_payload

    response = hook.post("issue_comment", comment_payload("/rescore\n/automerge on", "OWNER"))
    assert [c["kind"] for c in hook.chores()] == ["rescore"] and "1 more ignored" in response.json()["note"]


def test_ok_to_test_is_for_maintainers(hook):
    from fakegithub.helpers import comment_payload

    hook.post("issue_comment", comment_payload("/ok-to-test", "MEMBER", login="maintainer"))
    hook.post("issue_comment", comment_payload("/ok-to-test", "CONTRIBUTOR", login="friend-of-author"))
    approve, refusal = hook.chores()
    assert approve == {"kind": "ok_to_test", "repo": FIXTURE_REPO, "pr_number": approve["pr_number"], "requested_by": "maintainer",
                       "commented_at": 1557933621.0}  # the comment's created_at: a head pushed after it is not approved
    assert refusal["template"] == "comment_refusal.md.j2"
