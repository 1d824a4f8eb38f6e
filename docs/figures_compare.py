"""Figures whose point is a comparison (docs/make_figures.py), drawn so the comparison is what the eye meets first:
small multiples against a grey reference (RoPE's scalings), a residual row (RoPE-Mixed's heads against axial RoPE),
difference rows (GTA with the world moved, PRoPE against GTA). Each panel's title prints the number it shows."""
from __future__ import annotations

import matplotlib.pyplot as plt
import numpy as np
import torch

import ndpe
from ndpe.viz import centre_index, color_scale, relation, style

from figure_registry import RELATION, figure, seeded

# RoPE scaling figures: a trained length long enough that YaRN's three bands all exist at its defaults
# (beta_fast 32, beta_slow 1): below about 200 tokens no frequency turns 32 times, and nothing is kept
SCALING_TRAIN, SCALING_SCALE, SCALING_DIM = 1024, 4.0, 64
WINDOW = 64  # the far panels: the mean over windows of 64 offsets (the fast ripples averaged out)


def rope_scalings(train: int, scale: float) -> dict:
    """The RoPE scalings compared in the guide, as ``ndpe.make`` options."""
    return {"no scaling": {}, "linear (PI)": {"scaling": "linear", "scale": scale},
            "ntk": {"scaling": "ntk", "scale": scale},
            "dynamic-ntk": {"scaling": "dynamic-ntk", "scale": scale, "train_shape": train},
            "yarn": {"scaling": "yarn", "scale": scale, "train_shape": train}}


def scaling_colours(labels) -> dict:
    """One colour per scaling: the unscaled baseline grey, the others the variant palette (style.VARIANT_COLOURS)."""
    others = iter(style.VARIANT_COLOURS)
    return {label: style.BASELINE_COLOUR if label == "no scaling" else next(others) for label in labels}


def turns(y: np.ndarray) -> int:
    """How often a curve turns (its slope changes sign)."""
    return int((np.diff(np.sign(np.diff(y))) != 0).sum())


@figure("rope")
def rope_scaling_offset():
    """One column per scaling, over the unscaled curve in grey: offsets 0-64 (how often the curve turns: local order)
    and every offset up to the target length averaged over windows of 64 (where it falls below 0 beyond training)."""
    train, scale, dim = SCALING_TRAIN, SCALING_SCALE, SCALING_DIM
    length = int(train * scale)
    scalings = rope_scalings(train, scale)
    colours = scaling_colours(scalings)
    rel = {label: relation(seeded(dims=1, kind="rope", dim=dim, **opts)((length,)), 0).numpy()
           for label, opts in scalings.items()}
    x_far = np.arange(0, length, WINDOW) + WINDOW / 2
    far = {label: r.reshape(-1, WINDOW).mean(-1) for label, r in rel.items()}
    fig, axes = plt.subplots(2, len(scalings), figsize=(13, 5.6), layout="constrained", sharey=True)
    for col, label in enumerate(scalings):
        near_ax, far_ax = axes[0, col], axes[1, col]
        if label != "no scaling":  # the reference, in grey behind each scaling
            near_ax.plot(rel["no scaling"][:65], color="0.78", lw=1.2, label="_no scaling")
            far_ax.plot(x_far, far["no scaling"], color="0.78", lw=1.2, label="_no scaling")
        near_ax.plot(rel[label][:65], color=colours[label], lw=1.6, label=label)
        far_ax.plot(x_far, far[label], color=colours[label], lw=1.6, label=label)
        near_ax.set_title(f"{label}\nturns {turns(rel[label][:65])} times over offsets 0-64", fontsize=9)
        beyond = far[label][x_far > train]
        far_ax.fill_between(x_far, far[label], 0, where=far[label] < 0, color="#b00020", alpha=0.5, lw=0)
        far_ax.set_title(f"lowest beyond {train}: {beyond.min():.2f}", fontsize=9,
                         color="#b00020" if beyond.min() < 0 else "black")
        far_ax.axvspan(train, length, facecolor="0.95", edgecolor="0.75", hatch=style.OUTSIDE_HATCH, lw=0, zorder=0)
        far_ax.axhline(0, color="0.3", lw=0.8)
        near_ax.set(xlabel="offset", ylim=(-0.3, 1.02))
        far_ax.set(xlabel="offset (mean of 64)", xlim=(0, length), xticks=[0, train, length])
    axes[0, 0].set_ylabel(f"offsets 0-64\n{RELATION}", fontsize=8)
    axes[1, 0].set_ylabel(f"0-{length - 1}, hatched: beyond {train}", fontsize=8)
    fig.suptitle(f"1D RoPE, head_dim {dim}, theta 1e4, trained length {train}, scale {scale:g}: relation vs offset "
                 "per scaling (grey: no scaling). PI is the smoothest; only the unscaled mean falls below 0 (red)",
                 fontsize=10)
    return fig


@figure("rope-mixed")
def rope_mixed_heads():
    """Each head's map at initialization beside axial RoPE's, and under each what a row term plus a column term
    cannot explain (axial RoPE: nothing), with the two diagonals' difference in the title."""
    grid, query = (16, 16), centre_index((16, 16))
    with torch.no_grad():
        axial = relation(seeded(dims=2, kind="rope", dim=128, heads=4, theta=100.0)(grid), query).reshape(grid)
        pos = seeded(dims=2, kind="rope-mixed", dim=128, heads=4)(grid)
        heads = [relation(pos, query, head=h).reshape(grid) for h in range(4)]
    maps = [axial, *heads]
    rest = [m - m.mean(0) - m.mean(1, keepdim=True) + m.mean() for m in maps]
    c = grid[0] // 2
    fig, axes = plt.subplots(2, 5, figsize=(13, 5.6), layout="constrained")
    top, low = color_scale(*maps), color_scale(*rest)
    for i, (m, r) in enumerate(zip(maps, rest)):
        name = "axial rope, theta 100" if i == 0 else f"rope-mixed head {i - 1}"
        diagonals = max(abs(float(m[c + d, c + d] - m[c + d, c - d])) for d in range(1, c))
        image = axes[0, i].imshow(m.numpy(), interpolation="nearest", **top)
        axes[0, i].set_title(f"{name}\n(d, d) vs (d, -d): {diagonals:.2f} apart", fontsize=9)
        residual = axes[1, i].imshow(r.numpy(), interpolation="nearest", **low)
        axes[1, i].set_title(f"off a row + column sum: {float(r.abs().max()):.2f}", fontsize=9)
        for ax in axes[:, i]:
            ax.plot(c, c, "k+", ms=8)
            ax.set_xticks([]), ax.set_yticks([])
    fig.colorbar(image, ax=axes[0], shrink=0.8, label="relation (normalized q.k)")
    fig.colorbar(residual, ax=axes[1], shrink=0.8, label="map - row, column means")
    fig.suptitle("rope-mixed at init (seed 0), head_dim 32: each head a tilted \"+\" (bottom: what rows + columns "
                 "do not explain), yet both diagonals alike", fontsize=10)
    return fig


@figure("gta", "prope")
def camera_views():
    """GTA and PRoPE on four views of a ring of cameras: the logits of the centre patch of view 0 against every patch
    of every view, for one constant q and k; the difference when the whole world is moved (every extrinsic times one
    SE(3)); PRoPE with views 1-3 zoomed in (twice the focal length), and its difference from GTA."""
    from ndpe.kinds.gta import ring_extrinsics

    grid, d = (4, 6, 6), 32
    n, per_view = 4 * 36, 36
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 1, d, generator=g).expand(1, 1, n, d).contiguous()
    k = torch.randn(1, 1, 1, d, generator=g).expand(1, 1, n, d).contiguous()
    axis, angle = torch.nn.functional.normalize(torch.tensor([1.0, 2.0, 0.5]), dim=0), 1.2
    skew = torch.tensor([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    world = torch.eye(4)
    world[:3, :3] = torch.linalg.matrix_exp(angle * skew)
    world[:3, 3] = torch.tensor([3.0, -1.0, 2.0])
    gta = seeded(dims=3, kind="gta", dim=d, heads=1)
    prope = seeded(dims=3, kind="prope", dim=d, heads=1, image_size=(6, 6))
    ring = ring_extrinsics(gta.coords(grid)[:, 0])
    zoom = torch.tensor([[6.0, 0, 3], [0, 6.0, 3], [0, 0, 1]]).repeat(n, 1, 1)
    zoom[per_view:, :2, :2] *= 2
    logits = []
    for pos in (gta(grid), gta(grid, extrinsics=ring @ world), prope(grid, extrinsics=ring, intrinsics=zoom)):
        with torch.no_grad():
            rq, rk = ndpe.apply_qk(q, k, pos)
            logits.append((rq @ rk.transpose(-1, -2))[0, 0, centre_index(grid[1:])].reshape(grid) / d ** 0.5)
    plain, moved, lens = logits
    rows = [("gta, the ring of cameras", plain), ("the world moved, minus the row above", moved - plain),
            ("prope, views 1-3 zoomed 2x", lens), ("prope minus gta (the first row)", lens - plain)]
    values, diffs = color_scale(plain, lens), color_scale(moved - plain, lens - plain)
    fig, axes = plt.subplots(4, 4, figsize=(10, 10), layout="constrained")
    for r, (title, maps) in enumerate(rows):
        scale = diffs if r % 2 else values
        for view in range(4):
            ax = axes[r, view]
            image = ax.imshow(maps[view].numpy(), interpolation="nearest", **scale)
            ax.set_xticks([]), ax.set_yticks([])
            label = f"view {view} ({45 * view} deg)" + (f": up to {float(maps[view].abs().max()):.2f}" if r % 2 else "")
            ax.set_title(f"{title}\n{label}" if view == 0 else label, fontsize=8)
            if view == 0:
                ax.plot(grid[2] // 2, grid[1] // 2, "k+", ms=9)
        fig.colorbar(image, ax=axes[r], shrink=0.8,
                     label="difference" if r % 2 else "logit q.k / sqrt(d)")
    fig.suptitle("The centre patch of view 0 (+) against every patch of four views, one constant q and k:\n"
                 "moving the world changes nothing (row 2 white); PRoPE also sees the lens (row 4: views 1-3 only)",
                 fontsize=10)
    return fig
