#!/usr/bin/env bash
# Before a GPU session: download the wheels the GPU machine lacks into .gpu_wheels/ (git-ignored, about 45 MB), for
# its Python 3.12 on x86_64. Carry it with the tree (the device tool's carry=[".gpu_wheels"]); scripts/gpu_check.sh
# installs them there. The machine has torch, triton, timm, einops, transformers and pytest; the benchmark's cells
# need pyyaml and tqdm (and scikit-learn for the digits task), bench_rope times rotary-embedding-torch when present.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
rm -rf .gpu_wheels
"$PY" -m pip download -q --disable-pip-version-check --only-binary=:all: --no-deps --python-version 3.12 \
  --platform manylinux2014_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux_2_28_x86_64 \
  -c constraints.txt -d .gpu_wheels pyyaml tqdm rotary-embedding-torch scikit-learn scipy joblib threadpoolctl 2>&1 \
  | grep -v -E "^WARNING: Location .* is ignored" || true
du -sh .gpu_wheels
