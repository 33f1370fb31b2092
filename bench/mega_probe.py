"""Issue 15: is a whole-step megakernel worth building? A probe, not the engine. Measured on an H100 on 2026-12-06
(docs/perf.md, twenty-eighth session): no. Its barriers alone cost half of the launch chain's step, and its
tiles are slower than the chain's kernels even without them.

The fourth session's persistent step (kernels/persistent_step.py, removed on 2026-12-06) was slower than the launch chain for two
reasons this probe removes, so that what is left is the design's own cost:
  * its phases ran the separate kernels' tiles (9-48 programs of a 132-SM grid, each walking K through a
    cp.async pipeline after the wait); here every phase is spread over the whole grid in small tiles whose
    weights (and the attention's keys and values) are loaded into registers *before* the phase's wait, so
    that after it a tile only reads its input (from L2), multiplies on the CUDA cores and stores;
  * its barrier was one counter per phase that every tile added to and every program polled with atomic
    read-modify-writes; here (poll 0) each program owns a flag word it sets with one release write and a waiter
    reads all the flags with acquire loads, or (poll 1) every program adds 1 to the phase's counter (release) and
    a waiter polls that one address with plain acquire loads.
One program per SM; phases per layer as in the engine: 0 RMSNorm+QKV (k, v into the cache; no RoPE here),
1 attention splits (SPLIT keys each; the split holding a row's fresh key re-reads its block after the wait),
2 the splits' combine, 3 o-proj + residual, 4 RMSNorm + gate/up + SwiGLU, 5 down-proj + residual. No embedding,
final norm or LM head (the engine's would follow unchanged). A program with no tile in a phase does not wait for
it. Every row's arithmetic is the same whatever the number of rows (one fixed BLOCK_M, rows taken one at a time),
so a k-row step is bit-identical to 1-row steps.

Modes (--modes): full; nowait (no barriers: the tiles' own time, wrong results); nowork (the barriers alone).
Poll 0: program p's flag after phase g of a launch is base + g + 1, base its value when the launch began (every
program ends a launch at the same value). Poll 1: the counters reach epoch * programs, each program keeping the
launch count in its own word. Both compare by signed difference, so the counts may wrap.

    python bench/mega_probe.py [--contexts 1024,4096,7936] [--rows 1,7] [--configs SPLIT:WARPS:POLL,...]
                               [--replays 200] [--baseline]     (CUDA: checks, then times; --check: checks only)
    TRITON_INTERPRET=1 python bench/mega_probe.py              (CPU: the tiles' math on a small shape)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
from pathlib import Path

import torch
import triton
import triton.language as tl

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BLOCK_M = 8  # rows a launch may carry (fixed: every row's reduction tree is the same whatever M is)
MAX_SPIN = 1 << 16  # polls before a wait gives up (tens of ms): an error word, never a hung GPU
PHASES = 6


@triton.jit
def _ld_acquire(ptrs):
    return tl.inline_asm_elementwise("ld.acquire.gpu.global.b32 $0, [$1];", "=r,l", [ptrs], dtype=tl.int32,
                                     is_pure=False, pack=1)


@triton.jit
def _wait_all(flags_ptr, g, base, NP, err_ptr, ok, NPB: tl.constexpr, MAX_SPIN: tl.constexpr, SYNC: tl.constexpr,
              POLL: tl.constexpr):
    """Wait until every program is done with phase g - 1; False once a wait of this program gave up (it then
    runs on without waiting: wrong results and the error word, never a hang).
    POLL 0: each program's own flag (base + phases done), all of them read with acquire loads.
    POLL 1: one counter per phase that every program adds 1 to (release); done at base * NP (base = the launch's
    epoch), one address polled with acquire loads."""
    if SYNC:
        if POLL == 0:
            offs = tl.arange(0, NPB)
            live = offs < NP
            v = _ld_acquire(flags_ptr + offs)
            behind = tl.sum(tl.where(live & ((v - (base + g)) < 0), 1, 0), axis=0)
            it = 0
            if not ok:
                it = MAX_SPIN
            while (behind > 0) & (it < MAX_SPIN):
                v = _ld_acquire(flags_ptr + offs)
                behind = tl.sum(tl.where(live & ((v - (base + g)) < 0), 1, 0), axis=0)
                it += 1
            if behind > 0:
                tl.atomic_xchg(err_ptr, 1)
                ok = False
        else:
            if g > 0:
                ptr = flags_ptr + NPB + g - 1 + tl.arange(0, 1)
                target = base * NP
                v = tl.max(_ld_acquire(ptr), axis=0)
                it = 0
                if not ok:
                    it = MAX_SPIN
                while ((v - target) < 0) & (it < MAX_SPIN):
                    v = tl.max(_ld_acquire(ptr), axis=0)
                    it += 1
                if (v - target) < 0:
                    tl.atomic_xchg(err_ptr, 1)
                    ok = False
        tl.debug_barrier()
    return ok


@triton.jit
def _signal(flags_ptr, pid, g, base, NPB: tl.constexpr, SYNC: tl.constexpr, POLL: tl.constexpr):
    """Phase g done by this program: every thread's stores first (CTA barrier), then one release write."""
    if SYNC:
        tl.debug_barrier()
        if POLL == 0:
            tl.atomic_xchg(flags_ptr + pid, base + g + 1, sem="release", scope="gpu")
        else:
            tl.atomic_add(flags_ptr + NPB + g, 1, sem="release", scope="gpu")


@triton.jit
def _row(X, rows, m):
    """Row m of a [BLOCK_M, K] register tile (exact: the other rows contribute zeros)."""
    return tl.sum(tl.where(rows[:, None] == m, X, 0.0), axis=0)


@triton.jit
def _normed_rows(x_ptr, rows, rmask, dk, dmask, nw, D, eps):
    """The residual's rows [BLOCK_M, DP] (float32, read from L2; zeros past D and M) RMS-normalised, scaled by nw."""
    X = tl.load(x_ptr + rows[:, None] * D + dk[None, :], mask=rmask[:, None] & dmask[None, :], other=0.0,
                cache_modifier=".cg")
    rstd = 1.0 / tl.sqrt(tl.sum(X * X, axis=1) / D + eps)
    return X * rstd[:, None] * nw[None, :]


@triton.jit(do_not_specialize=["M", "n_splits", "NP", "g_first", "g_last"])
def _mega_kernel(x_ptr, qkv_ptr, a_ptr, h_ptr, part_ptr, ml_ptr, pos_ptr, k_ptr, v_ptr,
                 an_ptr, wqkv_ptr, wo_ptr, fn_ptr, wg_ptr, wu_ptr, wd_ptr, flags_ptr, err_ptr,
                 M, n_splits, NP, g_first, g_last, eps, scale_log2,
                 L: tl.constexpr, D: tl.constexpr, F: tl.constexpr, H: tl.constexpr, KVH: tl.constexpr,
                 HD: tl.constexpr, CAP: tl.constexpr, DP: tl.constexpr, FP: tl.constexpr, G: tl.constexpr,
                 GP: tl.constexpr, SPLIT: tl.constexpr, NSB: tl.constexpr, BQ: tl.constexpr, BO: tl.constexpr,
                 BGU: tl.constexpr, BDN: tl.constexpr, BLOCK_M: tl.constexpr, NPB: tl.constexpr,
                 MAX_SPIN: tl.constexpr, SYNC: tl.constexpr, WORK: tl.constexpr, POLL: tl.constexpr):
    pid = tl.program_id(0)
    base = pid * 0
    ok = pid >= 0
    if SYNC:
        base = tl.load(flags_ptr + pid) + POLL  # POLL 0: phases done so far; POLL 1: this launch's epoch
    QD: tl.constexpr = H * HD
    NQKV: tl.constexpr = (H + 2 * KVH) * HD
    rows = tl.arange(0, BLOCK_M)
    rmask = rows < M
    dk = tl.arange(0, DP)
    dmask = dk < D
    fk = tl.arange(0, FP)
    fmask = fk < F
    hd = tl.arange(0, HD)
    for g in range(g_first, g_last + 1):
        layer = g // 6
        p = g % 6
        l64 = layer.to(tl.int64)
        # A program with no tile in phase g does not wait for it: its flag only says it has nothing pending.
        if p == 0:  # RMSNorm + QKV; k, v to the cache at the rows' positions
            if pid * BQ < NQKV:
                r = pid * BQ + tl.arange(0, BQ)
                live = r < NQKV
                w = tl.load(wqkv_ptr + l64 * NQKV * D + r[:, None] * D + dk[None, :],
                            mask=live[:, None] & dmask[None, :], other=0.0)
                nw = tl.load(an_ptr + l64 * D + dk, mask=dmask, other=0.0)
                ok = _wait_all(flags_ptr, g, base, NP, err_ptr, ok, NPB, MAX_SPIN, SYNC, POLL)
                if WORK:
                    Xn = _normed_rows(x_ptr, rows, rmask, dk, dmask, nw, D, eps)
                    kv = tl.where(r >= QD, r - QD, 0) % (KVH * HD)
                    for m in range(M):
                        y = tl.sum(w.to(tl.float32) * _row(Xn, rows, m)[None, :], axis=1).to(tl.bfloat16)
                        pos = tl.load(pos_ptr + m)
                        tl.store(qkv_ptr + m * NQKV + r, y, mask=r < QD)
                        at = l64 * KVH * CAP * HD + (kv // HD) * CAP * HD + pos * HD + kv % HD
                        tl.store(k_ptr + at, y, mask=(r >= QD) & (r < QD + KVH * HD))
                        tl.store(v_ptr + at, y, mask=(r >= QD + KVH * HD) & live)
        elif p == 1:  # attention: tile (KV head, split); keys and values loaded before the wait
            t = pid
            while t < KVH * n_splits:
                kvh = t // n_splits
                s = t % n_splits
                kpos = s * SPLIT + tl.arange(0, SPLIT)
                cb = l64 * KVH * CAP * HD + kvh * CAP * HD
                kin = kpos < CAP
                kt = tl.load(k_ptr + cb + kpos[:, None] * HD + hd[None, :], mask=kin[:, None], other=0.0)
                vt = tl.load(v_ptr + cb + kpos[:, None] * HD + hd[None, :], mask=kin[:, None], other=0.0)
                ok = _wait_all(flags_ptr, g, base, NP, err_ptr, ok, NPB, MAX_SPIN, SYNC, POLL)
                if WORK:
                    p0 = tl.load(pos_ptr)
                    if s * SPLIT + SPLIT > p0:  # a fresh key (this step's rows) may lie in this split: read it again
                        kt = tl.load(k_ptr + cb + kpos[:, None] * HD + hd[None, :], mask=kin[:, None], other=0.0,
                                     cache_modifier=".cg")
                        vt = tl.load(v_ptr + cb + kpos[:, None] * HD + hd[None, :], mask=kin[:, None], other=0.0,
                                     cache_modifier=".cg")
                    gq = tl.arange(0, GP)
                    for m in range(M):
                        pos = tl.load(pos_ptr + m)
                        q = tl.load(qkv_ptr + m * NQKV + (kvh * G + gq[:, None]) * HD + hd[None, :],
                                    mask=(gq < G)[:, None], other=0.0, cache_modifier=".cg").to(tl.float32)
                        sc = tl.sum(q[:, None, :] * kt.to(tl.float32)[None, :, :], axis=2) * scale_log2  # [GP, SPLIT]
                        sc = tl.where((kpos <= pos)[None, :], sc, float("-inf"))
                        mx = tl.max(sc, axis=1)
                        pr = tl.exp2(sc - tl.where(mx == float("-inf"), 0.0, mx)[:, None])
                        ls = tl.sum(pr, axis=1)
                        acc = tl.sum(pr[:, :, None] * vt.to(tl.float32)[None, :, :], axis=1)  # [GP, HD]
                        idx = (m * H + kvh * G + gq) * n_splits + s
                        tl.store(part_ptr + idx[:, None] * HD + hd[None, :], acc, mask=(gq < G)[:, None])
                        tl.store(ml_ptr + idx * 2, mx, mask=gq < G)
                        tl.store(ml_ptr + idx * 2 + 1, ls, mask=gq < G)
                t += NP
        elif p == 2:  # the splits combined: tile (row, head)
            t = pid
            while t < M * H:
                ok = _wait_all(flags_ptr, g, base, NP, err_ptr, ok, NPB, MAX_SPIN, SYNC, POLL)
                if WORK:
                    sp = tl.arange(0, NSB)
                    smask = sp < n_splits
                    mx = tl.load(ml_ptr + (t * n_splits + sp) * 2, mask=smask, other=float("-inf"), cache_modifier=".cg")
                    ls = tl.load(ml_ptr + (t * n_splits + sp) * 2 + 1, mask=smask, other=0.0, cache_modifier=".cg")
                    pt = tl.load(part_ptr + (t * n_splits + sp)[:, None] * HD + hd[None, :], mask=smask[:, None],
                                 other=0.0, cache_modifier=".cg")
                    big = tl.max(mx, axis=0)
                    wgt = tl.where(mx == float("-inf"), 0.0, tl.exp2(mx - big))
                    out = tl.sum(wgt[:, None] * pt, axis=0) / tl.sum(wgt * ls, axis=0)
                    tl.store(a_ptr + (t // H) * QD + (t % H) * HD + hd, out.to(tl.bfloat16))
                t += NP
        elif p == 3:  # o-proj + residual
            if pid * BO < D:
                r = pid * BO + tl.arange(0, BO)
                live = r < D
                w = tl.load(wo_ptr + l64 * D * QD + r[:, None] * QD + dk[None, :],
                            mask=live[:, None] & (dk < QD)[None, :], other=0.0)
                ok = _wait_all(flags_ptr, g, base, NP, err_ptr, ok, NPB, MAX_SPIN, SYNC, POLL)
                if WORK:
                    A = tl.load(a_ptr + rows[:, None] * QD + dk[None, :], mask=rmask[:, None] & (dk < QD)[None, :],
                                other=0.0, cache_modifier=".cg").to(tl.float32)
                    res = tl.load(x_ptr + rows[:, None] * D + r[None, :], mask=rmask[:, None] & live[None, :], other=0.0,
                                  cache_modifier=".cg")
                    for m in range(M):
                        y = tl.sum(w.to(tl.float32) * _row(A, rows, m)[None, :], axis=1) + _row(res, rows, m)
                        tl.store(x_ptr + m * D + r, y, mask=live)
        elif p == 4:  # RMSNorm + gate/up + SwiGLU
            if pid * BGU < F:
                r = pid * BGU + tl.arange(0, BGU)
                live = r < F
                wg = tl.load(wg_ptr + l64 * F * D + r[:, None] * D + dk[None, :], mask=live[:, None] & dmask[None, :],
                             other=0.0)
                wu = tl.load(wu_ptr + l64 * F * D + r[:, None] * D + dk[None, :], mask=live[:, None] & dmask[None, :],
                             other=0.0)
                nw = tl.load(fn_ptr + l64 * D + dk, mask=dmask, other=0.0)
                ok = _wait_all(flags_ptr, g, base, NP, err_ptr, ok, NPB, MAX_SPIN, SYNC, POLL)
                if WORK:
                    Xn = _normed_rows(x_ptr, rows, rmask, dk, dmask, nw, D, eps)
                    for m in range(M):
                        xm = _row(Xn, rows, m)[None, :]
                        gg = tl.sum(wg.to(tl.float32) * xm, axis=1)
                        uu = tl.sum(wu.to(tl.float32) * xm, axis=1)
                        hh = gg / (1.0 + tl.exp(-gg)) * uu
                        tl.store(h_ptr + m * F + r, hh.to(tl.bfloat16), mask=live)
        else:  # down-proj + residual
            if pid * BDN < D:
                r = pid * BDN + tl.arange(0, BDN)
                live = r < D
                w = tl.load(wd_ptr + l64 * D * F + r[:, None] * F + fk[None, :], mask=live[:, None] & fmask[None, :],
                            other=0.0)
                ok = _wait_all(flags_ptr, g, base, NP, err_ptr, ok, NPB, MAX_SPIN, SYNC, POLL)
                if WORK:
                    Hh = tl.load(h_ptr + rows[:, None] * F + fk[None, :], mask=rmask[:, None] & fmask[None, :], other=0.0,
                                 cache_modifier=".cg").to(tl.float32)
                    res = tl.load(x_ptr + rows[:, None] * D + r[None, :], mask=rmask[:, None] & live[None, :], other=0.0,
                                  cache_modifier=".cg")
                    for m in range(M):
                        y = tl.sum(w.to(tl.float32) * _row(Hh, rows, m)[None, :], axis=1) + _row(res, rows, m)
                        tl.store(x_ptr + m * D + r, y, mask=live)
        _signal(flags_ptr, pid, g, base, NPB, SYNC, POLL)
    if SYNC:
        if POLL == 1:  # this launch's epoch, read by this program at its next launch
            tl.store(flags_ptr + pid, base)


class Probe:
    """Random weights and caches in one model shape, the probe's buffers, and its launch."""

    def __init__(self, L=30, D=576, F=1536, H=9, KVH=3, HD=64, cap=8192, device="cuda", seed=0,
                 tiles=(8, 8, 16, 8), warps=8, poll=0):
        g = torch.Generator(device="cpu").manual_seed(seed)

        def rnd(*shape, scale=1.0, dtype=torch.bfloat16):
            return (torch.randn(*shape, generator=g) * scale).to(dtype).to(device)

        self.L, self.D, self.F, self.H, self.KVH, self.HD, self.cap = L, D, F, H, KVH, HD, cap
        self.QD, self.KVD = H * HD, KVH * HD
        self.NQKV = self.QD + 2 * self.KVD
        self.wqkv = rnd(L, self.NQKV, D, scale=D ** -0.5)
        self.wo = rnd(L, D, self.QD, scale=self.QD ** -0.5)
        self.wg = rnd(L, F, D, scale=D ** -0.5)
        self.wu = rnd(L, F, D, scale=D ** -0.5)
        self.wd = rnd(L, D, F, scale=F ** -0.5)
        self.an = (1 + 0.1 * torch.randn(L, D, generator=g)).to(device)
        self.fn = (1 + 0.1 * torch.randn(L, D, generator=g)).to(device)
        self.k = rnd(L, KVH, cap, HD)
        self.v = rnd(L, KVH, cap, HD)
        self.device = torch.device(device)
        self.tiles, self.warps, self.poll = tiles, warps, poll
        on_gpu = self.device.type == "cuda"
        self.np = torch.cuda.get_device_properties(self.device).multi_processor_count if on_gpu else 16
        self.npb = triton.next_power_of_2(self.np)
        self.x = torch.zeros(BLOCK_M, D, device=device)
        self.qkv = torch.zeros(BLOCK_M, self.NQKV, dtype=torch.bfloat16, device=device)
        self.a = torch.zeros(BLOCK_M, self.QD, dtype=torch.bfloat16, device=device)
        self.h = torch.zeros(BLOCK_M, F, dtype=torch.bfloat16, device=device)
        ns_max = -(-cap // 16)
        self.part = torch.zeros(BLOCK_M * H * ns_max * HD, device=device)
        self.ml = torch.zeros(BLOCK_M * H * ns_max * 2, device=device)
        self.pos = torch.zeros(BLOCK_M, dtype=torch.int32, device=device)
        self.flags = torch.zeros(self.npb + PHASES * L, dtype=torch.int32, device=device)
        for n, b in zip((self.NQKV, D, F, D), tiles):
            if -(-n // b) > self.np:
                raise ValueError(f"{-(-n // b)} tiles of {b} rows for {n} outputs: more than the {self.np} programs")
        self.err = torch.zeros(1, dtype=torch.int32, device=device)

    def launch(self, m: int, split: int, mode: str = "full") -> None:
        """One step of m rows at self.pos (set beforehand); every layer, in one launch on the GPU (one per phase
        under the interpreter, where programs run one after another)."""
        n_splits = self._ns
        bq, bo, bgu, bdn = self.tiles
        kw = dict(L=self.L, D=self.D, F=self.F, H=self.H, KVH=self.KVH, HD=self.HD, CAP=self.cap,
                  DP=triton.next_power_of_2(self.D), FP=triton.next_power_of_2(self.F), G=self.H // self.KVH,
                  GP=triton.next_power_of_2(self.H // self.KVH), SPLIT=split, NSB=triton.next_power_of_2(-(-self.cap // split)),
                  BQ=bq, BO=bo, BGU=bgu, BDN=bdn, BLOCK_M=BLOCK_M, NPB=self.npb, MAX_SPIN=MAX_SPIN, POLL=self.poll)
        args = (self.x, self.qkv, self.a, self.h, self.part, self.ml, self.pos, self.k, self.v, self.an, self.wqkv,
                self.wo, self.fn, self.wg, self.wu, self.wd, self.flags, self.err, m, n_splits)
        eps, scale = 1e-5, (1.0 / math.sqrt(self.HD)) * 1.4426950408889634
        if self.device.type == "cuda":
            _mega_kernel[(self.np,)](*args, self.np, 0, PHASES * self.L - 1, eps, scale, SYNC=mode != "nowait",
                                     WORK=mode != "nowork", num_warps=self.warps, num_stages=1, **kw)
        else:
            for g in range(PHASES * self.L):
                _mega_kernel[(self.np,)](*args, self.np, g, g, eps, scale, SYNC=False, WORK=True, num_warps=self.warps, **kw)

    def set_rows(self, x0: torch.Tensor, pos0: int, split: int) -> None:
        m = x0.shape[0]
        self.x[:m] = x0
        self.pos[:] = torch.arange(pos0, pos0 + BLOCK_M, dtype=torch.int32)
        self._ns = -(-(pos0 + BLOCK_M) // split)  # fixed per capture: splits past a row's position are masked

    def reference(self, x0: torch.Tensor, pos0: int) -> torch.Tensor:
        """The same step in float32 torch (bf16 where the kernel rounds: q, k, v, the attention's output, h)."""
        m, QD, KVD, HD, G = x0.shape[0], self.QD, self.KVD, self.HD, self.H // self.KVH
        x = x0.clone().float()
        k, v = self.k.clone(), self.v.clone()

        def rms(t, w):
            return t * torch.rsqrt((t * t).mean(-1, keepdim=True) + 1e-5) * w

        for layer in range(self.L):
            qkv = (rms(x, self.an[layer]) @ self.wqkv[layer].float().T).bfloat16()
            q = qkv[:, :QD].float().view(m, self.H, HD)
            for r in range(m):
                k[layer, :, pos0 + r] = qkv[r, QD:QD + KVD].view(self.KVH, HD)
                v[layer, :, pos0 + r] = qkv[r, QD + KVD:].view(self.KVH, HD)
            a = torch.empty(m, self.H, HD, device=x.device)
            for r in range(m):
                n = pos0 + r + 1
                kk = k[layer, :, :n].float().repeat_interleave(G, 0)  # [H, n, HD]
                vv = v[layer, :, :n].float().repeat_interleave(G, 0)
                p = torch.softmax((kk @ q[r][:, :, None]).squeeze(-1) / math.sqrt(HD), -1)
                a[r] = (p[:, None, :] @ vv).squeeze(1)
            x = x + a.view(m, QD).bfloat16().float() @ self.wo[layer].float().T
            xn = rms(x, self.fn[layer])
            gg, uu = xn @ self.wg[layer].float().T, xn @ self.wu[layer].float().T
            h = (gg * torch.sigmoid(gg) * uu).bfloat16()
            x = x + h.float() @ self.wd[layer].float().T
        return x


def check(pr: Probe, ctx: int, split: int) -> dict:
    """The probe's results against the torch reference (7 rows), and row 0 of 7 rows against 1 row, bitwise."""
    g = torch.Generator(device="cpu").manual_seed(ctx)
    x0 = torch.randn(7, pr.D, generator=g).to(pr.device)
    k0, v0 = pr.k.clone(), pr.v.clone()
    pr.set_rows(x0, ctx, split)
    pr.launch(7, split)
    got7 = pr.x[:7].clone()
    pr.k.copy_(k0), pr.v.copy_(v0)
    ref = pr.reference(x0, ctx)
    pr.k.copy_(k0), pr.v.copy_(v0)
    pr.set_rows(x0[:1], ctx, split)
    pr.launch(1, split)
    got1 = pr.x[:1].clone()
    pr.k.copy_(k0), pr.v.copy_(v0)
    err = ((got7 - ref).abs().max() / ref.abs().max()).item()
    return {"ctx": ctx, "split": split, "rel_err_vs_torch": err, "row0_bits_1_vs_7": bool(torch.equal(got1[0], got7[0])),
            "finite": bool(torch.isfinite(got7).all()), "error_word": int(pr.err.item())}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--contexts", default="1024,4096,7936")
    ap.add_argument("--rows", default="1,7")
    ap.add_argument("--splits", default="64")
    ap.add_argument("--warps", default="8")
    ap.add_argument("--configs", default="", help="split:warps:poll,... instead of --splits x --warps (poll 0)")
    ap.add_argument("--replays", type=int, default=200)
    ap.add_argument("--modes", default="full,nowait,nowork")
    ap.add_argument("--baseline", action="store_true", help="also the engine's captured step (random weights, same shape)")
    ap.add_argument("--check", action="store_true", help="results only (CPU: a small shape under the interpreter)")
    a = ap.parse_args()
    if os.environ.get("TRITON_INTERPRET") == "1":
        pr = Probe(L=2, D=64, F=96, H=4, KVH=2, HD=16, cap=96, device="cpu", tiles=(8, 8, 8, 8), warps=4)
        for ctx, split in ((40, 16), (70, 32)):
            print(json.dumps(check(pr, ctx, split)), flush=True)
        return 0
    from gpu_timing import step_us, time_graph  # bench/
    ctxs = [int(c) for c in a.contexts.split(",")]
    configs = ([tuple(int(v) for v in c.split(":")) for c in a.configs.split(",")] if a.configs else
               [(int(s), int(w), 0) for w in a.warps.split(",") for s in a.splits.split(",")])
    for split, warps, poll in configs:
        pr = Probe(cap=max(ctxs) + 64, warps=warps, poll=poll)
        for ctx in ctxs:
            pr.err.zero_()
            res = dict(check(pr, ctx, split), warps=warps, poll=poll)
            print(json.dumps(res), flush=True)
            if a.check or res["error_word"]:  # a wait gave up: its timings would be of timeouts
                continue
            for m in (int(r) for r in a.rows.split(",")):
                pr.set_rows(torch.randn(m, pr.D, device=pr.device), ctx, split)
                out = {"ctx": ctx, "rows": m, "split": split, "warps": warps, "poll": poll, "np": pr.np}
                for mode in a.modes.split(","):
                    out[mode] = round(time_graph(lambda: pr.launch(m, split, mode), a.replays), 2)
                print(json.dumps(out), flush=True)
        del pr
        torch.cuda.empty_cache()
    if a.baseline:
        sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "gpu"))
        from engine.generate import Engine
        from models import random_model
        model = Engine(loaded=random_model(), device="cuda").model
        for ctx in ctxs:
            for m in (int(r) for r in a.rows.split(",")):
                print(json.dumps({"engine_step": True, "ctx": ctx, "rows": m, "us": round(step_us(model, ctx, m), 2)}), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
