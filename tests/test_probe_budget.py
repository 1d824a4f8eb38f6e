"""benchmarks/probe_budget.py's task variants (--task-set): a probe of a redesign changes only what it names, and a
setting it cannot apply is refused with what it expects."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import probe_budget  # noqa: E402


def test_a_variant_changes_only_what_it_names():
    task = probe_budget.TASKS["image/mnist-pair"]
    before = (dict(task.model_opts), dict(task.data), task.train_size)
    variant = probe_budget.task_variant(task, ["train_size=84", "test_sizes=[84, 126, 168]",
                                               "model_opts.patch_size=14", "data.target=larger"])
    assert (variant.train_size, variant.test_sizes) == (84, (84, 126, 168))
    assert variant.model_opts == {**task.model_opts, "patch_size": 14}
    assert variant.data == {**task.data, "target": "larger"}
    assert (task.model_opts, task.data, task.train_size) == before  # the protocol's task is untouched
    assert {f: getattr(variant, f) for f in ("name", "bar", "metric", "order_blind")} == \
        {f: getattr(task, f) for f in ("name", "bar", "metric", "order_blind")}


@pytest.mark.parametrize("setting", ["patch_size=7", "train_size=wide", "test_sizes=[]", "bar=0.5", "model_opts"])
def test_a_setting_it_cannot_apply_is_refused(setting):
    with pytest.raises(SystemExit, match="--task-set"):
        probe_budget.task_variant(probe_budget.TASKS["image/mnist-pair"], [setting])


def test_a_probe_reports_its_curve_and_data_seed(tmp_path):
    """``--set curve_points=N`` adds the cell's validation curve (N evaluations, the last at the final step, equal to
    the final validation metric), and ``--set data_seeds=[...]`` the data it trained on."""
    out = probe_budget.probe("video/trajectory", "none", 4, 2e-3, ["curve_points=2", "train_items=64", "test_items=16",
                                                                    "data_seeds=[13]", "dim=16", "heads=2", "depth=1"],
                             0, tmp_path)
    assert out["data_seed"] == 13
    assert [step for step, _ in out["curve"]] == [2, 4]
    assert out["curve"][-1][1] == out["val"]["acc"]
    without = probe_budget.probe("video/trajectory", "none", 4, 2e-3, ["train_items=64", "test_items=16", "dim=16",
                                                                       "heads=2", "depth=1"], 0, tmp_path / "b")
    assert "curve" not in without and without["data_seed"] == 0
