"""What a preset costs to run, from a record's own cell times: the budget check behind a preset's wall-time claim.

    python benchmarks/record_cost.py --record benchmarks/results/standard [--record ...]
        [--config configs/bench/standard.yaml] [--scale image/mnist-pair=0.34] [key=value ...]

For every cell the preset asks for (``train.cells.cells_for``: each kind's runs, ``other_runs`` applied) and every
point of its learning-rate search's first grid (``search_cells``), the time is the median training time of the
record's reported cells of that (task, kind): its search cells too, whose own times were taken with other jobs on the
machine at times (``--record`` repeated: the cells of every record given, e.g. the GPU preset's tasks from the
standard record and the LM check; a (task, kind) in two records is refused). Floors cost nothing; the training steps
are the cells' steps, summed. Hours are the summed cell times divided by ``workers`` (the record's cells keep both
cores busy); evaluation, data and start-up are not in a cell's training time (the quick preset measured them at about
10 % of its invocation). Points past an edge choice (the search's extension) depend on what the search finds: the
record's own are counted apart. ``--scale TASK=FACTOR`` multiplies a task's cell times (a redesign's measured per-cell
ratio). ``--claim-kinds-only`` prices the preset cut to the kinds a judged claim compares and NoPE (a task no claim is
on, and a coord task, whole). A (task, kind) the record has no cell of is named and counted, not priced. ``key=value``
overrides the preset as ``train.bench`` does.
"""
from __future__ import annotations

import argparse
import statistics
import sys
from collections import defaultdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # train/ of this checkout
from train.bench import CONFIG_DIR, load_bench_config  # noqa: E402
from train.bench_config import kinds_for  # noqa: E402
from train.cells import cells_for, search_cells  # noqa: E402
from train.claims import compared_kinds  # noqa: E402
from train.results import FLOOR, SEARCH, read_rows  # noqa: E402


def cell_times(rows) -> tuple[dict, dict]:
    """(task, kind) -> median training seconds of its reported cells; (task, kind) -> its search points."""
    times: dict = defaultdict(dict)
    points: dict = defaultdict(set)
    for r in rows:
        if r.variant == SEARCH:
            points[(r.task, r.kind)].add((r.lr, r.weight_decay))
        elif r.kind != FLOOR and r.train_time_s:
            times[(r.task, r.kind)][r.run] = r.train_time_s  # one time per cell (its rows repeat it)
    return {k: statistics.median(v.values()) for k, v in times.items()}, points


def estimate(cfg, rows, scale: dict[str, float]) -> tuple[list[dict], list[str]]:
    """Per task: its reported cells, search cells, the record's extension points and their hours."""
    median, points = cell_times(rows)
    grid: dict = defaultdict(set)
    for c in search_cells(cfg):
        grid[(c.task, c.kind)].add((c.lr, c.weight_decay, c.seed))  # each search run of a candidate is a cell
    per_task: dict = {t: {"task": t, "runs": 0, "search": 0, "extension": 0, "steps": 0, "run_s": 0.0,
                          "search_s": 0.0, "extension_s": 0.0} for t in cfg.tasks}
    missing = []
    for c in cells_for(cfg):
        if c.kind == FLOOR:
            continue
        per_task[c.task]["runs"] += 1  # counted whether or not the record prices them
        per_task[c.task]["steps"] += cfg.steps_for(c.task)
        if (c.task, c.kind) not in median:
            missing.append(f"{c.task} {c.kind}")
            continue
        per_task[c.task]["run_s"] += median[(c.task, c.kind)] * scale.get(c.task, 1.0)
    for (task, kind), first in grid.items():
        per_task[task]["search"] += len(first)
        per_task[task]["steps"] += cfg.steps_for(task) * len(first)
        if (task, kind) not in median:
            continue
        seconds = median[(task, kind)] * scale.get(task, 1.0)
        per_task[task]["search_s"] += seconds * len(first)
        extra = len(points.get((task, kind), set()) - {(lr, wd) for lr, wd, _ in first}) * cfg.search_runs
        per_task[task]["extension"] += extra
        per_task[task]["extension_s"] += seconds * extra
    return list(per_task.values()), sorted(set(missing))


def claim_kinds_only(cfg) -> None:
    """Cut ``cfg``'s kinds to those a judged claim on each task compares, and NoPE; a task with no such claim, and a
    coord task (its two nets), keeps its kinds."""
    for task in cfg.tasks:
        compared = compared_kinds(task)
        kinds = kinds_for(cfg, task)
        if compared and not task.startswith("coord/"):
            kinds = [k for k in kinds if k in compared or k == "none"]
        cfg.task_kinds[task] = kinds


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", required=True, type=Path, action="append",
                        help="a run directory with results.csv (repeatable: the cells of each)")
    parser.add_argument("--config", type=Path, default=CONFIG_DIR / "standard.yaml")
    parser.add_argument("--scale", action="append", default=[], metavar="TASK=FACTOR", help="repeatable")
    parser.add_argument("--claim-kinds-only", action="store_true")
    parser.add_argument("overrides", nargs="*", metavar="key=value")
    args = parser.parse_args(argv)
    cfg = load_bench_config(args.config, args.overrides)
    if args.claim_kinds_only:
        claim_kinds_only(cfg)
    scale = {}
    for item in args.scale:
        task, _, factor = item.partition("=")
        try:
            scale[task] = float(factor)
        except ValueError:
            parser.error(f"--scale takes TASK=FACTOR (a number), got {item!r}")
        if task not in cfg.tasks or not scale[task] > 0:
            parser.error(f"--scale {item!r}: expected a task of the preset {cfg.tasks} and a factor > 0")
    rows, seen = [], {}
    for record in args.record:
        own = [r for r in read_rows(record / "results.csv") if r.kind != FLOOR]
        for task, kind in sorted({(r.task, r.kind) for r in own}):
            if (task, kind) in seen:
                parser.error(f"{task} {kind} has cells in both {seen[(task, kind)]} and {record}; expected each "
                             "(task, kind) in one record")
            seen[(task, kind)] = record
        rows += own
    tasks, missing = estimate(cfg, rows, scale)
    per_hour = 3600.0 * cfg.workers  # cell seconds in one hour of the preset's workers
    print(f"{args.config.name} with {cfg.workers} workers, cell times from "
          f"{' and '.join(str(record / 'results.csv') for record in args.record)}"
          + (f", scaled: {scale}" if scale else "") + (", only the kinds a judged claim compares and NoPE"
                                                        if args.claim_kinds_only else ""))
    print("| task | reported cells | search cells (first grid) | training steps | hours | the record's extension points "
          "(hours) |")
    print("|---|---|---|---|---|---|")
    total = extension = 0.0
    for t in sorted(tasks, key=lambda t: -(t["run_s"] + t["search_s"])):
        h = (t["run_s"] + t["search_s"]) / per_hour
        total += h
        ext = t["extension_s"] / per_hour
        extension += ext
        print(f"| {t['task']} | {t['runs']} | {t['search']} | {t['steps']:,} | {h:.2f} | {t['extension']} ({ext:.2f}) |")
    print(f"| all | {sum(t['runs'] for t in tasks)} | {sum(t['search'] for t in tasks)} | "
          f"{sum(t['steps'] for t in tasks):,} | {total:.2f} | "
          f"{sum(t['extension'] for t in tasks)} ({extension:.2f}) |")
    if missing:
        print(f"not priced (no cell of theirs in the record; counted in cells and steps, not in hours): "
              f"{', '.join(missing)}")


if __name__ == "__main__":
    main()
