#!/usr/bin/env bash
# One device call for an engine change (random weights, no staging): the GPU suite, then the captured
# step's time (bench/step_sweep.py) for this tree and for the previous main's (an archive of its engine,
# kernels, harness and bench, carried as .devstage/base.tgz), the launch-configuration sweep, and AR
# decode by the engine's own clock (bench/pdl_check.py --random --only on) in both trees;
# `rows`: the step at 1, 7, 16 and 32 rows, what a token tree's verify would cost (bench/verify_rows.py).
#   git archive --format=tar.gz -o .devstage/base.tgz <previous main> engine kernels harness bench tests/gpu
#   device run (carry .devstage/base.tgz):  OUT=$OUT bash bench/gpu_engine_check.sh [suite] [base] [sweep] [ar] [rows]
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
BASE=/root/base
export PYTHONUNBUFFERED=1
[ $# -eq 0 ] && set -- suite base sweep ar
step() { local t0; t0=$(date +%s); "$@"; echo "[$(( $(date +%s) - t0 )) s] $*" >>"$OUT/steps.log"; }
base_tree() { [ -d "$BASE/kernels" ] || { mkdir -p "$BASE" && tar -C "$BASE" -xzf .devstage/base.tgz; }; }
for s in "$@"; do
  case $s in
    suite) step bash -c "OUT=$OUT timeout 300 bash bench/gpu_tests.sh >/dev/null 2>&1; tail -n 4 $OUT/gpu-tests.log" ;;
    base) base_tree
          step timeout 150 python3 bench/step_sweep.py --tree "$BASE" >"$OUT/step-base.jsonl" 2>"$OUT/step-base.err"
          step timeout 150 python3 bench/step_sweep.py >"$OUT/step-new.jsonl" 2>"$OUT/step-new.err"
          cat "$OUT/step-base.jsonl" "$OUT/step-new.jsonl" ;;
    sweep) step timeout 330 python3 bench/step_sweep.py --sweep >"$OUT/step-sweep.jsonl" 2>"$OUT/step-sweep.err"
           tail -n 6 "$OUT/step-sweep.jsonl" ;;
    ar) base_tree
        (cd "$BASE" && step timeout 120 python3 bench/pdl_check.py --random --only on --contexts 1024,4096 --reps 3) >"$OUT/ar-base.jsonl" 2>"$OUT/ar-base.err"
        step timeout 120 python3 bench/pdl_check.py --random --only on --contexts 1024,4096 --reps 3 >"$OUT/ar-new.jsonl" 2>"$OUT/ar-new.err"
        cat "$OUT/ar-base.jsonl" "$OUT/ar-new.jsonl" ;;
    rows) step timeout 150 python3 bench/verify_rows.py >"$OUT/verify-rows.jsonl" 2>"$OUT/verify-rows.err"
          cat "$OUT/verify-rows.jsonl"; tail -n 3 "$OUT/verify-rows.err" ;;
    *) echo "unknown step $s"; exit 2 ;;
  esac
done
cat "$OUT/steps.log"
