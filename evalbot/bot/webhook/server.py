"""`evalbot serve [--host H] [--port P]`: run the webhook app under uvicorn.

Hardened like the worker: non-dumpable before any secret is read (its /proc/<pid>/environ and memory
are closed to processes of the same user), the webhook secret read from a file
(`EVALBOT_WEBHOOK_SECRET_FILE`, or `EVALBOT_SECRETS_DIR`), and no secret left in `os.environ`.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys

from evalbot.bot.worker.secrets import scrub_secrets_from_environment
from evalbot.errors import ConfigError
from evalbot.measure.hardening import make_undumpable
from evalbot.settings import load_settings

log = logging.getLogger("evalbot.serve")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; put a TLS proxy in front)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from evalbot.bot.jobs.queue import JobQueue
    from evalbot.bot.webhook.app import create_app

    make_undumpable()
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    secret_in_environment = bool(os.environ.get("EVALBOT_WEBHOOK_SECRET"))
    try:
        settings = load_settings()
        settings.require("webhook_secret", "repo")
    except ConfigError as exc:
        print(f"evalbot serve: {exc}", file=sys.stderr)
        return 2
    finally:
        scrub_secrets_from_environment()
    if secret_in_environment:
        log.warning("the webhook secret came from EVALBOT_WEBHOOK_SECRET; it stays in this process's start-up "
                    "environment: give it as a file (EVALBOT_WEBHOOK_SECRET_FILE, or EVALBOT_SECRETS_DIR)")
    if not 0 < args.port < 65536:
        print(f"evalbot serve: --port must be 1..65535, got {args.port}", file=sys.stderr)
        return 2
    app = create_app(settings, JobQueue.from_settings(settings))
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, proxy_headers=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="evalbot serve", description="Receive GitHub webhooks and queue scoring work.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
