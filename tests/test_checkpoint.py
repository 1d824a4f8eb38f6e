"""Checkpoints: an interrupted and resumed run equals an uninterrupted one; bad files fail clearly."""
from __future__ import annotations

import random
import re

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


# -- damaged and mismatched checkpoints: one clear line each --------------------------------------
def one_line(e) -> str:
    msg = str(e.value)
    assert "\n" not in msg, msg
    return msg


def test_flipped_bit_in_a_tensor_record_is_refused(tmp_path):
    path = tmp_path / "ckpt.pt"
    w = torch.arange(1000, dtype=torch.float32)
    save_checkpoint({"model": {"w": w}, "config": {}}, path)
    raw = bytearray(path.read_bytes())
    at = bytes(raw).find(w.numpy().tobytes())
    assert at > 0  # tensor records are stored uncompressed
    raw[at + 401] ^= 0x10  # one bit of w[100]
    path.write_bytes(bytes(raw))
    with pytest.raises(CheckpointError, match="sha256") as e:
        load_checkpoint(path)
    assert str(path) in one_line(e)


def test_no_single_byte_flip_loads_silently(tmp_path):
    """Every flipped byte (sampled) is refused or leaves the state intact (zip padding, unused header bytes)."""
    path = tmp_path / "ckpt.pt"
    state = {"model": {"w": torch.randn(64)}, "config": {"model": {"dim": 8}}, "global_step": 3}
    save_checkpoint(state, path)
    good = path.read_bytes()
    for at in random.Random(0).sample(range(len(good)), 60):
        raw = bytearray(good)
        raw[at] ^= 0xFF
        path.write_bytes(bytes(raw))
        try:
            got = load_checkpoint(path)
        except CheckpointError as e:
            assert "\n" not in str(e) and str(path) in str(e)
            continue
        assert torch.equal(got["model"]["w"], state["model"]["w"]) and got["config"] == state["config"], at


@pytest.mark.parametrize("content, match", [
    (b"", "empty file"),
    (b"not a checkpoint at all", "truncated, corrupt or not written by train.checkpoint"),
    (b"PK\x03\x04", "truncated, corrupt or not written by train.checkpoint"),
])
def test_empty_or_foreign_file_is_one_clear_line(tmp_path, content, match):
    path = tmp_path / "ckpt.pt"
    path.write_bytes(content)
    with pytest.raises(CheckpointError, match=match) as e:
        load_checkpoint(path)
    assert str(path) in one_line(e)


def test_checkpoint_without_checksum_is_refused(tmp_path):
    path = tmp_path / "old.pt"
    torch.save({"format_version": 1, "model": {"w": torch.ones(2)}}, path)  # the format before checksums
    with pytest.raises(CheckpointError, match="written before checksums") as e:
        load_checkpoint(path)
    one_line(e)


def test_stale_temp_files_are_removed_by_the_next_save(tmp_path):
    path = tmp_path / "checkpoint.pt"
    stale = [tmp_path / ".checkpoint.pt.abc123.tmp", tmp_path / ".checkpoint.pt.x.tmp"]
    for p in stale:
        p.write_bytes(b"half a checkpoint (killed)")
    other = tmp_path / ".other.pt.abc.tmp"  # not ours
    other.write_bytes(b"x")
    save_checkpoint({"model": {}}, path)
    assert sorted(p.name for p in tmp_path.iterdir()) == [".other.pt.abc.tmp", "checkpoint.pt"]


def resave_without(path, *keys):
    state = load_checkpoint(path)
    for k in keys:
        state.pop(k)
    state.pop("format_version")
    save_checkpoint(state, path)


@pytest.mark.parametrize("missing", ["config", "optimizer", "rng"])
def test_resume_from_checkpoint_missing_an_entry(tmp_path, missing):
    fit(fake_config(tmp_path, "image", *RUN, "train.stop_after=2"))
    ckpt = tmp_path / "checkpoint.pt"
    resave_without(ckpt, missing)
    with pytest.raises(CheckpointError, match=f"lacks '{missing}', needed to resume training") as e:
        fit(fake_config(tmp_path, "image", *RUN, f"train.resume={ckpt}"))
    one_line(e)


@pytest.mark.parametrize("key, value, match", [
    ("global_step", -1, "its loop position or RNG states have the wrong type"),
    ("rng", "seed", "its loop position or RNG states have the wrong type"),
    ("elapsed_s", -5.0, "its elapsed_s is -5.0, expected finite seconds >= 0"),
    ("elapsed_s", "10", "its elapsed_s is '10', expected finite seconds >= 0"),
    ("elapsed_s", float("inf"), "its elapsed_s is inf, expected finite seconds >= 0"),
])
def test_resume_from_a_damaged_entry_names_it(tmp_path, key, value, match):
    fit(fake_config(tmp_path, "image", *RUN, "train.stop_after=2"))
    ckpt = tmp_path / "checkpoint.pt"
    state = load_checkpoint(ckpt)
    state[key] = value
    state.pop("format_version")
    save_checkpoint(state, ckpt)
    with pytest.raises(CheckpointError, match=f"is damaged: {re.escape(match)}") as e:
        fit(fake_config(tmp_path, "image", *RUN, f"train.resume={ckpt}"))
    one_line(e)


def test_load_trained_missing_config(tmp_path):
    from train.main import load_trained

    fit(fake_config(tmp_path, "image", *RUN, "train.stop_after=2"))
    resave_without(tmp_path / "checkpoint.pt", "config")
    with pytest.raises(CheckpointError, match="lacks 'config', needed to load the trained model"):
        load_trained(tmp_path)


def test_resume_with_another_optimizer_is_refused(tmp_path):
    fit(fake_config(tmp_path, "image", *RUN, "train.stop_after=2"))
    ckpt = tmp_path / "checkpoint.pt"
    with pytest.raises(CheckpointError, match="trained with optim.opt='adamw'; this run uses 'sgd'") as e:
        fit(fake_config(tmp_path, "image", *RUN, "optim.opt=sgd", f"train.resume={ckpt}"))
    one_line(e)
    state = load_checkpoint(ckpt)  # a checkpoint whose config lies about its optimizer: the state check
    state["config"]["optim"]["opt"] = "sgd"
    state.pop("format_version")
    save_checkpoint(state, ckpt)
    with pytest.raises(CheckpointError, match="optimizer state lacks .*'momentum'") as e:
        fit(fake_config(tmp_path, "image", *RUN, "optim.opt=sgd", f"train.resume={ckpt}"))
    one_line(e)


def test_config_mismatch_is_one_line(tmp_path):
    saved = {"model": {"dim": 32, "depth": 1}, "data": {"name": "a"}}
    with pytest.raises(CheckpointError) as e:
        check_config(saved, {"model": {"dim": 48, "depth": 2}, "data": {"name": "a"}})
    assert "model.depth" in one_line(e) and "model.dim" in str(e.value)
    check_config(saved, {**saved, "data": {"name": "a", "allow_import": True}})  # how to run, not what is trained


def test_log_has_each_step_and_epoch_once_after_resume(tmp_path):
    import json

    _, full = fit(fake_config(tmp_path / "full", "image", *RUN))
    fit(fake_config(tmp_path, "image", *RUN, "train.stop_after=5"))  # checkpoint at step 5, mid-epoch 1
    log = tmp_path / "log.jsonl"
    with log.open("a") as f:  # what a run killed after its checkpoint leaves: later steps, a cut-off line
        f.write(json.dumps({"phase": "train_step", "epoch": 1, "step": 6, "loss": 1.0, "lr": 0.1}) + "\n")
        f.write(json.dumps({"phase": "epoch", "epoch": 1, "step": 8}) + "\n")
        f.write('{"phase": "train_st')
    _, resumed = fit(fake_config(tmp_path, "image", *RUN, f"train.resume={tmp_path / 'checkpoint.pt'}"))
    records = [json.loads(line) for line in log.read_text().splitlines()]
    steps = [r["step"] for r in records if r["phase"] == "train_step"]
    epochs = [r["epoch"] for r in records if r["phase"] == "epoch"]
    assert steps == list(range(1, 11)) and epochs == [0, 1, 2]
    full_records = [json.loads(line) for line in (tmp_path / "full" / "log.jsonl").read_text().splitlines()]
    assert [r["loss"] for r in records if r["phase"] == "train_step"] == \
        [r["loss"] for r in full_records if r["phase"] == "train_step"]
    assert resumed["eval"] == full["eval"]
