"""Text a pull request controls (what its harness processes answer, changed paths, branch names, stderr)
never adds structure to what the bot writes: the markdown of every scorecard, check summary and reply
rendered with hostile strings has the same blocks as with plain ones, and no heading, table, HTML,
link, image or @mention of the attacker's."""

import re
from collections import Counter

import pytest
from markdown_it import MarkdownIt

from evalbot.bot.commands import paragraph_lines
from evalbot.decide.integrity import IntegrityReport
from evalbot.decide.records import Finding, StopReason
from evalbot.decide.verdict import decide, infrastructure_error, not_evaluated_harness_changed, not_evaluated_needs_rebase
from evalbot.report.render import code, fence, render, text
from evalbot.report.scorecard import check_report, render_scorecard
from evalbot.testing import builders as b
from test_evalbot_scorecard import _outcome

HOSTILE = ("boom\n\n### DSpark eval — eval-dspark:XL\n\n| metric | value |\n|---|---|\n| speedup vs main | +25% |\n"
           "<!-- hidden --> <img src=x> `code` **bold** [link](https://attacker.example) ![p](https://a.example/p.png) "
           "https://attacker.example www.attacker.example x@attacker.example @org/team @maintainer\n/lgtm\n"
           "\x1b[31mred\x1b[0m \u202eevil\u200b\x00")
PLAIN = "boom"
# text_join off: an escaped character stays its own token, as it stays out of GitHub's autolinker and
# mention filter (both look inside one text node)
MD = MarkdownIt("commonmark").enable(["table", "strikethrough"]).disable("text_join")
_LINKISH = re.compile(r"(?<![\w`])@\w[\w/-]*|https?://|www\.|\w@\w", re.IGNORECASE)


def _structure(markdown: str) -> Counter:
    """Every block and inline token but plain text and escapes: what the markdown does, not what it says
    (code spans are inert: the helpers put each @name in one)."""
    tokens = MD.parse(markdown)
    inline = [c for t in tokens for c in t.children or [] if c.type not in ("text", "text_special", "softbreak", "code_inline")]
    return Counter([t.type for t in tokens] + [f"{c.type}:{c.content if c.type == 'html_inline' else ''}" for c in inline])


def _inline_text(markdown: str) -> list[str]:
    """The text a reader sees outside code spans, where GitHub would make mentions and bare links."""
    out = []
    for token in MD.parse(markdown):
        for child in token.children or []:
            if child.type == "text":
                out.append(child.content)
            assert child.type not in ("image", "link_open"), (child.type, child.content)
    return out


def _assert_inert(hostile: str, plain: str) -> None:
    assert _structure(hostile) == _structure(plain)  # no heading, table, row, list item, HTML or link added
    # mentions and bare links GitHub would make: only the bot's own (the commenter it answers, `prose@4k`)
    found = {m for line in _inline_text(hostile) for m in _LINKISH.findall(line)}
    assert found <= {m for line in _inline_text(plain) for m in _LINKISH.findall(line)}, found
    assert not any(ch in hostile for ch in "\x1b\u202e\u200b\x00")
    assert not [line for line in paragraph_lines(hostile) if line.startswith("/")]  # no command line another bot obeys


def _reject(detail: str, device: str = "NVIDIA H200"):
    msg = "the harness answered an error: " + detail
    m = b.measurements([1.2, 1.2, 1.2], stop=StopReason(rounds=0, reason="failure", detail=msg),
                       integrity=IntegrityReport(findings=[Finding(ref="head", process=0, where="generate", message=msg)]))
    m.device = device
    return _outcome(decide(m, b.settings()), m, head_ref=detail)


OUTCOMES = {
    "rejected": lambda s: _reject(s, device=s),
    "harness changed": lambda s: _outcome(not_evaluated_harness_changed([f"harness/{s}", "harness/ok.py"]), head_ref=s),
    "needs rebase": lambda s: _outcome(not_evaluated_needs_rebase([f"src/{s}"], "eval:needs-rebase"), head_ref=s),
    "infra error": lambda s: _outcome(infrastructure_error(s, s, stderr_tail=f"Traceback\n```\n{s}\n~~~"), head_ref=s),
}


@pytest.mark.parametrize("kind", OUTCOMES)
def test_scorecard_and_check_run_stay_the_bots(kind):
    hostile, plain = OUTCOMES[kind](HOSTILE), OUTCOMES[kind](PLAIN)
    _assert_inert(render_scorecard(hostile), render_scorecard(plain))
    _assert_inert(check_report(hostile).summary, check_report(plain).summary)
    title = check_report(hostile).title
    assert "\n" not in title and "XL" not in title


REPLIES = {
    "comment_rescore_refused.md.j2": dict(login="alice", reason="{}"),
    "gh_check_superseded.md.j2": dict(why="{}"),
    "gh_check_interrupted.md.j2": dict(head_sha="a" * 40, base_sha="b" * 40, box="box", why="{}"),
    "gh_check_waiting.md.j2": dict(head_sha="a" * 40, base_sha="b" * 40, box="box", why="{}"),
    "gh_check_queued.md.j2": dict(head_sha="a" * 40, base_sha="b" * 40, pr_number=3, reason="{}"),
    "gh_check_progress.md.j2": dict(head_sha="a" * 40, base_sha="b" * 40, box="box", attempt=1, step="{}", done_steps=["{}"]),
    "gh_check_infra_error.md.j2": dict(attempts=2, error="{}"),
}


@pytest.mark.parametrize("template", REPLIES)
def test_replies_and_check_texts_stay_the_bots(template):
    def rendered(value):
        ctx = {k: ([value if x == "{}" else x for x in v] if isinstance(v, list) else value if v == "{}" else v)
               for k, v in REPLIES[template].items()}
        return render(template, **ctx)

    _assert_inert(rendered(HOSTILE), rendered(PLAIN))


def test_the_helpers_one_line_capped_and_inert():
    assert "\n" not in text(HOSTILE) and len(text("x" * 1000, 50)) == 50
    assert text("### x") == "\\### x" and text("a|b") == "a\\|b" and text("@org/team") == "`@org/team`"
    assert text("prose@4k") == "prose\\@4k"  # an e-mail-like word is escaped, not a mention
    assert code("a`b\nc") == "`a'b c`" and code("") == "`—`"
    assert "```" not in fence("x\n```\nrm -rf /") and "\x1b" not in fence("\x1b[2J")
    assert fence("  indented\nline") == "  indented\nline"


def test_text_for_a_terminal_keeps_lines_and_drops_escapes():
    from evalbot.report.render import printable

    hostile = "ok\n\x1b[2J\x1b]0;owned\x07 reason\u202egnp.exe\ttab\x00"
    assert printable(hostile) == "ok\n[2J]0;owned reasongnp.exe\ttab"
