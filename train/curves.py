"""Learning curves in the record: every trained cell's validation (and running training) metric per evaluation, one
compact file per task (``curves/<task>.jsonl``, a line per cell), and the rule that sets a task's budget from them.

A preset with ``curve_points`` > 0 makes each cell evaluate that many times (``train.eval_steps``, train/main.py
``curve_hook``); the driver copies the cell's ``"curve"`` records from its log into the task's file before it writes
the cell's rows to results.csv, so a cell in results.csv always has its curve (a cell redone after an interruption
appends its curve again: :func:`read_curves` keeps the last line per cell).

**The plateau rule** (:func:`plateau_step`), fixed before any curve was looked at: a curve has *stopped rising* at
the first evaluation after which it never improves by more than a tolerance (signed so that larger is better): 1 %
of the metric's span from chance to perfect (:func:`tolerance`: 0.01 accuracy; 1 % of the mean predictor's error for a
coordinate error) and, for a perplexity (whose chance is the vocabulary), 1 % of itself (0.01 nats of loss); a task's
budget is enough when the median kind's curve (the median over kinds, at each evaluation, of each kind's median over
its runs) stopped rising by 80 % of its steps (:func:`budget_verdict`). Probes for it are the search's runs
(unreported seeds). The coordinate error's tolerance was 1 % of itself until 2026-11-28 (train/changes.py).

>>> plateau_step([(100, 0.5), (200, 0.8), (300, 0.85), (400, 0.855)], higher=True, tolerance=0.01)
300
>>> plateau_step([(100, 9.0), (200, 5.0), (300, 4.0)], higher=False, tolerance=0.05)
300
"""
from __future__ import annotations

import json
import math
import os
import statistics
from pathlib import Path

from .results import FLOOR

CURVES = "curves"
RELATIVE_METRICS = ("ppl",)  # tolerances relative to the value
CHANCE_FLOORS = {"coord_err": "mean-predictor"}  # an error whose span runs from 0 to this floor (chance)
SHARE = 0.01  # of the span (or of the value, for RELATIVE_METRICS)
BUDGET_SHARE = 0.8  # the median kind must have stopped rising by this share of the steps


def cell_curve(log_path: Path, metric: str) -> list[list[float]]:
    """``[[step, running training metric, validation metric, validation loss], ...]`` from a cell's log.jsonl."""
    if not log_path.exists():
        return []
    points = []
    for line in log_path.read_text().splitlines():
        record = json.loads(line)
        if record.get("phase") == "curve":
            points.append([record["step"], record.get(f"train_{metric}", math.nan), record[f"eval_{metric}"],
                           record.get("eval_loss", math.nan)])
    return points


def append_curve(run_dir: Path, key: dict, points: list) -> None:
    """One cell's curve as a line of ``curves/<task>.jsonl`` (fsynced, as results.csv's rows are)."""
    if not points:
        return
    folder = Path(run_dir) / CURVES
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / (key["task"].replace("/", "_") + ".jsonl"), "a") as f:
        f.write(json.dumps({**key, "points": points}) + "\n")
        f.flush()
        os.fsync(f.fileno())


def read_curves(run_dir: Path, task: str) -> dict[tuple, dict]:
    """A task's curves, keyed by (kind, seed, data seed, lr, weight decay, search); the last line of a cell wins. A
    line cut off by an interruption (the last one) is skipped; any other damaged line is an error naming it."""
    path = Path(run_dir) / CURVES / (task.replace("/", "_") + ".jsonl")
    if not path.exists():
        return {}
    lines = path.read_text().splitlines()
    out = {}
    for i, line in enumerate(lines):
        try:
            c = json.loads(line)
        except json.JSONDecodeError:
            if i == len(lines) - 1:
                continue  # cut off mid-write: its cell is not in results.csv and will be redone
            raise ValueError(f"{path}: line {i + 1} is not JSON (a damaged curves file)") from None
        out[(c["kind"], c["seed"], c["data_seed"], c["lr"], c["weight_decay"], c["search"])] = c
    return out


def plateau_step(points: list[tuple[float, float]], *, higher: bool, tolerance: float, relative: bool = False) -> float:
    """The first step after which the curve ``[(step, value), ...]`` never improves by more than ``tolerance``."""
    sign = 1.0 if higher else -1.0
    for i, (step, value) in enumerate(points):
        later = [v for _, v in points[i + 1:]]
        margin = tolerance * abs(value) if relative else tolerance
        if all(not (sign * (v - value) > margin) for v in later):
            return step
    return points[-1][0] if points else math.nan


def median_kind_curve(curves: list[dict]) -> list[tuple[float, float]]:
    """The median kind's curve: per kind the median over its runs at each step, then the median over kinds."""
    by_kind: dict = {}
    for c in curves:
        for step, _, value, _ in c["points"]:
            by_kind.setdefault(c["kind"], {}).setdefault(step, []).append(value)
    steps = sorted(set.intersection(*(set(s) for s in by_kind.values()))) if by_kind else []
    return [(s, statistics.median(statistics.median(by[s]) for by in by_kind.values())) for s in steps]


def tolerance(metric: str, chance: float | None = None) -> tuple[float, bool]:
    """(tolerance, relative) of the plateau rule for ``metric``; ``chance``: the value of its chance floor
    (:data:`CHANCE_FLOORS`), required for those metrics."""
    if metric in RELATIVE_METRICS:
        return SHARE, True
    if metric in CHANCE_FLOORS:
        if chance is None or not math.isfinite(chance) or chance <= 0:
            raise ValueError(f"the plateau rule for {metric} needs its chance floor {CHANCE_FLOORS[metric]!r} (a "
                             f"finite value > 0), got {chance!r}")
        return SHARE * chance, False
    return SHARE, False  # accuracies: their span is 1


def budget_verdict(curves: list[dict], steps: int, *, higher: bool, metric: str,
                   chance: float | None = None) -> tuple[bool, float]:
    """(enough, the step where the median kind stopped rising) by the plateau rule of the module docstring."""
    tol, relative = tolerance(metric, chance)
    step = plateau_step(median_kind_curve(curves), higher=higher, tolerance=tol, relative=relative)
    return step <= BUDGET_SHARE * steps, step


def task_budget(run_dir: Path, rows: list, task: str, chosen: dict[str, tuple[float, float]], *, search: bool,
                higher: bool, metric: str, split: str, steps: int | None = None) -> tuple[bool, float, int] | None:
    """(enough, the step where the median kind stopped rising, steps) for ``task`` by the plateau rule, on its search
    curves (``search``: the rule's own probes) or its reported runs' curves, each kind's at its ``chosen`` (lr, weight
    decay); ``steps`` defaults to the curves' last step; the chance floor of an error metric is the median of the
    task's in-distribution floor rows on ``split`` (results.csv ``rows``). None when no such curve exists."""
    curves = [c for c in read_curves(run_dir, task).values()
              if c["search"] == search and chosen.get(c["kind"]) == (c["lr"], c["weight_decay"])]
    if not curves:
        return None
    steps = steps or int(max(p[0] for c in curves for p in c["points"]))
    floors = [r.value for r in rows if r.task == task and r.kind == FLOOR and r.variant == CHANCE_FLOORS.get(metric)
              and r.split == split and r.test_size == r.train_size]
    chance = statistics.median(floors) if floors else None
    return (*budget_verdict(curves, steps, higher=higher, metric=metric, chance=chance), steps)
