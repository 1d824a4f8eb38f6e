#!/usr/bin/env bash
# The test suite on the newest torch that pip resolves today (what `pip install ndpe` gets: ndpe asks for
# torch>=2.11, CI pins constraints.txt's), in a venv of its own, .venv/torch-newest; the other pins as CI's.
# Not part of CI: a second torch install and a second run of the suite. Extra arguments go to pytest
# (default: both tiers, as CI).
#   bash scripts/test_torch_newest.sh [pytest args]
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh  # .venv, whose python makes the new venv
dir=.venv/torch-newest
[ -x "$dir/bin/python" ] || .venv/bin/python -m venv "$dir"
pins=$(mktemp)
trap 'rm -f "$pins"' EXIT
grep -v -E "^torch(vision)?==" constraints.txt > "$pins"
# PIP_CONSTRAINT=/dev/null: a machine-wide cap on torch (pip's global constraint) would hide the newest release
PIP_CONSTRAINT=/dev/null "$dir/bin/python" -m pip install -q --disable-pip-version-check --upgrade -c "$pins" \
  torch torchvision -e ".[test]" 2>&1 | grep -v -E "^WARNING: Location .* is ignored" || true
"$dir/bin/python" -c "import torch, torchvision; print('torch', torch.__version__, 'torchvision', torchvision.__version__)"
bash scripts/browser.sh
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
[ $# -gt 0 ] || set -- -m "not slow"
exec "$dir/bin/python" -m pytest -q -n "${NDPE_TEST_WORKERS:-2}" --dist loadgroup -p no:cacheprovider "$@"
