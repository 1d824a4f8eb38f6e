#!/usr/bin/env bash
# Idempotent set-up: a .venv with ndpe (editable) and the pinned test/train dependencies.
# Re-installs only when pyproject.toml or constraints.txt changed since the last set-up.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
stamp=.venv/.ndpe-setup
want=$(cat pyproject.toml constraints.txt | sha256sum | cut -d' ' -f1)
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  .venv/bin/python -m pip install -q --disable-pip-version-check -c constraints.txt -e ".[test]" 2>&1 \
    | grep -v -E "^WARNING: Location .* is ignored" || true
  .venv/bin/python -c "import torch, torchvision, timm, einops, ndpe" || { echo "set-up failed: see pip output above" >&2; exit 1; }
  echo "$want" > "$stamp"
fi
