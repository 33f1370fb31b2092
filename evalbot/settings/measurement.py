"""What a scoring measures and for how long, per profile (`gpu`, `cpu`): the measurement plan the bot
runs against main's harness server (contract dspark-harness/2, docs/harness.md).

`[profiles.gpu] budget_s = 300` changes one field; every other default stays.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class GuardPlan(_Strict):
    """Another model family's shape, random weights (harness/profiles.py names them), at a long context:
    a generation of `new_tokens` and a one-token request (its prefill), both timed by the bot."""

    name: str
    ctx: int
    new_tokens: int


class ProfileSettings(_Strict):
    corpora: list[str] = Field(default_factory=lambda: ["code", "prose"])  # harness/prompts/<name>.txt
    contexts: list[int] = Field(default_factory=lambda: [1024, 4096, 7936])  # each cell's nominal prompt length
    # Each cell's and guard's exact length is drawn once per campaign from its secret seed, in
    # [ctx * (1 - length_jitter), ctx]: code written for the published lengths alone gains nothing
    # (docs/evalbot.md, "Measuring"). 0 measures exactly at ctx.
    length_jitter: float = Field(default=0.0625, ge=0.0, lt=0.5)
    new_tokens: int = 256  # per generation; end-to-end timing, so decode must dominate the prefill
    processes: int = 3  # harness servers per ref, alive side by side; rounds rotate through their pairings
    guards: list[GuardPlan] = Field(default_factory=list)
    accuracy_positions: int = 512  # per corpus, scored at the end of one window of accuracy_ctx tokens
    accuracy_ctx: int = 1024
    min_rounds: int = 0  # 0: one round per pairing of processes (processes squared)
    max_rounds: int = 400
    budget_s: float = 600.0  # wall-clock budget of the whole measurement; more rounds until decided or spent
    startup_timeout_s: float = 900.0  # a server's model load and first answer
    request_timeout_s: float = 120.0  # one request, answer complete
    min_noise_floor: float = 0.001  # no calibration can make the floor smaller than this

    @field_validator("processes", "new_tokens", "max_rounds")
    @classmethod
    def _positive(cls, v: int) -> int:
        if v < 1:
            raise ValueError("must be at least 1")
        return v

    @model_validator(mode="after")
    def _plan(self) -> "ProfileSettings":
        if not self.corpora or not self.contexts:
            raise ValueError("a profile needs at least one corpus and one context")
        if self.accuracy_positions and self.accuracy_positions >= self.accuracy_ctx:
            raise ValueError("accuracy_positions must be smaller than accuracy_ctx")
        return self

    @property
    def rounds_floor(self) -> int:
        return self.min_rounds or self.processes * self.processes


def default_profiles() -> dict[str, ProfileSettings]:
    return {
        "gpu": ProfileSettings(guards=[GuardPlan(name="qwen3-0.6b-shape", ctx=16384, new_tokens=64),
                                       GuardPlan(name="llama-3.2-1b-shape", ctx=16384, new_tokens=64)]),
        # Two cores: a context and a generation long enough that decode dominates and one request
        # takes seconds, two processes per ref. The budget covers the four pairings: on the 2-vCPU VM
        # start-up, warm-up and accuracy take ~145 s and a round ~45 s (180 s ended after one round).
        "cpu": ProfileSettings(contexts=[256], new_tokens=24, processes=2, accuracy_positions=256, accuracy_ctx=320,
                               guards=[GuardPlan(name="qwen3-tiny-shape", ctx=256, new_tokens=16),
                                       GuardPlan(name="llama-3.2-tiny-shape", ctx=256, new_tokens=16)],
                               budget_s=360.0, request_timeout_s=300.0, min_noise_floor=0.005),
    }


class HarnessServer(_Strict):
    """How a harness server is started (argv after the interpreter; placeholder {model}: the model file as
    the process sees it). `python` None = the bot's own interpreter."""

    python: str | None = None
    argv: list[str] = Field(default_factory=lambda: ["-m", "harness.serve", "--model", "{model}"])
    model: str | None = None  # the model file both refs load; None: the bundled SmolLM2 GGUF

    def command(self, python: str, model: str) -> list[str]:
        return [python] + [a.format_map({"model": model}) for a in self.argv]
