"""`evalbot serve [--host H] [--port P]`: run the webhook app (and the dashboard, /metrics) under uvicorn,
with time limits on slow clients (`protocol`) and JSON logs (`evalbot.bot.logs`).

Hardened like the worker: non-dumpable before any secret is read (its /proc/<pid>/environ and memory
are closed to processes of the same user), the webhook secret read from a file
(`EVALBOT_WEBHOOK_SECRET_FILE`, or `EVALBOT_SECRETS_DIR`), and no secret left in `os.environ`.
"""

from __future__ import annotations

import argparse
import logging
import os
import resource
import sys

from evalbot.bot.worker.secrets import scrub_secrets_from_environment
from evalbot.errors import ConfigError
from evalbot.measure.hardening import make_undumpable
from evalbot.settings import load_settings

FD_RESERVE = 128  # descriptors kept for the ledger, the queue, the history, logging and accept bursts (96 let one
# accept hit EMFILE on a loaded 2-core CI run: the over-limit connections closed in one loop turn free their fds in the next)
# asyncio accepts up to `backlog` connections in one go before any of them is looked at: a small batch
# keeps that burst inside FD_RESERVE, so a flood of connections never runs the process out of descriptors.
ACCEPT_BACKLOG = 32
# ... and the listener itself accepts nothing while fewer than this many are free (protocol.GatedListener)
ACCEPT_MARGIN = 32
log = logging.getLogger("evalbot.serve")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; put a TLS proxy in front)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def connection_limit(configured: int) -> int:
    """At most `configured` connections, and never so many that the process runs out of descriptors."""
    soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return configured
    return max(8, min(configured, soft - FD_RESERVE))


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from evalbot.bot.jobs.queue import JobQueue
    from evalbot.bot.logs import configure_logging
    from evalbot.bot.metrics import ServiceMetrics
    from evalbot.bot.webhook.app import create_app
    from evalbot.bot.webhook.protocol import gated_listener, guarded_protocol
    from evalbot.history.store import open_history

    make_undumpable()
    secret_in_environment = bool(os.environ.get("EVALBOT_WEBHOOK_SECRET"))
    try:
        settings = load_settings()
        settings.require("webhook_secret", "repo")
    except ConfigError as exc:
        print(f"evalbot serve: {exc}", file=sys.stderr)
        return 2
    finally:
        scrub_secrets_from_environment()
    if not 0 < args.port < 65536:
        print(f"evalbot serve: --port must be 1..65535, got {args.port}", file=sys.stderr)
        return 2
    configure_logging(args.log_level, settings.log_format)
    if secret_in_environment:
        log.warning("the webhook secret came from EVALBOT_WEBHOOK_SECRET; it stays in this process's start-up "
                    "environment: give it as a file (EVALBOT_WEBHOOK_SECRET_FILE, or EVALBOT_SECRETS_DIR)")
    queue = JobQueue.from_settings(settings, busy_timeout=settings.ledger_busy_seconds)
    history = open_history(settings.redis_url, settings.history_path, busy_timeout=settings.ledger_busy_seconds)
    metrics = ServiceMetrics(queue.ledger, queue.pending_count)
    app = create_app(settings, queue, history=history, metrics=metrics)
    protocol = guarded_protocol(settings.client_timeout_seconds, connection_limit(settings.max_connections),
                                lambda reason: metrics.connections_closed.labels(reason=reason).inc())
    try:
        listener = gated_listener(args.host, args.port, ACCEPT_BACKLOG, ACCEPT_MARGIN,
                                  lambda: metrics.connections_closed.labels(reason="descriptors nearly exhausted").inc())
    except OSError as exc:
        print(f"evalbot serve: cannot listen on {args.host}:{args.port}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    server = uvicorn.Server(uvicorn.Config(app, log_level=args.log_level, proxy_headers=True, http=protocol, log_config=None,
                                           timeout_keep_alive=5, timeout_graceful_shutdown=5, backlog=ACCEPT_BACKLOG))
    log.info("listening on http://%s:%d", args.host, listener.getsockname()[1])
    with listener:
        server.run(sockets=[listener])
    return 0 if server.started else 1  # uvicorn logged why


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="evalbot serve", description="Receive GitHub webhooks and queue scoring work; "
                                     "serve the dashboard and /metrics.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
