"""benchmarks/record_cost.py: a preset's cost from a record's cell times, checked against sums worked out by hand on
a two-kind record (copy: rope in Kazemnejad et al.'s claim, xpos in no judged claim)."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import record_cost  # noqa: E402

from train.bench import CONFIG_DIR, load_bench_config  # noqa: E402
from train.results import SEARCH, Row, append_rows, read_rows  # noqa: E402

TASK = "text/copy"


def row(kind: str, seed: int, data_seed: int, seconds: float, *, variant: str = "-", lr: float = 0.0,
        ratio: float = 1.0) -> Row:
    return Row("text", TASK, kind, variant, seed, "8L", f"{8 * ratio:g}L", ratio, "seq_acc", 0.5, True, seconds,
               data_seed=data_seed, split="val" if variant == SEARCH else "test", lr=lr,
               weight_decay=0.05 if variant == SEARCH else 0.0)


@pytest.fixture
def record(tmp_path):
    rows = [row("rope", s, s % 2, t) for s, t in ((0, 10.0), (1, 30.0), (2, 20.0))]  # median 20
    rows += [row("rope", s, s % 2, t, ratio=2.0) for s, t in ((0, 10.0), (1, 30.0), (2, 20.0))]  # the same cells
    rows += [row("xpos", s, s % 2, 40.0) for s in (0, 1, 2)]
    rows += [row("floor", d, d, 0.0, variant="chance") for d in (0, 1)]
    rows += [row(k, 1000, 0, 99.0, variant=SEARCH, lr=lr) for k in ("rope", "xpos") for lr in (1e-3, 2e-3, 4e-3)]
    rows.append(row("rope", 1000, 0, 99.0, variant=SEARCH, lr=8e-3))  # an extension point past 4e-3
    append_rows(tmp_path / "results.csv", rows)
    return read_rows(tmp_path / "results.csv")


def preset(*overrides: str):
    return load_bench_config(CONFIG_DIR / "standard.yaml", [f"tasks=[{TASK}]", "task_kinds={}", "kinds=[rope,xpos]",
                                                           "seeds=[0,1,2]", "data_seeds=[0,1]", "search_runs=1",
                                                           "search_data_seeds=[]", *overrides])


def test_cells_cost_their_kinds_median_search_included(record):
    (task,), missing = record_cost.estimate(preset(), record, {})
    assert missing == [] and (task["runs"], task["search"], task["extension"]) == (6, 6, 1)
    assert task["run_s"] == 3 * 20.0 + 3 * 40.0  # medians, not the search cells' own 99 s
    assert task["search_s"] == 3 * 20.0 + 3 * 40.0 and task["extension_s"] == 20.0


def test_each_search_run_of_a_candidate_is_a_cell(record):
    """With 3 search runs per candidate the first grid and the extension points cost three times as much."""
    (task,), _ = record_cost.estimate(preset("search_runs=3", "search_data_seeds=[10,11,12]"), record, {})
    assert (task["search"], task["extension"]) == (18, 3)
    assert task["search_s"] == 3 * (3 * 20.0 + 3 * 40.0) and task["extension_s"] == 3 * 20.0


def test_other_runs_and_scale_change_the_estimate(record):
    (task,), _ = record_cost.estimate(preset("other_runs=1"), record, {TASK: 0.5})
    assert task["runs"] == 3 + 1  # rope in full (a claim compares it), xpos its first run
    assert task["run_s"] == 0.5 * (3 * 20.0 + 40.0)


def test_a_kind_the_record_lacks_is_named_and_counted_not_priced(record):
    (task,), missing = record_cost.estimate(preset("kinds=[rope,alibi]"), record, {})
    assert missing == [f"{TASK} alibi"] and (task["runs"], task["search"], task["steps"]) == (6, 6, 12 * 4000)
    assert task["run_s"] == task["search_s"] == 3 * 20.0  # rope's three runs and three search cells only


def test_the_command_prints_the_table(record, tmp_path, capsys):
    record_cost.main(["--record", str(tmp_path), f"tasks=[{TASK}]", "task_kinds={}", "kinds=[rope,xpos]",
                      "seeds=[0,1,2]", "data_seeds=[0,1]", "search_runs=1", "search_data_seeds=[]"])
    out = capsys.readouterr().out
    assert f"| {TASK} | 6 | 6 | {12 * 4000:,} | {(180 + 180) / 7200:.2f} | 1 ({20 / 7200:.2f}) |" in out
    with pytest.raises(SystemExit):
        record_cost.main(["--record", str(tmp_path), "--scale", "text/copy=fast"])


def test_several_records_price_their_own_kinds(record, tmp_path, capsys):
    """--record repeated: each (task, kind) costs its own record's cells (the GPU preset: the standard record's tasks
    and the LM check's)."""
    other = tmp_path / "other"
    other.mkdir()
    append_rows(other / "results.csv", [row("alibi", s, s % 2, 60.0) for s in (0, 1, 2)])
    record_cost.main(["--record", str(tmp_path), "--record", str(other), f"tasks=[{TASK}]", "task_kinds={}",
                      "kinds=[rope,alibi]", "seeds=[0,1,2]", "data_seeds=[0,1]", "lr_search=[]"])
    out = capsys.readouterr().out
    assert f"| {TASK} | 6 | 0 | {6 * 4000:,} | {(3 * 20 + 3 * 60) / 7200:.2f} |" in out and "not priced" not in out
    with pytest.raises(SystemExit):  # the same (task, kind) in two records: whose cells price it?
        record_cost.main(["--record", str(tmp_path), "--record", str(tmp_path), f"tasks=[{TASK}]"])


def test_claim_kinds_only_keeps_the_compared_kinds_nope_and_claimless_tasks():
    cfg = load_bench_config(CONFIG_DIR / "standard.yaml", [])
    record_cost.claim_kinds_only(cfg)
    assert cfg.task_kinds[TASK] == ["none", "learned", "sinusoidal", "rope", "alibi", "relative"]  # Kazemnejad et al.
    assert "xpos" not in cfg.task_kinds["text/stdlib_lm"] and "fire" in cfg.task_kinds["text/stdlib_lm"]
    assert cfg.task_kinds["audio/tones"] == ["none", "learned", "sinusoidal", "rope"]  # no claim: whole
    assert cfg.task_kinds["coord/uniform"] == ["conv", "conv+coord"]  # the claim names conv+coord only; conv stays
