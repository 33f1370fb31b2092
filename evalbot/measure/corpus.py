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


def load_corpora(repo: Path, harness_sha: str, names: list[str], model: Path) -> dict[str, list[int]]:
    tok = _tokenizer(model)
    out = {}
    for name, path in zip(names, corpus_paths(names)):
        try:
            text = gitops.git(repo, "show", f"{harness_sha}:{path}")
        except gitops.GitError:
            raise EvalbotError(f"the harness at {harness_sha[:12]} has no corpus {path}") from None
        out[name] = tok.encode(text)
    return out
