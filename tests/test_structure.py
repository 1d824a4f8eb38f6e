"""The reference code reads in one sitting and hides no loop from the import graph: every file of train/, models/ and
docs/ under 400 lines; ndpe/ never loads train/ (or models/) by name; the benchmark hands train.main its data
factory as a callable, never as a ``"module:factory"`` string."""
from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
MAX_LINES = 400
LOADERS = ("import_module", "__import__", "spec_from_file_location", "run_module", "run_path")


@pytest.mark.parametrize("folder", ["train", "models", "docs"])
def test_every_file_is_under_400_lines(folder):
    long = {str(p.relative_to(ROOT)): n for p in sorted((ROOT / folder).rglob("*.py"))
            if (n := len(p.read_text().splitlines())) >= MAX_LINES}
    assert not long, f"files of {MAX_LINES} lines or more (split them): {long}"


def by_name_loads(path: Path) -> list[str]:
    """The calls in ``path`` that load a module by a name held in a string (importlib, runpy, ``__import__``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Call):
            name = node.func.attr if isinstance(node.func, ast.Attribute) else getattr(node.func, "id", "")
            if name in LOADERS:
                found.append(f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}")
    return found


def test_ndpe_loads_no_module_of_the_checkout_by_name():
    """ndpe's only by-name import is its own kinds folder (ndpe/kinds/__init__.py); ``ndpe explore --results`` reads
    the data file the benchmark writes instead of importing train/."""
    loads = [line for p in sorted((ROOT / "ndpe").rglob("*.py")) for line in by_name_loads(p)]
    assert all(line.startswith("ndpe/kinds/__init__.py:") and "__name__" in line for line in loads), loads
    for path in sorted((ROOT / "ndpe").rglob("*.py")):
        assert "sys.path.insert" not in path.read_text(), f"{path} puts a folder of the checkout on sys.path"


def test_the_benchmark_cells_name_their_dataset_not_a_factory(tmp_path):
    """Every cell of the standard preset names its task's dataset (train.data) with that dataset's own options, so
    train.config.validate checks them; the cached factory is passed to train.main.fit as a callable."""
    from train import bench
    from train.data import DATASETS

    cfg = bench.load_bench_config(bench.CONFIG_DIR / "standard.yaml", [])
    for cell in bench.cells_for(cfg):
        task = bench.TASKS[cell.task]
        data = bench.train_config(cfg, task, dataclasses.replace(cell, kind="none"), tmp_path).data  # no grids needed
        assert data.name == task.dataset in DATASETS and ":" not in data.name
        assert set(data.options) <= set(DATASETS[data.name].options), (cell, data.options)
