"""What the history keeps of one scoring or calibration: a small, stable schema.

The measurement's data model (`ScoreOutcome`, `Measurements`) changes as the measurement does; the
store and the dashboard read only these models, and `evalbot.history.adapter` is the one place that
maps the measurement onto them. Add fields with defaults only: stored entries must keep loading.
"""

from __future__ import annotations

import hashlib
from datetime import datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

Kind = Literal["score", "calibration"]


class CellFigures(BaseModel):
    """Main's and the PR's figures for one workload cell (a corpus at a context length)."""

    model_config = ConfigDict(extra="ignore")

    corpus: str
    ctx: int
    main_dspark_tps: float | None = None
    main_ar_tps: float | None = None
    main_tau: float | None = None
    pr_dspark_tps: float | None = None
    pr_ar_tps: float | None = None
    pr_tau: float | None = None


class HistoryEntry(BaseModel):
    """One scoring of a PR head against a main commit, or one A/A calibration of main."""

    model_config = ConfigDict(extra="ignore")

    kind: Kind
    repo: str
    pr_number: int | None = None
    base_sha: str
    head_sha: str
    box: str
    profile: str
    started_at: str
    finished_at: str
    status: str  # scored | rejected | not_evaluated | infra_error | calibrated
    tier: str | None = None
    reason: str = ""
    speedup_pct: float | None = None
    ci_low_pct: float | None = None
    ci_high_pct: float | None = None
    rounds: list[float] = Field(default_factory=list)  # per-round DSpark speedup ratios (PR / main)
    cells: list[CellFigures] = Field(default_factory=list)
    noise: dict[str, float] = Field(default_factory=dict)  # metric -> fraction (0.01 = 1 %)
    receipt: str = ""  # the receipt envelope, exactly as written ("" when none)
    receipt_ref: str = ""  # where the forge keeps it (a URL or a path), when published
    scorecard: str = ""  # the sticky comment's markdown

    @property
    def entry_id(self) -> str:
        """A stable id: the same scoring recorded twice is one entry."""
        key = "|".join([self.kind, self.repo.lower(), str(self.pr_number), self.base_sha, self.head_sha,
                        self.box, self.profile, self.started_at])
        return hashlib.sha256(key.encode()).hexdigest()[:20]

    @property
    def duration_s(self) -> float | None:
        try:
            start = datetime.fromisoformat(self.started_at.replace("Z", "+00:00"))
            end = datetime.fromisoformat(self.finished_at.replace("Z", "+00:00"))
        except ValueError:
            return None
        return max(0.0, (end - start).total_seconds())
