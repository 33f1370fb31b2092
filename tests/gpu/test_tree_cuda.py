"""A token tree on CUDA (bundled model's shape, random weights, bf16): every row of a tree's verify has the
bits its path gets stepped one row at a time, across an attention split's boundary too; the tree commit
leaves the cache and the captured rows a chain's commit leaves; greedy DSpark verifying trees equals AR,
with a random drafter and with an oracle whose trees hold the AR stream down one branch (graphs on)."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from engine.dspark import SpecOptions, random_drafter, use_drafter
from engine.dspark.drafter import DrafterRuntime
from engine.generate import Engine
from engine.model import STEP_ROWS, StepIO, Transformer, tree_ancestors
from kernels.greedy_commit import STATE_ACCEPTED, STATE_BASE, STATE_COMMITTED, STATE_SIZE
from models import random_ids, random_model

TREE = [-1, 0, 0, 1, 1, 2, 3, 5]  # depths 0, 1, 1, 2, 2, 2, 3, 3
DEPTH = [0, 1, 1, 2, 2, 2, 3, 3]
# (context, seed): the root at a split's last key (1023 and 4093 of 64-key splits, 7935 of 128), so the tree's
# keys straddle two splits
CASES = [(1024, 21), (4094, 22), (7936, 23)]
NEW = 96


@pytest.fixture(scope="module")
def loaded():
    return random_model()


@pytest.fixture(scope="module")
def model(loaded):
    return Transformer(loaded.config, loaded.weights, "cuda")


def _path(row: int) -> list[int]:
    out = [row]
    while TREE[out[-1]] >= 0:
        out.append(TREE[out[-1]])
    return out[::-1]


def _prefilled(model, prompt: list[int]):
    cap = -(-(len(prompt) + 64) // 1024) * 1024
    cache = model.new_cache(cap)
    with torch.inference_mode():
        model.forward_full(torch.tensor([prompt[:-1]], device="cuda"), cache)
    return cache, StepIO(model, cap, capture_layers=(1, 15, 28))


def _chain(model, prompt: list[int], path_tokens: list[int]):
    cache, io = _prefilled(model, prompt)
    logits, caps = [], []
    with torch.inference_mode():
        for i, tok in enumerate(path_tokens):
            io.set_rows([tok], len(prompt) - 1 + i)
            model.step(io, 1, cache)
            logits.append(io.logits[0].clone())
            caps.append(io.capture_rows[0].clone())
    return torch.stack(logits), torch.stack(caps), cache


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"ctx{c[0]}")
def test_every_tree_row_has_the_bits_of_its_path_stepped_alone(model, case):
    ctx, seed = case
    v = model.config.vocab_size
    prompt = random_ids(ctx, v, seed)
    tokens = [prompt[-1]] + random_ids(len(TREE) - 1, v, seed + 100)
    cache, io = _prefilled(model, prompt)
    io.set_tree(tokens, TREE, ctx - 1)
    with torch.inference_mode():
        model.step(io, len(TREE), cache, tree=True)
    for r in range(len(TREE)):
        want, caps, _ = _chain(model, prompt, [tokens[a] for a in _path(r)])
        assert torch.equal(io.logits[r], want[-1]), (ctx, r)
        assert torch.equal(io.capture_rows[r], caps[-1]), (ctx, r)


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"ctx{c[0]}")
def test_the_tree_commit_leaves_what_a_chain_commit_leaves(model, case):
    ctx, seed = case
    v = model.config.vocab_size
    prompt = random_ids(ctx, v, seed)
    accepted = [2, 5, 7]  # down the root's second child, three deep
    tokens = [prompt[-1]] + [0] * (len(TREE) - 1)
    for c in range(1, len(TREE)):
        logits, _, _ = _chain(model, prompt, [tokens[a] for a in _path(TREE[c])])
        best = int(torch.argmax(logits[-1]))
        tokens[c] = best if c in accepted else (best + 1 + c) % v
    base = ctx - 1
    cache, io = _prefilled(model, prompt)
    io.set_tree(tokens, TREE, base)
    out = torch.zeros(cache.capacity + STEP_ROWS, dtype=torch.int64, device="cuda")
    state = torch.zeros(STATE_SIZE, dtype=torch.int64, device="cuda")
    state[STATE_COMMITTED], state[STATE_BASE] = 1, base
    with torch.inference_mode():
        model.step(io, len(TREE), cache, tree=True)
        model.ops.tree_commit(io.logits, io.tokens, io.positions, io.kv_end, out, state, len(TREE), io.parents, io.slots,
                              cache.k, cache.v, io.capture_rows)
    path = [0] + accepted
    want_logits, want_caps, want_cache = _chain(model, prompt, [tokens[a] for a in path])
    committed = [tokens[a] for a in accepted] + [int(torch.argmax(want_logits[-1]))]
    assert out[1 : 1 + len(committed)].tolist() == committed
    assert int(state[STATE_ACCEPTED]) == 3 and int(state[STATE_BASE]) == base + 4
    assert torch.equal(io.capture_rows[:4], want_caps)
    end = base + 4
    assert torch.equal(cache.k[:, :, :, :end], want_cache.k[:, :, :, :end])
    assert torch.equal(cache.v[:, :, :, :end], want_cache.v[:, :, :, :end])


@pytest.fixture(scope="module")
def engine(loaded):
    e = Engine(loaded=loaded, device="cuda")
    assert e.use_graphs
    return e


@pytest.fixture(scope="module")
def ar_streams(engine):
    v = engine.config.vocab_size
    return {case: (ids, engine.generate(ids, NEW + 8, stop_at_eos=False).tokens)
            for case in CASES for ids in [random_ids(case[0], v, case[1])]}


TREE_OPTS = SpecOptions(confidence_threshold=0.0, idle_min_accept=0.0, narrow_below_ctx=0, tree_nodes=7)


@pytest.mark.parametrize("loop", [True, False], ids=["device-loop", "host-loop"])
def test_greedy_dspark_verifying_trees_equals_ar_with_a_random_drafter(engine, ar_streams, loop):
    use_drafter(engine, random_drafter(engine, seed=4), dataclasses.replace(TREE_OPTS, device_loop=loop))
    for (ctx, seed), (ids, ar) in ar_streams.items():
        out = engine.generate(ids, NEW, dspark=True, stop_at_eos=False)
        assert out.tokens == ar[:NEW], f"ctx {ctx} prompt {seed}"


class TreeOracle:
    """Proposes TREE on the device (captured like the real drafter): the AR stream, corrupted at a fifth of the
    positions, down the root's first branch (rows 1, 3, 6) or, where the root's position is 1 mod 3, its
    second (2, 5, 7); the other rows wrong. Accepted depths 0..3 all occur, down either branch."""

    def __init__(self, prompt_len: int, stream: list[int], vocab: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        table = torch.zeros(prompt_len + len(stream) + 16, dtype=torch.int64)
        self.bad = set()
        for k, t in enumerate(stream):
            if float(torch.rand((), generator=g)) < 0.2:
                self.bad.add(prompt_len + k)
            table[prompt_len + k] = (t + 1) % vocab if prompt_len + k in self.bad else t
        self.table, self.vocab, self.prompt_len = table.cuda(), vocab, prompt_len
        self.depth = torch.tensor(DEPTH, device="cuda")
        rows = torch.arange(len(TREE), device="cuda")
        self.first = torch.isin(rows, torch.tensor([1, 3, 6], device="cuda"))
        self.second = torch.isin(rows, torch.tensor([2, 5, 7], device="cuda"))
        anc, _ = tree_ancestors(TREE)
        self.anc = anc.cuda()
        self.parents = torch.tensor(TREE + [-1] * (STEP_ROWS - len(TREE)), dtype=torch.int32, device="cuda")

    def expected_hist(self, new: int, size: int) -> list[int]:
        """Replayed: from each root, the branch its position picks, accepted down to its first corrupted depth."""
        hist, k = [0] * size, 0  # k = index in the stream of the last committed token (the root)
        while k + 1 < new:
            j = 0
            while j < 3 and self.prompt_len + k + 1 + j not in self.bad:
                j += 1
            hist[j + 1] += 1
            k += j + 1
        return hist

    def draft(self, rt: DrafterRuntime) -> None:
        io = rt.step_io
        p = io.positions[:1].long()
        n = len(TREE)
        truth = self.table[p + self.depth]
        on = torch.where((p % 3) == 1, self.second, self.first)
        wrong = (truth + 2 + torch.arange(n, device="cuda")) % self.vocab
        io.tokens[1:n] = torch.where(on, truth, wrong)[1:]
        io.positions[:n] = (p + self.depth).to(torch.int32)
        io.kv_end[:n] = io.positions[:n] + 1
        io.slots.copy_((p + torch.arange(STEP_ROWS, device="cuda")).to(torch.int32))
        io.tree.copy_(self.anc)
        io.parents.copy_(self.parents)


@pytest.mark.parametrize("loop", [True, False], ids=["device-loop", "host-loop"])
def test_trees_holding_the_ar_stream_commit_down_either_branch(engine, ar_streams, monkeypatch, loop):
    seen = [0] * 5
    for (ctx, seed), (ids, ar) in ar_streams.items():
        oracle = TreeOracle(len(ids), ar, engine.config.vocab_size, seed)
        monkeypatch.setattr(DrafterRuntime, "draft", lambda rt, o=oracle: o.draft(rt))
        use_drafter(engine, random_drafter(engine, seed=1), dataclasses.replace(TREE_OPTS, device_loop=loop, loop_chunk=1))
        engine._session = None
        out = engine.generate(ids, NEW, dspark=True, stop_at_eos=False)
        assert out.tokens == ar[:NEW], f"ctx {ctx}"
        hist = out.stats["accept_hist"]
        assert hist == oracle.expected_hist(NEW, len(hist)), (ctx, hist)
        seen = [a + b for a, b in zip(seen, hist[:5])]
        monkeypatch.undo()
        engine._session = None
    assert all(seen[1:5]), f"not every accepted depth 0..3 occurred: {seen}"
