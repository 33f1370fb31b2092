"""python -m engine generate | bench — see --help. Errors are one line on stderr, never a traceback."""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time

from engine.errors import EngineError


def _add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--model", default=None, help="a .gguf file or an HF model directory (default: the bundled SmolLM2-135M)")
    p.add_argument("--device", default=None, help="cpu or cuda (default: cuda when available)")
    p.add_argument("--no-cuda-graphs", action="store_true", help="launch kernels one by one (debugging)")
    p.add_argument("--attn-split", type=int, default=None, help="keys per split of the split-K decode attention (default: a heuristic)")
    p.add_argument("--dspark", action="store_true", help="speculative decoding with the DSpark drafter")
    p.add_argument("--drafter", default=None, help="drafter directory (default: the shipped drafter for the bundled model)")


def build_parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(prog="python -m engine", description="DSpark inference engine")
    sub = ap.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate text from a prompt and print decode speed")
    g.add_argument("--prompt", required=True, help="the prompt text")
    g.add_argument("--chat", action="store_true", help="wrap the prompt in the model's chat template")
    g.add_argument("--max-new-tokens", type=int, default=128)
    g.add_argument("--temperature", type=float, default=0.0, help="0 = greedy (default)")
    g.add_argument("--top-k", type=int, default=0)
    g.add_argument("--top-p", type=float, default=1.0)
    g.add_argument("--seed", type=int, default=0)
    g.add_argument("--ignore-eos", action="store_true", help="always generate --max-new-tokens tokens")
    _add_model_args(g)

    b = sub.add_parser("bench", help="prefill and decode speed on real text, printed as JSON")
    b.add_argument("--contexts", default=None, help="comma-separated prompt lengths (default: 512,4096 on GPU, 256 on CPU)")
    b.add_argument("--new-tokens", type=int, default=128)
    b.add_argument("--prompt", default="prose", help="prompt corpus from harness/prompts (code or prose)")
    b.add_argument("--reps", type=int, default=3, help="timed repetitions after one warm-up; the median is reported")
    b.add_argument("--compare-hf", action="store_true", help="also time HF transformers generate (static cache) on the same weights")
    _add_model_args(b)
    return ap


def make_engine(args):
    from engine.generate import Engine

    engine = Engine(args.model, device=args.device, cuda_graphs=not args.no_cuda_graphs, attn_split=args.attn_split)
    if args.dspark:
        from engine.dspark import attach_drafter

        attach_drafter(engine, args.drafter)
    return engine


def cmd_generate(args) -> int:
    from engine.sampling import SamplingParams

    if not args.prompt.strip():
        raise EngineError("empty prompt: give some text with --prompt")
    sampling = SamplingParams(args.temperature, args.top_k, args.top_p, args.seed)
    engine = make_engine(args)
    tok = engine.tokenizer
    text = tok.apply_chat_template([{"role": "user", "content": args.prompt}]) if args.chat else args.prompt
    ids = tok.encode(text)
    result = engine.generate(ids, args.max_new_tokens, sampling, dspark=args.dspark, stop_at_eos=not args.ignore_eos)
    shown = result.tokens[:-1] if result.stop_reason == "eos" else result.tokens
    print(tok.decode(shown))
    line = (f"[{result.mode}] {len(result.tokens)} new tokens, decode {result.decode_tps:.1f} tok/s, "
            f"prefill {result.prompt_tokens} tokens at {result.prefill_tps:.0f} tok/s, device {engine.device.type}")
    if result.mode == "dspark":
        line += f", tau {result.stats['tau']:.2f}"
    print(line, file=sys.stderr)
    return 0


def cmd_bench(args) -> int:
    from harness.prompts import exact_prompt

    engine = make_engine(args)
    on_gpu = engine.device.type == "cuda"
    contexts = [int(c) for c in args.contexts.split(",")] if args.contexts else ([512, 4096] if on_gpu else [256])
    if args.reps < 1:
        raise EngineError("--reps must be at least 1")
    results = []
    hf = _HFBaseline(engine) if args.compare_hf else None
    for ctx in contexts:
        ids = exact_prompt(engine.tokenizer, args.prompt, ctx)
        engine.check_request(ids, args.new_tokens)
        row = {"ctx": ctx, "prompt": args.prompt, "new_tokens": args.new_tokens}
        engine.generate(ids, args.new_tokens, stop_at_eos=False)  # warm-up: graphs, Triton compiles
        ar = [engine.generate(ids, args.new_tokens, stop_at_eos=False) for _ in range(args.reps)]
        row["prefill_tps"] = statistics.median(r.prefill_tps for r in ar)
        row["ar_tps"] = statistics.median(r.decode_tps for r in ar)
        row["ar_tps_reps"] = [round(r.decode_tps, 2) for r in ar]
        if args.dspark:
            engine.generate(ids, args.new_tokens, dspark=True, stop_at_eos=False)
            ds = [engine.generate(ids, args.new_tokens, dspark=True, stop_at_eos=False) for _ in range(args.reps)]
            row["dspark_tps"] = statistics.median(r.decode_tps for r in ds)
            row["dspark_tps_reps"] = [round(r.decode_tps, 2) for r in ds]
            row["tau"] = statistics.median(r.stats["tau"] for r in ds)
            row["dspark_vs_ar"] = row["dspark_tps"] / row["ar_tps"]
            row["lossless"] = all(r.tokens == ar[0].tokens for r in ds)
        if hf is not None:
            row.update(hf.measure(ids, args.new_tokens, args.reps))
            row["hf_tokens_match"] = row.pop("_hf_tokens") == ar[0].tokens
        results.append(row)
    import torch

    out = {
        "device": torch.cuda.get_device_name(engine.device) if on_gpu else "cpu",
        "dtype": str(engine.model.dtype).replace("torch.", ""),
        "model": engine.loaded.source_path.name if hasattr(engine.loaded, "source_path") else "",
        "model_sha256": getattr(engine.loaded, "sha256", ""),
        "cuda_graphs": engine.use_graphs,
        "torch": torch.__version__,
        "results": results,
    }
    print(json.dumps(out, indent=2))
    return 0


class _HFBaseline:
    """HF transformers generate with a static cache on the very same weights and prompt."""

    def __init__(self, engine):
        from engine.hf_compat import to_hf_model

        self.device = engine.device
        self.model = to_hf_model(engine.config, engine.loaded.weights, engine.device, engine.model.dtype)

    def measure(self, ids: list[int], new_tokens: int, reps: int) -> dict:
        import torch

        x = torch.tensor([ids], device=self.device)
        kwargs = dict(max_new_tokens=new_tokens, min_new_tokens=new_tokens, do_sample=False, cache_implementation="static", disable_compile=True)

        def run():
            # prefill alone, then the whole generate: decode time = total - prefill
            sync = torch.cuda.synchronize if self.device.type == "cuda" else (lambda: None)
            with torch.no_grad():
                sync(); t0 = time.perf_counter()
                self.model.generate(x, max_new_tokens=1, min_new_tokens=1, do_sample=False, cache_implementation="static", disable_compile=True)
                sync(); t1 = time.perf_counter()
                out = self.model.generate(x, **kwargs)
                sync(); t2 = time.perf_counter()
            return out[0, len(ids):].tolist(), (t2 - t1) - (t1 - t0)

        run()
        runs = [run() for _ in range(reps)]
        tps = [(new_tokens - 1) / max(d, 1e-9) for _, d in runs]
        return {"hf_static_tps": statistics.median(tps), "hf_static_tps_reps": [round(t, 2) for t in tps], "_hf_tokens": runs[0][0]}


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        return {"generate": cmd_generate, "bench": cmd_bench}[args.command](args)
    except (EngineError, ValueError, FileNotFoundError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # a bug: still one line unless asked for the traceback
        if os.environ.get("DSPARK_DEBUG"):
            raise
        print(f"error: internal error ({type(exc).__name__}: {exc}); rerun with DSPARK_DEBUG=1 for details", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
