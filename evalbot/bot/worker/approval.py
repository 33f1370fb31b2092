"""`/ok-to-test`: the bot runs the code of a PR from a fork only when its author is an owner, member or
collaborator (or on the allow-list), or after a maintainer approved the PR (as Prow does).

The gate sits where every score passes, the worker's claim (a PR event, /rescore, Re-run, main
moving: all end there), and it reads the PR as GitHub tells it now. An approval is kept in the
ledger for the PR: later pushes to it are scored without asking again (Prow's `ok-to-test` label).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from evalbot.bot.commands import is_trusted
from evalbot.bot.jobs.ledger import SUPERSEDED, JobRecord
from evalbot.forge.base import CHECK_NAME, Forge, PullInfo
from evalbot.report.check_run import AWAITING_APPROVAL_CONCLUSION
from evalbot.report.scorecard import SCORECARD_MARKER_PREFIX, scorecard_marker
from evalbot.settings.tiers import NEEDS_OK_TO_TEST_LABEL

if TYPE_CHECKING:
    from evalbot.bot.worker.worker import Worker


def _flag(repo: str, number: int) -> str:
    return f"ok-to-test:{repo.lower()}#{number}"


def approved(worker: Worker, repo: str, number: int) -> bool:
    return worker.ledger.get_flag(_flag(repo, number)) is not None


def needs_approval(worker: Worker, pull: PullInfo, repo: str | None = None) -> bool:
    settings = worker.settings
    if not settings.require_ok_to_test or not pull.is_fork:
        return False
    if is_trusted(pull.author_association, pull.author, settings.command_allowlist):
        return False
    return not approved(worker, repo or settings.repo, pull.number)


def hold(worker: Worker, forge: Forge, record: JobRecord, pull: PullInfo) -> str:
    """Do not run the PR's code: the job ends, the scorecard says how to ask, the check waits."""
    why = "waiting for a maintainer's /ok-to-test"
    worker.ledger.finish(record.key, SUPERSEDED, worker.clock(), why, worker_id=worker.worker_id)
    body = worker.render("comment_ok_to_test.md.j2", marker=scorecard_marker(pull.head_sha), author=pull.author,
                         head_sha=pull.head_sha)
    forge.upsert_sticky_comment(pull.number, SCORECARD_MARKER_PREFIX, body)
    forge.add_label(pull.number, NEEDS_OK_TO_TEST_LABEL)
    summary = worker.render("gh_check_ok_to_test.md.j2", author=pull.author, association=pull.author_association)
    title = worker.render("gh_check_title_ok_to_test.txt.j2").strip()
    latest = worker.ledger.get(record.key) or record
    # through the claim: a queued announcement creating the run right now must not leave a second one
    # `queued` forever beside this one
    check_id = latest.check_id or worker.start_check(forge, latest) or forge.start_check(
        record.head_sha, CHECK_NAME, summary, external_id=record.key, details_url=worker.details_url(record))
    forge.update_check(check_id, status="completed", title=title, summary=summary,
                       conclusion=AWAITING_APPROVAL_CONCLUSION, details_url=worker.details_url(record))
    return f"held: {why}"


def remember(worker: Worker, repo: str, number: int, by: str) -> None:
    worker.ledger.set_flag(_flag(repo, number), by)
