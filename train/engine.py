"""One epoch of training and one evaluation pass (torchvision references shape), with per-task losses.

Tasks (``dataset.task``):
    classify: logits ``(B, K)``, labels ``(B,)``: cross-entropy; ``acc``.
    tag:      logits ``(B, L, K)``, targets ``(B, L)`` with -100 where not scored: cross-entropy;
              ``acc`` per scored token, ``seq_acc`` (every scored token right).
    lm:       as tag; ``ppl = exp(mean token loss)`` and ``acc``.
    regress:  outputs ``(B, D)``, targets ``(B, D)``: MSE or L1; ``coord_err`` = mean Euclidean distance.
Metrics are sums over the whole split, reduced over processes, then divided: exact whatever the batching.
"""
from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from pathlib import Path
from typing import Callable, Iterable

import torch
import torch.nn.functional as F
from torch import Tensor, nn
from tqdm import tqdm

from . import dist

TASKS = ("classify", "tag", "lm", "regress")
IGNORE_INDEX = -100


def task_loss(task: str, out: Tensor, target: Tensor, *, regress_loss: str = "mse") -> tuple[Tensor, dict[str, float]]:
    """Mean loss to backpropagate and the batch's metric sums (``loss_sum``, ``count``, ...).

    >>> loss, s = task_loss("classify", torch.tensor([[2.0, 0.0]]), torch.tensor([0]))
    >>> s["correct"], s["count"]
    (1.0, 1.0)
    """
    out = out.float()
    if task == "classify":
        loss = F.cross_entropy(out, target)
        n = target.numel()
        return loss, _floats(loss_sum=loss.item() * n, count=n, correct=(out.argmax(-1) == target).sum().item())
    if task in ("tag", "lm"):
        flat_out, flat_t = out.flatten(0, -2), target.flatten()  # (B * L, K), (B * L,)
        loss_sum = F.cross_entropy(flat_out, flat_t, ignore_index=IGNORE_INDEX, reduction="sum")
        scored = target != IGNORE_INDEX  # (B, L)
        n = scored.sum()
        right = (out.argmax(-1) == target) & scored
        return loss_sum / n.clamp(min=1), _floats(loss_sum=loss_sum.item(), count=n.item(), correct=right.sum().item(),
                                                  seqs=target.shape[0], seq_correct=(right == scored).all(-1).sum().item())
    if task == "regress":
        if regress_loss not in ("mse", "l1"):
            raise ValueError(f"regression loss must be 'mse' or 'l1', got {regress_loss!r}")
        target = target.float()
        loss = F.mse_loss(out, target) if regress_loss == "mse" else F.l1_loss(out, target)
        n = target.shape[0]
        return loss, _floats(loss_sum=loss.item() * n, count=n, err_sum=(out - target).norm(dim=-1).sum().item())
    raise ValueError(f"unknown task {task!r}; expected one of {TASKS}")


def _floats(**stats) -> dict[str, float]:
    return {k: float(v) for k, v in stats.items()}


def summarize(task: str, sums: dict[str, float]) -> dict[str, float]:
    """Turn summed batch stats into metrics: ``loss`` plus ``acc`` / ``seq_acc`` / ``ppl`` / ``coord_err``."""
    n = max(sums.get("count", 0.0), 1.0)
    m = {"loss": sums.get("loss_sum", 0.0) / n}
    if task in ("classify", "tag", "lm"):
        m["acc"] = sums.get("correct", 0.0) / n
    if task == "tag":
        m["seq_acc"] = sums.get("seq_correct", 0.0) / max(sums.get("seqs", 0.0), 1.0)
    if task == "lm":
        m["ppl"] = math.exp(min(m["loss"], 50.0))
    if task == "regress":
        m["coord_err"] = sums.get("err_sum", 0.0) / n
    return m


def autocast(device: torch.device, amp: bool):
    """bf16 autocast on CUDA when ``amp``; a no-op on CPU (CPU training stays float32)."""
    if amp and device.type == "cuda":
        return torch.autocast("cuda", dtype=torch.bfloat16)
    return contextlib.nullcontext()


def progress(iterable: Iterable | None = None, **kwargs) -> tqdm:
    """tqdm on an interactive terminal of rank 0; silent when not a TTY or under CI.

    Lines printed while a bar is shown must go through :func:`echo` (``tqdm.write``), which draws them
    above the bar instead of into it.
    """
    disable = not sys.stderr.isatty() or bool(os.environ.get("CI")) or not dist.is_main()
    return tqdm(iterable, disable=disable, leave=False, dynamic_ncols=True, **kwargs)


def echo(line: str) -> None:
    """Print ``line`` to stdout above any progress bar (``tqdm.write``: clears the bars, writes, redraws them)."""
    tqdm.write(line, file=sys.stdout)
    sys.stdout.flush()


def _add(total: dict[str, float], batch: dict[str, float]) -> None:
    for k, v in batch.items():
        total[k] = total.get(k, 0.0) + v


def to_device(x, device: torch.device):
    """A batch tensor, or the list of a packed batch (images of several sizes), on ``device``."""
    return [t.to(device, non_blocking=True) for t in x] if isinstance(x, list) else x.to(device, non_blocking=True)


def forward(model: nn.Module, x):
    """``model(x)``; a list (a packed batch of several image sizes) goes to the model's ``forward_packed``
    (one process: ``train.main`` refuses packing under DDP)."""
    return model.forward_packed(x) if isinstance(x, list) else model(x)


def train_one_epoch(model: nn.Module, loader: Iterable, optimizer: torch.optim.Optimizer, scheduler, *, task: str,
                    device: torch.device, epoch: int, global_step: int, max_steps: int, amp: bool = True,
                    clip_grad: float | None = None, regress_loss: str = "mse", log_every: int = 50,
                    log: Callable[[dict], None] | None = None, total_steps: int | None = None,
                    after_step: Callable[[int, dict[str, float]], None] | None = None) -> tuple[dict[str, float], int]:
    """Train until the loader ends or ``global_step`` reaches ``max_steps``; returns (metrics, global_step).

    The scheduler is a timm scheduler stepped per optimizer step (``step_update``). The progress bar
    counts optimizer steps of the whole run: it starts at ``global_step`` (where a resumed run picks up)
    and ends at ``total_steps`` (default ``max_steps``), so its ETA is the time left in the run.
    ``after_step(global_step, running_metrics)`` runs after every optimizer step (a learning curve's evaluations;
    it must leave the model in training mode and draw no random numbers, so the run is the same with or without it).
    """
    model.train()
    sums: dict[str, float] = {}
    t0 = time.time()
    with progress(total=max_steps if total_steps is None else total_steps, initial=global_step,
                  desc=f"epoch {epoch}", unit="step") as bar:
        for x, target in loader:
            if global_step >= max_steps:
                break
            x, target = to_device(x, device), target.to(device, non_blocking=True)
            with autocast(device, amp):
                out = forward(model, x)
            loss, stats = task_loss(task, out, target, regress_loss=regress_loss)
            if not math.isfinite(loss.item()):
                raise FloatingPointError(f"loss is {loss.item()} at step {global_step}; lower optim.lr or enable "
                                         "clip_grad")
            optimizer.zero_grad(set_to_none=True)
            loss.backward()
            if clip_grad:
                stats["grad_norm"] = float(nn.utils.clip_grad_norm_(model.parameters(), clip_grad))
            optimizer.step()
            global_step += 1
            scheduler.step_update(num_updates=global_step)
            _add(sums, stats)
            bar.update(1)
            if log is not None and log_every and global_step % log_every == 0:
                log({"phase": "train_step", "epoch": epoch, "step": global_step, "loss": loss.item(),
                     "lr": optimizer.param_groups[0]["lr"]})
            if after_step is not None:
                after_step(global_step, sums)
    sums.pop("grad_norm", None)
    metrics = summarize(task, dist.all_reduce_sum(sums, device))
    metrics["time"] = time.time() - t0
    return metrics, global_step


@torch.no_grad()
def evaluate(model: nn.Module, loader: Iterable, *, task: str, device: torch.device, amp: bool = True,
             regress_loss: str = "mse") -> dict[str, float]:
    """Metrics of ``model`` over every item of ``loader`` (summed over processes)."""
    model.eval()
    sums: dict[str, float] = {}
    for x, target in progress(loader, desc="eval"):
        x, target = to_device(x, device), target.to(device, non_blocking=True)
        with autocast(device, amp):
            out = forward(model, x)
        _add(sums, task_loss(task, out, target, regress_loss=regress_loss)[1])
    return summarize(task, dist.all_reduce_sum(sums, device))


class JsonlLogger:
    """Append one JSON object per record to ``path`` and print it (rank 0 only).

    Printed lines go above the progress bar (:func:`echo`). With ``tensorboard`` (a folder, or ``True``
    for ``tb/`` beside ``path``) every numeric value is also written as a TensorBoard scalar
    (:class:`TensorBoardWriter`).

    >>> import tempfile; log = JsonlLogger(tempfile.mkdtemp() + "/log.jsonl", echo=False)
    >>> log({"step": 1, "loss": 0.5})
    """

    def __init__(self, path: str | Path | None, *, echo: bool = True, tensorboard: bool | str | Path | None = None):
        self.path, self.echo = (Path(path) if path else None), echo
        self.tensorboard: TensorBoardWriter | None = None
        if tensorboard and dist.is_main():
            if tensorboard is True:
                if self.path is None:
                    raise ValueError("JsonlLogger(tensorboard=True) needs a log path (tb/ is written beside it)")
                tensorboard = self.path.parent / "tb"
            self.tensorboard = TensorBoardWriter(tensorboard)

    def __call__(self, record: dict) -> None:
        if not dist.is_main():
            return
        line = json.dumps(record, default=float)
        if self.path is not None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as f:
                f.write(line + "\n")
        if self.tensorboard is not None:
            self.tensorboard(record)
        if self.echo:
            echo(line)

    def close(self) -> None:
        """Flush and close the TensorBoard writer (if any)."""
        if self.tensorboard is not None:
            self.tensorboard.close()


TENSORBOARD_MISSING = ("train.tensorboard=true needs the tensorboard package, which is not installed: "
                       "pip install tensorboard")


class TensorBoardWriter:
    """Scalars of log records for TensorBoard (``torch.utils.tensorboard.SummaryWriter`` in ``log_dir``).

    A record ``{"phase": "epoch", "step": 40, "train_loss": 0.3, ...}`` becomes the scalars ``epoch/train_loss``
    ... at global step 40 (``train_step`` records: ``train_step/loss``, ``train_step/lr``); non-numeric values
    and the ``step`` / ``epoch`` counters are skipped. Epoch records flush the file. A missing tensorboard
    package raises :class:`~train.config.ConfigError` with one line naming ``pip install tensorboard``.
    """

    SKIP = ("phase", "step", "epoch")

    def __init__(self, log_dir: str | Path):
        try:
            import tensorboard  # noqa: F401  (SummaryWriter imports it lazily, with a longer message)
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            from .config import ConfigError

            raise ConfigError(TENSORBOARD_MISSING) from None
        self.writer = SummaryWriter(log_dir=str(log_dir))

    def __call__(self, record: dict) -> None:
        step, phase = record.get("step"), record.get("phase", "log")
        for key, value in record.items():
            if key in self.SKIP or isinstance(value, bool) or not isinstance(value, (int, float)):
                continue
            self.writer.add_scalar(f"{phase}/{key}", value, global_step=step if isinstance(step, int) else None)
        if phase != "train_step":
            self.writer.flush()

    def close(self) -> None:
        self.writer.close()
