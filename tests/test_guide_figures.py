"""Each figure of the guide that a sentence of the guide reads a number off: the figure is built by its committed
builder (docs/figures_rope.py), the number is measured on what the figure draws (its images' arrays, its curves'
points), and the guide's sentence must print that number."""
from __future__ import annotations

import re
import sys
from pathlib import Path

import numpy as np
import pytest

pytest.importorskip("matplotlib")
ROOT = Path(__file__).resolve().parent.parent
GUIDE = (ROOT / "docs" / "guide.md").read_text()
sys.path.insert(0, str(ROOT / "docs"))


@pytest.fixture(scope="module")
def figures():
    import matplotlib

    matplotlib.use("Agg")
    import figures_rope

    return figures_rope


def said(sentence: str) -> None:
    """The guide prints ``sentence`` (its line breaks as spaces)."""
    assert sentence in " ".join(GUIDE.split()), f"the guide does not say: {sentence!r}"


def curves(ax) -> dict[str, tuple[np.ndarray, np.ndarray]]:
    return {line.get_label(): (np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float))
            for line in ax.get_lines() if not line.get_label().startswith("_")}


def test_rope_3d_frames_lower_by_a_constant_per_frame(figures):
    """Each frame's map is the query frame's minus a constant: the drops the guide states, at one and two frames."""
    import matplotlib.pyplot as plt

    fig = figures.rope_3d_frames()
    maps = [ax.get_images()[0].get_array().data for ax in fig.axes[:10] if ax.get_images()]
    plt.close(fig)
    assert len(maps) == 5
    drops = [maps[2] - m for m in maps]
    for drop in drops:
        assert np.ptp(drop) < 1e-5  # one constant over the whole frame
    assert drops[1].mean() == pytest.approx(drops[3].mean(), abs=1e-6)
    one, two = float(drops[1].mean()), float(drops[0].mean())
    assert two > one > 0.02  # further frames lie lower, by a difference a reader can see on the curves
    said(f"lowered by a constant, {one:.2f} one frame away and {two:.2f} two frames away")


def test_rope_dinov3_zoom_shows_which_growth_each_encoding_assumes(figures):
    """On the query's row, index coordinates repeat the training relation on the canvas and not under zoom;
    DINOv3's centred coordinates the other way round, by the margins the guide states."""
    import matplotlib.pyplot as plt

    fig = figures.rope_dinov3_zoom()
    rows = [curves(ax) for ax in fig.axes if ax.get_legend() is not None]
    plt.close(fig)
    gaps = []
    for lines in rows:
        (x0, y0) = lines["training"]
        for view in ("zoom", "canvas"):
            (x, y), = [v for k, v in lines.items() if k.startswith(view)]
            gaps.append(max(abs(y[np.abs(x - a).argmin()] - b) for a, b in zip(x0, y0)))
    index_zoom, index_canvas, dino_zoom, dino_canvas = gaps
    assert index_canvas < 1e-6 and dino_zoom < 1e-6 and min(index_zoom, dino_canvas) > 0.1
    said(f"the canvas repeats the training relation at every offset it had (difference {index_canvas:.2f}) while "
         f"zoom squeezes it into half the width (it differs by up to {index_zoom:.2f})")
    said(f"zoom repeats it ({dino_zoom:.2f}), the canvas stretches it (up to {dino_canvas:.2f})")


def test_rope_2d_grow_neighbours_and_unseen_offsets(figures):
    """Under the maps: the grown grid repeats the trained relation inside the trained offsets, dips beyond them,
    and position interpolation makes the nearest neighbour more alike, by the numbers the guide states."""
    import matplotlib.pyplot as plt

    fig = figures.rope_2d_grow()
    lines = curves([ax for ax in fig.axes if ax.get_legend() is not None][0])
    plt.close(fig)
    (xt, yt), (xe, ye), (xp, yp) = lines.values()
    inside = np.isin(xe, xt)
    assert np.abs(ye[inside] - yt).max() < 1e-6  # the trained offsets: the same relation
    dip = float(ye[~inside].min())
    near_e, near_p = float(ye[xe == 1][0]), float(yp[xp == 1][0])
    assert near_p > near_e
    said(f"beyond it the relation dips to {dip:.2f} at offsets never trained; PI lifts the nearest neighbour from "
         f"{near_e:.2f} to {near_p:.2f}")


def test_rope_scaling_freqs_bands_and_dynamic_ntk(figures):
    """The frequency ratios the figure plots: YaRN's kept and divided bands, linear's constant 1/scale and dynamic
    NTK's slowest division, as the guide counts them."""
    import matplotlib.pyplot as plt

    fig = figures.rope_scaling_freqs()
    lines = {label.split(" (at")[0]: y for label, (_, y) in curves(fig.axes[0]).items()}
    plt.close(fig)
    scale = figures.SCALING_SCALE
    yarn = lines["yarn"]
    kept, divided = int((np.abs(yarn - 1) < 1e-6).sum()), int((np.abs(yarn * scale - 1) < 1e-6).sum())
    assert np.allclose(lines["linear (PI)"], 1 / scale) and kept > 0 and divided > 0
    said(f"YaRN keeps the {kept} fastest of {len(yarn)} pairs at ratio 1 and divides the {divided} slowest by "
         f"{scale:g}")
    said(f"divides its slowest frequency by {1 / lines['dynamic-ntk'][-1]:.0f}, not {scale:g}")
