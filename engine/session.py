"""What one generation runs on: the session (KV cache, the step's static inputs and its captured
graphs, sized by one capacity) and what a generation returns. Shared by AR decode (engine/generate.py)
and DSpark (engine/dspark/speculate.py), so neither imports the other."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from engine.graphs import Replayable
from engine.model import STEP_ROWS, KVCache, StepIO, Transformer
from engine.sampling import SamplingParams
from kernels.greedy_commit import STATE_SIZE


@dataclass
class GenerationResult:
    tokens: list[int]
    prompt_tokens: int
    prefill_s: float
    decode_s: float
    stop_reason: str  # "eos" | "length"
    mode: str = "ar"
    stats: dict = field(default_factory=dict)

    @property
    def decode_tps(self) -> float:
        # Generated tokens over the time from the end of the prefill to the last token (the first
        # token's logits come from the prefill; choosing it is inside decode_s).
        n = len(self.tokens)
        return n / self.decode_s if self.decode_s > 0 and n > 0 else 0.0

    @property
    def prefill_tps(self) -> float:
        return self.prompt_tokens / self.prefill_s if self.prefill_s > 0 else 0.0


class Session:
    """Everything sized by one capacity: the KV cache, the step's static inputs and its graphs."""

    def __init__(self, model: Transformer, capacity: int, capture_layers: tuple[int, ...], use_graphs: bool, split: int | None):
        self.model = model
        self.capacity = capacity
        self.capture_layers = capture_layers
        self.use_graphs = use_graphs
        self.cache: KVCache = model.new_cache(capacity)
        self.io = StepIO(model, capacity, capture_layers, split)
        self.out_tokens = torch.zeros(capacity + STEP_ROWS, dtype=torch.int64, device=model.device)
        self.state = torch.zeros(STATE_SIZE, dtype=torch.int64, device=model.device)
        self._steps: dict[tuple[int, bool], Replayable] = {}
        self.extras: dict[str, object] = {}  # e.g. the DSpark drafter's own session

    def step(self, m: int, commit: bool) -> Replayable:
        """The step over m rows, optionally followed by the greedy commit; captured on first use."""
        key = (m, commit)
        if key not in self._steps:
            model, io, cache = self.model, self.io, self.cache

            def run() -> None:
                model.step(io, m, cache)
                if commit:
                    model.ops.greedy_commit(io.logits, io.tokens, io.positions, io.kv_end, self.out_tokens, self.state, m)

            with self.preserved():
                self._steps[key] = Replayable(run, model.device, self.use_graphs)
        return self._steps[key]

    def preserved(self):
        """Capturing runs the work once for real: keep the step's inputs and outputs as they were."""
        return Preserved([self.io.tokens, self.io.positions, self.io.kv_start, self.io.kv_end, self.out_tokens, self.state])


class Preserved:
    def __init__(self, tensors: list[torch.Tensor]):
        self.tensors = tensors

    def __enter__(self):
        self.saved = [t.clone() for t in self.tensors]

    def __exit__(self, *exc):
        for t, s in zip(self.tensors, self.saved):
            t.copy_(s)
        return False


def first_eos(tokens: list[int], eos: set[int]) -> int | None:
    for i, t in enumerate(tokens):
        if t in eos:
            return i
    return None


def sampling_generator(sampling: SamplingParams, device: torch.device) -> torch.Generator | None:
    if sampling.greedy:
        return None
    g = torch.Generator(device=device)
    g.manual_seed(sampling.seed)
    return g
