"""The benchmark's Ray executor: the same rows as the local pool, and a cell whose worker dies is retried once, not lost."""
from __future__ import annotations

import dataclasses
import os

import pytest

ray = pytest.importorskip("ray")

from train import bench  # noqa: E402
from train.config import ConfigError  # noqa: E402
from train.report import read_rows  # noqa: E402

from test_bench import tiny  # noqa: E402  (tests/ is on sys.path)

# One pytest-xdist worker runs this module, in file order: its tests start and stop Ray instances, and the first one
# checks that none is running yet.
pytestmark = pytest.mark.xdist_group("ray")


@pytest.mark.slow  # starting Ray costs 30-60 s on 2 cores: the Ray runs are kept out of the default run (CI budget)
def test_the_bench_starts_and_stops_its_own_ray_instance(tmp_path):
    """ray_address null: a local instance of ``workers`` CPUs, the code shipped as py_modules, shut down at the end."""
    assert not ray.is_initialized()  # runs before the module's shared instance starts
    bench.run(tiny(tmp_path, "executor=ray", "tasks=[coord/uniform]", "kinds=[none]", "seeds=[0]"), "test")
    assert not ray.is_initialized()
    rows = read_rows(tmp_path / "quick" / "results.csv")
    assert {r.kind for r in rows} == {bench.FLOOR, "conv", "conv+coord"}


@pytest.fixture(scope="module")
def ray_instance():
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    try:
        yield
    finally:
        ray.shutdown()


def numbers(path):
    """The rows of a results.csv without their wall time, in a stable order."""
    rows = [dataclasses.replace(r, train_time_s=0.0) for r in read_rows(path)]
    return sorted(rows, key=lambda r: (r.task, r.kind, r.seed, r.split, r.variant, r.size_ratio))


@pytest.mark.slow  # the module's Ray instance starts only for the slow run
def test_ray_rows_equal_the_local_pool(ray_instance, tmp_path, capsys):
    bench.run(tiny(tmp_path / "local"), "test")
    local = numbers(tmp_path / "local" / "quick" / "results.csv")
    capsys.readouterr()
    cfg = tiny(tmp_path / "ray", "executor=ray")
    bench.run(cfg, "test")
    out = capsys.readouterr().out.splitlines()
    assert numbers(tmp_path / "ray" / "quick" / "results.csv") == local and len(local) == 8 + 4 + 9
    done = [line for line in out if line.startswith("[")]
    assert len(done) == 3 and all("ETA" in line for line in done)  # the same one line per cell as the pool
    assert "Ray cluster" in out[0]
    # resume: every cell is done, nothing is submitted (and no cluster is needed)
    bench.run(cfg, "test")
    assert numbers(tmp_path / "ray" / "quick" / "results.csv") == local
    assert bench.fingerprint(cfg) == bench.fingerprint(tiny(tmp_path / "local"))


@pytest.mark.slow  # 42 s alone, but up to 10 minutes beside the other test worker: Ray notices the dead worker late
def test_a_killed_worker_is_retried_and_its_cell_written_once(ray_instance, tmp_path):
    marker = tmp_path / "killed-once"

    def dies_once(args):  # pickled by value (a local function): the first attempt at the rope cell kills its worker
        if args[1].kind == "rope" and not marker.exists():
            marker.write_text("the rope cell's first worker died here\n")
            os._exit(1)
        return bench.run_cell_safe(args)

    bench.run(tiny(tmp_path, "executor=ray"), "test", cell_fn=dies_once)
    assert marker.exists()
    rows = read_rows(tmp_path / "quick" / "results.csv")
    cells = [(r.task, r.kind, r.seed, r.split, r.variant, r.size_ratio) for r in rows]
    assert len(cells) == len(set(cells))  # no row twice
    assert len([r for r in rows if r.kind == "rope"]) == 3 + 2 + 2  # 3 sizes, + pi at the 2 larger ones, train, val
    assert {r.kind for r in rows} == {"none", "rope", bench.FLOOR}


@pytest.mark.parametrize("overrides,fragment", [
    (["executor=slurm"], "executor must be one of"),
    (["gpus_per_cell=1"], "apply to executor=ray"),
    (["executor=ray", "device=cuda"], "needs gpus_per_cell"),
    (["executor=ray", "gpus_per_cell=1"], "device=cpu"),
])
def test_bad_executor_settings_are_named(overrides, fragment):
    with pytest.raises(ConfigError, match=fragment):
        bench.load_bench_config(bench.CONFIG_DIR / "quick.yaml", overrides)


def test_executor_keys_do_not_change_the_fingerprint():
    base = bench.load_bench_config(bench.CONFIG_DIR / "full.yaml", [])
    ray_cfg = bench.load_bench_config(bench.CONFIG_DIR / "full.yaml",
                                      ["executor=ray", "ray_address=auto", "gpus_per_cell=1", "workers=8"])
    assert ray_cfg.gpus_per_cell == 1.0 and ray_cfg.ray_address == "auto"
    assert bench.fingerprint(ray_cfg) == bench.fingerprint(base)


def test_missing_ray_is_one_line(tmp_path, monkeypatch, capsys):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(SystemExit, match=r'pip install -e "\.\[cluster\]"') as e:
        bench.run(tiny(tmp_path, "executor=ray"), "test")
    assert "\n" not in str(e.value.code)
