"""`ScoreOutcome`: everything one scoring run produced, as plain data.

Built by `evalbot.pipeline.score_refs`; read by the scorecard renderer, the receipt builder, the
CLI (`--json`), `pipeline.publish` and the worker (kept in its ledger as JSON).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

from evalbot.decide.measurements import Measurements
from evalbot.decide.verdict import Verdict


class RequestSummary(BaseModel):
    """One timed request as the receipt records it (no token streams): the raw figures behind the stats."""

    round: int
    ref: Literal["base", "head"]
    process: int
    model: str
    mode: str
    cell: str  # corpus@ctx
    window: str  # corpus@offset+length (reproducible from the revealed seed)
    new_tokens: int
    bot_s: float
    reported_prefill_s: float | None = None
    reported_decode_s: float | None = None

    @classmethod
    def of(cls, g) -> "RequestSummary":
        return cls(round=g.round, ref=g.ref, process=g.process, model=g.model, mode=g.mode, cell=f"{g.corpus}@{g.ctx}",
                   window=f"{g.window.corpus}@{g.window.offset}+{g.window.length}", new_tokens=g.new_tokens,
                   bot_s=round(g.bot_s, 6), reported_prefill_s=g.reported.prefill_s, reported_decode_s=g.reported.decode_s)


class ReceiptInfo(BaseModel):
    path: str
    signed: bool
    keyid: str = ""
    envelope: str = ""  # the file's exact text, so a publisher on another machine needs no file

    @property
    def status_text(self) -> str:
        if self.signed:
            return f"signed (Ed25519, keyid {self.keyid[:16]}…)"
        return "collected, not signed (no key configured)"


class CheckReport(BaseModel):
    conclusion: Literal["success", "failure", "neutral"]
    title: str
    summary: str


class ScoreOutcome(BaseModel):
    repo: str
    base_ref: str
    head_ref: str
    base_sha: str
    head_sha: str
    harness_ref: str
    harness_sha: str
    harness_digest: str = ""
    candidate_sha: str = ""  # what was measured for the PR: the merge of its head into main's tip
    candidate_tree: str = ""
    # the candidate's shipped drafter files (gitops.SHIPPED_DRAFTER) as a git tree id, read by the bot from the
    # commit; the drafter sha256 in the measurements is what the PR's own process reported
    drafter_tree: str = ""
    engine_digest: str = ""  # main's measured code (engine/, kernels/, harness/): the noise floor's key
    profile: str
    rounds: int = 0
    box: str
    pr_number: int | None = None
    verdict: Verdict
    measurements: Measurements | None = None
    requests: list[RequestSummary] = []
    calibrated_now: bool = False  # this scoring ran the box's A/A calibration first
    # One verdict per (main SHA, candidate tree, harness digest, profile): evalbot.decide.scorings.
    pr_scoring: int = 0  # this is the PR's k-th distinct candidate tree scored against this main (0: not counted)
    tree_scorings: int = 0  # how many times this tree was measured against this main with this ruler (0: not measured)
    reused_from_head: str = ""  # the head whose measurement this verdict re-issues ("": measured for this head)
    started_at: str
    finished_at: str = ""
    receipt: ReceiptInfo | None = None
    scorecard: str = ""
    check: CheckReport | None = None

    @property
    def tier(self) -> str | None:
        return self.verdict.tier

    @property
    def speedup(self) -> float:
        """The DSpark decode speedup as a fraction (0.08 = +8 %); 0 when none was measured."""
        return self.verdict.speedup.pct / 100 if self.verdict.speedup is not None else 0.0

    def summary_json(self) -> dict:
        """What `evalbot score --json` prints."""
        sp = self.verdict.speedup
        return {
            "status": self.verdict.status,
            "tier": self.verdict.tier,
            "labels": self.verdict.labels,
            "reason": self.verdict.reason,
            "receipt": self.receipt.path if self.receipt else None,
            "signed": bool(self.receipt and self.receipt.signed),
            "base_sha": self.base_sha,
            "head_sha": self.head_sha,
            "harness_sha": self.harness_sha,
            "harness_digest": self.harness_digest,
            "candidate_sha": self.candidate_sha,
            "candidate_tree": self.candidate_tree,
            "drafter_tree": self.drafter_tree,
            "profile": self.profile,
            "rounds": self.rounds,
            "pr_scoring": self.pr_scoring,
            "tree_scorings": self.tree_scorings,
            "reused_from_head": self.reused_from_head,
            "speedup": sp.model_dump(mode="json") if sp else None,
            "gates": [g.model_dump(mode="json") for g in self.verdict.gates],
            "changed_harness_paths": self.verdict.changed_harness_paths,
            "infra": self.verdict.infra.model_dump(mode="json") if self.verdict.infra else None,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
        }
