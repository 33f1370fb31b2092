"""bench/kernel_phases.py's reading of the phase stamps (the stamps themselves are PTX: the GPU suite runs
them), and the tracer that hands each launch its slot."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
import torch

from kernels.common import Tracer, trace_args, tracing

_spec = importlib.util.spec_from_file_location("kernel_phases", Path(__file__).resolve().parents[1] / "bench" / "kernel_phases.py")
kernel_phases = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(kernel_phases)

LAYER = ["qkv", "attn", "combine", "linear", "swiglu", "linear"]


def test_roles_name_each_linear_by_what_came_before():
    assert kernel_phases.roles(LAYER * 2 + ["lm_head"]) == ["qkv", "attn", "combine", "o_proj", "gate_up", "down"] * 2 + ["lm_head"]


def test_the_last_ending_program_sets_the_phases_and_the_spreads_cover_all_programs():
    prev_end = 10_000
    # program 0: waits 300 ns after the predecessor's end, input 500, product 2,000, tail 400 -> ends 13,200;
    # program 1 starts earlier, passes the wait later and ends first; an unstamped input/product reads 0
    programs = [[8_000, 10_300, 10_800, 12_800, 13_200], [7_500, 10_600, 10_900, 12_000, 12_500]]
    got = kernel_phases.launch_phases(programs, prev_end)
    assert got == pytest.approx({"release": 0.3, "input": 0.5, "product": 2.0, "tail": 0.4, "adds": 3.2,
                                 "first_start": -2.5, "wait_spread": 0.3, "end_spread": 0.7})
    bare = kernel_phases.program_phases([9_000, 10_200, 0, 0, 11_000], prev_end)
    assert bare == pytest.approx({"release": 0.2, "input": 0.0, "product": 0.0, "tail": 0.8, "adds": 1.0})


def test_summarize_takes_medians_per_role_over_layers_and_replays():
    def launch(t0, adds):  # one program that waits 100 ns after t0 and ends `adds` ns after it
        return [[t0 - 1_000, t0 + 100, 0, 0, t0 + adds]]

    names = ["qkv", "attn", "qkv", "attn"]
    replays = []
    for extra in (0, 200, 400):  # three replays; the second attention is 1,000 ns longer than the first
        t, launches = 0, []
        for adds in (3_000, 2_000 + extra, 3_000, 3_000 + extra):
            launches.append(launch(t, adds))
            t += adds
        replays.append(launches)
    got = kernel_phases.summarize(replays, names)
    assert got["roles"]["attn"]["n"] == 2 and got["roles"]["qkv"]["n"] == 1  # the first launch has no predecessor
    assert got["roles"]["attn"]["adds"] == pytest.approx(2.7)  # median of 2.0, 2.2, 2.4, 3.0, 3.2, 3.4
    assert got["roles"]["qkv"]["release"] == pytest.approx(0.1)
    assert got["traced_step_us"] == pytest.approx(12.4)  # 11,000 + 200 ns, plus the first program's early start


def test_resolution_is_the_smallest_step_between_stamps():
    assert kernel_phases.resolution_ns([[[0, 64, 0, 0, 96]], [[32, 160, 0, 0, 192]]]) == 32


def test_the_tracer_gives_each_launch_its_own_slot_and_rewinds():
    tr = Tracer("cpu", launches=2, programs=4)
    a, b = tr.slot("qkv", 4), tr.slot("attn", 3)
    assert a.data_ptr() != b.data_ptr() and tr.names == ["qkv", "attn"] and tr.grids == [4, 3]
    with pytest.raises(ValueError, match="more than 2 launches"):
        tr.slot("combine", 1)
    tr.rewind()
    assert tr.slot("combine", 1).data_ptr() == a.data_ptr()
    with pytest.raises(ValueError, match="5 programs"):
        tr.slot("linear", 5)


def test_without_a_tracer_the_kernels_get_no_stamps_and_the_cpu_cannot_trace():
    x = torch.zeros(2)
    got = trace_args("qkv", 4, x)
    assert got["TRACE"] is False and got["trace_ptr"] is x
    with pytest.raises(ValueError, match="CUDA"):
        with tracing(Tracer("cpu", launches=1, programs=1)):
            pass


def test_compare_shows_each_roles_phases_before_and_after():
    phases = {"release": 0.4, "input": 0.9, "product": 3.0, "tail": 0.4, "adds": 4.7}
    before = {"ctx": 4096, "rows": 1, "step_us": 600.0, "roles": {"qkv": phases, "attn": phases}}
    after = {"ctx": 4096, "rows": 1, "step_us": 580.0, "roles": {"qkv": dict(phases, product=2.5, adds=4.2)}}
    lines = kernel_phases.compare(before, after)
    assert lines[0] == "ctx 4096 rows 1: step 600.0 -> 580.0 us"
    assert len(lines) == 2 and "product 3.00 -> 2.50" in lines[1] and "adds 4.70 -> 4.20" in lines[1]  # attn: not in after
    assert "end_spread" not in lines[1]  # not in these runs
    spread = {r: dict(p, end_spread=1.38) for r, p in before["roles"].items()}
    lines = kernel_phases.compare(dict(before, roles=spread), dict(after, roles={"attn": dict(phases, end_spread=0.7)}))
    assert lines[1].startswith("  attn") and lines[1].endswith("end_spread 1.38 -> 0.70")
