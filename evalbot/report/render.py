"""Every text a user reads (scorecards, check runs, comments, labels, the demo's lines) comes from a
jinja2 template in evalbot/report/templates/, rendered through this one environment: the same
filters and the same strictness everywhere. Untrusted text (branch names, stderr of PR code) is
neutralised by the `code`, `cell` and `fence` filters."""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

import jinja2

TEMPLATES_DIR = Path(__file__).resolve().parent / "templates"  # shipped in the package (package data)


def short(sha: str, n: int = 12) -> str:
    return (sha or "")[:n] or "—"


def pct(x: float | None) -> str:
    return "—" if x is None else f"{x:+.1f}%"


def ratio(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}×"


def cell(text: Any) -> str:
    """Keep a value inside one markdown table cell."""
    return " ".join(str(text).split()).replace("|", "\\|")


def fence(text: str) -> str:
    """Keep untrusted text inside a fenced code block."""
    return str(text).replace("```", "'''")


def code(text: Any, limit: int = 80) -> str:
    """Show untrusted text inline without letting it format, mention or inject markup."""
    value = " ".join(str(text).split()).replace("`", "'")
    if len(value) > limit:
        value = value[: limit - 1] + "…"
    return f"`{value}`"


@lru_cache(maxsize=4)
def _environment(root: str) -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(root),
        undefined=jinja2.StrictUndefined,  # a missing value is a bug, not an empty string
        autoescape=False,  # markdown, not HTML; untrusted values go through the filters above
        keep_trailing_newline=True,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters.update(short=short, pct=pct, ratio=ratio, cell=cell, fence=fence, code=code)
    return env


def render(template: str, /, templates: Path | None = None, **context: Any) -> str:
    """`template` rendered with `context`, stripped, one trailing newline. `templates`: another
    directory of templates (the `templates_dir` setting); None: the shipped ones."""
    root = templates or TEMPLATES_DIR
    try:
        found = _environment(str(root)).get_template(template)
    except jinja2.TemplateNotFound:
        raise FileNotFoundError(f"template {template} not found in {root}") from None
    return found.render(**context).strip() + "\n"
