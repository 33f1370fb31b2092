"""Comment commands (`/rescore`, `/automerge on|off`, `/evalbot help`): parsing, per-command help, and
who may use them. Pure functions; the webhook turns the result into queued work or a reply.

Each command registers its own usage and help text (as Prow plugins do); the help comment and the
command list in docs/deploy.md are generated from this registry.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

TRUSTED_ASSOCIATIONS = frozenset({"OWNER", "MEMBER", "COLLABORATOR"})
MAX_COMMANDS_PER_COMMENT = 5

_COMMAND_LINE = re.compile(r"^/([A-Za-z][\w-]*)(?:[ \t]+(.*?))?[ \t]*$")


@dataclass(frozen=True)
class CommandSpec:
    name: str
    usage: str
    help: str
    arg_choices: tuple[str, ...] = ()  # empty: takes no argument
    maintainers_only: bool = True


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
        name="automerge",
        usage="/automerge on|off",
        help=(
            "Turn automerge on or off for the repository. When on, at the end of each round the best "
            "non-REJECT pull request at or above the configured tier is squash-merged."
        ),
        arg_choices=("on", "off"),
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


def parse_commands(body: str) -> list[Command | CommandError]:
    """Every line of the comment that starts with one of our commands, in order.

    Lines inside fenced code blocks are not commands. Unknown `/words` are left alone: they may
    belong to another bot. At most MAX_COMMANDS_PER_COMMENT are returned.
    """
    found: list[Command | CommandError] = []
    in_fence = False
    for raw_line in body.splitlines():
        line = raw_line.strip()
        if line.startswith("```") or line.startswith("~~~"):
            in_fence = not in_fence
            continue
        if in_fence:
            continue
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


def may_run(spec_name: str, author_association: str, login: str, allowlist: frozenset[str] | set[str]) -> bool:
    spec = COMMANDS[spec_name]
    return not spec.maintainers_only or is_trusted(author_association, login, allowlist)
