"""The whole flow of one score, used by the CLI, the demo and the worker (evalbot.bot.worker).

    resolve refs ─▶ pin harness from the base tip ─▶ harness changed? ─▶ merge into main's tip   measure/
        ─▶ (A/A calibration, first time) ─▶ harness servers, requests timed by the bot        measure/
        ─▶ integrity ─▶ measurements ─▶ gates ─▶ tier ─▶ verdict                              decide/
        ─▶ receipt (signed) ─▶ scorecard / check text   [score_refs -> ScoreOutcome]          report/
    ScoreOutcome ─▶ labels, sticky scorecard, check run, stored receipt   [publish]           forge/

Setup problems a user must fix (a ref that does not resolve, no harness manifest, a failed pin, a
broken signing key, no sandbox tool) raise `EvalbotError`. What goes wrong while the harness servers
run is attributed: the PR's processes -> the integrity gate (REJECT, with the reason); main's
processes or the bot's own environment -> an infrastructure-error verdict, never read as slow or lossy.
"""

from __future__ import annotations

import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

from evalbot.decide import scorings
from evalbot.decide.calibration import noise_from_aa
from evalbot.decide.integrity import check_records
from evalbot.decide.measurements import summarize
from evalbot.decide.noise import NoiseFloor, load_noise_floor, store_noise_floor, utc_now
from evalbot.decide.outcome import ReceiptInfo, RequestSummary, ScoreOutcome
from evalbot.decide.verdict import decide, not_evaluated_harness_changed, not_evaluated_needs_rebase
from evalbot.errors import EvalbotError
from evalbot.forge.base import CHECK_NAME, Forge
from evalbot.measure import gitops
from evalbot.measure.checkout import PinnedHarness, pin_harness
from evalbot.measure.device import profile_for
from evalbot.measure.run import ProgressSink, run_campaign
from evalbot.report import receipt
from evalbot.report.check_run import check_conclusion, details_url
from evalbot.report.scorecard import SCORECARD_MARKER_PREFIX, check_report, render_scorecard
from evalbot.settings import STATE_DIR_NAME, Settings, load_settings
from evalbot.settings.tiers import NEEDS_REBASE_LABEL


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
    budget_s: float | None = None,
    settings: Settings | None = None,
    pr_number: int | None = None,
    harness_ref: str | None = None,
    progress: ProgressSink | None = None,
    environ: Mapping[str, str] | None = None,
    calibrate_first: bool = True,
    rescore: bool = False,
    scorings_docs: scorings.Docs | None = None,
    claimant: scorings.Claimant | None = None,
) -> ScoreOutcome:
    """Score `head` against `base` in `repo` and return everything the run produced.

    What is measured for the PR is what would land: the merge of `head` into `base`'s tip (settings
    `score_merge`). `harness_ref` names the ruler's source; by default the base branch tip
    (`origin/<base>` when that exists). `rounds` fixes the number of rounds (default: adaptive, until
    decided or the profile's budget is spent). A box, profile and engine version with no noise floor
    yet is calibrated first (A/A), unless `calibrate_first` is False (then the configured default
    floor is used and the scorecard says so).

    One verdict per (base SHA, candidate tree, harness digest, profile) (`evalbot.decide.scorings`,
    kept in this box's state dir, or in `scorings_docs`: the bot's shared ledger): when that tree was measured before, its verdict is re-issued for this
    head (a new receipt that names the measured head) and nothing is measured. `rescore` (a
    maintainer's /rescore or Re-run) measures again, and the verdict published is the lowest tier over
    every scoring of the tree, so that a re-run is never a free re-roll.
    """
    repo = gitops.repo_root(repo)
    settings = settings or load_settings(repo)
    profile = profile_for(settings, profile)
    prof = settings.profile_settings(profile)  # an unknown profile fails now
    check_rounds(rounds, settings.thresholds.min_verified_streams, prof.processes)
    key = load_signing_key(settings)  # a broken key fails now, before any PR code runs
    state_dir = state_dir_for(repo)
    docs = scorings_docs or scorings.FileDocs(state_dir)
    pinned = pin_harness(repo, base, head, settings, harness_ref)
    box = settings.box_name()
    engine = gitops.code_digest(repo, pinned.base_sha)
    fields = dict(
        repo=str(repo), base_ref=base, head_ref=head, base_sha=pinned.base_sha, head_sha=pinned.head_sha,
        harness_ref=pinned.harness_ref, harness_sha=pinned.harness_sha, harness_digest=pinned.harness_digest,
        engine_digest=engine, profile=profile, box=box, pr_number=pr_number, started_at=utc_now(),
    )
    changed = gitops.harness_changes(repo, pinned.base_sha, pinned.head_sha, pinned.patterns)
    if changed:
        return _finish(ScoreOutcome(verdict=not_evaluated_harness_changed(changed), **fields), settings, state_dir, key)
    if settings.score_merge:
        candidate = gitops.merge_candidate(repo, pinned.base_sha, pinned.head_sha)
        if candidate.conflicts:
            verdict = not_evaluated_needs_rebase(list(candidate.conflicts), NEEDS_REBASE_LABEL)
            return _finish(ScoreOutcome(verdict=verdict, **fields), settings, state_dir, key)
    else:
        candidate = gitops.Candidate(tree=gitops.git(repo, "rev-parse", f"{pinned.head_sha}^{{tree}}").strip(),
                                     commit=pinned.head_sha)
    fields.update(candidate_sha=candidate.commit, candidate_tree=candidate.tree,
                  drafter_tree=gitops.subtree(repo, candidate.commit, gitops.SHIPPED_DRAFTER))
    if pr_number is not None:
        fields.update(pr_scoring=scorings.pr_tree_number(docs, settings.repo or str(repo), pr_number, pinned.base_sha, candidate.tree))
    ruler = scorings.ruler_digest(settings.scoring_dump(), rounds=rounds, budget_s=budget_s, calibrate_first=calibrate_first)
    tree = scorings.TreeKey(pinned.base_sha, candidate.tree, pinned.harness_digest, profile, ruler)
    # one measurement of a tree at a time, on every box: a second waits (TreeBusy), then finds its verdict
    with scorings.measuring(docs, tree, claimant or local_claimant()):
        earlier = scorings.load_scorings(docs, tree)
        if earlier and not rescore:
            return _finish(_reissue(scorings.effective(earlier, settings.tiers), fields, len(earlier), None), settings,
                           state_dir, key)

        noise = load_noise_floor(state_dir, box, profile, engine)
        calibrated_now = False
        if noise is None and calibrate_first:
            noise, _ = _calibrate(repo, pinned, settings, profile, engine, state_dir, progress, environ, budget_s)
            calibrated_now = True
        elif noise is None:
            noise = NoiseFloor.default(box, profile, settings.stats.default_noise_floor, engine)
        records = run_campaign(repo, pinned, {"base": pinned.base_sha, "head": candidate.commit}, settings, profile,
                               noise=noise, rounds=rounds, budget_s=budget_s, progress=progress, environ=environ)
        m = summarize(records, noise=noise, integrity=settings.integrity)
        outcome = ScoreOutcome(verdict=decide(m, settings), measurements=m, rounds=m.rounds, calibrated_now=calibrated_now,
                               requests=[RequestSummary.of(g) for g in records.generations if g.round >= 0], **fields)
        if outcome.verdict.status not in scorings.REUSABLE:  # an infrastructure error is no measurement of the tree
            return _finish(outcome, settings, state_dir, key)
        count = scorings.store_scoring(docs, tree, outcome.model_copy(update={"tree_scorings": len(earlier) + 1}))
        standing = scorings.effective([*earlier, outcome], settings.tiers)
        if standing is outcome:
            outcome.tree_scorings = count
            if count > 1:
                outcome.verdict = outcome.verdict.model_copy(update={"reason": (
                    f"{outcome.verdict.reason} (scoring {count} of this tree against this main; the verdict published is "
                    "the lowest tier over them)")})
            return _finish(outcome, settings, state_dir, key)
        return _finish(_reissue(standing, fields, count, outcome), settings, state_dir, key)


def local_claimant() -> scorings.Claimant:
    """A process on this host (the CLI, or the worker of a box without a shared ledger; the state dir is the
    box's own): a claim is alive while its process runs here. Another host's claim was left by this box under
    an earlier hostname (a re-created container): dead."""
    host = socket.gethostname()

    def alive(owner: str) -> bool:
        claim_host, _, pid = owner.rpartition(":")
        if claim_host != host or not pid.isdigit():
            return False
        try:
            os.kill(int(pid), 0)
        except ProcessLookupError:
            return False
        except OSError:  # it exists, under another user
            return True
        return True

    return scorings.Claimant(f"{host}:{os.getpid()}", alive)


def _reissue(stored: ScoreOutcome, fields: dict, count: int, remeasured: ScoreOutcome | None) -> ScoreOutcome:
    """The stored verdict of this tree, re-issued for this head: its measurements, this head's identity,
    and a reason that says whose measurement it is (the receipt signs that reason)."""
    note = (f"measurement of head {stored.head_sha[:12]} re-issued: the same candidate tree against the same main, "
            f"harness and profile is measured once ({count} scoring{'s' if count != 1 else ''} of it)")
    if remeasured is not None:
        read = remeasured.tier or remeasured.verdict.status
        note = (f"re-measured on request and read {read}, but the verdict published is the lowest tier over the {count} "
                f"scorings of this tree: head {stored.head_sha[:12]}'s")
    verdict = stored.verdict.model_copy(update={"reason": f"{stored.verdict.reason} — {note}"})
    fields = {**fields, "box": stored.box}  # the box that measured it (the receipt's environment is that box's)
    return ScoreOutcome(verdict=verdict, measurements=stored.measurements, rounds=stored.rounds,
                        requests=stored.requests, tree_scorings=count, reused_from_head=stored.head_sha, **fields)


def check_rounds(rounds: int | None, streams: int = 1, processes: int = 1) -> None:
    """A fixed number of rounds must be able to decide: every pairing of the profile's processes measured
    once (a tier or a floor needs them all), and for a score `streams` re-verified DSpark streams per cell
    (thresholds.min_verified_streams), one per round."""
    least = max(streams, processes * processes, 1)
    if rounds is not None and rounds < least:
        why = []
        if processes > 1:
            why.append(f"every pairing of the {processes} processes per ref is measured once")
        if streams > 1:
            why.append(f"each cell needs {streams} DSpark streams re-verified by main's engine")
        raise EvalbotError(f"--rounds must be at least {least}" + (f": {'; '.join(why)}" if why else ""))


# ---------------------------------------------------------------------------------------------
# Calibration (A/A)


def calibrate(
    repo: Path,
    base: str = "main",
    *,
    profile: str | None = None,
    rounds: int | None = None,
    budget_s: float | None = None,
    settings: Settings | None = None,
    harness_ref: str | None = None,
    progress: ProgressSink | None = None,
    environ: Mapping[str, str] | None = None,
) -> tuple[NoiseFloor, Path]:
    """Run `base` against itself (A/A) with the very machinery a score uses, and store the box's noise
    floor for this profile and engine version."""
    repo = gitops.repo_root(repo)
    settings = settings or load_settings(repo)
    profile = profile_for(settings, profile)
    check_rounds(rounds, 1, settings.profile_settings(profile).processes)
    pinned = pin_harness(repo, base, base, settings, harness_ref)
    engine = gitops.code_digest(repo, pinned.base_sha)
    return _calibrate(repo, pinned, settings, profile, engine, state_dir_for(repo), progress, environ, budget_s, rounds)


def _calibrate(repo: Path, pinned: PinnedHarness, settings: Settings, profile: str, engine: str, state_dir: Path,
               progress: ProgressSink | None, environ: Mapping[str, str] | None, budget_s: float | None,
               rounds: int | None = None) -> tuple[NoiseFloor, Path]:
    box = settings.box_name()
    zero = NoiseFloor.default(box, profile, 0.0, engine)
    records = run_campaign(repo, pinned, {"base": pinned.base_sha, "head": pinned.base_sha}, settings, profile,
                           noise=zero, rounds=rounds, budget_s=budget_s, progress=progress, environ=environ, aa=True)
    report = check_records(records, settings.integrity)
    if report.findings:
        f = report.findings[0]
        raise EvalbotError(f"calibration failed ({f.where}): {f.message}")
    prof = settings.profile_settings(profile)
    floor = noise_from_aa(records, box=box, profile=profile, engine=engine, base_sha=pinned.base_sha,
                          margin=settings.stats.noise_margin, minimum=prof.min_noise_floor,
                          previous=load_noise_floor(state_dir, box, profile, engine), pool=settings.stats.noise_pool)
    return floor, store_noise_floor(state_dir, floor)


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
