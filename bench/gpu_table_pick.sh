#!/usr/bin/env bash
# Tune and land a launch-table entry in one device call, no staging: time named tables (bench/step_sweep.py
# --tables, one named "base" = this tree's table) at 1k, 4k and 7936, 1 and 7 rows, two alternating passes;
# adopt the one bench/step_summary.py --pick chooses (no slower in any cell, 1-row steps >= 0.5 % faster on
# average) by applying PATCHDIR/NAME.patch, a patch of kernels/tuning.py prepared here beforehand, so the
# landing tree is byte-identical to the one tested; then the GPU suite on the resulting tree.
#   device run:  TABLES=dir/tables.json PATCHDIR=dir bash bench/gpu_table_pick.sh
# Writes tables.jsonl, picked.txt, sha256.txt, gpu-tests.log to $OUT. Here afterwards: `git apply
# PATCHDIR/$(cat picked.txt).patch` unless it says none, and compare sha256.txt.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
if [ ! -f "${TABLES:-}" ] || [ ! -d "${PATCHDIR:-}" ]; then
  echo "gpu_table_pick: usage: TABLES=FILE.json PATCHDIR=DIR bash bench/gpu_table_pick.sh (got '${TABLES:-}' '${PATCHDIR:-}')"; exit 2
fi
timeout 300 python3 bench/step_sweep.py --tables "$(cat "$TABLES")" --contexts 1024,4096,7936 --replays 100 \
  > "$OUT/tables.jsonl" 2> "$OUT/tables.err"
echo "tables exit $?"
python3 bench/step_summary.py "$OUT/tables.jsonl"
picked=$(python3 bench/step_summary.py --pick "$OUT/tables.jsonl")
echo "$picked" > "$OUT/picked.txt"
if [ "$picked" != none ]; then
  git apply "$PATCHDIR/$picked.patch" || { echo "gpu_table_pick: $PATCHDIR/$picked.patch does not apply"; exit 2; }
fi
echo "picked: $picked"
OUT=$OUT timeout 300 bash bench/gpu_tests.sh > /dev/null 2>&1  # also writes sha256.txt of the resulting tree
echo "tests/gpu exit $?: $(grep -E 'passed|failed' "$OUT/gpu-tests.log" | tail -n 1)"
rm -f "$OUT/gpu-tests.xml"; [ -s "$OUT/tables.err" ] || rm -f "$OUT/tables.err"
