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

from evalbot.decide.contract import parse_output
from harness.compare import compare
from harness.prompts import PROMPT_NAMES, ShortCorpusError, exact_prompt, load_text, token_digest

ROOT = Path(__file__).resolve().parents[1]


def run_harness(module: str, *args: str, nonce: str = "n0nce", env_extra: dict | None = None, cwd: Path = ROOT):
    env = {k: v for k, v in os.environ.items() if not k.startswith("DSPARK_HARNESS")}
    env["PYTHONPATH"] = str(cwd) + (os.pathsep + env_extra.pop("PYTHONPATH") if env_extra and "PYTHONPATH" in env_extra else "")
    env.update(env_extra or {})
    return subprocess.run([sys.executable, "-m", module, *args, "--nonce", nonce], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=600)


@pytest.mark.slow
def test_tau_check_output_parses_under_the_contract():
    p = run_harness("harness.tau_check", "--profile", "cpu", "--contexts", "48", "--prompts", "code,prose", "--reps", "3", "--new-tokens", "6")
    assert p.returncode == 0, p.stderr[-2000:]
    lines = parse_output(p.stdout, "tau_check", "n0nce")
    assert {(ln.prompt, ln.ctx) for ln in lines} == {("code", 48), ("prose", 48)}
    for ln in lines:
        assert ln.lossless and ln.lossless_runs == ln.runs == 3
        assert len(ln.ar_tokens) == 6 and all(s == ln.ar_tokens for s in ln.dspark_tokens)
        assert ln.block_size == 7 and len(ln.accept_hist) == 8
        # every token after the prefill's first one was committed by a verify step in the histogram
        assert sum(k * c for k, c in enumerate(ln.accept_hist)) >= (6 - 1) * 3
        assert ln.tau == pytest.approx(sum(k * c for k, c in enumerate(ln.accept_hist)) / sum(ln.accept_hist))
        assert math.isclose(ln.ar_tps, 6 / ln.ar_decode_s, rel_tol=1e-6)
        assert ln.prompt_sha256 == token_digest(exact_prompt(_tokenizer(), ln.prompt, 48))


@pytest.mark.slow
def test_guard_and_score_outputs_parse():
    p = run_harness("harness.guard", "--profile", "cpu", "--reps", "2")
    assert p.returncode == 0, p.stderr[-2000:]
    guards = parse_output(p.stdout, "guard", "n0nce")
    assert {g.guard for g in guards} == {"qwen3-tiny-shape", "llama-3.2-tiny-shape"}
    assert all(g.reps == 2 and len(g.decode_tps_reps) == 2 for g in guards)


@pytest.mark.slow
def test_score_and_compare(tmp_path):
    out = tmp_path / "main.json"
    p = run_harness("harness.score", "--profile", "cpu", "--out", str(out))
    assert p.returncode == 0, p.stderr[-2000:]
    (line,) = parse_output(p.stdout, "score", "n0nce")
    assert line.positions >= 512
    dump = json.loads(out.read_text())
    assert len(dump["tokens"]) == len(dump["topk_ids"]) == line.positions and len(dump["topk_ids"][0]) == 128
    same = compare(dump, dump)
    assert same["top1"] == 1.0 and same["kl"] == pytest.approx(0.0, abs=1e-9) and same["ppl_main"] == same["ppl_pr"]
    c = run_harness("harness.compare", str(out), str(out))
    (cl,) = parse_output(c.stdout, "compare", "n0nce")
    assert cl.top1 == 1.0 and cl.positions == line.positions


def test_compare_math():
    def dump(ids, lps, tok_lp):
        return {"schema": "dspark-score/1", "tokens": [5, 6], "topk_ids": ids, "topk_logprobs": lps, "token_logprob": tok_lp}

    main = dump([[1, 2], [3, 4]], [[math.log(0.75), math.log(0.25)], [math.log(0.5), math.log(0.5)]], [math.log(0.5)] * 2)
    pr = dump([[2, 1], [3, 9]], [[math.log(0.6), math.log(0.4)], [math.log(1.0), -50.0]], [math.log(0.25)] * 2)
    r = compare(main, pr)
    assert r["top1"] == 0.5  # position 0 disagrees (1 vs 2), position 1 agrees (3)
    kl0 = 0.75 * math.log(0.75 / 0.4) + 0.25 * math.log(0.25 / 0.6)
    # position 1: union {3, 4, 9}; main lacks 9 (-20), PR lacks 4 (-20) and its 9 is floored to -20 too
    la = [math.log(0.5), math.log(0.5), -20.0]
    lb = [0.0, -20.0, -20.0]
    za = math.log(sum(math.exp(x) for x in la))
    zb = math.log(sum(math.exp(x) for x in lb))
    kl1 = sum(math.exp(x - za) * ((x - za) - (y - zb)) for x, y in zip(la, lb))
    assert r["kl"] == pytest.approx((kl0 + kl1) / 2, rel=1e-9)
    assert r["ppl_main"] == pytest.approx(2.0) and r["ppl_pr"] == pytest.approx(4.0)
    with pytest.raises(ValueError, match="different texts"):
        compare(main, dict(pr, tokens=[7, 8]))


def _tokenizer():
    from engine.loader import load_model

    return load_model(None).tokenizer


def test_prompts_are_real_text_cut_to_exact_lengths(bundled):
    tok = bundled.tokenizer
    for name in PROMPT_NAMES:
        text = load_text(name)
        assert len(text) > 40_000 and text.count("\n") > 500  # real documents, not a repeated snippet
        for n in (1, 128, 4096, 7936):
            ids = exact_prompt(tok, name, n)
            assert len(ids) == n and ids == tok.encode(text)[:n]
    with pytest.raises(ShortCorpusError, match="fewer than"):
        exact_prompt(tok, "prose", 10**7)
    with pytest.raises(ShortCorpusError, match="no prompt corpus"):
        exact_prompt(tok, "gibberish", 10)


def test_a_short_corpus_is_an_error_line_not_a_result():
    p = run_harness("harness.tau_check", "--profile", "cpu", "--contexts", "2000000", "--prompts", "prose", "--reps", "1")
    assert p.returncode != 0
    (line,) = [json.loads(x) for x in p.stdout.splitlines() if x.strip()]
    assert line["kind"] == "error" and "fewer than" in line["reason"] and line["nonce"] == "n0nce"


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


@pytest.mark.slow
def test_a_lossy_engine_reads_as_lossy(bundled, monkeypatch):
    """Commit every draft without checking it (the shortcut a fast-but-wrong PR takes): the harness
    must report lossless = false, and the run is still a full result (not an error)."""
    import argparse

    import engine.model as model_mod
    import kernels.greedy_commit as gc
    from harness import tau_check

    def accept_everything(logits, tokens, positions, kv_end, out_tokens, state, m):
        t = logits[:m].float().argmax(-1)
        n = int(state[0])
        committed = list(tokens[1:m].tolist()) + [int(t[m - 1])]  # the drafts, unverified, plus a bonus
        out_tokens[n : n + m] = __import__("torch").tensor(committed, dtype=out_tokens.dtype)
        base = int(state[1]) + m
        tokens[0] = committed[-1]
        positions.copy_(__import__("torch").arange(base, base + positions.shape[0], dtype=positions.dtype))
        kv_end.copy_(positions + 1)
        state[4] = state[1]
        state[0], state[1], state[2] = n + m, base, m - 1
        state[3] += 1

    monkeypatch.setattr(gc, "greedy_commit_reference", accept_everything)
    monkeypatch.setattr(model_mod, "greedy_commit_reference", accept_everything)
    monkeypatch.setattr("engine.loader.load_model", lambda path=None: bundled)
    monkeypatch.setattr("engine.generate.load_model", lambda path=None: bundled)
    args = argparse.Namespace(profile="cpu", contexts="96", prompts="code", reps=3, new_tokens=12, model=None, drafter=None, nonce="x")
    (raw,) = tau_check.measure(args)
    line = json.loads(raw)
    assert line["lossless"] is False and line["lossless_runs"] < 3
    assert any(s != line["ar_tokens"] for s in line["dspark_tokens"])


def test_manifest_pins_the_harness_itself():
    entries = [x.strip() for x in (ROOT / "harness" / "HARNESS_PATHS").read_text().splitlines() if x.strip() and not x.startswith("#")]
    assert "harness/" in entries  # code, prompts and the manifest itself
