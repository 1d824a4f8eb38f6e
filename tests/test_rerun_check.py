"""benchmarks/rerun_check.py: a rerun's rows against the record's (a changed value and a missing row are found), and
its time against the record's price, on a two-run record whose sums are worked out by hand."""
from __future__ import annotations

import dataclasses
import json
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import rerun_check  # noqa: E402

from train.bench import CONFIG_DIR, load_bench_config  # noqa: E402
from train.results import SEARCH, Row, append_rows  # noqa: E402

TASK = "text/copy"


def row(seed: int, seconds: float, *, variant: str = "-", value: float = 0.5, lr: float = 0.001) -> Row:
    return Row("text", TASK, "rope", variant, seed, "8L", "8L", 1.0, "seq_acc", value, True, seconds,
               data_seed=seed % 2, split="val" if variant == SEARCH else "test", lr=lr, weight_decay=0.05)


def run_dir(path: Path, times: tuple[float, float, float], value: float = 0.5, wall_s: float | None = None) -> Path:
    """A run directory: rope's two runs and its one search point, the preset that asks for them."""
    path.mkdir()
    append_rows(path / "results.csv", [row(0, times[0]), row(1, times[1], value=value),
                                       row(1000, times[2], variant=SEARCH)])
    cfg = load_bench_config(CONFIG_DIR / "standard.yaml", [
        f"tasks=[{TASK}]", "task_kinds={}", "kinds=[rope]", "seeds=[0,1]", "data_seeds=[0,1]", "other_runs=null",
        "lr_search=[0.001]", "lr_searches={}", "workers=2", "search_runs=1", "search_data_seeds=[]"])
    (path / "bench_config.yaml").write_text(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
    if wall_s is not None:
        lines = [{"command": "train.bench", "id": "a", "status": "started"},
                 {"command": "train.bench", "id": "a", "status": "finished", "wall_s": wall_s}]
        (path / "invocations.jsonl").write_text("".join(json.dumps(line) + "\n" for line in lines))
    return path


def test_identical_rows_pass_and_the_time_is_set_against_the_price(tmp_path, capsys):
    record = run_dir(tmp_path / "record", (10.0, 30.0, 99.0))
    rerun = run_dir(tmp_path / "rerun", (14.0, 30.0, 100.0), wall_s=90.0)  # its median run 22 s
    assert rerun_check.compare(record, rerun) == (3, 3, [], {TASK})
    t = rerun_check.timing(record, rerun)
    assert t["cells"] == 3 and t["wall_h"] == 90.0 / 3600
    assert abs(t["train_h"] - (14.0 + 30.0 + 100.0) / 7200) < 1e-12  # three cells over two workers
    assert abs(t["priced_h"] - 3 * 20.0 / 7200) < 1e-12  # two runs and one search point at the record's median run, 20 s
    assert t["priced_extension_h"] == 0.0
    assert rerun_check.main(["--record", str(record), "--rerun", str(rerun)]) == 0
    assert "(overhead 25.0%)" in capsys.readouterr().out  # 90 s of wall against 72 s of training per worker


def test_a_changed_value_and_a_missing_row_fail(tmp_path):
    record = run_dir(tmp_path / "record", (10.0, 30.0, 99.0))
    append_rows(record / "results.csv", [row(2, 5.0)])  # a run the rerun lacks
    rerun = run_dir(tmp_path / "rerun", (10.0, 30.0, 99.0), value=0.25, wall_s=60.0)
    compared, same, problems, _ = rerun_check.compare(record, rerun)
    assert (compared, same) == (3, 2)
    assert any(p.startswith("only in the record") for p in problems)
    assert any("value '0.5' (record) != '0.25' (rerun)" in p for p in problems)
    assert rerun_check.main(["--record", str(record), "--rerun", str(rerun)]) == 1
