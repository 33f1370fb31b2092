"""The harness: its output parses under the bot's strict contract, a lossy engine reads as lossy, prompts
are cut to exact lengths from real text, and a crash leaves no result line behind."""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from harness.prompts import PROMPT_NAMES, ShortCorpusError, exact_prompt, load_text, token_digest

ROOT = Path(__file__).resolve().parents[1]


def parse_lines(stdout: str, kind: str, nonce: str) -> list[dict]:
    """The result lines of a harness tool (tau_check, guard): JSON, one per line, each with the nonce."""
    lines = [json.loads(x) for x in stdout.splitlines() if x.strip()]
    assert lines and all(ln["kind"] == kind and ln["nonce"] == nonce for ln in lines), stdout[-2000:]
    return lines


def run_harness(module: str, *args: str, nonce: str = "n0nce", env_extra: dict | None = None, cwd: Path = ROOT):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSPARK_HARNESS")}
    env["PYTHONPATH"] = str(cwd) + (os.pathsep + env_extra.pop("PYTHONPATH") if env_extra and "PYTHONPATH" in env_extra else "")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", module, *args, "--nonce", nonce], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_tau_check_reports_lossless_cells():
    p = run_harness("harness.tau_check", "--profile", "cpu", "--contexts", "48", "--prompts", "code,prose", "--reps", "3", "--new-tokens", "6")
    assert p.returncode == 0, p.stderr[-2000:]
    lines = parse_lines(p.stdout, "tau_check", "n0nce")
    assert {(ln["prompt"], ln["ctx"]) for ln in lines} == {("code", 48), ("prose", 48)}
    for ln in lines:
        assert ln["lossless"] and ln["lossless_runs"] == ln["runs"] == 3
        assert len(ln["ar_tokens"]) == 6 and all(s == ln["ar_tokens"] for s in ln["dspark_tokens"])
        hist = ln["accept_hist"]
        assert ln["block_size"] == 7 and len(hist) == 8
        # every token after the prefill's first one was committed by a verify step in the histogram
        assert sum(k * c for k, c in enumerate(hist)) >= (6 - 1) * 3
        assert ln["tau"] == pytest.approx(sum(k * c for k, c in enumerate(hist)) / sum(hist))
        assert ln["prompt_sha256"] == token_digest(exact_prompt(_tokenizer(), ln["prompt"], 48))


@pytest.mark.slow
def test_guard_tool_measures_both_shapes():
    p = run_harness("harness.guard", "--profile", "cpu", "--reps", "2")
    assert p.returncode == 0, p.stderr[-2000:]
    guards = parse_lines(p.stdout, "guard", "n0nce")
    assert {g["guard"] for g in guards} == {"qwen3-tiny-shape", "llama-3.2-tiny-shape"}


def _tokenizer():
    from engine.loader import load_model

    return load_model(None).tokenizer


def test_prompts_are_real_text_cut_to_exact_lengths(bundled):
    tok = bundled.tokenizer
    for name in PROMPT_NAMES:
        text = load_text(name)
        assert len(text) > 40_000 and text.count("\n") > 500  # real documents, not a repeated snippet
        whole = tok.encode(text)  # exact_prompt tokenizes a prefix only: it must cut what the whole text does
        for n in (1, 128, 4096, 7936, 50_000):
            ids = exact_prompt(tok, name, n)
            assert len(ids) == n and ids == whole[:n]
    with pytest.raises(ShortCorpusError, match="fewer than"):
        exact_prompt(tok, "prose", 10**7)
    with pytest.raises(ShortCorpusError, match="no prompt corpus"):
        exact_prompt(tok, "gibberish", 10)


def test_a_short_corpus_is_an_error_line_not_a_result():
    p = run_harness("harness.tau_check", "--profile", "cpu", "--contexts", "2000000", "--prompts", "prose", "--reps", "1")
    assert p.returncode != 0
    (line,) = parse_lines(p.stdout, "error", "n0nce")
    assert "fewer than" in line["reason"]


@pytest.mark.slow
def test_a_crash_mid_run_exits_nonzero_with_no_result_line(tmp_path):
    """The engine dies on the second context, after the first one was measured: nothing of the first
    may be printed as if the run had succeeded."""
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""
        import engine.generate as g
        _orig = g.Engine.generate
        calls = {"n": 0}
        def generate(self, *a, **k):
            calls["n"] += 1
            if calls["n"] > 4:
                raise RuntimeError("simulated crash in the engine")
            return _orig(self, *a, **k)
        g.Engine.generate = generate
    """))
    p = run_harness("harness.tau_check", "--profile", "cpu", "--contexts", "40,41", "--prompts", "code", "--reps", "1",
                    "--new-tokens", "4", env_extra={"PYTHONPATH": str(tmp_path)})
    assert p.returncode != 0
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    assert [ln["kind"] for ln in lines] == ["error"]
    assert "simulated crash" in lines[0]["reason"]
    assert "ctx=40" in p.stderr  # the first context really was measured before the crash


@pytest.mark.slow
def test_nondeterministic_ar_is_an_error_not_a_result(tmp_path):
    """AR is timed over `reps` runs; a run that disagrees with the reference stream means the engine
    is not deterministic, and no losslessness can be claimed against it."""
    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""
        import engine.generate as g
        _orig = g.Engine.generate
        calls = {"ar": 0}
        def generate(self, *a, **k):
            out = _orig(self, *a, **k)
            if not k.get("dspark"):
                calls["ar"] += 1
                if calls["ar"] == 3:  # warm-up, reference, then this one
                    out.tokens[2] = (out.tokens[2] + 1) % 1000
            return out
        g.Engine.generate = generate
    """))
    p = run_harness("harness.tau_check", "--profile", "cpu", "--contexts", "40", "--prompts", "code", "--reps", "2",
                    "--new-tokens", "4", env_extra={"PYTHONPATH": str(tmp_path)})
    assert p.returncode != 0
    lines = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    assert [ln["kind"] for ln in lines] == ["error"]
    assert "AR decode is not deterministic" in lines[0]["reason"] and "at token 2" in lines[0]["reason"]


def test_manifest_pins_the_harness_itself():
    entries = [x.strip() for x in (ROOT / "harness" / "HARNESS_PATHS").read_text().splitlines() if x.strip() and not x.startswith("#")]
    assert "harness/" in entries  # code, prompts and the manifest itself


# -- the server (harness/serve.py, contract dspark-harness/2) ------------------------------------------


@pytest.fixture(scope="module")
def server():
    """The real server over the bundled model on CPU, talked to by the bot's own client."""
    from evalbot.measure.client import ServerClient

    env = {k: v for k, v in os.environ.items() if not k.startswith("DSPARK_HARNESS")}
    env["PYTHONPATH"] = str(ROOT)
    proc = subprocess.Popen([sys.executable, "-m", "harness.serve"], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    client = ServerClient(proc.stdin, proc.stdout, "test", "n0nce")
    try:
        client.hello(300)
        yield client
    finally:
        proc.kill()
        proc.wait()


def test_serve_greedy_dspark_equals_ar_and_main_verifies_it(server, bundled):
    info = server.info
    assert info["model_sha256"] == bundled.sha256 and info["block_size"] == 7 and info["device"] == "cpu"
    prompt = exact_prompt(bundled.tokenizer, "code", 64)
    ask = {"op": "generate", "model": "main", "prompt": prompt, "new_tokens": 12}
    ar = server.request({**ask, "mode": "ar"}, expect="generation", timeout=300).head
    ds = server.request({**ask, "mode": "dspark"}, expect="generation", timeout=300).head
    assert len(ar["tokens"]) == 12 and ds["tokens"] == ar["tokens"]
    assert sum(k * c for k, c in enumerate(ds["stats"]["accept_hist"])) >= 11
    v = server.request({"op": "verify", "prompt": prompt, "tokens": ar["tokens"]}, expect="verify", timeout=300).head
    assert v["argmax"] == ar["tokens"] and all(g == 0 for g in v["gap"])
    # a stream that is not main's greedy continuation is caught, at the first wrong token
    wrong = list(ar["tokens"])
    wrong[5] = (wrong[5] + 1) % info["vocab_size"]
    v = server.request({"op": "verify", "prompt": prompt, "tokens": wrong}, expect="verify", timeout=300).head
    assert v["argmax"][:5] == wrong[:5] and v["argmax"][5] != wrong[5] and v["gap"][5] > 0


def test_serve_logprobs_are_the_full_vocabulary_in_float32(server, bundled):
    import numpy as np

    ids = exact_prompt(bundled.tokenizer, "prose", 40)
    r = server.request({"op": "logprobs", "prompt": ids, "start": 32}, expect="logprobs", timeout=300,
                       max_payload=8 * 49152 * 4)
    head = r.head
    assert head["positions"] == 8 and head["vocab"] == server.info["vocab_size"] and head["dtype"] == "float32"
    lp = np.frombuffer(r.payload, dtype=np.float32).reshape(8, head["vocab"])
    assert np.allclose(np.exp(lp.astype(np.float64)).sum(-1), 1.0, atol=1e-3)


def test_serve_guards_and_errors_keep_it_serving(server):
    from evalbot.measure.client import ProtocolViolation

    g = server.request({"op": "load_guard", "name": "qwen3-tiny-shape", "max_seq_len": 128}, expect="guard", timeout=300).head
    assert g["vocab_size"] > 1
    out = server.request({"op": "generate", "mode": "ar", "model": "guard:qwen3-tiny-shape", "prompt": [1, 2, 3, 4],
                          "new_tokens": 3}, expect="generation", timeout=300).head
    assert len(out["tokens"]) == 3
    # main's process teacher-forces a guard stream with its copy of that guard (the bot checks the PR's)
    assert server.info["verify_models"] is True
    v = server.request({"op": "verify", "model": "guard:qwen3-tiny-shape", "prompt": [1, 2, 3, 4], "tokens": out["tokens"]},
                       expect="verify", timeout=300).head
    assert v["argmax"] == out["tokens"] and all(gap == 0 for gap in v["gap"])
    wrong = [(out["tokens"][0] + 1) % g["vocab_size"], *out["tokens"][1:]]
    v = server.request({"op": "verify", "model": "guard:qwen3-tiny-shape", "prompt": [1, 2, 3, 4], "tokens": wrong},
                       expect="verify", timeout=300).head
    assert v["argmax"][0] == out["tokens"][0] and v["gap"][0] > 0
    with pytest.raises(ProtocolViolation, match="unknown op 'frobnicate'"):
        server.request({"op": "frobnicate"}, expect="ready", timeout=60)
    with pytest.raises(ProtocolViolation, match="mode must be ar or dspark"):
        server.request({"op": "generate", "mode": "fast", "prompt": [1], "new_tokens": 1}, expect="generation", timeout=60)
    assert server.request({"op": "hello", "nonce": "n0nce"}, expect="ready", timeout=60).head["nonce"] == "n0nce"


def test_serve_keeps_engine_prints_off_the_protocol(tmp_path):
    """Whatever the engine prints (Python's print, a C library's write to fd 1) reaches stderr."""
    from evalbot.measure.client import ServerClient

    (tmp_path / "sitecustomize.py").write_text(textwrap.dedent("""
        import os, engine.generate as g
        _orig = g.Engine.generate
        def generate(self, *a, **k):
            print("progress: 50%")
            os.write(1, b"raw write to fd 1\\n")
            return _orig(self, *a, **k)
        g.Engine.generate = generate
    """))
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSPARK_HARNESS")}
    env["PYTHONPATH"] = f"{ROOT}{os.pathsep}{tmp_path}"
    proc = subprocess.Popen([sys.executable, "-m", "harness.serve"], cwd=ROOT, env=env, stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        client = ServerClient(proc.stdin, proc.stdout, "t", "k")
        client.hello(300)
        r = client.request({"op": "generate", "mode": "ar", "prompt": [1, 2, 3], "new_tokens": 2}, expect="generation",
                           timeout=300)
        assert len(r.head["tokens"]) == 2 and client.unread() == 0
    finally:
        proc.kill()
        _, err = proc.communicate()
    assert b"progress: 50%" in err and b"raw write to fd 1" in err
