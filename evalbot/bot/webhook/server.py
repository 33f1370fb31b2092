"""`evalbot serve [--host H] [--port P]`: run the webhook app under uvicorn."""

from __future__ import annotations

import argparse
import logging
import sys

from evalbot.errors import ConfigError
from evalbot.settings import load_settings


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on (default 127.0.0.1; put a TLS proxy in front)")
    parser.add_argument("--port", type=int, default=8080, help="port to listen on (default 8080)")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def run(args: argparse.Namespace) -> int:
    import uvicorn

    from evalbot.bot.jobs.queue import JobQueue
    from evalbot.bot.webhook.app import create_app

    try:
        settings = load_settings()
        settings.require("webhook_secret", "repo")
    except ConfigError as exc:
        print(f"evalbot serve: {exc}", file=sys.stderr)
        return 2
    if not 0 < args.port < 65536:
        print(f"evalbot serve: --port must be 1..65535, got {args.port}", file=sys.stderr)
        return 2
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    app = create_app(settings, JobQueue.from_settings(settings))
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level, proxy_headers=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="evalbot serve", description="Receive GitHub webhooks and queue scoring work.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
