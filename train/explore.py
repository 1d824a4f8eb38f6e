"""The explorer's benchmark tab: a run's ``results.csv`` as the numbers the page draws (``ndpe explore --results``).

    python -m train.explore runs/quick         # writes runs/quick/explore.json (the benchmark writes it with report.md)

``ndpe explore --results RUN`` reads ``RUN/explore.json`` (:data:`ndpe.explore.BENCH_FILE`): the library never
imports this code. The file names the ``results.csv`` it was made from by its SHA-256, so the page refuses numbers
older than the run's rows. Everything comes from ``results.csv`` alone, through the report's own functions
(train/report.py), so the page and ``report.md`` cannot disagree: per task, each label's mean and 95 % t interval at
every test size (clipped to the metric's range), its floors, whether each kind counts (the task's bar and floors, in
distribution), and each literature claim's verdict with its numbers.
"""
from __future__ import annotations

import argparse
import hashlib
import json
import math
from pathlib import Path
from typing import Any

from . import stats
from .protocol import CLAIMS, TASKS
from .report import METRIC_RANGES, check_claim, competence, in_distribution, sizes_of, task_info
from .results import aggregate, is_floor, kind_of, read_rows, size_label


def _number(x: float) -> float | None:
    return None if math.isnan(x) or math.isinf(x) else float(x)


def bench_data(run_dir: Path) -> dict[str, Any]:
    """``run_dir/results.csv`` -> ``{"run", "tasks": {task: {...}}}`` (JSON-able; NaN as None)."""
    path = Path(run_dir) / "results.csv"
    if not path.is_file():
        raise FileNotFoundError(f"no results.csv in {run_dir}: pass a benchmark run's folder (runs/NAME)")
    rows = read_rows(path)
    agg, info, in_dist = aggregate(rows), task_info(rows), in_distribution(rows)
    tasks: dict[str, Any] = {}
    for task in sorted(agg):
        row = info[task]
        check = competence(task, in_dist[task], row.higher_is_better)
        lo_clip, hi_clip = METRIC_RANGES.get(row.metric, (-math.inf, math.inf))
        series: dict[str, Any] = {}
        for label, by in sorted(agg[task].items()):
            points = []
            for ratio, cell in sorted(by.items()):
                est = stats.t_interval(cell.values)
                wide = not math.isnan(est.half_width)
                points.append({"ratio": ratio, "mean": _number(est.mean), "n": cell.n,
                               "lo": _number(max(est.low, lo_clip)) if wide else None,
                               "hi": _number(min(est.high, hi_clip)) if wide else None})
            floor = is_floor(label)
            series[label] = {"kind": "floor" if floor else kind_of(label), "floor": floor, "points": points,
                             "counts": None if floor else check.counts(label)}
        verdicts = []
        for claim in CLAIMS:
            if claim.task == task:
                v = check_claim(claim, agg, info, in_dist)
                verdicts.append({"source": claim.source, "text": claim.text, "verdict": v.label, "detail": v.detail,
                                 "note": claim.note})
        spec = TASKS.get(task)
        tasks[task] = {"metric": row.metric, "higher": row.higher_is_better, "train_size": row.train_size,
                       "sizes": [{"ratio": r, "label": size_label(s, r)} for r, s in sizes_of(rows, task)],
                       "learned": check.learned, "series": series, "verdicts": verdicts,
                       "protocol": spec.protocol if spec is not None else ""}
    return {"run": Path(run_dir).name, "tasks": tasks}


BENCH_FILE = "explore.json"  # ndpe.explore.BENCH_FILE: where ndpe explore --results looks


def write_bench_data(run_dir: Path) -> Path:
    """Write ``run_dir/explore.json``: :func:`bench_data` and the SHA-256 of the ``results.csv`` it was made from."""
    run_dir = Path(run_dir)
    data = bench_data(run_dir)
    data["results_sha256"] = hashlib.sha256((run_dir / "results.csv").read_bytes()).hexdigest()
    path = run_dir / BENCH_FILE
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(data, separators=(",", ":"), allow_nan=False) + "\n")
    tmp.replace(path)  # never a half-written file
    return path


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m train.explore", description="write a benchmark run's "
                                     f"{BENCH_FILE}, the numbers of ndpe explore's benchmark tab")
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="a benchmark run's folder (runs/NAME)")
    for run_dir in parser.parse_args(argv).runs:
        try:
            print(write_bench_data(run_dir))
        except FileNotFoundError as e:
            parser.error(str(e))


if __name__ == "__main__":
    main()
