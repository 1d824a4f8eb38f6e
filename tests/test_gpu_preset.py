"""configs/bench/gpu.yaml, the GPU record: the claims' kinds at 30 runs on the tasks the judged claims are on, with
the CPU record's learning rates, in a run directory of its own; its path dry-run on the CPU."""
from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest
import yaml

from train import bench, provenance
from train.claims import compared_kinds
from train.results import Row, read_rows, write_rows
from train.settings import check_settings

from tests.test_bench import fake_search_cell

GPU = bench.CONFIG_DIR / "gpu.yaml"


def test_the_gpu_preset_powers_the_claims_only(tmp_path):
    cfg = bench.load_bench_config(GPU, [])
    assert cfg.device == "cuda" and len(cfg.seeds) >= 30 and len(set(cfg.data_seeds)) == len(cfg.seeds)
    assert cfg.order == "listed"  # a loan cut short keeps paired runs of its first tasks (test_bench: the order)
    for task in cfg.tasks:
        compared = compared_kinds(task)
        assert compared, f"{task}: no judged claim to power"
        kinds = set(bench.kinds_for(cfg, task))
        assert kinds <= compared | {"none", "conv", "conv+coord"} and compared <= kinds | {"none"}  # coord: its two nets
    cpu = [bench.load_bench_config(bench.CONFIG_DIR / name, []) for name in ("standard.yaml", "lm-check.yaml")]
    for task in cfg.tasks:  # each task as the CPU record that judges its claims trains it
        (record,) = [c for c in cpu if task in c.tasks]
        for key in ("dim", "depth", "heads", "batch_size", "test_items", "train_items"):
            assert getattr(cfg, key) == getattr(record, key), f"{key}: the GPU record trains the CPU record's protocol"
        assert cfg.steps_for(task) == record.steps_for(task), task
        assert cfg.items.get(task) == record.items.get(task) and cfg.models.get(task) == record.models.get(task), task
    assert {f"{c.name}/lr_choices.yaml" for c in cpu} == {Path(f).relative_to("benchmarks/results").as_posix()
                                                                 for f in cfg.lr_file} and not cfg.lr_search
    assert set(cpu[1].tasks) <= set(cfg.tasks)  # FIRE's and PoPE's claims are judged whole on the LM check's task
    assert (cfg.eval_batch_by_size, cfg.memory_budget_gib) == (cpu[1].eval_batch_by_size, cpu[1].memory_budget_gib)
    (tmp_path / "c.yaml").write_text("{}")
    here = [f"lr_file={tmp_path / 'c.yaml'}"]
    assert bench.fingerprint(bench.load_bench_config(GPU, here)) != bench.fingerprint(
        bench.load_bench_config(GPU, [*here, "device=cpu"])), "a CPU run directory refuses the GPU record's cells"


def test_the_gpu_record_dry_runs_on_the_cpu_and_resumes(tmp_path, capsys):
    """The preset's path with tiny sizes on the CPU: the CPU record's choices, every run of the claims' kinds,
    results in its own run directory; a second invocation (the next device loan) trains nothing again."""
    choices = tmp_path / "lr_choices.yaml"
    choices.write_text(yaml.safe_dump({"text/copy": {k: {"lr": 0.002, "weight_decay": 0.05}
                                                     for k in ("none", "learned", "sinusoidal", "rope", "alibi",
                                                               "relative")}}))
    tiny = ["tasks=[text/copy]", "device=cpu", "workers=1", "seeds=[0,1,2]", "data_seeds=[0,1,2]", "steps={}",
            "default_steps=2", "items={}", "train_items=64", "test_items=8", "batch_size=8", "dim=16", "heads=2",
            "depth=1", "rope_variants=[]", "curve_points=0", f"lr_file={choices}", f"out_root={tmp_path}"]
    cfg = bench.load_bench_config(GPU, tiny)
    bench.run(cfg, "test", cell_fn=fake_search_cell)
    rows = read_rows(tmp_path / "gpu-v3" / "results.csv")
    assert {r.kind for r in rows if r.kind != "floor"} == set(bench.kinds_for(cfg, "text/copy"))
    assert {r.lr for r in rows if r.kind != "floor"} == {0.002}
    assert {r.run for r in rows if r.kind == "rope" and r.variant == "-"} == {(0, 0), (1, 1), (2, 2)}
    assert {r.device for r in rows} == {"cpu"}  # every row says where it ran
    capsys.readouterr()
    bench.run(cfg, "test", cell_fn=fake_search_cell)
    out = capsys.readouterr().out
    assert f"({len(bench.cells_for(cfg))} already done)" in out
    assert len(read_rows(tmp_path / "gpu-v3" / "results.csv")) == len(rows)
    with pytest.raises(bench.ConfigError, match="other settings"):
        check_settings(bench.load_bench_config(GPU, [*tiny, "device=cuda"]), tmp_path / "gpu-v3")


def test_a_record_holds_one_devices_rows(tmp_path):
    """Rows of the other device class in the run directory: refused before anything runs or is set aside (a GPU
    record never takes CPU rows, nor the other way round); rows from before the column existed ("") and another GPU
    model (a later device loan) are not refused."""
    cfg = bench.load_bench_config(bench.CONFIG_DIR / "quick.yaml", [f"out_root={tmp_path}", "tasks=[text/copy]"])
    results = tmp_path / cfg.name / "results.csv"
    results.parent.mkdir(parents=True)
    row = Row("text", "text/copy", "rope", "-", 0, "16", "16", 1.0, "seq_acc", 1.0, True, 1.0)
    write_rows(results, [row, dataclasses.replace(row, seed=1, device="NVIDIA H200")])
    with pytest.raises(bench.ConfigError, match="holds rows run on NVIDIA H200; this invocation runs on cpu"):
        bench.run(cfg, "test", cell_fn=fake_search_cell)
    with pytest.raises(bench.ConfigError, match="holds rows run on NVIDIA H200"):
        bench.set_aside(cfg, "text/copy")
    assert len(read_rows(results)) == 2  # nothing written, nothing moved
    write_rows(results, [row])  # a record from before the column: continued, its new rows say cpu
    bench.run(cfg, "test", cell_fn=fake_search_cell)
    assert {r.device for r in read_rows(results)} == {"", "cpu"}
    provenance.check_device([dataclasses.replace(row, device="NVIDIA A100")], "NVIDIA H200", results)  # GPU on GPU
    with pytest.raises(bench.ConfigError, match="holds rows run on cpu; this invocation runs on NVIDIA H200"):
        provenance.check_device([dataclasses.replace(row, device="cpu")], "NVIDIA H200", results)


def test_ray_cells_are_labelled_by_what_they_ask_for():
    """Ray's cells run on the cluster, not the driver: a GPU when they ask for one, whatever the driver has."""
    assert provenance.device_label("cuda", "ray", 0.5) == "cuda (ray)"
    assert provenance.device_label("auto", "ray", 0) == provenance.device_label("cpu", "ray", 1) == "cpu"
