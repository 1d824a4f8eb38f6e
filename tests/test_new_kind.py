"""Adding a kind is one file: a bias kind and a rotary kind written here (registered for this module only) are seen
by every part of the project that shows or uses kinds, with no other file edited.

``ndpe.available()``, the contract suite (its checks called on them), flex attention, KV-cache decoding, ``ndpe
viz``, the benchmark (``kinds: all``, its options per task, the report's header, the plots' colour and marker) and
``ndpe kinds --markdown`` (the README's table).
"""
from __future__ import annotations

import math
from typing import Any

import pytest
import torch

import ndpe
import test_contract
import test_decode
import test_flex
from ndpe import catalog
from ndpe.base import Encoding
from ndpe.contract import PosOut

BIAS, ROTARY = "test-slope-bias", "test-ramp-rope"


class SlopeBias(Encoding):
    """A bias ``-slope[h] * sum_a |p_i - p_j|_a`` whose slope the task sets (here: 1 / the training length)."""

    description = "a test's bias kind"
    takes_key_positions = True  # its pairwise term decodes against cached keys

    @classmethod
    def task_options(cls, *, dims: int, causal: bool, train_grid: tuple[int, ...] | None,
                     max_grid: tuple[int, ...] | None) -> dict[str, Any]:
        return {"slope": 1.0 / train_grid[0]} if train_grid else {}

    def __init__(self, *, dims: int, dim: int, heads: int = 1, slope: float = 0.5):
        super().__init__(dims=dims, dim=dim, heads=heads)
        self.slope = slope
        self.register_buffer("slopes", slope * torch.arange(1.0, heads + 1), persistent=False)

    def encode(self, positions, grid_shape, key_positions=None):
        keys = positions if key_positions is None else key_positions
        distance = (positions[..., :, None, :] - keys[..., None, :, :]).abs().sum(-1)  # (..., N, M)
        return PosOut(bias=-self.slopes[:, None, None] * distance[..., None, :, :])

    def score_bias(self, coords, *, q=None, k=None):
        return lambda b, h, i, j: -self.slopes[h] * (coords[i] - coords[j]).abs().sum(-1)


class RampRope(Encoding):
    """Rotates q and k by ``theta ** (-f / half) * sum_a p_a / (a + 1)``: a rotary kind in a few lines."""

    colour, marker = "#123456", "D"

    def __init__(self, *, dims: int, dim: int, heads: int = 1, theta: float = 100.0):
        super().__init__(dims=dims, dim=dim, heads=heads)
        self.theta = theta

    def encode(self, positions, grid_shape):
        half = self.head_dim // 2
        weights = 1.0 / torch.arange(1.0, self.dims + 1, device=positions.device)
        angle = (positions @ weights)[..., None] * self.theta ** (-torch.arange(half, device=positions.device) / half)
        return PosOut(rot=(angle.cos(), angle.sin()))


@pytest.fixture(scope="module", autouse=True)
def registered():
    ndpe.register(BIAS)(SlopeBias)
    ndpe.register(ROTARY, dims=(1, 2))(RampRope)
    yield
    ndpe.registry.unregister(BIAS)
    ndpe.registry.unregister(ROTARY)


NEW = [(BIAS, 1), (BIAS, 2), (BIAS, 3), (ROTARY, 1), (ROTARY, 2)]
CONTRACT = [check for name, check in sorted(vars(test_contract).items()) if name.startswith("test_")]


def test_available_lists_them_and_unregister_removes_a_kind():
    assert ndpe.available()[BIAS] == (1, 2, 3) and ndpe.available()[ROTARY] == (1, 2)
    ndpe.registry.unregister(ROTARY)
    assert ROTARY not in ndpe.available()
    with pytest.raises(ValueError, match="unknown kind"):
        ndpe.registry.unregister(ROTARY)
    ndpe.register(ROTARY, dims=(1, 2))(RampRope)


@pytest.mark.parametrize("check", CONTRACT, ids=[c.__name__ for c in CONTRACT])
@pytest.mark.parametrize("kind,dims", NEW, ids=[f"{k}-{d}d" for k, d in NEW])
def test_the_contract_suite_checks_them(check, kind, dims):
    if check is not test_contract.test_decoding_rows_equal_the_full_sequence:
        return check(kind, dims)
    try:  # it skips a kind that says it cannot decode: these two can
        check(kind, dims)
    except pytest.skip.Exception as skipped:
        pytest.fail(f"{kind} should decode: {skipped}")


@pytest.mark.parametrize("dims", [1, 2, 3])
def test_flex_takes_the_bias_kind(dims):
    assert SlopeBias.has_score_bias() and not RampRope.has_score_bias()
    test_flex.test_every_score_kind_flex_equals_materialized(BIAS, dims)


@pytest.mark.parametrize("kind", [BIAS, ROTARY])
def test_a_causal_text_model_decodes_them_with_a_kv_cache(kind, monkeypatch):
    monkeypatch.setitem(test_decode.CASES, kind, (kind, {}))
    test_decode.test_token_by_token_equals_full_sequence(kind)


def test_ndpe_viz_draws_them_in_their_colours(tmp_path, capsys):
    from matplotlib.colors import to_hex

    from ndpe.cli import viz_main
    from ndpe.viz import make_figure

    for kind, grid in ((BIAS, ["5", "6"]), (ROTARY, ["9"])):
        paths = viz_main(["--kind", kind, "--grid", *grid, "--heads", "2", "--dim", "16", "--out", str(tmp_path)])
        assert [p.name for p in paths][:3] == [f"{kind}_{len(grid)}d_{f}.png" for f in ("table", "similarity", "offset")]
    line = make_figure("similarity", ndpe.make(dims=1, kind=ROTARY, dim=16), (9,)).axes[0].lines[0]
    assert to_hex(line.get_color()) == "#123456"  # declared
    curve = make_figure("offset", ndpe.make(dims=1, kind=BIAS, dim=16), (6,)).axes[0].lines[0]
    assert to_hex(curve.get_color()) == catalog.colour(BIAS)  # derived from its name


def test_a_kind_without_colour_or_marker_gets_its_own():
    colour, marker = catalog.colour(BIAS), catalog.marker(BIAS)
    assert colour == catalog.colour(BIAS) and colour.startswith("#") and len(colour) == 7
    declared = [catalog.colour(k) for k in ndpe.available() if ndpe.registry.kind_class(k).colour]
    assert colour not in declared and marker != "o"  # never none's or rope's look
    assert (catalog.colour(ROTARY), catalog.marker(ROTARY)) == ("#123456", "D")


def test_the_plots_take_their_colour_and_marker():
    plots = pytest.importorskip("train.plots")
    for kind in (BIAS, ROTARY):
        style = plots.series_style(kind)
        assert (style["color"], style["marker"]) == (catalog.colour(kind), catalog.marker(kind))
    assert plots.series_style(f"{ROTARY} (yarn)")["color"] == "#123456"  # a test-time variant keeps the colour


def test_the_benchmark_runs_them_wherever_it_runs_every_kind():
    from train import bench

    cfg = bench.load_bench_config(bench.CONFIG_DIR / "full.yaml", ["seeds=[0]"])
    header = bench.header(cfg, {"command": "test", "date": "today", "wall_s": 1})
    for name, task in bench.TASKS.items():
        kinds = bench.kinds_for(cfg, name)
        assert (BIAS in kinds) == (not task.conv) and (ROTARY in kinds) == (not task.conv and task.dims <= 2), name
        if task.conv:
            continue
        grids = (8,) * task.dims, (16,) * task.dims
        pe = bench.pe_config(BIAS, task, *grids)
        assert pe == {"kind": BIAS, "options": {"slope": 1 / 8}, "augment": None}
        assert bench.pe_config(f"{BIAS}+cape", task, *grids)["augment"] == "cape"
        built = ndpe.make(dims=task.dims, kind=BIAS, dim=16, heads=2, **pe["options"])
        assert math.isclose(built.slope, 1 / 8)
        if name in cfg.tasks:
            row = next(line for line in header.splitlines() if line.startswith(f"| {name} |"))
            assert BIAS in row


def test_ndpe_kinds_markdown_has_their_rows(capsys):
    from ndpe.cli import main

    assert main(["kinds", "--markdown"]) == 0
    rows = capsys.readouterr().out.splitlines()
    assert f"| `{BIAS}` | 1 2 3 | bias | a test's bias kind |" in rows
    assert f"| `{ROTARY}` | 1 2 | rotate q, k | {RampRope.__doc__.splitlines()[0]} |" in rows
