"""bench/step_summary.py: the medians per variant and cell against the same run's baseline."""

from __future__ import annotations

import importlib.util
from pathlib import Path

spec = importlib.util.spec_from_file_location("step_summary", Path(__file__).resolve().parents[1] / "bench" / "step_summary.py")
step_summary = importlib.util.module_from_spec(spec)
spec.loader.exec_module(step_summary)


def test_tables_are_set_against_base_and_switches_against_off():
    tables = [{"table": t, "rep": r, "ctx": 4096, "rows": 1, "us": us}
              for t, r, us in (("base", 0, 100.0), ("x", 0, 90.0), ("base", 1, 102.0), ("x", 1, 92.0))]
    tables.append({"table": "y", "ctx": 4096, "error": "out of resource"})
    out = step_summary.summarise(tables)
    assert out[0] == "error y ctx 4096: out of resource"
    assert out[1].startswith("base: 4096/1 101.0 (+0.0% vs base)")
    assert out[2] == "x: 4096/1 91.0 (-9.9% vs base) [90.0 / 92.0]"
    switch = [{"switch": "S", "on": on, "rep": 0, "ctx": 1024, "rows": 7, "us": us} for on, us in ((True, 50.0), (False, 40.0))]
    assert step_summary.summarise(switch)[0] == "on: 1024/7 50.0 (+25.0% vs off) [50.0]"
    graphs = [{"per_graph": k, "rep": 0, "ctx": 4096, "rows": 1, "us": us} for k, us in ((1, 530.0), (16, 524.7))]
    assert step_summary.summarise(graphs)[1] == "16 per graph: 4096/1 524.7 (-1.0% vs 1 per graph) [524.7]"


def _table_lines(figures):
    return [{"table": t, "rep": rep, "ctx": ctx, "rows": rows, "us": us}
            for t, cells in figures.items() for (ctx, rows), pair in cells.items() for rep, us in enumerate(pair)]


def test_pick_adopts_the_table_faster_everywhere_and_nothing_slower_anywhere():
    base = {(1024, 1): (100.0, 100.0), (1024, 7): (110.0, 110.0), (4096, 1): (120.0, 120.0), (4096, 7): (130.0, 130.0)}
    everywhere = {cell: (v[0] * 0.98, v[1] * 0.98) for cell, v in base.items()}
    better_but_slower_once = {cell: (v[0] * 0.95, v[1] * 0.95) for cell, v in base.items()}
    better_but_slower_once[(4096, 7)] = (131.0, 131.0)
    barely = {cell: (v[0] * 0.998, v[1] * 0.998) for cell, v in base.items()}
    lines = _table_lines({"base": base, "a": everywhere, "b": better_but_slower_once, "c": barely})
    assert step_summary.pick(lines) == "a"
    assert step_summary.pick(_table_lines({"base": base, "b": better_but_slower_once, "c": barely})) == "none"
    failed = lines + [{"table": "a", "ctx": 4096, "error": "out of resources"}]
    assert step_summary.pick(failed) == "none"
    assert step_summary.pick(_table_lines({"a": everywhere})) == "none"  # no base: nothing to adopt


def test_a_token_tree_run_is_set_against_the_seven_row_chain_and_passes_within_its_cost():
    def run(tree_us):
        return [{"verify": v, "rep": rep, "ctx": ctx, "rows": rows, "us": us * (1 + 0.01 * rep)}
                for ctx in (1024, 4096) for rep in range(3)
                for v, rows, us in (("one row", 1, 500.0), ("chain", 7, 520.0), ("chain", 8, 522.0), ("tree", 8, tree_us[ctx]))]

    cheap = run({1024: 530.0, 4096: 540.0})
    out = step_summary.summarise(cheap)
    assert out[0] == "ctx 1024: chain 7 525.2 · chain 8 527.2 · one row 1 505.0 · tree 8 535.3 (tree +1.9% vs chain 7)"
    assert step_summary.tree_ok(cheap) == "yes"
    assert step_summary.tree_ok(run({1024: 530.0, 4096: 560.0})) == "no"  # +7.7 % at 4k
    assert step_summary.tree_ok([]) == "no"
