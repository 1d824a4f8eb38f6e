"""The benchmark's grid of cells: every (task, kind) run over its model and data seeds, each task's floors, and the
learning-rate search (its first grid, the points that extend it past an edge choice, the choices it makes).

A :class:`CellSpec` is one unit of work; its :attr:`~CellSpec.key` is its key in results.csv, so a run directory
resumes where it stopped; :func:`fingerprint` is what a cell's numbers depend on (a run directory refuses cells
trained under other settings).

    cfg = load_bench_config("configs/bench/quick.yaml", ["tasks=[text/copy]", "kinds=[rope]", "seeds=[0,1]"])
    [c.describe() for c in cells_for(cfg)]   # the floor of data seed 0, then rope with seeds 0 and 1
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import statistics
from dataclasses import dataclass
from pathlib import Path

import yaml

from .bench_config import CONFIG_DIR, BenchConfig, kinds_for
from .claims import compared_kinds
from .config import ConfigError
from .results import FLOOR, SEARCH, SEARCH_LOSS, Row, cell_key


@dataclass(frozen=True)
class CellSpec:
    """One unit of work: a run of (task, kind) with a model seed and a data seed; a floor (``kind="floor"``, for
    one data seed); or one point of a learning-rate search (``search``). ``lr`` / ``weight_decay``: what it
    trains with (set by the driver before it runs)."""

    task: str
    kind: str
    seed: int
    data_seed: int
    lr: float = 0.0
    weight_decay: float = 0.0
    search: bool = False

    @property
    def key(self) -> tuple:
        """Its key in results.csv (see :attr:`train.results.Row.cell`)."""
        return cell_key(self.task, self.kind, self.seed, self.data_seed, SEARCH if self.search else "",
                        self.lr if self.search else 0.0, self.weight_decay if self.search else 0.0)

    def describe(self) -> str:
        what = f"seed {self.seed} data {self.data_seed}"
        return f"{self.task} {self.kind} {what}" + (f" lr {self.lr:g} wd {self.weight_decay:g}" if self.search else "")


def runs(cfg: BenchConfig, task: str | None = None, kind: str | None = None) -> list[tuple[int, int]]:
    """The (model seed, data seed) of every run: seed ``i`` with ``data_seeds[i % len(data_seeds)]``; of ``kind`` on
    ``task``, where no claim on the task compares it and ``other_runs`` is set, only the first ``other_runs``."""
    every = [(s, cfg.data_seeds[i % len(cfg.data_seeds)]) for i, s in enumerate(cfg.seeds)]
    if cfg.other_runs is None or task is None or kind in compared_kinds(task):
        return every
    return every[:cfg.other_runs]


def cells_for(cfg: BenchConfig) -> list[CellSpec]:
    """Every run the preset asks for, and each task's floor cells (one per data seed its runs use)."""
    cells = []
    for task_name in cfg.tasks:
        cells += [CellSpec(task_name, FLOOR, d, d) for d in sorted({d for _, d in runs(cfg)})]
        cells += [CellSpec(task_name, k, s, d) for k in kinds_for(cfg, task_name) for s, d in runs(cfg, task_name, k)]
    return cells


def search_runs(cfg: BenchConfig) -> list[tuple[int, int]]:
    """The search's runs, (model seed, data seed) per candidate: ``search_runs`` model seeds from ``search_seed``, none
    of them reported, with ``search_data_seeds`` in turn (else the first data seed)."""
    data = cfg.search_data_seeds or [cfg.data_seeds[0]]
    return [(cfg.search_seed + j, data[j % len(data)]) for j in range(cfg.search_runs)]


def search_cells(cfg: BenchConfig) -> list[CellSpec]:
    """The learning-rate search's first grid: every search run (:func:`search_runs`, never reported) per (task, kind,
    lr, weight decay) candidate. :func:`extension_cells` adds points past an edge choice."""
    if not cfg.lr_search:
        return []
    return [CellSpec(t, k, seed, data, lr, wd, search=True) for t in cfg.tasks
            for k in kinds_for(cfg, t) for lr in cfg.lr_searches.get(t, cfg.lr_search)
            for wd in cfg.wd_search.get(t, [cfg.weight_decay]) for seed, data in search_runs(cfg)]


@dataclass(frozen=True)
class Point:
    """One search candidate over its runs: the median of the bar's metric (signed so that larger is better) and the
    median validation loss (nan where the rows hold none: records from before losses were written)."""

    metric: float
    loss: float = math.nan

    def rank(self, lr: float) -> tuple:
        """Larger is better: the metric, then (a tie, e.g. a saturated accuracy) the lower loss, then the lower rate."""
        return self.metric, -self.loss if not math.isnan(self.loss) else 0.0, -lr


def search_points(rows: list[Row], runs: int = 1) -> dict[tuple[str, str], dict[tuple[float, float], Point]]:
    """(task, kind) -> {(lr, weight decay): its :class:`Point`}, for the candidates with ``runs`` search runs done."""
    from .competence import good

    values: dict = {}
    for r in rows:
        if r.variant == SEARCH:
            point = values.setdefault((r.task, r.kind), {}).setdefault((r.lr, r.weight_decay), {})
            entry = point.setdefault(r.run, [math.nan, math.nan])
            if r.split == SEARCH_LOSS:
                entry[1] = r.value
            else:
                entry[0] = good(r.value, r.higher_is_better)
    return {key: {p: Point(statistics.median(v[0] for v in by_run.values()),
                           statistics.median(v[1] for v in by_run.values()))
                  for p, by_run in points.items() if len(by_run) >= runs}
            for key, points in values.items()}


def best_point(points: dict[tuple[float, float], Point]) -> tuple[float, float]:
    """The best (lr, weight decay) by :meth:`Point.rank`."""
    return max(points, key=lambda p: points[p].rank(p[0]))


def extension_cells(cfg: BenchConfig, rows: list[Row]) -> list[CellSpec]:
    """Search points that extend the grid past an edge choice: where a (task, kind)'s best learning rate (its first
    grid done) is the smallest or largest tried at its weight decay and strictly better than its neighbour, the next
    one beyond it (``lr_step``), while it stays in ``lr_range``. Run in rounds (``lr_extend``) until every choice is
    interior, ties its neighbour (a plateau: the metric cannot tell the rates apart), or is at the range's end."""
    found, cells = search_points(rows, cfg.search_runs), []
    lo, hi = cfg.lr_range
    grids: dict = {}  # (task, kind) -> its first grid's cells
    for c in search_cells(cfg):
        grids.setdefault((c.task, c.kind), []).append(c)
    for key, grid in grids.items():
        points = found.get(key, {})
        if not {(c.lr, c.weight_decay) for c in grid} <= set(points):
            continue  # its first grid is not done (or a point failed)
        lr, wd = best_point(points)
        lrs = sorted(x for x, w in points if w == wd)
        if len(lrs) < 2 or lr not in (lrs[0], lrs[-1]):
            continue  # interior (or nothing to compare with)
        neighbour = lrs[1] if lr == lrs[0] else lrs[-2]
        if not points[(lr, wd)].metric > points[(neighbour, wd)].metric:
            continue  # a tie with its neighbour: a plateau (e.g. every rate at the ceiling), nothing to bracket
        beyond = lr * cfg.lr_step if lr == lrs[-1] else lr / cfg.lr_step
        if lo <= beyond <= hi:
            cells += [dataclasses.replace(c, lr=round(beyond, 12), weight_decay=wd) for c in grid
                      if (c.lr, c.weight_decay) == (grid[0].lr, grid[0].weight_decay)]  # every search run
    return cells


def choices(cfg: BenchConfig, rows: list[Row]) -> dict[tuple[str, str], tuple[float, float]]:
    """(task, kind) -> (lr, weight decay): the best search point (its first grid done; every point of it and of
    its extensions considered), else the choice file's, else the preset's ``lrs`` / ``lr`` and ``weight_decay``."""
    chosen: dict = {}
    source: dict = {}
    for path in lr_files(cfg):
        if not path.exists():
            raise ConfigError(f"lr_file {path} does not exist; run the preset that writes it (lr_search) first")
        for task, by_kind in (yaml.safe_load(path.read_text()) or {}).items():
            for kind, c in by_kind.items():
                if (task, kind) in source:
                    raise ConfigError(f"lr_file: {task} {kind} is chosen in both {source[(task, kind)]} and {path}; "
                                      "expected each (task, kind) in one of the files")
                chosen[(task, kind)], source[(task, kind)] = (float(c["lr"]), float(c["weight_decay"])), path
    wanted: dict = {}
    for c in search_cells(cfg):
        wanted.setdefault((c.task, c.kind), set()).add((c.lr, c.weight_decay))
    found = search_points(rows, cfg.search_runs)
    for key, points in wanted.items():
        if points <= set(found.get(key, {})):
            chosen[key] = best_point(found[key])
    return chosen


def lr_file_names(cfg: BenchConfig) -> list[str]:
    """The preset's choice files as it names them (``lr_file``: one path or a list)."""
    return [cfg.lr_file] if isinstance(cfg.lr_file, str) else cfg.lr_file or []


def lr_files(cfg: BenchConfig) -> list[Path]:
    """The preset's choice files, relative paths from the checkout's root."""
    return [Path(n) if Path(n).is_absolute() else CONFIG_DIR.parent.parent / n for n in lr_file_names(cfg)]


def lr_of(cfg: BenchConfig, chosen: dict, task: str, kind: str) -> tuple[float, float] | None:
    """The (lr, weight decay) of a (task, kind)'s runs; None when a search or choice file should give it and did
    not (a search point failed, or the file lacks it): those runs are not trained at another learning rate."""
    if (task, kind) in chosen:
        return chosen[(task, kind)]
    return None if cfg.lr_search or cfg.lr_file else (float(cfg.lrs.get(task, cfg.lr)), cfg.weight_decay)


# what the numbers of a cell depend on; the selection (tasks, kinds, seeds) and the machinery do not count
SELECTION = ("name", "tasks", "kinds", "seeds", "data_seeds", "other_runs", "workers", "out_root", "executor",
             "ray_address", "gpus_per_cell", "task_kinds", "why", "download", "final_budgets",
             "checkpoint_s", "order")  # how a cell is run or where it is kept, not what it measures


NEWER_KEYS = {"data_workers": 0, "lr_searches": {}, "search_runs": 1, "search_data_seeds": [], "curve_points": 0,
              "eval_batch_by_size": False, "memory_budget_gib": None}


def fingerprint(cfg: BenchConfig) -> str:
    """The whole preset's settings hash (fingerprint.txt); train/settings.py keeps one per task."""
    return settings_hash(settings_fields(cfg))


def settings_hash(fields: dict) -> str:
    """A 16-hex hash of settings as :func:`settings_fields` gives them."""
    return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def settings_fields(cfg: BenchConfig) -> dict:
    """The preset's keys a cell's numbers depend on (the selection keys left out), as hashed."""
    fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in SELECTION}
    for key, default in NEWER_KEYS.items():  # keys newer than the committed runs: their defaults leave them as they
        if fields[key] == default:  # were
            del fields[key]
    if cfg.lr_file:  # the choices it holds, not only its path: a rewritten file is other settings
        fields["lr_file"] = sorted((f"{t}|{k}", v) for (t, k), v in choices(cfg, []).items() if t in cfg.tasks)
    return fields


def selected_rows(cfg: BenchConfig, rows: list[Row]) -> list[Row]:
    """The rows of the cells this configuration selects (a run directory may hold more); a selected (task, kind)'s
    search rows include the points its grid was extended by. ``other_runs`` cuts what is trained, not what is
    reported: every computed run of a selected (task, kind) is read."""
    keys = {c.key for c in cells_for(dataclasses.replace(cfg, other_runs=None))}
    searched = {(c.task, c.kind, c.seed) for c in search_cells(cfg)}
    return [r for r in rows if r.cell in keys or (r.variant == SEARCH and (r.task, r.kind, r.seed) in searched)]


def write_choices(cfg: BenchConfig, chosen: dict, path: Path) -> None:
    """The search's choices, ``{task: {kind: {lr, weight_decay}}}``, for a later preset's ``lr_file``; the choices
    of tasks run by earlier invocations (task by task) are kept."""
    out: dict = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
    for (task, kind), (lr, wd) in sorted(chosen.items()):
        out.setdefault(task, {})[kind] = {"lr": lr, "weight_decay": wd}
    path.write_text(yaml.safe_dump(out, sort_keys=True))
