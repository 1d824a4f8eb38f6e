#!/usr/bin/env bash
# Set up if needed, then run the quick tier, the default (`-m kinds_full`: the costliest every-kind checks for the
# other kinds; `-m "not slow"`: both, as CI; `-m slow`: the slow tests; README "Tests").
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
bash scripts/browser.sh
# Two worker processes (pytest-xdist; NDPE_TEST_WORKERS=0 runs in this process), one torch thread each: the suite
# is mostly small tensors and Python, so two processes use both cores of a 2-core machine.
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
exec .venv/bin/python -m pytest -q -n "${NDPE_TEST_WORKERS:-2}" --dist loadgroup "$@"
