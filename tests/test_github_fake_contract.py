"""The fake GitHub serves exactly the routes it claims, in the shapes GitHub's REST description requires."""

from __future__ import annotations

import base64
import re

import httpx
import pytest
from starlette.routing import Route

from fakegithub import FakeGitHub
from fakegithub.shapes import missing_required, operations, subset

REPO = "octo/shapes"


@pytest.fixture(scope="module")
def fake():
    with FakeGitHub() as server:
        server.add_repo(REPO)
        server.add_pull(REPO, 1)
        server.add_pull(REPO, 3, head_sha="c" * 40, mergeable=False)
        yield server


def _template(path: str) -> str:
    return re.sub(r"\{(\w+)(:\w+)?\}", r"{\1}", path)


def test_every_served_route_is_in_githubs_description(fake):
    described = {(o["method"], o["path"]) for o in operations()}
    served = set()
    for route in fake.app().inner.routes:
        if not isinstance(route, Route):
            continue
        path = _template(route.path).replace("{check_id}", "{check_run_id}")
        path = path.replace("{number}", "{issue_number}" if "/issues/" in path else "{pull_number}")
        served |= {(method, path) for method in route.methods if method != "HEAD"}
    assert served == described, (sorted(served - described), sorted(described - served))


def test_the_subset_is_small_and_says_where_it_came_from():
    assert subset()["source"].startswith("@octokit/openapi")
    from fakegithub.shapes import SUBSET_PATH

    assert SUBSET_PATH.stat().st_size < 100_000


def _calls(fake):
    base = f"/repos/{REPO}"
    head = fake.repo(REPO).pulls[1].head_sha
    return [
        ("GET", base, None, "full-repository"),
        ("GET", base + "/pulls?state=open", None, "[]pull-request-simple"),
        ("GET", base + "/pulls/1", None, "pull-request"),
        ("PATCH", base + "/pulls/1", {"title": "renamed"}, "pull-request"),
        ("POST", base + "/labels", {"name": "eval:S", "color": "a2eeef"}, "label"),
        ("GET", base + "/labels", None, "[]label"),
        ("POST", base + "/issues/1/labels", {"labels": ["eval:S"]}, "[]label"),
        ("GET", base + "/issues/1/labels", None, "[]label"),
        ("DELETE", base + "/issues/1/labels/eval:S", None, "[]label"),
        ("POST", base + "/issues/1/comments", {"body": "hi"}, "issue-comment"),
        ("GET", base + "/issues/1/comments", None, "[]issue-comment"),
        ("POST", base + "/check-runs", {"name": "DSpark eval", "head_sha": head}, "check-run"),
        ("POST", base + f"/statuses/{head}", {"state": "pending", "context": "DSpark eval"}, "status"),
        ("GET", base + "/branches/main", None, "branch-with-protection"),
        ("GET", base + f"/commits/{head}", None, "commit"),
        ("GET", base + "/git/ref/heads/main", None, "git-ref"),
        ("POST", base + "/git/trees", {"tree": [{"path": "a", "mode": "100644", "type": "blob", "content": "x"}]}, "git-tree"),
        ("PUT", base + "/contents/x.json", {"message": "m", "content": base64.b64encode(b"{}").decode(), "branch": "main"}, "file-commit"),
        ("PUT", base + "/pulls/1/merge", {"sha": head, "merge_method": "squash"}, "pull-request-merge-result"),
    ]


def test_responses_have_every_required_field(fake):
    client = httpx.Client(base_url=fake.base_url, headers={"Authorization": "token app-token"})
    statuses = {(o["method"], o["path"]): o["status"] for o in operations()}
    for method, path, body, schema in _calls(fake):
        response = client.request(method, path, json=body)
        assert response.status_code in (200, 201), (method, path, response.text)
        assert missing_required(schema, response.json()) == [], (method, path)
    comment_id = client.get(f"/repos/{REPO}/issues/1/comments").json()[0]["id"]
    edited = client.patch(f"/repos/{REPO}/issues/comments/{comment_id}", json={"body": "edited"})
    assert missing_required("issue-comment", edited.json()) == []
    run_id = client.post(f"/repos/{REPO}/check-runs", json={"name": "x", "head_sha": "a" * 40}).json()["id"]
    for method, payload in (("GET", None), ("PATCH", {"status": "completed", "conclusion": "success"})):
        assert missing_required("check-run", client.request(method, f"/repos/{REPO}/check-runs/{run_id}", json=payload).json()) == []
    assert statuses[("PUT", "/repos/{owner}/{repo}/pulls/{pull_number}/merge")] == 200


@pytest.mark.parametrize(
    "method,path,body,status",
    [
        ("PUT", "/pulls/3/merge", {"sha": "c" * 40}, 405),  # not mergeable
        ("PUT", "/pulls/3/merge", {"sha": "0" * 40}, 409),  # head moved
        ("GET", "/pulls/999", None, 404),
        ("POST", "/labels", {"name": ""}, 422),
        ("PATCH", "/check-runs/999999", {"status": "completed"}, 404),
        ("POST", "/check-runs", {"name": "x", "head_sha": "nope"}, 422),
        ("POST", "/statuses/" + "a" * 40, {"state": "bogus"}, 422),
        ("GET", "/branches/nope", None, 404),
    ],
)
def test_errors_use_documented_statuses(fake, method, path, body, status):
    client = httpx.Client(base_url=fake.base_url, headers={"Authorization": "token app-token"})
    response = client.request(method, f"/repos/{REPO}{path}", json=body)
    assert response.status_code == status and "message" in response.json()
    documented = {(o["method"], o["path"]): o["errors"] for o in operations()}
    assert response.status_code in {code for codes in documented.values() for code in codes}


def test_unauthenticated_requests_are_401(fake):
    assert httpx.get(f"{fake.base_url}/repos/{REPO}").status_code == 401
