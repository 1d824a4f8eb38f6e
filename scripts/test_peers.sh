#!/usr/bin/env bash
# The drop-in and peer-equality tests (pytest -m peers) against the newest transformers and timm that pip resolves
# today, so a peer's release that breaks a drop-in fails CI instead of users. The pinned venv stays as it is: the
# newest releases go, without their dependencies, into a folder of their own put first on PYTHONPATH, after checking
# that the venv meets their requirements (a release that needs more fails here, naming what).
#   bash scripts/test_peers.sh [pytest args]     # .ci/run calls it after scripts/test.sh
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
PY=.venv/bin/python
dir=.venv/peers-newest
rm -rf "$dir"
"$PY" -m pip install -q --disable-pip-version-check --no-compile --no-deps --upgrade --target "$dir" transformers timm 2>&1 \
  | grep -v -E "^WARNING: Location .* is ignored" || true
"$PY" scripts/peers_check.py "$dir" transformers timm
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} PYTHONPATH="$dir${PYTHONPATH:+:$PYTHONPATH}"
exec "$PY" -m pytest -q -n "${NDPE_TEST_WORKERS:-2}" --dist loadgroup -p no:cacheprovider -m "peers and not slow" "$@"
