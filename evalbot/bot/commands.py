"""Comment commands (`/rescore`, `/ok-to-test`, `/automerge on|off`, `/evalbot help`): parsing,
per-command help, and who may use them. Pure functions; the webhook turns the result into queued
work or a reply.

A comment is parsed as CommonMark (markdown-it-py) and a command is taken only from a line of a
top-level paragraph made of plain text: never from code (fenced, indented, or an unclosed fence),
an HTML block or comment, a quote, a list, or a line with markup in it. What a reader of the
rendered comment does not see as a plain line, the bot does not obey.

Each command registers its own usage and help text (as Prow plugins do); the help comment and the
command list in docs/deploy.md are generated from this registry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from markdown_it import MarkdownIt

TRUSTED_ASSOCIATIONS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})  # a fast pre-filter only, never enough
# GitHub's repository roles, weakest first. A command names the least role that may run it; the worker asks
# the forge for the commenter's role (`Forge.permission`) before acting (MEMBER and COLLABORATOR include
# people with no or read-only access to this repository).
ROLES = ("none", "read", "triage", "write", "maintain", "admin")
MAX_COMMANDS_PER_COMMENT = 5

_COMMAND_LINE = re.compile(r"^/([A-Za-z][\w-]*)(?:[ \t]+(.*?))?[ \t]*$")


@dataclass(frozen=True)
class CommandSpec:
    name: str
    usage: str
    help: str
    arg_choices: tuple[str, ...] = ()  # empty: takes no argument
    maintainers_only: bool = True
    min_role: str = "write"  # the least repository role that may run it (when maintainers_only)


COMMANDS: dict[str, CommandSpec] = {}


def register(spec: CommandSpec) -> CommandSpec:
    if spec.name in COMMANDS:
        raise ValueError(f"command /{spec.name} registered twice")
    COMMANDS[spec.name] = spec
    return spec


register(
    CommandSpec(
        name="rescore",
        usage="/rescore",
        help="Score this pull request again: its current head against the current main.",
    )
)
register(
    CommandSpec(
        name="ok-to-test",
        usage="/ok-to-test",
        help=(
            "Let the bot run this pull request's code at its current head: needed for a pull request from a "
            "fork whose author has no write access; each later push needs a new /ok-to-test."
        ),
    )
)
register(
    CommandSpec(
        name="automerge",
        usage="/automerge on|off",
        help=(
            "Turn automerge on or off for the repository. When on, at the end of each round the best "
            "non-REJECT pull request at or above the configured tier is squash-merged."
        ),
        arg_choices=("on", "off"),
        min_role="maintain",
    )
)
register(
    CommandSpec(
        name="evalbot",
        usage="/evalbot help",
        help="List the commands this bot understands.",
        arg_choices=("help",),
        maintainers_only=False,
    )
)


@dataclass(frozen=True)
class Command:
    name: str
    arg: str | None = None


@dataclass(frozen=True)
class CommandError:
    """A command we own, used wrongly: answered with that command's usage and help."""

    name: str
    problem: str


_MARKDOWN = MarkdownIt("commonmark")


def paragraph_lines(body: str) -> list[str]:
    """The plain-text lines of the comment's top-level paragraphs, as a reader sees them rendered.

    A line that holds anything but text (code, an inline HTML comment, emphasis, a link) is left
    out, and so is every block that is not a top-level paragraph."""
    lines: list[str] = []
    tokens = _MARKDOWN.parse(body)
    for opening, inline in zip(tokens, tokens[1:]):
        if opening.type != "paragraph_open" or opening.level != 0 or inline.type != "inline":
            continue
        text, plain = "", True
        for child in [*(inline.children or []), None]:
            if child is None or child.type in ("softbreak", "hardbreak"):
                if plain and text.strip():
                    lines.append(text.strip())
                text, plain = "", True
            elif child.type == "text":
                text += child.content
            else:
                plain = False
    return lines


def parse_commands(body: str) -> list[Command | CommandError]:
    """Every plain paragraph line of the comment that starts with one of our commands, in order.

    Unknown `/words` are left alone: they may belong to another bot. At most
    MAX_COMMANDS_PER_COMMENT are returned; the webhook acts on the first only (one reply per comment).
    """
    found: list[Command | CommandError] = []
    for line in paragraph_lines(body):
        match = _COMMAND_LINE.match(line)
        if not match:
            continue
        name, arg = match.group(1).lower(), (match.group(2) or "").strip()
        spec = COMMANDS.get(name)
        if spec is None:
            continue
        found.append(_check_arguments(spec, arg))
        if len(found) >= MAX_COMMANDS_PER_COMMENT:
            break
    return found


def _check_arguments(spec: CommandSpec, arg: str) -> Command | CommandError:
    if not spec.arg_choices:
        if arg:
            return CommandError(spec.name, "takes no argument")
        return Command(spec.name)
    if not arg:
        return CommandError(spec.name, "needs an argument")
    if arg.lower() not in spec.arg_choices:
        return CommandError(spec.name, "does not understand that argument")
    return Command(spec.name, arg.lower())


def is_trusted(author_association: str, login: str, allowlist: frozenset[str] | set[str]) -> bool:
    """OWNER, MEMBER and COLLABORATOR may command the bot, and so may logins on the configured list."""
    if author_association.upper() in TRUSTED_ASSOCIATIONS:
        return True
    return login.lower() in {name.lower() for name in allowlist}


def role_allows(role: str, min_role: str) -> bool:
    """Whether repository role `role` (as the forge names it) is `min_role` or stronger; unknown: no."""
    return role in ROLES and ROLES.index(role) >= ROLES.index(min_role)


def may_run(spec_name: str, author_association: str, login: str, allowlist: frozenset[str] | set[str]) -> bool:
    spec = COMMANDS[spec_name]
    return not spec.maintainers_only or is_trusted(author_association, login, allowlist)
