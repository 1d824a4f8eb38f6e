"""Train a reference model on one dataset: ``python -m train.main --config configs/x.yaml key.sub=value``.

Multi-process: ``torchrun --nproc_per_node=2 -m train.main --config ...`` (DDP; gloo on CPU).
Programmatic use (the benchmark)::

    metrics = main(load_config("configs/image_shapes.yaml", ["model.pe.kind=rope"]))
    model, cfg = load_trained("runs/image_shapes/checkpoint.pt")
    evaluate_model(model, cfg, split="test", image_size=64)        # dataset built with other options
    model, result = fit(cfg, data=factory)    # factory(split, *, seed, root, **options) builds the data instead

A run directory holds ``config.yaml`` (resolved), ``log.jsonl`` and ``checkpoint.pt``.
"""
from __future__ import annotations

import argparse
import importlib
import inspect
import math
import random
import shutil
import sys
import time
from pathlib import Path
from typing import Any, Callable

import numpy as np
import torch
from timm.optim import create_optimizer_v2
from timm.scheduler import CosineLRScheduler
from torch import nn
from torch.utils.data import DataLoader, Dataset, DistributedSampler, Subset

from models import build_model

from . import dist
from .checkpoint import (ENDED, CheckpointError, load_checkpoint, load_model_state, require, resume, save_run,
                         trim_log)
from .config import (DOMAINS, Config, ConfigError, check_data_name, from_dict, load_config, save_config, to_dict,
                     validate)
from .engine import JsonlLogger, evaluate, summarize, train_one_epoch


# -- data ------------------------------------------------------------------------------------
DataFactory = Callable[..., Dataset]  # factory(split, *, seed, root, **options) -> Dataset


def build_data(cfg: Config, split: str, *, data: DataFactory | None = None, **opts) -> Dataset:
    """The dataset ``cfg.data`` names, for ``split``, with ``opts`` overriding ``cfg.data.options``.

    ``data.name`` is a name ``train.data.build_dataset`` knows, or ``"package.module:factory"``, a callable
    ``factory(split, *, seed, root, **opts)`` (datasets kept outside this repository, test fakes); importing
    it needs ``data.allow_import: true`` (see ``train.config.check_data_name``). A caller that holds such a
    callable passes it as ``data`` instead (the benchmark's cached datasets, train/bench_data.py): it builds
    the data, ``cfg.data`` still gives the seed, root and options.
    """
    name, d = cfg.data.name, cfg.data
    opts = {**d.options, **opts}
    if data is None and ":" in name:
        check_data_name(d)
        module, attr = name.split(":", 1)
        try:
            data = getattr(importlib.import_module(module), attr)
        except (ImportError, AttributeError) as e:
            raise ConfigError(f"data.name {name!r}: cannot import it ({type(e).__name__}: {' '.join(str(e).split())})") from e
    if data is not None:
        return data(split, seed=d.seed, root=d.root, **opts)
    from .data import DATASETS, build_dataset

    if name not in DATASETS:
        raise ConfigError(f"unknown dataset data.name={name!r}; expected one of {sorted(DATASETS)} or "
                          "'package.module:factory'")
    unknown = sorted(set(opts) - set(DATASETS[name].options))
    if unknown:
        raise ConfigError(f"unknown data.options {unknown} for dataset {name!r}; valid options: "
                          f"{sorted(DATASETS[name].options)}")
    if d.download and "download" in DATASETS[name].options:
        opts.setdefault("download", True)
    return build_dataset(name, split, seed=d.seed, root=d.root, **opts)


def build_train_data(cfg: Config, data: DataFactory | None = None) -> Dataset:
    """The training set; with ``data.mixed_sizes`` the same items at those image sizes, one size per item
    (:class:`train.data._base.MixedSizes`), trained on in packed batches (the model's ``forward_packed``)."""
    if not cfg.data.mixed_sizes:
        return build_data(cfg, cfg.data.train_split, data=data)
    from models import MODELS

    from .data._base import MixedSizes
    if not hasattr(MODELS.get(cfg.model.name), "forward_packed"):
        raise ConfigError(f"data.mixed_sizes trains on packed batches of several image sizes: model "
                          f"{cfg.model.name!r} has no forward_packed (the vit has)")
    if any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in cfg.data.mixed_sizes):
        raise ConfigError(f"data.mixed_sizes must be a list of positive image sizes, got {cfg.data.mixed_sizes!r}")
    return MixedSizes([build_data(cfg, cfg.data.train_split, data=data, image_size=s) for s in cfg.data.mixed_sizes],
                      seed=cfg.data.seed)


class ResumableSampler(DistributedSampler):
    """``DistributedSampler`` (seeded shuffle, one shard per rank) that can start mid-epoch.

    ``set_epoch(epoch, skip=k)`` drops the first ``k`` indices of this rank's epoch order, so a resumed
    run sees exactly the batches an uninterrupted one would.
    """

    def __init__(self, dataset: Dataset, *, seed: int, num_replicas: int, rank: int):
        super().__init__(dataset, num_replicas=num_replicas, rank=rank, shuffle=True, seed=seed, drop_last=True)
        self.skip = 0

    def set_epoch(self, epoch: int, skip: int = 0) -> None:
        super().set_epoch(epoch)
        self.skip = skip

    def __iter__(self):
        return iter(list(super().__iter__())[self.skip:])

    def __len__(self) -> int:
        return self.num_samples - self.skip


def eval_loader(dataset: Dataset, batch_size: int, num_workers: int = 0) -> DataLoader:
    """In-order loader over this rank's strided shard (every item counted once across ranks)."""
    rank, world = dist.get_rank(), dist.get_world_size()
    shard = dataset if world == 1 else Subset(dataset, range(rank, len(dataset), world))
    return DataLoader(shard, batch_size=batch_size, shuffle=False, num_workers=num_workers)


def resolve_model_config(cfg: Config, dataset: Dataset) -> None:
    """Fill ``num_classes`` / ``vocab_size`` from the dataset and check the model fits its domain."""
    m = cfg.model
    if m.name not in DOMAINS:
        raise ConfigError(f"unknown model.name {m.name!r}; expected one of {sorted(DOMAINS)}")
    want = DOMAINS[m.name]
    if dataset.domain not in want:
        raise ConfigError(f"model {m.name!r} takes {' or '.join(want)} data but dataset {cfg.data.name!r} is "
                         f"{dataset.domain!r}")
    if m.num_classes is None:
        m.num_classes = int(dataset.num_classes)
    if m.name == "text" and m.vocab_size is None:
        m.vocab_size = int(dataset.vocab_size)
    if m.name == "timm" and m.img_size is None:
        m.img_size = list(dataset[0][0].shape[-2:])
    size_tables(m, dataset)


def size_tables(m, dataset: Dataset) -> None:
    """Give the encoding the options it requires and ``model.pe.options`` lacks (erpe's ``length``, learned's
    ``grid_shape``) from its ``task_options`` for the grid of the training items, as ``ndpe viz`` and the benchmark
    size them; saved with the run's config, so a resumed run or :func:`load_trained` builds the same table."""
    from models import grid_shape
    from ndpe.registry import kind_class, options

    pe = m.pe
    if not isinstance(pe.kind, str):  # per-axis kinds take their sizes per axis
        return
    lacking = [k for k, v in options(pe.kind).items() if v is inspect.Parameter.empty and k not in pe.options]
    grid = grid_shape(m, dataset[0][0].shape) if lacking else None
    if grid is not None:
        sized = kind_class(pe.kind).task_options(dims=len(grid), causal=bool(m.causal), train_grid=grid, max_grid=grid)
        pe.options = {**pe.options, **{k: sized[k] for k in lacking if k in sized}}


# -- setup -----------------------------------------------------------------------------------
def resolve_device(name: str) -> torch.device:
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    return torch.device(name)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def no_weight_decay(model: nn.Module) -> set[str]:
    """Names of position tables (ndpe.timm.use: ``ndpe_pe``) and prefix tokens: no weight decay (as timm's ViT)."""
    return {n for n, _ in model.named_parameters()
            if ".pe." in f".{n}" or ".ndpe_pe." in f".{n}" or n.endswith(("cls_token", "reg_token"))}


def build_optimizer(model: nn.Module, cfg: Config) -> torch.optim.Optimizer:
    """timm ``create_optimizer_v2`` (AdamW by default); biases, norms, pe tables and cls tokens get no decay."""
    skip = no_weight_decay(model)
    decay = [p for n, p in model.named_parameters() if p.requires_grad and p.ndim > 1 and n not in skip]
    no_decay = [p for n, p in model.named_parameters() if p.requires_grad and (p.ndim <= 1 or n in skip)]
    groups = [{"params": decay, "weight_decay": cfg.optim.weight_decay}, {"params": no_decay, "weight_decay": 0.0}]
    return create_optimizer_v2(groups, opt=cfg.optim.opt, lr=cfg.optim.lr, weight_decay=cfg.optim.weight_decay)


def build_scheduler(optimizer: torch.optim.Optimizer, cfg: Config, total_steps: int) -> CosineLRScheduler:
    """Per-step linear warmup (``optim.warmup_steps``) then cosine to ``optim.min_lr`` at ``total_steps``."""
    warmup = min(cfg.optim.warmup_steps, total_steps)
    return CosineLRScheduler(optimizer, t_initial=max(total_steps - warmup, 1), lr_min=cfg.optim.min_lr,
                             warmup_t=warmup, warmup_lr_init=cfg.optim.lr * 1e-3 if warmup else 0.0,
                             warmup_prefix=True, t_in_epochs=False)


# -- main --------------------------------------------------------------------------------------
def main(cfg: Config) -> dict[str, Any]:
    """Train (or resume) the run ``cfg``: ``{"step", "epoch", "train", "eval", "resumed_s"}`` (seconds before it)."""
    return fit(cfg)[1]


def fit(cfg: Config, data: DataFactory | None = None) -> tuple[nn.Module, dict[str, Any]]:
    """:func:`main`, also returning the trained model (unwrapped from DDP); ``data``: see :func:`build_data`."""
    validate(cfg)
    device = resolve_device(cfg.train.device)
    rank, world = dist.init_distributed(device)
    t = cfg.train
    out_dir = Path(t.out_dir)
    check_out_dir(out_dir, t)  # before anything is built, so a refused run leaves no trace
    if t.overwrite and not t.resume and dist.is_main():  # a fresh start: nothing of the replaced run is mixed in
        for name in RUN_FILES:
            (out_dir / name).unlink(missing_ok=True)
        shutil.rmtree(out_dir / "tb", ignore_errors=True)
    log = JsonlLogger(out_dir / "log.jsonl", tensorboard=t.tensorboard)

    try:
        train_set = build_train_data(cfg, data)
        eval_set = build_data(cfg, cfg.data.eval_split, data=data)
    except ConfigError:
        raise
    except (TypeError, ValueError) as e:  # an option value the dataset refuses
        raise ConfigError(f"data: {' '.join(str(e).split())}") from e
    resolve_model_config(cfg, train_set)
    seed_everything(t.seed)  # same initial weights on every rank
    try:
        model = build_model(cfg.model).to(device)
    except (TypeError, ValueError) as e:  # an option value the encoding or the model refuses
        raise ConfigError(f"model: {' '.join(str(e).split())}") from e
    seed_everything(t.seed + rank)  # rank-specific dropout / drop-path
    ddp = nn.parallel.DistributedDataParallel(model) if world > 1 else model

    sampler = ResumableSampler(train_set, seed=t.seed, num_replicas=world, rank=rank)
    from .data._base import packed_collate
    if cfg.data.mixed_sizes and world > 1:  # DDP syncs gradients through its own forward, which packing bypasses
        raise ConfigError("data.mixed_sizes (packed batches) runs on one process; drop torchrun or mixed_sizes")
    loader = DataLoader(train_set, batch_size=t.batch_size, sampler=sampler, drop_last=True,
                        num_workers=cfg.data.num_workers, generator=torch.Generator(),
                        collate_fn=packed_collate if cfg.data.mixed_sizes else None)
    steps_per_epoch = len(sampler) // t.batch_size
    if steps_per_epoch == 0:
        raise ConfigError(f"train.batch_size={t.batch_size} x {world} process(es) exceeds the {len(train_set)} "
                          "training items")
    total = t.steps if t.steps > 0 else t.epochs * steps_per_epoch
    optimizer = build_optimizer(model, cfg)
    scheduler = build_scheduler(optimizer, cfg, total)

    # before: seconds the run spent until its checkpoint; ended: what a run resumed at its last step had ended with
    global_step, before, ended, clock = 0, 0.0, None, time.monotonic()
    if t.resume:
        global_step, before, ended = resume(t.resume, cfg, model, optimizer, scheduler, steps_per_epoch, rank, world)
        if global_step > total:  # before anything is written: the finished steps would be neither kept nor undone
            raise ConfigError(f"train.resume={t.resume!r} is at step {global_step}, past this run's {total} steps: "
                              f"resume with train.steps >= {global_step} (or the epochs that reach it)")
    if dist.is_main():
        out_dir.mkdir(parents=True, exist_ok=True)
        if t.resume:  # records of steps after the checkpoint (a killed run) are written again
            trim_log(out_dir / "log.jsonl", global_step, steps_per_epoch, rerun_epoch=global_step < total)
        save_config(cfg, out_dir / "config.yaml")
    stop = min(total, global_step + t.stop_after) if t.stop_after > 0 else total
    evaluator = eval_loader(eval_set, t.eval_batch_size or t.batch_size, cfg.data.num_workers)
    result: dict[str, Any] = {"step": global_step, "epoch": global_step // steps_per_epoch, "train": {}, "eval": {},
                              "resumed_s": before, **(ended if global_step == total and ended else {})}
    curve = curve_hook(cfg, ddp, evaluator, train_set.task, device, log, total)
    for epoch in range(global_step // steps_per_epoch, math.ceil(total / steps_per_epoch)):
        if global_step >= stop:
            break
        sampler.set_epoch(epoch, skip=(global_step - epoch * steps_per_epoch) * t.batch_size)
        loader.generator.manual_seed(t.seed + epoch)  # worker seeds: independent of where a run resumed
        train_metrics, global_step = train_one_epoch(
            ddp, loader, optimizer, scheduler, task=train_set.task, device=device, epoch=epoch,
            global_step=global_step, max_steps=stop, amp=t.amp, clip_grad=cfg.optim.clip_grad,
            regress_loss=t.loss, log_every=t.log_every, log=log, total_steps=total, after_step=curve)
        epoch_done = global_step == (epoch + 1) * steps_per_epoch or global_step == total
        result.update(step=global_step, epoch=epoch, train=train_metrics)
        eval_metrics = {}
        if global_step == total or (epoch_done and (epoch + 1) % t.eval_every == 0):
            eval_metrics = result["eval"] = evaluate(ddp, evaluator, task=train_set.task, device=device, amp=t.amp,
                                                     regress_loss=t.loss)
        log({"phase": "epoch", "epoch": epoch, "step": global_step, "lr": optimizer.param_groups[0]["lr"],
             **{f"train_{k}": v for k, v in train_metrics.items()}, **{f"eval_{k}": v for k, v in eval_metrics.items()}})
        due = t.save_every_s > 0 and dist.any_rank(epoch_done and time.monotonic() - clock >= t.save_every_s, device)
        if global_step >= stop or (epoch_done and (epoch + 1) % t.save_every == 0) or due:  # every rank or none
            elapsed = before + time.monotonic() - clock
            save_run(out_dir / "checkpoint.pt", cfg, model, optimizer, scheduler, global_step, steps_per_epoch, elapsed,
                     ended={k: result[k] for k in ENDED} if global_step == total else None)
            before, clock = elapsed, time.monotonic()
    log.close()
    return model, result


def curve_hook(cfg: Config, model, evaluator, task: str, device, log, total: int):
    """With ``train.eval_steps`` > 0, a hook for :func:`train.engine.train_one_epoch` that evaluates on the eval split
    every ``eval_steps`` steps (and at the last) and logs a ``"curve"`` record: the step, the running training
    metrics of the epoch so far and the evaluation's. Evaluation draws no random numbers and the model returns to
    training mode, so a run trains the same with or without its curve (tests/test_curves.py)."""
    every = cfg.train.eval_steps
    if every <= 0:
        return None

    def after_step(step: int, sums: dict) -> None:
        if step % every and step != total:
            return
        metrics = evaluate(model, evaluator, task=task, device=device, amp=cfg.train.amp, regress_loss=cfg.train.loss)
        model.train()
        running = summarize(task, dist.all_reduce_sum(dict(sums), device))
        log({"phase": "curve", "step": step, **{f"train_{k}": v for k, v in running.items()},
             **{f"eval_{k}": v for k, v in metrics.items()}})

    return after_step


RUN_FILES = ("checkpoint.pt", "log.jsonl")  # what a started run leaves in its out_dir


def check_out_dir(out_dir: Path, t) -> None:
    """Refuse (ConfigError) to start a new run where one already is: an ``out_dir`` holding a checkpoint or a log is
    only continued (``train.resume``) or replaced on request (``train.overwrite=true``)."""
    if t.resume or t.overwrite:
        return
    found = [name for name in RUN_FILES if (out_dir / name).exists()]
    if found:
        raise ConfigError(f"train.out_dir={str(out_dir)!r} already holds a run ({', '.join(found)}): continue it with "
                          f"train.resume={str(out_dir / 'checkpoint.pt')!r}, pick another train.out_dir, or replace it "
                          "with train.overwrite=true")


# -- evaluation of trained models (benchmark) -------------------------------------------------
def load_trained(path: str | Path, device: str | torch.device = "cpu") -> tuple[nn.Module, Config]:
    """A trained model and its config from a checkpoint (or a run directory holding ``checkpoint.pt``)."""
    path = Path(path)
    state = load_checkpoint(path / "checkpoint.pt" if path.is_dir() else path)
    require(state, ("model", "config"), path, "load the trained model")
    try:
        cfg = from_dict(Config, state["config"])
    except ConfigError as e:
        raise CheckpointError(f"{path} holds an invalid config: {e}") from e
    model = build_model(cfg.model)
    load_model_state(model, state["model"], path)
    return model.to(device).eval(), cfg


def evaluate_model(model: nn.Module, cfg: Config, *, split: str | None = None, batch_size: int | None = None,
                   device: str | torch.device | None = None, data: DataFactory | None = None,
                   **data_opts) -> dict[str, float]:
    """Metrics of ``model`` on ``cfg``'s dataset rebuilt with ``data_opts`` (e.g. ``image_size=64``)."""
    dataset = build_data(cfg, split or cfg.data.eval_split, data=data, **data_opts)
    return evaluate_dataset(model, cfg, dataset, batch_size=batch_size, device=device)


def evaluate_dataset(model: nn.Module, cfg: Config, dataset: Dataset, *, batch_size: int | None = None,
                     device: str | torch.device | None = None) -> dict[str, float]:
    """Metrics of ``model`` on ``dataset`` (already built), with ``cfg``'s loader and loss settings."""
    device = torch.device(device) if device is not None else next(model.parameters()).device
    loader = eval_loader(dataset, batch_size or cfg.train.eval_batch_size or cfg.train.batch_size, cfg.data.num_workers)
    return evaluate(model.to(device), loader, task=dataset.task, device=device, amp=cfg.train.amp,
                    regress_loss=cfg.train.loss)


def get_args_parser() -> argparse.ArgumentParser:
    """The ``python -m train.main`` parser; ``--help`` lists every config key with its type and default."""
    from .config import config_help

    p = argparse.ArgumentParser(prog="python -m train.main", description="Train an ndpe reference model",
                                add_help=True, formatter_class=argparse.RawDescriptionHelpFormatter,
                                epilog=config_help() + "\n\nexample: python -m train.main --config "
                                "configs/image_shapes.yaml model.pe.kind=rope train.steps=200")
    p.add_argument("--config", default=None, help="YAML file in configs/ (defaults apply when omitted)")
    p.add_argument("overrides", nargs="*", metavar="KEY=VALUE",
                   help="key.sub=value overrides (keys below), typed by the config field")
    return p


def cli(argv: list[str] | None = None) -> dict[str, Any]:
    """The command line: a bad config or checkpoint exits with status 2 and one ``train.main: error:`` line."""
    args = get_args_parser().parse_args(argv)
    try:
        return main(load_config(args.config, args.overrides))
    except (ConfigError, CheckpointError, FileNotFoundError) as e:  # FileNotFoundError: a dataset not downloaded
        print(f"train.main: error: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    finally:
        dist.cleanup()


if __name__ == "__main__":
    cli()
