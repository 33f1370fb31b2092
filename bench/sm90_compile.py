"""Compile every step kernel for the H200 (sm_90) on a machine without a GPU, with programmatic dependent
launch (and, where the kernels have it, the L2 prefetch) on, in the bundled model's shapes and the launch configurations of
kernels/tuning.py; prints, per kernel, how many prefetch and griddepcontrol instructions its PTX has.
Catches what the CPU interpreter cannot see (PTX, inline assembly, shared memory) before a device call.
--trace: with the phase stamps of bench/kernel_phases.py compiled in (kernels.common.stamp); --no-ahead: no
norm prepared by x's producer (DSPARK_NORM_AHEAD=0; by default the o-proj and the down-proj prepare gate/up's
and QKV's, kernels.fused_linear.NormAhead); --lm-head-prefetch: the LM head's programs prefetch their tiles
before the wait (DSPARK_LM_HEAD_PREFETCH=1; off by default); --swap-ab: every product computed transposed
(tuning.LaunchConfig.swap_ab; the linears with at least 64 weight rows per program, SwiGLU's gate and up rows
stacked, one K slice; QKV a whole head per program), to see which run on the warpgroup MMA (the `wgmma` count).

    TRITON_INTERPRET=0 python bench/sm90_compile.py [--trace] [--no-ahead] [--lm-head-prefetch] [--swap-ab]
"""

from __future__ import annotations

import json
import os
import sys
from dataclasses import replace
from pathlib import Path

os.environ["TRITON_INTERPRET"] = "0"
os.environ.setdefault("TRITON_DEFAULT_FP_FUSION", "1")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import triton  # noqa: E402
from triton.backends.compiler import GPUTarget  # noqa: E402
from triton.compiler import ASTSource  # noqa: E402

from kernels.decode_attention import _attn_combine_kernel, _attn_split_kernel  # noqa: E402
from kernels.draft_head import _head_depth_kernel, _head_final_kernel, _tree_expand_kernel, _tree_final_kernel  # noqa: E402
from kernels.greedy_commit import _tree_commit_kernel  # noqa: E402
from kernels.fused_linear import BLOCK_M, _fused_linear_kernel  # noqa: E402
from kernels.qkv_rope import _qkv_rope_kernel  # noqa: E402
from kernels.tuning import config_for  # noqa: E402

TARGET = GPUTarget("cuda", 90, 32)
# Integer arguments the JIT sees as multiples of 16 in the bundled shapes (strides, K, N, the cache's capacity):
# it specializes them (tt.divisibility 16), which is what lets a bf16 weight row be copied by cp.async and
# its load software-pipelined. Without these attributes the product's weight loads compile unpipelined.
DIV16 = {"x_stride", "res_stride", "out_stride", "N", "K", "KS", "cache_head_stride", "CAP", "D", "F", "V",
         "layer_cache_stride", "capture_slot_stride", "capture_row_stride"}
TRACE = "--trace" in sys.argv
AHEAD = "--no-ahead" not in sys.argv
LM_HEAD_PREFETCH = "--lm-head-prefetch" in sys.argv
SWAP_AB = "--swap-ab" in sys.argv


def compile_one(name, fn, sig: dict, const: dict, num_warps: int, num_stages: int) -> dict:
    const = {k: v for k, v in const.items() if k in fn.arg_names}  # kernels without the prefetch take fewer
    if "trace_ptr" in fn.arg_names:
        sig, const = dict(sig, trace_ptr="*i64"), dict(const, TRACE=TRACE)
    if "KS" in fn.arg_names:  # the K walk's slice length (tuning.k_slices), a multiple of 16
        sig = dict(sig, KS="i32")
    if "ss_ptr" in fn.arg_names:  # a norm prepared by x's producer (fused_linear.NormAhead), as the step launches them
        consumer = AHEAD and const.get("HAS_NORM", True) and const.get("EARLY", False) and "AHEAD" not in const
        sig = dict(sig, xn_ptr="*bf16", ss_ptr="*fp32", P="i32")
        const = dict(const, BLOCK_P=64, AHEAD=consumer)
        if "AHEAD_OUT" in fn.arg_names:
            sig = dict(sig, anw_ptr="*fp32", xw_out_ptr="*bf16", ss_out_ptr="*fp32")
            const = dict(const, AHEAD_OUT=AHEAD and const.get("HAS_RES", False))
    if "HEAD" in fn.arg_names:  # the LM head's argmaxes and commit (kernels.greedy_commit.HeadArgmax), off unless asked
        sig = dict(sig, hp_ptr="*fp32", hi_ptr="*i64", ha_ptr="*i64", hc_ptr="*i32", ht_ptr="*i64", hpos_ptr="*i32",
                   hkv_ptr="*i32", hout_ptr="*i64", hst_ptr="*i64", hh_ptr="*i64", H_ROWS="i32")
        const = dict(dict(HEAD=False, H_COMMIT=False, H_HIST=False, H_BLOCK_S=1, H_BLOCK_ROWS=2), **const)
    sig = dict(sig, **{k: "constexpr" for k in const})
    # pointers 16-byte aligned, as the JIT specializes them at a launch with torch's allocations (vector loads)
    # (runtime arguments only: a constant named like one, e.g. the tree head's F, has no attribute to carry)
    attrs = {(fn.arg_names.index(k),): [["tt.divisibility", 16]] for k, t in sig.items()
             if t != "constexpr" and (t.startswith("*") or k in DIV16)}
    src = ASTSource(fn, sig, constexprs={(fn.arg_names.index(k),): v for k, v in const.items()}, attrs=attrs)
    k = triton.compile(src, target=TARGET, options=dict(num_warps=num_warps, num_stages=num_stages))
    ptx = k.asm["ptx"]
    return {"kernel": name, "prefetch": ptx.count("prefetch.global.L2"), "griddepcontrol": ptx.count("griddepcontrol"),
            "wgmma": ptx.count("wgmma.mma_async"), "atomics": ptx.count("atom."), "stamps": ptx.count("%globaltimer"), "shared": k.metadata.shared, "registers": getattr(k, "n_regs", None)}


def prefetch_lines(n_bytes: int) -> int:  # kernels.common's, where the kernels have the L2 prefetch
    return triton.next_power_of_2(max(1, -(-n_bytes // 128)))


def main() -> int:
    D, F, V, H, KVH, HD, CAP = 576, 1536, 49152, 9, 3, 64, 4224
    lin = {"x_ptr": "*fp32", "x_stride": "i32", "norm_ptr": "*fp32", "w_ptr": "*bf16", "up_ptr": "*bf16", "bias_ptr": "*bf16",
           "res_ptr": "*fp32", "res_stride": "i32", "out_ptr": "*fp32", "out_stride": "i32", "M": "i32", "N": "i32",
           "K": "i32", "eps": "fp32"}
    out = []
    for kind, n, k, norm, swiglu, res in [("linear", D, D, False, False, True), ("swiglu", F, D, True, True, False),
                                          ("linear", D, F, False, False, True), ("lm_head", V, D, True, False, False)]:
        cfg = config_for(kind, n, k)
        if SWAP_AB:  # 64 weight rows per program at least (SwiGLU's tile stacks gate's and up's: block_n 32)
            cfg = replace(cfg, block_n=cfg.block_n if kind == "swiglu" else max(64, cfg.block_n), k_split=1, swap_ab=True)
        lines = prefetch_lines(cfg.block_n * k * 2) if kind != "lm_head" or LM_HEAD_PREFETCH else 0
        for unroll in (0, k):  # the norm pass looped, unrolled
            const = dict(HAS_NORM=norm, SWIGLU=swiglu, HAS_RES=res, HAS_BIAS=False, IEEE=False, UPCAST=False, BLOCK_M=BLOCK_M,
                         BLOCK_N=cfg.block_n, BLOCK_K=cfg.block_k, PREFETCH_LINES=lines, ELEM_BYTES=2, USE_PDL=True,
                         UNROLL_NORM=unroll, EARLY=kind != "lm_head", KSPLIT=cfg.k_split, SWAP=cfg.swap_ab)
            out.append(compile_one(f"fused_linear {kind} {n}x{k}{' unrolled' if unroll else ''}", _fused_linear_kernel, lin,
                                   const, cfg.num_warps, cfg.num_stages))
            if kind == "lm_head" and "HEAD" in _fused_linear_kernel.arg_names:  # with its argmaxes and the chain's commit
                head = dict(HEAD=True, H_COMMIT=True, H_HIST=True, H_BLOCK_S=triton.next_power_of_2(-(-n // cfg.block_n)),
                            H_BLOCK_ROWS=8)
                out.append(compile_one(f"fused_linear {kind} {n}x{k}{' unrolled' if unroll else ''} argmax+commit",
                                       _fused_linear_kernel, lin, dict(const, **head), cfg.num_warps, cfg.num_stages))
    qkv = {"x_ptr": "*fp32", "x_stride": "i32", "norm_ptr": "*fp32", "w_ptr": "*bf16", "b_ptr": "*bf16", "qn_ptr": "*fp32",
           "kn_ptr": "*fp32", "cos_ptr": "*fp32", "sin_ptr": "*fp32", "pos_ptr": "*i32", "q_ptr": "*bf16",
           "k_cache_ptr": "*bf16", "v_cache_ptr": "*bf16", "cache_head_stride": "i32", "M": "i32", "K": "i32",
           "eps": "fp32", "H": "i32", "KVH": "i32"}
    cfg = config_for("qkv", (H + 2 * KVH) * HD, D)
    for sub in ((1,) if SWAP_AB else (1, 2)):  # swap_ab: a whole head per program
        const = dict(HD=HD, HAS_BIAS=False, HAS_QKNORM=False, IEEE=False, UPCAST=False, BLOCK_M=BLOCK_M, BLOCK_K=cfg.block_k,
                     SUB=sub, PREFETCH_LINES=prefetch_lines(HD // 2 // sub * D * 2), ELEM_BYTES=2, USE_PDL=True, UNROLL_NORM=D, EARLY=True,
                     KSPLIT=1 if SWAP_AB else cfg.k_split, SWAP=SWAP_AB)
        for slots in (False, True):  # k/v at the rows' positions, or at a token tree's slots
            if slots and "SLOTS" not in _qkv_rope_kernel.arg_names:
                continue
            out.append(compile_one(f"qkv_rope sub {sub}{' tree slots' if slots else ''}", _qkv_rope_kernel,
                                   dict(qkv, slot_ptr="*i32"), dict(const, SLOTS=slots), cfg.num_warps, cfg.num_stages))
    att = {"q_ptr": "*bf16", "k_ptr": "*bf16", "v_ptr": "*bf16", "start_ptr": "*i32", "end_ptr": "*i32", "fresh_ptr": "*i32",
           "out_ptr": "*fp32",
           "lse_ptr": "*fp32", "M": "i32", "H": "i32", "CAP": "i32", "cache_head_stride": "i32", "n_splits": "i32",
           "scale_log2": "fp32"}
    cfg = config_for("attn", H, HD)
    split = 64
    for preload, tree in ((False, False), (True, False), (True, True), (False, True)):
        # keys read after the wait (with the L2 prefetch), or before it (`fresh`); a token tree's rows (own programs)
        if tree and "TREE" not in _attn_split_kernel.arg_names:
            continue
        const = dict(G=H // KVH, HD=HD, SPLIT=split, BLOCK_R=32, BLOCK_KV=min(cfg.block_k, split), IEEE=False, UPCAST=False,
                     PREFETCH_LINES=0 if preload else prefetch_lines(split * HD * 2), ELEM_BYTES=2, USE_PDL=True,
                     PRELOAD=preload, TREE=tree, ANC_W=8 if tree else 1, FS=2 if tree else 1)
        out.append(compile_one(f"attention split{' preloaded' if preload else ''}{' tree' if tree else ''}", _attn_split_kernel,
                               dict(att, anc_ptr="*i32"), const, cfg.num_warps, cfg.num_stages))
    comb = {"part_ptr": "*fp32", "lse_ptr": "*fp32", "out_ptr": "*bf16", "H": "i32", "n_splits": "i32"}
    bs = triton.next_power_of_2(triton.cdiv(CAP, split))
    for block_d in (0, 32):  # the whole head per program, or a slice of it (the combine's table block_n)
        out.append(compile_one(f"attention combine{f' {block_d} dims' if block_d else ''}", _attn_combine_kernel, comb,
                               dict(HD=HD, BLOCK_S=bs, BLOCK_D=block_d, USE_PDL=True), 4, 1))
    hcfg, R, P = config_for("head", V, 64), 64, 6  # the drafter's head: a launch per draft, then the confidences
    nch = triton.cdiv(V, hcfg.block_n)
    head = {"base_ptr": "*fp32", "u_ptr": "*bf16", "v_ptr": "*bf16", "last_ptr": "*i64", "pmax_ptr": "*fp32", "pidx_ptr": "*i64",
            "cmax_ptr": "*fp32", "cidx_ptr": "*i64", "rmax_ptr": "*fp32", "rsum_ptr": "*fp32", "drafts_ptr": "*i64",
            "tokens_ptr": "*i64", "V": "i32", "NCH": "i32"}
    for row in (0, 1):  # base after the wait (the LM head just before), or before it
        out.append(compile_one(f"draft head, draft {row}", _head_depth_kernel, head,
                               dict(ROW=row, R=R, CHUNK=hcfg.block_n, BLOCK_S=triton.next_power_of_2(nch), USE_PDL=True),
                               hcfg.num_warps, 1))
    fin = {"pmax_ptr": "*fp32", "pidx_ptr": "*i64", "rmax_ptr": "*fp32", "rsum_ptr": "*fp32", "h_ptr": "*fp32", "conf_w_ptr": "*fp32",
           "conf_a_ptr": "*fp32", "conf_b_ptr": "*fp32", "thr_ptr": "*fp32", "drafts_ptr": "*i64", "conf_ptr": "*fp32",
           "depth_ptr": "*i64", "tokens_ptr": "*i64", "NCH": "i32", "D": "i32"}
    out.append(compile_one("draft head, confidences", _head_final_kernel, fin,
                           dict(P=P, BLOCK_P=8, BLOCK_S=triton.next_power_of_2(nch), BLOCK_D=1024, USE_PDL=True), 4, 1))
    # a token tree: its head (an expansion per node, then the last node with the step's inputs) and its commit
    N, FAN = 7, 4
    tree_scratch = {"cand_s_ptr": "*fp32", "cand_t_ptr": "*i64", "cand_p_ptr": "*i32", "cand_d_ptr": "*i32", "node_t_ptr": "*i64",
                    "node_p_ptr": "*i32", "node_d_ptr": "*i32", "node_s_ptr": "*fp32", "node_c_ptr": "*i32",
                    "pval_ptr": "*fp32", "pidx_ptr": "*i64", "pmax_ptr": "*fp32", "psum_ptr": "*fp32", "NCH": "i32", "P": "i32"}
    blocks = dict(F=FAN, BLOCK_S=triton.next_power_of_2(nch), BLOCK_F=4, BLOCK_C=32, USE_PDL=True)
    for k in (0, 3):
        out.append(compile_one(f"tree head, node {k}", _tree_expand_kernel,
                               dict(tree_scratch, base_ptr="*fp32", u_ptr="*bf16", v_ptr="*bf16", tokens_ptr="*i64", V="i32"),
                               dict(blocks, K=k, R=R, CHUNK=hcfg.block_n), hcfg.num_warps, 1))
    out.append(compile_one("tree head, last node", _tree_final_kernel,
                           dict(tree_scratch, tokens_ptr="*i64", positions_ptr="*i32", kv_end_ptr="*i32", slots_ptr="*i32",
                                tree_ptr="*i32", parents_ptr="*i32", ROWS="i32"),
                           dict(blocks, K=N, BLOCK_ROWS=8, W=8), 4, 1))
    commit = {"pmax_ptr": "*fp32", "pidx_ptr": "*i64", "argmax_ptr": "*i64", "tokens_ptr": "*i64", "parents_ptr": "*i32", "slots_ptr": "*i32",
              "positions_ptr": "*i32", "kv_end_ptr": "*i32", "out_ptr": "*i64", "state_ptr": "*i64", "hist_ptr": "*i64",
              "k_ptr": "*bf16", "v_ptr": "*bf16", "cap_ptr": "*fp32", "layer_stride": "i32", "head_stride": "i32",
              "cap_width": "i32", "M": "i32", "NCH": "i32", "ROWS": "i32", "KVH": "i32"}
    out.append(compile_one("tree commit", _tree_commit_kernel, commit,
                           dict(HD=HD, BLOCK_S=32, BLOCK_ROWS=8, BLOCK_C=512, HAS_HIST=True, ARGMAX=True, USE_PDL=True), 4, 1))
    for r in out:
        print(json.dumps(r))
    return 0


if __name__ == "__main__":
    sys.exit(main())
