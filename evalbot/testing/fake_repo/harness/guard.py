"""Fake guard: decode and prefill tok/s of other model shapes, median of reps after a warm-up."""

import statistics
import time

from harness import _common, settings

args = _common.parse()
from engine import fake as engine  # noqa: E402

engine.before("guard")
for name, ctx in settings.GUARDS:
    engine.guard_decode(name, 8)  # warm-up
    dec, pre = [], []
    for _ in range(settings.GUARD_REPS):
        t0 = time.perf_counter()
        engine.guard_decode(name, 8)
        dec.append(8 / (time.perf_counter() - t0))
        t0 = time.perf_counter()
        engine.guard_prefill(name, ctx)
        pre.append(ctx / (time.perf_counter() - t0))
    _common.emit({
        "kind": "guard", "guard": name, "ctx": ctx, "decode_tps": statistics.median(dec),
        "prefill_tps": statistics.median(pre), "reps": settings.GUARD_REPS,
        "decode_tps_reps": dec, "prefill_tps_reps": pre,
    })
