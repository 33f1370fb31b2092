"""What one campaign measures, as plain data: the cells, the guards, the accuracy windows, the limits.
Built from a profile's settings (evalbot/settings/measurement.py)."""

from __future__ import annotations

from dataclasses import dataclass

from evalbot.measure.keyed import KeyedStream
from evalbot.settings import ProfileSettings


# How far below main's top logit a PR's greedy token may be and still count as main's greedy
# continuation (a near-tie, counted and shown). An engine change that rounds differently (another
# accumulation order, a fused norm, other tiles) moves bf16 logits by up to ~0.2 where they differ most:
# the first such change scored on the H200 (kernels, 2026-12-02) read a mean KL(main || PR) of 0.0002
# and a max of 0.0044 over 1,024 positions, i.e. up to ~0.19 logits at a two-way tie (KL ~ d^2/8), and
# at 0.05 one of its streams failed, a false REJECT of a lossless change (rescored at 0.5: 24 near-ties
# in 60 streams, the widest 0.122). 0.5 is ~2.5 times the ~0.19; a
# decoder that commits drafts unverified commits wrong drafts, which sit logits below the top, not
# tenths. fp32 on CPU moves logits by ~1e-5.
NEAR_TIE_GPU = 0.5
NEAR_TIE_CPU = 1e-3


@dataclass(frozen=True)
class Cell:
    corpus: str
    ctx: int


@dataclass(frozen=True)
class GuardPlan:
    name: str
    ctx: int
    new_tokens: int


@dataclass(frozen=True)
class Plan:
    profile: str
    cells: tuple[Cell, ...]
    new_tokens: int
    processes: int
    guards: tuple[GuardPlan, ...] = ()
    accuracy: tuple[Cell, ...] = ()  # windows whose last `accuracy_positions` tokens are scored
    accuracy_positions: int = 0
    min_rounds: int = 2
    max_rounds: int = 200
    budget_s: float = 600.0
    hard_budget: float = 3.0  # the budget waits for every pairing (min_rounds), up to this many times itself
    startup_timeout_s: float = 900.0
    request_timeout_s: float = 300.0
    verify_tolerance: float = NEAR_TIE_GPU
    length_jitter: float = 0.0  # each cell's and guard's length is drawn in [ctx * (1 - jitter), ctx]


def plan_for(name: str, p: ProfileSettings, *, gpu: bool, budget_s: float | None = None) -> Plan:
    return Plan(
        profile=name,
        cells=tuple(Cell(c, x) for x in p.contexts for c in p.corpora),
        new_tokens=p.new_tokens,
        processes=p.processes,
        guards=tuple(GuardPlan(g.name, g.ctx, g.new_tokens) for g in p.guards),
        accuracy=tuple(Cell(c, p.accuracy_ctx) for c in p.corpora) if p.accuracy_positions else (),
        accuracy_positions=p.accuracy_positions,
        min_rounds=p.rounds_floor,
        max_rounds=p.max_rounds,
        budget_s=p.budget_s if budget_s is None else budget_s,
        startup_timeout_s=p.startup_timeout_s,
        request_timeout_s=p.request_timeout_s,
        verify_tolerance=NEAR_TIE_GPU if gpu else NEAR_TIE_CPU,
        length_jitter=p.length_jitter,
    )


def drawn_lengths(plan: Plan, rng: KeyedStream) -> dict[int, int]:
    """The exact length measured for each nominal length (cells' and guards'), drawn once per campaign
    from the secret seed in [ctx * (1 - length_jitter), ctx]: the same for both refs and every round,
    seen by the processes first in the warm-up (so an engine may capture it before it is timed) but not
    known when the PR's code was written."""
    out: dict[int, int] = {}
    for ctx in sorted({c.ctx for c in plan.cells} | {g.ctx for g in plan.guards}):
        below = int(ctx * plan.length_jitter)
        out[ctx] = ctx - (rng.randrange(below + 1) if below else 0)
    return out


def budget_spent(plan: Plan, rounds: int, end_s: float) -> str | None:
    """Why the budget ends the run if another round would end at `end_s` (None: it does not). The budget
    waits for every pairing (`min_rounds`), up to `hard_budget` times itself: a run short of them decides
    nothing, and a PR slow enough to end it early would dodge its REJECT."""
    if end_s <= plan.budget_s:
        return None
    if rounds >= plan.min_rounds:
        return f"the {plan.budget_s:.0f} s budget would be exceeded by another round"
    if end_s > plan.hard_budget * plan.budget_s:
        return (f"{plan.hard_budget:g} times the {plan.budget_s:.0f} s budget would be exceeded by another round, "
                f"after {rounds} of the {plan.min_rounds} rounds that measure every pairing")
    return None
