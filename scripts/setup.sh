#!/usr/bin/env bash
# Idempotent set-up: a .venv with ndpe (editable) and the pinned dependencies of one extra:
#   bash scripts/setup.sh        # test (the default): the test suite's, which include train's
#   bash scripts/setup.sh train  # train: the reference models and the benchmark (scripts/bench.sh), half the install
# Re-installs only when pyproject.toml or constraints.txt changed since the last set-up, or the extra is not there.
set -euo pipefail
cd "$(dirname "$0")/.."
extra=${1:-test}
case "$extra" in
  train|test) ;;
  *) echo "scripts/setup.sh takes train or test (the extra to install), got '$extra'" >&2; exit 2 ;;
esac
PY=${PYTHON:-python3}
stamp=.venv/.ndpe-setup  # "<hash of pyproject.toml and constraints.txt> <extra installed>"
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
have=$(cat "$stamp" 2>/dev/null || true)
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
case "$have" in
  "$want"|"$want test"|"$want $extra") exit 0 ;;  # test's extra includes train's ("$want": a stamp of before extras, always test)
esac
# pip byte-compiles what it installs on one core; compileall does it on every core (about 20 s less of a 90-s
# set-up on 2 cores). A file that does not compile is skipped, as pip skips it.
.venv/bin/python -m pip install -q --no-compile --disable-pip-version-check -c constraints.txt -e ".[$extra]" 2>&1 \
  | grep -v -E "^WARNING: Location .* is ignored" || true
.venv/bin/python -m compileall -q -j 0 "$(.venv/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')" \
  > /dev/null 2>&1 || true
.venv/bin/python -c "import torch, torchvision, timm, einops, ndpe" || { echo "set-up failed: see pip output above" >&2; exit 1; }
echo "$want $extra" > "$stamp"
