"""Pieces every step kernel shares."""

from __future__ import annotations

import functools
import os

import torch
import triton
import triton.language as tl

# Triton's CPU interpreter multiplies bfloat16 operands as their raw uint16 bits (triton 3.9), so
# under TRITON_INTERPRET=1 the kernels upcast dot operands first. bf16 x bf16 products are exact
# in float32, so this is the same arithmetic the tensor cores do (float32 accumulation). The
# interpreter's tl.dot is numpy's matmul, whose BLAS (OpenBLAS on AVX2 machines) rounds a row
# differently depending on where it sits in the tile: there the product is a broadcast multiply and
# a sum over K, which numpy accumulates in the same order for every row (batch invariance, as on
# the GPU).
UPCAST_DOT = os.environ.get("TRITON_INTERPRET", "0") == "1"


@triton.jit
def mma(a, b, acc, IEEE: tl.constexpr, UPCAST: tl.constexpr):
    """acc + a @ b with float32 accumulation; IEEE keeps float32 operands out of tf32."""
    if UPCAST:
        return acc + tl.sum(a.to(tl.float32)[:, :, None] * b.to(tl.float32)[None, :, :], axis=1)
    if IEEE:
        return tl.dot(a, b, acc, input_precision="ieee")
    else:
        return tl.dot(a, b, acc)


# Programmatic dependent launch (Hopper and later): each step kernel is launched with the launch_pdl
# attribute, so the GPU may start the next kernel's blocks while this one finishes; every kernel
# starts with `pdl_start`, which waits until the previous kernel is complete and its writes are
# visible (griddepcontrol.wait) before touching memory, then lets its own successor launch. Each
# kernel waiting on its predecessor keeps the chain in order; the arithmetic is unchanged, so logits
# stay bit-identical. DSPARK_PDL=0 switches it off (bench/pdl_check.py measures both in one run).
@functools.cache
def _pdl_on(device_index: int) -> bool:
    if os.environ.get("DSPARK_PDL", "1") == "0" or UPCAST_DOT:
        return False
    return torch.cuda.get_device_capability(device_index)[0] >= 9


def pdl_args(t: torch.Tensor) -> dict:
    """The launch keywords of a step kernel whose tensors live where `t` does."""
    if t.is_cuda and _pdl_on(t.device.index if t.device.index is not None else torch.cuda.current_device()):
        return {"USE_PDL": True, "launch_pdl": True}
    return {"USE_PDL": False}


@triton.jit
def pdl_start(USE_PDL: tl.constexpr):
    """First statement of every step kernel: wait for the previous kernel, then let the next one launch."""
    if USE_PDL:
        tl.extra.cuda.gdc_wait()
        tl.extra.cuda.gdc_launch_dependents()
