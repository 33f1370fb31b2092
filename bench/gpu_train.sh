#!/usr/bin/env bash
# GPU call: train the shipped DSpark drafter (self-distillation) on the H200.
# Needs .whl (gguf) and .traindata/prose.tar.xz (Python docs sources) carried, the model staged.
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 DSPARK_MODEL_CACHE=/root/devstage
OUT=${OUT:-/tmp/out}; mkdir -p $OUT /tmp/prose
tar -C /tmp/prose -xJf .traindata/prose.tar.xz
timeout 570 python3 -m engine.dspark.train --out $OUT/drafter --prose-dir /tmp/prose/_sources --time-budget ${BUDGET:-300} --data-seqs ${SEQS:-6144} 2>&1 | tee $OUT/train.log
rm -rf /root/drafter && cp -r $OUT/drafter /root/drafter
