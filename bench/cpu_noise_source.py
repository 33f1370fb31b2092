"""Where this box's timing noise comes from, and whether anything the bot could read from outside a
process would be steadier than its wall clock. Prints JSON.

    python bench/cpu_noise_source.py [--seconds 20]

1. The same paired-noise figure as bench/cpu_noise_spectrum.py (SD of log(t_i / t_i+1) over back-to-back
   repetitions), one thread, for a memory-bound workload (the decode step's shape, 212 MB of weights)
   and a cache-resident one (4 x 256 KB): if only the first is noisy, memory bandwidth is the cause.
2. Wall clock against the thread's CPU time for each repetition: if the CPU time is steadier, the
   noise is time the vCPU did not run (steal, preemption) and a CPU-time ruler would remove it.
3. Two pinned processes, one per vCPU, timing a fixed workload at once: the correlation of their
   throughput in 50 ms - 1 s windows. A high correlation would let a reference workload on the other
   vCPU correct the measured one.
4. Steal time over the run (/proc/stat) and whether hardware counters exist (`perf stat -e cycles`):
   cycle counts would be a ruler that ignores frequency changes.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import statistics
import subprocess
import sys
import time


def _pair_sd(ts: list[float]) -> float:
    lr = [math.log(a / b) for a, b in zip(ts[::2], ts[1::2])]
    return 100 * statistics.stdev(lr)


def _workload(kind: str):
    import torch

    torch.set_num_threads(1)
    g = torch.Generator().manual_seed(0)
    if kind == "memory":
        w = [torch.randn(1536, 576, generator=g) for _ in range(60)]
        x = torch.randn(8, 576, generator=g)
        return lambda: [x @ m.t() for m in w]
    w = [torch.randn(256, 256, generator=g) for _ in range(4)]
    x = torch.randn(64, 256, generator=g)
    return lambda: [x @ m.t() for m in w for _ in range(50)]


def _steal() -> int:
    with open("/proc/stat") as f:
        return int(f.readline().split()[8])


def _timed(kind: str, seconds: float) -> dict:
    fn = _workload(kind)
    wall, cpu = [], []
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        t0, c0 = time.perf_counter(), time.thread_time()
        fn()
        cpu.append(time.thread_time() - c0)
        wall.append(time.perf_counter() - t0)
    return {"workload": kind, "repetitions": len(wall), "ms_median": round(1000 * statistics.median(wall), 2),
            "pair_sd_wall_pct": round(_pair_sd(wall), 2), "pair_sd_cpu_time_pct": round(_pair_sd(cpu), 2)}


def _pinned_child(cpu: int, kind: str, start: float, seconds: float) -> None:
    os.sched_setaffinity(0, {cpu})
    fn = _workload(kind)
    out = []
    while time.time() < start:
        pass
    while (t0 := time.time()) < start + seconds:
        fn()
        out.append((t0, time.time() - t0))
    json.dump(out, sys.stdout)


def _correlation(seconds: float) -> list[dict]:
    cpus = sorted(os.sched_getaffinity(0))
    if len(cpus) < 2:
        return [{"skipped": "one CPU"}]
    start = time.time() + 3.0
    procs = [subprocess.Popen([sys.executable, __file__, "--child", str(c), k, str(start), str(seconds)],
                              stdout=subprocess.PIPE, text=True) for c, k in ((cpus[0], "memory"), (cpus[1], "cache"))]
    a, b = (json.loads(p.communicate()[0]) for p in procs)
    rows = []
    for w in (0.05, 0.1, 0.25, 0.5, 1.0):
        def binned(d):
            bins: dict[int, list[float]] = {}
            for t, dt in d:
                bins.setdefault(int((t - start) / w), []).append(dt)
            return {k: statistics.mean(v) for k, v in bins.items() if len(v) >= 2}
        ba, bb = binned(a), binned(b)
        ks = sorted(set(ba) & set(bb))[1:-1]
        if len(ks) < 5:
            continue
        xa, xb = [math.log(ba[k]) for k in ks], [math.log(bb[k]) for k in ks]
        rows.append({"window_s": w, "windows": len(ks), "correlation": round(statistics.correlation(xa, xb), 3),
                     "sd_cpu0_pct": round(100 * statistics.stdev(xa), 2), "sd_cpu1_pct": round(100 * statistics.stdev(xb), 2)})
    return rows


def _counters() -> str:
    if not shutil.which("perf"):
        return "perf not installed"
    r = subprocess.run(["perf", "stat", "-e", "cycles,instructions", "true"], capture_output=True, text=True)
    return "not supported" if "not supported" in r.stderr else "available"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv and argv[0] == "--child":
        _pinned_child(int(argv[1]), argv[2], float(argv[3]), float(argv[4]))
        return 0
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=20.0)
    args = ap.parse_args(argv)
    s0, t0 = _steal(), time.monotonic()
    out = {"cpus": len(os.sched_getaffinity(0)),
           "timed": [_timed(k, args.seconds) for k in ("memory", "cache")],
           "two_vcpus_at_once": _correlation(args.seconds)}
    out["steal_pct_of_wall"] = round(100 * (_steal() - s0) / os.sysconf("SC_CLK_TCK") / (time.monotonic() - t0) / out["cpus"], 3)
    out["hardware_counters"] = _counters()
    print(json.dumps(out, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
