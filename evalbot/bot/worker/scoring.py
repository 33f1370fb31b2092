"""What the worker calls to score and to publish: by default evalbot.pipeline (`score_refs` on this
box's clone, `publish`); tests and other deployments name their own factories in the settings
(`scorer`, `publisher`: "module:function", called with the Settings)."""

from __future__ import annotations

import importlib
import logging
import time
from collections.abc import Callable

from evalbot.bot.jobs.ledger import RUNNING, Ledger
from evalbot.bot.jobs.model import FORCED_REASONS, ScoreJob
from evalbot.bot.jobs.queue import make_ledger
from evalbot.bot.worker.progress import Progress, RunnerProgress
from evalbot.decide.outcome import ScoreOutcome
from evalbot.decide.scorings import Claimant, KvDocs
from evalbot.errors import ConfigError
from evalbot.forge.base import Forge
from evalbot.settings import Settings

log = logging.getLogger("evalbot.worker")

Scorer = Callable[[ScoreJob, Progress], ScoreOutcome]
Publisher = Callable[[ScoreOutcome, Forge, int, "str | None"], object]  # (outcome, forge, pr_number, check_id)


def load_callable(path: str) -> Callable:
    """'package.module:attribute' -> the object, with a clear error."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise ConfigError(f"expected 'module:function', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ConfigError(f"cannot import {module_name!r} for {path!r}: {exc}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise ConfigError(f"{module_name!r} has no {attr!r}") from None


def pipeline_scorer(settings: Settings) -> Scorer:
    """The real scorer: fetch the job's commits into this box's clone, then evalbot.pipeline.score_refs."""
    from evalbot import pipeline  # the scoring core; imported late so the queue side never needs it
    from evalbot.measure.checkout import fetch_job_refs
    from evalbot.measure.device import profile_for

    checkout = settings.checkout_dir.resolve()
    ledger = make_ledger(settings) if settings.redis_url else None
    docs = shared_scorings(ledger) if ledger else None  # many boxes: one verdict per tree for all

    def score(job: ScoreJob, progress: Progress) -> ScoreOutcome:
        progress("fetching main and the pull request")
        fetch_job_refs(checkout, settings.remote, settings.main_branch, job.pr_number, job.head_sha, job.base_sha)
        return pipeline.score_refs(
            checkout, job.base_sha, job.head_sha, profile=profile_for(settings), settings=settings,
            pr_number=job.pr_number, progress=RunnerProgress(progress),
            # one ruler: the harness of main's current tip, not of the SHA the job was queued against
            harness_ref=f"{settings.remote}/{settings.main_branch}",
            rescore=job.reason in FORCED_REASONS,  # else a tree measured before gets that verdict again
            scorings_docs=docs,
            claimant=_claimant(ledger, job.key, settings.stale_after_seconds) if ledger else None,
        )

    return score


def shared_scorings(ledger: Ledger) -> KvDocs:
    """The scorings of each candidate tree in the ledger the bot's boxes share (Redis)."""
    return KvDocs(lambda name: ledger.get_doc("scorings", name), lambda name, text: ledger.set_doc("scorings", name, text),
                  lambda name, text: ledger.insert_doc("scorings", name, text), lambda name: ledger.delete_doc("scorings", name))


def ledger_claimant(ledger: Ledger, worker_id: str, job_key: str, stale_after: float,
                    clock: Callable[[], float] = time.time) -> Claimant:
    """A tree's claim held by one worker's run of a score job ("<worker id>|<job key>"): alive while that
    worker runs that job with a fresh heartbeat (a dead box's job stops beating, and its claim is taken over
    after `stale_after` seconds, as the job itself is; the job re-run elsewhere is another owner)."""
    def alive(owner: str) -> bool:
        worker, _, key = owner.partition("|")
        record = ledger.get(key)
        return (record is not None and record.state == RUNNING and record.worker_id == worker
                and clock() - record.heartbeat_at < stale_after)

    return Claimant(f"{worker_id}|{job_key}", alive, clock)


def _claimant(ledger: Ledger, job_key: str, stale_after: float) -> Claimant:
    """The claimant of the worker that runs the job now (the ledger names it: the job was claimed first)."""
    record = ledger.get(job_key)
    return ledger_claimant(ledger, record.worker_id if record else "", job_key, stale_after)


def pipeline_publisher(settings: Settings) -> Publisher:
    from evalbot import pipeline

    def publish(outcome: ScoreOutcome, forge: Forge, pr_number: int, check_id: str | None) -> object:
        result = pipeline.publish(outcome, forge, pr_number, settings, check_id=check_id)
        if not result.published:
            log.info("#%d not published: %s", pr_number, result.reason)
        return result

    return publish
