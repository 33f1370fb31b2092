"""CUDA graphs on the bundled model's shape: capture and replay of the AR step, the verify steps of
every depth, the drafter's passes (no host synchronisation), and bit-identical logits between
1-row and k-row steps — the property that makes greedy DSpark equal AR."""

from __future__ import annotations

import pytest
import torch

from engine.dspark import SpecOptions, random_drafter, use_drafter
from engine.dspark.drafter import DrafterRuntime
from engine.generate import Engine
from engine.graphs import Replayable
from engine.model import STEP_ROWS
from kernels.common import norm_ahead
from models import logits_by_rows, random_ids, random_model

CONTEXTS = (1000, 7900)


@pytest.fixture(scope="module")
def loaded():
    return random_model()


@pytest.fixture(scope="module")
def engine(loaded):
    return Engine(loaded=loaded, device="cuda")


@pytest.mark.parametrize("ctx", CONTEXTS)
def test_k_row_steps_are_bit_identical_to_one_row_steps(engine, ctx):
    v = engine.config.vocab_size
    ids, fed = random_ids(ctx, v, seed=ctx), random_ids(42, v, seed=ctx + 1)  # 42 = a multiple of 1..7
    one = logits_by_rows(engine, ids, fed, 1)
    assert torch.isfinite(one).all()
    for rows in range(2, STEP_ROWS):
        assert torch.equal(logits_by_rows(engine, ids, fed, rows), one), f"{rows}-row verify differs from 1-row decode"


def test_captured_step_replays_what_eager_computes(engine, loaded):
    """The same step, replayed from its graph and run eagerly on a second engine: identical logits."""
    eager = Engine(loaded=loaded, device="cuda", cuda_graphs=False)
    v = engine.config.vocab_size
    ids, fed = random_ids(3000, v, seed=5), random_ids(14, v, seed=6)
    for rows in (1, 7):
        assert torch.equal(logits_by_rows(engine, ids, fed, rows), logits_by_rows(eager, ids, fed, rows))
    s = engine.session(len(ids), 8)
    assert s.use_graphs and all(st.graph is not None for st in s._steps.values()), "steps were not captured"


@pytest.mark.parametrize("ctx", CONTEXTS)
def test_ar_decode_through_graphs_equals_eager_decode(engine, loaded, ctx):
    eager = Engine(loaded=loaded, device="cuda", cuda_graphs=False)
    ids = random_ids(ctx, engine.config.vocab_size, seed=ctx + 7)
    a = engine.generate(ids, 64, stop_at_eos=False)
    b = eager.generate(ids, 64, stop_at_eos=False)
    assert a.tokens == b.tokens and len(a.tokens) == 64


def test_sync_debug_mode_catches_the_pattern_that_broke_capture():
    t = torch.arange(12, device="cuda", dtype=torch.float32).reshape(4, 3)
    i = torch.tensor(2, device="cuda")
    torch.cuda.set_sync_debug_mode("error")
    try:
        with pytest.raises(RuntimeError, match="synchroniz"):
            t[i]
        t.index_select(0, i.reshape(1))  # the device-side gather: fine
    finally:
        torch.cuda.set_sync_debug_mode("default")


def test_drafter_passes_never_synchronise_and_replay_as_graphs(engine):
    files = random_drafter(engine, seed=2)
    use_drafter(engine, files, SpecOptions())
    ids = random_ids(2000, engine.config.vocab_size, seed=9)
    s = engine.session(len(ids), 64, capture_layers=files.config.target_layers)
    rt = DrafterRuntime(engine.model, files, s.capacity, s.io, s.state)
    with torch.inference_mode():
        _, captured, _ = engine.prefill(s, ids)
        rt.prefill_context(captured, len(ids))
        s.io.set_rows([ids[-1]], len(ids))
        s.state.copy_(torch.tensor([1, len(ids), 0, 0, len(ids)], device="cuda"))
        torch.cuda.synchronize()
        torch.cuda.set_sync_debug_mode("error")
        try:
            rt.ctx_update()
            rt.draft()
        finally:
            torch.cuda.set_sync_debug_mode("default")
        eager = (rt.drafts.clone(), rt.depth.clone(), rt.base_logits.clone())

        def both() -> None:
            rt.ctx_update()
            rt.draft()

        with s.preserved():
            graph = Replayable(both, engine.model.device, use_graph=True)
        assert graph.graph is not None
        rt.drafts.zero_()
        graph()
        torch.cuda.synchronize()
    assert torch.equal(rt.drafts, eager[0]) and torch.equal(rt.depth, eager[1])
    assert torch.equal(rt.base_logits, eager[2])
    assert torch.equal(s.io.tokens[1 : 1 + files.config.proposals], rt.drafts)


@pytest.mark.parametrize("ctx", (1024, 7936))
def test_captured_prefill_computes_what_the_eager_prefill_computes(engine, loaded, ctx):
    """A prompt length is captured on its second sight: the third prefill replays the graph. Logits,
    captured residuals and the KV cache it leaves are bit-identical to the eager prefill's, and the
    graph's sync-free (every later request of that length replays it)."""
    from engine.session import PrefillGraph

    eager = Engine(loaded=loaded, device="cuda", cuda_graphs=False)
    v = engine.config.vocab_size
    s = engine.session(ctx, 16, capture_layers=(2, 15, 28))
    e = eager.session(ctx, 16, capture_layers=s.capture_layers)
    s._prefills.pop(ctx, None)
    s._prefill_seen.discard(ctx)
    for seed in (1, 2, 3):
        ids = random_ids(ctx, v, seed=ctx + 100 * seed)
        got_logits, got_caps, _ = engine.prefill(s, ids)
        got_logits, got_caps = got_logits.clone(), [c.clone() for c in got_caps]
        want_logits, want_caps, _ = eager.prefill(e, ids)
        assert torch.equal(got_logits, want_logits), f"prefill {seed} of {ctx} tokens: logits differ"
        assert all(torch.equal(a, b) for a, b in zip(got_caps, want_caps)), "captured residuals differ"
        assert torch.equal(s.cache.k[:, :, :, :ctx], e.cache.k[:, :, :, :ctx]), "the KV cache differs"
        assert torch.equal(s.cache.v[:, :, :, :ctx], e.cache.v[:, :, :, :ctx])
        graphs = s._prefills
        assert (ctx in graphs) == (seed >= 2), f"prefill {seed}: captured {sorted(graphs)}"
    assert isinstance(graphs[ctx], PrefillGraph)


def test_dspark_captures_every_device_loop_launch_before_its_prefill(engine):
    """Captured on first use, a launch size landed inside a timed decode now and then (a request 50-90 %
    slower with the same tokens): every size the loop can pick is captured with the session's graphs."""
    from engine.dspark.speculate import _graphs_for

    files = random_drafter(engine, seed=4)
    use_drafter(engine, files, SpecOptions(loop_chunk=8))
    ids = random_ids(1500, engine.config.vocab_size, seed=11)
    s = engine.session(len(ids), 64, capture_layers=files.config.target_layers)
    g = _graphs_for(engine, s)
    assert sorted(g.fused) == [1, 2, 4, 8] and all(r.graph is not None for r in g.fused.values())
    before = dict(g.fused)
    r = engine.generate(ids, 64, dspark=True, stop_at_eos=False)
    assert len(r.tokens) == 64 and g.fused == before, "a launch was captured during the decode"


def test_programmatic_dependent_launch_changes_no_bit(loaded, monkeypatch):
    """Every step kernel is launched with programmatic dependent launch where the device has it
    (Hopper and later; kernels.common): the same steps and the same greedy decode, captured with it on
    and with it off (DSPARK_PDL=0), give the same bits."""
    from kernels import common

    dev = torch.cuda.current_device()
    assert common._pdl_on(dev) == (torch.cuda.get_device_capability(dev)[0] >= 9)
    v = loaded.config.vocab_size
    ids, fed = random_ids(3000, v, seed=11), random_ids(14, v, seed=12)

    def run():
        e = Engine(loaded=loaded, device="cuda")
        return [logits_by_rows(e, ids, fed, rows) for rows in (1, 7)], e.generate(ids, 64, stop_at_eos=False).tokens

    on = run()
    monkeypatch.setenv("DSPARK_PDL", "0")
    common._pdl_on.cache_clear()
    try:
        assert common.pdl_args(torch.empty(1, device="cuda")) == {"USE_PDL": False}
        off = run()
    finally:
        monkeypatch.delenv("DSPARK_PDL")
        common._pdl_on.cache_clear()
    assert all(torch.equal(a, b) for a, b in zip(on[0], off[0])) and on[1] == off[1]


@pytest.mark.parametrize("switch, default", [("DSPARK_L2_PREFETCH", True), ("DSPARK_LM_HEAD_PREFETCH", False)])
def test_l2_prefetches_change_no_bit(loaded, kernel_switch, switch, default):
    """The L2 prefetches before the dependency wait (every latency-bound kernel's weights and keys; the LM head's
    tiles with DSPARK_LM_HEAD_PREFETCH=1) read nothing into registers: steps of 1 and 7 rows and a greedy
    decode give the same bits with the switch on and off."""
    v = loaded.config.vocab_size
    ids, fed = random_ids(3000, v, seed=21), random_ids(14, v, seed=22)

    def run(on: bool):
        kernel_switch(switch, on)
        e = Engine(loaded=loaded, device="cuda")
        return [logits_by_rows(e, ids, fed, rows) for rows in (1, 7)], e.generate(ids, 64, stop_at_eos=False).tokens

    base, other = run(default), run(not default)
    assert all(torch.equal(a, b) for a, b in zip(base[0], other[0])) and base[1] == other[1]


@pytest.mark.parametrize("ctx", (1024, 4096, 7936))
def test_captured_prefill_context_writes_what_the_eager_one_writes(engine, ctx):
    """The drafter's context over a prompt's last window positions runs as one captured graph (static
    buffers, positions from a tensor, captured before the prefill): the K/V it leaves are the eager
    path's bit for bit, at every prompt length the bot scores, and nothing lands outside the window."""
    from engine.dspark.speculate import _graphs_for

    files = random_drafter(engine, seed=5)
    use_drafter(engine, files, SpecOptions())
    window = files.config.window
    ids = random_ids(ctx, engine.config.vocab_size, seed=ctx + 7)
    s = engine.session(len(ids), 64, capture_layers=files.config.target_layers)
    g = _graphs_for(engine, s)
    assert g.ctx_rows is not None and g.ctx_rows.graph is not None
    with torch.inference_mode():
        _, captured, _ = engine.prefill(s, ids)
        ref = DrafterRuntime(engine.model, files, s.capacity, s.io, s.state)
        ref.prefill_context(captured, len(ids))
        g.rt.k.zero_()
        g.rt.v.zero_()
        g.prefill_context(captured, len(ids))
        torch.cuda.synchronize()
    lo = len(ids) - window
    assert torch.equal(g.rt.k[:, :, lo : len(ids)], ref.k[:, :, lo : len(ids)])
    assert torch.equal(g.rt.v[:, :, lo : len(ids)], ref.v[:, :, lo : len(ids)])
    assert g.rt.k[:, :, lo : len(ids)].any() and not g.rt.k[:, :, :lo].any() and not g.rt.k[:, :, len(ids) :].any()


def test_a_capture_survives_the_collector_freeing_old_graphs():
    """Captured graphs in a reference cycle, dropped just as the next capture starts, and the collector
    run by an allocation inside that capture (as happened to the GPU suite on 2026-12-03: a dropped
    Session and its DSpark graphs). Destroying a graph during a capture invalidates the capture; the
    capture pauses the automatic collector, so it completes and replays."""
    import gc

    from engine.graphs import Replayable

    dev = torch.device("cuda")
    x = torch.zeros(4, device=dev)

    class Holder:  # a reference cycle, as a Session and its DSpark graphs make
        pass

    old = gc.get_threshold()
    gc.set_threshold(0)  # no automatic collection until the capture starts
    try:
        keep = []
        for _ in range(4):
            h = Holder()
            h.self = h
            h.graphs = [Replayable(lambda: x.add_(1), dev, True) for _ in range(3)]
            keep.append(h)
        seen = []

        def fn() -> None:
            if torch.cuda.is_current_stream_capturing():
                keep.clear()  # the cycles are garbage now; only the collector can free them
                gc.set_threshold(1, 1, 1)  # the next allocation would run it
                seen.append(gc.isenabled())
            junk = [[i] for i in range(100)]
            x.mul_(len(junk) // 100)

        g = Replayable(fn, dev, True)
    finally:
        gc.set_threshold(*old)
        gc.collect()
    assert seen == [False]
    g()
    torch.cuda.synchronize()


@pytest.mark.parametrize("rows", (1, 7))
def test_phase_stamps_change_no_bit_and_come_in_order(engine, rows):
    """bench/kernel_phases.py's stamps (kernels.common.Tracer): a step captured with them gives the logits
    and cache of the step without them, and every program of every traced launch stamps its entry, its
    wait, its input and product (where the kernel has them) and its end in that order."""
    from engine.model import StepIO
    from kernels.common import Tracer, tracing

    model, ctx, cap = engine.model, 3000, 4096
    ids = random_ids(rows, engine.config.vocab_size, seed=rows)

    def step(tracer):
        cache = model.new_cache(cap)
        io = StepIO(model, cap)
        io.set_rows(ids, ctx)

        def run():
            if tracer is not None:
                tracer.rewind()
            model.step(io, rows, cache)

        g = torch.cuda.CUDAGraph()
        run()  # compiles
        with torch.cuda.graph(g):
            run()
        g.replay()
        torch.cuda.synchronize()
        return io.logits[:rows].clone(), cache.k.clone()

    plain = step(None)
    tracer = Tracer("cuda")
    with tracing(tracer):
        traced = step(tracer)
    assert torch.equal(plain[0], traced[0]) and torch.equal(plain[1], traced[1])
    n = engine.config.n_layers
    assert tracer.names == ["qkv", "attn", "combine", "linear", "swiglu", "linear"] * n + ["lm_head"]
    stamps = tracer.buf.cpu()
    own_norm = []  # the launches with an RMSNorm pass of their own (stamp 2)
    for i, (name, programs) in enumerate(zip(tracer.names, tracer.grids)):
        s = stamps[i, :programs]
        assert (s[:, 0] > 0).all() and (s[:, 4] > 0).all(), f"launch {i} ({name}): a program did not stamp"
        for a, b in ((0, 1), (1, 2), (2, 3), (3, 4)):
            later, earlier = s[:, b], s[:, a]
            ok = (later == 0) | (earlier == 0) | (later >= earlier)
            assert ok.all(), f"launch {i} ({name}): stamp {b} before stamp {a}"
        if name in ("qkv", "swiglu", "lm_head"):  # the kernels with an RMSNorm input and a product
            assert (s[:, 3] > 0).all() and ((s[:, 2] > 0).all() or (s[:, 2] == 0).all())
            if (s[:, 2] > 0).all():
                own_norm.append(name)
        assert (stamps[i, programs:] == 0).all()
    # where the o-proj and the down-proj prepare the next norm (fused_linear.NormAhead), only layer 0's QKV (its
    # input is the embedding's) and the LM head normalise their input themselves
    ahead = norm_ahead(model.layers[0].wqkv.nbytes) and norm_ahead(model.layers[0].w_gate.nbytes * 2)
    assert own_norm == (["qkv", "lm_head"] if ahead else ["qkv", "swiglu"] * n + ["lm_head"])
