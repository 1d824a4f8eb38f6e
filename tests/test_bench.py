"""The benchmark driver: a tiny end-to-end run, resume without redoing cells, failures reported, strict presets."""
from __future__ import annotations

import pytest
import yaml

from train import bench
from train.config import ConfigError
from train.cells import cells_for
from train.invocation import dispatch_order, plan
from train.results import SEARCH, SEARCH_LOSS, read_rows

# the quick preset's per-task steps and items (text/copy: 1,000 steps on 16,384 items) are cleared, so that
# default_steps and train_items hold for every task
TINY = ["tasks=[text/copy]", "kinds=[none,rope]", "task_kinds={}", "seeds=[0]", "workers=1", "default_steps=2", "steps={}",
        "train_items=64", "items={}", "test_items=8", "batch_size=8", "dim=16", "heads=2", "depth=1", "rope_variants=[pi]",
        "lr_file=null"]


def tiny(tmp_path, *extra):
    return bench.load_bench_config(bench.CONFIG_DIR / "quick.yaml", [*TINY, f"out_root={tmp_path}", *extra])


def test_tiny_run_writes_results_and_report_then_resumes(tmp_path, monkeypatch):
    cfg = tiny(tmp_path)
    report = bench.run(cfg, "test")
    all_rows = read_rows(tmp_path / "quick" / "results.csv")
    rows = [r for r in all_rows if r.kind != bench.FLOOR and r.split == "test"]
    # 2 kinds x 3 test sizes, plus the rope (pi) variant at the 2 larger sizes
    assert len(rows) == 2 * 3 + 2
    assert {r.size_ratio for r in rows} == {1.0, 1.5, 2.0}
    assert {(r.kind, r.variant) for r in rows} == {("none", "-"), ("rope", "-"), ("rope", "pi")}
    assert all(0.0 <= r.value <= 1.0 and r.metric == "seq_acc" for r in rows)
    in_dist = sorted((r.kind, r.split) for r in all_rows if r.split != "test")  # training error logged per run
    assert in_dist == [("none", "train"), ("none", "val"), ("rope", "train"), ("rope", "val")]
    floors = [r for r in all_rows if r.kind == bench.FLOOR]  # from the data: one row per floor and test size
    assert sorted((r.variant, r.size_ratio) for r in floors) == sorted(
        (v, s) for v in ("chance", "most-common-symbol", "order-blind") for s in (1.0, 1.5, 2.0))
    assert all(r.seed == r.data_seed == cfg.data_seeds[0] for r in floors)
    text = report.read_text()
    assert "### text/copy" in text and "rope (pi)" in text and "Kazemnejad" in text and "floor: order-blind" in text
    cell_log = tmp_path / "quick" / "cells" / "text_copy_rope_0_d0" / "log.jsonl"
    assert cell_log.exists() and (cell_log.parent / "console.log").exists()  # each cell's own log

    def must_not_run(args):
        raise AssertionError(f"finished cell {args[1:4]} was run again")

    monkeypatch.setattr(bench, "run_cell", must_not_run)
    bench.run(cfg, "test")  # every cell is in results.csv: nothing is retrained
    assert len(read_rows(tmp_path / "quick" / "results.csv")) == len(all_rows)


def test_console_shows_one_line_per_cell(tmp_path, capsys):
    bench.run(tiny(tmp_path), "test")
    lines = capsys.readouterr().out.splitlines()
    assert not [line for line in lines if line.lstrip().startswith("{")], "training JSON went to the console"
    done = [line for line in lines if line.startswith("[")]
    assert len(done) == 3 and all("ETA" in line for line in done)  # floor + 2 kinds


def test_runs_spread_over_data_seeds(tmp_path):
    """Run i trains with seed i on data seed data_seeds[i % n]; each data seed gets its own floor cell."""
    cfg = tiny(tmp_path, "seeds=[0,1,2]", "data_seeds=[5,7]")
    assert bench.runs(cfg) == [(0, 5), (1, 7), (2, 5)]
    cells = bench.cells_for(cfg)
    configs = {c: bench.train_config(cfg, bench.TASKS[c.task], bench.data_cell(c), tmp_path) for c in cells}
    assert {(c.kind, c.seed, cf.data.seed) for c, cf in configs.items() if c.kind == bench.FLOOR} == {
        (bench.FLOOR, 5, 5), (bench.FLOOR, 7, 7)}
    assert {(cf.train.seed, cf.data.seed) for c, cf in configs.items() if c.kind == "rope"} == {(0, 5), (1, 7), (2, 5)}


def test_task_kinds_select_per_task():
    cfg = bench.load_bench_config(bench.CONFIG_DIR / "quick.yaml", [
        "tasks=[text/copy,text/stdlib_lm]", "seeds=[0]", "kinds=[none]", "task_kinds={text/copy: [rope, alibi]}"])
    cells = bench.cells_for(cfg)
    assert [c.kind for c in cells if c.task == "text/copy"] == [bench.FLOOR, "rope", "alibi"]
    assert [c.kind for c in cells if c.task == "text/stdlib_lm"] == [bench.FLOOR, "none"]
    with pytest.raises(ConfigError, match="unknown task"):
        bench.load_bench_config(bench.CONFIG_DIR / "quick.yaml", ["task_kinds={text/cpy: [rope]}"])


def test_a_failing_cell_is_reported_and_the_others_finish(tmp_path, monkeypatch):
    real = bench.run_cell

    def flaky(args):
        if args[1].kind == "rope":
            raise RuntimeError("boom")
        return real(args)

    monkeypatch.setattr(bench, "run_cell", flaky)
    with pytest.raises(SystemExit):
        bench.run(tiny(tmp_path), "test")
    rows = read_rows(tmp_path / "quick" / "results.csv")
    assert {r.kind for r in rows} == {"none", bench.FLOOR}
    assert "text/copy rope seed 0 data 0: RuntimeError: boom" in (tmp_path / "quick" / "report.md").read_text()


@pytest.mark.parametrize("override,fragment", [
    ("tasks=[image/imagenet]", "unknown task"),
    ("task_kinds={text/copy: rope}", r"task_kinds\['text/copy'\] must be a list of kinds"),
    ("lrs={text/copy: .nan}", r"lrs\['text/copy'\] must be a finite number > 0"),
    ("lrs={text/cpy: 0.1}", r"lrs names unknown task"),
    ("steps={text/copy: 0}", r"steps\['text/copy'\] must be an int >= 1"),
    ("data_seeds=[-3]", "data_seeds must be >= 0"),
    ("data_seeds=[]", "data_seeds not empty"),
    ("lr_search=[0.0]", "lr_search must hold finite numbers > 0"),
    ("lr_searches={text/copy: [0.001, -1]}", r"lr_searches\['text/copy'\] must be a list of numbers > 0"),
    ("items={text/copy: 0}", r"items\['text/copy'\] must be an int >= 1"),
    ("kinds=[ropee]", "unknown kind"),
    ("rope_variants=[xpos]", "unknown rope_variants"),
    ("seeds=zero", "seeds"),
    ("stepz=3", "unknown config key"),
])
def test_bad_preset_values_are_named(override, fragment):
    with pytest.raises(ConfigError, match=fragment):
        bench.load_bench_config(bench.CONFIG_DIR / "quick.yaml", [override])


def test_cells_skip_kinds_that_do_not_apply():
    cfg = bench.load_bench_config(bench.CONFIG_DIR / "quick.yaml", ["tasks=[text/copy,coord/uniform]", "seeds=[0]"])
    cells = bench.cells_for(cfg)
    assert "rope-mixed" not in {c.kind for c in cells if c.task == "text/copy"}  # rope-mixed is 2D/3D only
    assert [c.kind for c in cells if c.task == "coord/uniform"] == [bench.FLOOR, "conv", "conv+coord"]


def test_other_runs_cut_only_the_kinds_no_judged_claim_compares():
    cfg = bench.load_bench_config(bench.CONFIG_DIR / "standard.yaml",
                                  ["tasks=[text/copy,text/stdlib_lm]", "task_kinds={}", "kinds=[rope,xpos,cope]",
                                   "seeds=[0,1,2]", "data_seeds=[0,1]", "other_runs=1"])
    runs = {(t, k): [(c.seed, c.data_seed) for c in bench.cells_for(cfg) if (c.task, c.kind) == (t, k)]
            for t in cfg.tasks for k in ("rope", "xpos", "cope", bench.FLOOR)}
    assert runs["text/copy", "rope"] == runs["text/stdlib_lm", "rope"] == [(0, 0), (1, 1), (2, 0)]  # claims compare rope
    assert runs["text/copy", "xpos"] == [(0, 0)]  # no claim on copy names xpos
    assert runs["text/copy", "cope"] == [(0, 0)]  # Golovneva et al.'s claim is `not tested`: it compares nothing
    assert runs["text/stdlib_lm", "xpos"] == [(0, 0)]  # Sun et al.'s too
    assert runs["text/copy", bench.FLOOR] == [(0, 0), (1, 1)]  # the floors of every data seed the runs use
    full = bench.load_bench_config(bench.CONFIG_DIR / "standard.yaml", ["tasks=[text/copy]", "task_kinds={}",
                                                                        "kinds=[xpos]", "seeds=[0,1,2]", "data_seeds=[0,1]"])
    assert len(bench.cells_for(full)) == 2 + 3 and bench.fingerprint(full) == bench.fingerprint(cfg)  # a selection


@pytest.mark.parametrize("value", ["0", "-1", "2.5", "five"])
def test_other_runs_must_be_a_positive_int(value):
    with pytest.raises(ConfigError, match="other_runs (must be null or an int >= 1|expects int)"):
        bench.load_bench_config(bench.CONFIG_DIR / "quick.yaml", [f"other_runs={value}"])


def test_causal_only_kinds_run_on_causal_tasks_only(monkeypatch):
    import ndpe

    causal_only = [k for k in ndpe.available() if ndpe.registry.kind_class(k).causal_only]
    assert causal_only, "expected a causal-only kind (cope)"
    cfg = bench.load_bench_config(bench.CONFIG_DIR / "full.yaml", ["seeds=[0]"])
    assert set(causal_only) <= set(bench.kinds_for(cfg, "text/copy"))  # a causal task
    bidirectional = bench.Task("text/tag-test", "copy", "text", 1, "length", 8, (8,), "acc", True,
                               bench.TASKS["text/copy"].bar, "L")
    monkeypatch.setitem(bench.TASKS, "text/tag-test", bidirectional)
    kinds = bench.kinds_for(cfg, "text/tag-test")
    assert "rope" in kinds and not set(causal_only) & set(kinds)


def test_presets_load():
    for path in sorted(bench.CONFIG_DIR.glob("*.yaml")):
        assert bench.cells_for(bench.load_bench_config(path, []))


def test_resume_refuses_other_settings_and_reports_only_the_selection(tmp_path):
    bench.run(tiny(tmp_path), "test")
    with pytest.raises(ConfigError, match="other settings"):
        bench.run(tiny(tmp_path, "dim=32"), "test")  # same run name, other model: never mixed
    report = bench.run(tiny(tmp_path, "kinds=[none]"), "test")  # a sub-selection: nothing retrained
    text = report.read_text()
    assert "| none" in text and "| rope" not in text


def test_a_task_model_overrides_the_preset_model(tmp_path):
    """``models: {task: {dim, depth}}`` replaces the preset's model for that task only (the standard LM)."""
    from train.protocol import TASKS

    cfg = tiny(tmp_path, "dim=32", "depth=2", "models={text/copy: {dim: 64, depth: 3}}")
    cell = bench.CellSpec(task="text/copy", kind="rope", seed=0, data_seed=0)
    model = bench.train_config(cfg, TASKS["text/copy"], cell, tmp_path).model
    assert (model.dim, model.depth, model.heads) == (64, 3, cfg.heads)


def test_data_workers_reach_the_cells_loaders_and_only_change_the_fingerprint_when_set(tmp_path):
    from train.protocol import TASKS

    cell = bench.CellSpec(task="text/copy", kind="rope", seed=0, data_seed=0)
    plain, workers = tiny(tmp_path), tiny(tmp_path, "data_workers=3")
    assert bench.train_config(workers, TASKS["text/copy"], cell, tmp_path).data.num_workers == 3
    assert bench.train_config(plain, TASKS["text/copy"], cell, tmp_path).data.num_workers == 0
    assert bench.fingerprint(workers) != bench.fingerprint(plain)
    assert bench.fingerprint(tiny(tmp_path, "download=true")) == bench.fingerprint(plain)  # how to run, not what


def test_the_header_gives_each_kinds_option_values_for_the_run_grids(tmp_path):
    """CoPE's max_pos covers the largest test sequence of this run (3 x 8 tokens at 2L), shown as a value."""
    cfg = tiny(tmp_path, "kinds=[cope]")
    text = bench.header(cfg, {"command": "test", "date": "today", "wall_s": 1})
    train_grid, max_grid = bench.cell_grids(cfg, bench.TASKS["text/copy"], tmp_path / "quick")
    assert f"| text/copy | cope | max_pos={max_grid[0]} |" in text and max_grid[0] > train_grid[0]


def test_scaled_rope_keeps_the_trained_options():
    import ndpe

    pe = ndpe.make(dims=2, kind="rope", dim=32, heads=2, theta=100.0, pairing="interleaved", axis_dims=(4, 8)).eval()
    scaled = bench.scaled_rope(pe, "yarn", (4, 4), (8, 6))
    assert (scaled.theta, scaled.pairing, scaled.axis_dims) == (pe.theta, pe.pairing, pe.axis_dims)
    assert scaled.scaling == "yarn" and scaled.scale == (2.0, 1.5) and not scaled.training


def test_damaged_cache_file_is_named_and_regenerated(tmp_path):
    import torch

    from train.cache import cached_dataset, materialize

    opts = {"length": 4, "size": 8}
    path = materialize("copy", "val", seed=0, opts=opts, cache_dir=tmp_path)
    good = torch.load(path, weights_only=True)["x"]
    data = path.read_bytes()
    for cut in (0, 10, len(data) // 2, len(data) - 1):
        path.write_bytes(data[:cut])
        with pytest.warns(UserWarning, match=f"cache file {path} is damaged"):
            back = cached_dataset("val", seed=0, root=None, dataset="copy", cache=str(tmp_path), **opts)
        assert torch.equal(back.x, good)


def test_a_run_directory_of_other_settings_is_one_line_at_the_cli(tmp_path, capsys):
    bench.run(tiny(tmp_path), "test")
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--quick", *TINY, f"out_root={tmp_path}", "dim=32"])
    err = capsys.readouterr().err.strip().splitlines()
    assert exit_info.value.code == 2 and "other settings" in err[-1] and not any("Traceback" in line for line in err)


def test_learning_rate_search_chooses_on_validation_then_trains_every_run(tmp_path):
    """Each kind trains once per candidate (the search seed, first data seed); its runs then use the best on val."""
    cfg = tiny(tmp_path, "lr_search=[0.001,0.01]", "seeds=[0,1]", "rope_variants=[]", "default_steps=1")
    bench.run(cfg, "test")
    rows = read_rows(tmp_path / "quick" / "results.csv")
    search = [r for r in rows if r.variant == SEARCH]
    assert {(r.kind, r.lr) for r in search} >= {("none", 0.001), ("none", 0.01), ("rope", 0.001), ("rope", 0.01)}
    assert all(r.split in ("val", SEARCH_LOSS) and r.seed == cfg.search_seed not in cfg.seeds for r in search)
    for kind in ("none", "rope"):  # ties of the metric (1 step: often all 0) go to the lower validation loss
        vals = {r.lr: r.value for r in search if r.kind == kind and r.split == "val"}
        loss = {r.lr: r.value for r in search if r.kind == kind and r.split == SEARCH_LOSS}
        best = max(sorted(vals), key=lambda lr: (vals[lr], -loss[lr], -lr))
        assert {r.lr for r in rows if r.kind == kind and r.variant != SEARCH} == {best}
    import yaml

    choices = yaml.safe_load((tmp_path / "quick" / "lr_choices.yaml").read_text())
    assert set(choices["text/copy"]) == {"none", "rope"}
    reuse = tiny(tmp_path, "name=reuse", f"lr_file={tmp_path / 'quick' / 'lr_choices.yaml'}")
    chosen = bench.choices(reuse, [])
    assert chosen[("text/copy", "rope")] == (choices["text/copy"]["rope"]["lr"],
                                             choices["text/copy"]["rope"]["weight_decay"])


@pytest.mark.parametrize("task", sorted(bench.TASKS))
def test_models_say_the_grid_the_encoder_sees(task):
    """models.grid_shape(config, input shape) equals the grid the encoder is called with in a forward pass."""
    import torch

    from models import build_model, grid_shape

    t = bench.TASKS[task]
    if t.conv:
        return
    shapes = {"vit": (t.model_opts.get("in_chans", 3), 32, 48), "audio": (1, 64, 151), "video": (3, 12, 16, 24),
              "text": (19,)}
    cfg = {"name": t.model, "num_classes": 4, "dim": 16, "depth": 1, "heads": 2, "pe": {"kind": "none"},
           **({"vocab_size": 13} if t.model == "text" else {}), **t.model_opts}
    model = build_model(cfg).eval()
    seen = {}
    model.encoder.register_forward_pre_hook(lambda m, args: seen.update(grid=tuple(args[1])))  # returns None
    x = torch.randint(0, 13, shapes["text"]) if t.model == "text" else torch.randn(shapes[t.model])
    with torch.no_grad():
        model(x[None])
    assert grid_shape(cfg, x.shape) == tuple(int(n) for n in seen["grid"])


def test_a_failed_search_point_leaves_its_kind_untrained_and_reported(tmp_path, monkeypatch):
    """A kind whose search did not finish is not trained at some other learning rate: its runs fail, named."""
    real = bench.run_cell

    def flaky(args):
        if args[1].kind == "rope" and args[1].search and args[1].lr == 0.01:
            raise FloatingPointError("loss is nan")
        return real(args)

    monkeypatch.setattr(bench, "run_cell", flaky)
    with pytest.raises(SystemExit):
        bench.run(tiny(tmp_path, "lr_search=[0.001,0.01]", "rope_variants=[]", "default_steps=1"), "test")
    rows = read_rows(tmp_path / "quick" / "results.csv")
    assert not [r for r in rows if r.kind == "rope" and r.variant != SEARCH], "rope trained without a choice"
    assert [r for r in rows if r.kind == "none" and r.variant == "-"], "the other kind still trains"
    assert "text/copy rope: no learning rate chosen" in (tmp_path / "quick" / "report.md").read_text()


def test_choices_come_from_several_files_each_pair_in_one(tmp_path):
    """lr_file as a list (the GPU record: the standard record's and the LM check's searches)."""
    a, b = tmp_path / "a.yaml", tmp_path / "b.yaml"
    a.write_text("text/copy: {rope: {lr: 0.001, weight_decay: 0.05}}\n")
    b.write_text("text/reverse: {rope: {lr: 0.004, weight_decay: 0.01}}\n")
    assert bench.choices(tiny(tmp_path, f"lr_file=[{a},{b}]"), []) == {
        ("text/copy", "rope"): (0.001, 0.05), ("text/reverse", "rope"): (0.004, 0.01)}
    b.write_text("text/copy: {rope: {lr: 0.004, weight_decay: 0.05}}\n")
    with pytest.raises(ConfigError, match="text/copy rope is chosen in both"):
        bench.choices(tiny(tmp_path, f"lr_file=[{a},{b}]"), [])


def test_the_fingerprint_holds_the_choice_files_values(tmp_path):
    path = tmp_path / "choices.yaml"
    path.write_text("text/copy: {rope: {lr: 0.001, weight_decay: 0.05}}\n")
    first = bench.fingerprint(tiny(tmp_path, f"lr_file={path}"))
    path.write_text("text/copy: {rope: {lr: 0.004, weight_decay: 0.05}}\n")
    assert bench.fingerprint(tiny(tmp_path, f"lr_file={path}")) != first


def test_a_nope_label_trains_the_text_model_with_position_free_blocks(tmp_path):
    """``rope+nope2`` (iRoPE): the cell's model has every 2nd block position-free; tasks of other models skip it."""
    cfg = tiny(tmp_path, "tasks=[text/copy,video/trajectory]", "kinds=[rope+nope2]", "task_kinds={}", "seeds=[0]")
    assert bench.kinds_for(cfg, "video/trajectory") == []
    bench.run(cfg, "test")
    rows = [r for r in read_rows(tmp_path / "quick" / "results.csv") if r.kind == "rope+nope2"]
    assert {r.task for r in rows} == {"text/copy"} and {r.split for r in rows} == {"train", "val", "test"}
    saved = yaml.safe_load(next((tmp_path / "quick" / "cells").glob("text_copy_rope+nope2_*/config.yaml")).read_text())
    assert saved["model"]["nope_every"] == 2 and saved["model"]["pe"]["kind"] == "rope"


def fake_search_cell(args):
    """A cell that trains nothing: search points score ``-(log2(lr / 0.016))^2`` (best at 0.016), runs score 0.5."""
    import math

    cfg, cell, _ = args
    task = bench.TASKS[cell.task]
    if cell.kind == bench.FLOOR:
        return [bench.cell_row(task, cell, "chance", size, 0.0, 0.0) for size in task.test_sizes], 0.0, None
    if cell.search:
        return [bench.cell_row(task, cell, SEARCH, task.train_size, -math.log2(cell.lr / 0.016) ** 2, 0.0, split="val")], 0.0, None
    return [bench.cell_row(task, cell, "-", size, 0.5, 0.0) for size in task.test_sizes], 0.0, None


def test_the_search_extends_its_grid_until_the_choice_is_interior(tmp_path):
    cfg = tiny(tmp_path, "lr_search=[0.001,0.002,0.004]", "kinds=[rope]", "rope_variants=[]")
    bench.run(cfg, "test", cell_fn=fake_search_cell)
    rows = read_rows(tmp_path / "quick" / "results.csv")
    assert sorted(r.lr for r in rows if r.variant == SEARCH) == [0.001, 0.002, 0.004, 0.008, 0.016, 0.032]
    assert {r.lr for r in rows if r.variant == "-"} == {0.016}
    search = (tmp_path / "quick" / "report.md").read_text().split("## Learning-rate search")[1]
    assert [line for line in search.splitlines() if line.startswith("| text/copy | rope |") and "⚑" not in line]


def test_a_task_can_have_its_own_first_grid(tmp_path):
    """lr_searches: the task's grid replaces lr_search (here placed round its optimum, 0.016) and is extended as any
    grid; the settings fingerprint is the one without the key until a task has a grid of its own."""
    cfg = tiny(tmp_path, "lr_search=[0.001,0.002,0.004]", "kinds=[rope]", "rope_variants=[]",
               "lr_searches={text/copy: [0.008, 0.016]}")
    assert [c.lr for c in bench.search_cells(cfg)] == [0.008, 0.016]
    bench.run(cfg, "test", cell_fn=fake_search_cell)
    rows = read_rows(tmp_path / "quick" / "results.csv")
    assert sorted(r.lr for r in rows if r.variant == SEARCH) == [0.008, 0.016, 0.032]  # 0.016 made interior
    assert {r.lr for r in rows if r.variant == "-"} == {0.016}
    plain = tiny(tmp_path, "lr_search=[0.001,0.002,0.004]", "kinds=[rope]", "rope_variants=[]")
    assert bench.fingerprint(tiny(tmp_path, "lr_search=[0.001,0.002,0.004]", "kinds=[rope]", "rope_variants=[]",
                                  "lr_searches={}")) == bench.fingerprint(plain) != bench.fingerprint(cfg)
    # lr_search=[] turns the search off (a choice file or lr gives the rates): a preset's per-task grids go with it
    assert bench.search_cells(tiny(tmp_path, "lr_search=[]", "lr_searches={text/copy: [0.008]}")) == []


def test_the_search_stops_at_the_end_of_its_range_and_says_so(tmp_path):
    cfg = tiny(tmp_path, "lr_search=[0.001,0.002]", "kinds=[rope]", "rope_variants=[]", "lr_range=[0.0001,0.004]")
    bench.run(cfg, "test", cell_fn=fake_search_cell)
    rows = read_rows(tmp_path / "quick" / "results.csv")
    assert sorted(r.lr for r in rows if r.variant == SEARCH) == [0.001, 0.002, 0.004]  # 0.008 is past the range
    assert {r.lr for r in rows if r.variant == "-"} == {0.004}
    search = (tmp_path / "quick" / "report.md").read_text().split("## Learning-rate search")[1]
    assert [line for line in search.splitlines() if line.startswith("| text/copy | rope |") and line.endswith("⚑ |")]


def test_the_search_scores_copy_at_exactly_the_training_length(tmp_path, monkeypatch):
    """Copy's bar is exact match at exactly L; validation draws lengths 1..L: the search is scored as the bar."""
    import train.main as main

    seen, real = [], main.evaluate_model

    def spy(model, tcfg, split="test", data=None, **opts):  # data: the cell's data factory (train/bench_data.py)
        seen.append((split, opts))
        return real(model, tcfg, split=split, data=data, **opts)
    monkeypatch.setattr(main, "evaluate_model", spy)
    cfg = tiny(tmp_path, "lr_search=[0.001]", "kinds=[none]", "rope_variants=[]", "lr_extend=0", "seeds=[]")
    bench.run(cfg, "test")
    assert seen == [("val", {"min_length": None, "length": 8})]


def test_a_coordinate_convention_label_sets_the_kinds_coords(tmp_path):
    task = bench.TASKS["image/shapes-zoom"]
    assert bench.pe_config("rope@centered", task, (8, 8), (16, 16))["options"]["coords"] == "centered"
    assert "coords" not in bench.pe_config("rope", task, (8, 8), (16, 16))["options"]
    assert bench.pe_config("liere@index", task, (8, 8), (16, 16))["options"]["coords"] == "index"
    for label, match in (("rope@diagonal", "coordinates must be one of"), ("learned@centered", "has no coords option")):
        with pytest.raises(ConfigError, match=match):
            bench.kinds_for(tiny(tmp_path, "tasks=[image/shapes-zoom]", f"kinds=[{label}]", "task_kinds={}"),
                            "image/shapes-zoom")
    cfg = tiny(tmp_path, "tasks=[image/shapes-zoom]", "kinds=[none,rope@centered]", "task_kinds={}", "default_steps=1",
               "rope_variants=[]", "test_items=4")
    bench.run(cfg, "test")
    rows = read_rows(tmp_path / "quick" / "results.csv")
    assert {r.kind for r in rows} >= {"none", "rope@centered"}
    assert "| image/shapes-zoom | rope@centered | coords=centered" in (tmp_path / "quick" / "report.md").read_text()


def test_the_search_does_not_extend_a_plateau(tmp_path):
    """Every rate at the ceiling: the edge choice ties its neighbour, so the grid is not walked off to its range."""
    def flat(args):
        cfg, cell, _ = args
        task = bench.TASKS[cell.task]
        if cell.search:
            return [bench.cell_row(task, cell, SEARCH, task.train_size, 1.0, 0.0, split="val")], 0.0, None
        return fake_search_cell(args)

    bench.run(tiny(tmp_path, "lr_search=[0.001,0.002,0.004]", "kinds=[rope]", "rope_variants=[]"), "test", cell_fn=flat)
    rows = read_rows(tmp_path / "quick" / "results.csv")
    assert sorted(r.lr for r in rows if r.variant == SEARCH) == [0.001, 0.002, 0.004]
    assert {r.lr for r in rows if r.variant == "-"} == {0.001}


def test_a_rope_cell_builds_each_test_set_once(tmp_path, monkeypatch):
    """The largest test set sizes the encoder (its grid) and is evaluated by every variant: built once per cell, as is
    every other test size."""
    import collections

    import train.main as main

    cfg = tiny(tmp_path, "rope_variants=[pi,ntk,yarn]")
    built, real = collections.Counter(), main.build_data

    def counting(tcfg, split, *args, **opts):
        built[(split, opts.get("length"))] += 1
        return real(tcfg, split, *args, **opts)
    monkeypatch.setattr(main, "build_data", counting)
    task = bench.TASKS["text/copy"]
    rows, _ = bench.run_cell((cfg, bench.CellSpec("text/copy", "rope", 0, 0), str(tmp_path / "quick")))
    assert {(r.variant, r.size_ratio) for r in rows if r.split == "test"} == {
        ("-", 1.0), ("-", 1.5), ("-", 2.0), *((v, s) for v in ("pi", "ntk", "yarn") for s in (1.5, 2.0))}
    tests = {length: n for (split, length), n in built.items() if split == "test"}
    assert tests == {size: 1 for size in task.test_sizes}, tests


def test_a_task_trains_its_own_steps_else_the_default(tmp_path):
    cfg = tiny(tmp_path, "tasks=[text/copy,text/reverse]", "steps={text/reverse: 7}", "default_steps=3")
    assert (cfg.steps_for("text/reverse"), cfg.steps_for("text/copy")) == (7, 3)
    cells = cells_for(cfg)  # the longest cells are dispatched first: text/reverse's 7 steps before text/copy's 3
    assert [c.task for c in dispatch_order(cfg, cells)][0] == "text/reverse"
    assert [c.task for c in dispatch_order(cfg, cells[::-1])][0] == "text/reverse"


def test_listed_order_runs_task_by_task_and_seed_by_seed(tmp_path):
    """``order: listed`` (the GPU record, cut short by each device loan): the preset's tasks in turn, each task's
    floors with it and its runs seed by seed across the kinds, so every finished prefix holds paired runs."""
    cfg = tiny(tmp_path, "tasks=[text/copy,text/reverse]", "steps={text/reverse: 7}", "seeds=[0,1]",
               "data_seeds=[0,1]", "order=listed", "lr_search=[]")
    todo = plan(cfg, tmp_path / "none.csv")
    assert not todo.first and len(todo.later) == len(cells_for(cfg))  # no search: every floor waits with its task
    got = [(c.task.split("/")[1], c.kind, c.seed) for c in dispatch_order(cfg, cells_for(cfg)[::-1])]
    assert got == [(t, k, s) for t in ("copy", "reverse") for k, s in (
        ("floor", 0), ("floor", 1), ("none", 0), ("rope", 0), ("none", 1), ("rope", 1))]
    with pytest.raises(ConfigError, match="order must be one of"):
        tiny(tmp_path, "order=shortest")
