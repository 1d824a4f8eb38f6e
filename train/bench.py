"""The cross-domain benchmark: every encoding x every domain, trained at one size, tested beyond it.

    python -m train.bench --quick                       # built-in data, ~10 min on a 2-core CPU
    python -m train.bench --config configs/bench/full.yaml     # one GPU (sized for ~10 min on an H100; untimed)
    python -m train.bench --config configs/bench/real.yaml data_root=/data   # CIFAR-10, Speech Commands
    python -m train.bench --quick name=mine kinds=[rope,alibi] seeds=[0]   # any key=value override
    python -m train.bench --config configs/bench/full.yaml executor=ray ray_address=auto gpus_per_cell=1   # a Ray cluster

What each task tests, its competence bar, floors and the claims checked live in ``train/protocol.py``.
A *cell* (:class:`CellSpec`) is one run of one (task, kind): a model seed and a data seed. It trains a
reference model (``train.main.fit``), records its training and validation metric in distribution, and
evaluates it at the training size and at every larger test size; rotary encodings are also evaluated
with test-time scaling (position interpolation, NTK, YaRN). A floor cell computes a task's floors for
one data seed. With ``lr_search`` set, every kind first trains once per candidate learning rate
(seed 0, data seed 0, scored on the validation split at the training size) and every run uses the best. Each finished cell's rows
are appended to ``runs/<name>/results.csv`` in one fsynced write, so an interrupted benchmark
resumes where it stopped (finished cells are skipped; a cell cut off midway is redone); a run
directory refuses cells trained under other settings (``fingerprint.txt``).
Cells run in a local process pool (``executor=local``) or as tasks on a Ray cluster (``executor=ray``,
see train/executors.py); either way workers return rows and only this driver writes results.csv.
``report.md`` and the plots are rewritten from the CSV at the end (``--report-only`` redoes them).
Every row carries the ndpe version, the git commit and the protocol fingerprint of the driver's code, and every
invocation appends a line to ``invocations.jsonl`` (train/provenance.py); the report's header lists them.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import dataclasses
import hashlib
import inspect
import json
import math
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml

import ndpe
from ndpe.augment import AUGMENTS
from ndpe.checks import check_heads

from . import provenance
from .config import Config, ConfigError, apply_override, from_dict, load_yaml
from .protocol import CHANGES_AFTER_RESULTS, TASKS, Task
from .report import write_report
from .results import FLOOR, SEARCH, ResultsError, Row, append_rows, cell_key, read_rows

CONFIG_DIR = Path(__file__).resolve().parent.parent / "configs" / "bench"
SCALINGS = {"pi": "linear", "ntk": "ntk", "yarn": "yarn"}


ALL = "all"  # in `kinds` / `task_kinds`: every registered kind (ndpe.available()) that applies to the task


@dataclass
class BenchConfig:
    """A benchmark preset (configs/bench/*.yaml); every key can be overridden as ``key=value``."""

    name: str = "quick"
    tasks: list[str] = field(default_factory=lambda: ["image/shapes", "audio/tones", "text/copy", "text/stdlib_lm",
                                                      "video/trajectory", "coord/uniform", "coord/quadrant"])
    kinds: list[str] | str = ALL  # kind names ("rope", "rope+cape": with augmentation) and ALL: every registered kind
    rope_variants: list[str] = field(default_factory=lambda: ["pi", "ntk", "yarn"])
    task_kinds: dict = field(default_factory=dict)  # task -> kinds, replacing `kinds` for that task
    why: dict = field(default_factory=dict)  # task -> why these kinds (printed in the report)
    seeds: list[int] = field(default_factory=lambda: [0, 1, 2])  # model seeds (initialization, batch order): one run each
    data_seeds: list[int] = field(default_factory=lambda: [0])  # run i uses data_seeds[i % len]: its dataset and floors
    workers: int = 2  # processes training cells in parallel (one thread each on CPU); executor=ray: the CPUs of a
    # local Ray instance the benchmark starts itself (ray_address null); a cluster's own resources otherwise
    executor: str = "local"  # local: a process pool on this machine | ray: one Ray task per cell (train/executors.py)
    ray_address: str | None = None  # executor=ray: "auto", "ray://head:10001", ...; null starts a local Ray instance
    gpus_per_cell: float = 0.0  # executor=ray: GPUs each cell's task asks for (0: it sees none; 0.5: two per GPU)
    device: str = "cpu"  # cpu | cuda | auto
    data_root: str | None = None  # the data folder of real datasets (each in its subfolder); null: $NDPE_DATA or ~/.cache/ndpe/data
    download: bool = False  # fetch the real datasets the tasks need into data_root first (once, before any cell)
    data_workers: int = 0  # DataLoader worker processes per cell (real datasets on a GPU: 4-8, else data-bound)
    train_items: int = 2048  # built-in datasets: items per training split
    items: dict = field(default_factory=dict)  # task -> training items (train_items otherwise)
    test_items: int = 256  # built-in datasets: items per test split and size
    steps: dict = field(default_factory=lambda: {"audio/tones": 300})  # task -> optimizer steps (default_steps otherwise)
    default_steps: int = 150
    batch_size: int = 32
    lr: float = 2e-3  # peak learning rate where no search or choice file gives one
    lrs: dict = field(default_factory=dict)  # task -> peak learning rate (lr otherwise)
    weight_decay: float = 0.05
    lr_search: list[float] = field(default_factory=list)  # candidate peak learning rates, searched per (task, kind)
    lr_extend: int = 3  # rounds that extend the grid by lr_step past an edge choice, until it is interior
    lr_step: float = 2.0  # factor between an edge learning rate and the one added beyond it
    lr_range: list[float] = field(default_factory=lambda: [1e-4, 0.05])  # the extension stays in this range
    search_seed: int = 1000  # the search's model seed: never one of the reported seeds
    wd_search: dict = field(default_factory=dict)  # task -> candidate weight decays searched with lr_search
    lr_file: str | None = None  # a search's choice file (lr_choices.yaml; relative paths from the checkout's root)
    warmup_steps: int = 20
    dim: int = 48
    depth: int = 2
    heads: int = 4
    models: dict = field(default_factory=dict)  # task -> {dim, depth, heads}: a larger model where a task needs it
    out_root: str = "runs"


def load_bench_config(path: str | Path | None, overrides: list[str]) -> BenchConfig:
    data = load_yaml(path) if path else {}  # size- and alias-limited YAML
    cfg = from_dict(BenchConfig, data)
    for item in overrides:
        apply_override(cfg, item)
    unknown_tasks = sorted(set(cfg.tasks) - set(TASKS))
    if unknown_tasks:
        raise ConfigError(f"unknown task(s) {unknown_tasks}; expected some of {sorted(TASKS)}")
    bad_variants = sorted(set(cfg.rope_variants) - set(SCALINGS))
    if bad_variants:
        raise ConfigError(f"unknown rope_variants {bad_variants}; expected some of {sorted(SCALINGS)}")
    check_executor(cfg)
    check_per_task(cfg)
    for kinds in [cfg.kinds, *cfg.task_kinds.values()]:
        if isinstance(kinds, str) and kinds != ALL:
            raise ConfigError(f"kinds must be a list of kinds or {ALL!r} (every kind), got {kinds!r}")
    for kind in {k for kinds in [cfg.kinds, *cfg.task_kinds.values()] for k in expand_kinds(kinds)}:
        base, augment, model_opts = split_label(kind)
        if base not in ndpe.available() or (augment is not None and augment not in AUGMENTS):
            raise ConfigError(f"unknown kind {kind!r}; expected {ALL!r} or a name from {sorted(ndpe.available())}, "
                              f"optionally with augmentation {' or '.join('+' + a for a in AUGMENTS)}, or +nope<N> "
                              "(text: every N-th block position-free)")
        for task, kinds in cfg.task_kinds.items():  # in `kinds`, a task whose model cannot take it skips it
            if model_opts and kind in expand_kinds(kinds) and TASKS[task].model != "text":
                raise ConfigError(f"task_kinds[{task!r}]: {kind!r} makes blocks position-free, which only the text "
                                  f"model can (task {task} uses {TASKS[task].model!r})")
    check_numbers(cfg)
    return cfg


def check_numbers(cfg: BenchConfig) -> None:
    """Sizes, step counts, rates and the model shape every cell uses (ConfigError at load, not in every cell)."""
    for key, low in (("dim", 1), ("depth", 1), ("heads", 1), ("default_steps", 1), ("batch_size", 1),
                     ("train_items", 0), ("test_items", 0)):  # items: 0 where only real datasets (read whole) run
        if type(getattr(cfg, key)) is not int or getattr(cfg, key) < low:
            raise ConfigError(f"config key {key} must be an int >= {low}, got {getattr(cfg, key)!r}")
    built_in = [t for t in cfg.tasks if TASKS[t].dataset not in REAL]
    if built_in and (cfg.test_items < 1 or any(int(cfg.items.get(t, cfg.train_items)) < 1 for t in built_in)):
        raise ConfigError(f"train_items, items and test_items must be >= 1 for the built-in tasks {built_in}, got "
                          f"train_items={cfg.train_items}, test_items={cfg.test_items}")
    if cfg.data_workers < 0:
        raise ConfigError(f"config key data_workers must be >= 0, got {cfg.data_workers!r}")
    if cfg.warmup_steps < 0:
        raise ConfigError(f"config key warmup_steps must be >= 0, got {cfg.warmup_steps!r}")
    if not (math.isfinite(cfg.lr) and cfg.lr > 0):
        raise ConfigError(f"config key lr must be a finite number > 0, got {cfg.lr!r}")
    if not (math.isfinite(cfg.weight_decay) and cfg.weight_decay >= 0):
        raise ConfigError(f"config key weight_decay must be a finite number >= 0, got {cfg.weight_decay!r}")
    if cfg.device not in ("cpu", "cuda", "auto") and not cfg.device.startswith("cuda:"):
        raise ConfigError(f"config key device must be cpu, cuda, cuda:N or auto, got {cfg.device!r}")
    for task in cfg.tasks:
        shape = {"dim": cfg.dim, "heads": cfg.heads, **cfg.models.get(task, {})}
        try:
            check_heads(shape["dim"], shape["heads"])
        except (TypeError, ValueError) as err:
            where = f"models[{task!r}]" if task in cfg.models else "dim / heads"
            raise ConfigError(f"{where}: {err} (task {task})") from None


def check_per_task(cfg: BenchConfig) -> None:
    """The per-task keys (``task_kinds``, ``steps``, ``lrs``, ``why``) name known tasks and hold usable values."""
    checks = {"task_kinds": (lambda v: v == ALL or isinstance(v, list) and all(isinstance(k, str) for k in v),
                             f"a list of kinds or {ALL!r}"),
              "steps": (lambda v: type(v) is int and v >= 1, "an int >= 1"),
              "items": (lambda v: type(v) is int and v >= 1, "an int >= 1"),
              "wd_search": (lambda v: isinstance(v, list) and all(type(x) in (int, float) and x >= 0 for x in v),
                            "a list of numbers >= 0"),
              "lrs": (lambda v: type(v) in (int, float) and math.isfinite(v) and v > 0, "a finite number > 0"),
              "why": (lambda v: isinstance(v, str), "a string"),
              "models": (lambda v: isinstance(v, dict) and set(v) <= {"dim", "depth", "heads"}
                         and all(type(x) is int and x >= 1 for x in v.values()), "a mapping of dim / depth / heads to ints >= 1")}
    for key, (ok, expected) in checks.items():
        mapping = getattr(cfg, key)
        unknown = sorted(set(mapping) - set(TASKS))
        if unknown:
            raise ConfigError(f"{key} names unknown task(s) {unknown}; expected some of {sorted(TASKS)}")
        for task, value in mapping.items():
            if not ok(value):
                raise ConfigError(f"{key}[{task!r}] must be {expected}, got {value!r}")
    if not cfg.data_seeds or any(s < 0 for s in [*cfg.seeds, *cfg.data_seeds]):
        raise ConfigError(f"seeds and data_seeds must be >= 0 (data_seeds not empty), got seeds={cfg.seeds}, "
                          f"data_seeds={cfg.data_seeds}")
    if any(not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0) for v in cfg.lr_search):
        raise ConfigError(f"lr_search must hold finite numbers > 0, got {cfg.lr_search}")
    if cfg.search_seed in cfg.seeds:
        raise ConfigError(f"search_seed {cfg.search_seed} is one of the reported seeds {cfg.seeds}: the search must "
                          "run on a model seed that is never reported")
    if not (cfg.lr_step > 1 and len(cfg.lr_range) == 2 and 0 < cfg.lr_range[0] < cfg.lr_range[1] and cfg.lr_extend >= 0):
        raise ConfigError(f"lr_step must be > 1, lr_range [low, high] with 0 < low < high and lr_extend >= 0, got "
                          f"lr_step={cfg.lr_step}, lr_range={cfg.lr_range}, lr_extend={cfg.lr_extend}")


EXECUTORS = ("local", "ray")


def check_executor(cfg: BenchConfig) -> None:
    """``executor`` / ``ray_address`` / ``gpus_per_cell`` values that work together (ConfigError otherwise)."""
    if cfg.executor not in EXECUTORS:
        raise ConfigError(f"config key executor must be one of {list(EXECUTORS)}, got {cfg.executor!r}")
    if cfg.workers < 1:
        raise ConfigError(f"config key workers must be >= 1, got {cfg.workers}")
    if not cfg.gpus_per_cell >= 0:
        raise ConfigError(f"config key gpus_per_cell must be >= 0, got {cfg.gpus_per_cell}")
    if cfg.executor == "local" and (cfg.ray_address is not None or cfg.gpus_per_cell):
        raise ConfigError("ray_address and gpus_per_cell apply to executor=ray (add executor=ray)")
    if cfg.executor == "ray" and cfg.device == "cuda" and not cfg.gpus_per_cell:
        raise ConfigError("device=cuda with executor=ray needs gpus_per_cell > 0 (a Ray task sees only the GPUs it asks for)")
    if cfg.executor == "ray" and cfg.device == "cpu" and cfg.gpus_per_cell:
        raise ConfigError("gpus_per_cell > 0 with device=cpu would hold GPUs the cells never use; "
                          "pass device=auto or device=cuda")


# -- cells -------------------------------------------------------------------------------------


def expand_kinds(kinds: list[str] | str) -> list[str]:
    """``kinds`` with :data:`ALL` replaced by every registered kind (``ndpe.available()``), each name once."""
    names: list[str] = []
    for kind in [kinds] if isinstance(kinds, str) else kinds:
        names += [k for k in (ndpe.available() if kind == ALL else [kind]) if k not in names]
    return names


COORDS = ("index", "centered", "pixel")  # a kind label's "@coords": the coordinate convention (ndpe.coords)


def split_label(kind: str) -> tuple[str, str | None, dict]:
    """A kind label -> ``(kind, augmentation, model options)``: ``"rope"``, ``"rope+cape"`` (position augmentation,
    ``ndpe.augment``) or ``"rope+nope4"`` (every 4th block position-free, iRoPE: the text model's ``nope_every``);
    a ``"@coords"`` suffix (``"rope@centered"``) is the coordinate convention, see :func:`label_coords`.

    >>> split_label("rope+nope4"), split_label("sinusoidal+cape"), split_label("rope@centered")
    (('rope', None, {'nope_every': 4}), ('sinusoidal', 'cape', {}), ('rope', None, {}))
    """
    base, _, suffix = kind.partition("@")[0].partition("+")
    if suffix.startswith("nope") and suffix[4:].isdigit() and int(suffix[4:]) >= 1:
        return base, None, {"nope_every": int(suffix[4:])}
    return base, suffix or None, {}


def label_coords(kind: str) -> str | None:
    """The coordinate convention a kind label asks for (``"rope@centered"`` -> ``"centered"``), or None: the kind's
    own default. Index coordinates extrapolate to a larger grid; centred ones interpolate (a zoom keeps them)."""
    coords = kind.partition("@")[2]
    if not coords:
        return None
    base = split_label(kind)[0]
    if coords not in COORDS:
        raise ConfigError(f"kind label {kind!r}: coordinates must be one of {list(COORDS)}, got {coords!r}")
    if base in ndpe.available() and "coords" not in inspect.signature(ndpe.registry.kind_class(base).__init__).parameters:
        raise ConfigError(f"kind label {kind!r}: {base} has no coords option (its coordinates cannot be chosen)")
    return coords


def kinds_for(cfg: BenchConfig, task_name: str) -> list[str]:
    """The encodings trained on ``task_name``: ``task_kinds[task]`` or ``kinds`` (:func:`expand_kinds`), those that
    apply to its dims (and, for kinds defined for causal attention only, to causal tasks)."""
    task = TASKS[task_name]
    if task.conv:
        return ["conv", "conv+coord"]
    causal = bool(task.model_opts.get("causal"))

    def applies(kind: str) -> bool:
        base, _, model_opts = split_label(kind)
        if model_opts and task.model != "text":  # +nope<N>: a text model option
            return False
        return task.dims in ndpe.available()[base] and (causal or not ndpe.registry.kind_class(base).causal_only)

    kinds = [k for k in expand_kinds(cfg.task_kinds.get(task_name, cfg.kinds)) if applies(k)]
    for k in kinds:
        label_coords(k)  # a bad convention is a ConfigError before anything trains
    return kinds


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


def runs(cfg: BenchConfig) -> list[tuple[int, int]]:
    """The (model seed, data seed) of every run: seed ``i`` with ``data_seeds[i % len(data_seeds)]``."""
    return [(s, cfg.data_seeds[i % len(cfg.data_seeds)]) for i, s in enumerate(cfg.seeds)]


def cells_for(cfg: BenchConfig) -> list[CellSpec]:
    """Every run the preset asks for, and each task's floor cells (one per data seed its runs use)."""
    cells = []
    for task_name in cfg.tasks:
        cells += [CellSpec(task_name, FLOOR, d, d) for d in sorted({d for _, d in runs(cfg)})]
        cells += [CellSpec(task_name, k, s, d) for k in kinds_for(cfg, task_name) for s, d in runs(cfg)]
    return cells


def search_cells(cfg: BenchConfig) -> list[CellSpec]:
    """The learning-rate search's first grid: one run (model seed ``search_seed``, never reported; the first data
    seed) per (task, kind, lr, weight decay) candidate. :func:`extension_cells` adds points past an edge choice."""
    return [CellSpec(t, k, cfg.search_seed, cfg.data_seeds[0], lr, wd, search=True) for t in cfg.tasks
            for k in kinds_for(cfg, t) for lr in cfg.lr_search for wd in cfg.wd_search.get(t, [cfg.weight_decay])]


def search_points(rows: list[Row]) -> dict[tuple[str, str], dict[tuple[float, float], float]]:
    """(task, kind) -> {(lr, weight decay): the search metric, signed so that larger is better}."""
    from .competence import good

    found: dict = {}
    for r in rows:
        if r.variant == SEARCH:
            found.setdefault((r.task, r.kind), {})[(r.lr, r.weight_decay)] = good(r.value, r.higher_is_better)
    return found


def best_point(points: dict[tuple[float, float], float]) -> tuple[float, float]:
    """The best (lr, weight decay); ties go to the smaller learning rate."""
    return max(points, key=lambda p: (points[p], -p[0]))


def extension_cells(cfg: BenchConfig, rows: list[Row]) -> list[CellSpec]:
    """Search points that extend the grid past an edge choice: where a (task, kind)'s best learning rate (its first
    grid done) is the smallest or largest tried at its weight decay and strictly better than its neighbour, the next
    one beyond it (``lr_step``), while it stays in ``lr_range``. Run in rounds (``lr_extend``) until every choice is
    interior, ties its neighbour (a plateau: the metric cannot tell the rates apart), or is at the range's end."""
    found, cells = search_points(rows), []
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
        if not points[(lr, wd)] > points[(neighbour, wd)]:
            continue  # a tie with its neighbour: a plateau (e.g. every rate at the ceiling), nothing to bracket
        beyond = lr * cfg.lr_step if lr == lrs[-1] else lr / cfg.lr_step
        if lo <= beyond <= hi:
            cells.append(dataclasses.replace(grid[0], lr=round(beyond, 12), weight_decay=wd))
    return cells


def choices(cfg: BenchConfig, rows: list[Row]) -> dict[tuple[str, str], tuple[float, float]]:
    """(task, kind) -> (lr, weight decay): the best search point (its first grid done; every point of it and of
    its extensions considered), else the choice file's, else the preset's ``lrs`` / ``lr`` and ``weight_decay``."""
    chosen: dict = {}
    if cfg.lr_file:
        path = Path(cfg.lr_file)
        path = path if path.is_absolute() else CONFIG_DIR.parent.parent / path  # relative to the checkout
        if not path.exists():
            raise ConfigError(f"lr_file {path} does not exist; run the preset that writes it (lr_search) first")
        for task, by_kind in (yaml.safe_load(path.read_text()) or {}).items():
            for kind, c in by_kind.items():
                chosen[(task, kind)] = (float(c["lr"]), float(c["weight_decay"]))
    wanted: dict = {}
    for c in search_cells(cfg):
        wanted.setdefault((c.task, c.kind), set()).add((c.lr, c.weight_decay))
    found = search_points(rows)
    for key, points in wanted.items():
        if points <= set(found.get(key, {})):
            chosen[key] = best_point(found[key])
    return chosen


def lr_of(cfg: BenchConfig, chosen: dict, task: str, kind: str) -> tuple[float, float] | None:
    """The (lr, weight decay) of a (task, kind)'s runs; None when a search or choice file should give it and did
    not (a search point failed, or the file lacks it): those runs are not trained at another learning rate."""
    if (task, kind) in chosen:
        return chosen[(task, kind)]
    return None if cfg.lr_search or cfg.lr_file else (float(cfg.lrs.get(task, cfg.lr)), cfg.weight_decay)


def pe_config(kind: str, task: Task, train_grid: tuple[int, ...] | None, max_grid: tuple[int, ...] | None = None) -> dict:
    """The model's ``pe`` entry for a benchmark kind name like ``"rope"`` or ``"sinusoidal+cape"``.

    The options are the kind's own for the task (``Encoding.task_options``: e.g. a learned table sized by the
    grids, the causal form of a bias in causal attention), then the protocol's choices for that task
    (``Task.kind_options``, train/protocol.py); ``train_grid`` / ``max_grid``: the grids the encoder sees at the
    training and the largest test size.
    """
    base, augment, _ = split_label(kind)
    options = ndpe.registry.kind_class(base).task_options(
        dims=task.dims, causal=bool(task.model_opts.get("causal")), train_grid=train_grid, max_grid=max_grid)
    if base in task.kind_options:  # the protocol's choices (train/protocol.py, each with its reason)
        options = {**options, **task.kind_options[base].options(tuple(train_grid or ()), tuple(max_grid or ()))}
    if coords := label_coords(kind):  # the label's coordinate convention wins
        options = {**options, "coords": coords}
    return {"kind": base, "options": options, "augment": augment}


REAL = ("cifar10", "speech_commands")  # read from disk with training augmentation: never cached


def bench_dataset(split: str, *, seed: int, root: str | None, dataset: str, cache: str, train_items: int,
                  eval_items: int, **opts):
    """The data factory of the benchmark's cells (``data.name: "train.bench:bench_dataset"``).

    Built-in datasets are materialized once per (split, seed, options) in ``cache`` and shared by
    every encoding; ``train_items`` / ``eval_items`` size the training and val/test splits.
    """
    from .cache import cached_dataset
    from .data import DATASETS, build_dataset

    if dataset in REAL:
        return build_dataset(dataset, split, seed=seed, root=root, **opts)
    items = train_items if split == "train" else eval_items
    sized = {"size": items} if "size" in DATASETS[dataset].options else {"limit": items}
    return cached_dataset(split, seed=seed, root=root, dataset=dataset, cache=cache, **sized, **opts)


def data_options(cfg: BenchConfig, task: Task, run_dir: Path, size=None) -> dict:
    """Options of ``bench_dataset`` for ``task`` at ``size`` (the training size by default)."""
    opts = {"dataset": task.dataset, "cache": str(Path(run_dir) / "data"),
            "train_items": int(cfg.items.get(task.name, cfg.train_items)),
            "eval_items": cfg.test_items, **task.data}
    if not task.conv:
        opts[task.size_key] = task.train_size if size is None else size
    return opts


def test_options(task: Task, size) -> dict:
    """The dataset options that turn a cell's data into its test split at ``size``."""
    return {**task.test_data, **({} if task.conv else {task.size_key: size})}


def train_config(cfg: BenchConfig, task: Task, cell: CellSpec, run_dir: Path, train_grid=None,
                 max_grid=None) -> Config:
    """The ``train.config.Config`` of one cell."""
    model = {"name": task.model}
    if task.conv:
        model["add_coords"] = cell.kind == "conv+coord"
        model.update(task.archs.get(cell.kind, {}))
    else:
        model.update({"dim": cfg.dim, "depth": cfg.depth, "heads": cfg.heads, **cfg.models.get(task.name, {}),
                      "pe": pe_config(cell.kind, task, train_grid, max_grid), **split_label(cell.kind)[2]})
    model.update(task.model_opts)
    steps = int(cfg.steps.get(task.name, cfg.default_steps))
    lr = cell.lr or float(cfg.lrs.get(task.name, cfg.lr))
    raw = {
        "data": {"name": "train.bench:bench_dataset", "root": cfg.data_root, "seed": cell.data_seed,
                 "num_workers": cfg.data_workers,
                 "options": data_options(cfg, task, run_dir), "eval_split": "val"},
        "model": model,
        "optim": {"lr": lr, "warmup_steps": min(cfg.warmup_steps, steps // 5),
                  "weight_decay": cell.weight_decay if cell.lr else cfg.weight_decay},
        "train": {"steps": steps, "batch_size": cfg.batch_size, "seed": cell.seed, "device": cfg.device,
                  "out_dir": str(cell_dir(run_dir, cell)), "log_every": 10 ** 9, "save_every": 10 ** 9,
                  "overwrite": True},  # a cell not in results.csv is unfinished: trained again from the start
    }
    return from_dict(Config, raw)


def data_jobs(cfg: BenchConfig) -> list[tuple]:
    """Every built-in dataset the cells will read, as ``materialize`` jobs (generated once, in parallel)."""
    jobs = []
    for task_name in cfg.tasks:
        task = TASKS[task_name]
        if task.dataset in REAL:
            continue
        splits = [("train", None), ("val", None)] + [("test", size) for size in task.test_sizes]
        jobs += [(cfg, task_name, split, size, d) for d in sorted(set(cfg.data_seeds)) for split, size in splits]
    return jobs


def fetch_real(cfg: BenchConfig) -> None:
    """Open (with ``download``: fetch) every real dataset the tasks read, in the driver before any cell, so that a
    missing one is one error (with the command that fetches it) and the cells never download concurrently. With
    the Ray executor on several machines, ``data_root`` must be a folder every worker sees. Every dataset with a
    ``download`` option is read from disk (MNIST too, though it is cached like a built-in one)."""
    from .data import DATASETS, build_dataset

    for name in dict.fromkeys(TASKS[t].dataset for t in cfg.tasks if "download" in DATASETS[TASKS[t].dataset].options):
        print(f"{name}: {'fetching if missing' if cfg.download else 'checking'} in {cfg.data_root or 'the default data folder'}",
              flush=True)
        build_dataset(name, "test", root=cfg.data_root, download=cfg.download)


def run_data_job(args: tuple) -> None:
    cfg, task_name, split, size, data_seed = args
    torch.set_num_threads(1)
    task = TASKS[task_name]
    opts = data_options(cfg, task, Path(cfg.out_root) / cfg.name)
    if size is not None:
        opts.update(test_options(task, size))
    bench_dataset(split, seed=data_seed, root=cfg.data_root, **opts)


def scaled_rope(pe, variant: str, train_grid: tuple[int, ...], test_grid: tuple[int, ...]):
    """The trained rope encoding ``pe`` rebuilt with test-time scaling ``variant`` (pi, ntk, yarn)."""
    scale = tuple(max(t / s, 1.0) for t, s in zip(test_grid, train_grid))
    return pe.replace(scaling=SCALINGS[variant], scale=scale, **({"train_shape": train_grid} if variant == "yarn" else {}))


def with_encoding(model, pe):
    """A copy of ``model`` whose encoder uses ``pe`` (the trained model is left as it is)."""
    variant = copy.deepcopy(model)
    variant.encoder.pe = pe
    return variant


def run_cell_safe(args: tuple) -> tuple[list[Row], float, str | None]:
    """:func:`run_cell`, turning a failure into a message so one broken cell does not stop the benchmark."""
    start = time.perf_counter()
    try:
        rows, seconds = run_cell(args)
        return rows, seconds, None
    except Exception as e:  # reported per cell and in report.md; the cell is retried on the next run
        _, cell, _ = args
        return [], time.perf_counter() - start, f"{cell.describe()}: {type(e).__name__}: {e}"


def cell_dir(run_dir, cell: CellSpec) -> Path:
    name = f"{cell.task.replace('/', '_')}_{cell.kind}_{cell.seed}_d{cell.data_seed}"
    return Path(run_dir) / "cells" / (name + (f"_lr{cell.lr:g}_wd{cell.weight_decay:g}" if cell.search else ""))


def run_cell(args: tuple) -> tuple[list[Row], float]:
    """Train and test one cell (or compute a floor cell); returns its rows and wall time. Runs in a worker.

    Everything the cell prints goes to ``cells/<cell>/console.log`` (the training log to ``log.jsonl``);
    the console gets one line per finished cell from the driver.
    """
    cfg, cell, run_dir = args
    out = cell_dir(run_dir, cell)
    out.mkdir(parents=True, exist_ok=True)
    with open(out / "console.log", "w") as log, contextlib.redirect_stdout(log), contextlib.redirect_stderr(log):
        return _run_cell(cfg, TASKS[cell.task], cell, run_dir)


def _row(task: Task, cell: CellSpec, variant: str, size, value: float, train_time: float, split: str = "test") -> Row:
    ratio = 1.0 if task.conv else float(size) / float(task.train_size)
    label = task.data["split_mode"] if task.conv else None
    return Row(domain=task.name.split("/")[0], task=task.name, kind=cell.kind, variant=variant, seed=cell.seed,
               train_size=label or f"{task.train_size:g}{task.unit}", test_size=label or f"{size:g}{task.unit}",
               size_ratio=ratio, metric=task.metric, value=float(value), higher_is_better=task.higher_is_better,
               train_time_s=round(train_time, 2), data_seed=cell.data_seed, split=split, lr=cell.lr,
               weight_decay=cell.weight_decay)


def data_cell(cell: CellSpec) -> CellSpec:
    """A floor cell as a cell whose configuration builds its data (a floor has no encoding: ``none``)."""
    return dataclasses.replace(cell, kind="none") if cell.kind == FLOOR else cell


def floor_rows(cfg: BenchConfig, task: Task, cell: CellSpec, run_dir) -> list[Row]:
    """The task's floors (train.floors) at every test size, computed from the data of ``cell.data_seed``."""
    from .floors import floors
    from .main import build_data

    tcfg = train_config(cfg, task, data_cell(cell), run_dir)  # only its data is used
    train, val = build_data(tcfg, "train"), build_data(tcfg, "val")
    rows = []
    for size in task.test_sizes:
        test = build_data(tcfg, "test", **test_options(task, size))
        for name, value in floors(train, val, test, task.metric).items():
            rows.append(_row(task, cell, name, size, value, 0.0))
    if task.competence_split == "val":  # the bar is judged on the validation split: its floors too
        rows += [_row(task, cell, name, task.train_size, value, 0.0, split="val")
                 for name, value in floors(train, val, val, task.metric).items()]
    return rows


def cell_grids(cfg: BenchConfig, task: Task, run_dir) -> tuple[tuple[int, ...] | None, tuple[int, ...] | None]:
    """The grids the encoder sees at the training size and at the largest test size (None, None for conv)."""
    if task.conv:
        return None, None
    from models import grid_shape

    from .main import build_data

    probe_cfg = train_config(cfg, task, CellSpec(task.name, "none", 0, cfg.data_seeds[0]), run_dir)
    train_x = build_data(probe_cfg, "val")[0][0]
    largest_x = build_data(probe_cfg, "test", **test_options(task, task.test_sizes[-1]))[0][0]
    return grid_shape(probe_cfg.model, train_x.shape), grid_shape(probe_cfg.model, largest_x.shape)


def _run_cell(cfg: BenchConfig, task: Task, cell: CellSpec, run_dir) -> tuple[list[Row], float]:
    start = time.perf_counter()
    if cell.kind == FLOOR:
        return floor_rows(cfg, task, cell, run_dir), time.perf_counter() - start
    from .main import build_data, evaluate_model, fit

    train_grid, max_grid = cell_grids(cfg, task, run_dir)
    tcfg = train_config(cfg, task, cell, run_dir, train_grid, max_grid)
    model, result = fit(tcfg)
    train_time = time.perf_counter() - start
    model.eval()
    val = result["eval"][task.metric]
    if cell.search:  # scored as the bar is judged: the validation split drawn as the test split at the training size
        if task.test_data:  # e.g. copy: exact match at exactly L (validation draws lengths 1..L)
            val = evaluate_model(model, tcfg, split="val", **test_options(task, task.train_size))[task.metric]
        return [_row(task, cell, SEARCH, task.train_size, val, train_time, split="val")], time.perf_counter() - start
    rows = [_row(task, cell, "-", task.train_size, result["train"][task.metric], train_time, split="train"),
            _row(task, cell, "-", task.train_size, val, train_time, split="val")]
    variants = ["-"] + (list(cfg.rope_variants) if cell.kind == "rope" else [])
    for size in task.test_sizes:
        opts = test_options(task, size)
        scaled = len(variants) > 1 and float(size) > float(task.train_size)  # scaling changes nothing at the training size
        test_grid = grid_shape_of(tcfg, build_data(tcfg, "test", **opts)[0][0]) if scaled else None
        for variant in variants:
            tested = model
            if variant != "-":
                if not scaled:
                    continue
                tested = with_encoding(model, scaled_rope(model.encoder.pe, variant, train_grid, test_grid))
            metrics = evaluate_model(tested, tcfg, split="test", **opts)
            rows.append(_row(task, cell, variant, size, metrics[task.metric], train_time))
    return rows, time.perf_counter() - start


def grid_shape_of(tcfg: Config, x: torch.Tensor) -> tuple[int, ...] | None:
    """The grid the model of ``tcfg`` builds for one input item ``x``."""
    from models import grid_shape

    return grid_shape(tcfg.model, x.shape)


# -- driver ------------------------------------------------------------------------------------
def fmt_time(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}:{s:02d}"


# what the numbers of a cell depend on; the selection (tasks, kinds, seeds) and the machinery do not count
SELECTION = ("name", "tasks", "kinds", "seeds", "data_seeds", "workers", "out_root", "executor", "ray_address",
             "gpus_per_cell", "task_kinds", "why", "download")


def fingerprint(cfg: BenchConfig) -> str:
    fields = {k: v for k, v in dataclasses.asdict(cfg).items() if k not in SELECTION}
    if not fields["data_workers"]:  # the key is newer than the committed runs: its default leaves them as they were
        del fields["data_workers"]
    if cfg.lr_file:  # the choices it holds, not only its path: a rewritten file is other settings
        fields["lr_file"] = sorted((f"{t}|{k}", v) for (t, k), v in choices(cfg, []).items() if t in cfg.tasks)
    return hashlib.sha1(json.dumps(fields, sort_keys=True).encode()).hexdigest()[:16]


def check_fingerprint(cfg: BenchConfig, run_dir: Path, *, resuming: bool) -> None:
    """Refuse to add cells trained under other settings to an existing run (and say how to start another)."""
    path = run_dir / "fingerprint.txt"
    if resuming and path.exists() and path.read_text().strip() != fingerprint(cfg):
        raise ConfigError(f"{run_dir} holds results trained with other settings (see its bench_config.yaml); "
                          f"pass name=<new name> to start another run, or delete {run_dir}")
    path.write_text(fingerprint(cfg) + "\n")


def selected_rows(cfg: BenchConfig, rows: list[Row]) -> list[Row]:
    """The rows of the cells this configuration selects (a run directory may hold more); a selected (task, kind)'s
    search rows include the points its grid was extended by."""
    keys = {c.key for c in cells_for(cfg)}
    searched = {(c.task, c.kind, c.seed) for c in search_cells(cfg)}
    return [r for r in rows if r.cell in keys or (r.variant == SEARCH and (r.task, r.kind, r.seed) in searched)]


def write_choices(cfg: BenchConfig, chosen: dict, path: Path) -> None:
    """The search's choices, ``{task: {kind: {lr, weight_decay}}}``, for a later preset's ``lr_file``; the choices
    of tasks run by earlier invocations (task by task) are kept."""
    out: dict = (yaml.safe_load(path.read_text()) or {}) if path.exists() else {}
    for (task, kind), (lr, wd) in sorted(chosen.items()):
        out.setdefault(task, {})[kind] = {"lr": lr, "weight_decay": wd}
    path.write_text(yaml.safe_dump(out, sort_keys=True))


def run(cfg: BenchConfig, command: str, *, cell_fn=None) -> Path:
    """Train the cells ``cfg`` selects that results.csv lacks (the search first), then write the report.

    ``cell_fn`` replaces :func:`run_cell_safe` as the function run on each cell (tests; it must pickle).
    """
    import importlib.util

    from .executors import INSTALL_HINT, ExecutorError, make_executor

    if cfg.executor == "ray" and importlib.util.find_spec("ray") is None:
        raise SystemExit(f"error: {INSTALL_HINT}")
    cell_fn = cell_fn or run_cell_safe
    run_dir = Path(cfg.out_root) / cfg.name
    run_dir.mkdir(parents=True, exist_ok=True)
    results = run_dir / "results.csv"
    check_fingerprint(cfg, run_dir, resuming=results.exists())
    (run_dir / "bench_config.yaml").write_text(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
    done = {r.cell for r in read_rows(results)}
    first = [c for c in [*search_cells(cfg), *[c for c in cells_for(cfg) if c.kind == FLOOR]] if c.key not in done]
    later = [c for c in cells_for(cfg) if c.kind != FLOOR and c.key not in done]
    total = len(search_cells(cfg)) + len(cells_for(cfg))
    todo = len(first) + len(later)
    on_ray = todo > 0 and cfg.executor == "ray"  # nothing to train: no cluster needed
    if on_ray:
        try:
            executor = make_executor("ray", workers=cfg.workers, ray_address=cfg.ray_address,
                                     gpus_per_cell=cfg.gpus_per_cell)
        except ExecutorError as e:
            raise SystemExit(f"error: {e}") from None
        # workers elsewhere (or in another working directory) get absolute paths: the run directory's
        # data/ and cells/ are made at that path on the machine that runs the cell
        run_dir_w = run_dir.resolve()
        cfg_w = dataclasses.replace(cfg, out_root=str(run_dir_w.parent))
    else:
        executor = make_executor("local", workers=cfg.workers, jobs=todo)
        run_dir_w, cfg_w = run_dir, cfg
    workers_text = executor.describe()
    print(f"bench {cfg.name}: {total} cells ({total - todo} already done), {workers_text} -> {run_dir}", flush=True)
    start, started = time.perf_counter(), provenance.utc_now()
    finished, failures, written, status = 0, [], [], "interrupted"
    stamp = provenance.stamp()  # where every row of this invocation comes from (train/provenance.py)

    def longest_first(cells):  # so the last minutes are not one worker finishing a slow cell alone
        return sorted(cells, key=lambda c: -int(cfg.steps.get(c.task, cfg.default_steps)) * (1 + len(TASKS[c.task].test_sizes)))

    def lost(job, error):  # the executor gave up on a cell (Ray: its worker died on every retry)
        return [], 0.0, f"{job[1].describe()}: lost ({type(error).__name__}: {str(error).splitlines()[0]})"

    def dispatch(cells):
        nonlocal finished
        jobs = [(cfg_w, c, str(run_dir_w)) for c in longest_first(cells)]
        for rows, seconds, error in executor.map_unordered(cell_fn, jobs, lost):
            finished += 1
            elapsed = time.perf_counter() - start
            progress = f"[{total - todo + finished}/{total}]"
            eta = f"elapsed {fmt_time(elapsed)}, ETA {fmt_time(elapsed / finished * (todo - finished))}"
            if error is not None:
                failures.append(error)
                print(f"{progress} FAILED {error} | {eta}", flush=True)
                continue
            rows = [dataclasses.replace(r, **stamp) for r in rows]
            append_rows(results, rows)
            written.append(len(rows))
            shown = [r for r in rows if r.split == "test" or r.variant == SEARCH]
            at = ", ".join(f"{r.value:.3g}@×{r.size_ratio:g}" + ("" if r.variant in ("-", SEARCH) else f" {r.variant}")
                           for r in shown if r.variant in ("-", SEARCH) or r.kind == FLOOR)
            what = f"{rows[0].task} {rows[0].kind} seed {rows[0].seed} data {rows[0].data_seed}"
            what += f" lr {rows[0].lr:g} wd {rows[0].weight_decay:g} (search, val)" if rows[0].variant == SEARCH else ""
            print(f"{progress} {what}: {rows[0].metric} {at} ({seconds:.0f} s) | {eta}", flush=True)

    try:
        if todo:
            fetch_real(cfg)
        data = data_jobs(cfg_w) if todo else []
        print(f"generating {len(data)} built-in datasets (cached in {executor.where_data(run_dir_w / 'data')})",
              flush=True)
        executor.prepare(run_data_job, data)
        print(f"data ready after {fmt_time(time.perf_counter() - start)}", flush=True)
        dispatch(first)
        for _ in range(cfg.lr_extend):  # until every choice is interior (or at the end of lr_range)
            extend = [c for c in extension_cells(cfg, read_rows(results)) if c.key not in done]
            total, todo = total + len(extend), todo + len(extend)
            dispatch(extend)
        chosen = choices(cfg, read_rows(results))
        if cfg.lr_search:
            write_choices(cfg, chosen, run_dir / "lr_choices.yaml")
        unchosen = sorted({(c.task, c.kind) for c in later if lr_of(cfg, chosen, c.task, c.kind) is None})
        for task, kind in unchosen:
            source = cfg.lr_file or "the search"
            failures.append(f"{task} {kind}: no learning rate chosen (a search point failed, or {source} lacks it); "
                            "its runs were not trained")
            print(f"FAILED {failures[-1]}", flush=True)
        dispatch([dataclasses.replace(c, lr=lr_wd[0], weight_decay=lr_wd[1]) for c in later
                  if (lr_wd := lr_of(cfg, chosen, c.task, c.kind)) is not None])
        status = "failed" if failures else "finished"
    finally:
        executor.close()
        provenance.append_invocation(run_dir, {  # also when interrupted: what it wrote stays traceable
            "command": command, "start": started, "end": provenance.utc_now(), "status": status,
            "wall_s": round(time.perf_counter() - start, 1), **stamp, "settings": fingerprint(cfg),
            "cells_trained": len(written), "rows_written": sum(written), "cells_failed": len(failures),
            "executor": workers_text, "machine": provenance.machine(cfg.device)})
    wall = time.perf_counter() - start
    info_path = run_dir / "run_info.json"
    if todo or not info_path.exists():  # an invocation that trained nothing keeps the last one's record
        info = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "wall_s": round(wall),
                **({"executor": workers_text} if on_ray else {})}
        info_path.write_text(json.dumps(info) + "\n")
    info = json.loads(info_path.read_text())
    head = header(cfg, info)
    if failures:
        head += "\n- **failed cells** (rerun the same command to retry them):\n" + "\n".join(f"  - {f}" for f in failures)
    report = write_report(run_dir, head, select=lambda rows: selected_rows(cfg, rows))
    print(f"wrote {results} and {report} in {fmt_time(wall)}" + (f"; {len(failures)} cell(s) FAILED" if failures else ""),
          flush=True)
    if failures:
        raise SystemExit(1)
    return report


def option_text(opts: dict) -> str:
    """``{"theta": 100.0, "causal": True}`` -> ``causal=True, theta=100.0`` (the report's options column)."""
    return ", ".join(f"{k}={v}" for k, v in sorted(opts.items()))


def header(cfg: BenchConfig, info: dict | None) -> str:
    """The report's first lines: every invocation that wrote the run (invocations.jsonl; else ``info``, from
    run_info.json) and the rows of other code (train/provenance.py), the machine, the protocol and the selection,
    and the options each kind gets on each task with the reason."""
    cpu = platform.processor() or platform.machine()
    gpu = torch.cuda.get_device_name() if cfg.device != "cpu" and torch.cuda.is_available() else "none"
    search = (f"learning rate searched per (task, kind) over {cfg.lr_search}" + (
        f" (weight decay per task: {cfg.wd_search})" if cfg.wd_search else "") if cfg.lr_search else
              f"learning rates from {cfg.lr_file}" if cfg.lr_file else f"lr {cfg.lr} (per task: {cfg.lrs or 'none'})")
    run_dir = Path(cfg.out_root) / cfg.name
    lines = [
        f"# ndpe benchmark report: `{cfg.name}`", "",
        *provenance.header_lines(run_dir, selected_rows(cfg, read_rows(run_dir / "results.csv")), info,
                                 f"{cfg.workers} worker process(es)"),
        f"- machine: {platform.system()} {cpu}, {os.cpu_count()} CPU cores, GPU: {gpu}",
        f"- versions: python {platform.python_version()}, torch {torch.__version__}, ndpe {ndpe.__version__}",
        f"- runs per (task, kind): {len(cfg.seeds)} (model seeds {cfg.seeds}, data seeds {cfg.data_seeds} in turn); "
        f"model: dim {cfg.dim}, depth {cfg.depth}, heads {cfg.heads} (per task: {cfg.models or 'none'}; the task's "
        "own options win); batch "
        f"{cfg.batch_size}; {search}; weight decay {cfg.weight_decay}; steps: {cfg.default_steps} (per task: "
        f"{cfg.steps or 'none'}); {cfg.train_items} training items (per task: {cfg.items or 'none'}; fewer where the dataset has fewer: digits 1,077), "
        f"{cfg.test_items} test items per size (fewer where the dataset has fewer)",
        "- protocol (train/protocol.py): each model is trained at the first size and evaluated at every size; "
        "`(pi)`, `(ntk)`, `(yarn)` rows are the same rope model evaluated with test-time scaling; floors are computed "
        "from the data of each data seed (train/floors.py).",
        "- changed after results were seen (train/protocol.py CHANGES_AFTER_RESULTS): "
        + "; ".join(CHANGES_AFTER_RESULTS) + ".", "",
        "## Tasks, bars and the encodings compared", "",
        "| task | protocol | competence bar | order-blind floor | encodings | why these |", "|---|---|---|---|---|---|",
    ]
    for name in cfg.tasks:
        task = TASKS[name]
        opts = {k: v for k, v in task.model_opts.items() if k in ("heads", "patch_size", "tubelet", "pool", "causal")}
        lines.append(f"| {name} | {task.protocol}{f' (model: {opts})' if opts else ''} | {task.bar.text} | "
                     f"{task.order_blind} | {', '.join(kinds_for(cfg, name))} | {cfg.why.get(name, '')} |")
    lines += ["", "## Options per kind and task", "",
              "What a kind gets beyond its defaults, and why: the protocol's choices (train/protocol.py) and what "
              "the kind needs for the task (causal attention, table sizes).", "",
              "| task | kind | options | reason |", "|---|---|---|---|"]
    for name in cfg.tasks:
        task = TASKS[name]
        if task.conv:
            for kind, opts in task.archs.items():
                lines.append(f"| {name} | {kind} | {option_text(opts)} | Liu et al. 2018's networks, the same init rule "
                             "for both |")
            continue
        try:  # the values follow the run's grids, read from its data cache (cheap once the run built it)
            grids, known = cell_grids(cfg, task, Path(cfg.out_root) / cfg.name), True
        except (KeyError, FileNotFoundError):  # a dataset whose extra is not installed, or not downloaded here
            grids, known = ((8,) * task.dims, (16,) * task.dims), False
        for kind in kinds_for(cfg, name):
            base = kind.split("+")[0]
            opts = pe_config(kind, task, *grids)["options"]
            if not opts:
                continue
            reason = task.kind_options[base].reason if base in task.kind_options else "what the kind needs for the task"
            text = option_text(opts) if known else ", ".join(sorted(opts)) + " (values: the task's data is not here)"
            lines.append(f"| {name} | {kind} | {text} | {reason} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the CPU preset, configs/bench/quick.yaml")
    parser.add_argument("--config", default=None, help="a preset YAML (configs/bench/*.yaml)")
    parser.add_argument("--report-only", action="store_true", help="rewrite report.md from results.csv")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the preset (e.g. seeds=[0])")
    args = parser.parse_args(argv)
    if args.quick and args.config:
        parser.error("--quick is configs/bench/quick.yaml: give one of --quick and --config")
    path = CONFIG_DIR / "quick.yaml" if args.quick else args.config
    try:
        cfg = load_bench_config(path, args.overrides)
    except (ConfigError, FileNotFoundError) as e:
        parser.error(str(e))
    command = "python -m train.bench " + " ".join(argv if argv is not None else sys.argv[1:])
    if args.report_only:
        run_dir = Path(cfg.out_root) / cfg.name
        info_path = run_dir / "run_info.json"
        if not info_path.exists() and not provenance.read_invocations(run_dir):
            parser.error(f"{run_dir} holds no run (run_info.json, {provenance.INVOCATIONS}): run the benchmark first")
        info = json.loads(info_path.read_text()) if info_path.exists() else None
        return write_report(run_dir, header(cfg, info), select=lambda rows: selected_rows(cfg, rows))
    try:
        return run(cfg, command)
    except (ConfigError, ResultsError, FileNotFoundError) as e:  # other settings, a damaged results.csv, no dataset
        parser.error(" ".join(str(e).split()))


if __name__ == "__main__":
    main()
