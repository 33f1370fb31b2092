#!/usr/bin/env bash
# GPU call: train a DSpark drafter (self-distillation) on the H200, then check it, and the shipped one,
# on the harness prompts at ctx 1024 and 4096 (code and prose, CHECK_CONTEXTS) against AR in the same process.
# Needs .whl (gguf) and .traindata/prose.tar.xz (Python docs sources) carried, the model staged.
# Knobs: BUDGET (seconds for the whole training run), DATA (its share for generating data), LENS (prompt
# lengths), SHARE (prose share), SEQS (at most this many training sequences: their features stay on the GPU),
# INIT (a drafter directory to continue, e.g. engine/dspark/weights/smollm2-135m-instruct), DATA_SEED (the
# prompts' seed: fresh windows for a continuation), LR (peak learning rate), EXTRA (1: also draw code from
# this interpreter's site-packages, --extra-code-dir; EXTRA_FILES of them, default 800).
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$PWD PYTHONUNBUFFERED=1 DSPARK_MODEL_CACHE=/root/devstage
# the training features grow batch by batch: without this, 14,336 sequences hit fragmentation (38 GB reserved, unused)
export PYTORCH_CUDA_ALLOC_CONF=${PYTORCH_CUDA_ALLOC_CONF:-expandable_segments:True}
OUT=${OUT:-/tmp/out}; mkdir -p $OUT /tmp/prose
tar -C /tmp/prose -xJf .traindata/prose.tar.xz
timeout $(( ${BUDGET:-420} + 60 )) python3 -m engine.dspark.train --out $OUT/drafter --prose-dir /tmp/prose/_sources \
  --prompt-lens ${LENS:-1024,2048,4096} --prose-share ${SHARE:-0.6} --data-fraction ${DATA:-0.5} \
  --data-seqs ${SEQS:-1000000000} ${INIT:+--init $INIT} ${DATA_SEED:+--data-seed $DATA_SEED} ${LR:+--lr $LR} \
  ${EXTRA:+--extra-code-dir $(python3 -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])') --extra-code-files ${EXTRA_FILES:-800}} \
  --total-budget ${BUDGET:-420} 2>&1 | tee $OUT/train.log | grep -v '"step"'
rm -rf /root/drafter && cp -r $OUT/drafter /root/drafter
[ "${CHECK:-1}" = 0 ] && exit 0  # CHECK=0: train only
for d in /root/drafter engine/dspark/weights/smollm2-135m-instruct; do
  echo "== $d"
  timeout 100 python3 bench/dspark_sweep.py --drafter $d --contexts ${CHECK_CONTEXTS:-1024,4096} --reps 2 --thresholds 0.35 --depths 3,6 2>&1 | tee -a $OUT/check.jsonl | grep -v '^{"ctx"'
done
