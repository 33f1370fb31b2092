"""Shared fixtures. `bundled` loads the 98 MB bundled model once per session."""

from __future__ import annotations

import pytest
import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

TINY_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_TINY_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "def main(argv: list[str]) -> int:\n    return 0\n",
    "Numbers like 1234 and 3.14159 are split digit by digit.",
    "Héllo wörld, naïve café. 日本語のテキスト. Ελληνικά. 🙂🚀",
    "the theory of the thing that they thought through\n\n\tindented\ttabs  and  spaces ",
] * 20


@pytest.fixture(scope="session")
def bundled():
    """The bundled SmolLM2 GGUF as a LoadedModel (downloaded into the model cache on first use)."""
    from engine.loader import load_model

    return load_model(None)


@pytest.fixture(scope="session")
def tiny_bpe() -> tokenizers.Tokenizer:
    """A small byte-level BPE shaped like SmolLM2's (Digits + ByteLevel), trained on the fly.

    Special tokens take ids 0..2, as in SmolLM2, so GGUF/HF test files can mark them CONTROL."""
    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Digits(individual_digits=True),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True),
        ]
    )
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=400,
        special_tokens=TINY_SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(_TINY_CORPUS, trainer=trainer)
    return tok
