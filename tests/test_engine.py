"""The engine on the bundled model (CPU, fp32): parity with HF transformers on the same weights,
sensible continuations, sampling, and one-line errors for bad input."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from engine.errors import ContextOverflowError, EngineError
from engine.sampling import SamplingParams, probabilities
from harness.prompts import load_text

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def engine(bundled):
    from engine.generate import Engine

    return Engine(loaded=bundled, device="cpu")


@pytest.mark.slow
def test_logits_and_greedy_continuation_match_hf_transformers(engine, bundled):
    from engine.hf_compat import to_hf_model

    hf = to_hf_model(bundled.config, bundled.weights)
    ids = engine.tokenizer.encode(load_text("prose"))[2000:2200]
    with torch.no_grad():
        want = hf(torch.tensor([ids])).logits[0]
        got, _ = engine.model.forward_full(torch.tensor([ids]), None, logits="all")
    assert (got[0] - want).abs().max().item() <= 1e-3
    with torch.no_grad():
        hf_cont = hf.generate(torch.tensor([ids]), max_new_tokens=64, min_new_tokens=64, do_sample=False)[0, len(ids):].tolist()
    assert engine.generate(ids, 64, stop_at_eos=False).tokens == hf_cont  # through the decode step, not forward_full


def test_greedy_decode_runs_several_steps_per_launch(engine):
    """Greedy AR decode runs generate.AR_LAUNCHES steps per launch (each with its device-side commit): any
    length's tokens are the prefix of a longer decode's, whatever launches make it up; several steps in one
    launch without the commit between them are refused."""
    ids = engine.tokenizer.encode("def fibonacci(n):")
    full = engine.generate(ids, 40, stop_at_eos=False).tokens
    for n in (1, 2, 7, 21):  # after the prefill's token, launches of: none; 1; 4 + 2; 16 + 4
        assert engine.generate(ids, n, stop_at_eos=False).tokens == full[:n]
    s = engine.session(len(ids), 8)
    with pytest.raises(ValueError, match="commit"):
        s.step(1, commit=False, times=2)


def test_code_prompt_continues_as_code(engine):
    tok = engine.tokenizer
    out = engine.generate(tok.encode("def fibonacci(n):"), 48)
    assert "return" in tok.decode(out.tokens)


def test_prose_prompt_continues_in_english(engine):
    tok = engine.tokenizer
    prompt = "The history of the printing press begins in the fifteenth century, when"
    text = tok.decode(engine.generate(tok.encode(prompt), 40).tokens)
    words = [w.strip(".,;:!?\"'()").lower() for w in text.split()]
    common = {"the", "a", "of", "and", "to", "in", "was", "is", "that", "it", "for", "as", "on", "with", "by", "which", "were", "his"}
    assert len(words) >= 15 and sum(w in common for w in words) >= 4, text


def test_chat_template_answers(engine):
    tok = engine.tokenizer
    prompt = tok.apply_chat_template([{"role": "user", "content": "What is the capital of France?"}])
    out = engine.generate(tok.encode(prompt), 24)
    assert "Paris" in tok.decode(out.tokens)
    assert out.stop_reason == "eos" and out.tokens[-1] in engine.config.eos_ids


def test_sampling_is_seeded_and_follows_top_k(engine):
    ids = engine.tokenizer.encode("Once upon a time")
    p = SamplingParams(temperature=0.9, top_k=20, top_p=0.95, seed=11)
    a = engine.generate(ids, 12, p, stop_at_eos=False)
    b = engine.generate(ids, 12, p, stop_at_eos=False)
    c = engine.generate(ids, 12, SamplingParams(temperature=0.9, top_k=20, top_p=0.95, seed=12), stop_at_eos=False)
    assert a.tokens == b.tokens and a.tokens != c.tokens


def test_probabilities_apply_top_k_and_top_p():
    logits = torch.tensor([3.0, 2.0, 1.0, 0.0, -1.0])
    p = probabilities(logits, SamplingParams(temperature=1.0, top_k=2))
    assert (p[2:] == 0).all() and torch.isclose(p.sum(), torch.tensor(1.0))
    p = probabilities(logits, SamplingParams(temperature=1.0, top_p=0.5))
    assert p[0] == 1.0  # the first token alone already holds more than half the mass
    with pytest.raises(ValueError):
        SamplingParams(top_p=0.0)


def test_request_errors(engine):
    with pytest.raises(EngineError, match="empty prompt"):
        engine.generate([], 4)
    with pytest.raises(ContextOverflowError, match="context limit of 8192"):
        engine.generate([1] * 8190, 10)
    with pytest.raises(EngineError, match="outside the vocabulary"):
        engine.generate([10**7], 2)


def _cli(*args: str, env_extra: dict | None = None):
    import os

    env = dict(os.environ, **(env_extra or {}))
    return subprocess.run([sys.executable, "-m", "engine", *args], cwd=ROOT, capture_output=True, text=True, env=env, timeout=300)


@pytest.mark.parametrize(
    "args,message",
    [
        (["generate", "--prompt", "hi", "--model", "/no/such/model.gguf"], "not found"),
        (["generate", "--prompt", "   "], "empty prompt"),
        (["generate", "--prompt", "hi", "--max-new-tokens", "9000"], "context limit"),
        (["bench", "--contexts", "1000000", "--device", "cpu"], "fewer than"),
        (["generate", "--prompt", "hi", "--device", "cuda:7"], None),
    ],
)
def test_cli_errors_are_one_line(args, message):
    if args[-1] == "cuda:7" and torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    p = _cli(*args)
    assert p.returncode != 0
    assert "Traceback" not in p.stderr
    err = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    assert len(err) == 1, p.stderr
    if message:
        assert message in err[0]


def test_cli_corrupt_and_unsupported_models(tmp_path, tiny_bpe):
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\x00" * 100)
    p = _cli("generate", "--prompt", "hi", "--model", str(bad))
    assert p.returncode != 0 and "Traceback" not in p.stderr and p.stderr.count("error:") == 1
    hf_dir = tmp_path / "phi"
    hf_dir.mkdir()
    (hf_dir / "config.json").write_text('{"model_type": "phi3", "architectures": ["Phi3ForCausalLM"]}')
    tiny_bpe.save(str(hf_dir / "tokenizer.json"))
    p = _cli("generate", "--prompt", "hi", "--model", str(hf_dir))
    assert p.returncode != 0 and "Traceback" not in p.stderr and "phi3" in p.stderr


@pytest.mark.slow
def test_cli_generate_prints_text_and_speed():
    p = _cli("generate", "--prompt", "def add(a, b):", "--max-new-tokens", "12", "--device", "cpu")
    assert p.returncode == 0, p.stderr
    assert p.stdout.strip()
    assert "decode" in p.stderr and "tok/s" in p.stderr
    p = _cli("generate", "--prompt", "def add(a, b):", "--max-new-tokens", "12", "--device", "cpu", "--dspark")
    assert p.returncode == 0, p.stderr
    assert "tau" in p.stderr
