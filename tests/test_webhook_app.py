"""The webhook service: signatures, size caps, validation, dedupe, routing into the queue.

Inputs are GitHub's own example payloads (tests/fixtures/github), changed one field at a time.
"""

from __future__ import annotations

import json

import pytest
from starlette.testclient import TestClient

from evalbot.bot.jobs.ledger import QUEUED
from evalbot.bot.jobs.queue import JobQueue, make_huey, make_ledger
from evalbot.bot.webhook.app import create_app
from evalbot.settings import load_settings
from evalbot.bot.webhook.signature import sign
from fakegithub.helpers import FIXTURE_MAIN, FIXTURE_REPO, SECRET, comment_payload, payload, post_event, webhook_headers


def make_settings(tmp_path, **overrides):
    values = dict(repo=FIXTURE_REPO, main_branch=FIXTURE_MAIN, webhook_secret=SECRET, state_dir=tmp_path, max_body_bytes=64 * 1024)
    values.update(overrides)
    return load_settings(environ={}, **values)


class Harness:
    def __init__(self, tmp_path, **overrides):
        self.settings = make_settings(tmp_path, **overrides)
        self.queue = JobQueue(make_huey(self.settings), make_ledger(self.settings))
        self.client = TestClient(create_app(self.settings, self.queue))

    def post(self, event, data, **kw):
        return post_event(self.client, event, data, **kw)

    def raw(self, body: bytes, headers: dict):
        return self.client.post("/webhook", content=body, headers=headers)

    def queued_messages(self) -> list[tuple[str, tuple]]:
        return [(t.name, t.args) for t in (self.queue.huey.deserialize_task(m) for m in self.queue.huey.storage.enqueued_items())]

    def chores(self) -> list[dict]:
        return [args[0] for name, args in self.queued_messages() if name == "evalbot.chore"]

    def score_keys(self) -> list[str]:
        return [args[0] for name, args in self.queued_messages() if name == "evalbot.score"]


@pytest.fixture
def hook(tmp_path):
    return Harness(tmp_path)


# -- the happy paths -----------------------------------------------------------------------------------
@pytest.mark.parametrize("action", ["opened", "synchronize", "reopened", "ready_for_review"])
def test_pull_request_events_queue_a_score_job(hook, action):
    data = payload(f"pull_request.{action}")
    response = hook.post("pull_request", data)
    assert response.status_code == 202 and response.json()["status"] == "queued"
    pr = data["pull_request"]
    (key,) = hook.score_keys()
    assert key == f"{FIXTURE_REPO}#{pr['number']}@{pr['head']['sha']}..{pr['base']['sha']}"
    assert hook.queue.ledger.get(key).state == QUEUED
    assert [c["kind"] for c in hook.chores()] == ["announce"]


def test_ping_is_answered(hook):
    response = hook.post("ping", payload("ping"))
    assert response.status_code == 200 and response.json() == {"status": "pong"}


def test_push_to_main_queues_main_moved(hook):
    data = payload("push.branch")
    response = hook.post("push", data)
    assert response.status_code == 202
    assert hook.chores() == [{"kind": "main_moved", "repo": FIXTURE_REPO, "main_sha": data["after"], "before_sha": data["before"]}]


def test_rescore_by_a_maintainer(hook):
    response = hook.post("issue_comment", comment_payload("/rescore", "MEMBER"))
    assert response.status_code == 202
    assert [c["kind"] for c in hook.chores()] == ["rescore"]


@pytest.mark.parametrize("arg,enabled", [("on", True), ("off", False), ("ON", True)])
def test_automerge_toggle_by_a_collaborator(hook, arg, enabled):
    hook.post("issue_comment", comment_payload(f"/automerge {arg}", "COLLABORATOR"))
    (chore,) = hook.chores()
    assert chore["kind"] == "automerge" and chore["enabled"] is enabled


def test_allowlisted_login_may_command(tmp_path):
    hook = Harness(tmp_path, command_allowlist=frozenset({"trusted-friend"}))
    hook.post("issue_comment", comment_payload("/rescore", "NONE", login="Trusted-Friend"))
    assert [c["kind"] for c in hook.chores()] == ["rescore"]


def test_help_is_for_everyone(hook):
    hook.post("issue_comment", comment_payload("/evalbot help", "NONE", login="visitor"))
    (chore,) = hook.chores()
    assert chore["template"] == "comment_help.md.j2" and {r["usage"] for r in chore["context"]["commands"]} >= {"/rescore", "/automerge on|off"}


def test_healthz(hook):
    assert hook.client.get("/healthz").json() == {"status": "ok"}


# -- bad inputs: signatures -----------------------------------------------------------------------------
BODY = json.dumps(payload("pull_request.opened")).encode()


@pytest.mark.parametrize(
    "signature,why",
    [
        (None, "missing X-Hub-Signature-256"),
        ("sha1=" + "0" * 40, "must start with sha256="),
        ("sha256=" + "z" * 64, "not a sha256 hex digest"),
        ("sha256=" + "a" * 63, "not a sha256 hex digest"),
        (sign("the wrong secret", BODY), "does not match"),
        (sign(SECRET, BODY + b" "), "does not match"),
        ("", "missing X-Hub-Signature-256"),
        ("sha256=", "not a sha256 hex digest"),
    ],
)
def test_bad_signatures_get_401_and_queue_nothing(hook, signature, why):
    headers = webhook_headers(BODY, "pull_request")
    headers.pop("X-Hub-Signature-256")
    if signature is not None:
        headers["X-Hub-Signature-256"] = signature
    response = hook.raw(BODY, headers)
    assert response.status_code == 401 and why in response.json()["error"]
    assert hook.queued_messages() == []


def test_tampered_body_with_the_original_signature(hook):
    headers = webhook_headers(BODY, "pull_request")
    tampered = BODY.replace(b'"opened"', b'"closed"')
    assert hook.raw(tampered, headers).status_code == 401


def test_service_without_a_secret_refuses_everything(tmp_path):
    hook = Harness(tmp_path, webhook_secret="")
    headers = webhook_headers(BODY, "pull_request", secret="")
    response = hook.raw(BODY, headers)
    assert response.status_code == 401 and "no webhook secret" in response.json()["error"]


def test_uppercase_hex_signature_is_accepted(hook):
    headers = webhook_headers(BODY, "pull_request")
    headers["X-Hub-Signature-256"] = "sha256=" + headers["X-Hub-Signature-256"][7:].upper()
    assert hook.raw(BODY, headers).status_code == 202


# -- bad inputs: size -----------------------------------------------------------------------------------
def test_body_over_the_cap_is_413(hook):
    big = json.dumps({"padding": "x" * (70 * 1024)}).encode()
    response = hook.raw(big, webhook_headers(big, "pull_request"))
    assert response.status_code == 413 and hook.queued_messages() == []


def test_streamed_body_over_the_cap_without_length_is_413(hook):
    big = b"x" * (70 * 1024)

    def chunks():
        for i in range(0, len(big), 8192):
            yield big[i : i + 8192]

    headers = webhook_headers(big, "pull_request")
    response = hook.client.post("/webhook", content=chunks(), headers=headers)
    assert response.status_code == 413


# -- bad inputs: headers and JSON ----------------------------------------------------------------------------
def _signed(body: bytes, event: str = "pull_request", **header_overrides) -> dict:
    headers = webhook_headers(body, event)
    for name, value in header_overrides.items():
        name = name.replace("_", "-")
        if value is None:
            headers.pop(name)
        else:
            headers[name] = value
    return headers


@pytest.mark.parametrize(
    "body,why",
    [
        (b"{not json", "not valid JSON"),
        (b"\xff\xfe{}", "not valid JSON"),
        (b"[1, 2, 3]", "must be a JSON object"),
        (b"[" * 30000 + b"]" * 30000, "not valid JSON"),
        (b"", "not valid JSON"),
        (b'"just a string"', "must be a JSON object"),
    ],
)
def test_malformed_json_is_400(hook, body, why):
    response = hook.raw(body, _signed(body))
    assert response.status_code == 400 and why in response.json()["error"]


@pytest.mark.parametrize(
    "overrides,why",
    [
        ({"X_GitHub_Event": None}, "X-GitHub-Event"),
        ({"X_GitHub_Event": "../../etc"}, "X-GitHub-Event"),
        ({"X_GitHub_Delivery": None}, "X-GitHub-Delivery"),
        ({"X_GitHub_Delivery": "not a guid; drop table"}, "X-GitHub-Delivery"),
        ({"X_GitHub_Delivery": "a" * 101}, "X-GitHub-Delivery"),
    ],
)
def test_missing_or_malformed_headers_are_400(hook, overrides, why):
    response = hook.raw(BODY, _signed(BODY, **overrides))
    assert response.status_code == 400 and why in response.json()["error"]


def _broken(mutate):
    data = payload("pull_request.opened")
    mutate(data)
    return data


@pytest.mark.parametrize(
    "data,where",
    [
        (_broken(lambda d: d.pop("pull_request")), "pull_request"),
        (_broken(lambda d: d["pull_request"]["head"].__setitem__("sha", "not-a-sha")), "pull_request.head.sha"),
        (_broken(lambda d: d["pull_request"]["head"].__setitem__("sha", "A" * 40)), "pull_request.head.sha"),
        (_broken(lambda d: d.__setitem__("number", -2)), "number"),
        (_broken(lambda d: d.__setitem__("number", "two")), "number"),
        (_broken(lambda d: d["repository"].__setitem__("full_name", "no-slash")), "repository.full_name"),
        (_broken(lambda d: d["pull_request"].__setitem__("base", None)), "pull_request.base"),
        (_broken(lambda d: d.pop("sender")), "sender"),
    ],
)
def test_malformed_pull_request_payloads_are_400(hook, data, where):
    response = hook.post("pull_request", data)
    assert response.status_code == 400 and where in response.json()["error"]
    assert hook.queued_messages() == []


def test_malformed_push_is_400(hook):
    data = payload("push.branch")
    data["after"] = "main"
    response = hook.post("push", data)
    assert response.status_code == 400 and "after" in response.json()["error"]


def test_oversized_comment_body_is_400(tmp_path):
    hook = Harness(tmp_path, max_body_bytes=1024 * 1024)
    response = hook.post("issue_comment", comment_payload("/rescore\n" + "x" * 70000))
    assert response.status_code == 400 and "comment.body" in response.json()["error"]


# -- events and payloads that need no work -------------------------------------------------------------------
def test_unknown_event_is_accepted_and_ignored(hook):
    response = hook.post("star", {"action": "created"})
    assert response.status_code == 202 and response.json()["status"] == "ignored"
    assert hook.queued_messages() == []


@pytest.mark.parametrize("name", ["pull_request.closed", "pull_request.converted_to_draft"])
def test_pull_request_actions_that_need_no_score(hook, name):
    response = hook.post("pull_request", payload(name))
    assert response.status_code == 202 and response.json()["status"] == "ignored"
    assert hook.queued_messages() == []


def test_draft_pull_request_is_skipped(hook):
    data = payload("pull_request.opened")
    data["pull_request"]["draft"] = True
    assert "draft" in hook.post("pull_request", data).json()["note"]
    assert hook.queued_messages() == []


def test_pull_request_into_another_branch_is_skipped(hook):
    data = payload("pull_request.opened")
    data["pull_request"]["base"]["ref"] = "release-1.0"
    assert "targets release-1.0" in hook.post("pull_request", data).json()["note"]
    assert hook.queued_messages() == []


def test_events_of_another_repository_are_ignored(hook):
    data = payload("pull_request.opened")
    data["repository"]["full_name"] = "someone/else"
    assert "not served" in hook.post("pull_request", data).json()["note"]
    assert hook.queued_messages() == []


def test_pushes_that_do_not_move_main(hook):
    assert "does not move" in hook.post("push", payload("push.tag")).json()["note"]
    deletion = payload("push.branch")
    deletion["after"], deletion["deleted"] = "0" * 40, True
    assert "deleted" in hook.post("push", deletion).json()["note"]
    assert hook.queued_messages() == []


# -- replays and idempotency ------------------------------------------------------------------------------------
def test_replayed_delivery_is_a_duplicate(hook):
    data = payload("pull_request.opened")
    first = hook.post("pull_request", data, delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958")
    again = hook.post("pull_request", data, delivery="72d3162e-cc78-11e3-81ab-4c9367dc0958")
    assert first.status_code == 202 and again.status_code == 200 and again.json()["status"] == "duplicate"
    assert len(hook.score_keys()) == 1


def test_dedupe_survives_a_restart(tmp_path):
    data = payload("pull_request.opened")
    Harness(tmp_path).post("pull_request", data, delivery="delivery-1")
    assert Harness(tmp_path).post("pull_request", data, delivery="delivery-1").json()["status"] == "duplicate"


def test_same_job_from_a_new_delivery_is_not_queued_twice(hook):
    data = payload("pull_request.opened")
    hook.post("pull_request", data)
    response = hook.post("pull_request", data)
    assert response.json()["status"] == "already queued" and len(hook.score_keys()) == 1


def test_queue_failure_is_503_and_lets_the_redelivery_through(hook, monkeypatch):
    def broken(*a, **k):
        raise ConnectionError("redis is down")

    monkeypatch.setattr(hook.queue, "submit", broken)
    response = hook.post("pull_request", payload("pull_request.opened"), delivery="d-503")
    assert response.status_code == 503 and "redeliver" in response.json()["error"]
    monkeypatch.undo()
    assert hook.post("pull_request", payload("pull_request.opened"), delivery="d-503").json()["status"] == "queued"


# -- commands from people who may not use them, and other odd comments ---------------------------------------
@pytest.mark.parametrize("association", ["NONE", "CONTRIBUTOR", "FIRST_TIME_CONTRIBUTOR", "FIRST_TIMER", "MANNEQUIN"])
def test_commands_from_untrusted_authors_get_a_polite_refusal(hook, association):
    hook.post("issue_comment", comment_payload("/automerge on", association, login="drive-by"))
    (chore,) = hook.chores()
    assert chore["template"] == "comment_refusal.md.j2" and chore["context"] == {"login": "drive-by", "command": "/automerge on|off"}


@pytest.mark.parametrize("body,problem", [("/automerge maybe", "does not understand"), ("/automerge", "needs an argument"), ("/rescore now please", "takes no argument")])
def test_misused_commands_get_their_usage(hook, body, problem):
    hook.post("issue_comment", comment_payload(body, "OWNER"))
    (chore,) = hook.chores()
    assert chore["template"] == "comment_command_usage.md.j2" and chore["context"]["problem"].startswith(problem)


@pytest.mark.parametrize(
    "data",
    [
        comment_payload("/rescore", "OWNER", login="other-bot[bot]", user_type="Bot"),
        comment_payload("```\n/rescore\n```", "OWNER"),
        comment_payload("please /rescore this", "OWNER"),
        comment_payload("/retest", "OWNER"),
        comment_payload("> /rescore", "OWNER"),
    ],
)
def test_comments_that_are_not_commands_for_us(hook, data):
    assert hook.post("issue_comment", data).status_code == 202
    assert hook.chores() == []


def test_edited_comment_is_ignored(hook):
    data = payload("issue_comment.edited")
    data["comment"]["body"] = "/rescore"
    assert "ignored" in hook.post("issue_comment", data).json()["note"]
    assert hook.chores() == []


def test_command_on_an_issue_is_answered(hook):
    hook.post("issue_comment", comment_payload("/rescore", "OWNER", on_pull=False))
    (chore,) = hook.chores()
    assert chore["template"] == "comment_not_a_pull.md.j2"


def test_wrong_methods(hook):
    assert hook.client.get("/webhook").status_code == 405
    assert hook.client.post("/healthz").status_code == 405
    assert hook.client.get("/nothing-here").status_code == 404


# -- /metrics stays bounded -------------------------------------------------------------------------------
def _delivery_series(hook) -> dict[tuple[str, str], float]:
    from prometheus_client.parser import text_string_to_metric_families

    text = hook.client.get("/metrics").text
    return {(s.labels["event"], s.labels["status"]): s.value for family in text_string_to_metric_families(text)
            for s in family.samples if s.name == "evalbot_webhook_deliveries_total"}


def test_unsigned_or_unknown_events_cannot_mint_metric_series(hook):
    # an unauthenticated sender varies X-GitHub-Event: every such delivery is counted under "other"
    for i in range(40):
        response = hook.raw(b"{}", {"X-GitHub-Event": f"{'E' * 200}{i}", "X-GitHub-Delivery": f"d-{i}",
                                    "X-Hub-Signature-256": "sha256=00"})
        assert response.status_code == 401
    # a signed but unknown event, and an unsigned known one, are "other" too
    body = b"{}"
    hook.raw(body, {"X-GitHub-Event": "deployment_status", "X-GitHub-Delivery": "d-x", "X-Hub-Signature-256": sign(SECRET, body)})
    hook.raw(body, {"X-GitHub-Event": "pull_request", "X-GitHub-Delivery": "d-y", "X-Hub-Signature-256": "sha256=00"})
    hook.post("ping", payload("ping"))
    series = _delivery_series(hook)
    assert series == {("other", "unauthorized"): 41.0, ("other", "ignored"): 1.0, ("ping", "pong"): 1.0}
