"""Every Triton kernel against its plain-torch reference, on fresh random inputs (run under
TRITON_INTERPRET=1 on CPU, natively on CUDA). Bounds fit the dtype: float32 is exact to rounding,
bfloat16 operands lose ~3 significant digits."""

from __future__ import annotations

import pytest
import torch

from engine.config import RopeScaling
from engine.rope import rope_tables
from kernels.decode_attention import MAX_SPLITS, AttentionWorkspace, attention_reference, attention_triton, default_split
from kernels.embedding import block_inputs_reference, block_inputs_triton, embedding_reference, embedding_triton
from kernels.fused_linear import NormAhead, fused_linear_reference, fused_linear_triton
from kernels.greedy_commit import (HeadArgmax, greedy_commit_reference, greedy_commit_triton, rows_from_base_reference,
                                   rows_from_base_triton)
from kernels.qkv_rope import qkv_rope_reference, qkv_rope_triton
from kernels.prefill import (rope_prefill_reference, rope_prefill_triton, silu_mul_reference,
                             silu_mul_triton)
from kernels.rmsnorm import add_rmsnorm_reference, add_rmsnorm_triton, rmsnorm_reference, rmsnorm_triton
from kernels import tuning

DEV = "cuda" if torch.cuda.is_available() else "cpu"
DTYPES = [torch.float32, torch.bfloat16]


def rel_err(a: torch.Tensor, b: torch.Tensor) -> float:
    a, b = a.double(), b.double()
    assert torch.isfinite(a).all() and torch.isfinite(b).all()
    return float((a - b).norm() / b.norm().clamp_min(1e-12))


def bound(dtype: torch.dtype) -> float:
    return 1e-5 if dtype == torch.float32 else 2e-2


@pytest.fixture
def gen():
    g = torch.Generator().manual_seed(torch.seed() % 2**31)  # fresh inputs every run
    return g


def randn(*shape, g, dtype=torch.float32, scale=1.0):
    return (torch.randn(*shape, generator=g) * scale).to(DEV, dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [64, 100, 576])
def test_rmsnorm(dtype, n, gen):
    x = randn(5, n, g=gen, dtype=dtype)
    w = randn(n, g=gen) + 1.0
    assert rel_err(rmsnorm_triton(x, w, 1e-5), rmsnorm_reference(x, w, 1e-5)) < bound(dtype)


def test_rmsnorm_into_rows_of_a_buffer(gen):
    """out=: the rows land in the given buffer (a slice of a larger one), the same bits as a fresh tensor;
    rows outside the slice are untouched; a wrong shape is refused."""
    x = randn(9, 96, g=gen)[1:7]
    w = randn(96, g=gen) + 1.0
    for fn in (rmsnorm_triton, rmsnorm_reference):
        buf = torch.full((8, 96), 7.0, device=DEV)
        got = fn(x, w, 1e-5, out=buf[:6])
        assert got.data_ptr() == buf.data_ptr() and torch.equal(buf[:6], fn(x, w, 1e-5, out_dtype=torch.float32))
        assert torch.equal(buf[6:], torch.full((2, 96), 7.0, device=DEV))
    with pytest.raises(ValueError, match="shape"):
        rmsnorm_triton(x, w, 1e-5, out=torch.empty(5, 96, device=DEV))



@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("n", [64, 576])
def test_add_rmsnorm(dtype, n, gen):
    """The prefill's residual add and next norm in one launch: the sum is one float32 add, and the norm
    is the norm kernel's own arithmetic, bit for bit."""
    x = randn(2, 5, n, g=gen)
    y = randn(2, 5, n, g=gen, dtype=dtype)
    w = randn(n, g=gen) + 1.0
    s, h = add_rmsnorm_triton(x, y, w, 1e-5, out_dtype=dtype)
    s_ref, h_ref = add_rmsnorm_reference(x, y, w, 1e-5, out_dtype=dtype)
    assert s.dtype == torch.float32 and h.dtype == dtype and s.shape == h.shape == x.shape
    assert torch.equal(s, s_ref)
    assert torch.equal(h, rmsnorm_triton(s_ref, w, 1e-5, out_dtype=dtype))
    assert rel_err(h, h_ref) < bound(dtype)
    with pytest.raises(ValueError, match="shapes differ"):
        add_rmsnorm_triton(x, y[:, :4], w, 1e-5)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads,kv_heads,head_dim,qk_norm", [(9, 3, 64, False), (4, 2, 32, False), (6, 2, 128, True)])
@pytest.mark.parametrize("start", [0, 5])
def test_rope_prefill(dtype, heads, kv_heads, head_dim, qk_norm, start, gen):
    """RoPE over a whole prompt and its cache writes in one launch. Without the per-head norm it is the
    reference's float32 operations in the same order, so the same bits (on CUDA too: no FMA; the CPU
    interpreter rounds float32 to bfloat16 its own way, so there bfloat16 agrees to rounding)."""
    b, t, cap = 2, 70, 90  # 70 tokens: more than one token block, not a multiple of it
    qkv = randn(b, t, (heads + 2 * kv_heads) * head_dim, g=gen, dtype=dtype)
    qn = randn(head_dim, g=gen) * 0.1 + 1.0 if qk_norm else None
    kn = randn(head_dim, g=gen) * 0.1 + 1.0 if qk_norm else None
    cos, sin = rope_tables(head_dim, 10000.0, RopeScaling(), cap, DEV)
    caches = [randn(b, kv_heads, cap, head_dim, g=gen, dtype=dtype) for _ in range(2)]
    k1, v1 = caches[0].clone(), caches[1].clone()
    k2, v2 = caches[0].clone(), caches[1].clone()
    args = (cos, sin, start, heads, kv_heads, head_dim, qn, kn, 1e-6)
    want = rope_prefill_reference(qkv, *args, k1, v1)
    got = rope_prefill_triton(qkv, *args, k2, v2)
    alone = rope_prefill_triton(qkv, *args)  # no cache to write
    exact = not qk_norm and (DEV == "cuda" or dtype == torch.float32)
    for g_, w_, a_ in zip(got, want, alone):
        assert g_.shape == w_.shape and torch.equal(g_, a_)
        assert torch.equal(g_, w_) if exact else rel_err(g_, w_) < bound(dtype)
    assert torch.equal(k2, k1) if exact else rel_err(k2, k1) < bound(dtype)
    assert torch.equal(v2, v1)
    outside = torch.ones(cap, dtype=torch.bool, device=DEV)
    outside[start : start + t] = False
    assert torch.equal(k2[:, :, outside], caches[0][:, :, outside])  # only the prompt's positions written
    assert torch.equal(v2[:, :, outside], caches[1][:, :, outside])
    with pytest.raises(ValueError, match="RoPE tables hold"):
        rope_prefill_triton(qkv, cos[:40], sin[:40], start, heads, kv_heads, head_dim, qn, kn, 1e-6)


@pytest.mark.parametrize("dtype", DTYPES)
def test_silu_mul(dtype, gen):
    """SwiGLU's product in one launch; on CUDA torch's bits (the accurate exp, IEEE division)."""
    gate = randn(3, 1000, g=gen, dtype=dtype, scale=4.0)
    up = randn(3, 1000, g=gen, dtype=dtype)
    got = silu_mul_triton(gate, up)
    want = silu_mul_reference(gate, up)
    assert got.dtype == dtype and got.shape == gate.shape
    if DEV == "cuda":
        assert torch.equal(got, want)
    else:
        assert rel_err(got, want) < bound(dtype)
    with pytest.raises(ValueError, match="silu_mul"):
        silu_mul_triton(gate, up.t())

@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("m,k,n", [(1, 64, 32), (7, 96, 72), (16, 576, 200), (3, 130, 33)])
@pytest.mark.parametrize("variant", ["plain", "norm", "swiglu", "residual", "bias", "norm+residual"])
def test_fused_linear(dtype, m, k, n, variant, gen):
    x = randn(m, k, g=gen)
    w = randn(n, k, g=gen, dtype=dtype, scale=k**-0.5)
    kw = {}
    if "norm" in variant:
        kw["norm_weight"] = randn(k, g=gen) * 0.1 + 1.0
    if variant == "swiglu":
        kw["norm_weight"] = randn(k, g=gen) * 0.1 + 1.0
        kw["up_weight"] = randn(n, k, g=gen, dtype=dtype, scale=k**-0.5)
    if "residual" in variant:
        kw["residual"] = randn(m, n, g=gen)
    if variant == "bias":
        kw["bias"] = randn(n, g=gen, dtype=dtype)
    out = torch.full((m, n), float("nan"), device=DEV)  # poisoned: every element must be written
    got = fused_linear_triton(x, w, out=out, **kw)
    want = fused_linear_reference(x, w, out_dtype=torch.float32, **kw)
    assert rel_err(got, want) < bound(dtype)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads,kv_heads,head_dim,qk_norm,bias", [(4, 2, 32, False, False), (9, 3, 64, False, False), (4, 4, 32, True, False), (6, 2, 128, True, True)])
@pytest.mark.parametrize("block_n", [0, 16])  # 16: a head's halves split over several programs
def test_qkv_rope(dtype, heads, kv_heads, head_dim, qk_norm, bias, block_n, gen):
    m, d, cap = 5, 48, 37
    x = randn(m, d, g=gen)
    nw = randn(d, g=gen) * 0.1 + 1.0
    rows = (heads + 2 * kv_heads) * head_dim
    w = randn(rows, d, g=gen, dtype=dtype, scale=d**-0.5)
    b = randn(rows, g=gen, dtype=dtype, scale=0.1) if bias else None
    qn = randn(head_dim, g=gen) * 0.1 + 1.0 if qk_norm else None
    kn = randn(head_dim, g=gen) * 0.1 + 1.0 if qk_norm else None
    cos, sin = rope_tables(head_dim, 10000.0, RopeScaling(), cap, DEV)
    pos = torch.randperm(cap, generator=gen)[:m].to(DEV, torch.int32)
    caches = [randn(kv_heads, cap, head_dim, g=gen, dtype=dtype) for _ in range(2)]
    kc1, vc1 = caches[0].clone(), caches[1].clone()
    kc2, vc2 = caches[0].clone(), caches[1].clone()
    q1 = qkv_rope_reference(x, nw, w, b, qn, kn, cos, sin, pos.long(), kc1, vc1, heads, kv_heads, 1e-6)
    with tuning.override("qkv", block_n=block_n):
        q2 = qkv_rope_triton(x, nw, w, b, qn, kn, cos, sin, pos, kc2, vc2, heads, kv_heads, 1e-6)
    assert rel_err(q2, q1) < bound(dtype)
    assert rel_err(kc2, kc1) < bound(dtype) and rel_err(vc2, vc1) < bound(dtype)
    untouched = torch.ones(cap, dtype=torch.bool)
    untouched[pos.long().cpu()] = False
    assert torch.equal(kc2[:, untouched.to(DEV)], caches[0][:, untouched.to(DEV)])  # only the rows' positions written


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("heads,kv_heads,head_dim", [(9, 3, 64), (8, 8, 32), (16, 2, 16), (4, 1, 64)])
@pytest.mark.parametrize("cap,split", [(150, 64), (333, 128), (1000, 64)])
def test_split_attention(dtype, heads, kv_heads, head_dim, cap, split, gen):
    m = 7
    q = randn(m, heads, head_dim, g=gen, dtype=dtype)
    kc = randn(kv_heads, cap, head_dim, g=gen, dtype=dtype)
    vc = randn(kv_heads, cap, head_dim, g=gen, dtype=dtype)
    # causal verify rows at the end of a context whose length is not a multiple of the block size
    base = int(torch.randint(1, cap - m, (1,), generator=gen))
    start = torch.zeros(m, dtype=torch.int32)
    end = torch.arange(base + 1, base + 1 + m, dtype=torch.int32)
    start[3] = base // 2  # a windowed row (the drafter's)
    start, end = start.to(DEV), end.to(DEV)
    ws = AttentionWorkspace(8, heads, head_dim, cap, split, DEV)
    ws.part.fill_(float("nan"))
    got = attention_triton(q, kc, vc, start, end, ws)
    want = attention_reference(q, kc, vc, start, end)
    assert rel_err(got, want) < bound(dtype)


@pytest.mark.parametrize("first", [60, 128, 190])
def test_attention_reading_keys_early_sees_what_qkv_rope_just_wrote(first, gen):
    """With fresh= the rows' positions, a split of one block of keys loads its keys and values before the
    dependency wait, and again after it where the kernel just before (qkv_rope) wrote. Launched right after
    qkv_rope wrote the rows' keys and values over NaNs (rows across a split boundary, at one, inside
    one), it gives the bits of the same attention reading every key after the wait."""
    heads, kv_heads, hd, d, cap, m = 9, 3, 64, 96, 300, 7
    x = randn(m, d, g=gen)
    nw = randn(d, g=gen) * 0.1 + 1.0
    w = randn((heads + 2 * kv_heads) * hd, d, g=gen, dtype=torch.bfloat16, scale=d**-0.5)
    cos, sin = rope_tables(hd, 10000.0, RopeScaling(), cap, DEV)
    pos = torch.arange(first, first + m, dtype=torch.int32, device=DEV)
    kc = randn(kv_heads, cap, hd, g=gen, dtype=torch.bfloat16)
    vc = randn(kv_heads, cap, hd, g=gen, dtype=torch.bfloat16)
    kc[:, pos.long()] = float("nan")
    vc[:, pos.long()] = float("nan")
    start = torch.zeros(m, dtype=torch.int32, device=DEV)
    end = pos + 1
    ws = AttentionWorkspace(8, heads, hd, cap, 64, DEV)
    q = qkv_rope_triton(x, nw, w, None, None, None, cos, sin, pos, kc, vc, heads, kv_heads, 1e-6)
    early = attention_triton(q, kc, vc, start, end, ws, fresh=pos).clone()
    late = attention_triton(q, kc, vc, start, end, ws).clone()
    assert torch.isfinite(early).all(), "a split used keys loaded before qkv_rope wrote them"
    assert torch.equal(early, late)
    assert rel_err(late, attention_reference(q, kc, vc, start, end)) < bound(torch.bfloat16)
    with pytest.raises(ValueError, match="int32 position"):
        attention_triton(q, kc, vc, start, end, ws, fresh=pos.long())


def test_default_split_leaves_at_most_max_splits_with_the_fewest_keys():
    """The measured optima (docs/perf.md, 2026-12-04): 64 keys at 2,048 and 5,120 slots, 128 at 9,216,
    256 at 17,408; a power of two in [64, 1024] whose splits fit the combine's tile wherever it can."""
    assert [default_split(c) for c in (256, 2048, 5120, 9216, 17408)] == [64, 64, 64, 128, 256]
    for cap in range(64, 300_000, 1000):
        s = default_split(cap)
        assert 64 <= s <= 1024 and s & (s - 1) == 0
        assert -(-cap // s) <= MAX_SPLITS or s == 1024
        assert s == 64 or -(-cap // (s // 2)) > MAX_SPLITS


@pytest.mark.parametrize("block_d", [0, 16, 32])
def test_attention_rows_are_batch_invariant(block_d, gen):
    """A row's output is bit-identical alone and beside other rows: what keeps DSpark lossless. Also where
    the combine's table entry gives each program a slice of a head's dimensions (block_n > 0)."""
    heads, kv_heads, hd, cap = 9, 3, 64, 700
    q = randn(7, heads, hd, g=gen, dtype=torch.bfloat16)
    kc = randn(kv_heads, cap, hd, g=gen, dtype=torch.bfloat16)
    vc = randn(kv_heads, cap, hd, g=gen, dtype=torch.bfloat16)
    end = torch.arange(600, 607, dtype=torch.int32, device=DEV)
    start = torch.zeros(7, dtype=torch.int32, device=DEV)
    ws = AttentionWorkspace(8, heads, hd, cap, 64, DEV)
    with tuning.override("combine", block_n=block_d):
        together = attention_triton(q, kc, vc, start, end, ws).clone()
        assert rel_err(together, attention_reference(q, kc, vc, start, end)) < bound(torch.bfloat16)
        for r in range(7):
            alone = attention_triton(q[r : r + 1], kc, vc, start[r : r + 1], end[r : r + 1], ws)
            assert torch.equal(alone[0], together[r])


def test_fused_linear_rows_are_batch_invariant(gen):
    x = randn(7, 576, g=gen)
    w = randn(300, 576, g=gen, dtype=torch.bfloat16, scale=0.05)
    nw = randn(576, g=gen) * 0.1 + 1
    together = fused_linear_triton(x, w, norm_weight=nw, out_dtype=torch.float32)
    for r in range(7):
        assert torch.equal(fused_linear_triton(x[r : r + 1], w, norm_weight=nw, out_dtype=torch.float32)[0], together[r])


@pytest.mark.parametrize("k_split", [2, 4])
@pytest.mark.parametrize("variant", ["residual", "swiglu"])
def test_k_walk_in_slices_computes_the_product_and_keeps_rows_invariant(k_split, variant, gen):
    """tuning.LaunchConfig.k_split: the K walk as slices side by side (a K whose last slice is masked): the
    fused op's value, and a row's bits the same alone as beside six others."""
    m, k, n = 7, 200, 72
    kind = "swiglu" if variant == "swiglu" else "linear"
    x = randn(m, k, g=gen)
    w = randn(n, k, g=gen, dtype=torch.bfloat16, scale=k**-0.5)
    kw = {"norm_weight": randn(k, g=gen) * 0.1 + 1.0, "up_weight": randn(n, k, g=gen, dtype=torch.bfloat16, scale=k**-0.5)} \
        if variant == "swiglu" else {"residual": randn(m, n, g=gen)}
    want = fused_linear_reference(x, w, out_dtype=torch.float32, **kw)
    with tuning.override(kind, block_k=32, k_split=k_split):
        together = fused_linear_triton(x, w, out_dtype=torch.float32, **kw)
        for r in range(m):
            alone_kw = {key: (v[r : r + 1] if key == "residual" else v) for key, v in kw.items()}
            assert torch.equal(fused_linear_triton(x[r : r + 1], w, out_dtype=torch.float32, **alone_kw)[0], together[r])
    assert rel_err(together, want) < bound(torch.bfloat16)


def bundled_qkv_case(gen):
    """QKV in the bundled model's head layout (9 heads, 3 KV heads of 64) over a K of 200 (its last K steps
    masked), 5 rows at random positions of a 37-slot cache: (heads, kv_heads, head_dim, rows, cap, x, norm
    weight, Wqkv, cos, sin, positions)."""
    heads, kv_heads, head_dim, m, d, cap = 9, 3, 64, 5, 200, 37
    x = randn(m, d, g=gen)
    nw = randn(d, g=gen) * 0.1 + 1.0
    w = randn((heads + 2 * kv_heads) * head_dim, d, g=gen, dtype=torch.bfloat16, scale=d**-0.5)
    cos, sin = rope_tables(head_dim, 10000.0, RopeScaling(), cap, DEV)
    pos = torch.randperm(cap, generator=gen)[:m].to(DEV, torch.int32)
    return heads, kv_heads, head_dim, m, cap, x, nw, w, cos, sin, pos


@pytest.mark.parametrize("k_split", [2, 4])
def test_qkv_rope_with_the_k_walk_in_slices(k_split, gen):
    heads, kv_heads, head_dim, m, cap, x, nw, w, cos, sin, pos = bundled_qkv_case(gen)
    kc1, vc1 = (torch.zeros(kv_heads, cap, head_dim, dtype=torch.bfloat16, device=DEV) for _ in range(2))
    kc2, vc2 = kc1.clone(), vc1.clone()
    q1 = qkv_rope_reference(x, nw, w, None, None, None, cos, sin, pos.long(), kc1, vc1, heads, kv_heads, 1e-6)
    with tuning.override("qkv", block_k=32, k_split=k_split):
        q2 = qkv_rope_triton(x, nw, w, None, None, None, cos, sin, pos, kc2, vc2, heads, kv_heads, 1e-6)
        for r in range(m):  # a row alone writes the bits it wrote beside the others
            kc3, vc3 = torch.zeros_like(kc2), torch.zeros_like(vc2)
            q3 = qkv_rope_triton(x[r : r + 1], nw, w, None, None, None, cos, sin, pos[r : r + 1], kc3, vc3, heads, kv_heads, 1e-6)
            assert torch.equal(q3[0], q2[r]) and torch.equal(kc3[:, pos[r]], kc2[:, pos[r]])
    assert rel_err(q2, q1) < bound(torch.bfloat16)
    assert rel_err(kc2, kc1) < bound(torch.bfloat16) and rel_err(vc2, vc1) < bound(torch.bfloat16)


def test_k_slices_are_aligned_and_checked():
    assert tuning.k_slices(tuning.LaunchConfig(k_split=4), 576, torch.bfloat16) == (4, 144)
    assert tuning.k_slices(tuning.LaunchConfig(k_split=4), 130, torch.bfloat16) == (4, 48)  # rounded up to 16, masked
    assert tuning.k_slices(tuning.LaunchConfig(k_split=4), 576, torch.float32) == (1, 576)
    with pytest.raises(ValueError, match="k_split"):
        tuning.k_slices(tuning.LaunchConfig(k_split=3), 576, torch.bfloat16)


@pytest.mark.parametrize("block_n", [32, 64])
@pytest.mark.parametrize("variant", ["residual", "norm", "swiglu", "ahead", "swiglu_ahead"])
def test_the_product_computed_transposed_keeps_the_value_and_rows_invariant(variant, block_n, gen):
    """tuning.LaunchConfig.swap_ab: W @ x^T (64 weight rows per program, SwiGLU's gate and up rows stacked: the
    warpgroup MMA's M on Hopper), over a K whose last step is masked and an N whose last tile is: the fused op's
    value, the same as the untransposed product within rounding, and a row's bits the same alone as beside six
    others."""
    m, k, n = 7, 200, 100
    kind = "swiglu" if variant.startswith("swiglu") else "linear"
    x = randn(m, k, g=gen)
    w = randn(n, k, g=gen, dtype=torch.bfloat16, scale=k**-0.5)
    nw = randn(k, g=gen) * 0.1 + 1.0
    up = randn(n, k, g=gen, dtype=torch.bfloat16, scale=k**-0.5)
    kw = {"residual": {"residual": randn(m, n, g=gen)}, "norm": {"norm_weight": nw, "eps": 1e-6},
          "swiglu": {"norm_weight": nw, "eps": 1e-6, "up_weight": up}, "ahead": {"norm_weight": nw, "eps": 1e-6},
          "swiglu_ahead": {"norm_weight": nw, "eps": 1e-6, "up_weight": up}}[variant]

    def run(rows):
        if not variant.endswith("ahead"):
            one = {key: (v[rows] if key == "residual" else v) for key, v in kw.items()}
            return fused_linear_triton(x[rows], w, out_dtype=torch.float32, **one)
        h = x[rows, :96]
        y, ahead, _ = produce_ahead(h, randn(k, 96, g=torch.Generator().manual_seed(5), dtype=torch.bfloat16, scale=0.1),
                                    torch.zeros(h.shape[0], k, device=DEV), nw, h.shape[0])
        return fused_linear_triton(y, w, out_dtype=torch.float32, ahead=ahead, **kw)

    with tuning.override(kind, block_n=block_n, block_k=32):
        plain = run(slice(0, m))
    with tuning.override(kind, block_n=block_n, block_k=32, swap_ab=True):
        together = run(slice(0, m))
        for r in (0, 3, 6):
            assert torch.equal(run(slice(r, r + 1))[0], together[r])
    assert rel_err(together, plain) < 1e-5  # both sum bf16 products in float32; only the order within a step may differ
    if not variant.endswith("ahead"):
        assert rel_err(together, fused_linear_reference(x, w, out_dtype=torch.float32, **kw)) < bound(torch.bfloat16)


@pytest.mark.parametrize("ahead", [False, True])
def test_qkv_rope_with_the_head_computed_transposed(ahead, gen):
    """swap_ab on QKV: each head's 64 weight rows as one tile of the transposed product, split into RoPE's halves
    after the walk: q and the cache as without it (within rounding), a row alone the bits it gets beside the
    others; with the head split over programs (block_n > 0) or the K walk in slices it is refused."""
    heads, kv_heads, head_dim, m, cap, x, nw, w, cos, sin, pos = bundled_qkv_case(gen)
    d = nw.shape[0]
    h, res = randn(m, 64, g=gen), randn(m, d, g=gen)
    wo = randn(d, 64, g=gen, dtype=torch.bfloat16, scale=64**-0.5)

    def run(rows):
        kc, vc = (torch.zeros(kv_heads, cap, head_dim, dtype=torch.bfloat16, device=DEV) for _ in range(2))
        a = None
        xr = x[rows]
        if ahead:
            xr, a, _ = produce_ahead(h[rows], wo, res[rows], nw, xr.shape[0])
        q = qkv_rope_triton(xr, nw, w, None, None, None, cos, sin, pos[rows], kc, vc, heads, kv_heads, 1e-6, ahead=a)
        return q, kc, vc

    with tuning.override("qkv", block_n=0, block_k=32):
        q0, kc0, vc0 = run(slice(0, m))
    with tuning.override("qkv", block_n=0, block_k=32, swap_ab=True):
        q, kc, vc = run(slice(0, m))
        for r in (0, m - 1):
            q1, kc1, _ = run(slice(r, r + 1))
            assert torch.equal(q1[0], q[r]) and torch.equal(kc1[:, pos[r]], kc[:, pos[r]])
    assert rel_err(q, q0) < 1e-2 and rel_err(kc, kc0) < 1e-2 and rel_err(vc, vc0) < 1e-2  # bf16 outputs
    if not ahead:
        kc2, vc2 = (torch.zeros(kv_heads, cap, head_dim, dtype=torch.bfloat16, device=DEV) for _ in range(2))
        want = qkv_rope_reference(x, nw, w, None, None, None, cos, sin, pos.long(), kc2, vc2, heads, kv_heads, 1e-6)
        assert rel_err(q, want) < bound(torch.bfloat16) and rel_err(kc, kc2) < bound(torch.bfloat16)
    for bad in ({"block_n": 16, "swap_ab": True}, {"block_n": 0, "k_split": 2, "swap_ab": True}):
        with tuning.override("qkv", block_k=32, **bad), pytest.raises(ValueError, match="swap_ab"):
            run(slice(0, m))


def produce_ahead(h, wo, res, nw, rows, k_split=1):
    """An o-proj-like producer (a residual add) of `rows` rows that prepares the next norm: (its output, the
    NormAhead), and the same launch without it."""
    ahead = NormAhead(nw, torch.bfloat16)
    with tuning.override("linear", block_k=32, k_split=k_split):
        out = fused_linear_triton(h[:rows], wo, residual=res[:rows], ahead_out=ahead)
        plain = fused_linear_triton(h[:rows], wo, residual=res[:rows])
    return out, ahead, plain


@pytest.mark.parametrize("k_split", [1, 4])
@pytest.mark.parametrize("variant", ["norm", "swiglu"])
def test_a_norm_prepared_by_the_producer(variant, k_split, gen):
    """fused_linear.NormAhead: the producer writes the same x as without it, plus x * w rounded and its programs'
    sums of squares; the consumer's product then matches the norm-late reference and the plain norm within
    bf16 rounding, a row alone gives the bits it gives beside six others, and the producer's parts sum to x's
    squares (several programs: N 200 in 16-column tiles)."""
    m, d, k_in, n = 7, 200, 96, 72
    h = randn(m, k_in, g=gen)
    wo = randn(d, k_in, g=gen, dtype=torch.bfloat16, scale=k_in**-0.5)
    res = randn(m, d, g=gen)
    nw = randn(d, g=gen) * 0.1 + 1.0
    w = randn(n, d, g=gen, dtype=torch.bfloat16, scale=d**-0.5)
    kw = {"norm_weight": nw, "eps": 1e-6}
    if variant == "swiglu":
        kw["up_weight"] = randn(n, d, g=gen, dtype=torch.bfloat16, scale=d**-0.5)
    kind = "swiglu" if variant == "swiglu" else "linear"
    x, ahead, plain = produce_ahead(h, wo, res, nw, m)
    assert torch.equal(x, plain)
    assert ahead.ss.shape[0] == m and ahead.ss.shape[1] > 1
    assert torch.allclose(ahead.ss.sum(-1), x.pow(2).sum(-1), rtol=1e-5)
    assert ahead.xw.dtype == torch.bfloat16  # x * w rounded (to nearest on the GPU; the interpreter truncates)
    assert torch.allclose(ahead.xw.float(), x * nw, rtol=2**-7, atol=0)
    with tuning.override(kind, block_k=64 // k_split * 2 if k_split > 1 else 64, k_split=k_split):
        got = fused_linear_triton(x, w, out_dtype=torch.float32, ahead=ahead, **kw)
        for r in (0, 3, 6):
            x1, a1, _ = produce_ahead(h[r : r + 1], wo, res[r : r + 1], nw, 1)
            assert torch.equal(fused_linear_triton(x1, w, out_dtype=torch.float32, ahead=a1, **kw)[0], got[r])
    late = fused_linear_reference(x, w, out_dtype=torch.float32, ahead=ahead, **kw)  # the same operand, in torch
    assert rel_err(got, late) < 1e-5
    assert rel_err(got, fused_linear_reference(x, w, out_dtype=torch.float32, **kw)) < bound(torch.bfloat16)


def test_qkv_rope_with_a_norm_prepared_by_the_producer(gen):
    heads, kv_heads, head_dim, m, cap, _, nw, w, cos, sin, pos = bundled_qkv_case(gen)
    d = nw.shape[0]
    h, res = randn(m, 64, g=gen), randn(m, d, g=gen)
    wo = randn(d, 64, g=gen, dtype=torch.bfloat16, scale=64**-0.5)

    def run(x, ahead, p):
        kc, vc = (torch.zeros(kv_heads, cap, head_dim, dtype=torch.bfloat16, device=DEV) for _ in range(2))
        fn = qkv_rope_triton if ahead is not None else qkv_rope_reference
        q = fn(x, nw, w, None, None, None, cos, sin, p, kc, vc, heads, kv_heads, 1e-6, ahead=ahead)
        return q, kc, vc

    x, ahead, _ = produce_ahead(h, wo, res, nw, m)
    q, kc, vc = run(x, ahead, pos)
    for r in (0, m - 1):
        x1, a1, _ = produce_ahead(h[r : r + 1], wo, res[r : r + 1], nw, 1)
        q1, kc1, vc1 = run(x1, a1, pos[r : r + 1])
        assert torch.equal(q1[0], q[r]) and torch.equal(kc1[:, pos[r]], kc[:, pos[r]])
    q0, kc0, vc0 = run(x, None, pos.long())
    assert rel_err(q, q0) < bound(torch.bfloat16) and rel_err(kc, kc0) < bound(torch.bfloat16)
    assert rel_err(vc, vc0) < bound(torch.bfloat16)


def test_a_norm_prepared_for_another_kernel_is_refused(gen):
    m, d = 3, 64
    x, res = randn(m, d, g=gen), randn(m, d, g=gen)
    wo = randn(d, d, g=gen, dtype=torch.bfloat16, scale=d**-0.5)
    nw, other = randn(d, g=gen), randn(d, g=gen)
    w = randn(32, d, g=gen, dtype=torch.bfloat16)
    empty = NormAhead(nw, torch.bfloat16)
    with pytest.raises(ValueError, match="not filled in"):
        fused_linear_triton(x, w, norm_weight=nw, ahead=empty)
    with pytest.raises(ValueError, match="needs the residual"):
        fused_linear_triton(x, wo, ahead_out=NormAhead(nw, torch.bfloat16))
    y, ahead, _ = produce_ahead(x, wo, res, nw, m)
    with pytest.raises(ValueError, match="another norm weight"):
        fused_linear_triton(y, w, norm_weight=other, ahead=ahead)
    with pytest.raises(ValueError, match="prepared for"):
        fused_linear_triton(y[:2], w, norm_weight=nw, ahead=ahead)


@pytest.mark.parametrize("vocab", [1000, 5000, 49152])
def test_greedy_commit(vocab, gen):
    m = 5
    logits = randn(m, vocab, g=gen)
    t = logits.argmax(-1).tolist()
    cases = [t[:4], [t[0], t[1], (t[2] + 1) % vocab, t[3]], [(t[0] + 1) % vocab, t[1], t[2], t[3]]]
    for drafts in cases:
        results = []
        for fn in (greedy_commit_reference, greedy_commit_triton):
            tokens = torch.tensor([11] + drafts + [0, 0, 0], dtype=torch.int64, device=DEV)
            pos = torch.zeros(8, dtype=torch.int32, device=DEV)
            kv_end = torch.zeros(8, dtype=torch.int32, device=DEV)
            out = torch.full((32,), -1, dtype=torch.int64, device=DEV)
            state = torch.tensor([3, 40, 0, 5, 0], device=DEV)
            fn(logits, tokens, pos, kv_end, out, state, m)
            results.append([z.tolist() for z in (tokens, pos, kv_end, out, state)])
        assert results[0] == results[1]
        accepted = 0
        while accepted < 4 and drafts[accepted] == t[accepted]:
            accepted += 1
        tokens, pos, kv_end, out, state = results[1]
        assert out[3 : 3 + accepted + 1] == t[: accepted + 1] and out[3 + accepted + 1] == -1
        assert state == [3 + accepted + 1, 40 + accepted + 1, accepted, 6, 40]
        assert pos == list(range(41 + accepted, 49 + accepted)) and kv_end == [p + 1 for p in pos]
        assert tokens[0] == t[accepted]


def test_greedy_commit_counts_accepted_drafts_in_a_histogram(gen):
    """hist (the on-device loop's): hist[j + 1] += 1 for j accepted drafts, on both paths, every call."""
    m, vocab = 5, 300
    logits = randn(m, vocab, g=gen)
    t = logits.argmax(-1).tolist()
    hists = []
    for fn in (greedy_commit_reference, greedy_commit_triton):
        hist = torch.zeros(8, dtype=torch.int64, device=DEV)
        for drafts in (t[:4], [t[0], t[1], (t[2] + 1) % vocab, t[3]], [(t[0] + 1) % vocab] + t[1:4], t[:4]):
            tokens = torch.tensor([11] + drafts + [0, 0, 0], dtype=torch.int64, device=DEV)
            state = torch.tensor([3, 40, 0, 5, 0], device=DEV)
            fn(logits, tokens, torch.zeros(8, dtype=torch.int32, device=DEV), torch.zeros(8, dtype=torch.int32, device=DEV),
               torch.full((32,), -1, dtype=torch.int64, device=DEV), state, m, hist=hist)
        hists.append(hist.tolist())
    assert hists[0] == hists[1] == [0, 1, 0, 1, 0, 2, 0, 0]  # accepted 4, 2, 0, 4


def test_rows_from_base(gen):
    """The drafter's context positions: state[STATE_PREV_BASE] + r, int32 on Triton, int64 on torch."""
    state = torch.tensor([9, 52, 2, 7, 49], device=DEV)
    assert rows_from_base_triton(state, torch.zeros(8, dtype=torch.int32, device=DEV)).tolist() == list(range(49, 57))
    assert rows_from_base_reference(state, torch.zeros(8, dtype=torch.int64, device=DEV)).tolist() == list(range(49, 57))


@pytest.mark.parametrize("pos0", [3, 5000])
def test_block_inputs(pos0, gen):
    """The drafter's block in one launch: [tokens[0], MASK...] embedded (float32) and every row's window
    [max(0, P - window), P + block_size), the same as the torch path; the window's start clamps at 0."""
    table = randn(101, 48, g=gen, dtype=torch.bfloat16)
    tokens = torch.tensor([17, 3, 4, 5, 6, 7, 8, 9], device=DEV)
    positions = torch.arange(pos0, pos0 + 8, dtype=torch.int32, device=DEV)
    results = []
    for fn in (block_inputs_reference, block_inputs_triton):
        x = torch.full((7, 48), 9.0, device=DEV)
        bounds = torch.full((14,), -5, dtype=torch.int32, device=DEV)
        fn(tokens, positions, table, 100, 1024, 7, x, bounds)
        results.append((x, bounds))
    (x0, b0), (x1, b1) = results
    assert torch.equal(x0, x1) and torch.equal(b0, b1)
    assert torch.equal(x1[0], table[17].float()) and all(torch.equal(x1[r], table[100].float()) for r in range(1, 7))
    assert b1.tolist() == [max(0, pos0 - 1024)] * 7 + [pos0 + 7] * 7


def test_embedding(gen):
    table = randn(100, 48, g=gen, dtype=torch.bfloat16)
    tokens = torch.randint(0, 100, (7,), generator=gen).to(DEV)
    assert torch.equal(embedding_triton(tokens, table), embedding_reference(tokens, table))


@pytest.mark.parametrize("vocab", [5000, 49152])
def test_the_lm_heads_launch_leaves_the_argmaxes_and_commits(vocab, gen):
    """HeadArgmax: the LM head's launch leaves its logits as they were without it, every row's argmax (the first
    index of a maximum repeated in the same tile, in another and in the last, partial one), its count back at
    zero, and with a chain's commit the very writes of greedy_commit_reference on those logits (accepted 4, 2, 0;
    the histogram too), launch after launch on the same count."""
    m, k = 5, 64
    x, nw = randn(m, k, g=gen), randn(k, g=gen)
    w = randn(vocab, k, g=gen, dtype=torch.bfloat16)
    plain = fused_linear_triton(x, w, norm_weight=nw, out_dtype=torch.float32)
    t0 = int(plain[0].argmax())
    for j in (t0 + 1, max(t0 - 700, 0), vocab - 1):
        w[j] = w[t0]  # row 0's maximum repeated: ties everywhere
    plain = fused_linear_triton(x, w, norm_weight=nw, out_dtype=torch.float32)
    t = plain.argmax(-1).tolist()
    argmax = torch.full((8,), -1, dtype=torch.int64, device=DEV)
    count = torch.zeros(1, dtype=torch.int32, device=DEV)
    logits = torch.zeros(m, vocab, device=DEV)
    fused_linear_triton(x, w, norm_weight=nw, out=logits, head=HeadArgmax(argmax, count))
    assert torch.equal(logits, plain) and argmax[:m].tolist() == t and t[0] == min(t0, max(t0 - 700, 0))
    assert int(count) == 0
    hists = []
    for commit in (False, True):
        hist = torch.zeros(8, dtype=torch.int64, device=DEV)
        results = []
        for drafts in (t[:4], [t[0], t[1], (t[2] + 1) % vocab, t[3]], [(t[0] + 1) % vocab] + t[1:4]):
            tokens = torch.tensor([11] + drafts + [0, 0, 0], dtype=torch.int64, device=DEV)
            pos, kv_end = torch.zeros(8, dtype=torch.int32, device=DEV), torch.zeros(8, dtype=torch.int32, device=DEV)
            out = torch.full((32,), -1, dtype=torch.int64, device=DEV)
            state = torch.tensor([3, 40, 0, 5, 0], device=DEV)
            if commit:
                chain = (tokens, pos, kv_end, out, state, hist)
                fused_linear_triton(x, w, norm_weight=nw, out=logits, head=HeadArgmax(argmax, count, chain))
                assert int(count) == 0
            else:
                greedy_commit_reference(plain, tokens, pos, kv_end, out, state, m, hist=hist)
            results.append([z.tolist() for z in (tokens, pos, kv_end, out, state)])
        hists.append((results, hist.tolist()))
    assert hists[0] == hists[1] and hists[1][1] == [0, 1, 0, 1, 0, 1, 0, 0]
    assert [r[4][2] for r in hists[1][0]] == [4, 2, 0] and hists[1][0][0][3][3:9] == t + [-1]


@pytest.mark.parametrize("vocab", [5000, 49152])
def test_greedy_commit_ties_go_to_the_first_index_across_chunks(vocab, gen):
    """The argmax runs per 2,048-entry chunk (kernels.greedy_commit.ARGMAX_CHUNK): a maximum repeated in
    a later chunk, or later in the same chunk, must lose to its first occurrence, as in torch.argmax."""
    logits = randn(3, vocab, g=gen)
    top = float(logits.max()) + 1.0
    logits[0, [4500, 2100, 2047]] = top  # first at 2047, the last entry of chunk 0
    logits[1, [3000, 2049]] = top  # both in chunk 1
    logits[2, vocab - 1] = top  # the last entry of the last, partial chunk
    tokens = torch.tensor([11, 0, 0, 0, 0, 0, 0, 0], dtype=torch.int64, device=DEV)
    out = torch.full((16,), -1, dtype=torch.int64, device=DEV)
    for row, want in ((0, 2047), (1, 2049), (2, vocab - 1)):
        state = torch.tensor([0, 40, 0, 0, 0], device=DEV)
        greedy_commit_triton(logits[row : row + 1].contiguous(), tokens, torch.zeros(8, dtype=torch.int32, device=DEV),
                             torch.zeros(8, dtype=torch.int32, device=DEV), out, state, 1)
        assert int(out[0]) == want == int(torch.argmax(logits[row]))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("vocab,chunk", [(3000, 256), (5000, 1024), (49152, 256), (49152, 512)])
def test_draft_head(vocab, chunk, dtype, gen):
    """The drafter's head on Triton (a launch per draft and one for the confidences) against the torch
    path: the same drafts, depth and drafted token rows; confidences to rounding. vocab 3000 and 5000
    end in a partial chunk. Each draft is its Markov-biased score's argmax over the whole vocabulary,
    checked here against a direct recomputation too."""
    from kernels import tuning
    from kernels.draft_head import draft_head_reference, draft_head_triton

    p, r, d = 6, 64, 96
    base = randn(p, vocab, g=gen) * 4
    h = randn(p, d, g=gen)
    u = randn(vocab, r, g=gen, dtype=dtype, scale=0.5)  # the Markov tables: bf16 on the GPU, float32 on CPU
    v = randn(vocab, r, g=gen, dtype=dtype, scale=0.5)
    conf_w = randn(d, g=gen, scale=0.05)
    conf_a, conf_b = torch.tensor(0.5, device=DEV), torch.tensor(1.5, device=DEV)
    last = torch.tensor([int(torch.randint(0, vocab, (1,), generator=gen))], device=DEV)
    results = []
    for fn in (draft_head_reference, draft_head_triton):
        drafts = torch.zeros(p, dtype=torch.int64, device=DEV)
        conf = torch.zeros(p, device=DEV)
        depth = torch.zeros((), dtype=torch.int64, device=DEV)
        tokens = torch.full((8,), -1, dtype=torch.int64, device=DEV)
        with tuning.override("head", block_n=chunk):
            fn(base, h, last, u, v, conf_w, conf_a, conf_b, torch.tensor(0.3, device=DEV), drafts, conf, depth, tokens)
        results.append((drafts, conf, depth, tokens))
    (d0, c0, n0, t0), (d1, c1, n1, t1) = results
    assert torch.equal(d0, d1) and torch.equal(t0, t1) and torch.equal(n0, n1)
    assert t1[0] == -1 and torch.equal(t1[1 : 1 + p], d1) and t1[7] == -1
    assert torch.allclose(c0, c1, rtol=1e-5, atol=1e-6)
    prev = int(last)
    for i in range(p):  # each draft: argmax over the whole vocabulary of base_i + u . v[previous draft]
        scores = base[i].double() + u.double() @ v[prev].double()
        top2 = torch.topk(scores, 2).values
        if float(top2[0] - top2[1]) > 1e-4:  # not a near-tie that float32 sums may order either way
            assert int(d1[i]) == int(torch.argmax(scores))
        prev = int(d1[i])
    assert 0 <= int(n1) <= p


def test_draft_head_ties_go_to_the_smallest_token(gen):
    """Equal scores in different chunks, and in one chunk: each draft is the smallest token id among
    them, as torch.argmax picks."""
    from kernels.draft_head import draft_head_reference, draft_head_triton

    p, vocab, r, d = 3, 1000, 8, 16
    u = torch.zeros(vocab, r, device=DEV)
    v = torch.zeros(vocab, r, device=DEV)
    base = randn(p, vocab, g=gen)
    top = float(base.max()) + 1.0
    base[0, [900, 300, 299]] = top  # 299 and 300 in one 256-chunk (256..511), 900 in another
    base[1, [999, 512]] = top
    base[2, [256, 255]] = top  # across the chunk boundary
    results = []
    for fn in (draft_head_reference, draft_head_triton):
        drafts = torch.zeros(p, dtype=torch.int64, device=DEV)
        tokens = torch.full((8,), -1, dtype=torch.int64, device=DEV)
        fn(base, randn(p, d, g=gen), torch.tensor([7], device=DEV), u, v, randn(d, g=gen), torch.tensor(0.5, device=DEV),
           torch.tensor(1.5, device=DEV), torch.tensor(0.3, device=DEV), drafts, torch.zeros(p, device=DEV),
           torch.zeros((), dtype=torch.int64, device=DEV), tokens)
        results.append(drafts.tolist())
    assert results[0] == results[1] == [299, 512, 255]


@pytest.fixture
def unrolled(monkeypatch):
    """DSPARK_UNROLL_NORM=1 for the launches inside `with unrolled():` (kernels.common.unroll_norm)."""
    from contextlib import contextmanager

    from kernels import common

    @contextmanager
    def on(flag: bool):
        monkeypatch.setenv("DSPARK_UNROLL_NORM", "1" if flag else "0")
        common.unroll_env_on.cache_clear()
        try:
            yield
        finally:
            monkeypatch.delenv("DSPARK_UNROLL_NORM")
            common.unroll_env_on.cache_clear()

    return on


def test_unrolled_norm_passes_compute_the_same_bits(unrolled, gen):
    """The RMSNorm pass of fused_linear and qkv_rope is unrolled (tl.static_range; DSPARK_UNROLL_NORM=0: a
    loop): the same arithmetic in the same order, so the same bits; passes longer than UNROLL_MAX_STEPS
    stay loops."""
    from kernels import common

    m, k, n = 5, 96, 64
    x, nw, res = randn(m, k, g=gen), randn(k, g=gen) * 0.1 + 1.0, randn(m, n, g=gen)
    w, u = randn(n, k, g=gen, scale=k**-0.5), randn(n, k, g=gen, scale=k**-0.5)
    runs = []
    heads, kvh, hd, cap = 4, 2, 32, 24
    wqkv = randn((heads + 2 * kvh) * hd, k, g=gen, scale=k**-0.5)
    cos, sin = rope_tables(hd, 10000.0, RopeScaling(), cap, DEV)
    pos = torch.arange(3, 3 + m, dtype=torch.int32, device=DEV)
    for on in (False, True):
        caches = [torch.zeros(kvh, cap, hd, device=DEV) for _ in range(2)]
        with unrolled(on), tuning.override("linear", block_k=32), \
                tuning.override("swiglu", block_k=32), tuning.override("qkv", block_k=32):
            assert common.unroll_norm(k, 32) == (k if on else 0)
            runs.append([fused_linear_triton(x, w, norm_weight=nw, up_weight=u),
                         fused_linear_triton(x, w, residual=res),
                         qkv_rope_triton(x, nw, wqkv, None, None, None, cos, sin, pos, caches[0], caches[1], heads, kvh, 1e-6),
                         caches[0]])
    assert all(torch.equal(a, b) for a, b in zip(*runs))
    with unrolled(True):
        assert common.unroll_norm(4096, 64) == 0  # 64 steps: stays a loop


def test_early_epilogue_loads_compute_the_same_bits(monkeypatch, gen):
    """Latency-bound kernels (common.latency_bound) load the residual, bias, positions and RoPE angles
    before the K walk; the others after it. The same values are added at the same point: under the
    interpreter, the same bits (compiled for the GPU the rounding may differ: see linear_tile)."""
    from kernels import common

    m, k, n = 5, 96, 64
    x, nw, res = randn(m, k, g=gen), randn(k, g=gen) * 0.1 + 1.0, randn(m, n, g=gen)
    w, b = randn(n, k, g=gen, scale=k**-0.5), randn(n, g=gen, scale=0.1)
    heads, kvh, hd, cap = 4, 2, 32, 24
    wqkv = randn((heads + 2 * kvh) * hd, k, g=gen, scale=k**-0.5)
    bqkv = randn((heads + 2 * kvh) * hd, g=gen, scale=0.1)
    cos, sin = rope_tables(hd, 10000.0, RopeScaling(), cap, DEV)
    pos = torch.arange(3, 3 + m, dtype=torch.int32, device=DEV)
    runs = []
    for limit in (common.PREFETCH_MAX_BYTES, 0):  # early, then late
        monkeypatch.setattr(common, "PREFETCH_MAX_BYTES", limit)
        assert common.latency_bound(w.nbytes) == (limit > 0)
        caches = [torch.zeros(kvh, cap, hd, device=DEV) for _ in range(2)]
        runs.append([fused_linear_triton(x, w, residual=res, bias=b), fused_linear_triton(x, w, norm_weight=nw, bias=b),
                     qkv_rope_triton(x, nw, wqkv, bqkv, None, None, cos, sin, pos, caches[0], caches[1], heads, kvh, 1e-6),
                     caches[0], caches[1]])
    assert all(torch.equal(a, c) for a, c in zip(*runs))


def test_the_lm_head_prefetches_only_when_asked_and_l2_sized(kernel_switch):
    """The LM head (bandwidth-bound) prefetches its programs' tiles before the wait only with
    DSPARK_LM_HEAD_PREFETCH=1, with programmatic dependent launch, with the L2 prefetch not switched off, and
    for weights of at most LM_HEAD_PREFETCH_MAX_BYTES (the bundled model's 56 MB, not a guard's 500 MB)."""
    from kernels import common

    pdl, bundled, guard = {"USE_PDL": True}, 49152 * 576 * 2, 128256 * 2048 * 2
    assert not common.lm_head_prefetch_on(pdl, bundled)  # off by default
    kernel_switch("DSPARK_LM_HEAD_PREFETCH", True)
    assert common.lm_head_prefetch_on(pdl, bundled)
    assert not common.lm_head_prefetch_on(pdl, guard)
    assert not common.lm_head_prefetch_on({"USE_PDL": False}, bundled)
    kernel_switch("DSPARK_L2_PREFETCH", False)
    assert not common.lm_head_prefetch_on(pdl, bundled)
