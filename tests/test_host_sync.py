"""The work that CUDA graphs capture must never synchronise with the host.

On CUDA the AR step, every verify step and both drafter passes are captured as graphs; an op that
reads a device value on the host inside them (`.item()`, `int(t)`, indexing with a 0-d tensor,
`nonzero`) is illegal during capture, and CI has no GPU to see it (every DSpark run on CUDA once
failed on `markov_v[block_tokens[0]]`). Here the same Python runs on the Triton backend (the kernels
interpreted on CPU) under a dispatch mode that records every such op. tests/gpu checks the same on
the device with `torch.cuda.set_sync_debug_mode("error")` and real graph capture.
"""

from __future__ import annotations

import traceback
from pathlib import Path

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from engine.dspark import SpecOptions, random_drafter, use_drafter
from engine.dspark.drafter import DrafterRuntime
from engine.generate import Engine
from engine.loader import LoadedModel
from engine.model import STEP_ROWS
from test_model import random_weights, tiny_config

# aten ops that read device data on the host (or size an output by it)
HOST_READS = {"aten._local_scalar_dense.default", "aten.item.default", "aten.nonzero.default", "aten.is_nonzero.default",
              "aten.equal.default", "aten.masked_select.default", "aten.unique_consecutive.default"}


class HostSyncProbe(TorchDispatchMode):
    """Records every op in HOST_READS, with where it was called from."""

    def __init__(self) -> None:
        super().__init__()
        self.hits: list[str] = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        if str(func) in HOST_READS:
            here = [f for f in traceback.extract_stack()[:-1] if "/engine/" in f.filename or "/kernels/" in f.filename]
            where = f"{Path(here[-1].filename).name}:{here[-1].lineno} {here[-1].line}" if here else "?"
            self.hits.append(f"{func} at {where}")
        return func(*args, **(kwargs or {}))


def test_the_probe_sees_a_zero_dim_tensor_index():
    table, idx = torch.arange(12.0).reshape(4, 3), torch.tensor(2)
    with HostSyncProbe() as probe:
        table[idx]  # the pattern that broke capture
    assert probe.hits and "_local_scalar_dense" in probe.hits[0]
    with torch.inference_mode(), HostSyncProbe() as probe:  # where the engine runs: dispatched as aten.item
        table[idx]
    assert probe.hits
    with HostSyncProbe() as probe:
        table.index_select(0, idx.reshape(1))  # the device-side gather that replaced it
    assert probe.hits == []


@pytest.fixture(scope="module")
def triton_engine():
    c = tiny_config("llama", n_layers=4, max_seq_len=512)
    loaded = LoadedModel(c, random_weights(c, seed=5), None, Path("<tiny>"), "tiny")
    engine = Engine(loaded=loaded, device="cpu", backend="triton")
    use_drafter(engine, random_drafter(engine, seed=0, ffn_dim=96, markov_rank=16, window=64),
                SpecOptions(confidence_threshold=0.0))
    return engine


def test_captured_steps_do_not_read_the_device_on_the_host(triton_engine):
    """The AR step, every verify depth with its greedy commit, both drafter passes, and a token tree's."""
    engine = triton_engine
    files = engine.drafter
    ids = torch.randint(0, engine.config.vocab_size, (40,), generator=torch.Generator().manual_seed(3)).tolist()
    s = engine.session(len(ids), 16, capture_layers=files.config.target_layers)
    rt = DrafterRuntime(engine.model, files, s.capacity, s.io, s.state, split=64)
    with torch.inference_mode():
        _, captured, _ = engine.prefill(s, ids)
        rt.prefill_context(captured, len(ids))
        s.io.set_rows([ids[-1]], len(ids))
        s.state.copy_(torch.tensor([1, len(ids), 0, 0, len(ids)]))
        hits = {}
        caps = torch.cat([t[0, -8:] for t in captured], dim=-1)
        pos = torch.arange(len(ids) - 8, len(ids))
        # a token tree's draft (the tree head), its verify and its commit
        rt_tree = DrafterRuntime(engine.model, files, s.capacity, s.io, s.state, split=64, tree_nodes=STEP_ROWS - 1)
        tree = [("tree draft", rt_tree.draft), ("tree step + commit", s.step(STEP_ROWS, commit=True, tree=True).fn)]
        for name, work in [("draft", rt.draft), ("ctx_update", rt.ctx_update),
                           ("prefill context rows", lambda: rt.context_rows(caps, pos))] + [
            (f"step m={m} + greedy commit", s.step(m, commit=True).fn) for m in range(1, STEP_ROWS)
        ] + [("step m=3, no commit", s.step(3, commit=False).fn)] + tree:
            with HostSyncProbe() as probe:
                work()
            if probe.hits:
                hits[name] = probe.hits
    assert hits == {}, f"host synchronisation inside captured work: {hits}"


def test_the_capture_pauses_the_collector_and_restores_it():
    """A graph freed by Python's cyclic collector in the middle of another capture invalidates that
    capture (tests/gpu: test_a_capture_survives_the_collector_freeing_old_graphs), so the capture runs
    with the automatic collector off; it is restored after, also on error, and left off if it was."""
    import gc

    from engine.graphs import no_automatic_gc

    was = gc.isenabled()
    try:
        gc.enable()
        with no_automatic_gc():
            assert not gc.isenabled()
        assert gc.isenabled()
        with pytest.raises(RuntimeError), no_automatic_gc():
            raise RuntimeError("capture failed")
        assert gc.isenabled()
        gc.disable()
        with no_automatic_gc():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        (gc.enable if was else gc.disable)()
