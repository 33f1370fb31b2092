#!/usr/bin/env bash
# Measure an engine patch that has not landed, in one device call, without staging the model: apply it to
# the carried tree, run the GPU suite on the patched tree, then time the captured step with the patch's
# kernel switch on and off (bench/step_sweep.py --switch, 1 and 7 rows at 1k, 4k and 7936, alternating), and
# each kernel's phases at 4k with it off and on (bench/kernel_phases.py).
#   device run:  bash bench/gpu_patch_check.sh docs/perf-data/2026-12-04-fused-mlp/fused-mlp-not-landed.patch DSPARK_FUSED_MLP
# With TABLES=a JSON file of named tables (bench/step_sweep.py --tables, one named "base"), also the step at
# 4k under each table with the switch on (the patch's own launch kinds tuned in the same call).
# The switch must be one of bench/gpu_timing.py's SWITCH_CACHES once the patch is applied. Writes
# sha256.txt, gpu-tests.log, switch.jsonl, phases-0/1.jsonl (and tables.jsonl) to $OUT and prints the step per
# cell and each kernel role's phases, off -> on.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
patch=${1:-}; switch=${2:-}
if [ -z "$patch" ] || [ -z "$switch" ] || [ ! -f "$patch" ]; then
  echo "gpu_patch_check: usage: bash bench/gpu_patch_check.sh PATCH SWITCH (got '${patch}' '${switch}')"; exit 2
fi
git apply "$patch" || { echo "gpu_patch_check: $patch does not apply to this tree"; exit 2; }
grep -q "\"$switch\"" bench/gpu_timing.py || { echo "gpu_patch_check: $switch is not a switch of bench/gpu_timing.py"; exit 2; }
OUT=$OUT timeout 300 bash bench/gpu_tests.sh > /dev/null 2>&1  # also writes sha256.txt of the patched tree
echo "tests/gpu exit $?: $(grep -E 'passed|failed' "$OUT/gpu-tests.log" | tail -n 1)"
timeout 240 python3 bench/step_sweep.py --switch "$switch" --contexts 1024,4096,7936 --replays 100 > "$OUT/switch.jsonl" 2> "$OUT/switch.err"
echo "step_sweep exit $?"
python3 bench/step_summary.py "$OUT/switch.jsonl"
# where inside each kernel the step changes (bench/kernel_phases.py): 4k, 1 row, the switch off and on
for on in 0 1; do
  env "$switch=$on" timeout 90 python3 bench/kernel_phases.py --contexts 4096 --rows 1 > "$OUT/phases-$on.jsonl" 2>> "$OUT/switch.err"
done
python3 bench/kernel_phases.py --compare "$OUT/phases-0.jsonl" "$OUT/phases-1.jsonl" 2>&1 || true
if [ -n "${TABLES:-}" ]; then
  env "$switch=1" timeout 240 python3 bench/step_sweep.py --tables "$(cat "$TABLES")" --contexts 4096 --replays 100 \
    > "$OUT/tables.jsonl" 2> "$OUT/tables.err"
  echo "step_sweep --tables exit $?"
  python3 bench/step_summary.py "$OUT/tables.jsonl"
fi
