"""Shared fixtures. `bundled` loads the 98 MB bundled model once per session."""

from __future__ import annotations

import os

import pytest
import tokenizers
from tokenizers import decoders, models, pre_tokenizers, trainers

import kernels  # noqa: F401  (sets TRITON_INTERPRET=1 where there is no GPU, before the patch below)

TINY_SPECIAL_TOKENS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]

_TINY_CORPUS = [
    "The quick brown fox jumps over the lazy dog.",
    "def main(argv: list[str]) -> int:\n    return 0\n",
    "Numbers like 1234 and 3.14159 are split digit by digit.",
    "Héllo wörld, naïve café. 日本語のテキスト. Ελληνικά. 🙂🚀",
    "the theory of the thing that they thought through\n\n\tindented\ttabs  and  spaces ",
] * 20


def _patch_the_interpreter_once_per_launch() -> None:
    """Triton's interpreter re-patches triton.language (inspect.getmembers over tl, tl.tensor, tl.math,
    ...) on every call of a device function, not only at each launch; our kernels call helpers (mma,
    linear_tile, ...) inside their loops, so that is about a third of every interpreted test's time.
    Within one launch a module (tl, or tl.core for triton's own helpers such as tl.zeros) needs patching
    once: a device function whose modules are all patched already skips it. What is patched and when it
    is restored is otherwise upstream's. Tests only: the CPU engine runs the torch references, and this
    never runs on CUDA. Left alone where triton's internals differ."""
    if os.environ.get("TRITON_INTERPRET") != "1":
        return
    try:
        import triton.language as tl
        from triton.runtime import interpreter as interp
    except ImportError:
        return
    launch = getattr(interp.GridExecutor, "__call__", None)
    patch = getattr(interp, "_patch_lang", None)
    if not (launch and patch and hasattr(interp, "_LangPatchScope")) or getattr(patch, "_dspark_once", False):
        return
    patched: list[set[int]] = []  # per active launch: the language modules patched in it

    def patch_lang(fn):
        langs = {id(v) for v in fn.__globals__.values() if v is tl or v is tl.core}
        if patched and langs and langs <= patched[-1]:
            return interp._LangPatchScope()  # nothing recorded: nothing to restore
        scope = patch(fn)
        if patched:
            patched[-1] |= langs
        return scope

    def launch_call(self, *args, **kwargs):
        patched.append(set())
        try:
            return launch(self, *args, **kwargs)
        finally:
            patched.pop()

    patch_lang._dspark_once = True
    interp._patch_lang = patch_lang
    interp.GridExecutor.__call__ = launch_call


_patch_the_interpreter_once_per_launch()


@pytest.fixture
def kernel_switch(monkeypatch):
    """`kernel_switch("DSPARK_X", on)`: one of kernels/common.py's switches (an environment variable read through
    a cached function) for the launches that follow; every switch is back to its default after the test."""
    from kernels import common

    def clear() -> None:
        for f in vars(common).values():
            if callable(getattr(f, "cache_clear", None)):
                f.cache_clear()

    def switch(var: str, on: bool) -> None:
        monkeypatch.setenv(var, "1" if on else "0")
        clear()

    yield switch
    monkeypatch.undo()
    clear()


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
