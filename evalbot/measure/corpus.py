"""The corpora the bot cuts its windows from, tokenized by the bot itself with the model's tokenizer.
Measured processes never see these files: they are sent token ids.

Two sources: main's harness texts at the pinned harness commit (`harness/prompts/<name>.txt`: public,
fine for the demo and CI), or private texts on the bot's box (`corpora_dir/<name>.txt`, settings),
which a contributor cannot read, so cannot tune a drafter or a table on. A box whose contributors
are paid for speedups uses the second (docs/deploy.md)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
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


@dataclass(frozen=True)
class Corpora:
    ids: dict[str, list[int]]  # token ids per corpus name
    source: str  # where the texts came from, for the scorecard and the receipt (digests, never the text)


def load_corpora(repo: Path, harness_sha: str, names: list[str], model: Path, private_dir: Path | None = None) -> Corpora:
    texts = _private_texts(repo, private_dir, names) if private_dir is not None else _harness_texts(repo, harness_sha, names)
    ids = {name: list(_encode(model, text)) for name, text in texts.items()}
    if private_dir is None:
        return Corpora(ids, f"main's harness corpora ({CORPUS_DIR} at {harness_sha[:12]}, public)")
    digests = ", ".join(f"{n} sha256 {hashlib.sha256(t.encode()).hexdigest()[:16]}" for n, t in texts.items())
    return Corpora(ids, f"this box's private corpora ({digests})")


def _harness_texts(repo: Path, harness_sha: str, names: list[str]) -> dict[str, str]:
    out = {}
    for name, path in zip(names, corpus_paths(names)):
        try:
            out[name] = gitops.git(repo, "show", f"{harness_sha}:{path}")
        except gitops.GitError:
            raise EvalbotError(f"the harness at {harness_sha[:12]} has no corpus {path}") from None
    return out


def _private_texts(repo: Path, private_dir: Path, names: list[str]) -> dict[str, str]:
    """`<private_dir>/<name>.txt` for each name; refused when the directory lies inside the repository
    (a committed corpus is a public one)."""
    where = private_dir.expanduser().resolve()
    root = repo.resolve()
    if where == root or root in where.parents:
        raise EvalbotError(f"corpora_dir {private_dir} is inside the repository {repo}: private corpora must live "
                           "outside it (a committed corpus is a public one)")
    out = {}
    for name in names:
        path = where / f"{name}.txt"
        try:
            out[name] = path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as e:
            raise EvalbotError(f"corpora_dir: cannot read {path} ({type(e).__name__}); the profile's corpora are "
                               f"{', '.join(names)}") from None
    return out
