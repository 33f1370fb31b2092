"""What one harness subprocess gave, as plain data: the measuring side (evalbot.measure) produces
`RunRecord`s, the decision core reads them."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, Field

from evalbot.decide.contract import CompareLine, GuardLine, ScoreLine, TauCheckLine

Ref = Literal["base", "head"]
Program = Literal["tau_check", "score", "compare", "guard"]
AnyLine = Annotated[TauCheckLine | ScoreLine | CompareLine | GuardLine, Field(discriminator="kind")]


@dataclass(frozen=True)
class Step:
    """One run of the schedule: which program, for which ref, in which round."""

    round: int
    ref: Ref
    program: Program

    @property
    def label(self) -> str:
        who = "main" if self.ref == "base" else "PR"
        return f"round {self.round + 1}: {self.program} ({who})"


class RunRecord(BaseModel):
    """What one harness subprocess gave: parsed lines and the parent's own measurements."""

    round: int
    ref: Ref
    program: Program
    nonce: str
    argv: list[str]
    wall_s: float
    returncode: int | None
    timed_out: bool = False
    failure: str | None = None  # None = the run is usable
    stderr_tail: str = ""
    lines: list[AnyLine] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return self.failure is None

    @property
    def label(self) -> str:
        return Step(self.round, self.ref, self.program).label

    def tau_lines(self) -> list[TauCheckLine]:
        return [x for x in self.lines if isinstance(x, TauCheckLine)]

    def guard_lines(self) -> list[GuardLine]:
        return [x for x in self.lines if isinstance(x, GuardLine)]
