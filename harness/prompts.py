"""Real-text prompts cut to exact token lengths with the model's own tokenizer. Never synthetic ids:
tau on gibberish measures degenerate repetition, not the decoder."""

from __future__ import annotations

import hashlib
from pathlib import Path

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
PROMPT_NAMES = ("code", "prose")


class ShortCorpusError(ValueError):
    pass


def load_text(name: str) -> str:
    path = PROMPTS_DIR / f"{name}.txt"
    if not path.is_file():
        raise ShortCorpusError(f"no prompt corpus named {name!r} in {PROMPTS_DIR}")
    return path.read_text(encoding="utf-8")


def exact_prompt(tokenizer, name: str, length: int) -> list[int]:
    """The first `length` tokens of the corpus; a corpus shorter than that is an error, never padded."""
    if length < 1:
        raise ShortCorpusError(f"prompt length must be positive, got {length}")
    ids = tokenizer.encode(load_text(name))
    if len(ids) < length:
        raise ShortCorpusError(f"prompt corpus {name!r} has {len(ids)} tokens, fewer than the {length} asked for")
    return ids[:length]


def token_digest(ids: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()
