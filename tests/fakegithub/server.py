"""A stateful fake of GitHub's REST API for tests: real HTTP on 127.0.0.1, driven through PyGithub.

Routes and response fields come from GitHub's official description (openapi_subset.json, derived
from npm @octokit/openapi). It keeps repos, branches, pulls, labels, issue comments, check runs,
commit statuses, git objects for the receipts branch, and merges with the head-SHA check (409).
Faults can be injected (5xx, secondary rate limits) to test retries.
"""

from __future__ import annotations

import base64
import hashlib
import itertools
import re
import socket
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import unquote, urlencode

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from fakegithub.shapes import FIXED_TIME, shape

APP_LOGIN = "dspark-evalbot[bot]"


def fake_sha(*parts: object) -> str:
    return hashlib.sha1("/".join(map(str, parts)).encode()).hexdigest()


@dataclass
class FakePull:
    number: int
    title: str
    author: str
    head_sha: str
    head_ref: str
    base_ref: str
    base_sha: str
    draft: bool = False
    state: str = "open"
    merged: bool = False
    mergeable: bool | None = True
    author_association: str = "CONTRIBUTOR"
    merge_commit_sha: str | None = None
    head_repo: str | None = ""  # "": the base repository itself; "owner/name": a fork; None: a deleted fork


@dataclass
class FakeRepo:
    owner: str
    name: str
    default_branch: str = "main"
    branches: dict[str, str] = field(default_factory=dict)
    labels: dict[str, dict] = field(default_factory=dict)  # name -> {id, color, description}
    issue_labels: dict[int, list[str]] = field(default_factory=dict)
    pulls: dict[int, FakePull] = field(default_factory=dict)
    comments: dict[int, dict] = field(default_factory=dict)  # id -> {issue, body, user, created_at, updated_at}
    check_runs: dict[int, dict] = field(default_factory=dict)
    statuses: list[dict] = field(default_factory=list)
    files: dict[tuple[str, str], str] = field(default_factory=dict)  # (branch, path) -> content
    git_objects: dict[str, dict] = field(default_factory=dict)
    merges: list[dict] = field(default_factory=list)
    # login -> admin | maintain | write | triage | read; anyone else: "none" (a public repository's reader)
    permissions: dict[str, str] = field(default_factory=lambda: {"maintainer": "admin"})

    @property
    def full_name(self) -> str:
        return f"{self.owner}/{self.name}"


@dataclass
class Fault:
    method: str
    pattern: re.Pattern
    status: int
    remaining: int
    headers: dict[str, str]
    message: str


class FakeGitHub:
    """Use as a context manager; `base_url` is what PyGithub's Github(base_url=...) takes."""

    def __init__(self, tokens: dict[str, tuple[str, str]] | None = None):
        # token -> (login, kind); kind "app" may write check runs, "pat" may not (as on GitHub)
        self.tokens = tokens or {"app-token": (APP_LOGIN, "app"), "pat-token": ("someone", "pat")}
        self.repos: dict[str, FakeRepo] = {}
        self.lock = threading.RLock()
        self.requests: list[tuple[str, str, int]] = []
        self.faults: list[Fault] = []
        self._ids = itertools.count(1000)
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self.port = 0

    # -- lifecycle ------------------------------------------------------------------------------------
    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> "FakeGitHub":
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        # Accepted sockets inherit this; without it a large response waits ~40 ms on a delayed ACK.
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        sock.bind(("127.0.0.1", 0))
        self.port = sock.getsockname()[1]
        config = uvicorn.Config(self.app(), log_level="warning", lifespan="off", access_log=False)
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [sock]}, daemon=True)
        self._thread.start()
        deadline = time.monotonic() + 10
        while not self._server.started:
            if time.monotonic() > deadline:
                raise RuntimeError("fake GitHub did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
            self._thread.join(timeout=10)

    def __enter__(self) -> "FakeGitHub":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    # -- seeding and inspection (tests call these directly) ---------------------------------------------
    def add_repo(self, full_name: str, main_sha: str | None = None, default_branch: str = "main") -> FakeRepo:
        owner, name = full_name.split("/")
        repo = FakeRepo(owner, name, default_branch)
        repo.branches[default_branch] = main_sha or fake_sha(full_name, "main")
        with self.lock:
            self.repos[full_name.lower()] = repo
        return repo

    def add_pull(self, full_name: str, number: int, head_sha: str | None = None, **kw) -> FakePull:
        repo = self.repos[full_name.lower()]
        pull = FakePull(
            number=number, title=kw.pop("title", f"PR {number}"), author=kw.pop("author", "contributor"),
            head_sha=head_sha or fake_sha(full_name, number, "head"), head_ref=kw.pop("head_ref", f"feature-{number}"),
            base_ref=kw.pop("base_ref", repo.default_branch), base_sha=kw.pop("base_sha", repo.branches[repo.default_branch]), **kw,
        )
        with self.lock:
            repo.pulls[number] = pull
            repo.issue_labels.setdefault(number, [])
        return pull

    def repo(self, full_name: str) -> FakeRepo:
        return self.repos[full_name.lower()]

    def comments_on(self, full_name: str, number: int) -> list[dict]:
        return [c for c in self.repo(full_name).comments.values() if c["issue"] == number]

    def labels_on(self, full_name: str, number: int) -> list[str]:
        return list(self.repo(full_name).issue_labels.get(number, []))

    def check_runs_for(self, full_name: str, head_sha: str) -> list[dict]:
        return [c for c in self.repo(full_name).check_runs.values() if c["head_sha"] == head_sha]

    def fail(self, method: str, path_regex: str, status: int, times: int = 1, headers: dict | None = None, message: str = "Server Error") -> None:
        with self.lock:
            self.faults.append(Fault(method.upper(), re.compile(path_regex), status, times, headers or {}, message))

    def count(self, method: str, path_regex: str) -> int:
        pattern = re.compile(path_regex)
        return sum(1 for m, p, _ in self.requests if m == method.upper() and pattern.search(p))

    # -- the app -------------------------------------------------------------------------------------------
    def app(self) -> Starlette:
        R = "/repos/{owner}/{repo}"
        routes = [
            Route(R, self.get_repo, methods=["GET"]),
            Route(R + "/pulls", self.list_pulls, methods=["GET"]),
            Route(R + "/pulls/{number:int}", self.get_pull, methods=["GET"]),
            Route(R + "/pulls/{number:int}", self.update_pull, methods=["PATCH"]),
            Route(R + "/pulls/{number:int}/merge", self.merge_pull, methods=["PUT"]),
            Route(R + "/labels", self.list_labels, methods=["GET"]),
            Route(R + "/labels", self.create_label, methods=["POST"]),
            Route(R + "/issues/{number:int}/labels", self.issue_labels, methods=["GET"]),
            Route(R + "/issues/{number:int}/labels", self.add_issue_labels, methods=["POST"]),
            Route(R + "/issues/{number:int}/labels/{name:path}", self.remove_issue_label, methods=["DELETE"]),
            Route(R + "/issues/{number:int}/comments", self.list_comments, methods=["GET"]),
            Route(R + "/issues/{number:int}/comments", self.create_comment, methods=["POST"]),
            Route(R + "/issues/comments/{comment_id:int}", self.edit_comment, methods=["PATCH"]),
            Route(R + "/check-runs", self.create_check_run, methods=["POST"]),
            Route(R + "/check-runs/{check_id:int}", self.get_check_run, methods=["GET"]),
            Route(R + "/check-runs/{check_id:int}", self.update_check_run, methods=["PATCH"]),
            Route(R + "/statuses/{sha}", self.create_status, methods=["POST"]),
            Route(R + "/branches/{branch:path}", self.get_branch, methods=["GET"]),
            Route(R + "/commits/{ref}", self.get_commit, methods=["GET"]),
            Route(R + "/git/ref/{ref:path}", self.get_git_ref, methods=["GET"]),
            Route(R + "/git/refs", self.create_git_ref, methods=["POST"]),
            Route(R + "/git/trees", self.create_git_tree, methods=["POST"]),
            Route(R + "/git/commits", self.create_git_commit, methods=["POST"]),
            Route(R + "/contents/{path:path}", self.put_contents, methods=["PUT"]),
            Route(R + "/collaborators/{username}/permission", self.collaborator_permission, methods=["GET"]),
        ]
        app = Starlette(routes=routes)
        fake = self

        class Gate:
            """Auth, fault injection and the request log, around every route."""

            def __init__(self, inner):
                self.inner = inner

            async def __call__(self, scope, receive, send):
                if scope["type"] != "http":
                    return await self.inner(scope, receive, send)
                request = Request(scope)
                method, path = request.method, request.url.path

                async def send_logged(message):
                    # Log before the first byte leaves: a client that counts requests right after
                    # its call returns must see this one (logging after the response raced it).
                    if message["type"] == "http.response.start":
                        with fake.lock:
                            fake.requests.append((method, path, message["status"]))
                    await send(message)

                token = request.headers.get("authorization", "").split(" ", 1)[-1]
                if token not in fake.tokens:
                    response = _error(401, "Bad credentials")
                else:
                    scope.setdefault("state", {})["login"], scope["state"]["kind"] = fake.tokens[token]
                    response = fake._take_fault(method, path)
                    if response is None and (method, path) == ("POST", "/graphql"):
                        # GraphQL is not REST (not in the REST description): only `{ viewer { login } }`,
                        # which answers for a personal token and an App's installation token alike
                        response = JSONResponse({"data": {"viewer": {"login": fake.tokens[token][0]}}})
                if response is not None:
                    await response(scope, receive, send_logged)
                else:
                    await self.inner(scope, receive, send_logged)

        return Gate(app)

    def _take_fault(self, method: str, path: str) -> Response | None:
        with self.lock:
            for fault in self.faults:
                if fault.remaining > 0 and fault.method == method and fault.pattern.search(path):
                    fault.remaining -= 1
                    return _error(fault.status, fault.message, fault.headers)
        return None

    # -- helpers -------------------------------------------------------------------------------------------
    def _repo(self, request: Request) -> FakeRepo | None:
        return self.repos.get(f"{request.path_params['owner']}/{request.path_params['repo']}".lower())

    @staticmethod
    def _base(request: Request) -> str:
        return str(request.base_url).rstrip("/")

    def _user(self, login: str, base: str) -> dict:
        return shape("simple-user", {"login": login, "id": abs(hash(login)) % 10**6, "type": "Bot" if login.endswith("[bot]") else "User",
                                     "url": f"{base}/users/{login}", "html_url": f"https://github.com/{login}"}, base)

    def _label(self, repo: FakeRepo, name: str, base: str) -> dict:
        label = repo.labels.get(name, {"id": 0, "color": "ededed", "description": None})
        return shape("label", {"id": label["id"], "name": name, "color": label["color"], "description": label["description"],
                               "default": False, "url": f"{base}/repos/{repo.full_name}/labels/{name}"}, base)

    def _repository(self, repo: FakeRepo, base: str) -> dict:
        return shape("repository", {"name": repo.name, "full_name": repo.full_name, "default_branch": repo.default_branch,
                                    "owner": self._user(repo.owner, base), "url": f"{base}/repos/{repo.full_name}"}, base)

    def _head_repository(self, repo: FakeRepo, pull: FakePull, base: str) -> dict | None:
        if pull.head_repo is None:
            return None
        if not pull.head_repo:
            return self._repository(repo, base)
        owner, name = pull.head_repo.split("/")
        return shape("repository", {"name": name, "full_name": pull.head_repo, "default_branch": "main",
                                    "owner": self._user(owner, base), "url": f"{base}/repos/{pull.head_repo}"}, base)

    def _pull(self, repo: FakeRepo, pull: FakePull, base: str, schema: str = "pull-request") -> dict:
        url = f"{base}/repos/{repo.full_name}/pulls/{pull.number}"
        values = {
            "url": url, "id": pull.number + 5000, "number": pull.number, "state": pull.state, "title": pull.title, "body": "",
            "html_url": f"https://github.com/{repo.full_name}/pull/{pull.number}",
            "issue_url": f"{base}/repos/{repo.full_name}/issues/{pull.number}",
            "user": self._user(pull.author, base), "draft": pull.draft, "author_association": pull.author_association,
            "labels": [self._label(repo, name, base) for name in repo.issue_labels.get(pull.number, [])],
            "head": {"ref": pull.head_ref, "sha": pull.head_sha, "label": f"{pull.author}:{pull.head_ref}",
                     "repo": self._head_repository(repo, pull, base), "user": self._user(pull.author, base)},
            "base": {"ref": pull.base_ref, "sha": pull.base_sha, "label": f"{repo.owner}:{pull.base_ref}",
                     "repo": self._repository(repo, base), "user": self._user(repo.owner, base)},
            "merge_commit_sha": pull.merge_commit_sha, "created_at": FIXED_TIME, "updated_at": FIXED_TIME,
        }
        if schema == "pull-request":
            values.update({"merged": pull.merged, "mergeable": pull.mergeable if pull.state == "open" else None,
                           "mergeable_state": "clean" if pull.mergeable else "dirty"})
        return shape(schema, values, base)

    def _paged(self, request: Request, items: list) -> JSONResponse:
        per_page = min(100, max(1, int(request.query_params.get("per_page", 30))))
        page = max(1, int(request.query_params.get("page", 1)))
        chunk = items[(page - 1) * per_page: page * per_page]
        headers = {}
        if page * per_page < len(items):
            query = dict(request.query_params)
            query.update({"per_page": str(per_page), "page": str(page + 1)})
            headers["Link"] = f'<{self._base(request)}{request.url.path}?{urlencode(query)}>; rel="next"'
        return JSONResponse(chunk, headers=headers)

    def _next_id(self) -> int:
        return next(self._ids)

    # -- repos and pulls --------------------------------------------------------------------------------------
    async def get_repo(self, request):
        repo = self._repo(request)
        if repo is None:
            return _error(404, "Not Found")
        return JSONResponse(shape("full-repository", {"name": repo.name, "full_name": repo.full_name,
                                                      "default_branch": repo.default_branch}, self._base(request)))

    async def list_pulls(self, request):
        repo = self._repo(request)
        if repo is None:
            return _error(404, "Not Found")
        state = request.query_params.get("state", "open")
        with self.lock:
            pulls = [p for n, p in sorted(repo.pulls.items()) if state == "all" or p.state == state]
            items = [self._pull(repo, p, self._base(request), "pull-request-simple") for p in pulls]
        return self._paged(request, items)

    async def get_pull(self, request):
        repo = self._repo(request)
        pull = repo and repo.pulls.get(request.path_params["number"])
        if pull is None:
            return _error(404, "Not Found")
        with self.lock:
            return JSONResponse(self._pull(repo, pull, self._base(request)))

    async def update_pull(self, request):
        repo = self._repo(request)
        pull = repo and repo.pulls.get(request.path_params["number"])
        if pull is None:
            return _error(404, "Not Found")
        body = await _json(request)
        with self.lock:
            if body.get("state") in ("open", "closed") and not pull.merged:
                pull.state = body["state"]
            if "title" in body:
                pull.title = body["title"]
            return JSONResponse(self._pull(repo, pull, self._base(request)))

    async def merge_pull(self, request):
        repo = self._repo(request)
        pull = repo and repo.pulls.get(request.path_params["number"])
        if pull is None:
            return _error(404, "Not Found")
        body = await _json(request)
        with self.lock:
            if pull.state != "open" or pull.merged:
                return _error(405, "Pull Request is not mergeable")
            if body.get("sha") and body["sha"] != pull.head_sha:
                return _error(409, "Head branch was modified. Review and try the merge again.")
            if pull.mergeable is not True:
                return _error(405, "Pull Request is not mergeable")
            method = body.get("merge_method", "merge")
            new_sha = fake_sha(repo.full_name, "merge", pull.number, pull.head_sha, repo.branches[pull.base_ref])
            repo.branches[pull.base_ref] = new_sha
            pull.state, pull.merged, pull.merge_commit_sha = "closed", True, new_sha
            repo.merges.append({"number": pull.number, "method": method, "sha": body.get("sha"), "title": body.get("commit_title"),
                                "message": body.get("commit_message"), "new_main": new_sha})
        return JSONResponse(shape("pull-request-merge-result", {"sha": new_sha, "merged": True, "message": "Pull Request successfully merged"}))

    # -- labels ------------------------------------------------------------------------------------------------
    async def list_labels(self, request):
        repo = self._repo(request)
        if repo is None:
            return _error(404, "Not Found")
        with self.lock:
            return self._paged(request, [self._label(repo, n, self._base(request)) for n in sorted(repo.labels)])

    async def create_label(self, request):
        repo = self._repo(request)
        body = await _json(request)
        name = body.get("name")
        if repo is None:
            return _error(404, "Not Found")
        if not isinstance(name, str) or not name:
            return _error(422, "Validation Failed")
        with self.lock:
            if name in repo.labels:
                return _error(422, "Validation Failed", data={"errors": [{"resource": "Label", "code": "already_exists", "field": "name"}]})
            repo.labels[name] = {"id": self._next_id(), "color": body.get("color", "ededed"), "description": body.get("description")}
            return JSONResponse(self._label(repo, name, self._base(request)), status_code=201)

    async def issue_labels(self, request):
        repo = self._repo(request)
        number = request.path_params["number"]
        if repo is None or number not in repo.issue_labels:
            return _error(404, "Not Found")
        with self.lock:
            return self._paged(request, [self._label(repo, n, self._base(request)) for n in repo.issue_labels[number]])

    async def add_issue_labels(self, request):
        repo = self._repo(request)
        number = request.path_params["number"]
        if repo is None or number not in repo.issue_labels:
            return _error(404, "Not Found")
        body = await _json(request)
        names = body.get("labels", []) if isinstance(body, dict) else body
        if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
            return _error(422, "Validation Failed")
        with self.lock:
            for name in names:
                if name not in repo.labels:  # GitHub creates unknown labels with the default colour
                    repo.labels[name] = {"id": self._next_id(), "color": "ededed", "description": None}
                if name not in repo.issue_labels[number]:
                    repo.issue_labels[number].append(name)
            return JSONResponse([self._label(repo, n, self._base(request)) for n in repo.issue_labels[number]])

    async def remove_issue_label(self, request):
        repo = self._repo(request)
        number = request.path_params["number"]
        name = unquote(request.path_params["name"])
        with self.lock:
            if repo is None or name not in repo.issue_labels.get(number, []):
                return _error(404, "Label does not exist")
            repo.issue_labels[number].remove(name)
            return JSONResponse([self._label(repo, n, self._base(request)) for n in repo.issue_labels[number]])

    # -- comments ------------------------------------------------------------------------------------------------
    def _comment(self, repo: FakeRepo, comment_id: int, base: str) -> dict:
        c = repo.comments[comment_id]
        return shape("issue-comment", {
            "id": comment_id, "body": c["body"], "user": self._user(c["user"], base), "created_at": c["created_at"],
            "updated_at": c["updated_at"], "url": f"{base}/repos/{repo.full_name}/issues/comments/{comment_id}",
            "html_url": f"https://github.com/{repo.full_name}/pull/{c['issue']}#issuecomment-{comment_id}",
            "issue_url": f"{base}/repos/{repo.full_name}/issues/{c['issue']}", "author_association": "NONE"}, base)

    async def list_comments(self, request):
        repo = self._repo(request)
        number = request.path_params["number"]
        if repo is None or number not in repo.issue_labels:
            return _error(404, "Not Found")
        with self.lock:
            ids = [i for i, c in sorted(repo.comments.items()) if c["issue"] == number]
            return self._paged(request, [self._comment(repo, i, self._base(request)) for i in ids])

    async def create_comment(self, request):
        repo = self._repo(request)
        number = request.path_params["number"]
        if repo is None or number not in repo.issue_labels:
            return _error(404, "Not Found")
        body = await _json(request)
        if not isinstance(body.get("body"), str) or not body["body"]:
            return _error(422, "Validation Failed")
        with self.lock:
            comment_id = self._next_id()
            now = _now()
            repo.comments[comment_id] = {"issue": number, "body": body["body"], "user": request.state.login,
                                         "created_at": now, "updated_at": now, "edits": 0}
            return JSONResponse(self._comment(repo, comment_id, self._base(request)), status_code=201)

    async def edit_comment(self, request):
        repo = self._repo(request)
        comment_id = request.path_params["comment_id"]
        if repo is None or comment_id not in repo.comments:
            return _error(404, "Not Found")
        body = await _json(request)
        if not isinstance(body.get("body"), str):
            return _error(422, "Validation Failed")
        with self.lock:
            comment = repo.comments[comment_id]
            # As on GitHub: an App installed with issues/pull-requests write may edit anyone's comment;
            # a personal token only its user's own (this fake's users have no write access)
            if comment["user"] != request.state.login and request.state.kind != "app":
                return _error(403, "Resource not accessible by personal access token")
            comment.update(body=body["body"], updated_at=_now(), edits=comment["edits"] + 1)
            return JSONResponse(self._comment(repo, comment_id, self._base(request)))

    async def collaborator_permission(self, request):
        repo = self._repo(request)
        if repo is None:
            return _error(404, "Not Found")
        login = request.path_params["username"]
        with self.lock:
            permission = next((p for name, p in repo.permissions.items() if name.lower() == login.lower()), "none")
        role_name, _, base = permission.partition(":")  # "release-manager:admin": a custom role and its base role
        legacy = {"maintain": "write", "triage": "read"}.get(base or role_name, base or role_name)  # GitHub's `permission`
        return JSONResponse(shape("repository-collaborator-permission", {
            "permission": legacy, "role_name": role_name, "user": self._user(login, self._base(request))}, self._base(request)))

    # -- check runs and statuses -------------------------------------------------------------------------------------
    def _check_run(self, repo: FakeRepo, check_id: int, base: str) -> dict:
        c = repo.check_runs[check_id]
        output = dict(c.get("output") or {})
        output.setdefault("annotations_count", 0)
        output.setdefault("annotations_url", f"{base}/repos/{repo.full_name}/check-runs/{check_id}/annotations")
        return shape("check-run", {
            "id": check_id, "name": c["name"], "head_sha": c["head_sha"], "status": c["status"], "conclusion": c.get("conclusion"),
            "started_at": c["started_at"], "completed_at": c.get("completed_at"), "output": output, "external_id": c.get("external_id", ""),
            "url": f"{base}/repos/{repo.full_name}/check-runs/{check_id}",
            "html_url": f"https://github.com/{repo.full_name}/runs/{check_id}", "details_url": c.get("details_url"), "pull_requests": [],
            "check_suite": {"id": 1}, "app": {"id": 1, "slug": "dspark-evalbot", "name": "DSpark EvalBot"}}, base)

    def _check_allowed(self, request) -> Response | None:
        if request.state.kind != "app":
            return _error(403, "Resource not accessible by personal access token")
        return None

    async def create_check_run(self, request):
        repo = self._repo(request)
        if repo is None:
            return _error(404, "Not Found")
        refusal = self._check_allowed(request)
        if refusal:
            return refusal
        body = await _json(request)
        if not isinstance(body.get("name"), str) or not re.fullmatch(r"[0-9a-f]{40}", str(body.get("head_sha", ""))):
            return _error(422, "Validation Failed")
        with self.lock:
            check_id = self._next_id()
            repo.check_runs[check_id] = {"name": body["name"], "head_sha": body["head_sha"], "status": body.get("status", "queued"),
                                         "conclusion": body.get("conclusion"), "output": body.get("output"), "started_at": _now(),
                                         "history": [body.get("status", "queued")], "external_id": body.get("external_id", ""),
                                         "details_url": body.get("details_url")}
            return JSONResponse(self._check_run(repo, check_id, self._base(request)), status_code=201)

    async def get_check_run(self, request):
        repo = self._repo(request)
        check_id = request.path_params["check_id"]
        if repo is None or check_id not in repo.check_runs:
            return _error(404, "Not Found")
        with self.lock:
            return JSONResponse(self._check_run(repo, check_id, self._base(request)))

    async def update_check_run(self, request):
        repo = self._repo(request)
        check_id = request.path_params["check_id"]
        if repo is None or check_id not in repo.check_runs:
            return _error(404, "Not Found")
        refusal = self._check_allowed(request)
        if refusal:
            return refusal
        body = await _json(request)
        with self.lock:
            run = repo.check_runs[check_id]
            status = body.get("status", run["status"])
            if status == "completed" and not body.get("conclusion"):
                return _error(422, "Validation Failed: conclusion is required when status is completed")
            if run["status"] == "completed" and status != "completed":
                return _error(422, "Validation Failed: a completed check run cannot go back")
            if "output" in body:
                if len(str(body["output"].get("summary", ""))) > 65535:
                    return _error(422, "Validation Failed: summary is too long")
                run["output"] = body["output"]
            run["status"] = status
            run["history"].append(status)
            if "details_url" in body:
                run["details_url"] = body["details_url"]
            if "conclusion" in body:
                run["conclusion"] = body["conclusion"]
            if status == "completed":
                run["completed_at"] = _now()
            return JSONResponse(self._check_run(repo, check_id, self._base(request)))

    async def create_status(self, request):
        repo = self._repo(request)
        if repo is None:
            return _error(404, "Not Found")
        body = await _json(request)
        if body.get("state") not in ("error", "failure", "pending", "success"):
            return _error(422, "Validation Failed")
        with self.lock:
            status_id = self._next_id()
            entry = {"id": status_id, "sha": request.path_params["sha"], "state": body["state"],
                     "context": body.get("context", "default"), "description": body.get("description")}
            repo.statuses.append(entry)
        base = self._base(request)
        return JSONResponse(shape("status", {**entry, "url": f"{base}/repos/{repo.full_name}/statuses/{entry['sha']}",
                                             "creator": self._user(request.state.login, base)}, base), status_code=201)

    # -- branches, commits, git objects, contents --------------------------------------------------------------
    async def get_branch(self, request):
        repo = self._repo(request)
        branch = request.path_params["branch"]
        if repo is None or branch not in repo.branches:
            return _error(404, "Branch not found")
        base = self._base(request)
        sha = repo.branches[branch]
        return JSONResponse(shape("branch-with-protection", {
            "name": branch, "protected": False, "protection_url": f"{base}/repos/{repo.full_name}/branches/{branch}/protection",
            "commit": {"sha": sha, "url": f"{base}/repos/{repo.full_name}/commits/{sha}"}}, base))

    async def get_commit(self, request):
        repo = self._repo(request)
        if repo is None:
            return _error(404, "Not Found")
        ref = request.path_params["ref"]
        sha = repo.branches.get(ref, ref)
        if not re.fullmatch(r"[0-9a-f]{40}", sha):
            return _error(422, "No commit found for SHA: " + ref)
        base = self._base(request)
        return JSONResponse(shape("commit", {"sha": sha, "url": f"{base}/repos/{repo.full_name}/commits/{sha}"}, base))

    async def get_git_ref(self, request):
        repo = self._repo(request)
        ref = request.path_params["ref"]
        branch = ref[len("heads/"):] if ref.startswith("heads/") else None
        if repo is None or branch not in repo.branches:
            return _error(404, "Not Found")
        base = self._base(request)
        return JSONResponse(shape("git-ref", {"ref": f"refs/{ref}", "url": f"{base}/repos/{repo.full_name}/git/refs/{ref}",
                                              "object": {"sha": repo.branches[branch], "type": "commit", "url": f"{base}/fake"}}, base))

    async def create_git_ref(self, request):
        repo = self._repo(request)
        body = await _json(request)
        ref, sha = body.get("ref", ""), body.get("sha", "")
        if repo is None:
            return _error(404, "Not Found")
        if not ref.startswith("refs/heads/") or sha not in repo.git_objects:
            return _error(422, "Validation Failed")
        branch = ref[len("refs/heads/"):]
        with self.lock:
            if branch in repo.branches:
                return _error(422, "Reference already exists")
            repo.branches[branch] = sha
            for path, content in repo.git_objects[sha].get("files", {}).items():
                repo.files[(branch, path)] = content
        base = self._base(request)
        return JSONResponse(shape("git-ref", {"ref": ref, "url": f"{base}/repos/{repo.full_name}/git/{ref}",
                                              "object": {"sha": sha, "type": "commit", "url": f"{base}/fake"}}, base), status_code=201)

    async def create_git_tree(self, request):
        repo = self._repo(request)
        body = await _json(request)
        entries = body.get("tree")
        if repo is None:
            return _error(404, "Not Found")
        if not isinstance(entries, list) or not entries:
            return _error(422, "Validation Failed")
        files = {e["path"]: e.get("content", "") for e in entries if isinstance(e, dict) and "path" in e}
        sha = fake_sha("tree", sorted(files.items()))
        with self.lock:
            repo.git_objects[sha] = {"type": "tree", "files": files}
        return JSONResponse(shape("git-tree", {"sha": sha, "truncated": False, "url": f"{self._base(request)}/fake/tree",
                                               "tree": [{"path": p, "mode": "100644", "type": "blob", "sha": fake_sha(p, c)} for p, c in files.items()]}),
                            status_code=201)

    async def create_git_commit(self, request):
        repo = self._repo(request)
        body = await _json(request)
        if repo is None:
            return _error(404, "Not Found")
        tree = body.get("tree")
        if tree not in repo.git_objects or not isinstance(body.get("message"), str):
            return _error(422, "Validation Failed")
        sha = fake_sha("commit", tree, body.get("parents"), body["message"])
        with self.lock:
            repo.git_objects[sha] = {"type": "commit", "files": repo.git_objects[tree]["files"], "parents": body.get("parents", [])}
        base = self._base(request)
        person = {"name": "bot", "email": "bot@example.invalid", "date": FIXED_TIME}
        return JSONResponse(shape("git-commit", {
            "sha": sha, "message": body["message"], "url": f"{base}/repos/{repo.full_name}/git/commits/{sha}", "author": person,
            "committer": person, "tree": {"sha": tree, "url": f"{base}/fake"}, "parents": [],
            "verification": {"verified": False, "reason": "unsigned", "signature": None, "payload": None, "verified_at": None}}, base),
            status_code=201)

    async def put_contents(self, request):
        repo = self._repo(request)
        body = await _json(request)
        if repo is None:
            return _error(404, "Not Found")
        path = unquote(request.path_params["path"])
        branch = body.get("branch", repo.default_branch)
        if branch not in repo.branches:
            return _error(404, f"Branch {branch} not found")
        try:
            content = base64.b64decode(body.get("content", ""), validate=True).decode()
        except Exception:
            return _error(422, "content is not valid Base64")
        with self.lock:
            if (branch, path) in repo.files and not body.get("sha"):
                return _error(422, 'Invalid request.\n\n"sha" wasn\'t supplied.')
            repo.files[(branch, path)] = content
            repo.branches[branch] = fake_sha("contents", branch, path, content)
        base = self._base(request)
        blob_sha = fake_sha("blob", content)
        return JSONResponse({
            "content": {"name": path.rsplit("/", 1)[-1], "path": path, "sha": blob_sha, "size": len(content), "type": "file",
                        "url": f"{base}/repos/{repo.full_name}/contents/{path}?ref={branch}",
                        "html_url": f"https://github.com/{repo.full_name}/blob/{branch}/{path}",
                        "git_url": f"{base}/repos/{repo.full_name}/git/blobs/{blob_sha}", "download_url": None,
                        "_links": {"self": f"{base}/fake", "git": f"{base}/fake", "html": f"{base}/fake"}},
            "commit": {"sha": repo.branches[branch], "message": body.get("message", "")},
        }, status_code=201)


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def _error(status: int, message: str, headers: dict | None = None, data: dict | None = None) -> JSONResponse:
    body = {"message": message, "documentation_url": "https://docs.github.com/rest", **(data or {})}
    return JSONResponse(body, status_code=status, headers=headers or {})


async def _json(request: Request):
    import json

    raw = await request.body()
    if not raw:
        return {}
    try:
        return json.loads(raw)
    except json.JSONDecodeError:
        return {}
