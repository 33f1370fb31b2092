"""What a kernel boundary and a dependent L2 round trip cost on this GPU: a CUDA graph of 180 tiny
kernels in a chain (the step's kernel count at 30 layers), each waiting for the one before
(programmatic dependent launch, as the step kernels do: kernels/common.pdl_start), then making TRIPS
dependent loads through L2 of what the kernel before it wrote, and storing the result for the next.
Prints JSON lines: microseconds per kernel for each (programs, trips, PDL). Nothing is staged.

    python bench/chain_probe.py [--kernels 180] [--replays 100]

Read: trips 0 is the boundary alone (launch, wait, one store); each further trip adds one round trip
to L2 on the chain's critical path. The step kernels make 2-4 such trips after their wait (docs/perf.md).
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

_ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(_ROOT), str(_ROOT / "bench")]

import torch  # noqa: E402
import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from gpu_timing import time_graph  # noqa: E402
from kernels.common import pdl_start  # noqa: E402


@triton.jit
def _chain_kernel(src, dst, TRIPS: tl.constexpr, USE_PDL: tl.constexpr):
    pid = tl.program_id(0)
    pdl_start(USE_PDL)
    lanes = tl.arange(0, 32)
    off = pid * 32
    v = tl.zeros([32], dtype=tl.float32)
    for i in tl.static_range(TRIPS):
        # the index depends on the value loaded before (x * 0 is not folded for floats): a real chain
        j = (tl.sum(v, axis=0) * 0.0).to(tl.int32)
        v = tl.load(src + off + j + lanes, cache_modifier=".cg") + v
    tl.store(dst + off + lanes, v + 1.0)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--kernels", type=int, default=180)
    ap.add_argument("--replays", type=int, default=100)
    args = ap.parse_args()
    if not torch.cuda.is_available():
        print("chain_probe: needs CUDA", file=sys.stderr)
        return 2
    n_sm = torch.cuda.get_device_properties(0).multi_processor_count
    bufs = [torch.zeros(n_sm * 32, device="cuda") for _ in range(2)]
    for pdl in (True, False):
        for programs in (1, 36, n_sm):
            for trips in (0, 1, 2, 3, 4):
                extra = {"launch_pdl": True} if pdl else {}

                def chain():
                    for i in range(args.kernels):
                        _chain_kernel[(programs,)](bufs[i % 2], bufs[1 - i % 2], TRIPS=trips, USE_PDL=pdl, **extra)

                us = time_graph(chain, args.replays) / args.kernels
                print(json.dumps({"pdl": pdl, "programs": programs, "trips": trips, "us_per_kernel": round(us, 3)}),
                      flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
