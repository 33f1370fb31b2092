"""Comment commands: parsing, per-command help, who may use them (pure)."""

from __future__ import annotations

import pytest

from evalbot.bot import commands
from evalbot.bot.commands import Command, CommandError, is_trusted, parse_commands
from evalbot.report.render import render


@pytest.mark.parametrize(
    "body,expected",
    [
        ("/rescore", [Command("rescore")]),
        ("  /rescore  ", [Command("rescore")]),
        ("/RESCORE", [Command("rescore")]),
        ("/automerge on", [Command("automerge", "on")]),
        ("/automerge Off", [Command("automerge", "off")]),
        ("/evalbot help", [Command("evalbot", "help")]),
        ("LGTM\n/rescore\nthanks", [Command("rescore")]),
        ("/rescore\n/automerge on", [Command("rescore"), Command("automerge", "on")]),
        ("/automerge", [CommandError("automerge", "needs an argument")]),
        ("/automerge sometimes", [CommandError("automerge", "does not understand that argument")]),
        ("/rescore please", [CommandError("rescore", "takes no argument")]),
        ("/retest", []),
        ("/lgtm", []),
        ("please /rescore", []),
        ("> /rescore", []),
        ("```\n/rescore\n```", []),
        ("~~~\n/automerge on\n~~~\n/rescore", [Command("rescore")]),
        ("", []),
        ("/", []),
        ("/rescore" + "\n/rescore" * 10, [Command("rescore")] * commands.MAX_COMMANDS_PER_COMMENT),
        ("/ok-to-test", [Command("ok-to-test")]),
        ("thanks!\n\n/rescore  \nmore", [Command("rescore")]),  # a hard line break ends a line too
    ],
)
def test_parse(body, expected):
    assert parse_commands(body) == expected


@pytest.mark.parametrize(
    "body",
    [
        "    /rescore",  # an indented code block
        "text\n\n    /automerge on",
        "<!--\n/rescore\n-->",  # an HTML comment: invisible to a reader
        "see <!-- hidden\n/rescore\n--> above",  # an inline HTML comment across lines
        "```\n/rescore\n~~~\n",  # a fence closed by the wrong marker runs to the end
        "~~~\ncode\n```\n/automerge on\n",
        "<div>\n/rescore\n</div>",  # an HTML block
        "- /rescore",  # a list item
        "1. /rescore",
        "*/rescore*",  # markup in the line
        "/rescore `now`",
        "`/rescore`",
        "/rescore\n===",  # a heading, not a paragraph
    ],
)
def test_commands_a_reader_cannot_see_as_a_plain_line_are_not_obeyed(body):
    """Fails without the fix: the line scanner obeyed indented code, HTML comments and unclosed fences."""
    assert parse_commands(body) == []


@pytest.mark.parametrize(
    "association,login,allow,trusted",
    [
        ("OWNER", "a", set(), True),
        ("MEMBER", "a", set(), True),
        ("COLLABORATOR", "a", set(), True),
        ("member", "a", set(), True),
        ("CONTRIBUTOR", "a", set(), False),
        ("NONE", "a", set(), False),
        ("FIRST_TIME_CONTRIBUTOR", "a", set(), False),
        ("NONE", "Alice", {"alice"}, True),
        ("NONE", "mallory", {"alice"}, False),
    ],
)
def test_who_is_trusted(association, login, allow, trusted):
    assert is_trusted(association, login, allow) is trusted


def test_help_is_open_to_everyone_and_the_rest_is_not():
    assert commands.may_run("evalbot", "NONE", "x", set())
    assert not commands.may_run("rescore", "NONE", "x", set())
    assert not commands.may_run("automerge", "CONTRIBUTOR", "x", set())


def test_every_command_has_usage_and_help():
    for spec in commands.COMMANDS.values():
        assert spec.usage.startswith("/" + spec.name) and len(spec.help) > 20


def test_a_command_cannot_be_registered_twice():
    with pytest.raises(ValueError):
        commands.register(commands.COMMANDS["rescore"])


def test_help_comment_lists_every_command_in_code_spans():
    rows = [{"usage": s.usage, "help": s.help} for s in commands.COMMANDS.values()]
    text = render("comment_help.md.j2", login="octocat", commands=rows)
    for spec in commands.COMMANDS.values():
        assert f"| `{spec.usage}` | {spec.help} |" in text
    assert not any(line.startswith("/") for line in text.splitlines())  # our own help never triggers us


def test_untrusted_text_cannot_escape_its_code_span():
    text = render("comment_refusal.md.j2", login="x", command="`@everyone` <b>hi</b>\n/rescore")
    assert "``" not in text.replace("`'@everyone' <b>hi</b> /rescore`", "") and "\n/rescore" not in text


def test_docs_list_every_command():
    from pathlib import Path

    deploy = (Path(__file__).resolve().parents[1] / "docs" / "deploy.md").read_text()
    for spec in commands.COMMANDS.values():
        assert f"`{spec.usage}`" in deploy and spec.help in deploy
