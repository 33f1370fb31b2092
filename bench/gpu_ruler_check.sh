#!/usr/bin/env bash
# The bot's own ruler on the GPU box, with the staged bundled model (../shared/tools/device-stage):
#   bash bench/gpu_ruler_check.sh setup      wheels (.whl/: pydantic, cryptography, gguf, ...) and bubblewrap
#                                            (.whl/bubblewrap_*.deb, unpacked); the model in the model cache;
#                                            a scratch repo /root/scr (main = this tree plus a planted
#                                            host stall per DSpark device-loop launch; branches noop,
#                                            unstall and stall-<f>, a fraction f of it left;
#                                            noprefill and prefill, see scorebase)
#   bash bench/gpu_ruler_check.sh tools      harness.tau_check and harness.guard (gpu profile)
#   bash bench/gpu_ruler_check.sh pdlcheck   bench/pdl_check.py: programmatic dependent launch on / off
#                                            (branches nopdl and pdl: the same, scored with scorebase)
#   bash bench/gpu_ruler_check.sh calibrate  evalbot calibrate --profile gpu on main (A/A)
#   bash bench/gpu_ruler_check.sh calibratebase A   the same on branch A (e.g. prevmain, see setup)
#   bash bench/gpu_ruler_check.sh score B    evalbot score --profile gpu --base main --head B
#   bash bench/gpu_ruler_check.sh scorebase A B   the same with --base A (noprefill prefill: the captured
#                                            prefill, an honest engine improvement, scored as a PR)
#   bash bench/gpu_ruler_check.sh budget S   the --budget of the steps after it (default: the profile's)
#   bash bench/gpu_ruler_check.sh seedfloor F   use the noise floors of file F (a noise-floor.json that an
#                                            earlier calibration on this box kind stored; its engine digest
#                                            must match the base's, or the score falls back to the default)
# Every step writes what it printed, its wall time and its receipt to $OUT. Steps can be chained:
#   bash bench/gpu_ruler_check.sh setup tools calibrate
# .whl/ (ignored by git; carry it) is made here first, for the GPU box's Python 3.12:
#   python -m pip download -d .whl --only-binary=:all: --python-version 3.12 --implementation cp \
#     --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
#     pydantic pydantic-settings cryptography gguf python-dotenv structlog prometheus-client markdown-it-py
#   rm .whl/numpy-*; (cd .whl && apt-get download bubblewrap)      # numpy is on the box already
# and the model is staged with ../shared/tools/device-stage (three calls).
set -uo pipefail
cd "$(dirname "$0")/.."
TREE=$PWD
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
SCR=/root/scr
STALL_MS=${STALL_MS:-2.0}  # planted host stall per device-loop launch (main)
PARTIALS=${PARTIALS:-0.5 0.8}  # branches stall-0.5, stall-0.8: a fraction of it left
export EVALBOT_BOX=${EVALBOT_BOX:-h200-device} PYTHONUNBUFFERED=1

model() { bash .devstage/stage.sh | sed -n 's/^MODEL_PATH=//p'; }

timed() {  # timed NAME CMD...: run, keep stdout/stderr and the wall time in $OUT
  local name=$1; shift
  local t0; t0=$(date +%s%N)
  "$@" >"$OUT/$name.out" 2>"$OUT/$name.err"
  local rc=$?
  local ms=$(( ($(date +%s%N) - t0) / 1000000 ))
  echo "$name: exit $rc after $((ms / 1000)).$(printf '%03d' $((ms % 1000))) s" | tee -a "$OUT/steps.log"
  tail -n 3 "$OUT/$name.err"
  return 0
}

setup() {
  python3 -m pip install -q --no-index --no-deps .whl/*.whl 2>&1 | tail -n 2
  if ! command -v bwrap >/dev/null; then
    dpkg -x .whl/bubblewrap_*.deb /opt/bwrap && ln -sf /opt/bwrap/usr/bin/bwrap /usr/local/bin/bwrap
  fi
  bwrap --version
  # a sandbox that cannot run here would fail every step: say so once, run unsandboxed, and record it
  if python3 -c "from evalbot.measure.sandbox import check_sandbox; from evalbot.settings import SandboxSettings; print('sandbox:', check_sandbox(SandboxSettings()))"; then
    rm -f /root/sandbox-off
  else
    echo "SANDBOX UNAVAILABLE: the following steps run with --no-sandbox" | tee -a "$OUT/steps.log"; touch /root/sandbox-off
  fi
  local m; m=$(model)
  [ -n "$m" ] || { echo "setup: the model is not staged"; exit 1; }
  mkdir -p ~/.cache/dspark-evalbot/models && cp -n "$m" ~/.cache/dspark-evalbot/models/
  rm -rf "$SCR" && mkdir -p "$SCR"
  tar -C "$TREE" --exclude=./.git --exclude=./.venv --exclude=./.devstage --exclude=./.whl --exclude=./out --exclude=./.evalbot --exclude='*/__pycache__' -cf - . | tar -C "$SCR" -xf -
  cd "$SCR"
  git init -q -b main && git config user.email bot@example.invalid && git config user.name bot
  git add -A && git commit -qm "the tree as carried"
  # main: a host stall of STALL_MS after each device-loop launch's one synchronisation (after it, so the
  # GPU cannot hide it: a sleep before the sync overlaps the launch's own GPU work). Branches: noop (docs),
  # unstall (no stall: the genuine speedup), and stall-<f> (the stall times f, f in PARTIALS: a smaller
  # genuine speedup).
  plant() {  # plant MS
    python3 - "$1" <<'PY'
import sys
p = "engine/dspark/speculate.py"
s = open(p).read()
anchor = "            hist = g.hist.tolist()  # the launch's one synchronisation\n"
assert s.count(anchor) == 1, "the device loop changed: update the planted stall"
s = s.replace(anchor, anchor + f"            time.sleep({float(sys.argv[1]) / 1000!r})  # planted host stall\n")
open(p, "w").write(s)
PY
  }
  plant "$STALL_MS"
  git commit -qam "main: a planted ${STALL_MS} ms host stall per device-loop launch"
  git checkout -qb noop && echo "a docs change" >> README.md && git commit -qam "no-op: docs only" && git checkout -q main
  git checkout -qb unstall && git checkout -q HEAD~1 -- engine/dspark/speculate.py && git commit -qam "unstall" && git checkout -q main
  for f in $PARTIALS; do
    git checkout -qb "stall-$f" && git checkout -q HEAD~1 -- engine/dspark/speculate.py
    plant "$(python3 -c "print($STALL_MS * $f)")" && git commit -qam "stall x$f" && git checkout -q main
  done
  # off_on OFF ON START FILE ANCHOR REPLACEMENT WHAT: branch OFF from START with one engine feature switched
  # off (ANCHOR, which must occur once in FILE, replaced), and ON = OFF with FILE as main has it: the
  # feature scored as a PR against the engine without it (what would merge is ON merged into OFF).
  off_on() {
    git checkout -qb "$1" "$3" && python3 - "$4" "$5" "$6" <<'PY'
import sys
p, anchor, repl = sys.argv[1:]
s = open(p).read()
assert s.count(anchor) == 1, f"{p} changed: update the anchor of the branch that switches it off"
open(p, "w").write(s.replace(anchor, repl))
PY
    git commit -qam "$1: $7 off" && git checkout -qb "$2" && git checkout -q main -- "$4" \
      && git commit -qam "$2: $7 on" && git checkout -q main
  }
  # One honest engine improvement each: the captured prefill (on main), and programmatic dependent
  # launch (kernels.common, on the unstalled engine).
  off_on noprefill prefill main engine/session.py $'        if not self.use_graphs:\n            return None\n' \
    $'        if True:  # noprefill: the eager prefill\n            return None\n' "the captured prefill"
  off_on nopdl pdl unstall kernels/common.py $'    if os.environ.get("DSPARK_PDL", "1") == "0" or UPCAST_DOT:\n' \
    $'    if True:  # nopdl: programmatic dependent launch off\n' "programmatic dependent launch"
  # With .devstage/base.tgz (git archive of the previous main's engine, kernels, harness, bench and
  # tests/gpu; without engine/dspark/weights, the shipped drafter, this tree's is used then): prevmain = the unstalled tree with engine/ and kernels/ as the previous main has them,
  # thismain = prevmain with this tree's engine/ and kernels/ (the session's engine change, scored as a PR).
  if [ -f "$TREE/.devstage/base.tgz" ]; then
    git checkout -qb prevmain unstall && rm -rf kernels engine && tar -xzf "$TREE/.devstage/base.tgz" kernels engine \
      && { [ -d engine/dspark/weights ] || git checkout -q unstall -- engine/dspark/weights; } \
      && git add -A kernels engine && git commit -q --allow-empty -m "prevmain: engine/ and kernels/ as the previous main has them" \
      && git checkout -qb thismain && rm -rf kernels engine && git checkout -q unstall -- kernels engine \
      && git add -A kernels engine && git commit -q --allow-empty -m "thismain: this tree's engine/ and kernels/" && git checkout -q main
  fi
  # With .devstage/drafter/ (a drafter trained by bench/gpu_train.sh): branch drafter = thismain (else
  # unstall) with the shipped drafter's files replaced by it (a new drafter scored as a PR).
  if [ -d "$TREE/.devstage/drafter" ]; then
    local from=unstall; git rev-parse -q --verify thismain >/dev/null && from=thismain
    local w=engine/dspark/weights/smollm2-135m-instruct
    git checkout -qb drafter "$from" && rm -rf "$w" && mkdir -p "$w" && cp "$TREE"/.devstage/drafter/* "$w"/ \
      && git add -A "$w" && git commit -qm "drafter: the shipped drafter replaced by .devstage/drafter" && git checkout -q main
  fi
  git log --oneline --all | head -n 20
  cd "$TREE"
}

pdlcheck() {  # PDL on and off in one process: AR and DSpark tok/s and tau per cell (bench/pdl_check.py)
  timed pdl_check python3 bench/pdl_check.py --model "$EVALBOT_HARNESS__MODEL"
  cp "$OUT/pdl_check.out" "$OUT/pdl_check.jsonl"
  cat "$OUT/pdl_check.jsonl"
}

tools() {
  timed tau_check python3 -m harness.tau_check --profile gpu
  cp "$OUT/tau_check.out" "$OUT/tau_check.jsonl"
  timed guard python3 -m harness.guard --profile gpu
  cp "$OUT/guard.out" "$OUT/guard.jsonl"
}

calibrate() {  # calibrate [BASE]: A/A of BASE (default main), written as calibrate[-BASE]
  local base=${1:-main} name=calibrate${1:+-$1}
  (cd "$SCR" && timed "$name" python3 -m evalbot calibrate --repo . --base "$base" --profile gpu --no-progress \
      ${BUDGET:+--budget "$BUDGET"})
  cp "$SCR/.evalbot/noise-floor.json" "$OUT/" 2>/dev/null || true
}

score() {  # score HEAD [BASE]: written as score-HEAD (score-HEAD-N when HEAD was scored before)
  local head=$1 base=${2:-main} name="score-$1" n=2
  while [ -e "$OUT/$name.out" ]; do name="score-$head-$n"; n=$((n + 1)); done
  (cd "$SCR" && timed "$name" python3 -m evalbot score --repo . --base "$base" --head "$head" --profile gpu \
      --no-progress --no-calibrate ${BUDGET:+--budget "$BUDGET"})
  local receipt; receipt=$(sed -n 's/^receipt: //p' "$OUT/$name.out" | tail -n 1)
  [ -n "$receipt" ] && cp "$receipt" "$OUT/$name.intoto.json"
  grep -m1 -E "^(label|tier|verdict)|eval-dspark:" "$OUT/$name.out" | head -n 1
}

[ -f /root/sandbox-off ] && export EVALBOT_SANDBOX__ENABLED=false
export EVALBOT_HARNESS__MODEL
EVALBOT_HARNESS__MODEL=$(model)
while [ $# -gt 0 ]; do
  case $1 in
    setup) setup ;;
    tools) tools ;;
    pdlcheck) pdlcheck ;;
    calibrate) calibrate ;;
    calibratebase) shift; calibrate "$1" ;;  # calibratebase BASE: the A/A floor of BASE's engine
    score) shift; score "$1" ;;
    scorebase) shift; score "$2" "$1"; shift ;;  # scorebase BASE HEAD
    budget) shift; BUDGET=$1 ;;  # the budget (s) of the steps that follow
    seedfloor) shift; mkdir -p "$SCR/.evalbot" && cp "$1" "$SCR/.evalbot/noise-floor.json" ;;  # a floor stored earlier on this box kind
    *) echo "unknown step $1"; exit 2 ;;
  esac
  shift
done
