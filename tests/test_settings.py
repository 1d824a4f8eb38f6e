"""Settings per task (train/settings.py): raising one task's budget leaves the others resumable, its old rows are set
aside (never deleted) before it trains anew; and the plateau rule's tolerance on the metric's span (train/curves.py)."""
from __future__ import annotations

import json

import pytest

from train import bench
from train.curves import budget_verdict, tolerance
from train.results import read_rows
from train.settings import FINGERPRINTS, SUPERSEDED, changed_tasks, task_fingerprint

from tests.test_bench import fake_search_cell, tiny
from tests.test_search_curves import curve_cell

TWO = ("tasks=[text/copy,text/reverse]", "kinds=[rope]", "rope_variants=[]", "lr_search=[0.002]", "lr_extend=0",
       "curve_points=5", "default_steps=10")


def test_a_task_hash_follows_its_own_entries_and_the_global_keys_only(tmp_path):
    cfg = tiny(tmp_path, *TWO)
    raised = tiny(tmp_path, *TWO, "steps={text/copy: 20}")
    assert task_fingerprint(raised, "text/copy") != task_fingerprint(cfg, "text/copy")
    assert task_fingerprint(raised, "text/reverse") == task_fingerprint(cfg, "text/reverse")
    assert task_fingerprint(tiny(tmp_path, *TWO, "batch_size=4"), "text/reverse") != task_fingerprint(cfg, "text/reverse")
    assert task_fingerprint(tiny(tmp_path, *TWO, "tasks=[text/copy]"), "text/copy") == task_fingerprint(cfg, "text/copy")


def test_a_raised_task_is_refused_until_set_aside_then_trains_anew_and_the_old_rows_stay(tmp_path, capsys):
    cfg = tiny(tmp_path, *TWO)
    run_dir = tmp_path / "quick"
    bench.run(cfg, "test", cell_fn=curve_cell(False))
    before = read_rows(run_dir / "results.csv")
    assert json.loads((run_dir / FINGERPRINTS).read_text()).keys() == set(bench.TASKS)  # the whole preset, once
    raised = tiny(tmp_path, *TWO, "steps={text/copy: 20}")
    with pytest.raises(bench.ConfigError, match=r"of text/copy trained with other settings.*--supersede text/copy"):
        bench.run(raised, "test", cell_fn=fake_search_cell)
    assert changed_tasks(raised, run_dir) == ["text/copy"]
    capsys.readouterr()
    bench.run(tiny(tmp_path, *TWO, "steps={text/copy: 20}", "tasks=[text/reverse]"), "test", cell_fn=fake_search_cell)
    assert "3 cells (3 already done)" in capsys.readouterr().out  # the unchanged task resumes: search, floor, run
    overrides = [*TWO, "steps={text/copy: 20}", f"out_root={tmp_path}"]
    with pytest.raises(SystemExit):  # only a changed task is set aside
        bench.main(["--config", str(bench.CONFIG_DIR / "quick.yaml"), "--supersede", "text/reverse",
                    *[o for o in tiny_overrides() if not o.startswith("out_root")], *overrides])
    assert "its settings are unchanged" in capsys.readouterr().err
    assert read_rows(run_dir / "results.csv") == before
    bench.main(["--config", str(bench.CONFIG_DIR / "quick.yaml"), "--supersede", "text/copy",
                *[o for o in tiny_overrides() if not o.startswith("out_root")], *overrides])
    aside = list((run_dir / SUPERSEDED).iterdir())
    assert len(aside) == 1 and aside[0].name.startswith("text_copy-")
    old = [r for r in before if r.task == "text/copy"]
    assert read_rows(aside[0] / "results.csv") == old
    assert (aside[0] / "curves" / "text_copy.jsonl").exists()
    after = read_rows(run_dir / "results.csv")
    assert [r for r in after if r.task == "text/reverse"] == [r for r in before if r.task == "text/reverse"]
    assert {r.cell for r in after if r.task == "text/copy"} == {r.cell for r in old}  # trained anew
    assert "text/copy" in (run_dir / "report.md").read_text().split("set aside when")[0].split(SUPERSEDED)[-1]
    assert changed_tasks(raised, run_dir) == []


def tiny_overrides() -> list[str]:
    from tests.test_bench import TINY

    return list(TINY)


def test_a_run_directory_without_task_hashes_is_checked_by_the_whole_preset_and_then_gets_them(tmp_path):
    cfg = tiny(tmp_path, *TWO)
    run_dir = tmp_path / "quick"
    bench.run(cfg, "test", cell_fn=fake_search_cell)
    (run_dir / FINGERPRINTS).unlink()  # as written before per-task hashes
    with pytest.raises(bench.ConfigError, match="text/copy, text/reverse trained with other settings"):
        bench.run(tiny(tmp_path, *TWO, "steps={text/copy: 20}"), "test", cell_fn=fake_search_cell)
    bench.run(tiny(tmp_path, *TWO, "tasks=[text/reverse]"), "test", cell_fn=fake_search_cell)  # a selection
    assert changed_tasks(tiny(tmp_path, *TWO, "steps={text/copy: 20}"), run_dir) == ["text/copy"]  # all recorded


def test_the_plateau_tolerance_is_a_share_of_the_metrics_span():
    """A coordinate error falling geometrically far under the mean predictor's (0.68): the old 1 %-of-itself
    tolerance held it back; 1 % of the span lets it through. Accuracy keeps 0.01, perplexity 1 % of itself."""
    falling = [(60, 0.35), (120, 0.06), (180, 0.017), (240, 0.0097), (300, 0.0091), (360, 0.0065), (420, 0.0058),
               (480, 0.005), (540, 0.0047), (600, 0.0046)]
    curves = [{"kind": "conv", "points": [[s, 0.0, v, 0.0] for s, v in falling]}]
    assert budget_verdict(curves, 600, higher=False, metric="coord_err", chance=0.68) == (True, 240)
    assert budget_verdict(curves, 600, higher=False, metric="ppl") == (False, 600)  # 1 % of itself: still falling
    assert tolerance("acc") == (0.01, False) and tolerance("ppl") == (0.01, True)
    with pytest.raises(ValueError, match="needs its chance floor 'mean-predictor'"):
        tolerance("coord_err")


@pytest.mark.parametrize("preset, record", [("standard.yaml", "standard-v3"), ("lm-check.yaml", "lm-check-v3")])
def test_the_committed_records_resume_under_their_presets(preset, record):
    """A key that says how cells are run, not what they measure (order, workers, ...), must not change the settings
    hash: the committed records' presets still name their rows' settings, so a rerun continues them."""
    cfg = bench.load_bench_config(bench.CONFIG_DIR / preset, [])
    assert changed_tasks(cfg, bench.CONFIG_DIR.parents[1] / "benchmarks" / "results" / record) == []
