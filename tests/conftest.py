"""Shared test helpers: how to build any registered kind with the options it requires."""
from __future__ import annotations

import pytest
import torch

import ndpe

torch.set_num_threads(1)

# (kind, dims) pairs for every registered kind.
KIND_DIMS = [(k, d) for k, ds in ndpe.available().items() for d in ds]


def build(kind: str, dims: int, *, dim: int = 48, heads: int = 2, **opts):
    """``ndpe.make`` with the options ``kind`` requires for a small test grid (the kind says which)."""
    options = {**ndpe.registry.kind_class(kind).example_options(dims), **opts}
    return ndpe.make(dims=dims, kind=kind, dim=dim, heads=heads, **options)


def needs_kind(*kinds: str):
    """Skip a test when a kind it names is not registered."""
    missing = [k for k in kinds if k not in ndpe.available()]
    return pytest.mark.skipif(bool(missing), reason=f"kinds not registered: {missing}")


def page_data(html: str) -> dict:
    """The ``DATA`` object inlined in an explorer page."""
    import json
    import re

    blob = re.search(r"const DATA = (\{.*?\});\n</script>", html, re.S)
    assert blob is not None, "no DATA in the page"
    return json.loads(blob.group(1).replace("<\\/", "</"))


@pytest.fixture(scope="session")
def explorer_page(tmp_path_factory):
    """The explorer, every kind, with the committed quick run's benchmark tab, made once per test process by the
    command a user runs (tests/test_explore.py and tests/test_explore_browser.py share it: one xdist group)."""
    from pathlib import Path

    from ndpe.cli import main

    out = tmp_path_factory.mktemp("explorer")
    quick = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "quick"  # committed
    assert main(["explore", "--out", str(out), "--results", str(quick)]) == 0
    return out / "index.html"


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Three matrices over every kind and dims run one dims per kind in the default run, their other dims in the
    slow one (``-m slow``): ``torch.compile`` (about 3 s a compile) and ``ndpe viz`` from the command line at each
    kind's largest dims, ``ndpe.viz.draw`` at 2D where the kind has it (so the default run draws 1D, 2D and 3D)."""
    largest = lambda kind, dims: dims == max(ndpe.available()[kind])  # noqa: E731
    two_d = lambda kind, dims: dims == (2 if 2 in ndpe.available()[kind] else max(ndpe.available()[kind]))  # noqa: E731
    default = {"test_compile_fullgraph_changing_grids": largest,
               "test_every_registered_kind_draws_from_the_command_line": largest,
               "test_every_registered_kind_draws_through_draw": two_d}
    for item in items:
        spec = getattr(item, "callspec", None)
        keep = default.get(getattr(item, "originalname", None) or "")
        if keep is not None and spec is not None and not keep(spec.params["kind"], spec.params["dims"]):
            item.add_marker(pytest.mark.slow)
