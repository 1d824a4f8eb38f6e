#!/usr/bin/env bash
# The standard-v3 record, task by task, each invocation resuming from results.csv (a task ending in "!" has its rows
# under earlier settings set aside first: --supersede); an argument ending in .yaml runs that preset whole, into its
# own run directory (configs/bench/lm-check.yaml: the LM check). Run from the checkout's root, in the background:
#   nohup bash benchmarks/rerun_v3.sh OUT_ROOT 'video/trajectory-long!' image/shapes-zoom ... > rerun.log 2>&1 &
#   nohup bash benchmarks/rerun_v3.sh OUT_ROOT image/mnist-pair 'text/stdlib_lm!' configs/bench/lm-check.yaml ... &
# OUT_ROOT: where standard-v3/ lives (benchmarks/results, or a copy outside the checkout while it runs).
set -uo pipefail
out_root=$1; shift
export OMP_NUM_THREADS=1
for arg in "$@"; do
  echo "=== $arg $(date -u +%FT%TZ) $(git rev-parse --short HEAD)"
  if [[ $arg == *.yaml ]]; then
    .venv/bin/python -m train.bench --config "$arg" "out_root=$out_root"
  else
    task=${arg%!}; extra=()
    [[ $arg == *! ]] && extra=(--supersede "$task")
    .venv/bin/python -m train.bench --config configs/bench/standard.yaml "${extra[@]}" "out_root=$out_root" "tasks=[$task]"
  fi
  echo "=== $arg rc=$? $(date -u +%FT%TZ)"
done
