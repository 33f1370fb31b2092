#!/usr/bin/env bash
# GPU call: the wall time of a full gpu-profile `evalbot score` (3 rounds ABBA, accuracy, guards) of a
# no-op PR against main, then `evalbot calibrate` (A/A) with the time left. The working tree is
# committed into a scratch git repo (the device copy has no .git). Needs .whl carried, the model staged.
set -uo pipefail
command -v git >/dev/null || { echo "gpu_score: no git on this machine (evalbot score needs a git repo)"; exit 1; }
[ -n "${NO_PIP:-}" ] || python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade .whl/*.whl >/dev/null 2>&1
export PYTHONUNBUFFERED=1 DSPARK_MODEL_CACHE=${DSPARK_MODEL_CACHE:-/root/devstage} EVALBOT_BOX=h200
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
R=${R:-/root/evalrepo}; rm -rf $R; mkdir -p $R
tar --exclude=./.git --exclude=./.devstage --exclude=./.whl --exclude=./.traindata --exclude=./.evalbot --exclude=./.venv -cf - . | tar -C $R -xf -
cd $R && git init -q -b main && git add -A && git -c user.name=bench -c user.email=bench@localhost commit -qm "main" \
  && git checkout -qb noop && git -c user.name=bench -c user.email=bench@localhost commit -q --allow-empty -m "no-op PR" && git checkout -q main || exit 1
rm -f ${R}.key ${R}.key.pub; python3 -m evalbot keygen --out ${R}.key >/dev/null && export EVALBOT_SIGNING_KEY=${R}.key
t0=$(date +%s)
timeout ${SCORE_S:-400} python3 -m evalbot score --repo $R --base main --head noop --profile ${PROFILE:-gpu} --rounds ${ROUNDS:-3} --no-progress > $OUT/scorecard.md 2> $OUT/score.err
echo "score rc=$? wall_s=$(( $(date +%s) - t0 ))"
tail -5 $OUT/score.err; cat $OUT/scorecard.md
cp $R/.evalbot/receipts/* $OUT/ 2>/dev/null
t1=$(date +%s)
timeout ${CAL_S:-150} python3 -m evalbot calibrate --repo $R --profile ${PROFILE:-gpu} --rounds ${CAL_ROUNDS:-2} > $OUT/calibrate.txt 2>&1
echo "calibrate rc=$? wall_s=$(( $(date +%s) - t1 ))"; tail -25 $OUT/calibrate.txt
cp $R/.evalbot/noise-floor.json $OUT/ 2>/dev/null; true
