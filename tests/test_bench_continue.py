"""A benchmark cell killed mid-training continues from its last checkpoint (``checkpoint_s``, train/continuing.py) to
the rows an uninterrupted cell gives, and one killed while testing is tested again without training; a checkpoint of
other settings or another protocol, one ``resume`` refuses, or one at the last step that lacks the metrics the run
ended with is not continued: the cell trains anew."""
from __future__ import annotations

import pytest

import train.main as main
from train import bench, continuing, evaluate
from train.cells import fingerprint
from train.checkpoint import load_checkpoint, save_checkpoint
from train.config import ConfigError
from train.curves import cell_curve
from test_bench import tiny

# 64 items in batches of 8: 8 steps an epoch, 24 steps in 3 epochs; checkpoint_s tiny: one at every epoch's end
CELL = ["default_steps=24", "checkpoint_s=1e-9", "curve_points=6", "rope_variants=[]"]
ROPE = bench.CellSpec("text/copy", "rope", 0, 0)


class Killed(Exception):
    pass


def numbers(rows):
    return [(r.split, r.variant, r.size_ratio, r.value) for r in rows]


def killed_at_step_8(cfg, run_dir, monkeypatch):
    """Run the cell until epoch 1 starts (after epoch 0's checkpoint at step 8), then kill it; its folder."""
    real = main.train_one_epoch

    def killed_in_epoch_1(*args, epoch, **kw):
        if epoch == 1:
            raise Killed
        return real(*args, epoch=epoch, **kw)
    monkeypatch.setattr(main, "train_one_epoch", killed_in_epoch_1)
    with pytest.raises(Killed):
        bench.run_cell((cfg, ROPE, run_dir))
    monkeypatch.setattr(main, "train_one_epoch", real)
    out = evaluate.cell_dir(run_dir, ROPE)
    assert load_checkpoint(out / "checkpoint.pt")["global_step"] == 8
    return out


def watch_fit(monkeypatch) -> list:
    """Record the ``train.resume`` and ``resumed_s`` of every fit."""
    calls, real = [], main.fit

    def spy(tcfg, data=None):
        model, result = real(tcfg, data)
        calls.append((tcfg.train.resume, result["resumed_s"]))
        return model, result
    monkeypatch.setattr(main, "fit", spy)
    return calls


def tcfg_of(cfg, run_dir):
    return evaluate.train_config(cfg, bench.TASKS["text/copy"], ROPE, run_dir)


def test_a_cell_killed_mid_training_continues_to_the_same_rows(tmp_path, monkeypatch):
    ref_rows, _ = bench.run_cell((tiny(tmp_path / "ref", *CELL), ROPE, str(tmp_path / "ref" / "quick")))
    cfg, run_dir = tiny(tmp_path / "killed", *CELL), str(tmp_path / "killed" / "quick")
    out = killed_at_step_8(cfg, run_dir, monkeypatch)
    state = load_checkpoint(out / "checkpoint.pt")
    assert state["elapsed_s"] > 0  # the killed part's seconds, carried on; made long to be seen in train_time_s
    save_checkpoint({**state, "elapsed_s": 1000.0}, out / "checkpoint.pt")
    fits = watch_fit(monkeypatch)
    rows, _ = bench.run_cell((cfg, ROPE, run_dir))
    assert fits == [(str(out / "checkpoint.pt"), 1000.0)]
    assert numbers(rows) == numbers(ref_rows)  # train, val and every test size, bit for bit
    assert all(1000 <= r.train_time_s < 1100 for r in rows)
    ref_log = evaluate.cell_dir(str(tmp_path / "ref" / "quick"), ROPE) / "log.jsonl"
    assert cell_curve(out / "log.jsonl", "seq_acc") == cell_curve(ref_log, "seq_acc")  # each point once
    console = (out / "console.log").read_text()  # the killed part's console kept, the continuation's after it
    assert console.count("=== cell started") == 2


@pytest.mark.parametrize("later,continues", [
    (["checkpoint_s=300"], True),  # how often a cell checkpoints is not a setting
    (["lrs={text/copy: 0.01}"], False),  # another rate
    (["default_steps=32"], False),  # another budget
    (["checkpoint_s=0"], False),  # checkpoints off: never continued
])
def test_only_a_checkpoint_of_the_same_settings_is_continued(tmp_path, monkeypatch, later, continues):
    run_dir = str(tmp_path / "quick")
    killed_at_step_8(tiny(tmp_path, *CELL), run_dir, monkeypatch)
    tcfg = tcfg_of(tiny(tmp_path, *CELL, *later), run_dir)
    assert (continuing.continue_killed(tcfg).train.resume is not None) is continues


def test_a_cell_killed_while_testing_is_tested_again_without_training(tmp_path, monkeypatch):
    ref_dir = str(tmp_path / "ref" / "quick")
    ref_rows, _ = bench.run_cell((tiny(tmp_path / "ref", *CELL), ROPE, ref_dir))
    cfg, run_dir = tiny(tmp_path / "killed", *CELL), str(tmp_path / "killed" / "quick")
    real_test = main.evaluate_dataset

    def killed(*args, **kw):
        raise Killed
    monkeypatch.setattr(main, "evaluate_dataset", killed)  # trained to the end, killed at its first test size
    with pytest.raises(Killed):
        bench.run_cell((cfg, ROPE, run_dir))
    monkeypatch.setattr(main, "evaluate_dataset", real_test)
    out = evaluate.cell_dir(run_dir, ROPE)
    state = load_checkpoint(out / "checkpoint.pt")
    assert state["global_step"] == 24 and state["ended"]["train"]
    trained, real_epoch = [], main.train_one_epoch

    def counted(*args, **kw):
        trained.append(kw["epoch"])
        return real_epoch(*args, **kw)
    monkeypatch.setattr(main, "train_one_epoch", counted)
    fits = watch_fit(monkeypatch)
    rows, _ = bench.run_cell((cfg, ROPE, run_dir))
    assert trained == [] and [resume for resume, _ in fits] == [str(out / "checkpoint.pt")]
    assert numbers(rows) == numbers(ref_rows)  # the training and validation rows too, from the checkpoint
    ref_log = evaluate.cell_dir(ref_dir, ROPE) / "log.jsonl"
    assert cell_curve(out / "log.jsonl", "seq_acc") == cell_curve(ref_log, "seq_acc")  # the curve kept, once


def test_a_checkpoint_of_another_protocol_or_at_the_last_step_without_its_end_is_not_continued(tmp_path, monkeypatch):
    run_dir = str(tmp_path / "quick")
    out = killed_at_step_8(tiny(tmp_path, *CELL), run_dir, monkeypatch)
    tcfg = tcfg_of(tiny(tmp_path, *CELL), run_dir)
    assert continuing.continue_killed(tcfg).train.resume is not None
    (out / continuing.PROTOCOL_FILE).write_text("0123456789ab\n")  # killed under other code
    assert continuing.continue_killed(tcfg) is tcfg
    finished = tiny(tmp_path / "one", *CELL, "default_steps=8")  # one epoch: the checkpoint is at the last step
    bench.run_cell((finished, ROPE, str(tmp_path / "one" / "quick")))  # as a cell killed while testing leaves it
    last, path = tcfg_of(finished, str(tmp_path / "one" / "quick")), \
        evaluate.cell_dir(str(tmp_path / "one" / "quick"), ROPE) / "checkpoint.pt"
    state = load_checkpoint(path)
    assert state["global_step"] == 8 and continuing.continue_killed(last).train.resume == str(path)
    for ended in ({**state["ended"], "eval": None}, {**state["ended"], "step": 7}):  # damaged: not trusted
        save_checkpoint({**state, "ended": ended}, path)
        assert continuing.continue_killed(last) is last
    save_checkpoint({k: v for k, v in state.items() if k != "ended"}, path)  # as code before 'ended' wrote it
    assert continuing.continue_killed(last) is last


def test_a_checkpoint_resume_refuses_trains_the_cell_anew(tmp_path, monkeypatch):
    """A checkpoint whose model state no longer fits (one weight missing): resume refuses it, the cell starts again,
    to an uninterrupted cell's rows, instead of failing on every rerun."""
    ref_rows, _ = bench.run_cell((tiny(tmp_path / "ref", *CELL), ROPE, str(tmp_path / "ref" / "quick")))
    cfg, run_dir = tiny(tmp_path, *CELL), str(tmp_path / "quick")
    out = killed_at_step_8(cfg, run_dir, monkeypatch)
    state = load_checkpoint(out / "checkpoint.pt")
    state["model"].pop(next(iter(state["model"])))
    save_checkpoint(state, out / "checkpoint.pt")
    fits = watch_fit(monkeypatch)
    rows, _ = bench.run_cell((cfg, ROPE, run_dir))
    assert [resume for resume, _ in fits] == [None]  # the refused attempt raised inside fit, before returning
    assert numbers(rows) == numbers(ref_rows)
    assert isinstance(load_checkpoint(out / "checkpoint.pt")["model"], dict)


def test_checkpoint_s_is_checked_and_is_not_a_setting(tmp_path):
    cfg = tiny(tmp_path, "checkpoint_s=0")
    assert tcfg_of(cfg, tmp_path).train.save_every_s == 0
    assert fingerprint(cfg) == fingerprint(tiny(tmp_path, "checkpoint_s=300"))
    with pytest.raises(ConfigError, match="checkpoint_s must be a finite number of seconds >= 0"):
        tiny(tmp_path, "checkpoint_s=-1")
