#!/usr/bin/env bash
# Set up if needed, then run the quick benchmark on built-in data (the main job).
# Extra arguments go to `python -m train.bench`, e.g. `bash scripts/bench.sh seeds=[0]`.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh train
exec .venv/bin/python -m train.bench --quick "$@"
