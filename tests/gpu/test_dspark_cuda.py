"""The DSpark loop on CUDA (graphs on), bundled model's shape with random weights: greedy DSpark equals
AR token for token at contexts up to 8k with a random drafter and with a drafter that proposes the
AR stream corrupted on purpose (every accept length occurs); sampled DSpark follows the target's
distribution."""

from __future__ import annotations

import pytest
import torch

from engine.config import ModelConfig
from engine.dspark import SpecOptions, random_drafter, use_drafter
from engine.dspark.drafter import DrafterRuntime
from engine.dspark.speculate import speculative_accept
from engine.generate import Engine
from engine.loader import LoadedModel
from engine.sampling import SamplingParams
from models import random_ids, random_model
from test_model import random_weights

NEW = 128
CASES = [(1024, 11), (1024, 12), (4096, 13), (4096, 14), (7936, 15), (7936, 16)]  # (context, prompt seed)
ALWAYS_DRAFT = SpecOptions(confidence_threshold=0.0, idle_min_accept=0.0, narrow_below_ctx=0)
HOST_LOOP = SpecOptions(confidence_threshold=0.0, idle_min_accept=0.0, narrow_below_ctx=0, device_loop=False)


@pytest.fixture(scope="module")
def engine():
    e = Engine(loaded=random_model(), device="cuda")
    assert e.use_graphs
    return e


@pytest.fixture(scope="module")
def ar_streams(engine):
    v = engine.config.vocab_size
    out = {}
    for ctx, seed in CASES:
        ids = random_ids(ctx, v, seed)
        # 8 tokens more: the on-device loop verifies whole blocks up to the last wanted token
        out[(ctx, seed)] = (ids, engine.generate(ids, NEW + 8, stop_at_eos=False).tokens)
    return out


@pytest.mark.parametrize("options", [ALWAYS_DRAFT, HOST_LOOP, None], ids=["device-loop", "host-loop", "default-policy"])
def test_greedy_dspark_equals_ar_with_a_random_drafter(engine, ar_streams, options):
    use_drafter(engine, random_drafter(engine, seed=4), options)
    for (ctx, seed), (ids, ar) in ar_streams.items():
        out = engine.generate(ids, NEW, dspark=True, stop_at_eos=False)
        assert out.tokens == ar[:NEW], f"ctx {ctx} prompt {seed}"
        assert out.stats["target_forwards"] >= 1


class DeviceOracle:
    """Proposes the AR stream itself, corrupted at a fifth of the positions (fixed-seed random, so runs
    of every length occur), entirely on the device (so the pass is captured in the drafter's graph like
    the real one): accept lengths 0..6 all occur."""

    def __init__(self, prompt_len: int, stream: list[int], vocab: int, proposals: int, seed: int = 0):
        g = torch.Generator().manual_seed(seed)
        self.bad = {prompt_len + k for k in range(len(stream)) if float(torch.rand((), generator=g)) < 0.2}
        table = torch.zeros(prompt_len + len(stream) + 2 * proposals + 2, dtype=torch.int64)
        for k, t in enumerate(stream):
            pos = prompt_len + k
            table[pos] = (t + 1) % vocab if self.wrong(pos) else t
        self.table = table.cuda()
        self.offsets = torch.arange(1, proposals + 1, device="cuda")
        self.prompt_len, self.stream, self.p = prompt_len, stream, proposals

    def wrong(self, pos: int) -> bool:
        return pos in self.bad

    def draft(self, rt: DrafterRuntime) -> None:
        io = rt.step_io
        io.tokens[1 : 1 + self.p] = self.table[io.positions[0].long() + self.offsets]
        rt.depth.fill_(self.p)

    def expected_hist(self, new: int, device_loop: bool) -> list[int]:
        """The accept histogram the loop must produce: replay the rule on what the oracle proposes (the
        on-device loop verifies the whole block every iteration; the host loop cuts the last ones)."""
        hist, k = [0] * (self.p + 2), 0  # k = index in the stream of the last committed token
        while k + 1 < new:
            d = self.p if device_loop else max(1, min(self.p, new - (k + 1) - 1))
            j = 0
            while j < d and not self.wrong(self.prompt_len + k + 1 + j):
                j += 1
            hist[j + 1] += 1
            k += j + 1
        return hist


@pytest.mark.parametrize("loop", ["device", "host"])
@pytest.mark.parametrize("case", [CASES[0], CASES[3], CASES[5]], ids=lambda c: f"ctx{c[0]}")
def test_partial_accepts_commit_exactly_the_verified_prefix(engine, ar_streams, monkeypatch, case, loop):
    ids, ar = ar_streams[case]
    files = random_drafter(engine, seed=1)
    oracle = DeviceOracle(len(ids), ar, engine.config.vocab_size, files.config.proposals)
    monkeypatch.setattr(DrafterRuntime, "draft", lambda rt: oracle.draft(rt))
    use_drafter(engine, files, SpecOptions(confidence_threshold=0.0, idle_min_accept=0.0, narrow_below_ctx=0,
                                           device_loop=loop == "device", loop_chunk=1))
    engine._session = None  # fresh graphs, captured with the oracle's pass
    try:
        out = engine.generate(ids, NEW, dspark=True, stop_at_eos=False)
    finally:
        monkeypatch.undo()
        engine._session = None
    assert out.tokens == ar[:NEW]
    hist = out.stats["accept_hist"]
    assert hist == oracle.expected_hist(NEW, loop == "device")
    assert all(hist[1:8]), f"not every accept length 0..6 was exercised: {hist}"


def test_long_launches_of_the_device_loop_stay_lossless(engine, ar_streams, monkeypatch):
    """Eight iterations per launch, captured as one graph; the last launch may run past NEW."""
    for case in (CASES[1], CASES[4]):
        ids, ar = ar_streams[case]
        files = random_drafter(engine, seed=1)
        oracle = DeviceOracle(len(ids), ar, engine.config.vocab_size, files.config.proposals)
        monkeypatch.setattr(DrafterRuntime, "draft", lambda rt, o=oracle: o.draft(rt))
        use_drafter(engine, files, SpecOptions(confidence_threshold=0.0, idle_min_accept=0.0, loop_chunk=8))
        engine._session = None
        try:
            out = engine.generate(ids, NEW, dspark=True, stop_at_eos=False)
        finally:
            monkeypatch.undo()
            engine._session = None
        assert out.tokens == ar[:NEW] and out.stats["tau"] > 2


def test_speculative_accept_on_the_device_preserves_the_target_distribution():
    torch.manual_seed(0)
    vocab, depth, draws = 6, 2, 20_000
    gen = torch.Generator(device="cuda").manual_seed(3)
    p = torch.softmax(torch.randn(depth + 1, vocab) * 1.5, -1).cuda()
    q = torch.softmax(torch.randn(depth, vocab) * 1.5, -1).cuda()
    first = torch.zeros(vocab)
    for _ in range(draws):
        drafts = torch.multinomial(q, 1, generator=gen)[:, 0]
        j, nxt = speculative_accept(p, q, drafts, gen)
        first[(drafts[:j].tolist() + [nxt])[0]] += 1
    expected = p[0].cpu() * draws
    chi2 = float(((first - expected) ** 2 / expected).sum())
    assert chi2 < 20.5, (chi2, first / draws, p[0])  # chi-square, 5 dof, 99.9 %


def chi2_quantile(df: int, z: float = 3.09) -> float:
    """Upper quantile of chi-square (Wilson-Hilferty; z = 3.09 is 99.9 %)."""
    a = 2.0 / (9.0 * df)
    return df * (1.0 - a + z * a**0.5) ** 3


def test_sampled_dspark_draws_what_sampled_ar_draws():
    """End to end on a small-vocabulary model on CUDA: the 2nd and 3rd sampled tokens (the ones that go
    through drafting, verification and rejection sampling) have the same distribution under AR and
    DSpark sampling (two-sample chi-square at 99.9 %). A 64-token vocabulary keeps the counts dense."""
    vocab = 64
    c = ModelConfig(arch="llama", vocab_size=vocab, dim=64, n_layers=2, n_heads=4, n_kv_heads=2, head_dim=32, ffn_dim=96,
                    max_seq_len=256, tie_embeddings=True)
    w = random_weights(c, seed=2)
    w["norm"] = w["norm"] * 0.08  # softer target logits: dozens of tokens keep real probability
    e = Engine(loaded=LoadedModel(c, w, None, "<tiny-64>", "tiny-64"), device="cuda")
    files = random_drafter(e, seed=5)
    files.weights["final_norm"] = files.weights["final_norm"] * 0.02  # a flatter draft distribution,
    files.weights["markov_b"] = files.weights["markov_b"] * 0.1  # so that drafts are often accepted
    use_drafter(e, files, ALWAYS_DRAFT)
    prompt = [1, 5, 2, 7, 3, 3, 0, 6, 4, 1, 2, 5]
    n = 2000
    counts = {mode: torch.zeros(2, vocab) for mode in ("ar", "dspark")}
    accepted = 0
    for mode, offset in (("ar", 0), ("dspark", n)):
        for i in range(n):
            out = e.generate(prompt, 3, SamplingParams(temperature=1.0, seed=offset + i), dspark=mode == "dspark",
                             stop_at_eos=False)
            for pos in (1, 2):
                counts[mode][pos - 1, out.tokens[pos]] += 1
            if mode == "dspark":
                accepted += sum(k * m for k, m in enumerate(out.stats["accept_hist"][2:], 1))
    assert accepted > n // 4, f"drafts accepted only {accepted} times: the test would not exercise acceptance"
    for pos in range(2):
        a, b = counts["ar"][pos], counts["dspark"][pos]
        keep = (a + b) > 0
        chi2 = float(((a[keep] - b[keep]) ** 2 / (a[keep] + b[keep])).sum())
        assert chi2 < chi2_quantile(int(keep.sum()) - 1), (pos + 2, chi2, a, b)
