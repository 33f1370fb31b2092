"""DSpark on the bundled model (CPU): lossless against AR token for token with the shipped drafter, a
random drafter and a drafter that proposes wrong tokens on purpose; partial accepts; the runtime
drafter agrees with the training module; rejection sampling preserves the target distribution."""

from __future__ import annotations

import pytest
import torch

from engine.dspark import BUNDLED_DRAFTER, SpecOptions, attach_drafter, random_drafter, use_drafter
from engine.dspark.drafter import DrafterRuntime
from engine.dspark.module import DrafterModule, rope_for
from engine.dspark.speculate import speculative_accept
from harness.prompts import load_text

NEW = 24


def real_prompts(tokenizer) -> list[tuple[str, list[int]]]:
    """Six real prompts, code and prose, cut from texts of the repository (not the harness's cut)."""
    code = tokenizer.encode(load_text("code"))
    prose = tokenizer.encode(load_text("prose"))
    out = []
    for name, ids in (("code", code), ("prose", prose)):
        for start, length in ((1000, 120), (5000, 200), (9000, 160)):
            out.append((f"{name}@{start}", ids[start : start + length]))
    return out


@pytest.fixture(scope="module")
def engine(bundled):
    from engine.generate import Engine

    return Engine(loaded=bundled, device="cpu")


@pytest.fixture(scope="module")
def ar_streams(engine):
    """AR streams of NEW + 8 tokens: the on-device loop verifies the whole block up to the last token, so
    the oracle below proposes (and the accept rule is replayed on) a few tokens past NEW."""
    return {name: (ids, engine.generate(ids, NEW + 8, stop_at_eos=False).tokens) for name, ids in real_prompts(engine.tokenizer)}


def test_shipped_drafter_is_lossless(engine, ar_streams):
    attach_drafter(engine)
    for name, (ids, ar) in ar_streams.items():
        out = engine.generate(ids, NEW, dspark=True, stop_at_eos=False)
        assert out.tokens == ar[:NEW], name


def test_random_drafter_is_lossless(engine, ar_streams):
    use_drafter(engine, random_drafter(engine, seed=7), SpecOptions(confidence_threshold=0.0))
    for name, (ids, ar) in ar_streams.items():
        out = engine.generate(ids, NEW, dspark=True, stop_at_eos=False)
        assert out.tokens == ar[:NEW], name
        assert out.stats["target_forwards"] >= 1


class _Oracle:
    """Proposes the AR stream itself, corrupted where `wrong(position)` says: every accept length
    from 0 to 6 occurs, so partial accepts are exercised and their commits checked."""

    def __init__(self, prompt_len: int, stream: list[int], vocab: int):
        self.prompt_len, self.stream, self.vocab = prompt_len, stream, vocab
        self.proposals: list[tuple[int, list[int]]] = []

    @staticmethod
    def wrong(pos: int) -> bool:
        return pos % 7 in (3, 5) or pos % 11 == 0

    def draft(self, rt: DrafterRuntime) -> None:
        io = rt.step_io
        p = int(io.positions[0])  # position of the last committed token = stream index p - prompt_len
        k = p - self.prompt_len
        drafts = []
        for i in range(1, rt.c.proposals + 1):
            t = self.stream[k + i] if k + i < len(self.stream) else 0
            drafts.append((t + 1) % self.vocab if self.wrong(p + i) else t)
        self.proposals.append((p, drafts))
        io.tokens[1 : 1 + len(drafts)] = torch.tensor(drafts)
        rt.depth.fill_(len(drafts))

    def accepted(self, k: int, drafts: list[int], ar: list[int], loop: str) -> int:
        """Drafts accepted after stream index k: the on-device loop verifies the whole block, the host loop cuts
        the last drafts to what is still wanted."""
        d = 6 if loop == "device" else max(1, min(6, NEW - (k + 1) - 1))
        j = 0
        while j < d and drafts[j] == ar[k + 1 + j]:
            j += 1
        return j


TREE = [-1, 0, 0, 1, 1, 2, 3, 5]  # the oracle's tree shape: row c's parent; depths 0, 1, 1, 2, 2, 2, 3, 3


class _TreeOracle(_Oracle):
    """Proposes TREE with the AR stream on one of its branches (chosen by position) and wrong tokens on the
    others, so the accepted path ends at every depth, down a first child or a second."""

    def draft(self, rt: DrafterRuntime) -> None:
        io = rt.step_io
        p = int(io.positions[0])
        k = p - self.prompt_len
        truth = lambda i: self.stream[k + i] if k + i < len(self.stream) else 0  # noqa: E731
        second = p % 3 == 1  # the true continuation under the root's second child (row 2) instead of its first
        depth = [0] * len(TREE)
        true_rows = {0}
        tokens = [int(io.tokens[0])]
        for c in range(1, len(TREE)):
            depth[c] = depth[TREE[c]] + 1
            on_path = TREE[c] in true_rows and not self.wrong(p + depth[c]) and (c != 1 or not second) and (c != 2 or second)
            tok = truth(depth[c]) if on_path else (truth(depth[c]) + 1 + c) % self.vocab
            if on_path:
                true_rows.add(c)
            tokens.append(tok)
        self.proposals.append((p, tokens))
        io.set_tree(tokens, TREE, p)

    def accepted(self, k: int, tokens: list[int], ar: list[int], loop: str) -> int:
        """The tree walked from the root with the AR stream (kernels/greedy_commit.py's walk): its depth."""
        node, j = 0, 0
        while True:
            kids = [c for c in range(1, len(TREE)) if TREE[c] == node and tokens[c] == ar[k + 1 + j]]
            if not kids:
                return j
            node, j = kids[0], j + 1


@pytest.mark.parametrize("loop", ["host", "device"])
@pytest.mark.parametrize("shape", ["chain", "tree"])
def test_wrong_proposals_stay_lossless_and_partial_accepts_commit_right(engine, ar_streams, monkeypatch, loop, shape):
    """Both greedy loops: the host loop (depth chosen per iteration, the last drafts cut to what is still
    wanted) and the on-device loop (the whole block verified every iteration; one iteration per launch
    here, so the histogram is exact); drafts as a chain, or as a token tree (tree_nodes=7) walked from its
    root by the tree commit. The histogram is what replaying the accept rule on the proposals gives."""
    oracle_cls, nodes, lengths = (_Oracle, 0, slice(2, 7)) if shape == "chain" else (_TreeOracle, len(TREE) - 1, slice(1, 5))
    opts = SpecOptions(confidence_threshold=0.0, idle_min_accept=0.0, narrow_below_ctx=0, device_loop=loop == "device",
                       loop_chunk=1, tree_nodes=nodes)
    for name, (ids, ar) in list(ar_streams.items())[:3]:
        oracle = oracle_cls(len(ids), ar, engine.config.vocab_size)
        out = _decode_with(engine, monkeypatch, oracle, opts, ids)
        assert out.tokens == ar[:NEW], name
        expected_hist = _replayed_hist(oracle, ids, ar, loop)
        assert out.stats["accept_hist"] == expected_hist, name
        assert sum(1 for n in expected_hist[lengths] if n) >= 3, "several partial accept lengths exercised"


def _replayed_hist(oracle, ids: list[int], ar: list[int], loop: str) -> list[int]:
    """The accept histogram of what the oracle proposed, each proposal accepted as oracle.accepted says."""
    hist = [0] * 8
    for p, proposal in oracle.proposals:
        k = p - len(ids)
        if k + 1 < NEW:
            hist[oracle.accepted(k, proposal, ar, loop) + 1] += 1
    return hist


def _decode_with(engine, monkeypatch, oracle, opts: SpecOptions, ids: list[int]):
    """A greedy DSpark decode of NEW tokens whose drafter pass is the oracle's (fresh graphs, captured with it)."""
    monkeypatch.setattr(DrafterRuntime, "draft", lambda rt: oracle.draft(rt))
    use_drafter(engine, random_drafter(engine, seed=1), opts)
    engine._session = None
    try:
        return engine.generate(ids, NEW, dspark=True, stop_at_eos=False)
    finally:
        monkeypatch.undo()
        engine._session = None


def test_the_on_device_loop_with_long_launches_is_lossless(engine, ar_streams, monkeypatch):
    """Eight iterations per launch: the last launch may run past NEW; the tokens are still AR's."""
    for name, (ids, ar) in list(ar_streams.items())[:2]:
        oracle = _Oracle(len(ids), ar, engine.config.vocab_size)
        monkeypatch.setattr(DrafterRuntime, "draft", lambda rt, o=oracle: o.draft(rt))
        use_drafter(engine, random_drafter(engine, seed=1), SpecOptions(confidence_threshold=0.0, idle_min_accept=0.0,
                                                                        device_loop=True, loop_chunk=8))
        engine._session = None
        out = engine.generate(ids, NEW, dspark=True, stop_at_eos=False)
        assert out.tokens == ar[:NEW], name
        assert out.stats["tau"] > 1.5, out.stats
        monkeypatch.undo()
        engine._session = None


@pytest.mark.parametrize("loop", ["host", "device"])
def test_the_shipped_drafter_grows_a_lossless_tree_that_commits_more_than_its_chain(engine, ar_streams, loop):
    """The best-first tree (7 drafts, the step's 8 rows) from the shipped drafter: AR's tokens, and more
    tokens per verify than the chain over the six prompts (offline +12-17 % on the harness's cells,
    docs/perf.md 2026-12-04; here, CPU, 24 tokens a prompt)."""
    taus = {}
    for tree in (0, 7):
        attach_drafter(engine, options=SpecOptions(
            confidence_threshold=0.0, narrow_below_ctx=0, device_loop=loop == "device", tree_nodes=tree))
        committed = forwards = 0
        for name, (ids, ar) in ar_streams.items():
            out = engine.generate(ids, NEW, dspark=True, stop_at_eos=False)
            assert out.tokens == ar[:NEW], (tree, name)
            committed += sum(k * n for k, n in enumerate(out.stats["accept_hist"]))
            forwards += out.stats["target_forwards"]
        taus[tree] = committed / forwards
    assert taus[7] > taus[0], taus


def test_a_tree_too_large_for_the_step_is_a_one_line_error(engine, ar_streams):
    from engine.errors import EngineError

    ids, _ = next(iter(ar_streams.values()))
    for nodes, fanout in ((8, 4), (7, 1)):  # more rows than the step has; more nodes than 6 depths of one child hold
        attach_drafter(engine, options=SpecOptions(tree_nodes=nodes, tree_fanout=fanout))
        with pytest.raises(EngineError, match="token tree of") as err:
            engine.generate(ids, 4, dspark=True, stop_at_eos=False)
        assert "\n" not in str(err.value)
    attach_drafter(engine)


def test_shipped_drafter_tau_on_code(engine):
    """The harness's code corpus (Django, never trained on), first 4k tokens: tau >= 1.5 on CPU
    (measured 1.56 there; the bound was 1.8 on the old corpus, argparse.py, where it measured 1.8+).
    The drafter needs more training on varied text (docs/perf.md)."""
    from harness.prompts import exact_prompt

    attach_drafter(engine)
    ids = exact_prompt(engine.tokenizer, "code", 4096)
    out = engine.generate(ids, 64, dspark=True, stop_at_eos=False)
    ar = engine.generate(ids, 64, stop_at_eos=False)
    assert out.tokens == ar.tokens
    assert out.stats["tau"] >= 1.5, out.stats


def test_a_window_long_prompt_fills_the_drafter_context_from_static_buffers_with_the_same_numbers(engine):
    """A prompt at least a window long: its tail's drafter context is computed on static buffers (one
    graph on CUDA, replacing ~40 eager launches). The K/V it leaves are the eager path's, bit for bit;
    nothing lands outside the window; a shorter prompt takes the eager path; DSpark stays lossless."""
    from engine.dspark.speculate import _graphs_for

    window = 64
    files = random_drafter(engine, seed=4, ffn_dim=96, markov_rank=16, window=window)
    use_drafter(engine, files, SpecOptions(confidence_threshold=0.0))
    ids = engine.tokenizer.encode(load_text("code"))[2000:2150]
    s = engine.session(len(ids), 16, capture_layers=files.config.target_layers)
    g = _graphs_for(engine, s)
    assert g.ctx_rows is not None
    with torch.inference_mode():
        _, captured, _ = engine.prefill(s, ids)
        for end in (len(ids), window, window - 24):
            ref = DrafterRuntime(engine.model, files, s.capacity, s.io, s.state)
            ref.prefill_context(captured, end)
            g.rt.k.zero_()
            g.rt.v.zero_()
            g.prefill_context(captured, end)
            lo = max(0, end - window)
            assert torch.equal(g.rt.k[:, :, lo:end], ref.k[:, :, lo:end]) and g.rt.k[:, :, lo:end].any()
            assert torch.equal(g.rt.v[:, :, lo:end], ref.v[:, :, lo:end])
            assert not g.rt.k[:, :, :lo].any() and not g.rt.k[:, :, end:].any()
    ar = engine.generate(ids, 16, stop_at_eos=False).tokens
    assert engine.generate(ids, 16, dspark=True, stop_at_eos=False).tokens == ar


def test_runtime_drafter_matches_training_module(engine):
    """The kernels' drafter (inference) computes what the module (training) defines."""
    files = random_drafter(engine, seed=3)
    use_drafter(engine, files, SpecOptions(confidence_threshold=0.0))
    ids = engine.tokenizer.encode(load_text("prose"))[:90]
    c = files.config
    s = engine.session(len(ids), 8, capture_layers=c.target_layers)
    rt = DrafterRuntime(engine.model, files, s.capacity, s.io, s.state)
    logits, captured, _ = engine.prefill(s, ids)
    rt.prefill_context(captured, len(ids))
    last = int(torch.argmax(logits))
    s.io.set_rows([last], len(ids))
    rt.draft()
    module = DrafterModule.from_weights(c, files.weights, engine.model.embed, engine.model.lm_head)
    caps = torch.cat(captured, -1)
    tokens = torch.tensor([ids + [last] + [0] * 8])
    cos, sin = rope_for(c, 256, "cpu")
    with torch.no_grad():
        _, base, h = module(caps, tokens, torch.tensor([[len(ids)]]), cos, sin)
    assert torch.allclose(rt.base_logits, base[0, 0], atol=2e-3, rtol=1e-3)
    assert torch.allclose(rt.h[: c.proposals], h[0, 0], atol=1e-4)


@pytest.mark.parametrize("depth", [1, 3])
def test_rejection_sampling_preserves_the_target_distribution(depth):
    """40k draws over a small vocabulary: the emitted tokens follow the target's p exactly (a rule off
    by one point of probability on one token adds ~25 to the chi-square at this size)."""
    torch.manual_seed(0)
    vocab, draws = 6, 40_000
    gen = torch.Generator().manual_seed(1)
    p = torch.softmax(torch.randn(depth + 1, vocab) * 1.5, -1)
    q = torch.softmax(torch.randn(depth, vocab) * 1.5, -1)
    first = torch.zeros(vocab)
    second = torch.zeros(vocab)
    seconds = 0
    for _ in range(draws):
        drafts = torch.stack([torch.multinomial(q[i], 1, generator=gen)[0] for i in range(depth)])
        j, nxt = speculative_accept(p, q, drafts, gen)
        emitted = drafts[:j].tolist() + [nxt]
        first[emitted[0]] += 1
        if len(emitted) > 1:
            second[emitted[1]] += 1
            seconds += 1
    # chi-square against p[0] (5 dof: 99.9% quantile 20.5)
    expected = p[0] * draws
    chi2 = float(((first - expected) ** 2 / expected).sum())
    assert chi2 < 20.5, (chi2, first / draws, p[0])
    if depth > 1:
        # given the first draft was accepted, the next token follows p[1] (the test's p does not depend on it)
        expected2 = p[1] * seconds
        chi2b = float(((second - expected2) ** 2 / expected2).sum())
        assert chi2b < 20.5, (chi2b, second / seconds, p[1])


def test_speculative_accept_edge_cases():
    gen = torch.Generator().manual_seed(0)
    p = torch.tensor([[0.0, 1.0, 0.0], [0.0, 0.0, 1.0]])
    q = torch.tensor([[1.0, 0.0, 0.0]])
    # a draft the target never emits is always rejected and replaced from the residual
    assert speculative_accept(p, q, torch.tensor([0]), gen) == (0, 1)
    # a draft equal to the target's certain token is always accepted, then the bonus comes from p[1]
    q2 = torch.tensor([[0.0, 1.0, 0.0]])
    assert speculative_accept(p, q2, torch.tensor([1]), gen) == (1, 2)
    assert speculative_accept(p[:1], q[:0], torch.zeros(0, dtype=torch.long), gen) == (0, 1)


def test_spec_options_from_env():
    o = SpecOptions.from_env({"DSPARK_CONFIDENCE_THRESHOLD": "0.5", "DSPARK_USE_CONFIDENCE": "false"})
    assert o.confidence_threshold == 0.5 and o.use_confidence is False
    with pytest.raises(ValueError, match="DSPARK_MID_DEPTH"):
        SpecOptions.from_env({"DSPARK_MID_DEPTH": "six"})
    assert SpecOptions(narrow_below_ctx=512, narrow_depth=2).max_depth(100, 6) == 2
    assert SpecOptions(narrow_below_ctx=512, narrow_depth=2, mid_depth=4).max_depth(1000, 6) == 4
    assert SpecOptions(deep_from_ctx=2048, mid_depth=3).max_depth(4096, 6) == 6
    gpu = SpecOptions.for_backend("triton", {})
    assert (gpu.tree_nodes, gpu.tree_fanout) == (7, 2)  # the GPU verifies a token tree; DSPARK_TREE_NODES=0: the chain
    assert SpecOptions.for_backend("triton", {"DSPARK_TREE_NODES": "0"}).tree_nodes == 0
    assert SpecOptions.for_backend("torch", {}).tree_nodes == 0


def test_bundled_drafter_fits_the_size_budget():
    f = BUNDLED_DRAFTER / "drafter.safetensors"
    assert f.is_file(), "the shipped drafter must be in the repository"
    assert f.stat().st_size <= 10 * 1024 * 1024


def test_alternating_context_sizes_reuse_their_sessions(engine):
    """The bot sends windows of several lengths in turn: each length's session (KV cache, captured graphs)
    is kept and reused, not rebuilt on every switch; the oldest goes when more sizes are in use."""
    engine._session = None
    short, long = engine.session(100, 8), engine.session(2000, 8)
    assert short is not long and engine.session(100, 8) is short and engine.session(2000, 8) is long
    assert engine._session is long
    old, engine.max_sessions = engine.max_sessions, 2
    try:
        third = engine.session(1000, 8)  # a third size: the least recently used (short) goes
        assert engine.session(2000, 8) is long and engine.session(1000, 8) is third
        assert engine.session(100, 8) is not short
    finally:
        engine.max_sessions = old
        engine._session = None
