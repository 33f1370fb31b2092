"""python bench/receipt_ci.py RECEIPT... — the DSpark speedup interval of each receipt as scored, and as
the current statistics (evalbot/decide/stats.py: crossed_bootstrap_ci, the receipt's own bootstrap
settings) compute it from the same rounds. Receipts are read as written (DSSE envelope, unsigned too)."""

from __future__ import annotations

import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from evalbot.decide.stats import crossed_bootstrap_ci  # noqa: E402
from evalbot.report.receipt_view import read_receipt  # noqa: E402


def main(paths: list[str]) -> int:
    for path in paths:
        pred = read_receipt(Path(path))[0]["predicate"]
        rounds = [r for r in pred["measurements"]["round_summaries"] if r["dspark_ratio"] is not None]
        st = pred["method"]["settings"]["stats"]
        v = [r["dspark_ratio"] for r in rounds]
        lo, hi = crossed_bootstrap_ci(v, [r["main_process"] for r in rounds], [r["pr_process"] for r in rounds],
                                      resamples=st["bootstrap_resamples"], seed=st["bootstrap_seed"], confidence=st["confidence"])
        sp = pred["verdict"]["speedup"]
        print(f"{Path(path).name:34s} {len(v):3d} rounds  median {100 * (statistics.median(v) - 1):+6.2f}%  "
              f"as scored {sp['ci_low_pct']:+6.2f} … {sp['ci_high_pct']:+6.2f} ({pred['verdict']['tier']})  "
              f"crossed {100 * (lo - 1):+6.2f} … {100 * (hi - 1):+6.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
