#!/usr/bin/env bash
# The GPU suite (tests/gpu) in one device call: random-weight models in the bundled model's shape and
# the guard shapes, no model staging, no extra wheels (torch, triton, safetensors, tokenizers, pytest
# are on the GPU image). Writes gpu-tests.log, gpu-tests.xml and sha256.txt (the sha256 of every .py under
# engine/ and kernels/: the exact code the suite ran on, to compare with a landing tree) to $OUT (default /tmp/out).
#   device run:  bash bench/gpu_tests.sh            (any pytest arguments are passed on)
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
OUT=${OUT:-/tmp/out}; mkdir -p "$OUT"
find engine kernels -name '*.py' | LC_ALL=C sort | xargs sha256sum > "$OUT/sha256.txt"
export PYTHONUNBUFFERED=1 TRITON_CACHE_DIR=${TRITON_CACHE_DIR:-/tmp/dspark-gpu-tests-triton}
$PY -c 'import torch, triton; print("torch", torch.__version__, "triton", triton.__version__, "cuda", torch.cuda.is_available(), torch.cuda.get_device_name() if torch.cuda.is_available() else "")'
workers=()
if $PY -c 'import xdist' 2>/dev/null; then workers=(-n "${GPU_TEST_WORKERS:-4}"); fi
t0=$(date +%s)
$PY -m pytest tests/gpu -q -rfEs -p no:cacheprovider "${workers[@]}" --junitxml="$OUT/gpu-tests.xml" "$@" 2>&1 | tee "$OUT/gpu-tests.log"
rc=${PIPESTATUS[0]}
echo "gpu_tests: exit $rc after $(( $(date +%s) - t0 )) s"
exit $rc
