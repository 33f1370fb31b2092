#!/usr/bin/env bash
# Land an engine/ or kernels/ change: the GPU suite on the exact tree, the captured step timed against the
# previous main, and the bot's scoring of the change as a PR, in three back-to-back device calls (about 7
# device-minutes on the H200 on 2026-12-04; the machine goes back 30 s after a call, so prepare all three).
# First, here:
#   ../shared/tools/device-stage                      # .devstage/p1 p2 p3 and stage.sh (the bundled model)
#   git archive --format=tar.gz -o .devstage/base.tgz <previous main> engine kernels harness bench tests/gpu \
#     ':(exclude)engine/dspark/weights'              # (the drafter: this tree's is used; the call must stay < 64 MiB)
#   .whl/ as bench/gpu_ruler_check.sh says (pydantic, cryptography, gguf, ..., bubblewrap)
# Then:
#   call 1: carry [.devstage/p1, .devstage/stage.sh, .devstage/base.tgz]   bash bench/gpu_land.sh 1
#           stages part 1; sha256 of engine/ and kernels/; tests/gpu; bench/step_sweep.py on the previous
#           main's tree and on this one (1 and 7 rows at 1k, 4k and 7936), one after the other
#           With TABLES=a JSON file of named tables (bench/step_sweep.py --tables), also each table's
#           step against this tree's table ("base": {}), two alternating passes, and its per-kernel breakdown;
#           with SWITCHES="VAR ..." (bench/gpu_timing.py's switches), each one timed on and off in one process;
#           with AR=1, AR decode by the engine's own clock on random weights (bench/pdl_check.py --random), the
#           previous main's process and this tree's alternating, AR_REPS times each (2; the step and its commit, as decoded);
#           with PHASES=1, each kernel's phases at 4k, 1 row (bench/kernel_phases.py) on both trees, compared;
#           with DRAFT="CHUNK:WARPS,..." (or DRAFT=table), bench/draft_profile.py on both trees (a DSpark iteration,
#           its draft pass) and, on this tree, the drafter's head alone and the draft pass per head configuration
#   call 2: carry [.devstage/p2, .devstage/stage.sh]                        bash bench/gpu_land.sh 2
#   call 3: carry [.devstage/p3, .devstage/stage.sh, .whl]                  bash bench/gpu_land.sh 3
#           the bot's setup (bench/gpu_ruler_check.sh: prevmain = the previous main's engine, thismain =
#           this tree's) and `scorebase prevmain thismain` with BUDGET seconds (default 160)
# Each call carries at most 64 MiB: the tree and a part (~33 MB), plus base.tgz (~1.4 MB) or .whl (~10 MB). The
# tracked tree is ~33 MB since 2026-12-06, half of it docs/perf-data (which these calls do not read): move that folder
# out of the working tree for calls 1 and 3 (`mv docs/perf-data /tmp/perf-data-hold`, and back after), or they
# are refused as too large. Everything lands in $OUT; what a call prints ends with the figures to copy into docs/perf.md.
set -uo pipefail
cd "$(dirname "$0")/.."
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
phase=${1:-}
case $phase in 1|2|3) ;; *) echo "gpu_land: usage: bash bench/gpu_land.sh 1|2|3 (got '${phase}')"; exit 2 ;; esac
[ -f .devstage/stage.sh ] || { echo "gpu_land: .devstage/stage.sh is missing: run ../shared/tools/device-stage first and carry it"; exit 2; }
bash .devstage/stage.sh | tail -n 1
case $phase in
  1)
    [ -f .devstage/base.tgz ] || { echo "gpu_land: carry .devstage/base.tgz (the previous main) in call 1"; exit 2; }
    cp .devstage/base.tgz /root/base.tgz  # for call 3, which carries .whl instead
    OUT=$OUT timeout 300 bash bench/gpu_tests.sh > /dev/null 2>&1  # also writes sha256.txt
    rc=$?
    echo "sha256 of engine/ and kernels/ in sha256.txt (sha256 of that list: $(sha256sum < "$OUT/sha256.txt" | cut -c1-16))"
    echo "tests/gpu exit $rc: $(tail -n 2 "$OUT/gpu-tests.log" | head -n 1)"
    rm -rf /tmp/prev && mkdir -p /tmp/prev && tar -xzf .devstage/base.tgz -C /tmp/prev
    [ "${STEP:-1}" = 0 ] || {  # STEP=0: a change outside the target's step (the drafter's), no step timing
    timeout 120 python3 bench/step_sweep.py --tree /tmp/prev --contexts 1024,4096,7936 > "$OUT/step-prev.jsonl" 2> "$OUT/step-prev.err"
    timeout 120 python3 bench/step_sweep.py --contexts 1024,4096,7936 > "$OUT/step-new.jsonl" 2> "$OUT/step-new.err"
    python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def steps(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl")]
    return {(r["ctx"], r["rows"]): r["us"] for r in rows if r.get("pdl") and "us" in r}
prev, new = steps("step-prev"), steps("step-new")
for k in sorted(prev):
    if k in new:
        print(f"step ctx {k[0]} rows {k[1]}: previous main {prev[k]:.1f} us, this tree {new[k]:.1f} us ({new[k] / prev[k] - 1:+.1%})")
PY
    }
    if [ "${AR:-0}" = 1 ]; then  # AR decode, engine's clock, both trees, alternating processes
      for rep in $(seq "${AR_REPS:-2}"); do
        (cd /tmp/prev && timeout 120 python3 bench/pdl_check.py --random --only on --contexts 1024,4096,7936 --reps 3) \
          >> "$OUT/ar-prev.jsonl" 2>> "$OUT/ar-prev.err"
        timeout 120 python3 bench/pdl_check.py --random --only on --contexts 1024,4096,7936 --reps 3 >> "$OUT/ar-new.jsonl" \
          2>> "$OUT/ar-new.err"
      done
      python3 - "$OUT" <<'PY'
import json, statistics, sys
out = sys.argv[1]
def tps(name):
    rows = [json.loads(l) for l in open(f"{out}/{name}.jsonl") if l.startswith("{")]
    by = {}
    for r in rows:
        by.setdefault(r["ctx"], []).append(r["ar_tps_pdl"])
    return by
prev, new = tps("ar-prev"), tps("ar-new")
for ctx in sorted(prev):
    if ctx in new:
        p, n = statistics.median(prev[ctx]), statistics.median(new[ctx])
        print(f"AR decode ctx {ctx}: previous main {p:.1f} tok/s {prev[ctx]}, this tree {n:.1f} tok/s {new[ctx]} ({n / p - 1:+.1%})")
PY
    fi
    if [ "${PHASES:-0}" = 1 ]; then  # each kernel's phases (bench/kernel_phases.py), 4k, 1 row, on both trees
      (cd /tmp/prev && timeout 90 python3 bench/kernel_phases.py --contexts 4096 --rows 1) > "$OUT/phases-prev.jsonl" \
        2> "$OUT/phases-prev.err"
      timeout 90 python3 bench/kernel_phases.py --contexts 4096 --rows 1 > "$OUT/phases-new.jsonl" 2> "$OUT/phases-new.err"
      python3 bench/kernel_phases.py --compare "$OUT/phases-prev.jsonl" "$OUT/phases-new.jsonl" 2>&1 || true
    fi
    if [ -n "${TABLES:-}" ]; then
      timeout 330 python3 bench/step_sweep.py --tables "$(cat "$TABLES")" --contexts 1024,4096,7936 --replays 100 --breakdown \
        > "$OUT/tables.jsonl" 2> "$OUT/tables.err"
      echo "tables exit $?"
      python3 bench/step_summary.py "$OUT/tables.jsonl"
    fi
    if [ -n "${DRAFT:-}" ]; then
      heads=$([ "$DRAFT" = table ] || echo "--head-configs $DRAFT")
      timeout 150 python3 bench/draft_profile.py --tree /tmp/prev --drafter engine/dspark/weights/smollm2-135m-instruct \
        --contexts 1024,4096,7936 --replays 100 --no-profile > "$OUT/draft-prev.jsonl" 2> "$OUT/draft-prev.err"
      timeout 200 python3 bench/draft_profile.py --contexts 1024,4096,7936 --replays 100 --no-profile $heads \
        > "$OUT/draft-new.jsonl" 2> "$OUT/draft-new.err"
      echo "draft_profile exit $?"
      python3 - "$OUT" <<'PY'
import json, sys
out = sys.argv[1]
def rows(name):
    return [json.loads(l) for l in open(f"{out}/{name}.jsonl") if l.startswith("{")]
prev = {r["ctx"]: r for r in rows("draft-prev") if "iteration_us" in r}
for r in rows("draft-new"):
    if "iteration_us" in r and r["ctx"] in prev:
        p = prev[r["ctx"]]
        print(f"ctx {r['ctx']}: draft pass {p['draft_us']:.1f} -> {r['draft_us']:.1f} us, iteration {p['iteration_us']:.1f} -> "
              f"{r['iteration_us']:.1f} us ({r['iteration_us'] / p['iteration_us'] - 1:+.1%})")
    elif "head_config" in r:
        print(f"ctx {r['ctx']} head {r['head_config']} ({r['block_n']}:{r['num_warps']}): head {r['head_us']:.1f} us, "
              f"draft pass {r['draft_us']:.1f} us")
PY
    fi
    for sw in ${SWITCHES:-}; do
      timeout 240 python3 bench/step_sweep.py --switch "$sw" --contexts 1024,4096,7936 --replays 100 > "$OUT/switch-$sw.jsonl" \
        2> "$OUT/switch-$sw.err"
      echo "switch $sw exit $?"
      python3 bench/step_summary.py "$OUT/switch-$sw.jsonl"
    done
    find "$OUT" -maxdepth 1 -name '*.err' -empty -delete  # a call returns only a few files
    ;;
  2) ;;
  3)
    [ -f .devstage/base.tgz ] || cp /root/base.tgz .devstage/base.tgz 2>/dev/null \
      || { echo "gpu_land: no base.tgz on this machine (a fresh one: start again with call 1)"; exit 2; }
    R=$OUT/res; mkdir -p "$R"
    OUT=$R bash bench/gpu_ruler_check.sh setup > "$R/setup.log" 2>&1; tail -n 3 "$R/setup.log"
    OUT=$R timeout 480 bash bench/gpu_ruler_check.sh budget "${BUDGET:-160}" scorebase prevmain thismain
    cat "$R/score-thismain.out" 2>/dev/null | sed -n '/^| metric/,/^| reason/p'
    ;;
esac
