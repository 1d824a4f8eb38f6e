"""Interpolation or extrapolation per kind and test size (train/regime.py), against the coordinates' own arithmetic."""
from __future__ import annotations

import inspect

import pytest

import ndpe
from ndpe.coords import axis_coords
from train.bench_config import label_coords, split_label
from train.protocol import TASKS
from train.regime import EXTRAPOLATES, INTERPOLATES, grown_grid, regime, regimes
from train.results import Row, append_rows

IMAGE = ["sinusoidal", "sinusoidal@centered", "rope", "rope@centered", "rope-mixed", "rope-mixed@centered", "liere",
         "liere@index", "string", "string@centered", "comrope", "comrope@index"]


def convention(label: str) -> str:
    """The coordinates a label encodes: its @suffix, else its class's default ``coords``."""
    default = inspect.signature(ndpe.registry.kind_class(split_label(label)[0]).__init__).parameters["coords"].default
    return label_coords(label) or default


@pytest.mark.parametrize("kind", IMAGE)
@pytest.mark.parametrize("task", ["image/shapes-zoom", "image/mnist-pair"])
def test_index_coordinates_extrapolate_and_normalized_ones_interpolate(kind, task):
    expected = EXTRAPOLATES if convention(kind) == "index" else INTERPOLATES
    assert [regime(kind, TASKS[task], r) for r in (1.5, 2.0)] == [expected] * 2


def test_the_smallest_growth_of_index_coordinates_extrapolates_and_of_centred_ones_does_not():
    """One more point per axis (9/8): index 8 is a whole step past 7; centred 0.889 is 0.014 past 0.875."""
    task = TASKS["image/shapes-zoom"]
    assert regime("rope", task, 9 / 8) == EXTRAPOLATES and regime("rope@centered", task, 9 / 8) == INTERPOLATES
    seen, new = axis_coords(8, "centered"), axis_coords(9, "centered")
    assert 0 < float(new.max() - seen.max()) < 0.5 * float(seen[1] - seen[0])


def test_test_time_scaling():
    task = TASKS["video/trajectory-long"]
    assert regime("rope", task, 2.0) == EXTRAPOLATES and regime("rope", task, 2.0, "pi") == INTERPOLATES
    assert regime("rope", task, 2.0, "ntk").startswith(EXTRAPOLATES + " (NTK")
    assert regime("rope", task, 2.0, "yarn").startswith(EXTRAPOLATES + " (YaRN")
    with pytest.raises(ValueError, match="unknown test-time variant 'xpos'"):
        regime("rope", task, 2.0, "xpos")


def test_tables_none_and_the_training_size():
    task = TASKS["audio/tones"]
    assert regime("learned", task, 2.0) == INTERPOLATES + " (table resized)"  # the benchmark resizes 2D tables
    assert regime("none", task, 2.0) == "no positions" and regime("rope", task, 1.0) == "trained"


@pytest.mark.parametrize("task,grown", [("image/shapes-zoom", (16, 16)), ("image/mnist-pair", (8, 16)),
                                        ("video/trajectory", (16, 8, 8)), ("audio/tones", (16, 8))])
def test_the_axes_that_grow(task, grown):
    """Zoom grows both image axes, the digit pair its width, a video its frames, a clip its time (first) axis."""
    assert grown_grid(TASKS[task], 2.0) == ((8,) * len(grown), grown)


def test_the_report_says_it_per_test_size_for_grids_only(tmp_path):
    from train.report import write_report

    def row(task, kind, ratio, size, value, variant="-"):
        return Row(domain=task.split("/")[0], task=task, kind=kind, variant=variant, seed=0, train_size="32px",
                   test_size=size, size_ratio=ratio, metric="acc", value=value, higher_is_better=True,
                   train_time_s=1.0, data_seed=0)

    rows = [row("image/shapes-zoom", k, r, s, 0.9) for k in ("rope", "rope@centered", "none")
            for r, s in ((1.0, "32px"), (2.0, "64px"))] + [row("image/shapes-zoom", "rope", 2.0, "64px", 0.9, "pi")]
    rows += [row("text/copy", "rope", r, s, 0.9) for r, s in ((1.0, "8L"), (2.0, "16L"))]
    append_rows(tmp_path / "results.csv", rows)
    text = write_report(tmp_path, "# t").read_text()
    assert ("- positions at 64 px (×2): interpolates: rope (pi), rope@centered; extrapolates: rope; "
            "no positions: none") in text
    assert text.count("- positions at") == 1  # text/copy: a 1D task, not said
    assert regimes(TASKS["text/copy"], ["rope"], [(2.0, "16L")]) == []
