"""The worker process (`evalbot worker [--burst]`): settings checked (`preflight`), queue, forges,
history, scorer and publisher put together, secrets out of reach of PR code, recovery, then the huey
consumer and the sweeper. SIGTERM (and Ctrl-C) interrupts the running score: its harness processes
are stopped, the job goes back to the queue and its check run says so; then the process exits 0."""

from __future__ import annotations

import argparse
import logging
import signal
import sys
from collections.abc import Callable

from huey.consumer import Consumer

from evalbot.bot import metrics
from evalbot.bot.jobs.queue import JobQueue
from evalbot.bot.worker.github import github_forge_factory
from evalbot.bot.worker.interrupt import ScoringGuard
from evalbot.bot.worker.preflight import worker_problems, worker_warnings
from evalbot.bot.worker.scoring import Publisher, Scorer, load_callable
from evalbot.bot.worker.secrets import scrub_secrets_from_environment
from evalbot.bot.worker.sweeper import Sweeper
from evalbot.bot.worker.worker import Worker
from evalbot.errors import ConfigError
from evalbot.forge.base import Forge
from evalbot.history.store import HistoryStore, open_history
from evalbot.measure.hardening import make_undumpable
from evalbot.settings import Settings, load_settings

log = logging.getLogger("evalbot.worker")


def build_worker(settings: Settings, queue: JobQueue | None = None, *, forge_for: Callable[[str], Forge] | None = None,
                 scorer: Scorer | None = None, publisher: Publisher | None = None,
                 history: HistoryStore | None = None) -> Worker:
    queue = queue or JobQueue.from_settings(settings)
    worker = Worker(
        queue,
        forge_for or github_forge_factory(settings, observer=metrics.forge_observer(queue.ledger)),
        scorer or load_callable(settings.scorer)(settings),
        publisher or load_callable(settings.publisher)(settings),
        settings,
        history=history,
    )
    queue.bind(worker)
    return worker


class StoppingConsumer(Consumer):
    """huey's consumer, but a stop (SIGTERM, SIGINT) first interrupts the running score, then waits up
    to `shutdown_timeout` for the consumer's threads to finish what they hold."""

    def __init__(self, huey, guard: ScoringGuard, **options):
        self._guard = guard
        super().__init__(huey, graceful_signal="TERM", **options)

    def stop(self, graceful: bool = False) -> None:
        name = signal.Signals(self._signum).name if self._signum else "stop requested"
        self._guard.interrupt(f"{name} received")
        super().stop(graceful=True)


def run_worker(settings: Settings, *, burst: bool = False) -> int:
    problems = worker_problems(settings)
    if problems:
        for problem in problems:
            print(f"evalbot worker: {problem}", file=sys.stderr)
        return 2
    for warning in worker_warnings(settings):
        log.warning("%s", warning)
    history = open_history(settings.redis_url, settings.history_path)
    worker = build_worker(settings, history=history)
    scrub_secrets_from_environment()
    make_undumpable()  # the token stays in /proc/<pid>/environ and memory: close both to PR code
    worker.queue.recover(settings.box_name(), settings.box_lock_path, settings.stale_after_seconds)
    if burst:
        previous = signal.signal(signal.SIGTERM, lambda signum, frame: worker.guard.interrupt("SIGTERM received"))
        try:
            ran = worker.queue.drain(should_stop=worker.guard.stopping.is_set)
            if not worker.guard.stopping.is_set():
                worker.sweep()
        finally:
            signal.signal(signal.SIGTERM, previous)
        log.info("burst finished: %d message(s)", ran)
        return 0
    sweeper = Sweeper(worker, settings.sweep_seconds)
    sweeper.start()
    consumer = StoppingConsumer(worker.queue.huey, worker.guard, workers=settings.worker_threads, worker_type="thread",
                                periodic=False, max_delay=1.0, shutdown_timeout=settings.stop_timeout_seconds)
    log.info("worker %s consuming (%d thread(s))", worker.worker_id, settings.worker_threads)
    consumer.run()
    sweeper.stop.set()
    log.info("worker %s stopped", worker.worker_id)
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--burst", action="store_true", help="run what is queued now, then exit")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def run(args: argparse.Namespace) -> int:
    from evalbot.bot.logs import configure_logging

    try:
        settings = load_settings()
    except ConfigError as exc:
        print(f"evalbot worker: {exc}", file=sys.stderr)
        return 2
    configure_logging(args.log_level, settings.log_format)
    try:
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
