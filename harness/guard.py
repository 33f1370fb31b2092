"""python -m harness.guard [--profile cpu|gpu] — decode and prefill speed of other model families
(fixed-seed random weights in their real shapes) at a long context, so a change tuned to the bundled
model cannot silently slow everyone else. Median of `reps` after one warm-up."""

from __future__ import annotations

import argparse
import hashlib
import statistics
import sys
from pathlib import Path

from harness.output import add_common_args, line, run_program
from harness.profiles import GuardShape, get_profile
from harness.prompts import load_text


def guard_model(shape: GuardShape, device, dtype, max_seq_len: int, seed: int = 1234):
    """A LoadedModel with random weights, generated on the device (1B parameters in seconds)."""
    import torch

    from engine.config import ModelConfig, RopeScaling
    from engine.loader import LoadedModel

    c = ModelConfig(arch=shape.arch, vocab_size=shape.vocab_size, dim=shape.dim, n_layers=shape.n_layers,
                    n_heads=shape.n_heads, n_kv_heads=shape.n_kv_heads, head_dim=shape.head_dim, ffn_dim=shape.ffn_dim,
                    rope_theta=shape.rope_theta, rope_scaling=RopeScaling(**(shape.rope_scaling or {})),
                    max_seq_len=max_seq_len, tie_embeddings=True, qk_norm=shape.qk_norm, name=shape.name)
    g = torch.Generator(device=device).manual_seed(seed)

    def r(*s, std):
        return (torch.randn(*s, generator=g, device=device, dtype=torch.float32) * std).to(dtype)

    d = c.dim
    w = {"embed": r(c.vocab_size, d, std=1.0), "norm": torch.ones(d, device=device)}
    for i in range(c.n_layers):
        p = f"layers.{i}."
        w[p + "attn_norm"] = torch.ones(d, device=device)
        w[p + "ffn_norm"] = torch.ones(d, device=device)
        w[p + "wq"] = r(c.q_dim, d, std=d**-0.5)
        w[p + "wk"] = r(c.kv_dim, d, std=d**-0.5)
        w[p + "wv"] = r(c.kv_dim, d, std=d**-0.5)
        w[p + "wo"] = r(d, c.q_dim, std=c.q_dim**-0.5 / c.n_layers)
        w[p + "w_gate"] = r(c.ffn_dim, d, std=d**-0.5)
        w[p + "w_up"] = r(c.ffn_dim, d, std=d**-0.5)
        w[p + "w_down"] = r(d, c.ffn_dim, std=c.ffn_dim**-0.5 / c.n_layers)
        if c.qk_norm:
            w[p + "q_norm"] = torch.ones(c.head_dim, device=device)
            w[p + "k_norm"] = torch.ones(c.head_dim, device=device)
    digest = hashlib.sha256(f"{shape}:{seed}".encode()).hexdigest()
    return LoadedModel(config=c, weights=w, tokenizer=None, source_path=Path(f"<guard {shape.name}>"), sha256=digest)


def measure(args) -> list[str]:
    import torch

    from engine.generate import Engine, pick_device
    from engine.loader import load_model

    profile = get_profile(args.profile)
    ctx = args.ctx or profile.guard_ctx
    reps = args.reps or profile.guard_reps
    new = profile.guard_new_tokens
    device = pick_device(None)
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    # real text, tokenized with the bundled tokenizer: valid ids in every guard vocabulary
    tokenizer = load_model(args.model).tokenizer
    text_ids = tokenizer.encode(load_text("code"))
    if len(text_ids) < ctx:
        text_ids = (text_ids * (ctx // len(text_ids) + 1))
    lines = []
    for shape in profile.guards:
        ids = [t % shape.vocab_size for t in text_ids[:ctx]]
        loaded = guard_model(shape, device, dtype, ctx + new + 64)
        engine = Engine(loaded=loaded, device=str(device))
        engine.generate(ids, new, stop_at_eos=False)  # warm-up: graphs, Triton compiles
        runs = [engine.generate(ids, new, stop_at_eos=False) for _ in range(reps)]
        dec = [r.decode_tps for r in runs]
        pre = [r.prefill_tps for r in runs]
        print(f"[guard] {shape.name} ctx={ctx}: decode {statistics.median(dec):.1f} tok/s, prefill {statistics.median(pre):.0f} tok/s",
              file=sys.stderr, flush=True)
        lines.append(line("guard", args.nonce, guard=shape.name, ctx=ctx, decode_tps=statistics.median(dec),
                          prefill_tps=statistics.median(pre), reps=reps, decode_tps_reps=dec, prefill_tps_reps=pre))
        del engine, loaded
        if device.type == "cuda":
            torch.cuda.empty_cache()
    return lines


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m harness.guard", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default=None)
    ap.add_argument("--ctx", type=int, default=None)
    ap.add_argument("--reps", type=int, default=None)
    ap.add_argument("--model", default=None, help="model whose tokenizer cuts the prompt (default: bundled)")
    add_common_args(ap)
    return ap


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return run_program(lambda: measure(args), args.nonce)


if __name__ == "__main__":
    sys.exit(main())
