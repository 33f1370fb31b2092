"""The `evalbot` CLI: commands, --json, exit codes, one-line errors."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

from evalbot.cli import build_parser, main
from evalbot.history.store import SqliteHistory
from evalbot.testing import fake_config_toml, make_fake_repo

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def repo(tmp_path, monkeypatch):
    r = make_fake_repo(tmp_path / "repo")
    r.branch("fast", knobs={"dspark_speed": 2.5})
    monkeypatch.setenv("EVALBOT_BOX", "cli-box")
    config = tmp_path / "evalbot.toml"
    config.write_text(fake_config_toml())
    monkeypatch.setenv("EVALBOT_CONFIG", str(config))
    monkeypatch.delenv("EVALBOT_SIGNING_KEY", raising=False)
    return r


def run(capsys, *argv):
    code = main(list(argv))
    out, err = capsys.readouterr()
    return code, out, err


def test_score_json(repo, capsys):
    code, out, err = run(capsys, "score", "--repo", str(repo.path), "--no-calibrate", "--base", "main", "--head", "fast", "--json")
    assert code == 0, err
    doc = json.loads(out)
    assert doc["tier"] == "XL" and doc["status"] == "scored"
    assert Path(doc["receipt"]).is_file() and doc["signed"] is False
    assert doc["head_sha"] == repo.sha("fast") and doc["rounds"] >= 2 and doc["candidate_sha"]
    assert {g["gate"] for g in doc["gates"]} >= {"lossless", "accuracy", "ar", "integrity"}


def test_score_twice_reuses_the_measurement_unless_rescore(repo, capsys):
    argv = ["score", "--repo", str(repo.path), "--no-calibrate", "--base", "main", "--head", "fast", "--json", "--rounds", "4"]
    first = json.loads(run(capsys, *argv)[1])
    again = json.loads(run(capsys, *argv)[1])
    assert again["reused_from_head"] == first["head_sha"] and again["tree_scorings"] == 1 and again["tier"] == first["tier"]
    remeasured = json.loads(run(capsys, *argv, "--rescore")[1])
    assert remeasured["reused_from_head"] in ("", first["head_sha"]) and remeasured["tree_scorings"] == 2


def test_score_markdown_and_exit_codes(repo, capsys):
    code, out, _ = run(capsys, "score", "--repo", str(repo.path), "--no-calibrate", "--base", "main", "--head", "fast", "--rounds", "4")
    assert code == 0 and out.startswith("<!-- dspark-evalbot:scorecard v=2 head=")
    assert "receipt: " in out
    repo.branch("lossy", knobs={"lossy_every": 1})
    code, out, _ = run(capsys, "score", "--repo", str(repo.path), "--no-calibrate", "--base", "main", "--head", "lossy", "--json")
    assert code == 1 and json.loads(out)["tier"] == "REJECT"
    repo.branch("harness", files={"harness/serve.py": "# mine now\n"})
    code, out, _ = run(capsys, "score", "--repo", str(repo.path), "--no-calibrate", "--base", "main", "--head", "harness", "--json")
    doc = json.loads(out)
    assert code == 3 and doc["tier"] is None and doc["reason"] == "not evaluated: harness changed" and doc["receipt"]
    repo.commit("main: a broken engine", knobs={"crash": "start"})  # main's side fails: not the PR's fault
    repo.branch("docs", files={"NOTES.md": "x\n"})
    code, out, _ = run(capsys, "score", "--repo", str(repo.path), "--no-calibrate", "--base", "main", "--head", "docs", "--json")
    assert code == 4 and json.loads(out)["status"] == "infra_error"


@pytest.mark.parametrize(
    "argv, message",
    [
        (["score", "--base", "main", "--head", "nope"], "error: cannot resolve 'nope'"),
        (["score", "--base", "main"], "error: --base and --head are required"),
        (["score", "--base", "main", "--head", "fast", "--profile", "tpu"], "error: argument --profile: invalid choice"),
        (["score", "--base", "main", "--head", "fast", "--rounds", "0"], "error: --rounds must be at least 4"),
        (["score", "--pr", "7"], "error: no local PR #7"),
        (["frobnicate"], "error: argument COMMAND: invalid choice"),
        (["receipt", "verify", "missing.json", "--key", "missing.pub"], "error: cannot read public key"),
    ],
)
def test_user_errors_are_one_line(repo, capsys, argv, message):
    if argv[0] in ("score",):
        argv = [argv[0], "--repo", str(repo.path), *argv[1:]]
    try:
        code = main(argv)
    except SystemExit as e:  # argparse usage errors
        code = e.code
    out, err = capsys.readouterr()
    assert code == 2
    assert err.startswith(message), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err


def test_not_a_repository_is_an_error(tmp_path, capsys):
    code, _, err = run(capsys, "score", "--repo", str(tmp_path), "--base", "a", "--head", "b")
    assert code == 2 and err == f"error: {tmp_path} is not inside a git repository\n"


def test_keygen_and_receipt_verify(repo, tmp_path, capsys, monkeypatch):
    key = tmp_path / "bot.pem"
    code, out, _ = run(capsys, "keygen", "--out", str(key))
    assert code == 0 and "keyid" in out and key.exists() and Path(f"{key}.pub").exists()
    code, _, err = run(capsys, "keygen", "--out", str(key))
    assert code == 2 and "already exists" in err
    monkeypatch.setenv("EVALBOT_SIGNING_KEY", str(key))
    code, out, _ = run(capsys, "score", "--repo", str(repo.path), "--no-calibrate", "--base", "main", "--head", "fast", "--json")
    doc = json.loads(out)
    assert doc["signed"] is True
    code, out, err = run(capsys, "receipt", "verify", doc["receipt"], "--key", f"{key}.pub")
    assert code == 0 and out.startswith("OK:") and "XL" in out
    tampered = tmp_path / "tampered.json"
    data = bytearray(Path(doc["receipt"]).read_bytes())
    data[len(data) // 2] ^= 0x01
    tampered.write_bytes(bytes(data))
    code, _, err = run(capsys, "receipt", "verify", str(tampered), "--key", f"{key}.pub")
    assert code == 2 and err.startswith("error: ") and len(err.strip().splitlines()) == 1
    other = tmp_path / "other.pem"
    run(capsys, "keygen", "--out", str(other))
    code, _, err = run(capsys, "receipt", "verify", doc["receipt"], "--key", f"{other}.pub")
    assert code == 2 and "no signature by this key" in err
    code, out, _ = run(capsys, "receipt", "verify", doc["receipt"], "--key", f"{key}.pub", "--expect-head", doc["head_sha"])
    assert code == 0 and out.startswith("OK:")
    code, _, err = run(capsys, "receipt", "verify", doc["receipt"], "--key", f"{key}.pub", "--expect-head", "f" * 40)
    assert code == 2 and f"is signed, but for head {doc['head_sha']}, not {'f' * 40}" in err and len(err.strip().splitlines()) == 1
    code, _, err = run(capsys, "receipt", "verify", doc["receipt"], "--key", f"{key}.pub", "--expect-pr", "7")
    assert code == 2 and "is signed, but for PR None, not 7" in err


def test_local_pr_flow_and_status(repo, capsys):
    code, out, _ = run(capsys, "pr", "open", "--repo", str(repo.path), "--head", "fast", "--title", "Faster drafts")
    assert code == 0 and "opened local PR #1" in out
    code, out, _ = run(capsys, "pr", "list", "--repo", str(repo.path))
    assert code == 0 and "Faster drafts" in out
    code, out, err = run(capsys, "score", "--repo", str(repo.path), "--no-calibrate", "--pr", "1")
    assert code == 0, out + err
    assert "published to local PR #1: eval-dspark:XL, eval:XL" in out
    code, out, _ = run(capsys, "status", "--repo", str(repo.path))
    assert code == 0
    assert "eval-dspark:XL" in out and "completed/success" in out and "evalbot calibrate" in out
    # the scoring is in the repository's history, for `evalbot dashboard`
    (entry,) = SqliteHistory(repo.path / ".evalbot" / "history.sqlite3").entries(kind="score")
    assert (entry.pr_number, entry.tier, entry.box) == (1, "XL", "cli-box") and entry.rounds and entry.cells
    assert entry.receipt and entry.scorecard.startswith("<!--")


def test_calibrate_command(repo, capsys):
    code, out, err = run(capsys, "calibrate", "--repo", str(repo.path), "--rounds", "4")
    assert code == 0, err
    assert "Noise floor for box `cli-box`, profile `cpu`" in out
    code, out, _ = run(capsys, "status", "--repo", str(repo.path))
    assert "cli-box" in out
    (entry,) = SqliteHistory(repo.path / ".evalbot" / "history.sqlite3").entries(kind="calibration")
    assert entry.box == "cli-box" and entry.profile == "cpu" and set(entry.noise) >= {"dspark_decode", "ar_decode"}


def test_calibrate_help_states_the_current_rule():
    sub = next(a for a in build_parser()._actions if a.dest == "command")
    text = sub.choices["calibrate"].description
    assert "the very statistic its gate or tier reads" in text and "median over rounds" in text
    assert "largest PR/main deviation" not in text  # the single-run rule before 2026-11-30


def test_every_command_has_help():
    parser = build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert set(sub.choices) == {"score", "calibrate", "keygen", "receipt", "status", "pr", "serve", "worker", "demo",
                                 "dashboard"}
    for name, p in sub.choices.items():
        assert p.description, name
    help_text = parser.format_help()
    for name in sub.choices:
        assert name in help_text


def test_module_entry_point_prints_no_traceback(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "evalbot", "score", "--repo", str(tmp_path), "--base", "x", "--head", "y"],
        capture_output=True, text=True, cwd=ROOT,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr


@pytest.mark.parametrize("command, text", [("serve", "webhooks"), ("worker", "Score queued")])
def test_serve_and_worker_are_delegated(command, text, capsys):
    with pytest.raises(SystemExit) as e:
        main([command, "--help"])
    assert e.value.code == 0
    assert text in capsys.readouterr().out


@pytest.mark.parametrize("cuda, expected", [(True, "gpu"), (False, "cpu")])
def test_score_and_calibrate_default_to_the_gpu_profile_where_cuda_is(repo, capsys, monkeypatch, cuda, expected):
    import torch

    from evalbot import cli
    from evalbot.errors import EvalbotError

    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda)
    asked = []

    def stop(*args, **kwargs):
        asked.append(kwargs["profile"])
        raise EvalbotError("stopped before measuring")

    monkeypatch.setattr(cli.pipeline, "score_refs", stop)
    monkeypatch.setattr(cli.pipeline, "calibrate", stop)
    assert run(capsys, "score", "--repo", str(repo.path), "--no-calibrate", "--base", "main", "--head", "fast")[0] == 2
    assert run(capsys, "calibrate", "--repo", str(repo.path))[0] == 2
    assert run(capsys, "score", "--repo", str(repo.path), "--no-calibrate", "--base", "main", "--head", "fast", "--profile", "cpu")[0] == 2
    monkeypatch.setenv("EVALBOT_PROFILE", "cpu")  # the setting wins over the box's default
    assert run(capsys, "calibrate", "--repo", str(repo.path))[0] == 2
    assert asked == [expected, expected, "cpu", "cpu"]
