"""The drafter trainer's data path on a tiny random target: long prompts are cut to the drafter's
window without changing a token or a feature of what is kept, and the prose share is exact."""

from __future__ import annotations

import random
from pathlib import Path

import torch

from engine.dspark.train import generate_with_features, make_prompts
from engine.model import Transformer
from tests.test_model import random_weights, tiny_config


def _target() -> Transformer:
    c = tiny_config()
    return Transformer(c, random_weights(c), "cpu", torch.float32)


def test_keep_cuts_the_prompt_head_and_nothing_else():
    model = _target()
    g = torch.Generator().manual_seed(1)
    prompts = torch.randint(0, model.config.vocab_size, (3, 40), generator=g).tolist()
    full_t, full_f = generate_with_features(model, prompts, 6, (0, 1), batch=8)
    cut_t, cut_f = generate_with_features(model, prompts, 6, (0, 1), batch=8, keep=9)
    assert full_t.shape == (3, 46) and full_f.shape == (3, 45, 2 * model.config.dim)
    assert cut_t.shape == (3, 15) and cut_f.shape == (3, 14, 2 * model.config.dim)
    assert torch.equal(cut_t, full_t[:, 31:])
    assert torch.equal(cut_f, full_f[:, 31:])
    # a keep longer than the prompt keeps everything
    all_t, _ = generate_with_features(model, prompts, 6, (0, 1), batch=8, keep=100)
    assert torch.equal(all_t, full_t)


def test_prose_share_is_exact_per_batch():
    docs = {"code": [[1] * 50], "prose": [[2] * 50]}
    prompts = make_prompts(None, docs, 20, 10, 0.0, random.Random(0), prose_share=0.6)
    assert len(prompts) == 20
    assert sum(p[0] == 2 for p in prompts) == 12
    assert all(len(p) == 10 for p in prompts)
    only_code = make_prompts(None, {"code": [[1] * 50], "prose": []}, 5, 10, 0.0, random.Random(0), prose_share=0.6)
    assert all(p[0] == 1 for p in only_code)


def test_init_continues_a_drafter_and_its_card_says_which(bundled, tmp_path):
    """--init: the shipped drafter's configuration and weights are where training starts (its held-out
    figures measured first, on the same sets and anchors as the result's), and the card names it by
    digest and carries its own card. A wrong --init is a one-line error before anything loads."""
    import json

    import pytest

    from engine.dspark.drafter import load_drafter_files
    from engine.dspark.train import build_parser, train

    shipped = Path(__file__).resolve().parents[1] / "engine" / "dspark" / "weights" / "smollm2-135m-instruct"
    prose = tmp_path / "prose"
    prose.mkdir()
    for name in ("a.txt", "b.txt"):
        (prose / name).write_text("A paragraph of plain prose about rivers and the weather in spring. " * 60)
    extra = tmp_path / "site"  # --extra-code-dir: more code, held out on its own; tests and Django never drawn
    for i, where in enumerate(("pkg/a.py", "pkg/b.py", "pkg/c.py", "pkg/tests/d.py", "Django/e.py", "pkg/small.py")):
        (extra / where).parent.mkdir(parents=True, exist_ok=True)
        body = "".join(f"def f{i}_{j}(x, y):\n    return sorted(x)[y] + {j}\n\n" for j in range(200 if "small" not in where else 5))
        (extra / where).write_text(body)
    out = tmp_path / "drafter"
    args = build_parser().parse_args([
        "--out", str(out), "--init", str(shipped), "--data-seed", "7", "--prose-dir", str(prose), "--prompt-lens", "64",
        "--extra-code-dir", str(extra),
        "--gen-tokens", "8", "--gen-batch", "4", "--data-seqs", "8", "--eval-seqs", "4", "--batch", "2", "--anchors", "2",
        "--max-steps", "2", "--lr", "1e-4", "--total-budget", "300", "--device", "cpu"])
    card = train(args)
    before = load_drafter_files(shipped)
    after = load_drafter_files(out)
    assert after.config == before.config
    assert card["init"]["sha256"] == before.sha256 and card["init"]["card"]["training"]["steps"] > 1000
    assert card["init"]["eval_tau_teacher_forced"] >= 1.0 and card["eval_tau_teacher_forced"] >= 1.0
    assert json.loads((out / "training.json").read_text())["init"]["sha256"] == before.sha256
    assert card["data"]["extra_code_docs"] == 3 and card["data"]["held_out_docs"]["code-extra"] == 1
    assert "code-extra" in card["eval_tau_teacher_forced_by_kind"] and any(e["kind"] == "code-extra" for e in card["init"]["eval"])
    changed = [k for k in before.weights if not torch.equal(before.weights[k], after.weights[k])]
    assert changed and set(after.weights) == set(before.weights)
    with pytest.raises(SystemExit, match="^error: --init: .* is not a drafter directory"):
        train(build_parser().parse_args(["--out", str(tmp_path / "x"), "--init", str(tmp_path / "nowhere")]))
    with pytest.raises(SystemExit, match="^error: --extra-code-dir: .* is not a directory$"):
        train(build_parser().parse_args(["--out", str(tmp_path / "x"), "--extra-code-dir", str(tmp_path / "nowhere")]))
