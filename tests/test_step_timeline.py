"""bench/step_timeline.py's reading of a profiled step (the GPU part runs on the device): kernels named
by their role in a layer, and each role's share of the step as the distance between consecutive ends."""

from __future__ import annotations

import importlib.util
from pathlib import Path

_spec = importlib.util.spec_from_file_location("step_timeline", Path(__file__).resolve().parents[1] / "bench" / "step_timeline.py")
step_timeline = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(step_timeline)

LAYER = ["_qkv_rope_kernel", "_attn_split_kernel", "_attn_combine_kernel"] + ["_fused_linear_kernel"] * 3
STEP = ["_embedding_kernel"] + LAYER * 2 + ["_fused_linear_kernel"]


def test_roles_follow_the_layer_order_and_the_last_linear_is_the_lm_head():
    assert step_timeline.roles(STEP) == ["embedding", "qkv", "attn", "combine", "o_proj", "gate_up", "down",
                                         "qkv", "attn", "combine", "o_proj", "gate_up", "down", "lm_head"]


def test_a_probe_kernel_in_a_linear_place_takes_its_role():
    names = [n.replace("_fused_linear_kernel", "_linear_smem_kernel") if i in (4, 6) else n for i, n in enumerate(STEP)]
    assert step_timeline.roles(names)[4:7] == ["o_proj", "gate_up", "down"]


def test_each_role_adds_the_distance_from_the_previous_kernels_end():
    # two replays; each kernel starts 0.5 us before the previous one ends (launched early) and the
    # down-proj ends 3 us after the gate/up, every other kernel 1 us after its predecessor
    kernels = []
    t = 0.0
    for _ in range(2):
        for role in step_timeline.roles(STEP):
            end = t + (3.0 if role == "down" else 1.0)
            kernels.append((role, t - 0.5, end))
            t = end
        t += 50.0
    got = step_timeline.summarize([(n, s, e) for n, s, e in zip([*STEP, *STEP], (k[1] for k in kernels), (k[2] for k in kernels))],
                                  len(STEP))
    assert got["kernels"] == len(STEP) and got["step_us"] == 1.0 + 11 * 1.0 + 2 * 3.0 + 0.5  # the embedding, 11 kernels, two downs, its early start
    down, qkv = got["roles"]["down"], got["roles"]["qkv"]
    assert (down["n"], down["adds_us"], down["adds_per_kernel_us"]) == (2, 6.0, 3.0)
    assert (qkv["n"], qkv["adds_us"], qkv["start_us"]) == (2, 2.0, -0.5)
    assert down["dur_us"] == 3.5 and "embedding" not in got["roles"]  # the first kernel adds nothing: it starts the step
