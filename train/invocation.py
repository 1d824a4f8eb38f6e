"""One invocation of the benchmark as named steps (train/bench.py ``run`` calls them in order): :func:`plan` what
results.csv lacks, :func:`open_executor`, :class:`Dispatch` the cells with progress (each finished cell recorded as it
arrives), :func:`after_search` (the choices, the plateau rule, the runs to train) and the report's header of failures.
State lives in the objects it belongs to (a :class:`Plan`, a :class:`Dispatch`), not in closures."""
from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

from .bench_config import BenchConfig, kinds_for
from .cells import (CellSpec, cells_for, choices, extension_cells, lr_file_names, lr_of, search_cells,
                    write_choices)
from .curves import BUDGET_SHARE, append_curve, cell_curve, task_budget
from .evaluate import cell_dir
from .protocol import TASKS
from .results import FLOOR, SEARCH, SEARCH_LOSS, Row, append_rows, read_rows


@dataclass
class Plan:
    """The cells of a preset that results.csv lacks: the search and the floors first, the runs after the choices
    (``order: listed``: each task's floors with its runs, so a task's cells are not held back by every task's floors)."""

    first: list[CellSpec]
    later: list[CellSpec]
    total: int

    @property
    def todo(self) -> int:
        return len(self.first) + len(self.later)


def plan(cfg: BenchConfig, results: Path) -> Plan:
    done = {r.cell for r in read_rows(results)}
    floors_first, searched, cells = cfg.order != "listed", search_cells(cfg), cells_for(cfg)
    early = [c.kind == FLOOR and floors_first for c in cells]  # floors beside the search, before its barrier
    first = [c for c in [*searched, *(c for c, e in zip(cells, early) if e)] if c.key not in done]
    later = [c for c, e in zip(cells, early) if not e and c.key not in done]
    return Plan(first, later, len(searched) + len(cells))


def open_executor(cfg: BenchConfig, run_dir: Path, todo: int) -> tuple[Any, Path, BenchConfig]:
    """(executor, the run directory as workers see it, the preset as they get it); Ray only when there is work."""
    from .executors import ExecutorError, make_executor

    if todo > 0 and cfg.executor == "ray":
        try:
            executor = make_executor("ray", workers=cfg.workers, ray_address=cfg.ray_address,
                                     gpus_per_cell=cfg.gpus_per_cell)
        except ExecutorError as e:
            raise SystemExit(f"error: {e}") from None
        # workers elsewhere (or in another working directory) get absolute paths: the run directory's
        # data/ and cells/ are made at that path on the machine that runs the cell
        run_dir_w = run_dir.resolve()
        return executor, run_dir_w, dataclasses.replace(cfg, out_root=str(run_dir_w.parent))
    return make_executor("local", workers=cfg.workers, jobs=todo), run_dir, cfg


def fmt_time(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}:{s:02d}"


@dataclass
class Dispatch:
    """Runs cells on an executor and records each finished one (its curve, then its rows, then a progress line)."""

    cfg: BenchConfig
    cfg_w: BenchConfig
    run_dir: Path
    run_dir_w: Path
    executor: Any
    cell_fn: Callable
    stamp: dict
    total: int
    todo: int
    start: float = field(default_factory=time.perf_counter)
    finished: int = 0
    failures: list[str] = field(default_factory=list)
    written: list[int] = field(default_factory=list)

    def __call__(self, cells: list[CellSpec]) -> None:
        jobs = [(self.cfg_w, c, str(self.run_dir_w)) for c in dispatch_order(self.cfg, cells)]
        for rows, seconds, error in self.executor.map_unordered(self.cell_fn, jobs, lost):
            self.finished += 1
            elapsed = time.perf_counter() - self.start
            progress = f"[{self.total - self.todo + self.finished}/{self.total}]"
            eta = f"elapsed {fmt_time(elapsed)}, ETA {fmt_time(elapsed / self.finished * (self.todo - self.finished))}"
            if error is not None:
                self.failures.append(error)
                print(f"{progress} FAILED {error} | {eta}", flush=True)
                continue
            rows = self.record([dataclasses.replace(r, **self.stamp) for r in rows])
            print(f"{progress} {describe(rows)} ({seconds:.0f} s) | {eta}", flush=True)

    def record(self, rows: list[Row]) -> list[Row]:
        record_curve(self.run_dir, self.run_dir_w, rows[0])  # before its rows: a cell in results.csv has its curve
        append_rows(self.run_dir / "results.csv", rows)
        self.written.append(len(rows))
        return rows

    def fail(self, text: str) -> None:
        self.failures.append(text)
        print(f"FAILED {text}", flush=True)


def dispatch_order(cfg: BenchConfig, cells: list[CellSpec]) -> list[CellSpec]:
    """The order cells start in (``cfg.order``). ``longest``: the longest first, so the last minutes are not one
    worker finishing a slow cell alone. ``listed``: the preset's tasks in turn, each task's floors first and then its
    runs seed by seed across its kinds, so a record cut short (a device loan's end) holds paired runs of every kind of
    its first tasks rather than all the runs of some kinds and none of the others."""
    if cfg.order == "listed":
        rank = {task: i for i, task in enumerate(cfg.tasks)}
        kind = {(task, k): i for task in cfg.tasks for i, k in enumerate(kinds_for(cfg, task))}
        return sorted(cells, key=lambda c: (rank[c.task], c.kind != FLOOR, c.seed, kind.get((c.task, c.kind), -1)))
    return sorted(cells, key=lambda c: -cfg.steps_for(c.task) * (1 + len(TASKS[c.task].test_sizes)))


def lost(job: tuple, error: BaseException) -> tuple[list, float, str]:
    """The executor gave up on a cell (Ray: its worker died on every retry)."""
    return [], 0.0, f"{job[1].describe()}: lost ({type(error).__name__}: {str(error).splitlines()[0]})"


def describe(rows: list[Row]) -> str:
    """A finished cell in one line: what it was and its metric at each size (floors: each floor)."""
    shown = [r for r in rows if r.split == "test" or (r.variant == SEARCH and r.split != SEARCH_LOSS)]
    at = ", ".join(f"{r.value:.3g}@×{r.size_ratio:g}" + ("" if r.variant in ("-", SEARCH) else f" {r.variant}")
                   for r in shown if r.variant in ("-", SEARCH) or r.kind == FLOOR)
    what = f"{rows[0].task} {rows[0].kind} seed {rows[0].seed} data {rows[0].data_seed}"
    what += f" lr {rows[0].lr:g} wd {rows[0].weight_decay:g} (search, val)" if rows[0].variant == SEARCH else ""
    return f"{what}: {rows[0].metric} {at}"


def search(cfg: BenchConfig, results: Path, dispatch: Dispatch, first: list[CellSpec], done: set) -> None:
    """The first grid and the floors, then the points that extend an edge choice (until every choice is interior)."""
    dispatch(first)
    for _ in range(cfg.lr_extend):
        extend = [c for c in extension_cells(cfg, read_rows(results)) if c.key not in done]
        dispatch.total, dispatch.todo = dispatch.total + len(extend), dispatch.todo + len(extend)
        dispatch(extend)


def runs_to_train(cfg: BenchConfig, run_dir: Path, later: list[CellSpec], dispatch: Dispatch) -> list[CellSpec]:
    """After the search: write its choices, hold back the tasks the plateau rule finds short and the (task, kind)s
    without a rate (each a failure), and give the other runs their chosen rate and weight decay (floors among
    ``later``, as ``order: listed`` plans them, need none and pass as they are)."""
    chosen = choices(cfg, read_rows(run_dir / "results.csv"))
    if cfg.lr_search:
        write_choices(cfg, chosen, run_dir / "lr_choices.yaml")
    short = short_budgets(cfg, run_dir, chosen)
    for task, text in sorted(short.items()):
        dispatch.fail(text)
    floors = [c for c in later if c.kind == FLOOR]
    later = [c for c in later if c.kind != FLOOR and c.task not in short]
    files = " and ".join(lr_file_names(cfg)) or "the search"
    for task, kind in sorted({(c.task, c.kind) for c in later if lr_of(cfg, chosen, c.task, c.kind) is None}):
        dispatch.fail(f"{task} {kind}: no learning rate chosen (a search point failed, or {files} lacks it); its runs "
                      "were not trained")
    return floors + [dataclasses.replace(c, lr=lr_wd[0], weight_decay=lr_wd[1]) for c in later
                     if (lr_wd := lr_of(cfg, chosen, c.task, c.kind)) is not None]


def short_budgets(cfg: BenchConfig, run_dir: Path, chosen: dict) -> dict[str, str]:
    """Tasks whose budget the plateau rule (train/curves.py) finds too short, read from the search's curves at each
    kind's chosen rate (unreported runs), with what to do: their reported runs are not trained."""
    if not (cfg.curve_points and cfg.lr_search):
        return {}
    short = {}
    rows = read_rows(run_dir / "results.csv")
    for task in cfg.tasks:
        spec, steps = TASKS[task], cfg.steps_for(task)
        kinds = {k: v for (t, k), v in chosen.items() if t == task}
        found = task_budget(run_dir, rows, task, kinds, search=True, higher=spec.higher_is_better,
                            metric=spec.metric, split=spec.competence_split, steps=steps)
        if found is None:
            continue
        enough, step, _ = found
        if enough:
            continue
        why = (f"{task}: budget too short by the plateau rule (the median kind's validation {spec.metric} still "
               f"{'rises' if spec.higher_is_better else 'falls'} at step {step:g} of {steps}, past {BUDGET_SHARE:.0%})")
        if task in cfg.final_budgets:
            print(f"{why}; its steps were doubled once already (final_budgets): its runs train, the report says "
                  "'still improving'", flush=True)
        else:
            short[task] = (f"{why}; its runs were not trained: raise steps[{task}] (x2), add it to final_budgets and "
                           f"run again with --supersede {task} (its search is kept in superseded/ and done anew)")
    return short


def record_curve(run_dir: Path, run_dir_w: Path, row: Row) -> None:
    """A trained cell's learning curve (its log's "curve" records) into ``curves/<task>.jsonl`` (train/curves.py)."""
    if row.kind == FLOOR:
        return
    search = row.variant == SEARCH
    cell = CellSpec(row.task, row.kind, row.seed, row.data_seed, row.lr, row.weight_decay, search)
    key = {"task": row.task, "kind": row.kind, "seed": row.seed, "data_seed": row.data_seed, "lr": row.lr,
           "weight_decay": row.weight_decay, "search": search, "metric": row.metric}
    append_curve(run_dir, key, cell_curve(cell_dir(run_dir_w, cell) / "log.jsonl", row.metric))
