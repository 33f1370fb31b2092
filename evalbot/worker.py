"""`evalbot worker`: takes jobs off the queue, scores them one at a time per box, publishes.

The scoring function and the publisher are injected (`scorer(job, progress) -> outcome` and
`publisher(outcome, forge, pr_number, check_id)`: labels, sticky scorecard, completed check run,
receipt), so everything here is tested with a fake scorer; the defaults call `evalbot.pipeline`
(`score_refs` and `publish`). The worker itself reads only the outcome's tier and speedup.

Life of a score job: claim in the ledger (under the box lock) -> check it is still fresh -> check
run in progress -> score -> verdict stored in the ledger (`scored`) -> publish -> `done` -> maybe
decide the automerge round. A failure to publish leaves the verdict in the ledger; the sweeper
publishes it later. A worker that dies leaves a `running` job that recovery puts back in the queue.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import logging
import os
import pickle
import sys
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from huey.exceptions import RetryTask

from evalbot.hardening import make_undumpable
from evalbot import automerge
from evalbot.forge.base import CHECK_NAME, NEEDS_REBASE_LABEL, TIER_LABEL_PREFIXES, Forge
from evalbot.jobs.boxlock import BoxLock
from evalbot.jobs.freshness import judge_freshness
from evalbot.jobs.ledger import DONE, FAILED, QUEUED, SCORED, SUPERSEDED, JobRecord
from evalbot.jobs.model import (
    AnnounceQueued,
    Chore,
    DecideRound,
    MainMoved,
    Reply,
    RescoreRequest,
    ScoreJob,
    SetAutomerge,
)
from evalbot.jobs.queue import JobQueue
from evalbot.service.settings import BotSettings, SettingsError, settings_from_env
from evalbot.service.texts import render

log = logging.getLogger("evalbot.worker")

Progress = Callable[[str], None]
Scorer = Callable[[ScoreJob, Progress], Any]
Publisher = Callable[[Any, Forge, int, "str | None"], Any]  # (outcome, forge, pr_number, check_id)

SECRET_ENV_VARS = ("EVALBOT_GITHUB_TOKEN", "EVALBOT_WEBHOOK_SECRET", "GITHUB_TOKEN", "GH_TOKEN", "EVALBOT_REDIS_URL")
DELIVERY_MEMORY_SECONDS = 30 * 24 * 3600
ROUND_DECISION_RETRIES = 5


# -- the outcome, read defensively -------------------------------------------------------------------
@dataclass(frozen=True)
class OutcomeView:
    """What the worker itself reads from a scorer's outcome: the tier (automerge, closing) and the speedup.

    Understands `evalbot.outcome.ScoreOutcome` (tier and speedup live on its verdict) and any object
    with `tier` and `speedup` attributes (a fraction, 0.08 = +8%).
    """

    tier: str
    speedup: float

    @classmethod
    def of(cls, outcome: Any) -> "OutcomeView":
        verdict = getattr(outcome, "verdict", None)
        if verdict is not None:
            speedup = getattr(verdict, "speedup", None)
            return cls(tier=str(verdict.tier or ""), speedup=float(speedup.pct) / 100 if speedup is not None else 0.0)
        tier = getattr(outcome, "tier", None)
        if tier is None:
            raise TypeError(f"a score outcome needs a tier; {type(outcome).__name__} has none")
        return cls(tier=str(tier), speedup=float(getattr(outcome, "speedup", 0.0) or 0.0))


def publish_backoff(publish_attempts: int, base: float) -> float:
    """Seconds to wait before publishing a kept verdict again: doubling, at most an hour."""
    return min(3600.0, base * (2 ** max(0, publish_attempts - 1))) if publish_attempts else 0.0


def round_fingerprint(records: list[JobRecord]) -> str:
    return hashlib.sha256(",".join(sorted(r.key for r in records)).encode()).hexdigest()[:16]


# -- small helpers that touch the outside ------------------------------------------------------------
class Heartbeat:
    """Beats for a running job from a daemon thread; `lost` turns true if another worker took it over."""

    def __init__(self, beat: Callable[[], bool], interval: float):
        self._beat, self._interval = beat, interval
        self._stop = threading.Event()
        self.lost = False
        self._thread = threading.Thread(target=self._run, name="evalbot-heartbeat", daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                if not self._beat():
                    self.lost = True
                    return
            except Exception:  # a transient ledger error: try again next beat
                log.warning("heartbeat failed", exc_info=True)

    def __enter__(self) -> "Heartbeat":
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join(timeout=5)


class ProgressReporter:
    """Turns scorer progress into check-run summaries, at most one update per `min_interval` seconds."""

    def __init__(self, update: Callable[[str, list[str]], None], min_interval: float, clock: Callable[[], float]):
        self._update, self._min_interval, self._clock = update, min_interval, clock
        self._last = -1e18
        self.steps: list[str] = []

    def __call__(self, step: str) -> None:
        done = list(self.steps)
        self.steps.append(step)
        now = self._clock()
        if now - self._last < self._min_interval:
            return
        self._last = now
        try:
            self._update(step, done)
        except Exception as exc:  # progress is decoration; it never stops a score
            log.warning("progress update failed: %s", exc)


def load_callable(path: str) -> Callable:
    """'package.module:attribute' -> the object, with a clear error."""
    module_name, _, attr = path.partition(":")
    if not module_name or not attr:
        raise SettingsError(f"expected 'module:function', got {path!r}")
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise SettingsError(f"cannot import {module_name!r} for {path!r}: {exc}") from None
    try:
        return getattr(module, attr)
    except AttributeError:
        raise SettingsError(f"{module_name!r} has no {attr!r}") from None


class _ProgressSink:
    """evalbot.runner.ProgressSink -> our one-line progress callback."""

    def __init__(self, progress: Progress):
        self.progress, self.total, self.done = progress, 0, 0

    def begin(self, total: int) -> None:
        self.total = total

    def step(self, label: str) -> None:
        self.progress(f"{label} ({self.done}/{self.total} runs done)" if self.total else label)

    def advance(self) -> None:
        self.done += 1


def pipeline_scorer(settings: BotSettings) -> Scorer:
    """The real scorer: fetch the job's commits into this box's clone, then evalbot.pipeline.score_refs."""
    from evalbot import pipeline  # the scoring core; imported late so the queue side never needs it
    from evalbot.config import load_settings
    from evalbot.jobs.checkout import fetch_job_refs

    checkout = settings.checkout_dir.resolve()

    def score(job: ScoreJob, progress: Progress) -> Any:
        progress("fetching main and the pull request")
        fetch_job_refs(checkout, settings.remote, settings.main_branch, job.pr_number, job.head_sha, job.base_sha)
        core = load_settings(checkout)
        from evalbot.reverify_engine import engine_reverifier_factory

        return pipeline.score_refs(
            checkout, job.base_sha, job.head_sha, profile=settings.profile or core.default_profile,
            settings=core, pr_number=job.pr_number, progress=_ProgressSink(progress),
            # one ruler: the harness of main's current tip, not of the SHA the job was queued against
            harness_ref=f"{settings.remote}/{settings.main_branch}",
            reverifier_factory=engine_reverifier_factory(core),
        )

    return score


def pipeline_publisher(settings: BotSettings) -> Publisher:
    from evalbot import pipeline
    from evalbot.config import load_settings

    def publish(outcome: Any, forge: Forge, pr_number: int, check_id: str | None) -> Any:
        result = pipeline.publish(outcome, forge, pr_number, load_settings(settings.checkout_dir.resolve()), check_id=check_id)
        if not result.published:
            log.info("#%d not published: %s", pr_number, result.reason)
        return result

    return publish


# -- the worker --------------------------------------------------------------------------------------
@dataclass
class WorkerConfig:
    box_id: str
    state_dir: Path
    main_branch: str = "main"
    heartbeat_seconds: float = 15.0
    stale_after_seconds: float = 120.0
    max_attempts: int = 3
    automerge_default: bool = False
    automerge_min_tier: str = automerge.DEFAULT_MIN_TIER
    close_on: frozenset[str] = frozenset()
    publish_retry_seconds: float = 60.0
    busy_retry_seconds: float = 15.0
    infra_retry_seconds: float = 60.0
    progress_min_interval: float = 10.0
    worker_id: str = field(default="")

    def __post_init__(self) -> None:
        if not self.worker_id:
            self.worker_id = f"{self.box_id}/{os.getpid()}/{uuid.uuid4().hex[:8]}"

    @property
    def box_lock_path(self) -> Path:
        return self.state_dir / f"box-{self.box_id}.lock"

    @classmethod
    def from_settings(cls, s: BotSettings) -> "WorkerConfig":
        return cls(
            box_id=s.box_id, state_dir=s.state_dir, main_branch=s.main_branch, heartbeat_seconds=s.heartbeat_seconds,
            stale_after_seconds=s.stale_after_seconds, max_attempts=s.max_attempts, automerge_default=s.automerge_default,
            automerge_min_tier=s.automerge_min_tier, close_on=s.close_on, publish_retry_seconds=s.publish_retry_seconds,
            busy_retry_seconds=s.busy_retry_seconds, infra_retry_seconds=s.infra_retry_seconds,
        )


class Worker:
    def __init__(
        self,
        queue: JobQueue,
        forge_for: Callable[[str], Forge],
        scorer: Scorer,
        publisher: Publisher,
        config: WorkerConfig,
        clock: Callable[[], float] = time.time,
    ):
        self.queue, self.ledger = queue, queue.ledger
        self.forge_for, self.scorer, self.publisher = forge_for, scorer, publisher
        self.config, self.clock = config, clock

    # -- score jobs ----------------------------------------------------------------------------------
    def run_score(self, key: str) -> str:
        record = self.ledger.get(key)
        if record is None or record.state != QUEUED:
            return f"skipped: {record.state if record else 'unknown job'}"
        lock = BoxLock(self.config.box_lock_path)
        if not lock.try_acquire():
            raise RetryTask(delay=self.config.busy_retry_seconds)  # this box is busy; any box may take it
        try:
            if not self.ledger.claim(key, self.config.worker_id, self.clock()):
                return "skipped: claimed by another worker"
            beat = lambda: self.ledger.heartbeat(key, self.config.worker_id, self.clock())  # noqa: E731
            with Heartbeat(beat, self.config.heartbeat_seconds):
                return self._score_claimed(self.ledger.get(key))
        finally:
            lock.release()

    def _score_claimed(self, record: JobRecord) -> str:
        job, forge = record.job, self.forge_for(record.repo)
        try:
            pull = forge.get_pull(job.pr_number)
            freshness = judge_freshness(job, pull, self._main_head(forge), self.config.main_branch)
        except Exception as exc:
            return self._infra_failure(record, forge, exc)
        if not freshness.run:
            self.ledger.finish(record.key, SUPERSEDED, self.clock(), freshness.why, worker_id=self.config.worker_id)
            self._close_check(forge, record, "skipped", render("gh_check_title_superseded.txt.j2"),
                              render("gh_check_superseded.md.j2", why=freshness.why))
            if freshness.replacement is not None:
                self.queue.submit_score(freshness.replacement)
            return f"superseded: {freshness.why}"

        check_id = record.check_id or self._start_check(forge, record)

        def show_progress(step: str, done: list[str]) -> None:
            if check_id:
                forge.update_check(
                    check_id, status="in_progress", title=render("gh_check_title_progress.txt.j2"),
                    summary=render("gh_check_progress.md.j2", head_sha=job.head_sha, base_sha=job.base_sha,
                                   box_id=self.config.box_id, attempt=record.attempts, step=step, done_steps=done),
                )

        progress = ProgressReporter(show_progress, self.config.progress_min_interval, self.clock)
        progress("preparing worktrees")
        try:
            outcome = self.scorer(job, progress)
            OutcomeView.of(outcome)  # fail here, as an infrastructure error, if the outcome is unreadable
            blob = pickle.dumps(outcome)
        except Exception as exc:
            return self._infra_failure(record, forge, exc, check_id=check_id)
        if not self.ledger.record_outcome(record.key, self.config.worker_id, blob, self.clock()):
            return "dropped: another worker took this job over"
        self.publish_recorded(record.key)
        self.decide_round(record.repo, record.base_sha)
        return "scored"

    def _start_check(self, forge: Forge, record: JobRecord) -> str:
        if not self.ledger.claim_check(record.key, self.config.worker_id):
            # another worker created it (its id is in the ledger) or is creating it right now; with
            # no id the publisher creates one at the end rather than risk a duplicate now
            latest = self.ledger.get(record.key)
            return latest.check_id if latest is not None else ""
        try:
            check_id = forge.start_check(record.head_sha, CHECK_NAME, render("gh_check_queued.md.j2", **_job_context(record)))
        except Exception as exc:  # the check run is a courtesy; the verdict does not depend on it
            log.warning("could not create the check run for %s: %s", record.key, exc)
            return ""
        self.ledger.set_check_id(record.key, check_id)
        return check_id

    def _close_check(self, forge: Forge, record: JobRecord, conclusion: str, title: str, summary: str) -> None:
        if not record.check_id:
            return
        try:
            forge.update_check(record.check_id, status="completed", title=title, summary=summary, conclusion=conclusion)
        except Exception as exc:
            log.warning("could not complete check run %s: %s", record.check_id, exc)

    def _infra_failure(self, record: JobRecord, forge: Forge, exc: Exception, check_id: str = "") -> str:
        """Never a verdict: retry later, and after max_attempts say so on the check run."""
        error = f"{type(exc).__name__}: {exc}"[:1000]
        log.error("job %s failed (attempt %d): %s", record.key, record.attempts, error)
        now = self.clock()
        if record.attempts < self.config.max_attempts:
            if self.ledger.release(record.key, self.config.worker_id, now, f"retrying after: {error}"):
                self.queue.enqueue_key(record.key, delay=self.config.infra_retry_seconds)
            return f"retrying: {error}"
        self.ledger.finish(record.key, FAILED, now, error, worker_id=self.config.worker_id)
        latest = self.ledger.get(record.key) or record
        if check_id and not latest.check_id:
            latest.check_id = check_id
        self._close_check(forge, latest, "cancelled", render("gh_check_title_infra.txt.j2"),
                          render("gh_check_infra_error.md.j2", attempts=record.attempts, error=error))
        return f"failed: {error}"

    # -- publication (also retried by the sweeper) ---------------------------------------------------------
    def publish_recorded(self, key: str) -> bool:
        record = self.ledger.get(key)
        if record is None or record.state != SCORED:
            return False
        outcome = pickle.loads(record.outcome_bytes)
        view = OutcomeView.of(outcome)
        try:
            forge = self.forge_for(record.repo)
            self.publisher(outcome, forge, record.pr_number, record.check_id or None)
            if self._main_head(forge) in (None, record.base_sha):
                forge.remove_label(record.pr_number, NEEDS_REBASE_LABEL)
            if view.tier in self.config.close_on:
                forge.comment(record.pr_number, render("comment_closed_by_verdict.md.j2", tier=view.tier,
                                                        close_on=sorted(self.config.close_on)))
                forge.close(record.pr_number)
        except Exception as exc:
            note = f"publication failed, verdict kept: {type(exc).__name__}: {exc}"[:1000]
            log.warning("%s: %s", key, note)
            self.ledger.note_publish_failure(key, self.clock(), note)
            return False
        self.ledger.finish(key, DONE, self.clock(), "published")
        return True

    # -- automerge rounds ------------------------------------------------------------------------------
    def automerge_enabled(self, repo: str) -> bool:
        flag = self.ledger.get_flag(f"automerge:{repo}")
        return self.config.automerge_default if flag is None else flag == "on"

    def decide_round(self, repo: str, base_sha: str, attempt: int = 0) -> str:
        if not self.automerge_enabled(repo):
            return "automerge off"
        records = self.ledger.for_base(repo, base_sha)
        if not automerge.round_is_complete([r.state for r in records]):
            return "round still running"
        if self.ledger.round_merged(repo, base_sha) is not None:
            return "round already merged"
        done = [r for r in records if r.state == DONE and r.outcome]
        if not done or not self.ledger.claim_round(repo, base_sha, f"{round_fingerprint(done)}:{attempt}"):
            return "round decided elsewhere"
        try:
            return self._decide_claimed_round(repo, base_sha, done, attempt)
        except Exception as exc:  # GitHub trouble: the round is decided again later, never dropped
            log.warning("round %s@%s: %s; deciding again later", repo, base_sha[:12], exc)
            if attempt < ROUND_DECISION_RETRIES:
                self.queue.submit_chore(DecideRound(repo=repo, base_sha=base_sha, attempt=attempt + 1), delay=60)
            return f"deferred: {type(exc).__name__}"

    def _decide_claimed_round(self, repo: str, base_sha: str, done: list[JobRecord], attempt: int) -> str:
        forge = self.forge_for(repo)
        main_now = self._main_head(forge)
        if main_now is not None and main_now != base_sha:
            return "main moved; this round is moot"
        entries: list[automerge.RoundEntry] = []
        for record in done:
            view = OutcomeView.of(pickle.loads(record.outcome_bytes))
            pull = forge.get_pull(record.pr_number)
            entries.append(automerge.RoundEntry(
                pr_number=record.pr_number, scored_head_sha=record.head_sha, tier=view.tier, speedup=view.speedup,
                current_head_sha=pull.head_sha, mergeable=pull.mergeable, is_open=pull.state == "open", draft=pull.draft,
            ))
        policy = automerge.AutomergePolicy(enabled=True, min_tier=self.config.automerge_min_tier)
        decision = automerge.choose_round_merge(entries, policy)
        by_pr = {e.pr_number: e for e in entries}
        for pr_number in decision.merge_candidates:
            entry = by_pr[pr_number]
            pull = forge.get_pull(pr_number)
            result = forge.merge(
                pr_number, entry.scored_head_sha,
                render("gh_merge_title.txt.j2", title=pull.title, pr_number=pr_number).strip(),
                render("gh_merge_message.md.j2", base_sha=base_sha, tier=entry.tier, speedup=entry.speedup, head_sha=entry.scored_head_sha),
            )
            if not result.merged:
                log.info("automerge of #%d refused: %s", pr_number, result.message)
                continue
            self.ledger.mark_round_merged(repo, base_sha, pr_number)
            rebased = automerge.prs_to_rebase(entries, pr_number)
            forge.comment(pr_number, render("comment_automerged.md.j2", base_sha=base_sha, tier=entry.tier,
                                            speedup=entry.speedup, head_sha=entry.scored_head_sha, rebased=rebased))
            self._mark_stale_and_requeue(forge, repo, result.sha or None, only=set(rebased))
            return f"merged #{pr_number}"
        unknown = [n for n, why in decision.passed_over.items() if why == "mergeability not known yet"]
        if unknown and attempt < ROUND_DECISION_RETRIES:
            self.queue.submit_chore(DecideRound(repo=repo, base_sha=base_sha, attempt=attempt + 1), delay=30)
        return f"no merge: {decision.reason}"

    def _mark_stale_and_requeue(self, forge: Forge, repo: str, main_sha: str | None, only: set[int] | None = None) -> int:
        """Main moved: every open PR into main is scored again against it; scored ones get needs-rebase."""
        main_sha = main_sha or self._main_head(forge)
        if not main_sha:
            return 0
        queued = 0
        for pull in forge.list_open_pulls():
            if only is not None and pull.number not in only:
                continue
            if pull.draft or pull.base_ref != self.config.main_branch:
                continue
            if any(label.startswith(TIER_LABEL_PREFIXES) for label in pull.labels) or self.ledger.for_pull(repo, pull.number):
                forge.add_label(pull.number, NEEDS_REBASE_LABEL)
            job = ScoreJob(repo=repo, pr_number=pull.number, head_sha=pull.head_sha, base_sha=main_sha, reason="main moved")
            queued += self.queue.submit_score(job)
        return queued

    # -- chores ---------------------------------------------------------------------------------------
    def run_chore(self, chore: Chore) -> str:
        if isinstance(chore, AnnounceQueued):
            record = self.ledger.get(chore.job_key)
            if record is None or record.state != QUEUED or record.check_id:
                return "no announcement needed"
            self._start_check(self.forge_for(record.repo), record)
            return "announced"
        if isinstance(chore, Reply):
            self.forge_for(chore.repo).comment(chore.pr_number, render(chore.template, **chore.context))
            return "replied"
        if isinstance(chore, SetAutomerge):
            self.ledger.set_flag(f"automerge:{chore.repo}", "on" if chore.enabled else "off")
            self.forge_for(chore.repo).comment(chore.pr_number, render(
                "comment_automerge.md.j2", enabled=chore.enabled, login=chore.requested_by, min_tier=self.config.automerge_min_tier))
            return f"automerge {'on' if chore.enabled else 'off'}"
        if isinstance(chore, RescoreRequest):
            return self._rescore(chore)
        if isinstance(chore, MainMoved):
            forge = self.forge_for(chore.repo)
            return f"requeued {self._mark_stale_and_requeue(forge, chore.repo, chore.main_sha)} PR(s)"
        if isinstance(chore, DecideRound):
            return self.decide_round(chore.repo, chore.base_sha, chore.attempt)
        raise ValueError(f"unknown chore {chore!r}")

    def _rescore(self, chore: RescoreRequest) -> str:
        forge = self.forge_for(chore.repo)
        pull = forge.get_pull(chore.pr_number)
        refusal = None
        if pull.state != "open":
            refusal = f"the pull request is {pull.state}"
        elif pull.draft:
            refusal = "the pull request is a draft; mark it ready for review to have it scored"
        elif pull.base_ref != self.config.main_branch:
            refusal = f"the pull request targets {pull.base_ref}, not {self.config.main_branch}"
        if refusal:
            forge.comment(chore.pr_number, render("comment_rescore_refused.md.j2", login=chore.requested_by, reason=refusal))
            return f"refused: {refusal}"
        main_sha = self._main_head(forge) or pull.base_sha
        job = ScoreJob(repo=chore.repo, pr_number=pull.number, head_sha=pull.head_sha, base_sha=main_sha,
                       reason="rescore", requested_by=chore.requested_by)
        if self.queue.submit_score(job, force=True):
            return "rescore queued"
        forge.comment(chore.pr_number, render("comment_rescore_in_flight.md.j2", login=chore.requested_by,
                                               head_sha=job.head_sha, base_sha=job.base_sha))
        return "already in flight"

    # -- housekeeping -----------------------------------------------------------------------------------
    def sweep(self) -> dict[str, int]:
        """Requeue jobs of dead workers, publish kept verdicts again, forget old deliveries."""
        now = self.clock()
        stale = self.ledger.requeue_stale(now, self.config.stale_after_seconds)
        for key in stale:
            self.queue.enqueue_key(key)
        published = 0
        for record in self.ledger.in_states(SCORED):
            if now - record.updated_at < max(publish_backoff(record.publish_attempts, self.config.publish_retry_seconds), 1.0):
                continue
            if self.publish_recorded(record.key):
                published += 1
                self.decide_round(record.repo, record.base_sha)
        pruned = self.ledger.prune_deliveries(now - DELIVERY_MEMORY_SECONDS)
        return {"requeued": len(stale), "published": published, "pruned_deliveries": pruned}

    def _main_head(self, forge: Forge) -> str | None:
        lookup = getattr(forge, "branch_head_sha", None)
        return lookup(self.config.main_branch) if lookup else None


def _job_context(record: JobRecord) -> dict:
    return {"head_sha": record.head_sha, "base_sha": record.base_sha, "pr_number": record.pr_number, "reason": record.reason}


# -- the process -------------------------------------------------------------------------------------------
class Sweeper(threading.Thread):
    def __init__(self, worker: Worker, interval: float):
        super().__init__(name="evalbot-sweeper", daemon=True)
        self.worker, self.interval = worker, interval
        self.stop = threading.Event()

    def run(self) -> None:
        while not self.stop.wait(self.interval):
            try:
                self.worker.sweep()
            except Exception:
                log.exception("sweep failed; trying again in %.0fs", self.interval)


def github_forge_factory(settings: BotSettings) -> Callable[[str], Forge]:
    from evalbot.forge.github import GitHubForge

    cache: dict[str, Forge] = {}
    lock = threading.Lock()
    if settings.github_app_id:
        key_text = Path(settings.github_app_private_key_path).read_text()
    elif not settings.github_token:
        raise SettingsError("set EVALBOT_GITHUB_TOKEN, or EVALBOT_GITHUB_APP_ID with EVALBOT_GITHUB_APP_PRIVATE_KEY_PATH "
                            "and EVALBOT_GITHUB_INSTALLATION_ID")

    def forge_for(repo: str) -> Forge:
        with lock:
            if repo not in cache:
                common = dict(base_url=settings.github_api_url, receipts_branch=settings.receipts_branch,
                              receipts_dir=settings.receipts_dir, bot_login=settings.bot_login)
                if settings.github_app_id:
                    cache[repo] = GitHubForge.from_app(settings.github_app_id, key_text, int(settings.github_installation_id), repo, throttle=settings.github_throttle, **common)
                else:
                    cache[repo] = GitHubForge.from_token(settings.github_token, repo, throttle=settings.github_throttle, **common)
            return cache[repo]

    return forge_for


def scrub_secrets_from_environment() -> None:
    """The worker keeps its secrets in memory only: nothing it starts can read them from the environment."""
    for name in SECRET_ENV_VARS:
        os.environ.pop(name, None)


def build_worker(settings: BotSettings, queue: JobQueue | None = None, *, forge_for: Callable[[str], Forge] | None = None,
                 scorer: Scorer | None = None, publisher: Publisher | None = None) -> Worker:
    queue = queue or JobQueue.from_settings(settings)
    worker = Worker(
        queue,
        forge_for or github_forge_factory(settings),
        scorer or load_callable(settings.scorer)(settings),
        publisher or load_callable(settings.publisher)(settings),
        WorkerConfig.from_settings(settings),
    )
    queue.bind(worker)
    return worker


def run_worker(settings: BotSettings, *, burst: bool = False) -> int:
    worker = build_worker(settings)
    scrub_secrets_from_environment()
    make_undumpable()  # the token stays in /proc/<pid>/environ and memory: close both to PR code
    config = worker.config
    worker.queue.recover(config.box_id, config.box_lock_path, config.stale_after_seconds)
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
    log.info("worker %s consuming (%d thread(s))", config.worker_id, settings.worker_threads)
    consumer.run()
    sweeper.stop.set()
    return 0


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--burst", action="store_true", help="run what is queued now, then exit")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])


def run(args: argparse.Namespace) -> int:
    logging.basicConfig(level=args.log_level.upper(), format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        settings = settings_from_env()
        settings.require("repo")
        return run_worker(settings, burst=args.burst)
    except SettingsError as exc:
        print(f"evalbot worker: {exc}", file=sys.stderr)
        return 2


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="evalbot worker", description="Score queued pull requests, one at a time per box.")
    add_arguments(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
