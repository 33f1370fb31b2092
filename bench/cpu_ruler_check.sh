#!/usr/bin/env bash
# The bot's own ruler on this CPU box (the cpu profile, the bundled model), as gpu_ruler_check.sh does on
# the H200: a scratch repo whose main is this tree, and branches that change no speed or a known one.
#   bash bench/cpu_ruler_check.sh setup        a scratch repo $SCR (default /tmp/cpu-ruler): main = this
#                                              tree; noop (docs only); ar-slow (AR decode slowed by
#                                              AR_SLOW of its own time, default 0.06: ≈ 5 % of a request)
#   bash bench/cpu_ruler_check.sh calibrate    evalbot calibrate --profile cpu on main (A/A)
#   bash bench/cpu_ruler_check.sh score B      evalbot score --profile cpu --base main --head B
#   bash bench/cpu_ruler_check.sh aa N         N scorings of noop, each on fresh processes and windows
#   bash bench/cpu_ruler_check.sh budget S     the --budget of the steps after it (default: the profile's)
# Each scoring appends one JSON line (tier, speedup and CI, AR ratios, rounds, stop, wall) to
# $OUT/summary.jsonl and keeps its scorecard and receipt in $OUT. Run it with nothing else on the CPU.
set -uo pipefail
cd "$(dirname "$0")/.."
TREE=$PWD
PY=${PYTHON:-$TREE/.venv/bin/python}
OUT=${OUT:-/tmp/cpu-ruler-out}; mkdir -p "$OUT"
SCR=${SCR:-/tmp/cpu-ruler}
AR_SLOW=${AR_SLOW:-0.06}
export EVALBOT_BOX=${EVALBOT_BOX:-cpu-vm} PYTHONUNBUFFERED=1

setup() {
  rm -rf "$SCR" && mkdir -p "$SCR"
  git -C "$TREE" archive HEAD | tar -C "$SCR" -xf -
  cd "$SCR"
  git init -q -b main && git config user.email bot@example.invalid && git config user.name bot
  git add -A && git commit -qm "the tree at $(git -C "$TREE" rev-parse --short HEAD)"
  git checkout -qb noop && echo "a docs change" >> README.md && git commit -qam "no-op: docs only" && git checkout -q main
  git checkout -qb ar-slow && "$PY" - "$AR_SLOW" <<'PY'
import sys
p = "engine/generate.py"
s = open(p).read()
anchor = "            self.sync()\n            decode_s = time.perf_counter() - t0\n"
assert s.count(anchor) == 1, "AR decode changed: update the planted slowdown"
slow = f"            self.sync()\n            time.sleep({float(sys.argv[1])!r} * (time.perf_counter() - t0))  # planted AR slowdown\n"
open(p, "w").write(s.replace(anchor, slow + "            decode_s = time.perf_counter() - t0\n"))
PY
  git commit -qam "AR decode slowed by ${AR_SLOW} of its own time" && git checkout -q main
  git log --oneline --all
  cd "$TREE"
}

summary() {  # summary NAME RECEIPT WALL
  "$PY" - "$1" "$2" "$3" >>"$OUT/summary.jsonl" <<'PY'
import base64, json, statistics, sys
name, path, wall = sys.argv[1], sys.argv[2], float(sys.argv[3])
row = {"run": name, "wall_s": wall}
try:
    p = json.loads(base64.b64decode(json.load(open(path))["payload"]))["predicate"]
    v, m = p["verdict"], p["measurements"]
    sp = v.get("speedup") or {}
    row.update(tier=v["tier"], status=v["status"], pct=sp.get("pct"), ci=[sp.get("ci_low_pct"), sp.get("ci_high_pct")],
               ar=[round(statistics.median(c["ar_ratios"]), 4) for c in m["cells"] if c["ar_ratios"]],
               rounds=m["rounds"], stop=m["stop"]["reason"], noise=p["method"]["noise_floor"],
               failed=[g["gate"] for g in p["gates"] if g["status"] == "fail"])
except (OSError, KeyError, ValueError) as e:
    row["error"] = f"{type(e).__name__}: {e}"
print(json.dumps(row))
PY
  tail -n 1 "$OUT/summary.jsonl"
}

score() {  # score HEAD: scored as score-HEAD-N
  local head=$1 n=1
  while [ -e "$OUT/score-$head-$n.out" ]; do n=$((n + 1)); done
  local name="score-$head-$n" t0; t0=$(date +%s)
  (cd "$SCR" && "$PY" -m evalbot score --repo . --base main --head "$head" --profile cpu --no-progress --no-calibrate \
      ${BUDGET:+--budget "$BUDGET"} >"$OUT/$name.out" 2>"$OUT/$name.err")
  local wall=$(( $(date +%s) - t0 ))
  local receipt; receipt=$(sed -n 's/^receipt: //p' "$OUT/$name.out" | tail -n 1)
  [ -n "$receipt" ] && cp "$receipt" "$OUT/$name.intoto.json"
  summary "$name" "$OUT/$name.intoto.json" "$wall"
}

calibrate() {
  local t0; t0=$(date +%s)
  (cd "$SCR" && "$PY" -m evalbot calibrate --repo . --base main --profile cpu --no-progress ${BUDGET:+--budget "$BUDGET"} \
      >"$OUT/calibrate.out" 2>"$OUT/calibrate.err")
  echo "calibrate: exit $? after $(( $(date +%s) - t0 )) s"
  cp "$SCR/.evalbot/noise-floor.json" "$OUT/" 2>/dev/null || true
}

while [ $# -gt 0 ]; do
  case $1 in
    setup) setup ;;
    calibrate) calibrate ;;
    score) shift; score "$1" ;;
    aa) shift; for _ in $(seq "$1"); do score noop; done ;;
    budget) shift; BUDGET=$1 ;;
    *) echo "unknown step $1"; exit 2 ;;
  esac
  shift
done
