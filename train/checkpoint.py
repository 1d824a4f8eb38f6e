"""Checkpoints: atomic writes, safe loads (``weights_only=True``), exact resume, clear errors.

A checkpoint is a plain dict: ``model``, ``optimizer`` and ``scheduler`` state dicts, the loop
position (``epoch``, ``step_in_epoch``, ``global_step``), the RNG states of every rank
(torch / python / numpy), and the run config as plain data. Loading refuses a truncated file
and a checkpoint made for another model or dataset, naming what differs.

>>> import tempfile, os, torch
>>> path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
>>> save_checkpoint({"model": {"w": torch.ones(2)}, "config": {}}, path)
>>> load_checkpoint(path)["model"]["w"]
tensor([1., 1.])
"""
from __future__ import annotations

import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

FORMAT_VERSION = 1
# Config sections that define the architecture and the data: a resume must use the same.
MUST_MATCH = ("model", "data")


class CheckpointError(RuntimeError):
    """A checkpoint cannot be read or does not fit the current run."""


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """Write ``state`` to ``path`` atomically: temp file in the same dir, fsync, ``os.replace``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save({"format_version": FORMAT_VERSION, **state}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    dir_fd = os.open(path.parent, os.O_RDONLY)  # make the rename itself durable
    try:
        os.fsync(dir_fd)
    finally:
        os.close(dir_fd)


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint on CPU with ``weights_only=True``; a damaged file raises :class:`CheckpointError`."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # truncated zip, bad pickle, foreign object types ...
        raise CheckpointError(f"cannot read checkpoint {path} ({type(e).__name__}: {str(e).splitlines()[0]}); "
                              "the file is truncated, corrupt or not written by train.checkpoint") from e
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path} is not a train.checkpoint file (format_version {FORMAT_VERSION} expected)")
    return state


def check_config(saved: dict, current: dict, path: str | Path = "checkpoint") -> None:
    """Raise if the ``model`` / ``data`` sections of the two configs differ, listing every difference."""
    diffs = [f"{k}: checkpoint {a!r} vs config {b!r}"
             for section in MUST_MATCH for k, a, b in _diff(saved.get(section), current.get(section), section)]
    if diffs:
        raise CheckpointError(f"{path} was trained with another model or data config:\n  " + "\n  ".join(diffs))


def _diff(a: Any, b: Any, key: str):
    if isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            yield from _diff(a.get(k), b.get(k), f"{key}.{k}")
    elif a != b and not (isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)) and list(a) == list(b)):
        yield key, a, b


def load_model_state(model: torch.nn.Module, state_dict: dict, path: str | Path = "checkpoint") -> None:
    """``model.load_state_dict`` (strict) with an error that says the architecture differs."""
    try:
        model.load_state_dict(state_dict)
    except RuntimeError as e:
        raise CheckpointError(f"{path} does not fit this model's architecture: {e}") from e


# -- RNG states as plain data (weights_only-safe) ---------------------------------------------
def rng_state() -> dict[str, Any]:
    """The torch (CPU and CUDA), python and numpy RNG states of this process."""
    np_state = np.random.get_state()
    state = {"torch": torch.get_rng_state(), "python": _listify(random.getstate()),
             "numpy": [np_state[0], torch.from_numpy(np_state[1].astype(np.int64)), *np_state[2:]]}
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        state["cuda"] = torch.cuda.get_rng_state_all()
    return state


def set_rng_state(state: dict[str, Any]) -> None:
    """Restore what :func:`rng_state` returned."""
    torch.set_rng_state(state["torch"])
    version, internal, gauss = state["python"]
    random.setstate((version, tuple(internal), gauss))
    name, key, pos, has_gauss, cached = state["numpy"]
    np.random.set_state((name, key.numpy().astype(np.uint32), pos, has_gauss, cached))
    if "cuda" in state and torch.cuda.is_available():
        torch.cuda.set_rng_state_all(state["cuda"])


def _listify(x):
    return [_listify(v) for v in x] if isinstance(x, tuple) else x
