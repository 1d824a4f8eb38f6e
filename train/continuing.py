"""A benchmark cell killed mid-training continues from its last checkpoint instead of training again.

A cell checkpoints at an epoch's end once ``checkpoint_s`` seconds have passed since its last checkpoint
(``train.save_every_s``; train/main.py). When the next invocation trains the cell again, :func:`fit_cell` continues
from that checkpoint if it was written by the same protocol (``protocol.txt`` in the cell's folder, written when the
cell started afresh: train/provenance.py's fingerprint) under the same settings (the config without what only says
how the run is kept); a resumed run equals an uninterrupted one (tests/test_checkpoint.py), so the cell's rows do
too (tests/test_bench_continue.py). A cell killed while testing left its checkpoint at the last step, with the
metrics its training ended with (train/checkpoint.py ``save_run``): it is tested again without training. Anything
else (no checkpoint, another protocol or settings, a damaged file, a last-step checkpoint without those metrics, one
``resume`` refuses) trains the cell anew. Checkpoints before the last step fall at epochs' ends only (a row's
training metric covers a whole epoch), so a cell killed inside its first epoch has none to continue from.
"""
from __future__ import annotations

import dataclasses
import functools
from pathlib import Path

from .checkpoint import IGNORED, CheckpointError, ended_of, load_checkpoint
from .config import Config, to_dict

PROTOCOL_FILE = "protocol.txt"
RUN_ONLY = {"train": ("resume", "overwrite", "out_dir", "save_every_s", "save_every", "log_every", "tensorboard"),
            "data": IGNORED["data"]}  # how a run is kept or found, not what it trains (resume ignores those too)
FILLED = ("num_classes", "vocab_size", "img_size")  # model keys train.main fills from the data when left None


@functools.lru_cache(maxsize=1)
def protocol() -> str:
    from .provenance import protocol_fingerprint

    return protocol_fingerprint()


def comparable(config, mine: dict) -> dict | None:
    """``config`` without :data:`RUN_ONLY` and the :data:`FILLED` keys ``mine`` leaves to the data."""
    if not isinstance(config, dict) or not all(isinstance(config.get(k), dict) for k in ("train", "data", "model")):
        return None
    out = {**config, **{section: {k: v for k, v in config[section].items() if k not in keys}
                        for section, keys in RUN_ONLY.items()}}
    out["model"] = {k: v for k, v in config["model"].items() if not (k in FILLED and mine["model"].get(k) is None)}
    return out


def continue_killed(tcfg: Config) -> Config:
    """``tcfg`` set to continue from the cell's checkpoint where a kill left one to continue (see the module doc);
    else ``tcfg`` itself."""
    out = Path(tcfg.train.out_dir)
    path, stamp = out / "checkpoint.pt", out / PROTOCOL_FILE
    if tcfg.train.save_every_s <= 0 or not path.is_file() or not stamp.is_file() or \
            stamp.read_text().strip() != protocol():
        return tcfg
    try:
        state = load_checkpoint(path)
        ended = ended_of(state, path)
    except CheckpointError:
        return tcfg
    mine, step = to_dict(tcfg), state.get("global_step")
    if comparable(state.get("config"), mine) != comparable(mine, mine) or type(step) is not int or \
            not (0 < step < tcfg.train.steps or step == tcfg.train.steps and ended is not None):
        return tcfg
    return dataclasses.replace(tcfg, train=dataclasses.replace(tcfg.train, resume=str(path), overwrite=False))


def fit_cell(tcfg: Config, data):
    """``train.main.fit`` of one cell: continued where :func:`continue_killed` finds a checkpoint to continue (anew
    if ``resume`` refuses it after all), else afresh, its protocol stamped first."""
    from . import main  # looked up when called (tests watch main.fit)

    resumed = continue_killed(tcfg)
    if resumed is not tcfg:
        try:
            return main.fit(resumed, data)
        except CheckpointError:
            pass
    if tcfg.train.save_every_s > 0:
        Path(tcfg.train.out_dir).mkdir(parents=True, exist_ok=True)
        (Path(tcfg.train.out_dir) / PROTOCOL_FILE).write_text(protocol() + "\n")
    return main.fit(tcfg, data)
