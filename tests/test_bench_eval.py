"""The benchmark's evaluation beyond the training size: batches that shrink with the tokens per item
(``eval_batch_by_size``, for long contexts) give the same numbers, and a preset's memory budget reaches its cells."""
from __future__ import annotations

import pytest

import ndpe
from train import bench, evaluate
from train.config import ConfigError
from test_bench import tiny


def test_the_batch_shrinks_with_the_tokens_per_item(tmp_path):
    on, off = tiny(tmp_path, "eval_batch_by_size=true", "batch_size=32"), tiny(tmp_path, "batch_size=32")
    assert evaluate.eval_batch(on, (256,), (2048,)) == 4  # the LM check: 32 windows of 256 -> 4 of 2,048
    assert evaluate.eval_batch(on, (8, 8), (16, 16)) == 8  # a 2x zoom: 4x the patches
    assert evaluate.eval_batch(on, (256,), (256,)) == 32
    assert evaluate.eval_batch(on, (4,), (1024,)) == 1  # never 0
    assert evaluate.eval_batch(off, (256,), (2048,)) is None  # the training batch, as every committed record
    assert evaluate.eval_batch(on, None, None) is None  # a conv net has no grid


def test_smaller_batches_give_the_same_numbers(tmp_path, monkeypatch):
    """The tiny model's exact match is 0 at every size, so the test compares what every evaluation returns: token
    accuracy exactly, the mean loss to float rounding (one item dropped or counted twice moves it by ~1e-3)."""
    import train.main as main

    calls, real = [], main.evaluate_dataset

    def spy(model, cfg, dataset, *, batch_size=None, **kw):
        metrics = real(model, cfg, dataset, batch_size=batch_size, **kw)
        calls.append((len(dataset[0][0]), batch_size, metrics))
        return metrics
    monkeypatch.setattr(main, "evaluate_dataset", spy)
    cell = bench.CellSpec("text/copy", "rope", 0, 0)
    measured = {}
    for flag in ("false", "true"):
        calls.clear()
        cfg = tiny(tmp_path / flag, f"eval_batch_by_size={flag}", "test_items=16")
        bench.run_cell((cfg, cell, str(tmp_path / flag / "quick")))
        measured[flag] = list(calls)
    whole, shrunk = measured["false"], measured["true"]
    assert len(whole) == len(shrunk) == 5  # 3 sizes, and rope with PI at the 2 larger ones
    for (length, _, a), (_, _, b) in zip(whole, shrunk):
        assert a["acc"] == b["acc"] and a["loss"] == pytest.approx(b["loss"], rel=1e-5), (length, a, b)
    batches = {length: batch for length, batch, _ in shrunk}
    shortest, longest = min(batches), max(batches)
    assert {batch for _, batch, _ in whole} == {None}
    assert batches[shortest] == 8 and batches[longest] == 8 * shortest // longest < 8, batches


def test_the_memory_budget_reaches_the_cell(tmp_path):
    previous = ndpe.memory_budget()
    try:
        cfg = tiny(tmp_path, "memory_budget_gib=2")
        bench.run_cell((cfg, bench.CellSpec("text/copy", "none", 0, 0), str(tmp_path / "quick")))
        assert ndpe.memory_budget() == 2 * 2 ** 30
    finally:
        ndpe.set_memory_budget(previous)
    with pytest.raises(ConfigError, match="memory_budget_gib must be null or a number > 0"):
        tiny(tmp_path, "memory_budget_gib=0")
