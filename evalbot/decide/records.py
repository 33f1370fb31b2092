"""What a measuring campaign produced, as plain data (contract dspark-harness/2): the measuring side
(evalbot.measure) writes these, the decision core reads them and nothing else.

Every time in here that a gate or a tier reads (`bot_s`) is the bot's own clock around one request.
What a process said about itself is kept apart, under `reported`, and is only ever shown, marked as
the process's own claim, or checked for plausibility against the bot's clock.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field

Ref = Literal["base", "head"]
Mode = Literal["ar", "dspark"]


class WindowRef(BaseModel):
    """Which exact-length window of which corpus a prompt was (the ids themselves are not kept)."""

    corpus: str
    offset: int
    length: int
    sha256: str


class Reported(BaseModel):
    """What the measured process said about its own run: shown, never gated on."""

    prefill_s: float | None = None
    decode_s: float | None = None
    tau: float | None = None
    accept_hist: list[int] = Field(default_factory=list)


class Generation(BaseModel):
    round: int  # -1 = warm-up
    pairing: int  # which (main process, PR process) pair measured this round
    ref: Ref
    process: int
    corpus: str
    ctx: int
    mode: Mode
    model: str = "main"  # or "guard:<name>"
    window: WindowRef
    new_tokens: int
    tokens: list[int]
    bot_s: float
    seq: int  # position in the campaign's request order
    reported: Reported = Field(default_factory=Reported)

    @property
    def cell(self) -> tuple[str, int]:
        return (self.corpus, self.ctx)


class Verification(BaseModel):
    """Main's engine, in main's own process, teacher-forcing one stream: per token its argmax and gap."""

    ref: Ref  # whose stream it was
    process: int
    round: int
    mode: Literal["dspark", "ar"] = "dspark"  # a DSpark stream (both refs) or one of the PR's greedy AR streams
    model: str = "main"  # "main" or "guard:NAME" (a guard stream, teacher-forced by main's copy of that guard)
    corpus: str
    ctx: int
    window_sha256: str
    tokens: int
    mismatches: list[int] = Field(default_factory=list)  # positions not main's argmax beyond the tolerance
    near_ties: list[int] = Field(default_factory=list)  # positions not main's argmax, within the tolerance
    worst_gap: float = 0.0
    tolerance: float


class ProcessInfo(BaseModel):
    ref: Ref
    index: int
    startup_s: float
    model_sha256: str = ""
    drafter_sha256: str = ""
    device: str = ""
    torch: str = ""
    triton: str = ""
    block_size: int = 0
    sandboxed: bool = True


class Finding(BaseModel):
    """Something wrong with what a process did or sent. On the PR's side: an integrity failure (REJECT,
    with the reason). On main's side, or in the bot's own environment: an infrastructure error."""

    ref: Ref | None  # None: the bot's own environment
    process: int | None = None
    where: str = ""
    message: str
    stderr_tail: str = ""


class StopReason(BaseModel):
    rounds: int
    reason: str  # "decided" | "budget" | "corpus" | "max rounds" | "failure"
    detail: str = ""


class Records(BaseModel):
    profile: str
    processes_per_ref: int
    seed: int  # the window seed, revealed now that the run is over (reproducible)
    processes: list[ProcessInfo] = Field(default_factory=list)
    generations: list[Generation] = Field(default_factory=list)
    verifications: list[Verification] = Field(default_factory=list)
    accuracy: dict | None = None  # AccuracySummary as data (decide.accuracy), computed by the bot
    findings: list[Finding] = Field(default_factory=list)
    stop: StopReason | None = None
    wall_s: float = 0.0
    sandbox: str = ""  # e.g. "bubblewrap 0.8.0, uid 65534, no network" or "OFF (--no-sandbox)"
    freezer: str = ""  # "cgroup v2" | "SIGSTOP"
    corpora: str = ""  # where the windows' texts came from (measure.corpus.Corpora.source)
    guards_unverified: str = ""  # why the PR's guard streams were not (all) teacher-forced by main; "" if they were

    def of(self, ref: Ref, *, mode: Mode | None = None, model: str = "main", timed: bool = True) -> list[Generation]:
        return [g for g in self.generations if g.ref == ref and g.model == model and (mode is None or g.mode == mode)
                and (g.round >= 0 or not timed)]
