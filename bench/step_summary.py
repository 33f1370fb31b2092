"""Summarise what `bench/step_sweep.py --tables` or `--switch` printed: per variant (a named table, or the
switch on / off), the median step of its two passes at each (context, rows), against the baseline in the
same run (the table "base", or the switch off), plus any per-kernel breakdowns and errors.

    python bench/step_summary.py OUT/tables.jsonl
"""

from __future__ import annotations

import json
import statistics
import sys


def summarise(lines: list[dict]) -> list[str]:
    out = []
    steps: dict[str, dict[tuple[int, int], list[float]]] = {}
    for r in lines:
        label = r["table"] if "table" in r else ("on" if r.get("on") else "off") if "switch" in r else None
        if label is None:
            continue
        if "error" in r:
            out.append(f"error {label} ctx {r.get('ctx')}: {r['error']}")
        elif "breakdown_us" in r:
            out.append(f"breakdown {label} " + json.dumps({k: round(v, 2) for k, v in r["breakdown_us"].items()}))
        elif "us" in r:
            steps.setdefault(label, {}).setdefault((r["ctx"], r["rows"]), []).append(r["us"])
    base_label = "base" if "base" in steps else "off"
    base = {cell: statistics.median(v) for cell, v in steps.get(base_label, {}).items()}
    for label, cells in steps.items():
        parts = []
        for (ctx, rows), v in sorted(cells.items()):
            us = statistics.median(v)
            vs = f" ({us / base[(ctx, rows)] - 1:+.1%} vs {base_label})" if (ctx, rows) in base else ""
            parts.append(f"{ctx}/{rows} {us:.1f}{vs} [{' / '.join(f'{x:.1f}' for x in v)}]")
        out.append(f"{label}: " + " · ".join(parts))
    return out


def main() -> int:
    if len(sys.argv) != 2:
        print("step_summary: usage: python bench/step_summary.py FILE.jsonl", file=sys.stderr)
        return 2
    try:
        with open(sys.argv[1]) as f:
            lines = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as exc:
        print(f"step_summary: cannot read {sys.argv[1]}: {exc}", file=sys.stderr)
        return 2
    print("\n".join(summarise(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
