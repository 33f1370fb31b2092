"""The drafter trainer's data path on a tiny random target: long prompts are cut to the drafter's
window without changing a token or a feature of what is kept, and the prose share is exact."""

from __future__ import annotations

import random

import torch

from engine.dspark.train import generate_with_features, make_prompts
from engine.model import Transformer
from tests.test_model import random_weights, tiny_config


def _target() -> Transformer:
    c = tiny_config()
    return Transformer(c, random_weights(c), "cpu", torch.float32)


def test_keep_cuts_the_prompt_head_and_nothing_else():
    model = _target()
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, model.config.vocab_size, (3, 40), generator=g).tolist()
    full_t, full_f = generate_with_features(model, prompts, 6, (0, 1), batch=8)
    cut_t, cut_f = generate_with_features(model, prompts, 6, (0, 1), batch=8, keep=9)
    assert full_t.shape == (3, 46) and full_f.shape == (3, 45, 2 * model.config.dim)
    assert cut_t.shape == (3, 15) and cut_f.shape == (3, 14, 2 * model.config.dim)
    assert torch.equal(cut_t, full_t[:, 31:])
    assert torch.equal(cut_f, full_f[:, 31:])
    # a keep longer than the prompt keeps everything
    all_t, _ = generate_with_features(model, prompts, 6, (0, 1), batch=8, keep=100)
    assert torch.equal(all_t, full_t)


def test_prose_share_is_exact_per_batch():
    docs = {"code": [[1] * 50], "prose": [[2] * 50]}
    prompts = make_prompts(None, docs, 20, 10, 0.0, random.Random(0), prose_share=0.6)
    assert len(prompts) == 20
    assert sum(p[0] == 2 for p in prompts) == 12
    assert all(len(p) == 10 for p in prompts)
    only_code = make_prompts(None, {"code": [[1] * 50], "prose": []}, 5, 10, 0.0, random.Random(0), prose_share=0.6)
    assert all(p[0] == 1 for p in only_code)
