"""The measurement's data model -> the history's stable schema. The only module of the history and the
dashboard that reads `ScoreOutcome` or `NoiseFloor`: when the measurement's model changes, this file
changes with it and nothing else does (tests/test_history.py pins the mapping)."""

from __future__ import annotations

from evalbot.decide.noise import NoiseFloor
from evalbot.decide.outcome import ScoreOutcome
from evalbot.history.schema import CellFigures, HistoryEntry
from evalbot.history.store import HistoryStore, recorded

NOISE_METRICS = ("dspark_decode", "ar_decode", "ar_cell", "guard_decode", "guard_prefill")


def _noise(floor: NoiseFloor | None) -> dict[str, float]:
    if floor is None:
        return {}
    return {name: float(getattr(floor, name)) for name in NOISE_METRICS}


def history_entry(outcome: ScoreOutcome, *, repo: str | None = None, receipt_ref: str = "") -> HistoryEntry:
    """What the history keeps of one scoring. `repo`: the forge's name for the repository (owner/name);
    the outcome itself holds the path of the clone it measured in."""
    verdict, m = outcome.verdict, outcome.measurements
    sp = verdict.speedup
    cells = [
        CellFigures(corpus=c.corpus, ctx=c.ctx, main_dspark_tps=c.main_dspark_tps, main_ar_tps=c.main_ar_tps,
                    main_tau=c.main_tau, pr_dspark_tps=c.pr_dspark_tps, pr_ar_tps=c.pr_ar_tps, pr_tau=c.pr_tau)
        for c in (m.cells if m is not None else [])
    ]
    return HistoryEntry(
        kind="score", repo=repo or outcome.repo, pr_number=outcome.pr_number, base_sha=outcome.base_sha,
        head_sha=outcome.head_sha, box=outcome.box, profile=outcome.profile, started_at=outcome.started_at,
        finished_at=outcome.finished_at or outcome.started_at, status=verdict.status, tier=verdict.tier,
        reason=verdict.reason, speedup_pct=sp.pct if sp else None, ci_low_pct=sp.ci_low_pct if sp else None,
        ci_high_pct=sp.ci_high_pct if sp else None, rounds=list(m.speedup_rounds) if m is not None else [],
        cells=cells, noise=_noise(m.noise if m is not None else None),
        receipt=outcome.receipt.envelope if outcome.receipt is not None else "", receipt_ref=receipt_ref,
        scorecard=outcome.scorecard,
    )


def calibration_entry(floor: NoiseFloor, *, repo: str, started_at: str = "") -> HistoryEntry:
    """What the history keeps of one A/A calibration of main: its noise floor."""
    return HistoryEntry(
        kind="calibration", repo=repo, pr_number=None, base_sha=floor.base_sha, head_sha=floor.base_sha,
        box=floor.box, profile=floor.profile, started_at=started_at or floor.measured_at,
        finished_at=floor.measured_at, status="calibrated",
        reason=f"A/A calibration, {floor.campaigns} campaign(s) pooled, {floor.rounds} rounds", noise=_noise(floor),
    )


def noise_floor_entry(outcome: ScoreOutcome, *, repo: str | None = None) -> HistoryEntry | None:
    """The A/A calibration a scoring gated with, as a calibration entry (None: the default floor, or no
    measurement). Recorded beside each scoring, it is one entry per calibration however many use it."""
    floor = outcome.measurements.noise if outcome.measurements is not None else None
    if floor is None or not floor.calibrated or not floor.measured_at:
        return None
    return calibration_entry(floor, repo=repo or outcome.repo)


def record_scoring(store: HistoryStore, outcome: ScoreOutcome, *, repo: str | None = None, receipt_ref: str = "") -> None:
    """Keep a scoring and the calibration it used; a history that cannot be written never costs a verdict."""
    recorded(store, history_entry(outcome, repo=repo, receipt_ref=receipt_ref))
    floor = noise_floor_entry(outcome, repo=repo)
    if floor is not None:
        recorded(store, floor)
