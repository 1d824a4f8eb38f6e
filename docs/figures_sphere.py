"""The figures of the kinds on the sphere (docs/make_figures.py): spherical harmonics of (latitude, longitude) and the
great-circle ALiBi bias, drawn on the equiangular grid of the whole globe (row 0 north, column 0 at -180)."""
from __future__ import annotations

import matplotlib.pyplot as plt

from ndpe.viz import style

from figure_registry import figure, seeded

GLOBE = (45, 90)  # 4-degree cells
EXTENT = (-180, 180, -90, 90)  # imshow: longitude across, latitude up


def show_map(ax, values, scale):
    """A ``(45 * 90,)`` map of the globe grid on ``ax`` in longitude / latitude degrees."""
    return ax.imshow(values.reshape(GLOBE).numpy(), extent=EXTENT, interpolation="nearest", **scale)


@figure("spherical-harmonics")
def sphere_harmonics():
    max_degree = 3
    pe = seeded(dims=2, kind="spherical-harmonics", dim=64, max_degree=max_degree)
    features = pe(GLOBE).cat  # (N, 16): feature l * l + l + m
    scale = style.scale("encoding", features)  # one scale: every panel compares
    fig, axes = plt.subplots(max_degree + 1, 2 * max_degree + 1, figsize=(13, 5.4), layout="constrained")
    for ax in axes.flat:
        ax.set_axis_off()
    for l in range(max_degree + 1):
        for m in range(-l, l + 1):
            ax = axes[l, max_degree + m]
            ax.set_axis_on()
            image = show_map(ax, features[:, l * l + l + m], scale)
            ax.set_title(f"l={l}, m={m}", fontsize=8)
            ax.set_xticks([-180, 0, 180])
            ax.set_yticks([-90, 0, 90])
            ax.tick_params(labelsize=6)
    fig.colorbar(image, ax=axes, shrink=0.8, label=style.colourbar_label("encoding", "Y_l^m"))
    fig.suptitle("spherical-harmonics, max_degree 3: the 16 features on the globe (longitude across, latitude up); "
                 "Y_l^m changes sign l - |m| times from pole to pole\nand 2|m| times around a circle of latitude: "
                 "sin for m < 0, cos for m > 0 (SatCLIP's convention)", fontsize=10)
    return fig


@figure("great-circle")
def great_circle_heads():
    pe = seeded(dims=2, kind="great-circle", dim=64, heads=4)  # slopes 1/4 .. 1/256 per degree of arc
    lat, lon = 62.0, 174.0  # a query near the date line, far north
    coords = pe.coords(GLOBE)
    query = int(((coords - coords.new_tensor([lat, lon])).abs().sum(-1)).argmin())
    bias = pe(GLOBE).bias[:, query]  # (heads, N)
    scale = style.scale("bias", bias)
    fig, axes = plt.subplots(1, 4, figsize=(13, 2.9), layout="constrained")
    for h, ax in enumerate(axes):
        image = show_map(ax, bias[h], scale)
        ax.contour(bias[h].reshape(GLOBE).numpy(), levels=[-1.0], colors="k", linewidths=1.0, extent=EXTENT,
                   origin="upper")
        q = coords[query].tolist()
        ax.plot(q[1], q[0], "k+", ms=9, mew=1.5)
        ax.set_title(f"head {h}: slope 1/{round(1 / float(pe.slopes[h]))} per degree", fontsize=9)
        ax.set(xlabel="longitude", ylabel="latitude" if h == 0 else None)
    fig.colorbar(image, ax=axes, shrink=0.9, label=style.colourbar_label("bias"))
    fig.suptitle(f"great-circle, 4 heads: bias of the query at ({q[0]:g}, {q[1]:g}) (+) to every cell of a 4-degree "
                 "globe;\ncontour: bias -1, 4, 16 and 64 degrees away (head 3 never reaches it: 256 > 180). "
                 "The disc wraps across the date line and widens in longitude near the pole", fontsize=10)
    return fig
