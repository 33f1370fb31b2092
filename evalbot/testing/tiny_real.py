"""A real repository for the pipeline's hostile-PR tests (tests/test_hostile_real.py).

It is this checkout's committed tree: the real engine, kernels, harness server and corpora. Two
things change, and both are committed on its main:
- The model is a tiny Llama with random weights (dim 64, two layers). It uses the bundled SmolLM2
  model's tokenizer, so the bot cuts the same windows of the same real text. The file lies outside the
  repository, where the bot's `[harness] model` setting points at it.
- The shipped drafter is replaced with a random one made for that model.
With these, a whole scoring (real engine, real sandboxed harness servers, every pairing measured)
takes seconds per round instead of the bundled model's minutes. A PR branch is then a real edit to
engine/ or kernels/, made the way a contributor would make it.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

import numpy as np

from evalbot.testing.fakerepo import _IDENTITY

TINY_SHAPE = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "head_dim": 16, "ffn_dim": 128}
DRAFTER_DIR = "engine/dspark/weights/smollm2-135m-instruct"

# A profile sized for the tiny model on two CPU cores: end-to-end generations of 32 tokens at a
# 96-token context (decode dominates), two processes per ref, one tiny guard.
TINY_REAL_PROFILE: dict[str, Any] = {
    "contexts": [96], "new_tokens": 32, "processes": 2, "accuracy_positions": 64, "accuracy_ctx": 160,
    "guards": [{"name": "llama-3.2-tiny-shape", "ctx": 96, "new_tokens": 8}], "budget_s": 240,
    "request_timeout_s": 60, "startup_timeout_s": 180,
}


def write_tiny_gguf(path: Path, seed: int = 7, logit_gain: float = 4.0) -> Path:
    """A random-weight Llama GGUF with the bundled model's tokenizer (all its tokenizer.* fields).

    `logit_gain` scales the output matrix, so the next-token distribution is peaked the way a
    trained model's is, not flat. Then a change to the logits (a KL attack) is visible, and greedy
    decoding is rarely at a near-tie."""
    import gguf

    from engine.model_files import bundled_model_path

    reader = gguf.GGUFReader(bundled_model_path())
    fields = {k: f for k, f in reader.fields.items() if k.startswith("tokenizer.")}
    vocab = len(fields["tokenizer.ggml.tokens"].contents())
    s = TINY_SHAPE
    rng = np.random.default_rng(seed)

    def r(*shape: int, std: float) -> np.ndarray:
        return (rng.standard_normal(shape) * std).astype(np.float32)

    d, q, kv, f = s["dim"], s["n_heads"] * s["head_dim"], s["n_kv_heads"] * s["head_dim"], s["ffn_dim"]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny-random-llama (tests)")
    writer.add_block_count(s["n_layers"])
    writer.add_context_length(2048)
    writer.add_embedding_length(d)
    writer.add_feed_forward_length(f)
    writer.add_head_count(s["n_heads"])
    writer.add_head_count_kv(s["n_kv_heads"])
    writer.add_rope_freq_base(10000.0)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(s["head_dim"])
    writer.add_key_length(s["head_dim"])
    writer.add_value_length(s["head_dim"])
    writer.add_vocab_size(vocab)
    for key, field in fields.items():
        _copy_field(writer, key, field)
    writer.add_tensor("token_embd.weight", r(vocab, d, std=1.0))
    # an output matrix of its own: a tied one maps a token's embedding back to the token itself, and
    # greedy decoding repeats one token forever (a stream every drafter guesses, lossy or not)
    writer.add_tensor("output.weight", r(vocab, d, std=logit_gain * d**-0.5))
    writer.add_tensor("output_norm.weight", np.ones(d, dtype=np.float32))
    for i in range(s["n_layers"]):
        p = f"blk.{i}."
        writer.add_tensor(p + "attn_norm.weight", np.ones(d, dtype=np.float32))
        writer.add_tensor(p + "ffn_norm.weight", np.ones(d, dtype=np.float32))
        # random Q/K need no llama.cpp permutation: any permutation of random rows is as random
        writer.add_tensor(p + "attn_q.weight", r(q, d, std=d**-0.5))
        writer.add_tensor(p + "attn_k.weight", r(kv, d, std=d**-0.5))
        writer.add_tensor(p + "attn_v.weight", r(kv, d, std=d**-0.5))
        writer.add_tensor(p + "attn_output.weight", r(d, q, std=q**-0.5))
        writer.add_tensor(p + "ffn_gate.weight", r(f, d, std=d**-0.5))
        writer.add_tensor(p + "ffn_up.weight", r(f, d, std=d**-0.5))
        writer.add_tensor(p + "ffn_down.weight", r(d, f, std=f**-0.5))
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


def _copy_field(writer, key: str, field) -> None:
    import gguf

    t = gguf.GGUFValueType
    kind = field.types[0]
    value = field.contents()
    if kind == t.ARRAY:
        writer.add_array(key, value)
    elif kind == t.STRING:
        writer.add_string(key, value)
    elif kind == t.BOOL:
        writer.add_bool(key, bool(value))
    elif kind in (t.FLOAT32, t.FLOAT64):
        writer.add_float32(key, float(value))
    else:
        writer.add_uint32(key, int(value))


def write_tiny_drafter(root: Path, model: Path) -> None:
    """A random drafter for the tiny model, where the shipped one lives (so main's engine loads it)."""
    import dataclasses

    from engine.dspark import random_drafter
    from engine.dspark.drafter import save_drafter_files
    from engine.generate import Engine

    engine = Engine(str(model))
    files = random_drafter(engine, seed=3, target_layers=(0, 1))
    config = dataclasses.replace(files.config, target_sha256=engine.loaded.sha256)
    out = root / DRAFTER_DIR
    shutil.rmtree(out, ignore_errors=True)
    save_drafter_files(out, config, {k: v.contiguous() for k, v in files.weights.items()})


def git(repo: Path, *args: str) -> str:
    import os

    return subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, text=True,
                          env=dict(os.environ, **_IDENTITY)).stdout.strip()


def make_tiny_real_repo(source: Path, dest: Path, model: Path) -> Path:
    """Clone `source`'s committed HEAD into `dest` (branch main, no remote), write the tiny model at
    `model` and commit its drafter on main."""
    from evalbot.demo import clone_head

    dest.parent.mkdir(parents=True, exist_ok=True)
    clone_head(source, dest)
    write_tiny_gguf(model)
    write_tiny_drafter(dest, model)
    git(dest, "add", "-A")
    git(dest, "commit", "-q", "-m", "tests: a tiny random model's drafter")
    return dest


def edit_branch(repo: Path, name: str, edits: list[tuple[str, str, str]] = (), *, start: str = "main",
                files: dict[str, str] | None = None) -> str:
    """Branch `name` from `start` with real source edits, each (path, old, new) with `old` found exactly
    once (an edit that no longer matches the engine fails loudly instead of testing nothing); `files`
    are written whole. Returns the commit; main stays checked out."""
    git(repo, "checkout", "-q", "-b", name, start)
    try:
        for rel, old, new in edits:
            path = repo / rel
            text = path.read_text()
            if text.count(old) != 1:
                raise AssertionError(f"{rel}: the edit's anchor occurs {text.count(old)} times, not once: {old!r}")
            path.write_text(text.replace(old, new))
        for rel, text in (files or {}).items():
            (repo / rel).parent.mkdir(parents=True, exist_ok=True)
            (repo / rel).write_text(text)
        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", f"{name}: change")
        return git(repo, "rev-parse", "HEAD")
    finally:
        git(repo, "checkout", "-q", "main")
