"""How noisy this box is at every timescale: a fixed, memory-bound workload timed back to back.

    python bench/cpu_noise_spectrum.py [--seconds 60] [--threads N]

The workload is what a CPU decode step is: small-row matrix products over weights larger than the
last-level cache (60 fp32 matrices of 1536 x 576, 212 MB), so its time follows the memory bandwidth
the box gets. For blocks of 1, 2, 5, ... iterations it prints the SD of log(block / next block):
exactly the noise of a paired A/B measurement whose requests last that long. If the noise were white,
longer requests would average it away (SD / sqrt(block)); on the 2-vCPU VM it stays ~8-10 % at
every length from 50 ms to 2.4 s (docs/perf.md), so only more pairs narrow an interval. Prints JSON.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import time

import torch


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's default)")
    args = ap.parse_args(argv)
    if args.threads:
        torch.set_num_threads(args.threads)
    g = torch.Generator().manual_seed(0)
    weights = [torch.randn(1536, 576, generator=g) for _ in range(60)]
    x = torch.randn(8, 576, generator=g)
    times: list[float] = []
    end = time.monotonic() + args.seconds
    while time.monotonic() < end:
        t0 = time.perf_counter()
        for w in weights:
            x @ w.t()
        times.append(time.perf_counter() - t0)
    rows = []
    for k in (1, 2, 5, 10, 20, 50):
        blocks = [sum(times[i:i + k]) for i in range(0, len(times) - k + 1, k)]
        logr = [math.log(a / b) for a, b in zip(blocks[::2], blocks[1::2])]
        if len(logr) < 3:
            continue
        sd = statistics.stdev(logr)
        rows.append({"block_iterations": k, "block_ms": round(1000 * statistics.mean(blocks), 1), "pairs": len(logr),
                     "pair_sd_pct": round(100 * sd, 2),
                     "white_noise_would_be_pct": round(100 * rows[0]["pair_sd_pct"] / 100 / math.sqrt(k), 2) if rows else None})
    print(json.dumps({"threads": torch.get_num_threads(), "iterations": len(times),
                      "iteration_ms_median": round(1000 * statistics.median(times), 2),
                      "iteration_sd_pct": round(100 * statistics.stdev(times) / statistics.mean(times), 2),
                      "gb_per_s": round(sum(w.numel() * 4 for w in weights) / statistics.median(times) / 1e9, 2),
                      "blocks": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
