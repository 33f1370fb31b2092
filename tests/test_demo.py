"""`evalbot demo` and the example PRs in examples/prs/.

Fast: every example patch applies to the commit under test, every README declares its verdict, a
stale patch is a clear error, and the demo runs end to end for the harness-edit example (no
measurement). Slow: one real scoring on CPU, the lossy example, REJECTed by the losslessness gate.
The full demo (all five, ~30 minutes on two CPU cores) is what the README's quick start runs.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from evalbot import cli
from evalbot.settings import Settings
from evalbot.demo import clone_head, run_demo
from evalbot.examples import EXAMPLES_DIR, EXPECTATIONS, apply_example, is_measured, load_example, load_examples
from evalbot.errors import EvalbotError
from evalbot.forge.local import LocalForge
from evalbot.history.store import SqliteHistory

REPO = Path(__file__).resolve().parents[1]
EXAMPLES = sorted(p for p in (REPO / EXAMPLES_DIR).iterdir() if p.is_dir())


def _settings() -> Settings:
    return Settings(box="demo-test-box")


def _head() -> str:
    return subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()


# -- the examples --------------------------------------------------------------------------------


@pytest.mark.parametrize("path", EXAMPLES, ids=[p.name for p in EXAMPLES])
def test_example_patch_applies_to_main(path):
    example = load_example(path)
    assert example.expect in EXPECTATIONS and example.title
    apply_example(REPO, "HEAD", example, commit=False)  # raises, naming the example, if it went stale


def test_the_examples_cover_every_kind_of_verdict():
    examples = load_examples(REPO / EXAMPLES_DIR)
    assert [e.expect for e in examples] == ["tier", "REJECT", "REJECT", "not evaluated", "none"]
    assert [e.failing for e in examples if e.expect == "REJECT"] == [("lossless",), ("ar",)]
    # each patch touches what its README says it does
    touched = [{line.split(" b/")[-1] for line in e.patch.read_text().splitlines() if line.startswith("diff --git")}
               for e in examples]
    assert touched == [{"engine/dspark/drafter.py"}, {"kernels/greedy_commit.py"}, {"engine/generate.py"},
                       {"harness/prompts/prose.txt"}, {"docs/design.md"}]


def test_only_the_harness_edit_goes_unmeasured(tmp_path):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    assert clone_head(REPO, scratch) == _head()
    examples = load_examples(REPO / EXAMPLES_DIR)
    for ex in examples:
        apply_example(scratch, "main", ex)
    assert [is_measured(scratch, ex, _settings()) for ex in examples] == [True, True, True, False, True]


def _example(root: Path, slug: str, readme: str, patch: str) -> Path:
    d = root / slug
    d.mkdir(parents=True)
    (d / "README.md").write_text(readme)
    (d / "patch.diff").write_text(patch)
    return d


STALE_PATCH = """diff --git a/docs/design.md b/docs/design.md
--- a/docs/design.md
+++ b/docs/design.md
@@ -1,3 +1,3 @@
-# This line is not in docs/design.md
+# Neither is this one
 and these
 are not either
"""


def test_a_stale_patch_is_an_error_naming_the_example(tmp_path):
    examples = tmp_path / "prs"
    _example(examples, "01-stale", "---\ntitle: stale\nexpect: none\n---\n", STALE_PATCH)
    with pytest.raises(EvalbotError, match=r"example 01-stale: .*patch.diff no longer applies"):
        run_demo(REPO, profile="cpu", work_dir=tmp_path / "scratch", examples_dir=examples, settings=_settings(),
                 progress=False)
    assert not (tmp_path / "scratch").exists()  # checked before anything was cloned


@pytest.mark.parametrize(
    "readme, message",
    [
        ("# no front matter\n", "must start with a front matter block"),
        ("---\ntitle: t\nexpect: faster\n---\n", "expect is 'faster'"),
        ("---\ntitle: t\n", "not closed"),
        ("---\nexpect: none\n---\n", "needs `title:` and `expect:`"),
        ("---\ntitle: t\nexpect: none\ncolour: red\n---\n", "unknown front matter key 'colour'"),
    ],
)
def test_readme_front_matter_errors(tmp_path, readme, message):
    path = _example(tmp_path, "01-x", readme, STALE_PATCH)
    with pytest.raises(EvalbotError, match=message):
        load_example(path)


def test_only_picks_one_example_by_name_slug_or_number():
    for name in ("02-lossy-shortcut", "lossy-shortcut", "02"):
        assert [e.slug for e in load_examples(REPO / EXAMPLES_DIR, name)] == ["02-lossy-shortcut"]
    with pytest.raises(EvalbotError, match="no example 'nope' \\(known: 01-"):
        load_examples(REPO / EXAMPLES_DIR, "nope")


def test_cli_registers_demo(capsys):
    with pytest.raises(SystemExit) as exc:
        cli.main(["demo", "--help"])
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert "--only SLUG" in out and "--work-dir DIR" in out and "--keep" in out and "--profile" in out
    assert cli.main(["demo", "--repo", str(REPO), "--only", "nope"]) == cli.EXIT_USAGE
    assert "error: no example 'nope'" in capsys.readouterr().err
    assert cli.main(["demo", "--repo", str(REPO), "--profile", "cpu", "--rounds", "0"]) == cli.EXIT_USAGE
    assert "error: --rounds must be at least 4" in capsys.readouterr().err


# -- end to end ----------------------------------------------------------------------------------


def test_demo_harness_edit_end_to_end(tmp_path, capsys):
    scratch = tmp_path / "scratch"
    code = run_demo(REPO, profile="cpu", work_dir=scratch, only="04-harness-edit", settings=_settings(), progress=False)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "[1/1] 04-harness-edit: not evaluated ✓" in out
    assert "reason: not evaluated: harness changed" in out
    assert "| 04-harness-edit | not evaluated | not evaluated | ✓ |" in out
    assert "measures its own first" not in out  # nothing is measured, so no A/A calibration either
    assert f"evalbot status --repo {scratch}" in out

    # the scratch clone: main is the commit under test, plus one branch for the example
    git = lambda *a: subprocess.run(["git", "-C", str(scratch), *a], capture_output=True, text=True, check=True).stdout  # noqa: E731
    assert git("rev-parse", "main").strip() == _head()
    assert git("for-each-ref", "--format=%(refname:short)", "refs/heads/").split() == ["demo/04-harness-edit", "main"]
    assert git("remote").strip() == ""
    assert git("diff", "--name-only", "main", "demo/04-harness-edit").split() == ["harness/prompts/prose.txt"]

    # what the local forge holds: the PR, no labels, a check that blocks (action_required), the scorecard, the receipt
    forge = LocalForge(scratch)
    (pull,) = forge.list_pulls()
    assert (pull.head_ref, pull.base_ref, pull.state, pull.labels) == ("demo/04-harness-edit", "main", "open", [])
    assert pull.title == "Harness: a simpler prose prompt"
    (check,) = forge.checks(pull.head_sha)
    assert (check["status"], check["conclusion"]) == ("completed", "action_required")
    assert check["title"] == "DSpark eval: not evaluated (harness changed)"
    (comment,) = forge.comments(pull.number)
    assert "not evaluated: harness changed" in comment["body"] and "`harness/prompts/prose.txt`" in comment["body"]
    (rec,) = forge.receipts(pull.number)
    assert Path(rec["path"]).is_file() and json.loads(rec["body"])["payloadType"]

    # `evalbot status` reads the same state
    assert cli.main(["status", "--repo", str(scratch)]) == 0
    assert "demo/04-harness-edit" in capsys.readouterr().out

    # and the history `evalbot dashboard --repo <scratch>` serves: the verdict, its scorecard and receipt
    (entry,) = SqliteHistory(scratch / ".evalbot" / "history.sqlite3").entries()
    assert (entry.kind, entry.pr_number, entry.status, entry.head_sha) == ("score", pull.number, "not_evaluated", pull.head_sha)
    assert entry.scorecard == comment["body"] and entry.receipt == rec["body"] and entry.receipt_ref


def test_demo_removes_its_temporary_clone_unless_kept(tmp_path, monkeypatch, capsys):
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    assert run_demo(REPO, profile="cpu", only="04", settings=_settings(), progress=False) == 0
    assert "has been removed; pass --keep" in capsys.readouterr().out
    assert not list(tmp_path.glob("evalbot-demo-*"))
    assert run_demo(REPO, profile="cpu", only="04", keep=True, settings=_settings(), progress=False) == 0
    (kept,) = tmp_path.glob("evalbot-demo-*")
    assert f"evalbot status --repo {kept / 'repo'}" in capsys.readouterr().out


@pytest.mark.slow
def test_lossy_example_is_rejected_by_the_losslessness_gate(tmp_path, capsys):
    """One real scoring of the bundled model (~1-2 minutes on two cores): the real engine in harness
    servers; the shortcut that accepts every draft must be REJECTed as not lossless, by main's engine
    re-verifying the PR's streams. No A/A
    calibration first (that would double the time): the losslessness gate does not depend on noise."""
    scratch = tmp_path / "scratch"
    # The bundled model, with less to measure than the cpu profile (which `./dspark demo` itself uses):
    # one process per ref, shorter windows, a smaller accuracy dump. The wrong stream ends it after
    # its first round either way (decide.stopping.final).
    light = Settings.model_validate({
        "box": "demo-test-box", "thresholds": {"min_compare_positions": 64},
        "profiles": {"cpu": {"contexts": [128], "new_tokens": 16, "processes": 1, "accuracy_positions": 64,
                             "accuracy_ctx": 128, "guards": [{"name": "llama-3.2-tiny-shape", "ctx": 128, "new_tokens": 8}],
                             "budget_s": 240, "request_timeout_s": 300}}})
    code = run_demo(REPO, profile="cpu", work_dir=scratch, only="02-lossy-shortcut", settings=light,
                    calibrate=False, progress=False)
    out = capsys.readouterr().out
    assert code == 0, out
    assert "[1/1] 02-lossy-shortcut: eval-dspark:REJECT ✓" in out
    forge = LocalForge(scratch)
    (pull,) = forge.list_pulls()
    assert pull.labels == ["eval-dspark:REJECT", "eval:REJECT"]
    (check,) = forge.checks(pull.head_sha)
    assert check["conclusion"] == "failure" and "losslessness" in check["title"], check["title"]
    (comment,) = forge.comments(pull.number)
    lossless_row = next(line for line in comment["body"].splitlines() if line.startswith("| losslessness gate |"))
    assert "❌" in lossless_row and "not main's greedy continuation" in lossless_row
    assert len(forge.receipts(pull.number)) == 1
