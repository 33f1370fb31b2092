"""The worker process (`evalbot worker [--burst]`): settings, queue, forges, scorer and publisher put
together, secrets out of reach of PR code, recovery, then the huey consumer and the sweeper."""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Callable

from evalbot.bot.jobs.queue import JobQueue
from evalbot.bot.worker.github import github_forge_factory
from evalbot.bot.worker.scoring import Publisher, Scorer, load_callable
from evalbot.bot.worker.secrets import scrub_secrets_from_environment
from evalbot.bot.worker.sweeper import Sweeper
from evalbot.bot.worker.worker import Worker
from evalbot.errors import ConfigError
from evalbot.forge.base import Forge
from evalbot.measure.hardening import make_undumpable
from evalbot.settings import Settings, load_settings

log = logging.getLogger("evalbot.worker")


def build_worker(settings: Settings, queue: JobQueue | None = None, *, forge_for: Callable[[str], Forge] | None = None,
                 scorer: Scorer | None = None, publisher: Publisher | None = None) -> Worker:
    queue = queue or JobQueue.from_settings(settings)
    worker = Worker(
        queue,
        forge_for or github_forge_factory(settings),
        scorer or load_callable(settings.scorer)(settings),
        publisher or load_callable(settings.publisher)(settings),
        settings,
    )
    queue.bind(worker)
    return worker


def run_worker(settings: Settings, *, burst: bool = False) -> int:
    worker = build_worker(settings)
    scrub_secrets_from_environment()
    make_undumpable()  # the token stays in /proc/<pid>/environ and memory: close both to PR code
    worker.queue.recover(settings.box_name(), settings.box_lock_path, settings.stale_after_seconds)
    if burst:
        ran = worker.queue.drain()
        worker.sweep()
        log.info("burst finished: %d message(s)", ran)
        return 0
    sweeper = Sweeper(worker, settings.sweep_seconds)
    sweeper.start()
    consumer = worker.queue.huey.create_consumer(
        workers=settings.worker_threads, worker_type="thread", periodic=False, max_delay=1.0,
    )
    log.info("worker %s consuming (%d thread(s))", worker.worker_id, settings.worker_threads)
    consumer.run()
    sweeper.stop.set()
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--burst", action="store_true", help="run what is queued now, then exit")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = load_settings()
        settings.require("repo")
        return run_worker(settings, burst=args.burst)
    except ConfigError as exc:
        print(f"evalbot worker: {exc}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="evalbot worker", description="Score queued pull requests, one at a time per box.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
