"""python bench/receipt_noise.py RECEIPT... — where the noise of a scoring's requests comes from, read from
its receipts (DSSE envelope, unsigned too). Per mode (main model: AR and DSpark) and context:

- `pair sd`: the SD of log(PR / main) over the same window measured by both refs in one round, by the
  bot's clock (what the verdict reads) and by the processes' own decode clock (shown, never gated);
- `outliers`: how many pairs have a bot-clock ratio off by more than 10 %, and the rounds they fell in;
- `prefill` and `overhead`: median and SD of the reported prefill, and of the bot's clock minus the
  reported prefill and decode (the wire, parsing, the thaw).

This is how the 2026-12-01 diagnosis was made: DSpark outliers of 50-90 % in the first rounds only (a
launch size captured inside a timed decode), and AR's bot-clock SD of ~3 % against 0.2 % on the
processes' own decode clock (the eager prefill's host jitter)."""

from __future__ import annotations

import collections
import math
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalbot.report.receipt_view import read_receipt  # noqa: E402


def _sd(xs: list[float]) -> float:
    return statistics.stdev(xs) if len(xs) > 1 else 0.0


def main(paths: list[str]) -> int:
    for path in paths:
        pred = read_receipt(Path(path))[0]["predicate"]
        pairs: dict[tuple, dict[str, dict]] = collections.defaultdict(dict)
        for r in pred["requests"]:
            if r["model"] == "main":
                pairs[(r["mode"], r["round"], r["window"])][r["ref"]] = r
        rows: dict[tuple, list] = collections.defaultdict(list)
        for (mode, rnd, window), by in pairs.items():
            if set(by) != {"base", "head"}:
                continue
            b, h = by["base"], by["head"]
            ctx = window.rsplit("+", 1)[-1]
            rows[(mode, ctx)].append((rnd, math.log(h["bot_s"] / b["bot_s"]),
                                      math.log(h["reported_decode_s"] / b["reported_decode_s"]),
                                      [x["reported_prefill_s"] for x in (b, h)],
                                      [x["bot_s"] - x["reported_prefill_s"] - x["reported_decode_s"] for x in (b, h)]))
        print(f"{Path(path).name} ({pred['measurements']['rounds']} rounds)")
        for (mode, ctx), v in sorted(rows.items()):
            bot, own = [x[1] for x in v], [x[2] for x in v]
            off = [x[0] for x in v if abs(x[1]) > math.log(1.1)]
            out = sorted(set(off))
            pre = [p * 1000 for x in v for p in x[3]]
            ovh = [o * 1000 for x in v for o in x[4]]
            print(f"  {mode:6s} @{ctx:>5s}  {len(v):3d} pairs  pair sd bot {100 * _sd(bot):5.2f}%  own {100 * _sd(own):5.2f}%  "
                  f"outliers {len(off):2d} (rounds {out})  prefill {statistics.median(pre):5.1f} ± {_sd(pre):4.1f} ms  "
                  f"overhead {statistics.median(ovh):4.1f} ± {_sd(ovh):3.1f} ms")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
