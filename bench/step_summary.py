"""Summarise what `bench/step_sweep.py --tables`, `--switch` or `--per-graph` printed: per variant (a named
table, the switch on / off, steps per graph), the median step of its two passes at each (context, rows), against
the baseline in the same run (the table "base", the switch off, one step per graph), plus any per-kernel
breakdowns and errors. A `--token-tree` run: per context, the median of one row, the chains of 7 and 8 rows and
the tree, the tree against the chain of 7 rows (today's verify).

    python bench/step_summary.py OUT/tables.jsonl
    python bench/step_summary.py --pick OUT/tables.jsonl     the table to adopt, or "none" (see pick)
    python bench/step_summary.py --tree-ok OUT/tree.jsonl    "yes" where the tree's verify costs at most
                                                             TREE_MAX_COST over the 7-row chain's at every context
"""

from __future__ import annotations

import json
import statistics
import sys


def _label(r: dict) -> str | None:
    """The variant a line belongs to: its table's name, "on" / "off" for a switch, "K per graph"."""
    if "per_graph" in r:
        return f"{r['per_graph']} per graph"
    return r["table"] if "table" in r else ("on" if r.get("on") else "off") if "switch" in r else None


def passes(lines: list[dict]) -> dict[str, dict[tuple[int, int], list[float]]]:
    """Per variant, the step of each pass at each (context, rows)."""
    steps: dict[str, dict[tuple[int, int], list[float]]] = {}
    for r in lines:
        label = _label(r)
        if label is not None and "us" in r and "error" not in r:
            steps.setdefault(label, {}).setdefault((r["ctx"], r["rows"]), []).append(r["us"])
    return steps


def summarise(lines: list[dict]) -> list[str]:
    out = []
    for r in lines:
        label = _label(r)
        if label is not None and "error" in r:
            out.append(f"error {label} ctx {r.get('ctx')}: {r['error']}")
        elif label is not None and "breakdown_us" in r:
            out.append(f"breakdown {label} " + json.dumps({k: round(v, 2) for k, v in r["breakdown_us"].items()}))
    steps = passes(lines)
    base_label = next((b for b in ("base", "1 per graph") if b in steps), "off")
    base = {cell: statistics.median(v) for cell, v in steps.get(base_label, {}).items()}
    for label, cells in steps.items():
        parts = []
        for (ctx, rows), v in sorted(cells.items()):
            us = statistics.median(v)
            vs = f" ({us / base[(ctx, rows)] - 1:+.1%} vs {base_label})" if (ctx, rows) in base else ""
            parts.append(f"{ctx}/{rows} {us:.1f}{vs} [{' / '.join(f'{x:.1f}' for x in v)}]")
        out.append(f"{label}: " + " · ".join(parts))
    return out + tree_lines(lines)


def medians(lines: list[dict]) -> dict[str, dict[tuple[int, int], float]]:
    """Per variant, the median step of its passes at each (context, rows)."""
    return {t: {cell: statistics.median(v) for cell, v in cells.items()} for t, cells in passes(lines).items()}


def pick(lines: list[dict], min_gain: float = 0.005) -> str:
    """The table to adopt over "base": one no slower in any cell it was timed in (every cell of base), whose
    1-row steps are on average at least min_gain faster; of those, the lowest mean ratio over all cells.
    "none" when no table qualifies (or a table failed in some cell)."""
    med = medians(lines)
    base = med.get("base", {})
    failed = {r["table"] for r in lines if "table" in r and "error" in r}
    best, best_ratio = "none", 1.0
    for name, cells in med.items():
        if name == "base" or name in failed or not base or set(cells) != set(base):
            continue
        ratios = {cell: cells[cell] / base[cell] for cell in base}
        one_row = [v for (ctx, rows), v in ratios.items() if rows == 1]
        if max(ratios.values()) > 1.0 or not one_row or statistics.mean(one_row) > 1.0 - min_gain:
            continue
        mean = statistics.mean(ratios.values())
        if mean < best_ratio:
            best, best_ratio = name, mean
    return best


TREE_MAX_COST = 1.05  # a tree's verify may cost this much over the chain's: it commits +12-35 % per verify


def verifies(lines: list[dict]) -> dict[int, dict[str, float]]:
    """A --token-tree run: per context, the median step of each verify ("one row 1", "chain 7", "chain 8", "tree 8")."""
    cells: dict[int, dict[str, list[float]]] = {}
    for r in lines:
        if "verify" in r and "us" in r:
            cells.setdefault(r["ctx"], {}).setdefault(f"{r['verify']} {r['rows']}", []).append(r["us"])
    return {ctx: {k: statistics.median(v) for k, v in by.items()} for ctx, by in cells.items()}


def tree_lines(lines: list[dict]) -> list[str]:
    out = []
    for ctx, by in sorted(verifies(lines).items()):
        tree = next((v for k, v in by.items() if k.startswith("tree")), None)
        vs = f" (tree {tree / by['chain 7'] - 1:+.1%} vs chain 7)" if tree is not None and "chain 7" in by else ""
        out.append(f"ctx {ctx}: " + " · ".join(f"{k} {v:.1f}" for k, v in sorted(by.items())) + vs)
    return out


def tree_ok(lines: list[dict]) -> str:
    cells = verifies(lines)
    ok = bool(cells) and all(
        "chain 7" in by and any(k.startswith("tree") for k in by)
        and max(v for k, v in by.items() if k.startswith("tree")) <= TREE_MAX_COST * by["chain 7"] for by in cells.values())
    return "yes" if ok else "no"


def main() -> int:
    args = sys.argv[1:]
    mode = args[0] if args[:1] in (["--pick"], ["--tree-ok"]) else None
    if mode:
        args = args[1:]
    if len(args) != 1:
        print("step_summary: usage: python bench/step_summary.py [--pick | --tree-ok] FILE.jsonl", file=sys.stderr)
        return 2
    try:
        with open(args[0]) as f:
            lines = [json.loads(line) for line in f if line.strip()]
    except (OSError, ValueError) as exc:
        print(f"step_summary: cannot read {args[0]}: {exc}", file=sys.stderr)
        return 2
    if mode == "--pick":
        print(pick(lines))
    elif mode == "--tree-ok":
        print(tree_ok(lines))
    else:
        print("\n".join(summarise(lines)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
