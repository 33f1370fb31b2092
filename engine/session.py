"""What one generation runs on: the session (KV cache, the step's static inputs and its captured
graphs, sized by one capacity) and what a generation returns. Shared by AR decode (engine/generate.py)
and DSpark (engine/dspark/speculate.py), so neither imports the other."""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass, field

import torch

from engine.graphs import Replayable
from engine.model import STEP_ROWS, KVCache, StepCommit, StepIO, Transformer
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
        self._steps: dict[tuple[int, bool, int, bool], Replayable] = {}
        self._prefills: OrderedDict[int, PrefillGraph] = OrderedDict()  # by prompt length, oldest use first
        self._prefill_seen: set[int] = set()
        self.extras: dict[object, object] = {}  # e.g. the DSpark drafter's own session

    def step(self, m: int, commit: bool, times: int = 1, tree: bool = False) -> Replayable:
        """The step over m rows, optionally followed by the greedy commit; captured on first use. times > 1:
        that many steps, each with its commit, in one launch (greedy AR decode: the commit leaves the next
        step's inputs on the device, and steps in one graph run back to back, each kernel launched early by
        the one before, where separate graphs wait for each other's completion). tree: the rows are a token
        tree (StepIO.set_tree, the DSpark tree head), committed by the tree commit."""
        if times > 1 and not commit:
            raise ValueError("several steps in one launch need the greedy commit between them")
        key = (m, commit, times, tree)
        if key not in self._steps:
            model, io, cache = self.model, self.io, self.cache

            def run() -> None:
                for _ in range(times):
                    model.step(io, m, cache, tree=tree, commit=self.step_commit() if commit else None)

            with self.preserved():
                self._steps[key] = Replayable(run, model.device, self.use_graphs)
        return self._steps[key]

    def step_commit(self, hist: torch.Tensor | None = None) -> StepCommit:
        """Transformer.step(commit=) for this session: the greedy commit into its output and state."""
        return StepCommit(self.out_tokens, self.state, hist)

    def commit(self, m: int, tree: bool, hist: torch.Tensor | None = None) -> None:
        """The greedy commit of the step just run over m rows (a chain's, or a token tree's), on its own (the
        engine's loops ask the step for it: Transformer.step(commit=))."""
        io, ops = self.io, self.model.ops
        if tree:
            ops.tree_commit(io.logits, io.tokens, io.positions, io.kv_end, self.out_tokens, self.state, m, io.parents, io.slots,
                            self.cache.k, self.cache.v, io.capture_rows, hist=hist)
        else:
            ops.greedy_commit(io.logits, io.tokens, io.positions, io.kv_end, self.out_tokens, self.state, m, hist=hist)

    def prefill_graph(self, length: int) -> "PrefillGraph | None":
        """The captured prefill of a `length`-token prompt, or None (run it eagerly). The eager prefill
        is ~600 launches of plain torch ops: host-bound, ~20 ms at any length on the H200, and its host
        jitter (SD ~6 ms) was most of the noise of a timed request. A length is captured the second time
        it is seen (a one-off prompt length never pays for a capture); PREFILL_GRAPHS are kept."""
        if not self.use_graphs:
            return None
        g = self._prefills.pop(length, None)
        if g is None:
            if length not in self._prefill_seen:
                self._prefill_seen.add(length)
                return None
            while len(self._prefills) >= PREFILL_GRAPHS:
                self._prefills.popitem(last=False)
            g = PrefillGraph(self.model, self.cache, length, self.capture_layers)
        self._prefills[length] = g
        return g

    def preserved(self):
        """Capturing runs the work once for real: keep the step's inputs and outputs as they were."""
        io = self.io
        return Preserved([io.tokens, io.positions, io.kv_start, io.kv_end, io.slots, io.tree, io.parents, self.out_tokens, self.state])


PREFILL_GRAPHS = 4  # captured prefill lengths per session (the bot's windows come in three lengths)


class PrefillGraph:
    """`model.forward_full` over one prompt length at position 0, captured: static token ids in, the
    last position's logits and the captured residuals out (the graph's own buffers, overwritten by the
    next replay). The very same kernels as the eager prefill, so the same numbers (tests/gpu checks)."""

    def __init__(self, model: Transformer, cache: KVCache, length: int, capture_layers: tuple[int, ...]):
        self.tokens = torch.zeros(1, length, dtype=torch.int64, device=model.device)
        out: dict[str, tuple] = {}

        def run() -> None:
            out["r"] = model.forward_full(self.tokens, cache, 0, capture_layers, logits="last")

        self._out = out
        self._graph = Replayable(run, model.device, True)

    def __call__(self, prompt_ids: list[int]) -> tuple[torch.Tensor, list[torch.Tensor]]:
        self.tokens.copy_(torch.tensor([prompt_ids], dtype=torch.int64))
        self._graph()
        return self._out["r"]


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
