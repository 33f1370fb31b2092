"""Pieces every step kernel shares."""

from __future__ import annotations

import os

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
