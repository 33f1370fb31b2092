"""bench/verify_rows.py sizes the step for more rows than the engine's 8 (STEP_ROWS, the row tiles) to
time a token tree's verify. On the interpreter: a step sized for 32 rows runs, its first rows give the
very logits of today's 7-row step, and the engine's own sizes come back afterwards."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import torch

import engine.model as model_mod
import kernels.fused_linear as fused_linear
import kernels.qkv_rope as qkv_rope
from engine.model import StepIO, Transformer
from harness.guard import guard_model
from harness.profiles import GuardShape

_spec = importlib.util.spec_from_file_location("verify_rows", Path(__file__).resolve().parents[1] / "bench" / "verify_rows.py")
verify_rows = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(verify_rows)

TINY = GuardShape("tiny", "llama", 256, 64, 2, 4, 2, 16, 128, 10000.0)


def _logits(model: Transformer, rows: int) -> torch.Tensor:
    cache, io = model.new_cache(1024), StepIO(model, 1024)
    io.set_rows(list(range(10, 10 + rows)), 100)
    model.step(io, rows, cache)
    return io.logits[:rows].clone()


def test_a_step_sized_for_32_rows_matches_todays_rows_and_the_sizes_come_back():
    model = Transformer(*(lambda m: (m.config, m.weights))(guard_model(TINY, torch.device("cpu"), torch.float32, 2048)),
                        "cpu", backend="triton")
    before = model_mod.STEP_ROWS, fused_linear.BLOCK_M, qkv_rope.BLOCK_M
    today = _logits(model, 7)
    with verify_rows.capacity(32):
        assert (model_mod.STEP_ROWS, fused_linear.BLOCK_M, qkv_rope.BLOCK_M) == (32, 32, 32)
        wide = _logits(model, 32)
    assert (model_mod.STEP_ROWS, fused_linear.BLOCK_M, qkv_rope.BLOCK_M) == before
    assert wide.shape == (32, 256)
    assert torch.equal(wide[:7], today)
