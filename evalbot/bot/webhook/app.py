"""The webhook service: verify, validate, dedupe, queue, answer. Nothing slow happens here.

POST /webhook  GitHub events (X-Hub-Signature-256 checked in constant time; body size capped)
GET  /healthz  liveness plus a ledger round-trip
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from evalbot.bot.jobs.queue import JobQueue
from evalbot.bot.webhook.payloads import EVENT_MODELS, PayloadError, parse_event
from evalbot.bot.webhook.routing import RoutingPolicy, route
from evalbot.bot.webhook.signature import signature_problem
from evalbot.settings import Settings

log = logging.getLogger("evalbot.service")

_DELIVERY_ID = re.compile(r"^[A-Za-z0-9-]{1,100}$")
_EVENT_NAME = re.compile(r"^[a-z_]{1,64}$")


class _TooLarge(Exception):
    pass


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


def create_app(settings: Settings, queue: JobQueue, clock: Callable[[], float] = time.time) -> Starlette:
    policy = RoutingPolicy(repo=settings.repo, main_branch=settings.main_branch, command_allowlist=settings.command_allowlist)
    limit = settings.max_body_bytes

    async def webhook(request: Request) -> JSONResponse:
        try:
            body = await _read_capped(request, limit)
        except _TooLarge:
            return _error(413, f"payload larger than {limit} bytes")
        except ValueError as exc:
            return _error(400, str(exc))

        problem = signature_problem(settings.webhook_secret, body, request.headers.get("x-hub-signature-256"))
        if problem:
            return _error(401, problem)

        event = request.headers.get("x-github-event", "")
        delivery = request.headers.get("x-github-delivery", "")
        if not _EVENT_NAME.match(event):
            return _error(400, "missing or malformed X-GitHub-Event header")
        if not _DELIVERY_ID.match(delivery):
            return _error(400, "missing or malformed X-GitHub-Delivery header")
        if event not in EVENT_MODELS:
            return JSONResponse({"status": "ignored", "note": f"event {event} is not handled"}, status_code=202)

        try:
            payload = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return _error(400, "body is not valid JSON")
        try:
            parsed = parse_event(event, payload)
        except PayloadError as exc:
            return _error(400, str(exc))
        if event == "ping":
            return JSONResponse({"status": "pong"})

        fresh = await run_in_threadpool(queue.ledger.remember_delivery, delivery, clock())
        if not fresh:
            return JSONResponse({"status": "duplicate", "note": f"delivery {delivery} was already received"})
        routed = route(event, parsed, policy)
        try:
            accepted = [await run_in_threadpool(queue.submit, action) for action in routed.actions]
        except Exception:
            log.exception("could not queue delivery %s", delivery)
            await run_in_threadpool(queue.ledger.forget_delivery, delivery)  # let GitHub's redelivery through
            return _error(503, "queue unavailable; redeliver later")
        status = "queued" if any(accepted) else "ignored" if not routed.actions else "already queued"
        log.info("delivery %s (%s): %s", delivery, event, routed.note)
        return JSONResponse({"status": status, "note": routed.note, "actions": len(routed.actions)}, status_code=202)

    async def healthz(request: Request) -> JSONResponse:
        try:
            await run_in_threadpool(queue.ledger.get_flag, "healthz")
        except Exception as exc:
            return _error(503, f"ledger unreachable: {type(exc).__name__}")
        return JSONResponse({"status": "ok"})

    async def on_error(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        return _error(500, "internal error")

    return Starlette(
        routes=[Route("/webhook", webhook, methods=["POST"]), Route("/healthz", healthz, methods=["GET"])],
        exception_handlers={Exception: on_error},
    )
