"""A benchmark cell killed mid-training continues from its last checkpoint (``checkpoint_s``) to the rows an
uninterrupted cell gives; a checkpoint of other settings, or at the last step, is not continued."""
from __future__ import annotations

import dataclasses

import pytest

import train.main as main
from train import bench, evaluate
from train.cells import fingerprint
from train.checkpoint import load_checkpoint
from train.config import ConfigError
from train.curves import cell_curve
from test_bench import tiny

# 64 items in batches of 8: 8 steps an epoch, 24 steps in 3 epochs; checkpoint_s tiny: one at every epoch's end
CELL = ["default_steps=24", "checkpoint_s=1e-9", "curve_points=6", "rope_variants=[]"]


class Killed(Exception):
    pass


def numbers(rows):
    return [(r.split, r.variant, r.size_ratio, r.value) for r in rows]


def test_a_cell_killed_mid_training_continues_to_the_same_rows(tmp_path, monkeypatch):
    cell = bench.CellSpec("text/copy", "rope", 0, 0)
    ref_rows, _ = bench.run_cell((tiny(tmp_path / "ref", *CELL), cell, str(tmp_path / "ref" / "quick")))

    cfg, run_dir = tiny(tmp_path / "killed", *CELL), str(tmp_path / "killed" / "quick")
    real = main.train_one_epoch

    def killed_in_epoch_2(*args, epoch, **kw):
        if epoch == 1:
            raise Killed  # after epoch 0's checkpoint (step 8), before any step of epoch 1 is saved
        return real(*args, epoch=epoch, **kw)
    monkeypatch.setattr(main, "train_one_epoch", killed_in_epoch_2)
    with pytest.raises(Killed):
        bench.run_cell((cfg, cell, run_dir))
    out = evaluate.cell_dir(run_dir, cell)
    assert load_checkpoint(out / "checkpoint.pt")["global_step"] == 8
    monkeypatch.setattr(main, "train_one_epoch", real)

    resumed, real_fit = [], main.fit
    before = load_checkpoint(out / "checkpoint.pt")["elapsed_s"]  # the killed part's seconds, carried on

    def spy(tcfg, data=None):
        resumed.append(tcfg.train.resume)
        model, result = real_fit(tcfg, data)
        assert result["resumed_s"] == before > 0
        return model, result
    monkeypatch.setattr(main, "fit", spy)
    rows, _ = bench.run_cell((cfg, cell, run_dir))
    assert resumed == [str(out / "checkpoint.pt")]
    assert numbers(rows) == numbers(ref_rows)  # train, val and every test size, bit for bit
    ref_curve = evaluate.cell_dir(str(tmp_path / "ref" / "quick"), cell) / "log.jsonl"
    assert cell_curve(out / "log.jsonl", "seq_acc") == cell_curve(ref_curve, "seq_acc")  # each point once


@pytest.mark.parametrize("change", ["lr=0.01", "default_steps=8"])
def test_a_checkpoint_of_other_settings_or_at_the_last_step_trains_anew(tmp_path, change):
    """Other settings (another rate); a finished training (8 steps: the checkpoint is at the last step, a kill
    while testing): the cell starts again."""
    cell = bench.CellSpec("text/copy", "rope", 0, 0)
    first = tiny(tmp_path, *CELL[:2], "default_steps=8", "rope_variants=[]")
    bench.run_cell((first, cell, str(tmp_path / "quick")))  # leaves checkpoint.pt at step 8
    later = tiny(tmp_path, *CELL, change)
    tcfg = evaluate.train_config(later, bench.TASKS["text/copy"], cell, str(tmp_path / "quick"))
    assert evaluate.continue_killed(tcfg) is tcfg
    same = evaluate.train_config(first, bench.TASKS["text/copy"], cell, str(tmp_path / "quick"))
    assert evaluate.continue_killed(dataclasses.replace(same, train=dataclasses.replace(same.train, steps=16))) \
        .train.resume is None  # steps are settings too: a 16-step config does not continue an 8-step run


def test_checkpoint_s_zero_never_continues_and_is_not_a_setting(tmp_path):
    cfg = tiny(tmp_path, "checkpoint_s=0")
    tcfg = evaluate.train_config(cfg, bench.TASKS["text/copy"], bench.CellSpec("text/copy", "rope", 0, 0), tmp_path)
    assert tcfg.train.save_every_s == 0 and evaluate.continue_killed(tcfg) is tcfg
    assert fingerprint(cfg) == fingerprint(tiny(tmp_path, "checkpoint_s=300"))
    with pytest.raises(ConfigError, match="checkpoint_s must be a finite number of seconds >= 0"):
        tiny(tmp_path, "checkpoint_s=-1")
