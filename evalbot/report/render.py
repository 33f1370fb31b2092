"""Every text a user reads (scorecards, check runs, comments, labels, the demo's lines) comes from a
jinja2 template in evalbot/report/templates/, rendered through this one environment: the same
filters and the same strictness everywhere.

Untrusted text is anything a pull request or its processes can choose: branch names, changed paths,
what a harness process answered (error reasons, device names), stderr, and every verdict text or
gate detail composed from those. It goes through `text` (prose: one line, inert markdown) or `code`
(an identifier: one line inside a code span), both length-capped and stripped of control and
format characters; `fence` keeps multi-line output inside a fenced block. Only the bot's own words
and numbers are written to a template raw."""

from __future__ import annotations

import re
import unicodedata
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


def one_line(value: Any, limit: int | None = None) -> str:
    """`value` as one line of printable text: control and format characters (terminal escapes, bidi
    overrides, zero-width joiners, NUL) dropped, every run of whitespace (newlines included) one space,
    at most `limit` characters."""
    chars = (" " if ch.isspace() else ch for ch in str(value))
    kept = "".join(ch for ch in chars if unicodedata.category(ch) not in _INVISIBLE)
    line = " ".join(kept.split())
    if limit is not None and len(line) > limit:
        line = line[: limit - 1] + "…"
    return line


_INVISIBLE = frozenset({"Cc", "Cf", "Cs", "Co", "Cn", "Zl", "Zp"})


def printable(value: Any) -> str:
    """Text for a terminal: lines kept, every control and format character but newline and tab dropped
    (a receipt or a reason can carry a PR's text: no terminal escapes, no bidi overrides)."""
    return "".join(ch for ch in str(value) if ch in "\n\t" or unicodedata.category(ch) not in _INVISIBLE)
# What markdown (CommonMark + GitHub) can act on in the middle of a line: emphasis, code, links,
# images, HTML, entities, tables, strikethrough, and the bare autolinks (`https://`, `www.`). What only
# acts at the start of a line (headings, lists, quotes) cannot: `text` makes one line, and its first
# character is escaped too.
_MARKUP = re.compile(r"[\\`*_\[\]<>!|~&]|:(?=//)|(?<=www)\.|(?<=\w)@", re.IGNORECASE)  # x@y: an e-mail autolink
_MENTION = re.compile(r"(?<![\w`])@[\w-]+(?:/[\w.-]+)?")  # @user, @org/team


def _escape(line: str) -> str:
    return _MARKUP.sub(lambda m: "\\" + m.group(0), line)


def text(value: Any, limit: int = 300) -> str:
    """Untrusted prose, inline: one line, capped, every markdown character escaped and each `@name`
    inside a code span, so it can neither format, link, embed HTML, mention nor leave a table cell."""
    line, out, at = one_line(value, limit), [], 0
    for found in _MENTION.finditer(line):
        out += [_escape(line[at:found.start()]), f"`{found.group(0)}`"]
        at = found.end()
    out.append(_escape(line[at:]))
    escaped = "".join(out)
    if escaped[:1] and escaped[0] in "#+-=>":  # a heading, list, quote or rule if it ever starts a line
        escaped = "\\" + escaped
    return escaped


def cell(value: Any) -> str:
    """Keep a value inside one markdown table cell (for the bot's own text, or after `code`)."""
    return one_line(value).replace("|", "\\|")


def fence(value: Any) -> str:
    """Keep untrusted text inside a fenced code block: no closing fence, no control characters."""
    kept = "".join(ch for ch in str(value).expandtabs(4) if ch == "\n" or unicodedata.category(ch) not in _INVISIBLE)
    return kept.replace("```", "'''").replace("~~~", "'''")


def code(value: Any, limit: int = 80) -> str:
    """Show an untrusted identifier (a path, a branch) inline, as a code span: nothing in it formats,
    mentions or injects markup. In a table cell, follow it with `cell`."""
    line = one_line(value, limit).replace("`", "'")
    return f"`{line}`" if line.strip() else "`—`"


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
    env.filters.update(short=short, pct=pct, ratio=ratio, cell=cell, fence=fence, code=code, text=text)
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
