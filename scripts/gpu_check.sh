#!/usr/bin/env bash
# Everything ndpe measures on a GPU, in one call (at most 9 minutes; each part saved as it ends): benchmarks/gpu_check.py
# says what.
#   bash scripts/gpu_check.sh                           # on the GPU machine; files under $OUT (else runs/gpu_check)
#   bash scripts/gpu_check.sh --device cpu --smoke      # the CPU dry run (tests/test_gpu_check.py)
# Wheels carried in .gpu_wheels/ (scripts/gpu_wheels.sh) are installed first into .gpu_site/, for what the
# machine lacks. The console goes to $OUT/log.txt as well.
set -uo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
[ -z "${PYTHON:-}" ] && [ -x .venv/bin/python ] && PY=.venv/bin/python  # a checkout set up here (not carried)
OUT=${OUT:-runs/gpu_check}
mkdir -p "$OUT"
export PYTHONPATH=".:.gpu_site${PYTHONPATH:+:$PYTHONPATH}"
if [ -d .gpu_wheels ]; then
  "$PY" -m pip install -q --disable-pip-version-check --no-index --no-deps --target .gpu_site .gpu_wheels/*.whl \
    2>&1 | tail -2
fi
export NDPE_COMMIT=${NDPE_COMMIT:-$(git rev-parse HEAD 2>/dev/null || echo unknown)}
timeout -k 10 "${GPU_CHECK_SECONDS:-540}" "$PY" benchmarks/gpu_check.py --out "$OUT" "$@" 2>&1 | tee "$OUT/log.txt"
exit "${PIPESTATUS[0]}"
