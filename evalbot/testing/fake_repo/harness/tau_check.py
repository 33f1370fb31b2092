"""Fake tau_check: AR reference then `reps` DSpark runs per context, timed with perf_counter."""

import hashlib
import json
import statistics
import time
from pathlib import Path

from harness import _common, settings

args = _common.parse()
from engine import fake as engine  # noqa: E402 - the ref's engine, imported after the harness

engine.before("tau_check")
prompt_text = (Path(__file__).resolve().parents[1] / "bench" / "prompts" / "prose.txt").read_text()
n = settings.NEW_TOKENS
for ctx in settings.CONTEXTS[args.profile]:
    prompt = engine.prompt_tokens(prompt_text, ctx)
    engine.generate(prompt, 1, "ar")  # warm-up, untimed
    t0 = time.perf_counter()
    engine.prefill(prompt)
    prefill_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    ar = engine.generate(prompt, n, "ar")
    ar_s = time.perf_counter() - t0
    streams, secs = [], []
    for i in range(args.reps):
        t0 = time.perf_counter()
        streams.append(engine.generate(prompt, n, "dspark", run_index=i))
        secs.append(time.perf_counter() - t0)
    tps_runs = [len(s) / d for s, d in zip(streams, secs)]
    hist = engine.accept_hist(settings.BLOCK_SIZE)
    tau = sum(k * c for k, c in enumerate(hist)) / sum(hist)
    same = sum(1 for s in streams if s == ar)
    _common.emit({
        "kind": "tau_check", "profile": args.profile, "prompt": "prose",
        "prompt_sha256": hashlib.sha256(json.dumps(prompt).encode()).hexdigest(),
        "ctx": ctx, "new_tokens": n, "ar_tps": len(ar) / ar_s,
        "dspark_tps": statistics.median(tps_runs), "dspark_tps_runs": tps_runs,
        "prefill_tps": ctx / prefill_s, "tau": tau, "block_size": settings.BLOCK_SIZE,
        "accept_hist": hist, "lossless": same == len(streams), "lossless_runs": same, "runs": len(streams),
        "ar_tokens": ar, "dspark_tokens": streams, "ar_decode_s": ar_s, "dspark_decode_s": secs,
        "model_sha256": settings.MODEL_SHA256, "drafter_sha256": engine.drafter_sha256(),
        "device": "cpu", "torch": "fake", "triton": "fake",
    })
