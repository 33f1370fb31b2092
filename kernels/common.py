"""Pieces every step kernel shares."""

from __future__ import annotations

import contextlib
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


@triton.jit
def mma_xw(a, w, acc, SWAP: tl.constexpr, IEEE: tl.constexpr, UPCAST: tl.constexpr):
    """A K step of a step kernel's product: acc + a @ w^T (a [M, K] the rows' operand, w [N, K] a weight tile), or
    with SWAP its transpose, acc + w @ a^T (acc [N, M]; tuning.LaunchConfig.swap_ab)."""
    if SWAP:
        return mma(w, tl.trans(a), acc, IEEE, UPCAST)
    else:
        return mma(a, tl.trans(w), acc, IEEE, UPCAST)


@triton.jit
def halves_back(acc_t, HALF: tl.constexpr, BLOCK_M: tl.constexpr):
    """A product computed transposed over a tile of two stacked halves of weight rows ([2 * HALF, BLOCK_M]: QKV's
    rotate-half halves, gate's and up's rows) as its two halves transposed back, each [BLOCK_M, HALF]."""
    halves = tl.permute(tl.reshape(acc_t, (2, HALF, BLOCK_M)), (2, 1, 0))  # [BLOCK_M, HALF, 2]
    return tl.split(halves)


@triton.jit
def mma3(a, b, acc, UPCAST: tl.constexpr):
    """acc + a @ b batched over the first axis (a [S, M, K], b [S, K, N]), float32 accumulation; on the
    tensor cores each batch is its own chain of products (tuning.LaunchConfig.k_split)."""
    if UPCAST:
        return acc + tl.sum(a.to(tl.float32)[:, :, :, None] * b.to(tl.float32)[:, None, :, :], axis=2)
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


@functools.cache
def prefetch_env_on() -> bool:
    return os.environ.get("DSPARK_L2_PREFETCH", "1") != "0"


# Prefetching pays where a kernel is latency-bound: a few MB at most (the bundled model's matrices are
# <= 1.8 MB, a layer's keys and values at 8k 7 MB). A kernel that streams tens of MB is bandwidth-bound;
# prefetching all of it while the previous kernel streams its own only competes for DRAM and L2 (the
# 1B guard shape, whose matrices are 8-34 MB, decoded 17 % slower with it).
PREFETCH_MAX_BYTES = 8 << 20


# An RMSNorm's pass over x (sum of squares per row, chunk by chunk) of at most this many BLOCK_K steps may
# be unrolled (tl.static_range: the same arithmetic in the same order). A loop without a dot is not
# software-pipelined, so looped each chunk's load waits for the one before; unrolled they are all in
# flight at once. DSPARK_UNROLL_NORM=0 turns it off (bench/pdl_check.py --switch DSPARK_UNROLL_NORM measures both).
UNROLL_MAX_STEPS = 16


@functools.cache
def unroll_env_on() -> bool:
    return os.environ.get("DSPARK_UNROLL_NORM", "1") != "0"


# A decode attention split of one block of keys loads them before its dependency wait (decode_attention,
# `fresh`): only the layer's QKV kernel, launched just before it, writes the cache, at its rows'
# positions, and a block holding one of those is loaded again after the wait. The same values either
# way, so the same bits. DSPARK_ATTN_PRELOAD=0 turns it off (bench/step_sweep.py --switch measures both).
@functools.cache
def preload_on() -> bool:
    return os.environ.get("DSPARK_ATTN_PRELOAD", "1") != "0"


# An RMSNorm may be prepared by the kernel that writes its input (kernels.fused_linear.NormAhead): the o-proj for
# gate/up's norm, the down-proj for the next layer's QKV. The consumer then has no norm pass before its walk (its
# rstd comes from the producer's sums, loaded while the walk runs) and reads x * norm_weight as it reads its
# weights. The rounding differs from the consumer's own norm (rstd scales the product after the walk); each
# row's arithmetic stays its own. Only where the consumer is latency-bound. DSPARK_NORM_AHEAD=0 turns it off (a
# measurement switch; docs/perf.md, 2026-12-04 seventeenth session).
@functools.cache
def norm_ahead_env_on() -> bool:
    return os.environ.get("DSPARK_NORM_AHEAD", "1") != "0"


def norm_ahead(consumer_weight_bytes: int) -> bool:
    """Whether the step prepares the norm of a kernel whose weights are this many bytes in its producer."""
    return norm_ahead_env_on() and latency_bound(consumer_weight_bytes)


def unroll_norm(k: int, block_k: int) -> int:
    """The UNROLL_NORM of a kernel whose norm pass is k long in steps of block_k: k, or 0 (a loop)."""
    return k if unroll_env_on() and -(-k // block_k) <= UNROLL_MAX_STEPS else 0


# The LM head streams its weights from HBM (56 MB for the bundled model), so PREFETCH_MAX_BYTES keeps its prefetch
# off; yet the kernel before it (the last down-proj) is latency-bound and leaves HBM nearly idle while the head's
# programs, launched early, wait. DSPARK_LM_HEAD_PREFETCH=1: each of them asks L2 for its own tile before its wait,
# so the head's stream starts in the down-proj's time; at most LM_HEAD_PREFETCH_MAX_BYTES of weights (about L2's
# size; a guard model's head of hundreds of MB would only evict itself). Reads nothing into registers, so no
# result can change. A measurement switch, off by default (bench/step_sweep.py --switch).
LM_HEAD_PREFETCH_MAX_BYTES = 64 << 20


@functools.cache
def lm_head_prefetch_env_on() -> bool:
    return os.environ.get("DSPARK_LM_HEAD_PREFETCH", "0") == "1"


def lm_head_prefetch_on(pdl: dict, weight_bytes: int) -> bool:
    """Whether an LM head launch with these `pdl_args` and weights prefetches each program's tile."""
    return (pdl["USE_PDL"] and weight_bytes <= LM_HEAD_PREFETCH_MAX_BYTES and prefetch_env_on()
            and lm_head_prefetch_env_on())


def prefetch_on(pdl: dict, kernel_bytes: int) -> bool:
    """Whether a launch with these `pdl_args`, whose programs read `kernel_bytes` of weights or cache in
    all, prefetches them (DSPARK_L2_PREFETCH=0: never; a bench switch)."""
    return pdl["USE_PDL"] and kernel_bytes <= PREFETCH_MAX_BYTES and prefetch_env_on()


def latency_bound(kernel_bytes: int) -> bool:
    """Whether a kernel that reads `kernel_bytes` of weights is latency-bound (at most PREFETCH_MAX_BYTES):
    there it loads its epilogue's operands before the K walk (EARLY), so their latency overlaps the walk
    (the step -3 %, AR +3.0 % by the bot; rounding not bit-identical to the late loads on the GPU, see
    fused_linear.linear_tile).
    On bandwidth-bound shapes the registers held through the walk cost more: the Llama-3.2-1B guard
    shape decoded at 0.927x with it everywhere (docs/perf.md, 2026-12-02 fourth session)."""
    return kernel_bytes <= PREFETCH_MAX_BYTES


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


# A kernel launched early by PDL spends the previous kernel's tail waiting in `pdl_start`. What it
# reads that no earlier kernel writes (its weights, the cache's keys) can already be on its way into
# L2 then: `l2_prefetch` before `pdl_start` asks L2 for one program's contiguous byte range, one
# `prefetch.global.L2` per 128-byte line. A prefetch reads nothing into registers and writes nothing,
# so no result can change; off with PDL (the interpreter has no PTX).
L2_LINE = 128


def prefetch_lines(n_bytes: int) -> int:
    """The LINES of an `l2_prefetch` of n_bytes: a power of two (one tensor of line offsets)."""
    return triton.next_power_of_2(max(1, -(-n_bytes // L2_LINE)))


@triton.jit
def l2_prefetch(ptr, n_bytes, LINES: tl.constexpr, USE_PDL: tl.constexpr):
    """Prefetch [ptr, ptr + n_bytes) into L2 (n_bytes > 0); lines past the end repeat the last one."""
    if USE_PDL:
        off = tl.minimum(tl.arange(0, LINES).to(tl.int64) * 128, (n_bytes - 1).to(tl.int64))
        p = ptr.to(tl.pointer_type(tl.int8), bitcast=True) + off
        tl.inline_asm_elementwise("prefetch.global.L2 [$1];\n\tmov.u32 $0, 0;", "=r,l", [p], dtype=tl.int32,
                                  is_pure=False, pack=1)


# Phase stamps, for bench/kernel_phases.py only. With a Tracer installed (`tracing`), each launch of a step
# kernel (QKV, the attention's two passes, every linear) gets its own slot of the tracer's buffer, and each
# of its programs writes there the GPU's %globaltimer (ns) at five points: 0 its entry, 1 after its
# dependency wait, 2 when its input is ready (the RMSNorm's rstd, the attention's queries; 0 where the
# kernel has no such point), 3 when its product is in registers (0 where the tile stores it itself), 4 at
# its end, after its stores are issued. A stamp that follows a result waits for it (the timer read takes
# the result as an operand). Off (the default) the kernels compile exactly as without: TRACE is a
# constexpr and the stamps are not in the code.
STAMPS = 5


class Tracer:
    """The stamps of up to `launches` kernel launches of `programs` programs each, in launch order (a
    CUDA graph captured while the tracer is installed replays into the same slots)."""

    def __init__(self, device, launches: int = 256, programs: int = 512):
        self.buf = torch.zeros((launches, programs, STAMPS), dtype=torch.int64, device=device)
        self.names: list[str] = []
        self.grids: list[int] = []

    def slot(self, name: str, programs: int) -> torch.Tensor:
        if len(self.names) >= self.buf.shape[0]:
            raise ValueError(f"tracer: more than {self.buf.shape[0]} launches")
        if programs > self.buf.shape[1]:
            raise ValueError(f"tracer: {name} has {programs} programs, the buffer {self.buf.shape[1]}")
        self.names.append(name)
        self.grids.append(programs)
        return self.buf[len(self.names) - 1]

    def rewind(self) -> None:
        """The next launch takes slot 0 again (each call of a function a graph will capture starts here)."""
        self.names.clear()
        self.grids.clear()


_tracer: Tracer | None = None


@contextlib.contextmanager
def tracing(tracer: Tracer):
    """Every step kernel launched inside the block stamps its phases into `tracer` (CUDA only: the stamps
    are PTX, which the interpreter cannot run)."""
    global _tracer
    if UPCAST_DOT or tracer.buf.device.type != "cuda":
        raise ValueError("phase stamps need a CUDA device (the interpreter has no %globaltimer)")
    _tracer, old = tracer, _tracer
    try:
        yield tracer
    finally:
        _tracer = old


def trace_args(name: str, programs: int, like: torch.Tensor) -> dict:
    """The launch keywords of the phase stamps: a slot of the installed tracer, or none (`like`, any
    tensor of the launch, stands in for the unused pointer)."""
    if _tracer is None:
        return {"trace_ptr": like, "TRACE": False}
    return {"trace_ptr": _tracer.slot(name, programs), "TRACE": True}


@triton.jit
def stamp(trace_ptr, pid, j: tl.constexpr, dep):
    """Stamp j of program pid: %globaltimer once every element of `dep` (a 1-D or 2-D tensor) is ready."""
    d = dep.to(tl.float32).to(tl.int32, bitcast=True)
    t = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l,r", [d], dtype=tl.int64, is_pure=False, pack=1)
    if len(t.shape) == 2:
        t = tl.max(t, axis=1)
    tl.store(trace_ptr + pid * 5 + j, tl.max(t, axis=0))  # 5: STAMPS


@triton.jit
def stamp_now(trace_ptr, pid, j: tl.constexpr):
    """Stamp j of program pid: %globaltimer when the program gets here."""
    stamp(trace_ptr, pid, j, tl.zeros([1], dtype=tl.float32))
