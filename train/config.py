"""Typed run configuration: dataclasses loaded from YAML, validated strictly, overridden from the command line.

>>> cfg = load_config(None, ["model.name=vit", "model.dim=32", "optim.lr=3e-4", "model.pe.kind=rope"])
>>> cfg.model.dim, cfg.optim.lr, cfg.model.pe.kind
(32, 0.0003, 'rope')

An unknown key, a value of the wrong type or out of range raises :class:`ConfigError` (one line) naming the key and
what it expects (train/config_typed.py). YAML (config files and override values) is read by :func:`load_yaml` /
:func:`load_yaml_text` (train/config_yaml.py): at most ``MAX_YAML_BYTES`` and ``MAX_YAML_NODES`` nodes once aliases are
expanded (no alias bombs). ``data.name="package.module:factory"`` imports code, so it needs ``data.allow_import: true``
(or ``NDPE_ALLOW_DATA_IMPORT=1``); code that holds the factory passes it instead: ``train.main.fit(cfg, data=factory)``
(the benchmark). ``None`` on an optional model field means "the architecture's default"; ``model.num_classes`` /
``model.vocab_size`` left ``None`` are taken from the dataset.
"""
from __future__ import annotations

import dataclasses
import inspect
import math
import os
import typing
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from .config_typed import apply_override, from_dict, type_name
# the YAML reader's names stay importable from here (train.config is where callers look for them)
from .config_yaml import (MAX_INT_DIGITS, MAX_YAML_BYTES, MAX_YAML_NODES, ConfigError, BoundedLoader,  # noqa: F401
                          load_yaml, load_yaml_text)


# The data domains each reference model trains on (a training concern: models/ knows no datasets);
# coordinate-regression images go to the ViT too.
DOMAINS = {"vit": ("image", "coord"), "audio": ("audio",), "text": ("text",), "video": ("video",),
           "conv": ("coord", "image"), "timm": ("image",)}


ALLOW_IMPORT_ENV = "NDPE_ALLOW_DATA_IMPORT"
# Upper bounds far above any run of these reference models: a slip (extra zeros, a unit error) is refused in one
# line instead of training for ever or reaching the allocator.
MAX_STEPS = 10 ** 9  # optimizer steps, and the intervals (10**9: "never", as the benchmark's cells log and save)
MAX_VALUES = {"train": {"epochs": 10 ** 6, "batch_size": 2 ** 20, "eval_batch_size": 2 ** 20, "steps": MAX_STEPS,
                        "stop_after": MAX_STEPS, "log_every": MAX_STEPS, "eval_every": MAX_STEPS,
                        "eval_steps": MAX_STEPS, "save_every": MAX_STEPS},
              "optim": {"warmup_steps": MAX_STEPS}, "data": {"num_workers": 1024},
              "model": {"num_classes": 2 ** 24, "vocab_size": 2 ** 24, "dim": 2 ** 16, "depth": 2 ** 12,
                        "heads": 2 ** 12, "mlp_ratio": 256}}
MAX_WEIGHT_BYTES = 1 << 34  # 16 GiB of float32 weights (4e9 parameters), before the optimizer's state
SEED_LIMIT = 2 ** 63  # seeds in [0, 2**63): torch, numpy and python all accept them (also seed + rank / epoch)


@dataclass
class DataConfig:
    name: str = "shapes"  # a name train.data.build_dataset knows
    root: str | None = None  # the data folder of on-disk datasets (each in its subfolder); null: $NDPE_DATA or ~/.cache/ndpe/data
    download: bool = False  # fetch an on-disk dataset (CIFAR-10, Speech Commands) missing from root
    seed: int = 0  # seed of the built-in synthetic datasets
    train_split: str = "train"  # split trained on
    eval_split: str = "val"  # split evaluated on
    options: dict = field(default_factory=dict)  # passed to build_dataset, e.g. {image_size: 32}
    num_workers: int = 0  # DataLoader worker processes
    allow_import: bool = False  # let name be "package.module:factory" (imports that module)
    mixed_sizes: list[int] | None = None  # image sizes trained on together, one per item, in packed batches (vit)


@dataclass
class PEConfig:
    kind: str | dict = "none"  # a name from ndpe.available(), or per axis {axis: kind or {kind, channels, size, ...}}
    options: dict = field(default_factory=dict)  # the kind's keyword options (ndpe.options(kind))
    augment: str | None = None  # position augmentation ("cape", "random"), training mode only


@dataclass
class ModelConfig:
    name: str = "vit"  # vit | audio | text | video | conv | timm (a timm ViT / EVA with ndpe.timm.use)
    num_classes: int | None = None  # None: from the dataset
    vocab_size: int | None = None  # text: None: from the dataset
    dim: int | None = None  # width; None (here and below): the architecture's default
    depth: int | None = None  # transformer blocks
    heads: int | None = None  # attention heads
    mlp_ratio: float | None = None
    drop: float | None = None
    drop_path: float | None = None
    patch_size: int | list[int] | None = None  # vit: int; audio: [time, freq]
    timm_name: str | None = None  # timm: the timm model name (e.g. vit_tiny_patch16_224), built untrained at these sizes
    img_size: int | list[int] | None = None  # timm: the image size the model is built for; None: the dataset's
    tubelet: list[int] | None = None  # video: [frames, rows, cols]
    in_chans: int | None = None
    pool: str | None = None  # cls | mean
    causal: bool | None = None
    nope_every: int | None = None  # text: every n-th block position-free (iRoPE, Llama 4's no_rope_layers)
    nope_temperature: list[float] | None = None  # text: [floor_scale, attn_scale], Llama 4's query temperature in those blocks
    tie_weights: bool | None = None
    channels: list[int] | None = None  # conv
    add_coords: bool | None = None  # conv: CoordConv layers
    arch: str | None = None  # conv: default | coordconv_regressor | conv_uniform | conv_quadrant (Liu et al. 2018)
    with_r: bool | None = None
    value_gain: float | None = None  # conv coordconv_regressor: gain of its value-path init (0: the paper's init)
    pe: PEConfig = field(default_factory=PEConfig)


@dataclass
class OptimConfig:
    opt: str = "adamw"  # any timm create_optimizer_v2 name
    lr: float = 1e-3  # peak learning rate (after warmup, then cosine to min_lr)
    weight_decay: float = 0.05  # not on biases, norms, position tables, cls tokens
    warmup_steps: int = 0  # linear warmup, in optimizer steps
    min_lr: float = 0.0  # learning rate at the end of the cosine schedule
    clip_grad: float | None = 1.0  # max gradient norm; None disables


@dataclass
class TrainConfig:
    epochs: int = 1  # passes over the training split (unless steps > 0)
    steps: int = 0  # > 0: total optimizer steps (overrides epochs); sets the cosine schedule's length
    stop_after: int = 0  # > 0: stop this run after that many steps and checkpoint (preemption, tests)
    batch_size: int = 32  # per process
    eval_batch_size: int = 0  # 0: same as batch_size
    loss: str = "mse"  # regression loss: mse | l1
    amp: bool = True  # bf16 autocast, on CUDA only
    seed: int = 0  # weights, shuffling, dropout
    device: str = "auto"  # auto | cpu | cuda
    out_dir: str = "runs/default"  # log.jsonl, config.yaml, checkpoint.pt (and tb/)
    resume: str | None = None  # checkpoint path to continue from
    log_every: int = 50  # steps between train log lines
    eval_every: int = 1  # epochs between evaluations (the last epoch is always evaluated)
    eval_steps: int = 0  # > 0: also evaluate every that many steps (a learning curve in log.jsonl: phase "curve")
    save_every: int = 1  # epochs between checkpoints (the last step is always saved)
    save_every_s: float = 0.0  # > 0: also checkpoint at an epoch's end once that many seconds passed since the last
    tensorboard: bool = False  # also write the log's scalars to <out_dir>/tb (needs: pip install tensorboard)
    overwrite: bool = False  # start afresh in an out_dir that holds a run (its checkpoint and log are replaced)


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    train: TrainConfig = field(default_factory=TrainConfig)


# -- help text ----------------------------------------------------------------------------------
def config_reference(cls: type | None = None, prefix: str = "") -> list[tuple[str, str, str, str]]:
    """Every config key as ``(key, type, default, comment)``, walking the dataclasses above (``--help``).

    The comment is the one after the field in this file's source ("" when there is none).

    >>> [row for row in config_reference() if row[0] == "train.batch_size"]
    [('train.batch_size', 'int', '32', 'per process')]
    """
    cls = Config if cls is None else cls
    hints, comments = typing.get_type_hints(cls), _field_comments(cls)
    rows = []
    for f in dataclasses.fields(cls):
        tp = hints[f.name]
        if dataclasses.is_dataclass(tp):
            rows += config_reference(tp, f"{prefix}{f.name}.")
            continue
        default = f.default_factory() if f.default_factory is not dataclasses.MISSING else f.default
        rows.append((prefix + f.name, type_name(tp), "None" if default is None else repr(default),
                     comments.get(f.name, "")))
    return rows


def _field_comments(cls: type) -> dict[str, str]:
    """``{field: its trailing comment}`` from the class source (empty if the source is not available)."""
    import io
    import tokenize

    try:
        source = inspect.getsource(cls)
    except (OSError, TypeError):
        return {}
    comments, name = {}, None
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.NAME and name is None and tok.start[1] == 4:
            name = tok.string  # first name of an indented line: the field
        elif tok.type == tokenize.COMMENT and name is not None:
            comments[name] = tok.string.lstrip("#").strip()
        elif tok.type in (tokenize.NEWLINE, tokenize.NL):
            name = None
    return comments


def config_help() -> str:
    """The config keys, types, defaults and comments as text (the epilog of ``python -m train.main --help``)."""
    rows = config_reference()
    width = max(len(f"{k}: {t} = {d}") for k, t, d, _ in rows)
    lines = ["config keys (YAML sections in --config, or key=value overrides; `type = default`):"]
    section = None
    for key, tp, default, comment in rows:
        if key.split(".")[0] != section and section is not None:
            lines.append("")
        section = key.split(".")[0]
        text = f"{key}: {tp} = {default}"
        lines.append(f"  {text:<{width}}  {comment}".rstrip())
    return "\n".join(lines)


# -- building and checking ---------------------------------------------------------------------

def load_config(path: str | Path | None = None, overrides: list[str] | tuple[str, ...] = ()) -> Config:
    """Read a YAML config (or start from the defaults), apply ``key=value`` overrides and :func:`validate`.

    ``data.allow_import`` is not read from the file: a file cannot vouch for the code it would import (pass
    ``data.allow_import=true`` as an override, or set ``NDPE_ALLOW_DATA_IMPORT=1``)."""
    data = load_yaml(path) if path else {}
    if isinstance(data, dict) and isinstance(data.get("data"), dict) and data["data"].get("allow_import") is True:
        raise ConfigError(f"config {path}: data.allow_import is not read from a config file (the file would vouch "
                          f"for its own imports): pass data.allow_import=true on the command line or set "
                          f"{ALLOW_IMPORT_ENV}=1")
    cfg = from_dict(Config, data)
    for item in overrides:
        apply_override(cfg, item)
    validate(cfg, warn=False)
    return cfg


# -- ranges and cross-field checks -----------------------------------------------------------
def _at_least(cfg_section: Any, prefix: str, minimum: int | float, *names: str, optional: bool = False) -> None:
    for name in names:
        value = getattr(cfg_section, name)
        if value is None and optional:
            continue
        if isinstance(value, float) and not math.isfinite(value):
            raise ConfigError(f"config key {prefix}.{name} must be a finite number, got {value!r}")
        if value < minimum:
            raise ConfigError(f"config key {prefix}.{name} must be >= {minimum}, got {value!r}")


def _at_most(cfg: Config) -> None:
    for prefix, limits in MAX_VALUES.items():
        for name, limit in limits.items():
            value = getattr(getattr(cfg, prefix), name)
            if value is not None and value > limit:
                raise ConfigError(f"config key {prefix}.{name} must be <= {limit:,}, got {value:,}")


def check_model_size(m: ModelConfig) -> None:
    """Refuse a transformer whose float32 weights alone would pass :data:`MAX_WEIGHT_BYTES` (per block: attention
    ``4 dim^2``, MLP ``2 mlp_ratio dim^2``; embedding and head ``dim x classes``), before anything is built."""
    from models import MODELS

    defaults = {n: p.default for n, p in inspect.signature(MODELS[m.name].__init__).parameters.items()}
    if "depth" not in defaults:  # the conv net: no transformer blocks
        return
    dim, depth, ratio = (defaults[k] if getattr(m, k) is None else getattr(m, k) for k in ("dim", "depth", "mlp_ratio"))
    nbytes = 4 * (depth * (4 + 2 * ratio) * dim ** 2 + 2 * dim * max(m.vocab_size or 0, m.num_classes or 0))
    if nbytes > MAX_WEIGHT_BYTES:
        raise ConfigError(f"model.dim={dim}, depth={depth}, mlp_ratio={ratio} make ~{nbytes / 2 ** 30:,.0f} GiB of "
                          f"float32 weights, over the {MAX_WEIGHT_BYTES >> 30} GiB these reference models allow: use a "
                          "smaller dim or depth")


def validate(cfg: Config, *, warn: bool = True) -> Config:
    """Range and cross-field checks of a whole config; raises :class:`ConfigError`; ``warn``: warn on odd but
    legal values (``train.main.fit`` warns; :func:`load_config` only checks)."""
    t, o, m, d = cfg.train, cfg.optim, cfg.model, cfg.data
    _at_most(cfg)
    _at_least(t, "train", 1, "epochs", "batch_size", "eval_every", "save_every")
    _at_least(t, "train", 0, "steps", "stop_after", "eval_batch_size", "log_every", "eval_steps", "save_every_s")
    for section, prefix in ((t, "train"), (d, "data")):
        if not 0 <= section.seed < SEED_LIMIT:
            raise ConfigError(f"config key {prefix}.seed must be in [0, 2**63), got {section.seed}")
    _at_least(d, "data", 0, "num_workers")
    _at_least(o, "optim", 0, "lr", "weight_decay", "warmup_steps", "min_lr")
    _at_least(o, "optim", 0, "clip_grad", optional=True)
    _at_least(m, "model", 1, "num_classes", "vocab_size", "dim", "depth", "heads", optional=True)
    _at_least(m, "model", 0, "mlp_ratio", "drop", "drop_path", optional=True)
    for name in ("drop", "drop_path"):
        if getattr(m, name) is not None and getattr(m, name) >= 1:
            raise ConfigError(f"config key model.{name} must be in [0, 1), got {getattr(m, name)!r}")
    for name in ("patch_size", "img_size", "tubelet", "channels"):
        value = getattr(m, name)
        if value is not None and any(v < 1 for v in (value if isinstance(value, list) else [value])):
            raise ConfigError(f"config key model.{name} must be >= 1, got {value!r}")
    if t.resume and t.overwrite:
        raise ConfigError(f"train.resume={t.resume!r} continues a run and train.overwrite=true replaces it: pick one")
    if t.loss not in ("mse", "l1"):
        raise ConfigError(f"config key train.loss must be 'mse' or 'l1', got {t.loss!r}")
    if t.device != "auto":
        try:
            import torch

            torch.device(t.device)
        except (RuntimeError, ValueError):
            raise ConfigError(f"config key train.device must be auto, cpu, cuda or cuda:N, got {t.device!r}") from None
    if m.name not in DOMAINS:
        raise ConfigError(f"unknown model.name {m.name!r}; expected one of {sorted(DOMAINS)}")
    if m.pool is not None and m.pool not in ("cls", "mean"):
        raise ConfigError(f"config key model.pool must be cls or mean, got {m.pool!r}")
    check_pe(m.pe)
    check_causal(m)
    check_model_size(m)
    check_optimizer(o.opt)
    check_data_name(d)
    if ":" not in d.name:
        from .data import DATASETS, SPLITS

        if d.name not in DATASETS:
            raise ConfigError(f"unknown dataset data.name={d.name!r}; expected one of {sorted(DATASETS)} or "
                              "'package.module:factory'")
        for key in ("train_split", "eval_split"):
            if getattr(d, key) not in SPLITS:
                raise ConfigError(f"config key data.{key} must be one of {list(SPLITS)}, got {getattr(d, key)!r}")
        unknown = sorted(str(k) for k in d.options if k not in DATASETS[d.name].options)
        if unknown:
            raise ConfigError(f"unknown data.options {unknown} for dataset {d.name!r}; valid options: "
                              f"{sorted(DATASETS[d.name].options)}")
    if warn and t.steps > 0 and o.warmup_steps > t.steps:
        warnings.warn(f"optim.warmup_steps={o.warmup_steps} exceeds train.steps={t.steps}: the run ends inside the "
                      "warmup (the learning rate never reaches optim.lr)", UserWarning, stacklevel=2)
    return cfg


def check_pe(pe: PEConfig) -> None:
    """``model.pe``: a registered kind, option names that kind takes, a known augmentation (values are checked by
    the kind itself when the model is built)."""
    import ndpe
    from ndpe.augment import AUGMENTS
    from ndpe.per_axis import parse_axes

    if isinstance(pe.kind, dict):  # per axis (ndpe.PerAxis): each axis's options inside it; the model checks the names
        try:
            parse_axes(pe.kind)
        except (TypeError, ValueError) as err:
            raise ConfigError(f"model.pe.kind: {err}") from None
        if pe.options or pe.augment is not None:
            raise ConfigError("a per-axis model.pe.kind takes each axis's options inside it and no model.pe.options "
                              "or model.pe.augment")
        return
    if pe.kind not in ndpe.available():
        raise ConfigError(f"unknown model.pe.kind {pe.kind!r}; expected one of {sorted(ndpe.available())}")
    known = ndpe.options(pe.kind)
    unknown = sorted(str(k) for k in pe.options if k not in known)
    if unknown:
        raise ConfigError(f"model.pe.options: {pe.kind} has no option(s) {unknown}; it takes {sorted(known)}")
    if pe.augment is not None and pe.augment not in AUGMENTS:
        raise ConfigError(f"config key model.pe.augment must be null or one of {sorted(AUGMENTS)}, got {pe.augment!r}")


def check_causal(m: ModelConfig) -> None:
    """Refuse a kind (as configured) defined for causal attention only in a model whose attention is not causal
    (``model.causal``: the text model only; every other architecture attends both ways)."""
    from ndpe.registry import kind_class

    if not isinstance(m.pe.kind, str):  # per axis: ndpe.PerAxis refuses every kind with a logits term, these among them
        return
    cls = kind_class(m.pe.kind)
    if m.causal or not cls.is_causal_only(m.pe.options):
        return
    fix = f"set model.pe.options.{cls.causal_only_option}=false (its bidirectional form), or " \
        if cls.causal_only_option else ""
    raise ConfigError(f"model.pe.kind={m.pe.kind!r} is defined for causal attention only, but the {m.name} model's "
                      f"attention is bidirectional ({'model.causal unset' if m.causal is None else 'model.causal=false'}): {fix}use "
                      f"{'model.causal=true' if m.name == 'text' else 'a causal text model (model.name=text)'}")


def check_optimizer(opt: str) -> None:
    """``optim.opt``: a timm ``create_optimizer_v2`` name (``lookahead_`` prefix allowed, as timm)."""
    from timm.optim import list_optimizers

    if opt.lower().split("_")[-1] not in list_optimizers():
        raise ConfigError(f"unknown optim.opt {opt!r}; expected a timm optimizer name such as adamw, sgd, lamb "
                          "(timm.optim.list_optimizers())")


def check_data_name(d: DataConfig) -> None:
    """Refuse ``data.name="module:factory"`` (which imports ``module``) unless opted in."""
    if ":" not in d.name:
        return
    module, _, attr = d.name.partition(":")
    if not module or not attr:
        raise ConfigError(f"data.name {d.name!r} must be a dataset name or 'package.module:factory'")
    if d.allow_import or os.environ.get(ALLOW_IMPORT_ENV) == "1":
        return
    raise ConfigError(f"data.name {d.name!r} imports the module {module!r}: set data.allow_import=true (or "
                      f"{ALLOW_IMPORT_ENV}=1) if you trust it")


def to_dict(cfg: Config) -> dict:
    """The config as plain nested data (what goes in checkpoints and config.yaml)."""
    return dataclasses.asdict(cfg)


def save_config(cfg: Config, path: str | Path) -> None:
    """Write the resolved config as YAML (read back with :func:`load_config`), atomically (temp file + rename)."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        data = to_dict(cfg)
        data["data"]["allow_import"] = False  # read from the command line or the environment only (load_config)
        tmp.write_text(yaml.safe_dump(data, sort_keys=False))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
