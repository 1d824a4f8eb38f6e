"""Checkpoints: atomic writes, safe loads (``weights_only=True``), exact resume (:func:`resume`), clear errors.

A checkpoint is a plain dict: ``model``, ``optimizer`` and ``scheduler`` state dicts, the loop
position (``global_step``, ``steps_per_epoch``), the RNG states of every rank
(torch / python / numpy), and the run config as plain data. Loading refuses a truncated file
and a checkpoint made for another model or dataset, naming what differs.

On disk (format 2) the file is ``torch.save({"format_version": 2, "sha256": hex, "payload": uint8
tensor})`` where ``payload`` is the ``torch.save`` bytes of the state and ``sha256`` their digest:
one file, written to a temp file and renamed (atomic under kills), both levels read with
``weights_only=True``. A flipped bit anywhere fails the zip read, the digest or the inner read, and
is refused with :class:`CheckpointError` naming the file. Every error is one line. Temp files left by
a killed save (``.<name>.*.tmp``) are removed by the next save to the same path.

>>> import tempfile, os, torch
>>> path = os.path.join(tempfile.mkdtemp(), "ckpt.pt")
>>> save_checkpoint({"model": {"w": torch.ones(2)}, "config": {}}, path)
>>> load_checkpoint(path)["model"]["w"]
tensor([1., 1.])
"""
from __future__ import annotations

import hashlib
import io
import json
import math
import os
import random
import tempfile
from pathlib import Path
from typing import Any

import numpy as np
import torch

from . import dist
from .config import Config, to_dict

FORMAT_VERSION = 2
# Config sections that define the architecture and the data: a resume must use the same.
MUST_MATCH = ("model", "data")


class CheckpointError(RuntimeError):
    """A checkpoint cannot be read or does not fit the current run."""


def save_checkpoint(state: dict[str, Any], path: str | Path) -> None:
    """Write ``state`` to ``path`` atomically: temp file in the same dir, fsync, ``os.replace``.

    The state is serialized, hashed (sha256) and stored with its digest; stale temp files of
    earlier (killed) saves to ``path`` are removed first.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    remove_stale_temp_files(path)
    buffer = io.BytesIO()
    torch.save({"format_version": FORMAT_VERSION, **state}, buffer)
    payload = buffer.getvalue()
    record = {"format_version": FORMAT_VERSION, "sha256": hashlib.sha256(payload).hexdigest(),
              "payload": torch.frombuffer(bytearray(payload), dtype=torch.uint8)}
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as f:
            torch.save(record, f)
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


def remove_stale_temp_files(path: str | Path) -> list[Path]:
    """Delete ``.<name>.*.tmp`` beside ``path`` (left by a save that was killed); returns what was removed."""
    path = Path(path)
    removed = []
    for tmp in path.parent.glob(f".{glob_escape(path.name)}.*.tmp"):
        try:
            tmp.unlink()
            removed.append(tmp)
        except FileNotFoundError:
            pass
    return removed


def glob_escape(name: str) -> str:
    return "".join(f"[{c}]" if c in "*?[" else c for c in name)


def _read(source, path: Path) -> Any:
    try:
        return torch.load(source, map_location="cpu", weights_only=True)
    except Exception as e:  # empty or truncated zip, bad pickle, foreign object types ...
        raise CheckpointError(f"cannot read checkpoint {path} ({type(e).__name__}: {_first_line(e)}); "
                              "the file is truncated, corrupt or not written by train.checkpoint") from e


def _first_line(e: BaseException) -> str:
    lines = [line.strip() for line in str(e).splitlines() if line.strip()]
    return lines[0] if lines else "no message"


def load_checkpoint(path: str | Path) -> dict[str, Any]:
    """Read a checkpoint on CPU with ``weights_only=True``, verifying its sha256; a damaged file raises
    :class:`CheckpointError`."""
    path = Path(path)
    if not path.is_file():
        raise CheckpointError(f"no checkpoint at {path}")
    if path.stat().st_size == 0:
        raise CheckpointError(f"cannot read checkpoint {path} (empty file); the file is truncated, corrupt or not "
                              "written by train.checkpoint")
    record = _read(path, path)
    if not isinstance(record, dict) or record.get("format_version") != FORMAT_VERSION:
        found = record.get("format_version") if isinstance(record, dict) else None
        raise CheckpointError(f"{path} is not a train.checkpoint file of format {FORMAT_VERSION} (found "
                              f"format_version {found!r}{'; written before checksums: retrain or resave it' if found == 1 else ''})")
    payload, digest = record.get("payload"), record.get("sha256")
    if not (isinstance(payload, torch.Tensor) and payload.dtype == torch.uint8 and payload.dim() == 1
            and isinstance(digest, str)):
        raise CheckpointError(f"{path} is damaged: its payload or sha256 record is missing")
    data = payload.numpy().tobytes()
    if hashlib.sha256(data).hexdigest() != digest:
        raise CheckpointError(f"{path} is corrupt: sha256 of its payload does not match the stored checksum")
    state = _read(io.BytesIO(data), path)
    if not isinstance(state, dict) or state.get("format_version") != FORMAT_VERSION:
        raise CheckpointError(f"{path} is damaged: its payload is not a train.checkpoint state")
    return state


def require(state: dict, keys: tuple[str, ...], path: str | Path, purpose: str) -> None:
    """Raise a one-line :class:`CheckpointError` when ``state`` lacks any of ``keys`` (needed for ``purpose``)."""
    missing = [k for k in keys if k not in state]
    if missing:
        raise CheckpointError(f"{path} lacks {', '.join(map(repr, missing))}, needed to {purpose}; "
                              "it was not written by train.main")


def check_config(saved: dict, current: dict, path: str | Path = "checkpoint") -> None:
    """Raise if the ``model`` / ``data`` sections of the two configs differ, listing every difference."""
    if not isinstance(saved, dict):
        raise CheckpointError(f"{path} holds no config mapping (found {type(saved).__name__})")
    diffs = [f"{k}: checkpoint {a!r} vs config {b!r}"
             for section in MUST_MATCH for k, a, b in _diff(_comparable(saved.get(section), section),
                                                            _comparable(current.get(section), section), section)]
    if diffs:
        raise CheckpointError(f"{path} was trained with another model or data config: " + "; ".join(diffs))


def _comparable(section: Any, name: str) -> Any:
    """A config section without the keys that say how to run, not what is trained (``data.allow_import``)."""
    if name == "data" and isinstance(section, dict):
        return {k: v for k, v in section.items() if k not in IGNORED[name]}
    return section


IGNORED = {"data": ("allow_import", "download", "root")}


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
    except (RuntimeError, KeyError, TypeError, ValueError, AttributeError) as e:
        raise CheckpointError(f"{path} does not fit this model's architecture: {' '.join(str(e).split())}") from e


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


def trim_log(path: Path, step: int, steps_per_epoch: int, *, rerun_epoch: bool) -> None:
    """Drop the records a resumed run writes again: every record after ``step`` and, when the run goes on
    (``rerun_epoch``), the epoch record of the epoch it resumes in (so each epoch has one record); also a
    half-written last line. Rewritten atomically."""
    if not path.is_file():
        return
    resumed_epoch = step // steps_per_epoch
    keep = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # cut off by a kill
        if not isinstance(record, dict):
            continue
        at = record.get("step")
        if isinstance(at, int) and at > step:
            continue
        if rerun_epoch and record.get("phase") == "epoch" and isinstance(record.get("epoch"), int) \
                and record["epoch"] >= resumed_epoch:
            continue
        keep.append(line + "\n")
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text("".join(keep))
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)


RESUME_KEYS = ("model", "optimizer", "scheduler", "global_step", "steps_per_epoch", "rng", "config")
ENDED = ("step", "epoch", "train", "eval")  # what a checkpoint at a run's last step keeps of how the run ended


def ended_of(state: dict, path) -> dict | None:
    """The ``ended`` record of a checkpoint at a run's last step (``save_run``), checked; None without one."""
    ended = state.get("ended")
    if ended is None:
        return None
    if not isinstance(ended, dict) or set(ended) != set(ENDED) or not all(type(ended[k]) is int for k in ENDED[:2]) \
            or not all(isinstance(ended[k], dict) and all(type(v) in (int, float) for v in ended[k].values())
                       for k in ENDED[2:]) or ended["step"] != state.get("global_step"):
        raise CheckpointError(f"{path} is damaged: its 'ended' record is not the step, epoch and metrics its run "
                              "ended with")
    return ended


def save_run(path: Path, cfg: Config, model, optimizer, scheduler, global_step: int, steps_per_epoch: int,
             elapsed_s: float, ended: dict | None = None) -> None:
    """Checkpoint a run of train/main.py for :func:`resume` (collective: every rank sends its RNG state; rank 0
    writes); ``elapsed_s``: the seconds the run has trained until now, over all its resumes; ``ended``: at the last
    step, the :data:`ENDED` part of ``fit``'s result, so that a run resumed there (a benchmark cell killed while
    testing) returns it again."""
    rngs = dist.all_gather_object(rng_state())
    if dist.is_main():
        save_checkpoint({"model": model.state_dict(), "optimizer": optimizer.state_dict(),
                         "scheduler": scheduler.state_dict(), "global_step": global_step,
                         "steps_per_epoch": steps_per_epoch, "rng": rngs, "config": to_dict(cfg),
                         "elapsed_s": elapsed_s, **({"ended": ended} if ended is not None else {})}, path)
    dist.barrier()


def resume(path: str, cfg: Config, model, optimizer, scheduler, steps_per_epoch: int, rank: int,
           world: int) -> tuple[int, float, dict | None]:
    """Restore a run from ``path``; returns the global step to continue from, the seconds the run had trained
    until then (0 for a checkpoint that does not say) and, for a checkpoint at the run's last step, the step, epoch
    and metrics the run ended with (:func:`ended_of`; None if it does not keep them). Errors are one-line
    CheckpointErrors."""
    state = load_checkpoint(path)
    require(state, RESUME_KEYS, path, "resume training")
    check_config(state["config"], to_dict(cfg), path)
    saved_opt = (state["config"].get("optim") or {}).get("opt") if isinstance(state["config"].get("optim"), dict) else None
    if saved_opt is not None and saved_opt != cfg.optim.opt:
        raise CheckpointError(f"{path} was trained with optim.opt={saved_opt!r}; this run uses {cfg.optim.opt!r}: "
                              "resume with the same optimizer (or start a new run)")
    if not isinstance(state["rng"], (list, tuple)) or not isinstance(state["steps_per_epoch"], int) \
            or not isinstance(state["global_step"], int) or state["global_step"] < 0:
        raise CheckpointError(f"{path} is damaged: its loop position or RNG states have the wrong type")
    if type(elapsed := state.get("elapsed_s", 0.0)) not in (int, float) or not 0 <= elapsed < math.inf:
        raise CheckpointError(f"{path} is damaged: its elapsed_s is {elapsed!r}, expected finite seconds >= 0")
    if state["steps_per_epoch"] != steps_per_epoch or len(state["rng"]) != world:
        raise CheckpointError(f"{path} was written with {len(state['rng'])} process(es) and {state['steps_per_epoch']} "
                              f"steps per epoch; this run has {world} and {steps_per_epoch}: keep train.batch_size "
                              "and the process count to resume exactly")
    load_model_state(model, state["model"], path)
    try:
        optimizer.load_state_dict(state["optimizer"])
    except (KeyError, ValueError, TypeError, RuntimeError, IndexError) as e:
        raise CheckpointError(f"{path}: its optimizer state does not fit optim.opt={cfg.optim.opt!r} "
                              f"({type(e).__name__}: {' '.join(str(e).split()) or 'no message'})") from e
    missing = sorted({k for g in optimizer.param_groups for k in optimizer.defaults if k not in g})
    if missing:  # e.g. an AdamW state loaded into SGD: no 'momentum' in its param groups
        raise CheckpointError(f"{path}: its optimizer state lacks {missing}, which optim.opt={cfg.optim.opt!r} needs; "
                              "resume with the optimizer it was trained with")
    try:
        scheduler.load_state_dict(state["scheduler"])
        scheduler.step_update(num_updates=state["global_step"])
        set_rng_state(state["rng"][rank])
    except (KeyError, ValueError, TypeError, RuntimeError, IndexError) as e:
        raise CheckpointError(f"{path} is damaged: cannot restore its scheduler or RNG state "
                              f"({type(e).__name__}: {' '.join(str(e).split()) or 'no message'})") from e
    return state["global_step"], float(elapsed), ended_of(state, path)
