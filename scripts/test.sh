#!/usr/bin/env bash
# Set up if needed, then run the default test suite (slow tests excluded; `pytest -m slow` runs them).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/setup.sh
exec .venv/bin/python -m pytest -q "$@"
