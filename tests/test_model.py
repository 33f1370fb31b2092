"""The model on tiny random configs: the Triton step (interpreted on CPU) against the torch step and
against forward_full, and the batch invariance that makes DSpark lossless."""

from __future__ import annotations

import pytest
import torch

from engine.config import ModelConfig
from engine.model import STEP_ROWS, StepIO, Transformer

DEV = "cuda" if torch.cuda.is_available() else "cpu"


def tiny_config(arch: str = "llama", **kw) -> ModelConfig:
    base = dict(arch=arch, vocab_size=300, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32,
                ffn_dim=96, norm_eps=1e-5, rope_theta=10000.0, max_seq_len=256, tie_embeddings=True)
    if arch == "qwen2":
        base["qkv_bias"] = True
    if arch == "qwen3":
        base["qk_norm"] = True
        base["tie_embeddings"] = False
    base.update(kw)
    return ModelConfig(**base)


def random_weights(c: ModelConfig, seed: int = 0) -> dict[str, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    r = lambda *s, scale=0.08: torch.randn(*s, generator=g) * scale  # noqa: E731
    w = {"embed": r(c.vocab_size, c.dim, scale=1.0), "norm": 1 + r(c.dim, scale=0.1)}
    if not c.tie_embeddings:
        w["lm_head"] = r(c.vocab_size, c.dim)
    for i in range(c.n_layers):
        p = f"layers.{i}."
        w[p + "attn_norm"] = 1 + r(c.dim, scale=0.1)
        w[p + "ffn_norm"] = 1 + r(c.dim, scale=0.1)
        w[p + "wq"] = r(c.q_dim, c.dim)
        w[p + "wk"] = r(c.kv_dim, c.dim)
        w[p + "wv"] = r(c.kv_dim, c.dim)
        w[p + "wo"] = r(c.dim, c.q_dim)
        w[p + "w_gate"] = r(c.ffn_dim, c.dim)
        w[p + "w_up"] = r(c.ffn_dim, c.dim)
        w[p + "w_down"] = r(c.dim, c.ffn_dim)
        if c.qkv_bias:
            w[p + "bq"], w[p + "bk"], w[p + "bv"] = r(c.q_dim), r(c.kv_dim), r(c.kv_dim)
        if c.qk_norm:
            w[p + "q_norm"], w[p + "k_norm"] = 1 + r(c.head_dim, scale=0.1), 1 + r(c.head_dim, scale=0.1)
    return w


def run_steps(model: Transformer, tokens: list[int], prompt_len: int, rows_per_step: int, capacity: int = 96):
    """Prefill tokens[:prompt_len], then feed the rest in steps of `rows_per_step` rows.
    Returns the logits row of every fed token (float32, on CPU)."""
    cache = model.new_cache(capacity)
    model.forward_full(torch.tensor([tokens[:prompt_len]], device=model.device), cache)
    io = StepIO(model, capacity, capture_layers=(0,), split=64)
    out = []
    pos = prompt_len
    while pos < len(tokens):
        chunk = tokens[pos : pos + rows_per_step]
        io.set_rows(chunk, pos)
        model.step(io, len(chunk), cache)
        out.append(io.logits[: len(chunk)].cpu().clone())
        pos += len(chunk)
    return torch.cat(out)


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
def test_step_matches_forward_full(arch):
    c = tiny_config(arch)
    w = random_weights(c)
    tokens = torch.randint(0, c.vocab_size, (40,), generator=torch.Generator().manual_seed(1)).tolist()
    want, _ = Transformer(c, w, "cpu").forward_full(torch.tensor([tokens]), None, logits="all")
    for backend in ("torch", "triton"):
        model = Transformer(c, w, DEV, torch.float32, backend)
        got = run_steps(model, tokens, 20, 3)
        err = (got - want[0, 20:]).abs().max().item()
        assert err < 1e-4, (backend, err)


@pytest.mark.parametrize("backend", ["torch", "triton"])
def test_step_rows_are_batch_invariant(backend):
    """Logits of a token are bit-identical whether it is stepped alone (AR) or with others (verify)."""
    c = tiny_config("llama")
    model = Transformer(c, random_weights(c, 3), DEV, torch.float32, backend)
    # 10 prompt tokens, then 14 stepped: 1, 2 and 7 rows divide it, 4 rows end on a partial block
    tokens = torch.randint(0, c.vocab_size, (24,), generator=torch.Generator().manual_seed(2)).tolist()
    one = run_steps(model, tokens, 10, 1)
    for rows in (2, 4, 7):
        assert torch.equal(run_steps(model, tokens, 10, rows), one), rows



@pytest.mark.parametrize("arch", ["llama", "qwen3"])
def test_the_step_with_its_products_transposed(arch):
    """Every product of the step computed transposed (kernels.tuning.LaunchConfig.swap_ab: QKV's heads, gate/up's
    stacked rows, the o-proj, down-proj and LM head as 64-row tiles) in bf16: the step's logits as without it
    (within rounding), and rows fed three at a time give the bits they give one at a time (DSpark's losslessness)."""
    from kernels import tuning

    c = tiny_config(arch, ffn_dim=128)
    w = random_weights(c)
    tokens = torch.randint(0, c.vocab_size, (32,), generator=torch.Generator().manual_seed(3)).tolist()
    model = Transformer(c, w, DEV, torch.bfloat16, "triton")
    plain = run_steps(model, tokens, 20, 1)
    with tuning.override("qkv", block_n=0, swap_ab=True), tuning.override("swiglu", block_n=32, swap_ab=True), \
            tuning.override("linear", block_n=64, k_split=1, swap_ab=True):
        one = run_steps(model, tokens, 20, 1)
        three = run_steps(model, tokens, 20, 3)
    assert torch.equal(one, three)
    assert (one - plain).abs().max().item() < 2e-2 * plain.abs().max().item()


@pytest.mark.parametrize("arch", ["llama", "qwen2", "qwen3"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16] if DEV == "cuda" else [torch.float32])
def test_prefill_kernels_compute_what_the_torch_ops_compute(arch, dtype):
    """forward_full with its elementwise work fused (kernels/prefill.py, add_rmsnorm; the CUDA default)
    against the torch ops they replace: logits, captured residuals and the KV cache, for a batch of
    two prompts and then a continuation at start > 0. On CUDA without the per-head norm the same bits;
    with it (Qwen3), and interpreted on the CPU (whose torch path uses the norm's reference, and numpy's
    exp), the same to rounding."""
    c = tiny_config(arch)
    model = Transformer(c, random_weights(c, 6), DEV, dtype)
    tokens = torch.randint(0, c.vocab_size, (2, 40), generator=torch.Generator().manual_seed(7)).to(DEV)
    runs = []
    for fused in (False, True):
        model.prefill_kernels = fused
        cache = model.new_cache(64, batch=2)
        first, caps = model.forward_full(tokens[:, :30], cache, capture_layers=(0, 1), logits="all")
        more, _ = model.forward_full(tokens[:, 30:], cache, start=30, logits="all")
        runs.append([first, *caps, more, cache.k, cache.v])
    for want, got in zip(*runs):
        if c.qk_norm or DEV != "cuda":
            assert (got.float() - want.float()).abs().max().item() < (1e-4 if dtype == torch.float32 else 5e-2)
        else:
            assert torch.equal(got, want)

def test_step_captures_requested_layers():
    c = tiny_config("llama", n_layers=3)
    w = random_weights(c)
    model = Transformer(c, w, "cpu")
    tokens = list(range(5, 17))
    _, full_caps = model.forward_full(torch.tensor([tokens]), None, capture_layers=(0, 2), logits="none")
    cache = model.new_cache(64)
    model.forward_full(torch.tensor([tokens[:8]]), cache)
    io = StepIO(model, 64, capture_layers=(0, 2), split=64)
    io.set_rows(tokens[8:12], 8)
    model.step(io, 4, cache)
    for slot, cap in enumerate(full_caps):
        assert torch.allclose(io.capture[slot, :4], cap[0, 8:12], atol=1e-5)
    assert io.capture.shape == (2, STEP_ROWS, c.dim)
