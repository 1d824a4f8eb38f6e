"""Checkpoints: an interrupted and resumed run equals an uninterrupted one; bad files fail clearly."""
from __future__ import annotations

import random

import numpy as np
import pytest
import torch

from test_train import fake_config
from train.checkpoint import (CheckpointError, check_config, load_checkpoint, load_model_state, rng_state,
                              save_checkpoint, set_rng_state)
from train.main import fit

# drop / drop_path draw random numbers every step: the RNG state must survive the resume.
RUN = ["model.pe.kind=rope", "model.drop=0.1", "model.drop_path=0.1", "train.steps=10", "train.epochs=1"]


def scramble_global_state():
    """What a fresh process would have: unrelated RNG states."""
    torch.manual_seed(987)
    random.seed(987)
    np.random.seed(987)


def test_resume_continues_exactly(tmp_path):
    full_model, full = fit(fake_config(tmp_path / "full", "image", *RUN))
    scramble_global_state()
    _, first = fit(fake_config(tmp_path / "split", "image", *RUN, "train.stop_after=5"))  # stops mid-epoch 1
    assert first["step"] == 5
    scramble_global_state()
    ckpt = tmp_path / "split" / "checkpoint.pt"
    model, resumed = fit(fake_config(tmp_path / "split", "image", *RUN, f"train.resume={ckpt}"))
    assert resumed["step"] == full["step"] == 10
    assert resumed["eval"] == full["eval"]
    for (name, a), b in zip(full_model.state_dict().items(), model.state_dict().values()):
        assert torch.equal(a, b), name
    state = load_checkpoint(ckpt)
    assert state["global_step"] == 10 and state["config"]["train"]["resume"] == str(ckpt)


def test_truncated_checkpoint_is_refused(tmp_path):
    path = tmp_path / "ckpt.pt"
    save_checkpoint({"model": {"w": torch.randn(100)}, "config": {}}, path)
    path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
    with pytest.raises(CheckpointError, match="truncated, corrupt or not written by train.checkpoint"):
        load_checkpoint(path)
    with pytest.raises(CheckpointError, match="no checkpoint at"):
        load_checkpoint(tmp_path / "missing.pt")


class Opaque:  # not a tensor / plain-data type: weights_only loading must refuse it
    pass


def test_arbitrary_objects_are_not_unpickled(tmp_path):
    path = tmp_path / "evil.pt"
    torch.save({"format_version": 1, "model": Opaque()}, path)
    with pytest.raises(CheckpointError, match="cannot read checkpoint"):
        load_checkpoint(path)


def test_failed_write_keeps_the_previous_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "ckpt.pt"
    save_checkpoint({"model": {"w": torch.zeros(3)}}, path)

    def broken_save(obj, f):
        f.write(b"partial")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", broken_save)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint({"model": {"w": torch.ones(3)}}, path)
    monkeypatch.undo()
    assert torch.equal(load_checkpoint(path)["model"]["w"], torch.zeros(3))
    assert [p.name for p in tmp_path.iterdir()] == ["ckpt.pt"]  # no temp file left behind


def test_resume_with_another_model_config_names_the_difference(tmp_path):
    fit(fake_config(tmp_path, "image", *RUN, "train.stop_after=2"))
    cfg = fake_config(tmp_path, "image", *RUN, "model.dim=48", f"train.resume={tmp_path / 'checkpoint.pt'}")
    with pytest.raises(CheckpointError, match=r"model\.dim: checkpoint 32 vs config 48"):
        fit(cfg)


def test_config_diff_lists_every_key():
    saved = {"model": {"dim": 32, "pe": {"kind": "rope", "options": {}}}, "data": {"name": "a"}, "train": {"seed": 0}}
    current = {"model": {"dim": 32, "pe": {"kind": "learned", "options": {"grid_shape": [4, 4]}}},
               "data": {"name": "a"}, "train": {"seed": 1}}
    with pytest.raises(CheckpointError) as e:
        check_config(saved, current)
    assert "model.pe.kind: checkpoint 'rope' vs config 'learned'" in str(e.value)
    assert "model.pe.options.grid_shape" in str(e.value) and "train.seed" not in str(e.value)
    check_config(saved, {**saved, "train": {"seed": 5}})  # training settings may change


def test_architecture_mismatch_is_clear():
    a, b = torch.nn.Linear(4, 3), torch.nn.Linear(4, 5)
    with pytest.raises(CheckpointError, match="does not fit this model's architecture"):
        load_model_state(b, a.state_dict())


def test_rng_state_round_trip(tmp_path):
    save_checkpoint({"rng": rng_state()}, tmp_path / "r.pt")
    expect = (torch.rand(3), random.random(), np.random.rand())
    scramble_global_state()
    set_rng_state(load_checkpoint(tmp_path / "r.pt")["rng"])
    got = (torch.rand(3), random.random(), np.random.rand())
    assert torch.equal(expect[0], got[0]) and expect[1:] == got[1:]
