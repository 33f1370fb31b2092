"""python bench/window_capacity.py [--tokens N] [--seeds K] — how many rounds of the gpu plan one corpus
holds before no unseen window is left for the next pair of processes (evalbot/measure/windows.py),
simulated: 3 processes per ref, pairings rotating as the campaign rotates them, each process's
warm-up windows first, then per round DSpark and AR windows at 1024, 4096 and 7936 tokens with a
shadow of 256 + 64. Pure arithmetic over offsets; no model, no corpus text."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalbot.measure.windows import CorpusExhausted, WindowAllocator  # noqa: E402

CONTEXTS = (1024, 4096, 7936)


def rounds(tokens: int, seed: int, processes: int = 3, shadow: int = 256 + 64) -> int:
    alloc = WindowAllocator({"c": range(tokens)}, seed, shadow)
    for ref in ("m", "p"):
        for i in range(processes):
            for ctx in CONTEXTS:
                for _ in range(2):
                    alloc.take("c", ctx, [f"{ref}{i}"])
    pairings = [(i, (i + k) % processes) for k in range(processes) for i in range(processes)]
    r = 0
    while True:
        m, p = pairings[r % len(pairings)]
        try:
            alloc.take_many("c", [ctx for ctx in CONTEXTS for _ in range(2)], [f"m{m}", f"p{p}"])
        except CorpusExhausted:
            return r
        r += 1


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--tokens", type=int, default=481_000, help="corpus length (prose.txt: 481k tokens)")
    ap.add_argument("--seeds", type=int, default=5)
    args = ap.parse_args(argv)
    got = [rounds(args.tokens, s) for s in range(args.seeds)]
    print(f"{args.tokens} tokens: rounds per seed {got}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
