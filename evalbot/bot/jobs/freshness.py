"""Is a queued job still worth running? A pure decision over the job and what the forge says now."""

from __future__ import annotations

from dataclasses import dataclass

from evalbot.bot.jobs.model import ScoreJob
from evalbot.forge.base import PullInfo


@dataclass(frozen=True)
class Freshness:
    run: bool
    why: str = ""
    replacement: ScoreJob | None = None  # the job to queue instead (current head and main)


def judge_freshness(job: ScoreJob, pull: PullInfo, main_sha: str | None, main_branch: str) -> Freshness:
    """Run a job only for an open, non-draft PR into main whose head and main are still the scored ones.

    When the head or main moved, the job is superseded and a job for the current pair is proposed
    (the ledger ignores it if it already exists). `main_sha` None: main's head is unknown, trust the job.
    """
    if pull.state != "open":
        return Freshness(False, f"pull request is {pull.state}")
    if pull.draft:
        return Freshness(False, "pull request is a draft")
    if pull.base_ref != main_branch:
        return Freshness(False, f"pull request now targets {pull.base_ref}")
    current_main = main_sha or job.base_sha
    if pull.head_sha == job.head_sha and current_main == job.base_sha:
        return Freshness(True)
    moved = "head" if pull.head_sha != job.head_sha else "main"
    if pull.head_sha != job.head_sha and current_main != job.base_sha:
        moved = "head and main"
    replacement = ScoreJob(
        repo=job.repo, pr_number=job.pr_number, head_sha=pull.head_sha, base_sha=current_main,
        reason=f"{moved} moved", requested_by=job.requested_by,
    )
    return Freshness(False, f"{moved} moved since it was queued", replacement)
