"""The dashboard's routes, over a history store: served by `evalbot serve` (the check run's Details link
points here) and by `evalbot dashboard` for a local repository's history.

GET /dashboard                       main's figures over commits, the noise floor over time, every PR
GET /dashboard/pr/{n}                one PR's scorings: rounds and their spread, scorecards, receipts
GET /dashboard/scoring/{id}          one scoring: verdict, rounds, raw figures, scorecard
GET /dashboard/receipt/{id}.json     its receipt, exactly as written (verify with `evalbot receipt verify`)
GET /dashboard/history.json          every entry, as JSON (without receipts and scorecards)
"""

from __future__ import annotations

import json
import re
import socket
from pathlib import Path

from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from evalbot.history.store import HistoryStore
from evalbot.report import dashboard as pages

_ID = re.compile(r"^[0-9a-f]{20}$")


def dashboard_routes(history: HistoryStore, *, repo: str | None, templates: Path | None = None) -> list[Route]:
    """`repo`: the repository whose entries are shown (None: every entry of the store, a local one)."""
    title = repo or "local repository"

    async def entries():
        return await run_in_threadpool(history.entries, repo=repo)

    def headers(request: Request) -> dict[str, str]:
        return {"Cache-Control": "no-store"}

    async def overview(request: Request) -> Response:
        html = pages.overview_page(await entries(), repo=title, base=request.scope.get("root_path", ""), templates=templates)
        return HTMLResponse(html, headers=headers(request))

    async def pull(request: Request) -> Response:
        number = request.path_params["number"]
        html = pages.pull_page(await entries(), number, repo=title, base=request.scope.get("root_path", ""), templates=templates)
        return HTMLResponse(html, headers=headers(request))

    async def one(entry_id: str):
        if not _ID.match(entry_id):
            return None
        entry = await run_in_threadpool(history.get, entry_id)
        if entry is None or (repo is not None and entry.repo.lower() != repo.lower()):
            return None
        return entry

    async def scoring(request: Request) -> Response:
        entry = await one(request.path_params["entry_id"])
        base = request.scope.get("root_path", "")
        if entry is None:
            return HTMLResponse(pages.missing_page("No such scoring in the history.", repo=title, base=base, templates=templates),
                                status_code=404)
        return HTMLResponse(pages.entry_page(entry, repo=title, base=base, templates=templates), headers=headers(request))

    async def receipt(request: Request) -> Response:
        entry = await one(request.path_params["entry_id"])
        if entry is None or not entry.receipt:
            return JSONResponse({"error": "no such receipt"}, status_code=404)
        name = f"pr{entry.pr_number}-{entry.head_sha[:12]}-{entry.entry_id}.intoto.json"
        return Response(entry.receipt, media_type="application/json",
                        headers={"Content-Disposition": f'attachment; filename="{name}"'})

    async def as_json(request: Request) -> Response:
        data = [e.model_dump(mode="json", exclude={"receipt", "scorecard"}) | {"id": e.entry_id} for e in await entries()]
        return Response(json.dumps(data, indent=1), media_type="application/json")

    return [
        Route("/dashboard", overview, methods=["GET"]),
        Route("/dashboard/", lambda request: RedirectResponse("/dashboard"), methods=["GET"]),
        Route("/dashboard/pr/{number:int}", pull, methods=["GET"]),
        Route("/dashboard/scoring/{entry_id}", scoring, methods=["GET"]),
        Route("/dashboard/receipt/{entry_id}.json", receipt, methods=["GET"]),
        Route("/dashboard/history.json", as_json, methods=["GET"]),
    ]


def dashboard_app(history: HistoryStore, *, repo: str | None, templates: Path | None = None):
    """The dashboard alone (`evalbot dashboard`): its routes, / redirecting to them, and /healthz."""
    from starlette.applications import Starlette

    async def healthz(request: Request) -> Response:
        return JSONResponse({"status": "ok"})

    routes = dashboard_routes(history, repo=repo, templates=templates)
    routes += [Route("/", lambda request: RedirectResponse("/dashboard"), methods=["GET"]),
               Route("/healthz", healthz, methods=["GET"])]
    return Starlette(routes=routes)


def serve_dashboard(history: HistoryStore, *, host: str, port: int, templates: Path | None = None,
                    repo: str | None = None) -> int:
    """`evalbot dashboard`: the same pages as `evalbot serve`, for a local history, until Ctrl-C."""
    import uvicorn

    from evalbot.errors import EvalbotError

    if not 0 < port < 65536:
        raise EvalbotError(f"--port must be 1..65535, got {port}")
    try:  # bound here, so a taken port is one line (uvicorn would log and exit 1)
        sock = socket.create_server((host, port), family=socket.AF_INET6 if ":" in host else socket.AF_INET)
    except (OSError, OverflowError) as exc:
        raise EvalbotError(f"cannot listen on {host}:{port}: {getattr(exc, 'strerror', None) or exc}") from None
    print(f"dashboard: http://{host}:{port}/dashboard ({len(history.entries())} entries; Ctrl-C stops)", flush=True)
    config = uvicorn.Config(dashboard_app(history, repo=repo, templates=templates), log_level="warning", timeout_keep_alive=5)
    with sock:
        uvicorn.Server(config).run(sockets=[sock])
    return 0
