"""Random-weight models for the GPU suite, built on the device in seconds (no staging): the bundled
model's exact shape (SmolLM2-135M) and the guard shapes, through the same builder the harness's
guard program uses. Token ids are fixed-seed random: these tests check that the kernels, graphs and
DSpark stay lossless, never tau (tau is only ever measured on real text)."""

from __future__ import annotations

import torch

from engine.model import STEP_ROWS

from harness.guard import guard_model
from harness.profiles import LLAMA32_1B, QWEN3_06B, GuardShape

# engine/gguf_loader.py reads these from the bundled GGUF (tests/test_loaders.py checks it)
SMOLLM2_135M = GuardShape("smollm2-135m-shape", "llama", 49152, 576, 30, 9, 3, 64, 1536, 100_000.0)
GUARD_SHAPES = (QWEN3_06B, LLAMA32_1B)
MAX_SEQ = 8192


def random_model(shape: GuardShape = SMOLLM2_135M, max_seq_len: int = MAX_SEQ, seed: int = 1234):
    return guard_model(shape, torch.device("cuda"), torch.bfloat16, max_seq_len, seed=seed)


def random_ids(n: int, vocab: int, seed: int) -> list[int]:
    g = torch.Generator().manual_seed(seed)
    return torch.randint(0, vocab, (n,), generator=g).tolist()


def logits_by_rows(engine, ids: list[int], fed: list[int], rows: int) -> torch.Tensor:
    """Prefill `ids`, then feed `fed` in steps of `rows` rows through the captured verify graphs."""
    s = engine.session(len(ids), len(fed) + STEP_ROWS)
    out = []
    with torch.inference_mode():
        engine.prefill(s, ids)
        pos = len(ids)
        for i in range(0, len(fed), rows):
            chunk = fed[i : i + rows]
            s.io.set_rows(chunk, pos)
            s.step(len(chunk), commit=False)()
            out.append(s.io.logits[: len(chunk)].clone())
            pos += len(chunk)
    return torch.cat(out)
