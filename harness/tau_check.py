"""python -m harness.tau_check [--profile cpu|gpu] — AR and DSpark decode on real text, one process,
one model load. For each prompt and context of the profile: one untimed warm-up of both decoders,
`reps` AR runs (the first is the reference stream, all must agree, the timing is their median), then
`reps` DSpark runs, each compared with the AR stream token for token. Decode time
excludes the prefill (timed separately) and is taken with the device synchronised."""

from __future__ import annotations

import argparse
import statistics
import sys

from harness.output import add_common_args, line, run_program
from harness.profiles import get_profile
from harness.prompts import exact_prompt, token_digest


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m harness.tau_check", description=__doc__.split("\n\n")[0])
    ap.add_argument("--profile", default=None, help="cpu or gpu (default: gpu when CUDA is available)")
    ap.add_argument("--contexts", default=None, help="comma-separated prompt lengths (default: the profile's)")
    ap.add_argument("--prompts", default=None, help="comma-separated prompt corpora (default: code,prose)")
    ap.add_argument("--reps", type=int, default=None, help="DSpark runs per context (default: the profile's, 3)")
    ap.add_argument("--new-tokens", type=int, default=None)
    ap.add_argument("--model", default=None, help="model path (default: the bundled model)")
    ap.add_argument("--drafter", default=None, help="drafter directory (default: the shipped drafter)")
    add_common_args(ap)
    return ap


def measure(args) -> list[str]:
    import torch
    import triton

    from engine.dspark import attach_drafter
    from engine.generate import Engine

    profile = get_profile(args.profile)
    contexts = [int(c) for c in args.contexts.split(",")] if args.contexts else list(profile.contexts)
    prompts = args.prompts.split(",") if args.prompts else list(profile.prompts)
    reps = args.reps if args.reps is not None else profile.reps
    new_tokens = args.new_tokens or profile.new_tokens
    if reps < 1 or new_tokens < 2:
        raise ValueError("--reps must be >= 1 and --new-tokens >= 2")
    engine = Engine(args.model)
    files = attach_drafter(engine, args.drafter)
    device = torch.cuda.get_device_name(engine.device) if engine.device.type == "cuda" else "cpu"
    lines = []
    for prompt in prompts:
        for ctx in contexts:
            ids = exact_prompt(engine.tokenizer, prompt, ctx)
            print(f"[tau_check] {prompt} ctx={ctx}: warm-up", file=sys.stderr, flush=True)
            engine.generate(ids, new_tokens, stop_at_eos=False)
            engine.generate(ids, new_tokens, dspark=True, stop_at_eos=False)
            ar_runs = [engine.generate(ids, new_tokens, stop_at_eos=False) for _ in range(reps)]
            ar = ar_runs[0]  # the reference stream; its timing is the median of the AR runs
            for i, other in enumerate(ar_runs[1:], 2):
                if other.tokens != ar.tokens:
                    at = next((j for j, (x, y) in enumerate(zip(ar.tokens, other.tokens)) if x != y), min(len(ar.tokens), len(other.tokens)))
                    raise RuntimeError(f"AR decode is not deterministic: {prompt} ctx={ctx}: AR run {i} differs from run 1 at token {at}")
            ar_decode_s = statistics.median(r.decode_s for r in ar_runs)
            runs = [engine.generate(ids, new_tokens, dspark=True, stop_at_eos=False) for _ in range(reps)]
            matched = sum(r.tokens == ar.tokens for r in runs)
            hist = [sum(r.stats["accept_hist"][k] for r in runs) for k in range(len(runs[0].stats["accept_hist"]))]
            forwards = sum(hist)
            tau = sum(k * n for k, n in enumerate(hist)) / forwards if forwards else 0.0  # tokens per verify forward
            print(f"[tau_check] {prompt} ctx={ctx}: AR {len(ar.tokens) / ar_decode_s:.1f} tok/s, DSpark "
                  f"{statistics.median(r.decode_tps for r in runs):.1f} tok/s, tau {tau:.3f}, lossless {matched}/{reps}",
                  file=sys.stderr, flush=True)
            lines.append(line(
                "tau_check", args.nonce, profile=profile.name, prompt=prompt, prompt_sha256=token_digest(ids),
                ctx=len(ids), new_tokens=new_tokens, ar_tps=len(ar.tokens) / ar_decode_s,
                dspark_tps=statistics.median(r.decode_tps for r in runs), dspark_tps_runs=[r.decode_tps for r in runs],
                prefill_tps=ar.prefill_tps, tau=tau, block_size=files.config.block_size, accept_hist=hist,
                lossless=matched == reps, lossless_runs=matched, runs=reps, ar_tokens=ar.tokens,
                dspark_tokens=[r.tokens for r in runs], ar_decode_s=ar_decode_s, dspark_decode_s=[r.decode_s for r in runs],
                model_sha256=engine.loaded.sha256, drafter_sha256=files.sha256, device=device,
                torch=torch.__version__, triton=triton.__version__,
            ))
    return lines


def main(argv=None) -> int:
    args = build_parser().parse_args(argv)
    return run_program(lambda: measure(args), args.nonce)


if __name__ == "__main__":
    sys.exit(main())
