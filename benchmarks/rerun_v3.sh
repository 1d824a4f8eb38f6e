#!/usr/bin/env bash
# The standard-v3 record, task by task, each invocation resuming from results.csv (a task ending in "!" has its rows
# under earlier settings set aside first: --supersede). Run from the checkout's root, in the background:
#   nohup bash benchmarks/rerun_v3.sh OUT_ROOT 'video/trajectory-long!' image/shapes-zoom ... > rerun.log 2>&1 &
# OUT_ROOT: where standard-v3/ lives (benchmarks/results, or a copy outside the checkout while it runs).
set -uo pipefail
out_root=$1; shift
export OMP_NUM_THREADS=1
for arg in "$@"; do
  task=${arg%!}; extra=()
  [[ $arg == *! ]] && extra=(--supersede "$task")
  echo "=== $task $(date -u +%FT%TZ) $(git rev-parse --short HEAD) ${extra[*]}"
  .venv/bin/python -m train.bench --config configs/bench/standard.yaml "${extra[@]}" "out_root=$out_root" "tasks=[$task]"
  echo "=== $task rc=$? $(date -u +%FT%TZ)"
done
