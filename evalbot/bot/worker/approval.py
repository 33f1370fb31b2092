"""`/ok-to-test`: the bot runs the code of a PR from a fork only when its author has write access to the
repository (GitHub's answer to `Forge.permission`, or the allow-list), or after a maintainer approved
the PR's current head.

The gate sits where every score passes, the worker's claim (a PR event, /rescore, Re-run, main
moving: all end there), and it reads the PR as GitHub tells it now. An approval is kept in the
ledger for the PR *and the head it approved*: a later push by an author without write access waits
for a new /ok-to-test (the code a maintainer looked at is the only code the bot runs).

`refusal` is the permission check of every maintainer command, made when the worker acts on it: the
commenter's role on the repository, from the forge; a lookup that fails refuses.
"""

from __future__ import annotations

import logging
from typing import TYPE_CHECKING

from evalbot.bot.commands import COMMANDS, ROLES, role_allows
from evalbot.bot.jobs.ledger import SUPERSEDED, JobRecord
from evalbot.forge.base import CHECK_NAME, Forge, PullInfo
from evalbot.forge.github_retry import ForgeUnavailable
from evalbot.report.check_run import AWAITING_APPROVAL_CONCLUSION
from evalbot.report.scorecard import SCORECARD_MARKER_PREFIX, scorecard_marker
from evalbot.settings.tiers import NEEDS_OK_TO_TEST_LABEL

if TYPE_CHECKING:
    from evalbot.bot.worker.worker import Worker


log = logging.getLogger("evalbot.worker.approval")


def _flag(repo: str, number: int, head_sha: str) -> str:
    return f"ok-to-test:{repo.lower()}#{number}@{head_sha}"


def approved(worker: Worker, repo: str, number: int, head_sha: str) -> bool:
    return worker.ledger.get_flag(_flag(repo, number, head_sha)) is not None


def _allowlisted(worker: Worker, login: str) -> bool:
    return login.lower() in {name.lower() for name in worker.settings.command_allowlist}


def role_of(forge: Forge, login: str) -> str:
    """`login`'s role on the repository; raises when the forge cannot say (callers refuse)."""
    ask = getattr(forge, "permission", None)
    if ask is None:
        raise RuntimeError(f"{type(forge).__name__} cannot look up permissions")
    return ask(login)


def needs_approval(worker: Worker, pull: PullInfo, repo: str | None = None) -> bool:
    settings = worker.settings
    if not settings.require_ok_to_test or not pull.is_fork:
        return False
    repo = repo or settings.repo
    if approved(worker, repo, pull.number, pull.head_sha) or _allowlisted(worker, pull.author):
        return False
    try:
        return not role_allows(role_of(worker.forge_for(repo), pull.author), "write")
    except ForgeUnavailable:
        raise  # GitHub is down: the job waits for it (requeue.forge_outage), it is not held for /ok-to-test
    except Exception as exc:  # noqa: BLE001 - fail closed: an unknown author waits for /ok-to-test
        log.warning("permission of %s on %s unknown (%s); #%d waits for /ok-to-test", pull.author, repo,
                    " ".join(str(exc).split())[:200], pull.number)
        return True


def refusal(worker: Worker, forge: Forge, command: str, login: str) -> str | None:
    """Why `login` may not run `/command` here (None: they may). Asked of the forge each time (cached
    there briefly); the allow-list grants what write access grants; a failed lookup refuses."""
    spec = COMMANDS[command]
    if not spec.maintainers_only:
        return None
    if spec.min_role == "write" and _allowlisted(worker, login):
        return None
    try:
        role = role_of(forge, login)
    except Exception as exc:  # noqa: BLE001 - fail closed, one line
        log.warning("/%s by %s refused: permission lookup failed: %s", command, login, " ".join(str(exc).split())[:200])
        return f"I could not check your permission on this repository, so I have not acted on `{spec.usage}`; try again later"
    if role_allows(role, spec.min_role):
        return None
    role = role if role in ROLES else "unknown"
    return f"`{spec.usage}` needs {spec.min_role} access to this repository (yours: {role}), so I have not acted on it"


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


def pushed_after(worker: Worker, repo: str, number: int, head_sha: str, commented_at: float) -> str | None:
    """Why an /ok-to-test written at `commented_at` does not approve `head_sha` (None: it does): the bot
    first heard of that head after the comment, so the maintainer cannot have looked at it."""
    seen = [r.created_at for r in worker.ledger.for_pull(repo, number) if r.head_sha == head_sha]
    if commented_at and seen and min(seen) > commented_at:
        return (f"the pull request moved to `{head_sha[:12]}` after your `/ok-to-test`; look at that commit and say "
                "`/ok-to-test` again to have it run")
    return None


def remember(worker: Worker, repo: str, number: int, by: str, head_sha: str | None = None) -> str:
    """Approve PR `number` at `head_sha` (None: its head now). Returns the approved head."""
    head_sha = head_sha or worker.forge_for(repo).get_pull(number).head_sha
    worker.ledger.set_flag(_flag(repo, number, head_sha), by)
    return head_sha
