#!/usr/bin/env bash
# GPU call: kernel launch-config tuning, then the DSpark policy sweep with the drafter in /root/drafter.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 DSPARK_MODEL_CACHE=/root/devstage
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
cp -r /root/drafter $OUT/drafter 2>/dev/null
timeout 200 python3 bench/tune_step.py --ctx 4096 2>&1 | tee $OUT/tune.jsonl | tail -3
timeout 330 python3 bench/dspark_sweep.py --drafter /root/drafter --contexts 1024,4096,7936 --reps 2 2>&1 | tee $OUT/sweep.jsonl | tail -80
