"""Fake guard models (the real harness/guard.py builds random-weight models in real shapes)."""

import hashlib
from types import SimpleNamespace


def guard_model(shape, device, dtype, max_seq_len, seed=1234):
    return SimpleNamespace(sha256=hashlib.sha256(f"{shape.name}:{seed}".encode()).hexdigest(), vocab_size=shape.vocab_size)
