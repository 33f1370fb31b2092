"""The guard shapes (Qwen3-0.6B with QK-norm, Llama-3.2-1B with llama3 RoPE scaling), random weights in
bf16 on CUDA: the decode step's logits agree with forward_full, k-row steps equal 1-row steps bit for
bit, AR decode through graphs equals eager decode, and teacher forcing (the bot's verifier) finds the
guard's own greedy stream to be its argmax."""

from __future__ import annotations

import pytest
import torch

from engine.generate import Engine
from models import GUARD_SHAPES, logits_by_rows, random_ids, random_model

CTX = 2048


@pytest.fixture(scope="module", params=GUARD_SHAPES, ids=lambda s: s.name)
def guard(request):
    loaded = random_model(request.param, max_seq_len=4096)
    yield loaded, Engine(loaded=loaded, device="cuda")
    torch.cuda.empty_cache()


def test_step_agrees_with_forward_full(guard):
    loaded, engine = guard
    v = engine.config.vocab_size
    ids, fed = random_ids(CTX, v, seed=1), random_ids(14, v, seed=2)
    stepped = logits_by_rows(engine, ids, fed, 7)
    with torch.inference_mode():
        full, _ = engine.model.forward_full(torch.tensor([ids + fed], device="cuda"), logits="all")
    want = full[0, CTX : CTX + len(fed)]  # the rows of the fed tokens
    err = float((stepped - want).norm() / want.norm())
    assert err < 5e-2, f"step vs forward_full relative error {err:.4f}"  # bf16 GEMMs of different shapes
    assert (stepped.argmax(-1) == want.argmax(-1)).float().mean() >= 0.8


def test_k_row_steps_equal_one_row_steps(guard):
    _, engine = guard
    v = engine.config.vocab_size
    ids, fed = random_ids(CTX, v, seed=3), random_ids(42, v, seed=4)
    one = logits_by_rows(engine, ids, fed, 1)
    for rows in (3, 7):
        assert torch.equal(logits_by_rows(engine, ids, fed, rows), one), rows


def test_graph_decode_equals_eager_decode(guard):
    loaded, engine = guard
    eager = Engine(loaded=loaded, device="cuda", cuda_graphs=False)
    ids = random_ids(CTX, engine.config.vocab_size, seed=5)
    assert engine.generate(ids, 32, stop_at_eos=False).tokens == eager.generate(ids, 32, stop_at_eos=False).tokens


def test_teacher_forcing_verifies_the_guards_own_greedy_stream(guard):
    """What the bot's verifier does with a PR's guard stream (harness `verify`, "model": "guard:NAME"):
    main's copy of the guard teacher-forces it; its own greedy stream is its argmax at every token."""
    _, engine = guard
    ids = random_ids(CTX, engine.config.vocab_size, seed=6)
    out = engine.generate(ids, 32, stop_at_eos=False).tokens
    tf = engine.teacher_forced(ids + out, len(ids))
    assert max(tf["gap"]) == 0.0  # every token the top logit (an exact bf16 tie may name another index)
    worst = int(engine.teacher_forced_logits(ids + out[:1], len(ids))[0].argmin())
    assert engine.teacher_forced(ids + [worst, *out[1:]], len(ids))["gap"][0] > 0.5  # a junk token: whole logits off
