"""A token tree in one verify step (engine/model.py `step(tree=True)`, kernels/decode_attention.py's tree
rows, kernels/greedy_commit.py's tree commit): every row's logits are the bits that row gets when its
path is stepped as a chain, one row at a time; the commit keeps the accepted path and leaves the cache,
the captured rows and the next step's inputs as a chain's commit of the same tokens would."""

from __future__ import annotations

import pytest
import torch

from engine.model import STEP_ROWS, StepIO, Transformer
from kernels.greedy_commit import STATE_ACCEPTED, STATE_BASE, STATE_COMMITTED, STATE_SIZE
from tests.test_model import DEV, random_weights, tiny_config

PARENTS = [-1, 0, 0, 1, 1, 2, 3, 5]  # depths 0, 1, 1, 2, 2, 2, 3, 3


def _setup(backend: str, prompt_len: int, capacity: int = 96, seed: int = 3):
    c = tiny_config("llama")
    model = Transformer(c, random_weights(c, seed), DEV, torch.float32, backend)
    prompt = torch.randint(0, c.vocab_size, (prompt_len,), generator=torch.Generator().manual_seed(5)).tolist()
    return model, prompt, capacity


def _prefilled(model: Transformer, prompt: list[int], capacity: int):
    cache = model.new_cache(capacity)
    model.forward_full(torch.tensor([prompt[:-1]], device=model.device), cache)
    return cache, StepIO(model, capacity, capture_layers=(0, 1), split=64)


def _chain(model: Transformer, prompt: list[int], capacity: int, path_tokens: list[int]):
    """Each of path_tokens stepped alone after the prompt: (logits rows, capture rows, cache)."""
    cache, io = _prefilled(model, prompt, capacity)
    logits, caps = [], []
    for i, tok in enumerate(path_tokens):
        io.set_rows([tok], len(prompt) - 1 + i)
        model.step(io, 1, cache)
        logits.append(io.logits[0].cpu().clone())
        caps.append(io.capture_rows[0].cpu().clone())
    return torch.stack(logits), torch.stack(caps), cache


def _path(parents: list[int], row: int) -> list[int]:
    out = [row]
    while parents[out[-1]] >= 0:
        out.append(parents[out[-1]])
    return out[::-1]


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("prompt_len", [11, 61])  # the tree inside one split of 64 keys, and across two
def test_every_tree_row_has_the_bits_of_its_path_stepped_alone(backend, prompt_len):
    model, prompt, cap = _setup(backend, prompt_len)
    tokens = [prompt[-1]] + torch.randint(0, 300, (len(PARENTS) - 1,), generator=torch.Generator().manual_seed(9)).tolist()
    cache, io = _prefilled(model, prompt, cap)
    io.set_tree(tokens, PARENTS, len(prompt) - 1)
    model.step(io, len(PARENTS), cache, tree=True)
    for r in range(len(PARENTS)):
        want, caps, _ = _chain(model, prompt, cap, [tokens[a] for a in _path(PARENTS, r)])
        assert torch.equal(io.logits[r].cpu(), want[-1]), r
        assert torch.equal(io.capture_rows[r].cpu(), caps[-1]), r


def _accepting_tree(model, prompt, cap, accepted_rows: list[int]) -> list[int]:
    """PARENTS' tokens such that the target accepts exactly the rows `accepted_rows` (a path from the root):
    each accepted row holds the target's argmax after its parent's path, every other row something else."""
    g = torch.Generator().manual_seed(11)
    tokens = [prompt[-1]] + [0] * (len(PARENTS) - 1)
    for c in range(1, len(PARENTS)):
        logits, _, _ = _chain(model, prompt, cap, [tokens[a] for a in _path(PARENTS, PARENTS[c])])
        best = int(torch.argmax(logits[-1]))
        tok = best
        while tok == best:
            tok = int(torch.randint(0, 300, (1,), generator=g))
        tokens[c] = best if c in accepted_rows else tok
    return tokens


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("accepted", [[], [2], [1, 4], [2, 5, 7]])
def test_the_tree_commit_leaves_what_a_chain_commit_of_the_same_tokens_leaves(backend, accepted):
    model, prompt, cap = _setup(backend, 61)
    tokens = _accepting_tree(model, prompt, cap, accepted)
    base = len(prompt) - 1
    cache, io = _prefilled(model, prompt, cap)
    io.set_tree(tokens, PARENTS, base)
    out = torch.zeros(cap + STEP_ROWS, dtype=torch.int64, device=model.device)
    state = torch.zeros(STATE_SIZE, dtype=torch.int64, device=model.device)
    state[STATE_COMMITTED], state[STATE_BASE] = 3, base
    hist = torch.zeros(STEP_ROWS + 1, dtype=torch.int64, device=model.device)
    model.step(io, len(PARENTS), cache, tree=True)
    model.ops.tree_commit(io.logits, io.tokens, io.positions, io.kv_end, out, state, len(PARENTS), io.parents, io.slots,
                          cache.k, cache.v, io.capture_rows, hist=hist)
    path = [0] + accepted
    j = len(accepted)
    want_logits, want_caps, want_cache = _chain(model, prompt, cap, [tokens[a] for a in path])
    committed = [tokens[a] for a in path[1:]] + [int(torch.argmax(want_logits[-1]))]
    assert out[3 : 3 + j + 1].tolist() == committed
    assert int(state[STATE_ACCEPTED]) == j and int(state[STATE_COMMITTED]) == 3 + j + 1
    assert int(state[STATE_BASE]) == base + j + 1 and int(hist[j + 1]) == 1
    assert int(io.tokens[0]) == committed[-1]
    assert io.positions.tolist() == list(range(base + j + 1, base + j + 1 + STEP_ROWS))
    assert io.kv_end.tolist() == list(range(base + j + 2, base + j + 2 + STEP_ROWS))
    assert torch.equal(io.capture_rows[: j + 1].cpu(), want_caps)
    end = base + j + 1  # the committed text's keys, every layer, as the chain left them
    assert torch.equal(cache.k[:, :, :, :end], want_cache.k[:, :, :, :end])
    assert torch.equal(cache.v[:, :, :, :end], want_cache.v[:, :, :, :end])


def test_a_malformed_tree_is_refused():
    model, prompt, cap = _setup("torch", 11)
    io = StepIO(model, cap, split=64)
    for parents in ([0, 0], [-1, 1], [-1, 0, 3], [-1] + [0] * STEP_ROWS):
        with pytest.raises(ValueError, match="a tree"):
            io.set_tree([1] * len(parents), parents, 10)


def _best_first(base, u, v, root: int, n_nodes: int, fanout: int) -> set[tuple[int, ...]]:
    """The tree as bench/tree_tau.py grows it offline: a heap of (score, path)."""
    import heapq

    def kids(depth, prev, score, path):
        logp = torch.log_softmax(base[depth] + u @ v[prev], -1)
        top = logp.topk(fanout)
        return [(-(score + lp), path + (t,)) for lp, t in zip(top.values.tolist(), top.indices.tolist())]

    heap = kids(0, root, 0.0, ())
    heapq.heapify(heap)
    tree = set()
    while len(tree) < n_nodes:
        neg, path = heapq.heappop(heap)
        tree.add(path)
        if len(path) < base.shape[0]:
            for item in kids(len(path), path[-1], -neg, path):
                heapq.heappush(heap, item)
    return tree


@pytest.mark.parametrize("backend", ["torch", "triton"])
@pytest.mark.parametrize("fanout", [1, 2, 4, 7])  # fanout 1: the chain
def test_the_tree_head_grows_the_best_first_tree(fanout, backend):
    """tree_head_reference and tree_head_triton (on static buffers) against the offline heap, and the step
    inputs they write are set_tree's for the same tree."""
    from kernels.draft_head import tree_head_reference, tree_head_triton

    g = torch.Generator().manual_seed(fanout)
    (p, n), vocab, rank = ((6, 6) if fanout == 1 else (3, 7)), 40, 4
    base = torch.randn(p, vocab, generator=g) * 2
    u, v = torch.randn(vocab, rank, generator=g), torch.randn(vocab, rank, generator=g)
    model, prompt, cap = _setup(backend, 11)
    io = StepIO(model, cap, split=64)
    io.set_rows([17], 30)
    head = tree_head_triton if backend == "triton" else tree_head_reference
    head(base, u, v, n, fanout, io.tokens, io.positions, io.kv_end, io.slots, io.tree, io.parents)
    parents = io.parents[: n + 1].tolist()
    tokens = io.tokens[: n + 1].tolist()
    paths = set()
    for c in range(1, n + 1):
        paths.add(tuple(tokens[a] for a in _path(parents, c)[1:]))
    assert paths == _best_first(base, u, v, 17, n, fanout)
    want = StepIO(model, cap, split=64)
    want.set_tree(tokens, parents, 30)
    for name in ("positions", "kv_end", "slots", "tree", "parents"):
        assert torch.equal(getattr(io, name)[: n + 1], getattr(want, name)[: n + 1]), name


@pytest.fixture(scope="module")
def triton_engine():
    from pathlib import Path

    from engine.dspark import SpecOptions, random_drafter, use_drafter
    from engine.generate import Engine
    from engine.loader import LoadedModel

    c = tiny_config("llama", n_layers=4, max_seq_len=512)
    engine = Engine(loaded=LoadedModel(c, random_weights(c, seed=5), None, Path("<tiny>"), "tiny"), device="cpu",
                    backend="triton")
    use_drafter(engine, random_drafter(engine, seed=0, ffn_dim=96, markov_rank=16, window=64),
                SpecOptions(confidence_threshold=0.0, tree_nodes=7))
    return engine


@pytest.mark.parametrize("loop", [True, False])
def test_a_tree_decode_on_the_kernels_is_lossless(triton_engine, loop):
    """The whole greedy loop on the Triton kernels (interpreted here), a random drafter's tree every iteration."""
    import dataclasses

    engine = triton_engine
    engine.spec_options = dataclasses.replace(engine.spec_options, device_loop=loop, loop_chunk=2)
    ids = torch.randint(0, engine.config.vocab_size, (30,), generator=torch.Generator().manual_seed(1 + loop)).tolist()
    ar = engine.generate(ids, 8, stop_at_eos=False)
    out = engine.generate(ids, 8, dspark=True, stop_at_eos=False)
    assert out.tokens == ar.tokens
    assert out.stats["target_forwards"] >= 1


def test_a_tree_session_captures_no_chain_verify_it_never_runs(triton_engine):
    """The tree verifies all its rows in one step; the chain's 2..block_size-row verify steps were captured
    for every tree session anyway (a step's graph each). Only the 1-row step (the idle rule's plain decode)
    and the tree's step are built; a chain session still has every depth."""
    import dataclasses

    engine = triton_engine
    engine.spec_options = dataclasses.replace(engine.spec_options, device_loop=False)
    ids = torch.randint(0, engine.config.vocab_size, (30,), generator=torch.Generator().manual_seed(7)).tolist()
    engine.generate(ids, 4, dspark=True, stop_at_eos=False)
    session = engine._session
    chain_verifies = {k for k in session._steps if k[0] > 1 and k[1] and k[2] == 1 and not k[3]}
    assert chain_verifies == set(), chain_verifies
    assert (engine.spec_options.tree_nodes + 1, True, 1, True) in session._steps
    from engine.sampling import SamplingParams

    out = engine.generate(ids, 4, SamplingParams(temperature=0.8, seed=1), dspark=True, stop_at_eos=False)  # the chain
    assert out.tokens and {k[0] for k in engine._session._steps if k[1] and k[2] == 1 and not k[3]} >= {1, 2}
