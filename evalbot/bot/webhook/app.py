"""The webhook service: verify, validate, dedupe, queue, answer. Nothing slow happens here.

POST /webhook  GitHub events (X-Hub-Signature-256 checked in constant time; body size capped)
GET  /healthz  a ledger write round-trip, answered within the delivery deadline
GET  /metrics  Prometheus text format (evalbot.bot.metrics)
GET  /dashboard...  the history's pages (evalbot.bot.dashboard), when a history is given

Every delivery is answered within `webhook_deadline_seconds` (GitHub gives up after 10 s): a ledger
that is locked or slow makes it a 503 ("redeliver later") in time, and /healthz reports the same.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

import structlog
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, RedirectResponse, Response
from starlette.routing import Route

from evalbot.bot.dashboard import dashboard_routes
from evalbot.bot.jobs.queue import JobQueue
from evalbot.bot.metrics import CONTENT_TYPE, ServiceMetrics
from evalbot.bot.webhook.payloads import EVENT_MODELS, PayloadError, parse_event
from evalbot.bot.webhook.routing import RoutingPolicy, route
from evalbot.bot.webhook.signature import signature_problem
from evalbot.history.store import HistoryStore
from evalbot.settings import Settings

log = logging.getLogger("evalbot.service")

_DELIVERY_ID = re.compile(r"^[A-Za-z0-9-]{1,100}$")
_EVENT_NAME = re.compile(r"^[a-z_]{1,64}$")
OTHER_EVENT = "other"  # the deliveries counter's event label for anything unsigned or unknown


class _TooLarge(Exception):
    pass


class _Late(Exception):
    """The ledger or the queue did not answer before the delivery's deadline."""


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse({"error": message}, status_code=status)


async def _read_capped(request: Request, limit: int) -> bytes:
    declared = request.headers.get("content-length")
    if declared is not None:
        if not declared.isdigit():
            raise ValueError("Content-Length is not a number")
        if int(declared) > limit:
            raise _TooLarge
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise _TooLarge
        chunks.append(chunk)
    return b"".join(chunks)


def create_app(settings: Settings, queue: JobQueue, clock: Callable[[], float] = time.time, *,
               history: HistoryStore | None = None, metrics: ServiceMetrics | None = None) -> Starlette:
    policy = RoutingPolicy(repo=settings.repo, main_branch=settings.main_branch, command_allowlist=settings.command_allowlist)
    limit, deadline = settings.max_body_bytes, settings.webhook_deadline_seconds
    metrics = metrics or ServiceMetrics(queue.ledger, queue.pending_count)

    async def in_time(started: float, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """`fn` in a worker thread, but never past the delivery's deadline (a little is kept to answer)."""
        left = deadline - (time.monotonic() - started) - 0.25
        if left <= 0:
            raise _Late("no time left")
        try:
            return await asyncio.wait_for(run_in_threadpool(fn, *args, **kwargs), timeout=left)
        except asyncio.TimeoutError:
            raise _Late(f"{getattr(fn, '__name__', 'a call')} took longer than {deadline:g}s") from None

    def answer(seen: dict[str, str], status_word: str, response: JSONResponse) -> JSONResponse:
        # `seen["event"]` is the event only once the signature verified and the event is one the bot knows;
        # otherwise "other": an unsigned sender must not mint a Prometheus series per header value
        metrics.deliveries.labels(event=seen["event"], status=status_word).inc()
        return response

    async def webhook(request: Request) -> JSONResponse:
        started = time.monotonic()
        event = request.headers.get("x-github-event", "")
        delivery = request.headers.get("x-github-delivery", "")
        seen = {"event": OTHER_EVENT}
        with structlog.contextvars.bound_contextvars(delivery=delivery[:100], event=event[:64]):
            try:
                return await _handle(request, started, event, delivery, seen)
            except _Late as exc:  # a locked or slow ledger: answer in time, let GitHub's redelivery retry
                log.warning("delivery %s not stored in time: %s", delivery, exc)
                return answer(seen, "busy", _error(503, f"ledger busy ({exc}); redeliver later"))
            except ClientDisconnect:
                log.info("client went away before its request was complete")
                return answer(seen, "disconnected", _error(400, "client disconnected"))

    async def _handle(request: Request, started: float, event: str, delivery: str, seen: dict[str, str]) -> JSONResponse:
        try:
            body = await _read_capped(request, limit)
        except _TooLarge:
            return answer(seen, "too_large", _error(413, f"payload larger than {limit} bytes"))
        except ValueError as exc:
            return answer(seen, "bad_request", _error(400, str(exc)))

        problem = signature_problem(settings.webhook_secret, body, request.headers.get("x-hub-signature-256"))
        if problem:
            return answer(seen, "unauthorized", _error(401, problem))
        if event in EVENT_MODELS:
            seen["event"] = event
        if not _EVENT_NAME.match(event):
            return answer(seen, "bad_request", _error(400, "missing or malformed X-GitHub-Event header"))
        if not _DELIVERY_ID.match(delivery):
            return answer(seen, "bad_request", _error(400, "missing or malformed X-GitHub-Delivery header"))
        if event not in EVENT_MODELS:
            return answer(seen, "ignored", JSONResponse({"status": "ignored", "note": f"event {event} is not handled"}, status_code=202))

        try:
            payload = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return answer(seen, "bad_request", _error(400, "body is not valid JSON"))
        try:
            parsed = parse_event(event, payload)
        except PayloadError as exc:
            return answer(seen, "bad_request", _error(400, str(exc)))
        if event == "ping":
            return answer(seen, "pong", JSONResponse({"status": "pong"}))

        try:
            fresh = await in_time(started, queue.ledger.remember_delivery, delivery, clock())
        except _Late:
            raise
        except Exception as exc:  # noqa: BLE001 - a ledger that fails (locked, gone) is the sender's 503
            raise _Late(f"{type(exc).__name__}: {exc}") from None
        if not fresh:
            return answer(seen, "duplicate", JSONResponse({"status": "duplicate", "note": f"delivery {delivery} was already received"}))
        routed = route(event, parsed, policy)
        try:
            accepted = [await in_time(started, queue.submit, action) for action in routed.actions]
        except Exception as exc:  # noqa: BLE001 - _Late included: the delivery must be redeliverable
            log.error("could not queue delivery %s: %s: %s", delivery, type(exc).__name__, exc)
            try:
                await in_time(started, queue.ledger.forget_delivery, delivery)  # let GitHub's redelivery through
            except Exception as forget_exc:  # noqa: BLE001
                log.error("could not forget delivery %s (%s); its redelivery will read as a duplicate",
                          delivery, type(forget_exc).__name__)
            return answer(seen, "unavailable", _error(503, "queue unavailable; redeliver later"))
        status = "queued" if any(accepted) else "ignored" if not routed.actions else "already queued"
        log.info("delivery %s (%s): %s", delivery, event, routed.note)
        body_out = {"status": status, "note": routed.note, "actions": len(routed.actions)}
        return answer(seen, status.replace(" ", "_"), JSONResponse(body_out, status_code=202))

    async def healthz(request: Request) -> JSONResponse:
        started = time.monotonic()
        try:
            await in_time(started, queue.ledger.set_flag, "healthz", repr(clock()))  # a write: a lock shows up here
            await in_time(started, queue.pending_count)
        except Exception as exc:  # noqa: BLE001
            return _error(503, f"ledger or queue unavailable: {type(exc).__name__}: {exc}"[:300])
        return JSONResponse({"status": "ok"})

    async def metrics_page(request: Request) -> Response:
        body = await run_in_threadpool(metrics.render)
        return Response(body, media_type=CONTENT_TYPE)

    async def on_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        return _error(500, "internal error")

    routes = [Route("/webhook", webhook, methods=["POST"]), Route("/healthz", healthz, methods=["GET"]),
              Route("/metrics", metrics_page, methods=["GET"])]
    if history is not None and settings.dashboard:
        routes += dashboard_routes(history, repo=settings.repo, templates=settings.templates_dir)
        routes.append(Route("/", lambda request: RedirectResponse("/dashboard"), methods=["GET"]))
    app = Starlette(routes=routes, exception_handlers={Exception: on_error})
    app.state.metrics = metrics
    return app
