#!/usr/bin/env bash
# GPU call: train the shipped DSpark drafter (self-distillation) on the H200, then check it on the
# harness prompts (ctx 4096, code and prose) against AR in the same process.
# Needs .whl (gguf) and .traindata/prose.tar.xz (Python docs sources) carried, the model staged.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 DSPARK_MODEL_CACHE=/root/devstage
OUT=${OUT:-/tmp/out}; mkdir -p $OUT /tmp/prose
tar -C /tmp/prose -xJf .traindata/prose.tar.xz
timeout 400 python3 -m engine.dspark.train --out $OUT/drafter --prose-dir /tmp/prose/_sources \
  --prompt-lens ${LENS:-512,1024,2048} --total-budget ${BUDGET:-290} 2>&1 | tee $OUT/train.log | grep -v '"step"'
rm -rf /root/drafter && cp -r $OUT/drafter /root/drafter
timeout 120 python3 bench/dspark_sweep.py --drafter /root/drafter --contexts 4096 --reps 2 --thresholds 0.35 --depths 6 2>&1 | tee $OUT/check.jsonl | tail -4
timeout 150 python3 -m engine bench --contexts 512,4096 --new-tokens 128 --reps 3 --compare-hf 2>&1 | tee $OUT/bench_ar.json | grep -E '"(ctx|ar_tps|hf_static_tps|prefill_tps)"'
