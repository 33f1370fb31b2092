"""The Worker: runs score jobs (claim, freshness, check run, score, keep the verdict), publishes kept
verdicts, and sweeps. The scorer and the publisher are injected (see `scoring`), so everything here
is tested with a fake scorer; the worker itself reads only the outcome's tier and speedup (and hands
the outcome to `evalbot.history.adapter` for the history)."""

from __future__ import annotations

import logging
import os
import time
import uuid
from collections.abc import Callable
from typing import Any

import structlog
from huey.exceptions import RetryTask

from evalbot.bot import metrics
from evalbot.bot.jobs.boxlock import BoxLock
from evalbot.bot.jobs.freshness import judge_freshness
from evalbot.bot.jobs.ledger import DONE, FAILED, QUEUED, SCORED, SUPERSEDED, JobRecord, UndecodableOutcome
from evalbot.bot.jobs.model import Chore
from evalbot.bot.jobs.queue import JobQueue
from evalbot.bot.worker import approval, chores, requeue, rounds, tier_labels
from evalbot.bot.worker.headwatch import head_watch
from evalbot.bot.worker.heartbeat import Heartbeat
from evalbot.bot.worker.interrupt import ScoringGuard, ScoringInterrupted, ScoringSuperseded
from evalbot.bot.worker.progress import CheckRunProgress
from evalbot.bot.worker.scoring import Publisher, Scorer
from evalbot.decide.outcome import ScoreOutcome
from evalbot.decide.scorings import TreeBusy
from evalbot.forge.base import CHECK_NAME, Forge
from evalbot.forge.github_retry import ForgeUnavailable
from evalbot.history.adapter import history_entry, record_scoring
from evalbot.history.store import HistoryStore, recorded
from evalbot.report.check_run import INFRA_CONCLUSION, SUPERSEDED_CONCLUSION, details_url
from evalbot.report.render import render
from evalbot.settings import Settings
from evalbot.settings.tiers import NEEDS_REBASE_LABEL

log = logging.getLogger("evalbot.worker")

DELIVERY_MEMORY_SECONDS = 30 * 24 * 3600
CHECK_WAIT_SECONDS = 3.0  # how long a job waits for the check run that another thread is creating for it


def publish_backoff(publish_attempts: int, base: float) -> float:
    """Seconds to wait before publishing a kept verdict again: doubling, at most an hour."""
    return min(3600.0, base * (2 ** max(0, publish_attempts - 1))) if publish_attempts else 0.0


class Worker:
    def __init__(
        self,
        queue: JobQueue,
        forge_for: Callable[[str], Forge],
        scorer: Scorer,
        publisher: Publisher,
        settings: Settings,
        clock: Callable[[], float] = time.time,
        history: HistoryStore | None = None,
    ):
        self.queue, self.ledger = queue, queue.ledger
        self.forge_for, self.scorer, self.publisher = forge_for, scorer, publisher
        self.settings, self.clock, self.history = settings, clock, history
        self.worker_id = f"{settings.box_name()}/{os.getpid()}/{uuid.uuid4().hex[:8]}"
        self.check_wait_seconds = CHECK_WAIT_SECONDS
        self.guard = ScoringGuard()  # SIGTERM interrupts the running score through it (main.py)

    def render(self, template: str, /, **context: Any) -> str:
        return render(template, templates=self.settings.templates_dir, **context)

    def main_head(self, forge: Forge) -> str:
        return forge.branch_head_sha(self.settings.main_branch)

    # -- score jobs ----------------------------------------------------------------------------------
    def details_url(self, record: JobRecord) -> str:
        return details_url(self.settings.public_url, record.pr_number, record.head_sha)

    def run_score(self, key: str) -> str:
        with structlog.contextvars.bound_contextvars(job=key):
            return self._run_score(key)

    def _run_score(self, key: str) -> str:
        """A score message is a turn: it runs the first queued job in fair order (`JobQueue.fair_order`),
        which need not be its own; every queued job has a message of its own, so each gets a turn."""
        own = self.ledger.get(key)
        waits = own is not None and own.state == QUEUED  # its message must not be lost while it waits
        if not self.queue.fair_order(self.clock()):
            if waits:  # put back to wait: its turn comes when it may run
                raise RetryTask(delay=max(own.not_before - self.clock(), 0.05))
            return f"skipped: {own.state if own else 'unknown job'}"
        if self.guard.stopping.is_set():  # stopping: leave it queued for the next worker
            raise RetryTask(delay=self.settings.busy_retry_seconds)
        lock = BoxLock(self.settings.box_lock_path)
        if not lock.try_acquire():
            raise RetryTask(delay=self.settings.busy_retry_seconds)  # this box is busy; any box may take it
        try:
            taken = next((r for r in self.queue.fair_order(self.clock())
                          if self.ledger.claim(r.key, self.worker_id, self.clock())), None)
            if taken is None:  # others took every one; its own, waiting still, keeps its message
                if (latest := self.ledger.get(key)) is not None and latest.state == QUEUED:
                    raise RetryTask(delay=max(latest.not_before - self.clock(), self.settings.busy_retry_seconds))
                return "skipped: claimed by another worker"
            claimed = taken.key
            beat = lambda: self.ledger.heartbeat(claimed, self.worker_id, self.clock())  # noqa: E731
            with structlog.contextvars.bound_contextvars(job=claimed), Heartbeat(beat, self.settings.heartbeat_seconds):
                return self._score_claimed(self.ledger.get(claimed))
        finally:
            lock.release()

    def _score_claimed(self, record: JobRecord) -> str:
        job, forge = record.job, self.forge_for(record.repo)
        try:
            pull = forge.get_pull(job.pr_number)
            freshness = judge_freshness(job, pull, self.main_head(forge), self.settings.main_branch)
        except ForgeUnavailable as exc:  # GitHub is down: not the job's fault, and no attempt spent
            return requeue.forge_outage(self, record, exc)
        except Exception as exc:
            return self._infra_failure(record, forge, exc)
        if not freshness.run:
            self._supersede(forge, record, freshness.why)
            if freshness.replacement is not None:
                self.queue.submit_score(freshness.replacement)
            return f"superseded: {freshness.why}"
        try:
            hold = approval.needs_approval(self, pull)
        except ForgeUnavailable as exc:  # the author's permission could not be asked: wait for GitHub
            return requeue.forge_outage(self, record, exc)
        if hold:
            return approval.hold(self, forge, record, pull)
        tier_labels.clear_stale(self, forge, record, pull)
        # its measurement starts: its requester's turn is spent (not by a job superseded or held before it)
        turn = (self.ledger.served_at(record.requested_by), self.clock())
        self.ledger.mark_served(record.requested_by, turn[1])
        started_check = record.check_id or self.start_check(forge, record)

        def check_id() -> str:
            # a queued announcement on another consumer thread may have won the claim and create the check
            # run after this score started: look it up again until one is known
            return started_check or self.check_id_of(record.key)

        def show_progress(step: str, done: list[str]) -> None:
            if current := check_id():
                forge.update_check(
                    current, status="in_progress", title=self.render("gh_check_title_progress.txt.j2"),
                    summary=self.render("gh_check_progress.md.j2", head_sha=job.head_sha, base_sha=job.base_sha,
                                        box=self.settings.box_name(), attempt=record.attempts, step=step, done_steps=done),
                )

        progress = CheckRunProgress(show_progress, self.settings.progress_seconds, self.clock)
        moved = head_watch(self.ledger, forge, record, self.clock)

        def step(line: str) -> None:  # the scorer's progress; where a push while scoring ends the scoring
            if (why := moved()) is not None:
                raise ScoringSuperseded(why)
            progress(line)

        started = time.monotonic()
        try:
            progress("preparing worktrees")
            outcome = self.guard.run(lambda: self.scorer(job, step))
            if not isinstance(outcome, ScoreOutcome):  # an infrastructure error, not a verdict
                raise TypeError(f"the scorer returned a {type(outcome).__name__}, not a ScoreOutcome")
        except ScoringSuperseded as exc:
            self._supersede(forge, record, str(exc), check_id())
            return f"superseded while scoring: {exc}"
        except ScoringInterrupted:
            return requeue.interrupted(self, record, forge, check_id())
        except TreeBusy as exc:  # another box measures this very tree now: wait for its verdict, unspent
            return requeue.tree_busy(self, record, forge, check_id(), str(exc), turn)
        except Exception as exc:
            metrics.record_duration(self.ledger, time.monotonic() - started, profile=self._profile(), status="infra_error")
            return self._infra_failure(record, forge, exc, check_id=check_id())
        metrics.record_duration(self.ledger, time.monotonic() - started, profile=outcome.profile, status=outcome.verdict.status)
        if not self.ledger.record_outcome(record.key, self.worker_id, outcome, self.clock()):
            return "dropped: another worker took this job over"
        if self.history is not None:
            record_scoring(self.history, outcome, repo=record.repo)  # and the calibration it gated with
        self.publish_recorded(record.key)
        self.decide_round(record.repo, record.base_sha)
        return "scored"

    def _supersede(self, forge: Forge, record: JobRecord, why: str, check_id: str = "") -> None:
        self.ledger.finish(record.key, SUPERSEDED, self.clock(), why, worker_id=self.worker_id)
        record.check_id = check_id or record.check_id or self.ending_check_id(record.key)
        self._close_check(forge, record, SUPERSEDED_CONCLUSION, self.render("gh_check_title_superseded.txt.j2"),
                          self.render("gh_check_superseded.md.j2", why=why))

    def _profile(self) -> str:
        return self.settings.profile or "default"

    def check_id_of(self, key: str) -> str:
        latest = self.ledger.get(key)
        return latest.check_id if latest is not None else ""

    def _await_check_id(self, key: str) -> str:
        """The id of the check run that another worker or thread created or is creating right now for this
        job: its creation gets a moment to land ("" if it does not)."""
        deadline = time.monotonic() + self.check_wait_seconds
        while not (check_id := self.check_id_of(key)) and time.monotonic() < deadline:
            time.sleep(0.05)
        return check_id

    def ending_check_id(self, key: str) -> str:
        """For a job that ends now unscored: the check run to close, if another thread created or is creating
        one; if none, the claim is taken, so that no queued announcement creates one after the end."""
        return "" if self.ledger.claim_check(key, self.worker_id) else self._await_check_id(key)

    def start_check(self, forge: Forge, record: JobRecord) -> str:
        if not self.ledger.claim_check(record.key, self.worker_id):
            # with still no id after the wait, the publisher creates one at the end rather than risk a duplicate now
            return self._await_check_id(record.key)
        try:
            check_id = forge.start_check(record.head_sha, CHECK_NAME, self.render(
                "gh_check_queued.md.j2", head_sha=record.head_sha, base_sha=record.base_sha,
                pr_number=record.pr_number, reason=record.reason), external_id=record.key,
                details_url=self.details_url(record))
        except Exception as exc:  # the check run is a courtesy; the verdict does not depend on it
            log.warning("could not create the check run for %s: %s", record.key, exc)
            return ""
        self.ledger.set_check_id(record.key, check_id)
        return check_id

    def _close_check(self, forge: Forge, record: JobRecord, conclusion: str, title: str, summary: str) -> None:
        if not record.check_id:
            return
        try:
            forge.update_check(record.check_id, status="completed", title=title, summary=summary, conclusion=conclusion,
                               details_url=self.details_url(record))
        except Exception as exc:
            log.warning("could not complete check run %s: %s", record.check_id, exc)

    def _infra_failure(self, record: JobRecord, forge: Forge, exc: Exception, check_id: str = "") -> str:
        """Never a verdict: retry later, and after max_attempts say so on the check run."""
        error = f"{type(exc).__name__}: {exc}"[:1000]
        log.error("job %s failed (attempt %d): %s", record.key, record.attempts, error)
        now = self.clock()
        if record.attempts < self.settings.max_attempts:
            requeue.put_back(self, record, f"retrying after: {error}", self.settings.infra_retry_seconds)
            return f"retrying: {error}"
        self.ledger.finish(record.key, FAILED, now, error, worker_id=self.worker_id)
        tier_labels.clear(self, forge, record, "no verdict: infrastructure failure")
        latest = self.ledger.get(record.key) or record
        if check_id and not latest.check_id:
            latest.check_id = check_id
        self._close_check(forge, latest, INFRA_CONCLUSION, self.render("gh_check_title_infra.txt.j2"),
                          self.render("gh_check_infra_error.md.j2", attempts=record.attempts, error=error))
        return f"failed: {error}"

    # -- publication (also retried by the sweeper) ---------------------------------------------------------
    def publish_recorded(self, key: str) -> bool:
        record = self.ledger.get(key)
        if record is None or record.state != SCORED:
            return False
        try:
            outcome = record.load_outcome()
        except UndecodableOutcome as exc:  # never unpickled, never retried: the job is failed, loudly
            log.error("%s", exc)
            self.ledger.finish(key, FAILED, self.clock(), str(exc)[:1000])
            return False
        try:
            forge = self.forge_for(record.repo)
            result = self.publisher(outcome, forge, record.pr_number, record.check_id or None)
            receipt_ref = getattr(result, "receipt_ref", "")
            if receipt_ref and self.history is not None:
                recorded(self.history, history_entry(outcome, repo=record.repo, receipt_ref=receipt_ref))
            if self.main_head(forge) == record.base_sha:
                forge.remove_label(record.pr_number, NEEDS_REBASE_LABEL)
            if outcome.tier in self.settings.close_on:
                forge.comment(record.pr_number, self.render("comment_closed_by_verdict.md.j2", tier=outcome.tier,
                                                            close_on=sorted(self.settings.close_on)))
                forge.close(record.pr_number)
        except Exception as exc:
            note = f"publication failed, verdict kept: {type(exc).__name__}: {exc}"[:1000]
            log.warning("%s: %s", key, note)
            self.ledger.note_publish_failure(key, self.clock(), note)
            return False
        self.ledger.finish(key, DONE, self.clock(), "published")
        return True

    # -- automerge rounds and chores (rounds.py, chores.py) ---------------------------------------------
    def automerge_enabled(self, repo: str) -> bool:
        flag = self.ledger.get_flag(f"automerge:{repo}")
        return self.settings.automerge if flag is None else flag == "on"

    def decide_round(self, repo: str, base_sha: str, attempt: int = 0) -> str:
        return rounds.decide_round(self, repo, base_sha, attempt)

    def run_chore(self, chore: Chore) -> str:
        bound = {"chore": chore.kind, "job": getattr(chore, "job_key", None)}
        with structlog.contextvars.bound_contextvars(**{k: v for k, v in bound.items() if v}):
            return chores.run_chore(self, chore)

    # -- housekeeping -----------------------------------------------------------------------------------
    def sweep(self) -> dict[str, int]:
        """Requeue jobs of dead workers, publish kept verdicts again, forget old deliveries."""
        now = self.clock()
        stale = self.ledger.requeue_stale(now, self.settings.stale_after_seconds)
        for key in stale:
            self.queue.enqueue_key(key)
        published = 0
        for record in self.ledger.in_states(SCORED):
            if now - record.updated_at < max(publish_backoff(record.publish_attempts, self.settings.publish_retry_seconds), 1.0):
                continue
            if self.publish_recorded(record.key):
                published += 1
                self.decide_round(record.repo, record.base_sha)
        pruned = self.ledger.prune_deliveries(now - DELIVERY_MEMORY_SECONDS)
        self.ledger.prune_rates(now - 2 * self.settings.refusal_window_seconds)
        return {"requeued": len(stale), "published": published, "pruned_deliveries": pruned}
