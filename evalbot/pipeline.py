"""The whole flow of one score, used by the CLI, the demo and the worker (evalbot.bot.worker).

    resolve refs ─▶ pin harness from the base tip ─▶ harness changed? ─▶ worktrees + overlay   measure/
        ─▶ ABBA harness runs                                                                  measure/
        ─▶ anti-forgery ─▶ (re-verify) ─▶ measurements ─▶ gates ─▶ tier ─▶ verdict            decide/
        ─▶ receipt (signed) ─▶ scorecard / check text   [score_refs -> ScoreOutcome]          report/
    ScoreOutcome ─▶ labels, sticky scorecard, check run, stored receipt   [publish]           forge/

Setup problems a user must fix (a ref that does not resolve, no harness manifest, a failed pin, a
broken signing key) raise `EvalbotError`. Anything that goes wrong while the harness runs becomes
an infrastructure-error verdict in the outcome: reported, never read as slow or lossy.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from evalbot.decide.calibration import noise_from_aa
from evalbot.decide.integrity import check_all
from evalbot.decide.measurements import Measurements, summarize
from evalbot.decide.noise import NoiseFloor, load_noise_floor, store_noise_floor, utc_now
from evalbot.decide.outcome import ReceiptInfo, RunSummary, ScoreOutcome
from evalbot.decide.records import RunRecord
from evalbot.decide.reverify import ReverifierFactory, reverify_streams
from evalbot.decide.verdict import Verdict, decide, infrastructure_error, not_evaluated_harness_changed
from evalbot.errors import EvalbotError
from evalbot.forge.base import CHECK_NAME, Forge
from evalbot.measure import gitops
from evalbot.measure.checkout import PinnedHarness, overlaid_worktrees, pin_harness
from evalbot.measure.device import profile_for
from evalbot.measure.harness_runner import HarnessRunner, ProgressSink
from evalbot.report import receipt
from evalbot.report.check_run import check_conclusion, details_url
from evalbot.report.scorecard import SCORECARD_MARKER_PREFIX, check_report, render_scorecard
from evalbot.settings import STATE_DIR_NAME, Settings, load_settings


def state_dir_for(repo: Path) -> Path:
    path = repo / STATE_DIR_NAME
    path.mkdir(parents=True, exist_ok=True)
    ignore = path / ".gitignore"
    if not ignore.exists():
        ignore.write_text("# the bot's state; never committed\n*\n")
    return path


def load_signing_key(settings: Settings) -> Ed25519PrivateKey | None:
    """The Ed25519 key from EVALBOT_SIGNING_KEY / config, or None ("collected, not signed")."""
    if settings.signing_key is None:
        return None
    return receipt.load_private_key(Path(settings.signing_key).expanduser())


def _first_failure(records: list[RunRecord]) -> RunRecord | None:
    return next((r for r in records if not r.ok), None)


def _run_summaries(records: list[RunRecord]) -> list[RunSummary]:
    return [
        RunSummary(round=r.round, ref=r.ref, program=r.program, nonce=r.nonce, wall_s=round(r.wall_s, 6),
                   returncode=r.returncode, timed_out=r.timed_out, failure=r.failure)
        for r in records
    ]


def _finish(
    outcome: ScoreOutcome, settings: Settings, state_dir: Path, key: Ed25519PrivateKey | None
) -> ScoreOutcome:
    outcome.finished_at = utc_now()
    statement = receipt.build_statement(outcome, settings.scoring_dump())
    envelope = receipt.make_envelope(statement, key)
    path = receipt.write_receipt(state_dir, outcome, envelope)
    outcome.receipt = ReceiptInfo(
        path=str(path), signed=key is not None, keyid=receipt.keyid_for(key.public_key()) if key else "",
        envelope=receipt.envelope_bytes(envelope).decode("utf-8"),
    )
    outcome.scorecard = render_scorecard(outcome, settings.templates_dir)
    outcome.check = check_report(outcome, settings.templates_dir)
    return outcome


def score_refs(
    repo: Path,
    base: str,
    head: str,
    *,
    profile: str | None = None,
    rounds: int | None = None,
    settings: Settings | None = None,
    pr_number: int | None = None,
    harness_ref: str | None = None,
    reverifier_factory: ReverifierFactory | None = None,
    progress: ProgressSink | None = None,
    environ: Mapping[str, str] | None = None,
) -> ScoreOutcome:
    """Score `head` against `base` in `repo` and return everything the run produced.

    `harness_ref` names the ruler's source; by default the base branch tip (`origin/<base>` when
    that exists). A caller that passes SHAs for `base` (the webhook worker) should pass the base
    branch here, e.g. "origin/main", so the harness still comes from the tip.
    """
    repo = gitops.repo_root(repo)
    settings = settings or load_settings(repo)
    profile = profile_for(settings, profile)
    prof = settings.profile_settings(profile)
    rounds = prof.rounds if rounds is None else rounds
    if rounds < 1:
        raise EvalbotError("--rounds must be at least 1")
    key = load_signing_key(settings)  # a broken key fails now, not after an hour of measuring
    state_dir = state_dir_for(repo)
    pinned = pin_harness(repo, base, head, settings, harness_ref)
    box = settings.box_name()
    outcome_fields = dict(
        repo=str(repo), base_ref=base, head_ref=head, base_sha=pinned.base_sha, head_sha=pinned.head_sha,
        harness_ref=pinned.harness_ref, harness_sha=pinned.harness_sha, harness_digest=pinned.harness_digest,
        profile=profile, rounds=rounds, reps=prof.reps, box=box, pr_number=pr_number, started_at=utc_now(),
    )

    changed = gitops.harness_changes(repo, pinned.base_sha, pinned.head_sha, pinned.patterns)
    if changed:
        outcome = ScoreOutcome(verdict=not_evaluated_harness_changed(changed), **outcome_fields)
        return _finish(outcome, settings, state_dir, key)

    noise = load_noise_floor(state_dir, box, profile, settings.stats.default_noise_floor)
    records, measurements, verdict = _measure(
        pinned, settings, profile, rounds, noise, reverifier_factory, progress, environ
    )
    outcome = ScoreOutcome(verdict=verdict, measurements=measurements, runs=_run_summaries(records), **outcome_fields)
    return _finish(outcome, settings, state_dir, key)


def _measure(
    pinned: PinnedHarness,
    settings: Settings,
    profile: str,
    rounds: int,
    noise: NoiseFloor,
    reverifier_factory: ReverifierFactory | None,
    progress: ProgressSink | None,
    environ: Mapping[str, str] | None,
) -> tuple[list[RunRecord], Measurements | None, Verdict]:
    prof = settings.profile_settings(profile)
    with gitops.scratch_dir("evalbot-run-") as scratch:
        with overlaid_worktrees(pinned, scratch, ("main", "pr"), (pinned.base_sha, pinned.head_sha)) as (wt_base, wt_head):
            (scratch / "io").mkdir()
            runner = HarnessRunner(settings, profile, {"base": wt_base, "head": wt_head}, scratch / "io", environ)
            for ref, label in (("base", "main"), ("head", "PR")):
                problem = runner.check_imports(ref)  # type: ignore[arg-type]
                if problem is not None:
                    return [], None, infrastructure_error(f"preflight ({label})", problem)
            records = runner.run_all(rounds, progress)
            failed = _first_failure(records)
            if failed is not None:
                verdict = infrastructure_error(failed.label, failed.failure or "failed", failed.stderr_tail)
                return records, None, verdict
            integrity = check_all(records, prof.reps, profile, settings.integrity, noise.tau_check_wall)
            reverifier = reverifier_factory(wt_base, profile) if reverifier_factory else None
            head_lines = [line for r in records if r.ref == "head" and r.program == "tau_check" for line in r.tau_lines()]
            reverified = reverify_streams(reverifier, head_lines, profile)
    measurements = summarize(
        records, profile=profile, rounds=rounds, requested_reps=prof.reps, noise=noise,
        integrity=integrity, reverify=reverified,
    )
    return records, measurements, decide(measurements, settings)


# ---------------------------------------------------------------------------------------------
# Calibration (A/A)


def calibrate(
    repo: Path,
    base: str = "main",
    *,
    profile: str | None = None,
    rounds: int | None = None,
    settings: Settings | None = None,
    harness_ref: str | None = None,
    progress: ProgressSink | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[NoiseFloor, Path]:
    """Run `base` against itself (A/A) and store the box's noise floor for `profile`."""
    repo = gitops.repo_root(repo)
    settings = settings or load_settings(repo)
    profile = profile_for(settings, profile)
    prof = settings.profile_settings(profile)
    rounds = max(prof.rounds, 2) if rounds is None else rounds
    if rounds < 1:
        raise EvalbotError("--rounds must be at least 1")
    pinned = pin_harness(repo, base, base, settings, harness_ref)
    with gitops.scratch_dir("evalbot-aa-") as scratch:
        with overlaid_worktrees(pinned, scratch, ("a", "b"), (pinned.base_sha, pinned.base_sha)) as (wt_a, wt_b):
            (scratch / "io").mkdir()
            runner = HarnessRunner(settings, profile, {"base": wt_a, "head": wt_b}, scratch / "io", environ)
            problem = runner.check_imports("base")
            if problem is not None:
                raise EvalbotError(f"calibration preflight failed: {problem}")
            records = runner.run_all(rounds, progress)
    failed = _first_failure(records)
    if failed is not None:
        raise EvalbotError(f"calibration run failed in {failed.label}: {failed.failure}")
    # wall_noise=1.0 switches the wall-clock cross-check off: A/A claims no saving to cross-check.
    integrity = check_all(records, prof.reps, profile, settings.integrity, wall_noise=1.0)
    if integrity.findings:
        raise EvalbotError(f"calibration runs failed the bot's checks: {integrity.findings[0].message}")
    floor = noise_from_aa(
        records, box=settings.box_name(), profile=profile, rounds=rounds, base_sha=pinned.base_sha,
        margin=settings.stats.noise_margin,
    )
    return floor, store_noise_floor(state_dir_for(repo), floor)


# ---------------------------------------------------------------------------------------------
# Publishing


@dataclass
class PublishResult:
    published: bool
    reason: str = ""
    labels: list[str] = field(default_factory=list)
    comment_id: str = ""
    check_id: str = ""
    receipt_ref: str = ""


def publish(
    outcome: ScoreOutcome, forge: Forge, pr_number: int, settings: Settings | None = None, check_id: str | None = None
) -> PublishResult:
    """Labels (old tier labels removed first), the one sticky scorecard, the check run, the receipt.

    Nothing is published for a head the PR no longer points at: a stale verdict must not label
    (or later merge) newer code.
    """
    settings = settings or Settings()
    pull = forge.get_pull(pr_number)
    if pull.head_sha != outcome.head_sha:
        return PublishResult(
            published=False,
            reason=f"PR #{pr_number} moved to {pull.head_sha[:12]}; the score is for {outcome.head_sha[:12]}",
        )
    check = outcome.check or check_report(outcome, settings.templates_dir)
    # The conclusion is the merge policy (report/check_run.py): not evaluated and infrastructure errors
    # must not pass a required check, whatever the check text's own default says.
    conclusion = check_conclusion(outcome.verdict.status)
    link = details_url(settings.public_url, pr_number, outcome.head_sha)
    forge.replace_labels(pr_number, settings.tiers.label_prefixes, outcome.verdict.labels)
    comment_id = forge.upsert_sticky_comment(pr_number, SCORECARD_MARKER_PREFIX, outcome.scorecard)
    if check_id is None:
        check_id = forge.start_check(outcome.head_sha, CHECK_NAME, check.summary, details_url=link)
    forge.update_check(check_id, status="completed", title=check.title, summary=check.summary, conclusion=conclusion,
                       details_url=link)
    receipt_ref = ""
    if outcome.receipt is not None:
        body = outcome.receipt.envelope or Path(outcome.receipt.path).read_text()
        receipt_ref = forge.store_receipt(pr_number, outcome.head_sha, body)
    return PublishResult(
        published=True, labels=list(outcome.verdict.labels), comment_id=comment_id, check_id=check_id,
        receipt_ref=receipt_ref,
    )
