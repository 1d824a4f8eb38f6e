"""The explorer's benchmark tab: a run's ``results.csv`` as the numbers the page draws (``ndpe explore --results``).

Everything comes from ``results.csv`` alone, through the report's own functions (train/report.py), so the page and
``report.md`` cannot disagree: per task, each label's mean and 95 % t interval at every test size (clipped to the
metric's range), its floors, whether each kind counts (the task's bar and floors, in distribution), and each
literature claim's verdict with its numbers.
"""
from __future__ import annotations

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
