"""The persistent step (kernels/persistent_step.py): every layer in one launch, one program per SM,
phases ordered by counters in global memory. On the device: it is what the bundled shape runs; its
logits and KV cache agree with the separate kernels' step (the same tile code; only the launch shape,
and so a reduction's order across warps, can differ); every verify depth equals 1-row decode bit for
bit; it never gives up a wait and leaves its counters at zero; forced onto the guard shapes (QK-norm,
bias-free, larger layers) it agrees with forward_full. The rest of the suite (graphs, DSpark == AR)
runs on it too where it is the bundled shape's default (engine.model.PERSISTENT_BY_DEFAULT)."""

from __future__ import annotations

import pytest
import torch

from engine.generate import Engine
from engine.model import STEP_ROWS
from models import GUARD_SHAPES, logits_by_rows, random_ids, random_model

CONTEXTS = (1000, 7900)


@pytest.fixture(scope="module")
def loaded():
    return random_model()


def _engine(loaded, monkeypatch, persistent: str) -> Engine:
    monkeypatch.setenv("DSPARK_PERSISTENT", persistent)
    try:
        return Engine(loaded=loaded, device="cuda")
    finally:
        monkeypatch.delenv("DSPARK_PERSISTENT")


def test_the_bundled_shape_fits_the_persistent_step_and_the_guards_do_not(loaded):
    from engine.model import PERSISTENT_BY_DEFAULT

    model = Engine(loaded=loaded, device="cuda").model
    assert model.persistent_fits() and model.persistent == PERSISTENT_BY_DEFAULT
    for shape in GUARD_SHAPES:
        g = random_model(shape, max_seq_len=2048)
        m = Engine(loaded=g, device="cuda").model
        assert not m.persistent_fits() and not m.persistent, shape.name
        del g, m
        torch.cuda.empty_cache()


@pytest.mark.parametrize("ctx", CONTEXTS)
def test_persistent_step_agrees_with_the_separate_kernels(loaded, monkeypatch, ctx):
    pers, sep = _engine(loaded, monkeypatch, "1"), _engine(loaded, monkeypatch, "0")
    assert pers.model.persistent and not sep.model.persistent
    v = loaded.config.vocab_size
    ids, fed = random_ids(ctx, v, seed=ctx + 3), random_ids(14, v, seed=ctx + 4)
    for rows in (1, 7):
        a, b = logits_by_rows(pers, ids, fed, rows), logits_by_rows(sep, ids, fed, rows)
        scale = float(b.abs().max())
        err = float((a - b).abs().max())
        assert torch.isfinite(a).all() and err <= 1e-2 * scale, f"rows {rows}: max |diff| {err} of {scale}"
        assert (a.argmax(-1) == b.argmax(-1)).float().mean() >= 0.99
        print(f"ctx {ctx} rows {rows}: bit-identical {torch.equal(a, b)}, max |diff| {err:.3g} of {scale:.3g}")


@pytest.mark.parametrize("ctx", CONTEXTS)
def test_persistent_k_row_steps_are_bit_identical_to_one_row_steps(loaded, monkeypatch, ctx):
    engine = _engine(loaded, monkeypatch, "1")
    v = loaded.config.vocab_size
    ids, fed = random_ids(ctx, v, seed=ctx + 5), random_ids(42, v, seed=ctx + 6)
    one = logits_by_rows(engine, ids, fed, 1)
    for rows in range(2, STEP_ROWS):
        assert torch.equal(logits_by_rows(engine, ids, fed, rows), one), rows


def test_persistent_step_never_gives_up_and_resets_its_counters(loaded, monkeypatch):
    engine = _engine(loaded, monkeypatch, "1")
    ids = random_ids(2000, loaded.config.vocab_size, seed=9)
    r = engine.generate(ids, 200, stop_at_eos=False)
    assert len(r.tokens) == 200
    s = engine.session(len(ids), 200)
    torch.cuda.synchronize()
    bufs = s.io.persistent
    assert int(bufs.error.item()) == 0 and int(bufs.counters.abs().sum().item()) == 0
    s.io.check()


@pytest.mark.parametrize("shape", GUARD_SHAPES, ids=lambda s: s.name)
def test_persistent_step_on_the_guard_shapes_agrees_with_forward_full(shape, monkeypatch):
    g = random_model(shape, max_seq_len=4096)
    engine = _engine(g, monkeypatch, "1")
    assert engine.model.persistent
    v = g.config.vocab_size
    ids, fed = random_ids(2048, v, seed=1), random_ids(14, v, seed=2)
    stepped = logits_by_rows(engine, ids, fed, 7)
    assert torch.equal(logits_by_rows(engine, ids, fed, 1), stepped)
    with torch.inference_mode():
        full, _ = engine.model.forward_full(torch.tensor([ids + fed], device="cuda"), logits="all")
    want = full[0, 2048 : 2048 + len(fed)]
    err = float((stepped - want).norm() / want.norm())
    assert err < 5e-2, f"step vs forward_full relative error {err:.4f}"
    assert (stepped.argmax(-1) == want.argmax(-1)).float().mean() >= 0.8
    del engine, g
    torch.cuda.empty_cache()
