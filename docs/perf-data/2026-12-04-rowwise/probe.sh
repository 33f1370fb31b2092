mkdir -p $OUT; export TRITON_CACHE_DIR=/tmp/tc
timeout 100 python3 -m pytest tests/gpu/test_kernels_cuda.py -q -k "rowwise or fused_linear" -p no:cacheprovider 2>&1 | tail -2
timeout 230 python3 bench/step_sweep.py --tables "$(cat docs/perf-data/2026-12-04-rowwise/tables.json)" --contexts 1024,4096,7936 --replays 100 --breakdown > $OUT/tables.jsonl 2> $OUT/tables.err; echo tables $?; tail -1 $OUT/tables.err
python3 - $OUT <<'PY'
import json, statistics, sys
t = {}
for l in open(f"{sys.argv[1]}/tables.jsonl"):
    r = json.loads(l)
    if "us" in r: t.setdefault(r["table"], {}).setdefault((r["ctx"], r["rows"]), []).append(r["us"])
    elif "error" in r: print("error", r["table"], r["error"])
    elif "breakdown_us" in r: print("breakdown", r["table"], {k: round(v, 2) for k, v in r["breakdown_us"].items()})
base = {k: statistics.median(v) for k, v in t["base"].items()}
for name, cells in t.items():
    print(name, " ".join(f"{c[0]}/{c[1]}:{statistics.median(v):.1f}({statistics.median(v)/base[c]-1:+.1%})" for c, v in sorted(cells.items()) if c in base))
PY
