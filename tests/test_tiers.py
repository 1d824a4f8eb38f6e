"""The test tiers (tests/conftest.py): the every-kind checks that cost the most per kind run in the quick tier for one
kind of each way of acting and in the ``kinds_full`` tier (CI runs it) for every other kind: each (kind, dims) in one
tier."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import ndpe
from conftest import KIND_DIMS, PER_KIND_COST, QUICK_KINDS
from ndpe import catalog

ROOT = Path(__file__).resolve().parents[1]


def test_the_quick_kinds_act_in_every_way_a_kind_acts():
    registered = ndpe.registry.available()
    assert set(QUICK_KINDS) <= set(registered), set(QUICK_KINDS) - set(registered)
    missing = {catalog.acts_by(k) for k in registered} - {catalog.acts_by(k) for k in QUICK_KINDS}
    assert not missing, f"no kind of QUICK_KINDS (tests/conftest.py) acts by {sorted(missing)}: add one that does"


def test_every_test_of_the_tiers_exists_and_takes_a_kind_and_dims():
    sources = "\n".join(p.read_text() for p in (ROOT / "tests").glob("test_*.py"))
    defined = set(re.findall(r"^def (test_\w+)\([^)]*\bkind, dims\b", sources, re.M))
    assert not set(PER_KIND_COST) - defined, f"no tests {sorted(set(PER_KIND_COST) - defined)}(kind, dims, ...)"


PLUGIN = """
def pytest_collection_finish(session):
    for item in session.items:
        tier = "slow" if item.get_closest_marker("slow") else "kinds_full" if item.get_closest_marker("kinds_full") \\
            else "quick"
        print("TIER", tier, item.originalname, item.callspec.id)
"""


def tiers(tmp_path, *nodes: str) -> dict[str, dict[str, set[str]]]:
    """test name -> tier -> the ids ``pytest --collect-only`` marks for it (the project's conftest applies)."""
    (tmp_path / "tiers_plugin.py").write_text(PLUGIN)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env["PYTHONPATH"] = os.pathsep.join([str(tmp_path), str(ROOT)])
    ran = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider", "-p", "tiers_plugin",
                          "--collect-only", "-m", "", *nodes], cwd=ROOT, env=env, capture_output=True, text=True,
                         timeout=300)
    assert ran.returncode == 0, ran.stdout[-2000:] + ran.stderr[-2000:]
    found: dict[str, dict[str, set[str]]] = {}
    for line in ran.stdout.splitlines():
        if line.startswith("TIER "):
            _, tier, name, ident = line.split(" ", 3)
            found.setdefault(name, {"quick": set(), "kinds_full": set(), "slow": set()})[tier].add(ident)
    return found


def test_the_quick_and_kinds_full_tiers_split_the_kinds(tmp_path):
    """Every (kind, dims) of a test in exactly one tier; the quick tier has each quick kind, the full one the rest."""
    names = ("test_torch_export", "test_compile_fullgraph_changing_grids")  # every dims; the largest (others: slow)
    found = tiers(tmp_path, *(f"tests/test_contract.py::{name}" for name in names))
    assert set(found) == set(names)
    for name, tier in found.items():
        quick, full, slow = tier["quick"], tier["kinds_full"], tier["slow"]
        assert quick.isdisjoint(full) and quick.isdisjoint(slow) and full.isdisjoint(slow), name
        assert quick | full | slow == {f"{k}-{d}d" for k, d in KIND_DIMS}, name
        assert {i.rsplit("-", 1)[0] for i in quick} == set(QUICK_KINDS), name
        assert {i.rsplit("-", 1)[0] for i in full} == {k for k, _ in KIND_DIMS} - set(QUICK_KINDS), name
    assert not found["test_torch_export"]["slow"] and len(found["test_compile_fullgraph_changing_grids"]["slow"]) \
        == len(KIND_DIMS) - len({k for k, _ in KIND_DIMS})
