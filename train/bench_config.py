"""A benchmark preset (configs/bench/*.yaml) as a typed, checked :class:`BenchConfig`, and the encodings it trains.

    cfg = load_bench_config("configs/bench/quick.yaml", ["seeds=[0]", "kinds=[none,rope]"])
    kinds_for(cfg, "text/copy")        # ['none', 'rope']: the kinds that apply to the task

Every key is checked when the preset is loaded (a :class:`ConfigError` naming the key), not in every cell. A kind
label is a registered kind with an optional augmentation (``rope+cape``), position-free blocks (``rope+nope3``) or
coordinate convention (``rope@centered``): :func:`split_label`, :func:`label_coords`.
"""
from __future__ import annotations

import inspect
import math
from dataclasses import dataclass, field
from pathlib import Path

import ndpe
from ndpe.augment import AUGMENTS
from ndpe.checks import check_heads

from .config import ConfigError, apply_override, from_dict, load_yaml
from .protocol import TASKS

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
    other_runs: int | None = None  # kinds no claim on the task compares run only the first N runs (null: every run)
    workers: int = 2  # processes training cells in parallel (one thread each on CPU); executor=ray: the CPUs of a
    # local Ray instance the benchmark starts itself (ray_address null); a cluster's own resources otherwise
    executor: str = "local"  # local: a process pool on this machine | ray: one Ray task per cell (train/executors.py)
    order: str = "longest"  # longest: the longest cells first (no worker finishes a slow cell alone) | listed: the
    # tasks in the preset's order, each task's runs seed by seed across its kinds (a record cut short holds paired runs)
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
    lr_searches: dict = field(default_factory=dict)  # task -> its own first grid, when lr_search turns the search on
    lr_extend: int = 3  # rounds that extend the grid by lr_step past an edge choice, until it is interior
    lr_step: float = 2.0  # factor between an edge learning rate and the one added beyond it
    lr_range: list[float] = field(default_factory=lambda: [1e-4, 0.05])  # the extension stays in this range
    search_seed: int = 1000  # the search's model seed: never one of the reported seeds
    search_runs: int = 1  # runs per candidate: model seeds search_seed, search_seed + 1, ...; chosen by their median
    search_data_seeds: list[int] = field(default_factory=list)  # search run j's data seed, in turn (never reported);
    # empty: the first of data_seeds
    curve_points: int = 0  # > 0: every trained cell evaluates on its validation split that many times (its learning
    # curve, committed in curves/<task>.jsonl); 0: once, at the end
    final_budgets: list[str] = field(default_factory=list)  # tasks whose steps the plateau rule has doubled once: the
    # rule does not double them again (their runs train where it still finds them short; the report says so)
    eval_batch_by_size: bool = False  # true: beyond the training size, evaluation batches shrink with the tokens per
    # item, so none holds more tokens than a training batch (long contexts: the memory of pairwise terms)
    memory_budget_gib: float | None = None  # ndpe's memory budget in each cell (ndpe.set_memory_budget); null: 1 GiB
    wd_search: dict = field(default_factory=dict)  # task -> candidate weight decays searched with lr_search
    lr_file: str | list[str] | None = None  # a search's choice file (lr_choices.yaml), or one per record the preset's
    # tasks were searched in (a (task, kind) in one of them only); relative paths from the checkout's root
    warmup_steps: int = 20
    dim: int = 48
    depth: int = 2
    heads: int = 4
    models: dict = field(default_factory=dict)  # task -> {dim, depth, heads}: a larger model where a task needs it
    out_root: str = "runs"
    checkpoint_s: float = 120.0  # a training cell checkpoints at an epoch's end once this many seconds have passed
    # since its last; a cell killed mid-training continues from there, exactly (train/evaluate.py); 0: never

    def steps_for(self, task: str) -> int:
        """The optimizer steps a cell of ``task`` trains: its entry in ``steps``, else ``default_steps``."""
        return int(self.steps.get(task, self.default_steps))


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
    if not (math.isfinite(cfg.checkpoint_s) and cfg.checkpoint_s >= 0):
        raise ConfigError(f"config key checkpoint_s must be a finite number of seconds >= 0, got {cfg.checkpoint_s!r}")
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
              "lr_searches": (lambda v: isinstance(v, list) and len(v) > 0 and all(
                  type(x) in (int, float) and math.isfinite(x) and x > 0 for x in v), "a list of numbers > 0"),
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
    if cfg.other_runs is not None and not (type(cfg.other_runs) is int and 1 <= cfg.other_runs):
        raise ConfigError(f"other_runs must be null or an int >= 1 (the runs of kinds no claim compares), got "
                          f"{cfg.other_runs!r}")
    if any(not (isinstance(v, (int, float)) and math.isfinite(v) and v > 0) for v in cfg.lr_search):
        raise ConfigError(f"lr_search must hold finite numbers > 0, got {cfg.lr_search}")
    if cfg.memory_budget_gib is not None and not (type(cfg.memory_budget_gib) in (int, float)
                                                  and math.isfinite(cfg.memory_budget_gib) and cfg.memory_budget_gib > 0):
        raise ConfigError(f"memory_budget_gib must be null or a number > 0 (GiB), got {cfg.memory_budget_gib!r}")
    if type(cfg.search_runs) is not int or cfg.search_runs < 1:
        raise ConfigError(f"search_runs must be an int >= 1 (runs per search candidate), got {cfg.search_runs!r}")
    if type(cfg.curve_points) is not int or cfg.curve_points < 0:
        raise ConfigError(f"curve_points must be an int >= 0 (evaluations per cell), got {cfg.curve_points!r}")
    if not isinstance(cfg.final_budgets, list) or set(cfg.final_budgets) - set(TASKS):
        raise ConfigError(f"final_budgets must be a list of known tasks (those whose steps were doubled once), got "
                          f"{cfg.final_budgets!r}")
    reported = sorted(set(cfg.seeds) & {cfg.search_seed + j for j in range(cfg.search_runs)})
    if reported:
        raise ConfigError(f"search seeds {cfg.search_seed}..{cfg.search_seed + cfg.search_runs - 1} include reported "
                          f"seed(s) {reported}: the search must run on model seeds that are never reported")
    if any(type(s) is not int or s < 0 for s in cfg.search_data_seeds) or set(cfg.search_data_seeds) & set(cfg.data_seeds):
        raise ConfigError(f"search_data_seeds must be ints >= 0 that are not reported data seeds {cfg.data_seeds}, got "
                          f"{cfg.search_data_seeds}")
    if not (cfg.lr_step > 1 and len(cfg.lr_range) == 2 and 0 < cfg.lr_range[0] < cfg.lr_range[1] and cfg.lr_extend >= 0):
        raise ConfigError(f"lr_step must be > 1, lr_range [low, high] with 0 < low < high and lr_extend >= 0, got "
                          f"lr_step={cfg.lr_step}, lr_range={cfg.lr_range}, lr_extend={cfg.lr_extend}")


EXECUTORS = ("local", "ray")
ORDERS = ("longest", "listed")  # how cells are dispatched (BenchConfig.order)
REAL = ("cifar10", "speech_commands")  # read from disk with training augmentation: never cached, never sized


def check_executor(cfg: BenchConfig) -> None:
    """``executor`` / ``ray_address`` / ``gpus_per_cell`` values that work together, and a known ``order``
    (ConfigError otherwise)."""
    if cfg.executor not in EXECUTORS:
        raise ConfigError(f"config key executor must be one of {list(EXECUTORS)}, got {cfg.executor!r}")
    if cfg.workers < 1:
        raise ConfigError(f"config key workers must be >= 1, got {cfg.workers}")
    if cfg.order not in ORDERS:
        raise ConfigError(f"config key order must be one of {list(ORDERS)}, got {cfg.order!r}")
    if not cfg.gpus_per_cell >= 0:
        raise ConfigError(f"config key gpus_per_cell must be >= 0, got {cfg.gpus_per_cell}")
    if cfg.executor == "local" and (cfg.ray_address is not None or cfg.gpus_per_cell):
        raise ConfigError("ray_address and gpus_per_cell apply to executor=ray (add executor=ray)")
    if cfg.executor == "ray" and cfg.device == "cuda" and not cfg.gpus_per_cell:
        raise ConfigError("device=cuda with executor=ray needs gpus_per_cell > 0 (a Ray task sees only the GPUs it asks for)")
    if cfg.executor == "ray" and cfg.device == "cpu" and cfg.gpus_per_cell:
        raise ConfigError("gpus_per_cell > 0 with device=cpu would hold GPUs the cells never use; "
                          "pass device=auto or device=cuda")


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
