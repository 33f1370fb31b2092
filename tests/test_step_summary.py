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
