"""The harness output contract (docs/harness.md, schema `dspark-harness/1`) as pydantic models.

`parse_output` is the only way harness stdout enters the bot. It is strict on purpose: every
stdout line must be one JSON object of the expected kind, carry this run's nonce, and match the
model exactly (no unknown fields, no coercion). Anything else raises `ContractViolation`, which
the pipeline reports as an infrastructure error, never as a slow or lossy PR.
"""

from __future__ import annotations

import json
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictFloat, StrictInt, StrictStr, ValidationError

from evalbot.errors import ContractViolation

SCHEMA = "dspark-harness/1"

class _Line(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)

    schema_: Literal["dspark-harness/1"] = Field(alias="schema")
    nonce: StrictStr


# JSON numbers: an int where a float is expected is fine; a string or a bool is not.
PosFloat = Annotated[StrictFloat | StrictInt, Field(gt=0)]
NonNegFloat = Annotated[StrictFloat | StrictInt, Field(ge=0)]
NonNegInt = Annotated[StrictInt, Field(ge=0)]
PosInt = Annotated[StrictInt, Field(gt=0)]


class TauCheckLine(_Line):
    kind: Literal["tau_check"]
    profile: StrictStr
    prompt: StrictStr
    prompt_sha256: StrictStr
    ctx: PosInt
    new_tokens: PosInt
    ar_tps: PosFloat
    dspark_tps: PosFloat
    dspark_tps_runs: list[PosFloat]
    prefill_tps: PosFloat
    tau: NonNegFloat
    block_size: PosInt
    accept_hist: list[NonNegInt]
    lossless: StrictBool
    lossless_runs: NonNegInt
    runs: NonNegInt
    ar_tokens: list[NonNegInt]
    dspark_tokens: list[list[NonNegInt]]
    ar_decode_s: PosFloat
    dspark_decode_s: list[PosFloat]
    model_sha256: StrictStr
    drafter_sha256: StrictStr
    device: StrictStr
    torch: StrictStr
    triton: StrictStr

    @property
    def context_key(self) -> tuple[str, int]:
        return (self.prompt, self.ctx)


class ScoreLine(_Line):
    kind: Literal["score"]
    positions: PosInt
    file: StrictStr


class CompareLine(_Line):
    kind: Literal["compare"]
    positions: NonNegInt
    top1: NonNegFloat
    kl: NonNegFloat
    ppl_main: NonNegFloat
    ppl_pr: NonNegFloat


class GuardLine(_Line):
    kind: Literal["guard"]
    guard: StrictStr
    ctx: PosInt
    decode_tps: PosFloat
    prefill_tps: PosFloat
    reps: PosInt
    decode_tps_reps: list[PosFloat]
    prefill_tps_reps: list[PosFloat]


class ErrorLine(_Line):
    kind: Literal["error"]
    reason: StrictStr


LINE_MODELS: dict[str, type[_Line]] = {
    "tau_check": TauCheckLine,
    "score": ScoreLine,
    "compare": CompareLine,
    "guard": GuardLine,
    "error": ErrorLine,
}
PROGRAM_KIND = {"tau_check": "tau_check", "score": "score", "compare": "compare", "guard": "guard"}

class HarnessReportedError(ContractViolation):
    """The harness printed its `error` line: it could not produce every metric."""


def _describe(e: ValidationError) -> str:
    first = e.errors()[0]
    loc = ".".join(str(p) for p in first["loc"]) or "(line)"
    return f"{loc}: {first['msg']}"


def parse_output(stdout: str, program: str, nonce: str) -> list[_Line]:
    """Parse one program's stdout into contract lines of its kind.

    Raises ContractViolation for: a non-JSON or non-object line, a wrong schema, a kind this
    program does not print, a wrong nonce (canned output), a field that does not match, or no
    result line at all; HarnessReportedError when the harness printed `kind: error`.
    """
    expected = PROGRAM_KIND[program]
    lines: list[_Line] = []
    for number, text in enumerate(stdout.splitlines(), start=1):
        if not text.strip():
            continue
        try:
            obj = json.loads(text)
        except ValueError:
            raise ContractViolation(f"{program}: stdout line {number} is not JSON: {text[:80]!r}") from None
        if not isinstance(obj, dict):
            raise ContractViolation(f"{program}: stdout line {number} is not a JSON object")
        if obj.get("schema") != SCHEMA:
            raise ContractViolation(f"{program}: line {number} has schema {obj.get('schema')!r}, expected {SCHEMA!r}")
        if obj.get("nonce") != nonce:
            raise ContractViolation(
                f"{program}: line {number} does not carry this run's nonce (canned or foreign output)"
            )
        kind = obj.get("kind")
        if kind == "error":
            reason = obj.get("reason")
            raise HarnessReportedError(f"{program} reported an error: {reason}")
        if kind != expected:
            raise ContractViolation(f"{program}: line {number} has kind {kind!r}, expected {expected!r}")
        try:
            lines.append(LINE_MODELS[kind].model_validate(obj))
        except ValidationError as e:
            raise ContractViolation(f"{program}: line {number} does not match the schema: {_describe(e)}") from None
    if not lines:
        raise ContractViolation(f"{program}: printed no result line")
    if program in ("score", "compare") and len(lines) != 1:
        raise ContractViolation(f"{program}: printed {len(lines)} result lines, expected exactly 1")
    if program == "tau_check":
        keys = [line.context_key for line in lines]  # type: ignore[attr-defined]
        if len(set(keys)) != len(keys):
            raise ContractViolation("tau_check: the same prompt and context was reported twice")
    if program == "guard":
        names = [line.guard for line in lines]  # type: ignore[attr-defined]
        if len(set(names)) != len(names):
            raise ContractViolation("guard: the same guard was reported twice")
    return lines
