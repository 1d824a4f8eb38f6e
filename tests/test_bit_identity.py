"""benchmarks/bit_identity.py without running checkouts: the sample it asks both for, and the rows a vouch that
skips a task must not leave behind."""
from __future__ import annotations

import csv
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bit_identity  # noqa: E402

from train.bench import CONFIG_DIR, load_bench_config, search_cells  # noqa: E402


def test_a_skipped_task_leaves_the_sample_and_every_other_task_stays():
    cfg = load_bench_config(CONFIG_DIR / "standard.yaml", bit_identity.overrides(Path("/tmp/x"), 2, 8, 4))
    skipped = load_bench_config(CONFIG_DIR / "standard.yaml",
                                bit_identity.overrides(Path("/tmp/x"), 2, 8, 4, ("image/mnist-pair",)))
    assert skipped.tasks == [t for t in cfg.tasks if t != "image/mnist-pair"]
    assert "coord/quadrant" in skipped.tasks and "image/mnist-pair" not in skipped.task_kinds
    assert {t: k for t, k in cfg.task_kinds.items() if t != "image/mnist-pair"} == skipped.task_kinds


def test_the_sample_searches_one_point_on_every_task_whatever_grids_the_preset_gives():
    """The preset's per-task grids (the LM's own) are reset, so both checkouts run the same one-point search; a
    checkout whose preset lacks the key (older code) gets no override it would not know."""
    import yaml

    preset = yaml.safe_load((CONFIG_DIR / "standard.yaml").read_text())
    assert preset["lr_searches"]  # the case this guards: a task with a grid of its own
    cfg = load_bench_config(CONFIG_DIR / "standard.yaml",
                            bit_identity.overrides(Path("/tmp/x"), 2, 8, 4) + bit_identity.resets(preset))
    assert {c.lr for c in search_cells(cfg)} == {0.002}
    assert bit_identity.resets({"lr_search": [0.001]}) == []


def test_rows_of_a_skipped_task_from_the_old_code_are_found(tmp_path):
    with open(tmp_path / "results.csv", "w", newline="") as f:
        w = csv.DictWriter(f, ["task", "protocol"])
        w.writeheader()
        w.writerows([{"task": "image/mnist-pair", "protocol": "old"}, {"task": "image/mnist-pair", "protocol": "new"},
                     {"task": "text/copy", "protocol": "old"}])
    assert bit_identity.skipped_rows_left(tmp_path, ["image/mnist-pair"], "old") == {"image/mnist-pair": 1}
    assert bit_identity.skipped_rows_left(tmp_path, ["audio/tones"], "old") == {}
