"""An engine switch on and off, side by side in one process: programmatic dependent launch (kernels.common,
the default) or the unrolled norm pass (--switch DSPARK_UNROLL_NORM). AR and DSpark decode
tok/s and tau on real text at exact lengths, per corpus and context. Prints JSON lines.

    python bench/pdl_check.py [--switch DSPARK_PDL|DSPARK_UNROLL_NORM] [--model PATH] [--contexts 1024,4096,7936]
                              [--new 256] [--reps 5]
    python bench/pdl_check.py --random --only on|off     AR only, random weights in the bundled model's
                                                        shape (no staging), one setting per process

Two engines share the loaded weights: one made and captured with the switch on, one with it off
(SWITCH=0 while it is made, captures and runs). The settings alternate per repetition (on off, off on, ...)
so slow drift of the box cancels; every repetition takes a fresh window of the corpus, which both
settings decode. The figures are the engine's own decode clock (prefill excluded). Without --model:
the bundled model from the model cache. A GPU figure: on CPU it measures nothing (PDL is CUDA-only).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(_ROOT))

import torch  # noqa: E402

from engine.dspark import attach_drafter  # noqa: E402
from engine.generate import Engine  # noqa: E402
from engine.loader import load_model  # noqa: E402
from gpu_timing import set_switch  # noqa: E402

LABELS = {"DSPARK_PDL": ("pdl", "no_pdl"), "DSPARK_UNROLL_NORM": ("unrolled", "looped")}  # on, off


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default=None)
    ap.add_argument("--contexts", default="1024,4096,7936")
    ap.add_argument("--new", type=int, default=256)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--device", default="cuda", help="cpu: a smoke test of this script only (no PDL there)")
    ap.add_argument("--random", action="store_true", help="random weights in the bundled model's shape: AR only")
    ap.add_argument("--only", choices=("on", "off"), default=None, help="one engine, one setting, in this process")
    ap.add_argument("--switch", choices=tuple(LABELS), default="DSPARK_PDL")
    args = ap.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        print("pdl_check: needs CUDA (programmatic dependent launch is a GPU feature)", file=sys.stderr)
        return 2
    if args.random:
        return _random_ar(args)
    loaded = load_model(args.model)
    engines = {}
    sw = args.switch
    on_l, off_l = LABELS[sw]
    for on in (True, False):
        set_switch(sw, on)
        e = Engine(loaded=loaded, device=args.device)
        attach_drafter(e)
        engines[on] = e
    tok = engines[True].tokenizer
    contexts = [int(c) for c in args.contexts.split(",")]
    corpora = {name: tok.encode((_ROOT / "harness" / "prompts" / f"{name}.txt").read_text()) for name in ("code", "prose")}
    cuda = args.device == "cuda"
    print(json.dumps({"device": torch.cuda.get_device_name() if cuda else "cpu", "torch": torch.__version__,
                      "pdl_capable": cuda and torch.cuda.get_device_capability()[0] >= 9, "new_tokens": args.new,
                      "switch": sw}),
          flush=True)
    for corpus, ids in corpora.items():
        for ctx in contexts:
            need = (args.reps + 1) * (ctx + args.new)
            if len(ids) < need:
                print(json.dumps({"corpus": corpus, "ctx": ctx, "skipped": f"corpus has {len(ids)} tokens, needs {need}"}))
                continue
            rows: dict[bool, dict[str, list[float]]] = {on: {"ar": [], "dspark": [], "tau": []} for on in (True, False)}
            for rep in range(-1, args.reps):  # rep -1: warm-up (captures), not kept
                window = ids[(rep + 1) * (ctx + args.new):][:ctx]
                for on in ((True, False) if rep % 2 else (False, True)):
                    set_switch(sw, on)
                    e = engines[on]
                    ar = e.generate(window, args.new, stop_at_eos=False)
                    ds = e.generate(window, args.new, dspark=True, stop_at_eos=False)
                    if ds.tokens != ar.tokens:
                        print(json.dumps({"corpus": corpus, "ctx": ctx, "error": "DSpark differs from AR", on_l: on}))
                        return 1
                    if rep >= 0:
                        rows[on]["ar"].append(len(ar.tokens) / ar.decode_s)
                        rows[on]["dspark"].append(len(ds.tokens) / ds.decode_s)
                        rows[on]["tau"].append(float(ds.stats.get("tau", 0.0)))
            med = {on: {k: statistics.median(v) for k, v in r.items()} for on, r in rows.items()}
            print(json.dumps({
                "corpus": corpus, "ctx": ctx, "reps": args.reps,
                "ar_tps": {on_l: med[True]["ar"], off_l: med[False]["ar"]},
                "dspark_tps": {on_l: med[True]["dspark"], off_l: med[False]["dspark"]},
                "tau": med[True]["tau"], "ar_ratio": med[True]["ar"] / med[False]["ar"],
                "dspark_ratio": med[True]["dspark"] / med[False]["dspark"],
                "dspark_over_ar": med[True]["dspark"] / med[True]["ar"],
            }), flush=True)
    set_switch(sw, True)
    return 0


def _random_ar(args) -> int:
    """AR decode tok/s on random weights (speed does not depend on them), per context; with --only, one
    engine in this process, so a driver can alternate processes (no second engine beside it)."""
    sys.path.insert(0, str(_ROOT / "tests" / "gpu"))
    from models import random_ids, random_model

    loaded = random_model()
    settings = [args.only == "on"] if args.only else [True, False]
    engines = {}
    sw = args.switch
    on_l, off_l = LABELS[sw]
    for on in settings:
        set_switch(sw, on)
        engines[on] = Engine(loaded=loaded, device=args.device)
    for ctx in (int(c) for c in args.contexts.split(",")):
        ids = random_ids(ctx, loaded.config.vocab_size, seed=ctx)
        tps: dict[bool, list[float]] = {on: [] for on in settings}
        for rep in range(-1, args.reps):
            for on in settings:
                set_switch(sw, on)
                r = engines[on].generate(ids, args.new, stop_at_eos=False)
                if rep >= 0:
                    tps[on].append(len(r.tokens) / r.decode_s)
        print(json.dumps({"ctx": ctx, "random_weights": True, "engines_in_process": len(settings),
                          **{f"ar_tps_{on_l if on else off_l}": statistics.median(v) for on, v in tps.items()}}),
              flush=True)
    set_switch(sw, True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
