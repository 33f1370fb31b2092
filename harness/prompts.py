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


# Tokens past the wanted length that a prefix of the text must yield before its first `length` tokens
# are taken as the whole text's: a cut in the text can only change the tokens of the word it cuts.
_CUT_MARGIN = 64


def exact_prompt(tokenizer, name: str, length: int) -> list[int]:
    """The first `length` tokens of the corpus; a corpus shorter than that is an error, never padded.
    Only a prefix of the text is tokenized, grown until it holds the length plus a margin (a 2 MB
    corpus took ~4 s to tokenize whole); tests/test_harness.py checks it equals the whole text's cut."""
    if length < 1:
        raise ShortCorpusError(f"prompt length must be positive, got {length}")
    text = load_text(name)
    chars = 8 * (length + _CUT_MARGIN)
    while True:
        ids = tokenizer.encode(text[:chars])
        if len(ids) >= length + _CUT_MARGIN or chars >= len(text):
            break
        chars *= 2
    if len(ids) < length:
        raise ShortCorpusError(f"prompt corpus {name!r} has {len(ids)} tokens, fewer than the {length} asked for")
    return ids[:length]


def token_digest(ids: list[int]) -> str:
    return hashlib.sha256(",".join(map(str, ids)).encode()).hexdigest()
