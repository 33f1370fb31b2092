"""The corpora the bot cuts its windows from: main's harness texts (at the pinned harness commit),
tokenized by the bot itself with the model's tokenizer. Measured processes never see these files:
they are sent token ids."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path

from evalbot.errors import EvalbotError
from evalbot.measure import gitops

CORPUS_DIR = "harness/prompts"


def corpus_paths(names: list[str]) -> list[str]:
    return [f"{CORPUS_DIR}/{n}.txt" for n in names]


@lru_cache(maxsize=4)
def _tokenizer(model: Path):
    from engine.loader import load_tokenizer  # the bot's own engine package: tokenizer only, no weights

    return load_tokenizer(model)


@lru_cache(maxsize=8)
def _encode(model: Path, text: str) -> tuple[int, ...]:
    """A corpus's token ids (5 s for the two 2 MB corpora): once per process for the same text and model."""
    return tuple(_tokenizer(model).encode(text))


def load_corpora(repo: Path, harness_sha: str, names: list[str], model: Path) -> dict[str, list[int]]:
    out = {}
    for name, path in zip(names, corpus_paths(names)):
        try:
            text = gitops.git(repo, "show", f"{harness_sha}:{path}")
        except gitops.GitError:
            raise EvalbotError(f"the harness at {harness_sha[:12]} has no corpus {path}") from None
        out[name] = list(_encode(model, text))
    return out
