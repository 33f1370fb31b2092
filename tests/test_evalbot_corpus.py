"""Where the windows' texts come from: main's harness corpora (public), or private texts on the box."""

from __future__ import annotations

import subprocess

import pytest

from evalbot.errors import EvalbotError
from evalbot.measure import corpus


@pytest.fixture
def repo(tmp_path, monkeypatch):
    monkeypatch.setattr(corpus, "_encode", lambda model, text: tuple(ord(c) for c in text))  # no tokenizer needed
    root = tmp_path / "repo"
    (root / "harness" / "prompts").mkdir(parents=True)
    (root / "harness" / "prompts" / "code.txt").write_text("public code")
    (root / "harness" / "prompts" / "prose.txt").write_text("public prose")
    for argv in (["init", "-q"], ["add", "-A"], ["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "c"]):
        subprocess.run(["git", *argv], cwd=root, check=True)
    sha = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, check=True, capture_output=True, text=True).stdout.strip()
    return root, sha


def test_without_a_private_dir_the_harness_corpora_are_read_and_said_to_be_public(repo, tmp_path):
    root, sha = repo
    got = corpus.load_corpora(root, sha, ["code", "prose"], tmp_path / "model.gguf")
    assert got.ids == {"code": [ord(c) for c in "public code"], "prose": [ord(c) for c in "public prose"]}
    assert got.source == f"main's harness corpora (harness/prompts at {sha[:12]}, public)"


def test_private_corpora_replace_the_public_ones_and_are_named_by_digest_never_by_text(repo, tmp_path):
    root, sha = repo
    private = tmp_path / "private"
    private.mkdir()
    (private / "code.txt").write_text("secret code")
    (private / "prose.txt").write_text("secret prose")
    got = corpus.load_corpora(root, sha, ["code", "prose"], tmp_path / "model.gguf", private)
    assert got.ids["code"] == [ord(c) for c in "secret code"]
    assert got.source.startswith("this box's private corpora (code sha256 ") and "secret" not in got.source


def test_private_corpora_inside_the_repository_or_missing_are_one_line_errors(repo, tmp_path):
    root, sha = repo
    with pytest.raises(EvalbotError, match="is inside the repository"):
        corpus.load_corpora(root, sha, ["code"], tmp_path / "m", root / "harness" / "prompts")
    (tmp_path / "private").mkdir()
    with pytest.raises(EvalbotError, match=r"corpora_dir: cannot read .*code.txt \(FileNotFoundError\); the profile's corpora are code, prose"):
        corpus.load_corpora(root, sha, ["code", "prose"], tmp_path / "m", tmp_path / "private")


def test_a_scoring_on_private_corpora_says_so_on_the_scorecard(tmp_path):
    from evalbot import pipeline
    from evalbot.settings import Settings
    from evalbot.testing import FAKE_PROFILE, make_fake_repo
    from evalbot.measure.corpus import corpus_paths

    r = make_fake_repo(tmp_path / "repo")
    r.branch("fast", knobs={"dspark_speed": 2.5})
    private = tmp_path / "private"
    private.mkdir()
    profile = {**FAKE_PROFILE}
    for name, path in zip(profile.get("corpora", ["code", "prose"]), corpus_paths(profile.get("corpora", ["code", "prose"]))):
        (private / f"{name}.txt").write_text((r.path / path).read_text()[::-1])  # other text than the harness's
    s = Settings.model_validate({"box": "test-box", "stats": {"default_noise_floor": 0.10}, "corpora_dir": str(private),
                                 "thresholds": {"min_compare_positions": 32}, "profiles": {"cpu": profile}})
    out = pipeline.score_refs(r.path, "main", "fast", profile="cpu", settings=s, rounds=4, calibrate_first=False)
    assert out.measurements.corpora.startswith("this box's private corpora (")
    assert "exact-length windows of this box's private corpora (" in out.scorecard
