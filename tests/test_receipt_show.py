"""`evalbot receipt show FILE`: the decoded statement, the verdict and its gates, every round and the raw
figures per cell, readable; bad input is one line, exit 2."""

from __future__ import annotations

import base64
import json
import subprocess
import sys

import pytest

from evalbot.cli import main
from evalbot.decide.outcome import ScoreOutcome
from evalbot.decide.verdict import decide
from evalbot.report import receipt
from evalbot.testing import builders as b

ROUNDS = [1.05, 1.07, 1.04]


def _outcome() -> ScoreOutcome:
    m = b.measurements(ROUNDS)
    return ScoreOutcome(
        repo="/r", base_ref="main", head_ref="pr-branch", base_sha="a" * 40, head_sha="b" * 40, harness_ref="main",
        harness_sha="a" * 40, harness_digest="c" * 64, profile="gpu", rounds=3, box="box-1", pr_number=7,
        verdict=decide(m, b.settings()), measurements=m, started_at="2026-01-01T00:00:00Z",
        finished_at="2026-01-01T00:10:00Z",
    )


@pytest.fixture
def receipt_file(tmp_path):
    priv, _ = receipt.generate_keypair(tmp_path / "bot.pem")
    key = receipt.load_private_key(priv)
    outcome = _outcome()
    envelope = receipt.make_envelope(receipt.build_statement(outcome, {"stats": {"confidence": 0.95}}), key)
    path = tmp_path / "r.intoto.json"
    path.write_bytes(receipt.envelope_bytes(envelope))
    return path, outcome, receipt.keyid_for(key.public_key())


def test_show_prints_statement_verdict_rounds_and_raw_figures(receipt_file, capsys):
    path, outcome, keyid = receipt_file
    assert main(["receipt", "show", str(path)]) == 0
    out = capsys.readouterr().out
    assert "/r PR #7" in out and f"by keyid {keyid}" in out and "not checked here" in out
    assert f"head       pr-branch {'b' * 40}" in out and f"base       main {'a' * 40}" in out
    assert "box-1, profile gpu" in out and "3 rounds: " in out and "window seed 12345" in out
    assert f"verdict      {outcome.verdict.status}" in out
    for gate in outcome.verdict.gates:
        assert gate.title in out
    for i, r in enumerate(ROUNDS, 1):  # every round, as a ratio and as a percentage
        assert f"round {i}    {r:.4f}  ({(r - 1) * 100:+.2f}%)" in out
    cell = outcome.measurements.cells[0]
    header = next(line for line in out.splitlines() if line.strip().startswith("cell "))
    assert "main_dspark_tps" in header and "pr_dspark_tps" in header and "main_tau" in header
    row = next(line for line in out.splitlines() if line.strip().startswith(f"{cell.corpus}@{cell.ctx}"))
    assert f"{cell.main_dspark_tps:.6g}" in row and f"{cell.pr_dspark_tps:.6g}" in row
    assert "{" not in out  # readable text, not a JSON dump


def test_an_unsigned_receipt_says_so(tmp_path, capsys):
    envelope = receipt.make_envelope(receipt.build_statement(_outcome(), {}), None)
    path = tmp_path / "u.intoto.json"
    path.write_bytes(receipt.envelope_bytes(envelope))
    assert main(["receipt", "show", str(path)]) == 0
    assert "signed     no (collected, not signed)" in capsys.readouterr().out


def _payload(doc) -> str:
    return base64.b64encode(json.dumps(doc).encode()).decode()


@pytest.mark.parametrize(
    "content, message",
    [
        (None, "cannot read receipt"),
        (b"\xff\xfe not json", "not valid JSON"),
        (b"[1, 2]", "not a DSSE envelope"),
        (json.dumps({"payload": "!!!", "payloadType": receipt.PAYLOAD_TYPE, "signatures": []}).encode(), "not base64"),
        (json.dumps({"payload": _payload({"_type": "x"}), "payloadType": receipt.PAYLOAD_TYPE}).encode(), "not an in-toto"),
        (json.dumps({"payload": "", "payloadType": "text/plain", "signatures": []}).encode(), "unexpected payloadType"),
    ],
)
def test_bad_input_is_one_line_exit_2(tmp_path, content, message):
    path = tmp_path / "r.json"
    if content is not None:
        path.write_bytes(content)
    done = subprocess.run([sys.executable, "-m", "evalbot", "receipt", "show", str(path)], capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 2 and message in done.stderr, done.stderr
    assert len(done.stderr.strip().splitlines()) == 1 and "Traceback" not in done.stderr


@pytest.mark.parametrize("calibrated", [True, False])
def test_show_puts_every_field_on_its_own_line_and_names_a_calibrated_floor(tmp_path, capsys, calibrated):
    """The harness and merge lines, and the method and noise lines, once ran together on one line, and a
    calibrated floor read "default floor, not calibrated" (the floor says `source`, not `calibrated`)."""
    outcome = _outcome()
    m = b.measurements(ROUNDS, noise_floor=b.noise(0.003, calibrated=calibrated))
    outcome = outcome.model_copy(update={"measurements": m, "candidate_sha": "d" * 40, "candidate_tree": "e" * 40})
    path = tmp_path / "r.intoto.json"
    path.write_bytes(receipt.envelope_bytes(receipt.make_envelope(receipt.build_statement(outcome, {}), None)))
    assert main(["receipt", "show", str(path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    starts = [line.split()[0] for line in lines if line.startswith("  ") and line.split()]
    for key in ("harness", "measured", "method", "noise", "started"):
        assert key in starts, f"no line of its own starts with {key!r}"
    noise_line = next(line for line in lines if line.startswith("  noise"))
    assert ("A/A calibrated" in noise_line) == calibrated and ("not calibrated" in noise_line) != calibrated
