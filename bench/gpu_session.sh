#!/usr/bin/env bash
# One GPU call: kernel + model tests on CUDA, invariance checks, AR bench beside HF transformers.
# Usage on the device machine (after .devstage/stage.sh): bash bench/gpu_session.sh
set -uo pipefail
python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl >/dev/null 2>&1
export PYTHONPATH=$PWD:/tmp/site PYTHONUNBUFFERED=1 DSPARK_MODEL_CACHE=/root/devstage
OUT=${OUT:-/tmp/out}; mkdir -p $OUT
nvidia-smi --query-gpu=name,clocks.sm,clocks.mem,driver_version --format=csv,noheader
python3 -c "import torch, triton; print('torch', torch.__version__, 'triton', triton.__version__)"
timeout 240 python3 -m pytest -q -x tests/test_kernels.py tests/test_model.py 2>&1 | tail -5
timeout 200 python3 bench/gpu_check.py --ctx 4096 2>&1 | tee $OUT/gpu_check.jsonl
timeout 240 python3 -m engine bench --contexts 512,4096 --new-tokens 128 --reps 3 --compare-hf 2>&1 | tee $OUT/bench_ar.json
