"""Every text a user reads comes from a jinja2 template in templates/ (gh_* and comment_* are ours)."""

from __future__ import annotations

import os
from functools import lru_cache
from pathlib import Path

import jinja2

_REPO_TEMPLATES = Path(__file__).resolve().parents[2] / "templates"


def templates_dir() -> Path:
    return Path(os.environ.get("EVALBOT_TEMPLATES_DIR") or _REPO_TEMPLATES)


@lru_cache(maxsize=4)
def _environment(root: str) -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(root),
        undefined=jinja2.StrictUndefined,  # a missing value is a bug, not an empty string
        autoescape=False,  # markdown, not HTML; user-controlled values go through `code_span`
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )


def code_span(value: object, limit: int = 80) -> str:
    """Show untrusted text inline without letting it format, mention or inject markup."""
    text = " ".join(str(value).split())
    if len(text) > limit:
        text = text[: limit - 1] + "…"
    text = text.replace("`", "'")
    return f"`{text}`" if text else "``"


def render(template: str, /, **context) -> str:
    env = _environment(str(templates_dir()))
    env.filters.setdefault("code", code_span)
    return env.get_template(template).render(**context).strip() + "\n"
