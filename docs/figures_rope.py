"""The figures of RoPE and the learned rotations (docs/make_figures.py): growth, zoom, frames, scalings, mixed heads,
VideoRoPE's layout, LieRE, STRING, ComRoPE and VRoPE."""
from __future__ import annotations

import matplotlib.pyplot as plt
import torch

import ndpe
from ndpe.viz import (as_image, centre_index, color_scale, encoding_relation, kind_colour, relation,
                      show_relation, style)
from ndpe.viz.panels import mark_trained_range, trained_window

from figure_registry import RELATION, VARIANT_LINES, figure, seeded
from figures_compare import (SCALING_DIM, SCALING_SCALE, SCALING_TRAIN, rope_mixed_heads,  # noqa: F401 (registered there)
                             rope_scaling_offset, rope_scalings, scaling_colours)


def profile(ax, values: torch.Tensor, grid: tuple, query: int, offsets=None, **line) -> None:
    """The query's row of a relation map as a curve against the column offset from the query (or ``offsets``)."""
    rows, cols = grid[-2], grid[-1]
    r, c = divmod(query % (rows * cols), cols)
    start = query - query % (rows * cols)
    ys = values[start + r * cols:start + (r + 1) * cols].numpy()
    xs = torch.arange(cols).numpy() - c if offsets is None else offsets
    ax.plot(xs, ys, **line)


@figure("rope")
def rope_2d_grow():
    """RoPE trained on 8x8, on a 24x24 grid: as it is (extrapolation: offsets beyond the training grid's, hatched)
    and with position interpolation (every angle divided by 3: each offset's angles stay within the trained ones).
    Theta 100, so the relation varies over these few tokens (theta 1e4's slow pairs barely turn over 24 tokens).
    Under the maps, the query's row as curves on one axis: the values the colours hide."""
    train, grow, s = (8, 8), (24, 24), 3.0
    panels = [(train, {}, f"trained grid {train}"),
              (grow, {}, f"{grow}: extrapolate\n(dashed: offsets seen in training)"),
              (grow, {"scaling": "linear", "scale": s}, f'{grow}: scaling="linear", scale {s:g}\n'
                                                        f"(every angle within those of the {train} grid)")]
    fig, axes = plt.subplot_mosaic([["a", "b", "c"], ["p", "p", "p"]], figsize=(12, 6.6), layout="constrained",
                                   gridspec_kw={"width_ratios": [train[1], grow[1], grow[1]],
                                                "height_ratios": [3, 1.4]})
    pes = [seeded(dims=2, kind="rope", dim=32, theta=100.0, **opts) for _, opts, _ in panels]
    rels = [relation(pe(grid), centre_index(grid)) for pe, (grid, _, _) in zip(pes, panels)]
    scale = color_scale(*rels)  # one scale for the three panels
    for ax, pe, (grid, opts, title), rel in zip((axes["a"], axes["b"], axes["c"]), pes, panels, rels):
        image = show_relation(ax, rel, grid, centre_index(grid), scale)
        if grid != train and not opts:  # extrapolation: outline the trained offsets, hatch the others
            mark_trained_range(ax, trained_window(pe, train, grid, centre_index(grid)), grid)
        ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=[axes["a"], axes["b"], axes["c"]], shrink=0.8, label=RELATION)
    lines = [("trained grid (8, 8)", style.BASELINE_COLOUR, "--", "o"),
             ("(24, 24): extrapolate", style.VARIANT_COLOURS[0], "-", "."),
             ('(24, 24): scaling="linear", scale 3', style.VARIANT_COLOURS[1], "-", "v")]
    for (grid, _, _), rel, (label, colour, ls, marker) in zip(panels, rels, lines):
        profile(axes["p"], rel, grid, centre_index(grid), color=colour, ls=ls, marker=marker, label=label)
    axes["p"].axvspan(-(train[1] // 2), train[1] - 1 - train[1] // 2, color="0.92", zorder=0)
    axes["p"].set(xlabel="column offset from the query, along its row (grey: offsets of the trained grid)",
                  ylabel="relation")
    axes["p"].legend(fontsize=8, loc="lower center", ncols=3)
    fig.suptitle("2D RoPE, head_dim 32, theta 100, index coordinates: relation to the centre token as the grid grows\n"
                 "hatched: offsets the model never saw; below: the query's row of each map", fontsize=10)
    return fig


ZOOM_TRAIN, ZOOM_GROWN = (8, 8), (16, 16)
ZOOM_ENCODINGS = {"index coordinates": {"theta": 100.0},
                  "DINOv3 (centred, periods)": {"coords": "centered", "periods": True, "theta": 100.0}}


def zoom_canvas_profiles() -> dict:
    """Per encoding of :data:`ZOOM_ENCODINGS`: the relation along the query's row against the offset in content
    (training image widths), at the training size, zoomed (the same image in 16 x 16 patches) and on a canvas (16 x
    16 patches of the training size: twice the image), as ``(offsets, values)``; and the three maps."""
    out = {}
    for name, opts in ZOOM_ENCODINGS.items():
        pe = seeded(dims=2, kind="rope", dim=32, **opts)
        views = {}
        for view, grid, patch in (("training", ZOOM_TRAIN, 1 / ZOOM_TRAIN[1]), ("zoom", ZOOM_GROWN, 1 / ZOOM_GROWN[1]),
                                  ("canvas", ZOOM_GROWN, 1 / ZOOM_TRAIN[1])):
            q = centre_index(ZOOM_TRAIN) if view == "canvas" else centre_index(grid)  # canvas: the same patch
            q = q // ZOOM_TRAIN[1] * grid[1] + q % ZOOM_TRAIN[1] if view == "canvas" else q
            rel = relation(pe(grid), q)
            r, c = divmod(q, grid[1])
            offsets = (torch.arange(grid[1]) - c).double() * patch
            views[view] = {"map": rel, "grid": grid, "query": q, "patch": patch,
                           "profile": (offsets, rel.reshape(grid)[r].double())}
        out[name] = views
    return out


def largest_gap(profiles: dict, view: str) -> float:
    """The largest difference between ``view``'s profile and the training one at the training grid's offsets."""
    (x0, y0), (x, y) = profiles["training"]["profile"], profiles[view]["profile"]
    gaps = [abs(float(y[(x - a).abs().argmin()]) - float(b)) for a, b in zip(x0, y0)
            if float((x - a).abs().min()) < 1e-9]
    return max(gaps)


@figure("rope")
def rope_dinov3_zoom():
    """One encoding at the training size, zoomed (the same image in more, smaller patches) and on a canvas (more
    image, patches of the same size), drawn in content units (training image widths) so the three line up; a row
    per encoding (index coordinates, DINOv3's centred coordinates with periods), the query's row as curves."""
    data = zoom_canvas_profiles()
    fig, axes = plt.subplots(2, 4, figsize=(13, 6.6), layout="constrained",
                             gridspec_kw={"width_ratios": [1, 1, 2, 2.2]})
    scale = color_scale(*(v["map"] for views in data.values() for v in views.values()))
    colours = {"training": style.BASELINE_COLOUR, "zoom": style.VARIANT_COLOURS[0], "canvas": style.VARIANT_COLOURS[1]}
    for row, (name, views) in zip(axes, data.items()):
        for ax, (view, v) in zip(row, views.items()):
            rows, cols = v["grid"]
            extent = (0, cols * v["patch"], rows * v["patch"], 0)
            image = ax.imshow(v["map"].reshape(rows, cols).numpy(), extent=extent, interpolation="nearest", **scale)
            r, c = divmod(v["query"], cols)
            ax.plot((c + 0.5) * v["patch"], (r + 0.5) * v["patch"], "k+", ms=8, mew=1.5)
            if view == "canvas":
                ax.add_patch(plt.Rectangle((0, 0), 1, 1, fill=False, ec="k", lw=1.5, ls="--"))
            dashed = ": the training image dashed" if view == "canvas" else ""
            ax.set_title(f"{name}\n{view} {rows} x {cols}{dashed}", fontsize=8)
            ax.set_xlabel("image widths", fontsize=8)
            ax.tick_params(labelsize=7)
            for spine in ax.spines.values():
                spine.set_color(colours[view])
                spine.set_linewidth(2)
        for view, v in views.items():
            x, y = v["profile"]
            gap = "" if view == "training" else f": differs by up to {largest_gap(views, view):.2f}"
            row[3].plot(x.numpy(), y.numpy(), color=colours[view], marker="o" if view == "training" else ".",
                        ls="-" if view != "zoom" else "--", label=view + gap)
        row[3].set(xlabel="offset from the query along its row (image widths)", ylabel="relation", xlim=(-0.6, 1.1))
        row[3].set_title(f"{name}: the query's row", fontsize=8)
        row[3].legend(fontsize=7, loc="upper right")
    fig.colorbar(image, ax=axes[:, :3], shrink=0.6, label=RELATION)
    fig.suptitle("2D RoPE, head_dim 32, theta 100, one encoding per row: trained on 8 x 8, then the same image in\n"
                 "16 x 16 patches (zoom) and twice the image in patches of the same size (canvas)", fontsize=10)
    return fig


@figure("rope")
def rope_3d_frames():
    """The relation of the centre token of a 5-frame video to every frame, on one scale, and under each frame its
    query row against the query frame's (dashed): each frame's map is the query frame's lowered by a constant."""
    grid = (5, 12, 12)  # (frames, rows, cols)
    pe = seeded(dims=3, kind="rope", dim=48, theta=100.0)  # head_dim 48: 16 rotary channels per axis
    q = centre_index(grid)
    rel = relation(pe(grid), q)
    fig, axes = plt.subplots(2, 5, figsize=(12.5, 5.0), layout="constrained", gridspec_kw={"height_ratios": [3, 1.4]},
                             sharey="row")
    scale = color_scale(rel)  # one scale for every frame
    ticks = list(range(0, grid[1], 3))
    per_frame = grid[1] * grid[2]
    for ax, low, frame in zip(axes[0], axes[1], range(grid[0])):
        image = ax.imshow(as_image(rel, grid, frame).numpy(), **scale, interpolation="nearest")
        drop = float(rel[q] - rel[frame * per_frame + q % per_frame])
        ax.set_title(f"frame {frame} (offset {frame - grid[0] // 2:+d}): {drop:.2f} below", fontsize=9)
        ax.set(xticks=ticks, yticks=ticks)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("column (axis 2)", fontsize=8)
        ax.set_ylabel("row (axis 1)", fontsize=8)
        profile(low, rel, grid, q, color=style.BASELINE_COLOUR, ls="--", lw=1, label="query frame")
        profile(low, rel, grid, frame * per_frame + q % per_frame, color=style.VARIANT_COLOURS[0], marker=".",
                label=f"frame {frame}")
        low.set_xlabel("column offset (query row)", fontsize=8)
        low.tick_params(labelsize=7)
        low.legend(fontsize=6, loc="upper right")
    axes[1, 0].set_ylabel("relation", fontsize=8)
    axes[0, grid[0] // 2].plot(grid[2] // 2, grid[1] // 2, "k+", ms=8, mew=1.5)
    fig.colorbar(image, ax=axes[0], shrink=0.8, label=RELATION)
    fig.suptitle(f"3D RoPE (video grid {grid}, theta 100): relation of the centre token (+) to every frame; below, "
                 "the query's row in each frame against the query frame's", fontsize=10)
    return fig


def frequency_ratios(train: int, scale: float, dim: int) -> dict:
    """Scaling label -> scaled / original frequency per rotary pair, read off the PosOut at the target length (the
    angle at position 1 is the frequency: all below pi)."""
    length = int(train * scale)
    out = {}
    for label, opts in rope_scalings(train, scale).items():
        cos, sin = seeded(dims=1, kind="rope", dim=dim, **opts)((length,)).rot  # (1, length, dim / 2)
        out[label] = torch.atan2(sin[0, 1], cos[0, 1]).double()
    base = out["no scaling"]
    return {label: freq / base for label, freq in out.items()}


@figure("rope")
def rope_scaling_freqs():
    train, scale, dim = SCALING_TRAIN, SCALING_SCALE, SCALING_DIM
    ratios = frequency_ratios(train, scale, dim)
    colours = scaling_colours(ratios)
    fig, ax = plt.subplots(figsize=(7.5, 4.3), layout="constrained")
    # YaRN's bands, read off its ratios: kept (ratio 1), divided by the scale, and the ramp between
    yarn = ratios["yarn"]
    kept = (yarn - 1).abs() < 1e-6
    divided = (yarn * scale - 1).abs() < 1e-6
    j = torch.arange(yarn.shape[0])
    # shaded in greys, apart from the lines' colours: kept darkest, the ramp lighter, the divided band left white
    bands = [(kept, "0.82", "YaRN keeps:\n> 32 turns over\nthe trained length"),
             (~kept & ~divided, "0.93", "YaRN's ramp"),
             (divided, "none", f"YaRN divides by {scale:g}:\n< 1 turn over\nthe trained length")]
    for mask, shade, text in bands:
        if bool(mask.any()):
            lo, hi = int(j[mask].min()), int(j[mask].max())
            ax.axvspan(lo - 0.5, hi + 0.5, color=shade, lw=0, zorder=0)
            ax.text((lo + hi) / 2, 1.12, text, ha="center", va="bottom", fontsize=7.5, color="0.25")
    for (label, ratio), (ls, marker) in zip(ratios.items(), VARIANT_LINES):
        ax.plot(ratio.numpy(), marker=marker, ms=4, ls=ls, lw=1.3, color=colours[label],
                label=label + (f" (at length {int(train * scale)})" if label == "dynamic-ntk" else ""))
    ax.set(yscale="log", ylim=(None, 2.6), xlim=(-0.5, yarn.shape[0] - 0.5), xlabel="frequency index j (fast to slow)",
           ylabel="scaled / original frequency")
    fig.suptitle(f"1D RoPE, head_dim {dim}, theta 1e4: frequencies after scaling (scale {scale:g}, trained length "
                 f"{train})", fontsize=10)
    ax.legend(fontsize=8, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    return fig


@figure("videorope")
def videorope_layout():
    """VideoRoPE: the diagonal layout of a video's ids and which axis each frequency turns with, beside M-RoPE."""
    grid = (4, 5, 5)
    pe = seeded(dims=3, kind="videorope", dim=64, heads=1)
    mrope = seeded(dims=3, kind="rope", dim=64, heads=1, mrope_section=(8, 12, 12))
    ids = pe.layout(pe.coords(grid), grid)
    fig, (left, right) = plt.subplots(1, 2, figsize=(11, 3.8), layout="constrained")
    colour = kind_colour("videorope")
    for frame in range(grid[0]):
        rows = ids[ids[:, 0] == 2.0 * frame]
        left.scatter(rows[:, 0], rows[:, 1], s=12, color=colour, alpha=0.4 + 0.15 * frame)
    left.plot([0, 6], [0, 6], ":", color="0.5", lw=1)
    left.set(xlabel="time id t' = 2 t", ylabel="row id h' = h - 2 + t'",
             title="diagonal layout: each frame's rows centred on its time id")
    axis_colours = ["#1b9e77", "#d95f02", "#7570b3"]
    for y, (name, enc) in enumerate((("M-RoPE (Qwen2-VL)", mrope), ("VideoRoPE", pe))):
        axes = enc.freq_axis.tolist()
        right.scatter(range(len(axes)), [y] * len(axes), c=[axis_colours[a] for a in axes], s=40, marker="s")
    right.set(yticks=[0, 1], yticklabels=["M-RoPE (Qwen2-VL)", "VideoRoPE"], ylim=(-0.6, 1.6),
              xlabel="frequency index j (fast to slow)", title="axis of each frequency: t green, h orange, w purple")
    fig.suptitle("VideoRoPE (Wei et al. 2025), grid (4, 5, 5), head_dim 64", fontsize=10)
    return fig


@figure("liere")
def liere_queries():
    """LieRE's logits for constant content from two queries: rope's maps are translates, LieRE's need not be."""
    grid = (12, 12)
    queries = [(6, 6), (2, 9)]
    fig, axes = plt.subplots(1, 4, figsize=(13.5, 3.4), layout="constrained")
    panels = []
    for kind, opts in (("rope", {}), ("liere", {"init_std": 0.5})):
        pe = seeded(dims=2, kind=kind, dim=32, heads=1, **opts)
        for r, c in queries:
            with torch.no_grad():
                panels.append((kind, (r, c), encoding_relation(pe, grid, r * grid[1] + c)))
    scale = color_scale(*(rel for _, _, rel in panels))  # one scale: the four maps are compared
    for ax, (kind, (r, c), rel) in zip(axes, panels):
        image = show_relation(ax, rel, grid, r * grid[1] + c, scale)
        ax.set_title(f"{kind}: query {(r, c)}", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label=style.colourbar_label("relation", "q.k, constant q and k"))
    fig.suptitle("Constant q and k, two queries: RoPE's maps are the same map moved; LieRE's dense generators "
                 "(random, std 0.5, 2 axes) do not commute, so its maps change shape", fontsize=10)
    return fig


@figure("string")
def string_directions():
    """STRING: one fixed q and k at every token, the centre query's logits; rope's frequencies each turn along one
    axis, STRING's learned basis mixes them (a random basis here)."""
    grid = (12, 12)
    query = centre_index(grid)
    n = grid[0] * grid[1]
    g = torch.Generator().manual_seed(0)
    q = torch.randn(1, 1, 1, 32, generator=g).expand(1, 1, n, 32).contiguous()
    k = torch.randn(1, 1, 1, 32, generator=g).expand(1, 1, n, 32).contiguous()
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.6), layout="constrained")
    panels = [("rope", {}), ("string", {"init_std": 0.3}), ("string", {"init_std": 0.3, "orthogonal": "circulant"})]
    maps = []
    for kind, opts in panels:
        pe = seeded(dims=2, kind=kind, dim=32, heads=1, theta=100.0, **opts)
        with torch.no_grad():
            rq, rk = ndpe.apply_qk(q, k, pe(grid))
            maps.append((rq @ rk.transpose(-1, -2))[0, 0, query] / 32 ** 0.5)
    scale = color_scale(*maps)  # one scale: the three maps are compared
    for ax, (kind, opts), row in zip(axes, panels, maps):
        image = show_relation(ax, row, grid, query, scale)
        ax.set_title(kind + ("" if not opts else f" ({opts.get('orthogonal', 'cayley')}, std {opts['init_std']})"),
                     fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label=style.colourbar_label("relation", "logit q.k / sqrt(d)"))
    fig.suptitle("One fixed q and k at every token, the centre query's logits, theta 100: STRING turns RoPE's "
                 "axis-aligned frequencies in a learned basis (random here)", fontsize=10)
    return fig


@figure("liere", "comrope")
def comrope_queries():
    """ComRoPE beside LieRE with the same blocks: constant content from two queries; ComRoPE's commuting angle
    matrices make its maps translates of one map, LieRE's need not be."""
    grid = (12, 12)
    queries = [(6, 6), (2, 9)]
    fig, axes = plt.subplots(1, 4, figsize=(13, 3.4), layout="constrained")
    for row, kind in enumerate(("liere", "comrope")):
        pe = seeded(dims=2, kind=kind, dim=32, heads=1, block_size=4, init_std=0.5)
        rels = []
        for r, c in queries:
            with torch.no_grad():
                rels.append(encoding_relation(pe, grid, r * grid[1] + c))
        style = color_scale(*rels)
        for col, ((r, c), rel) in enumerate(zip(queries, rels)):
            ax = axes[2 * row + col]
            show_relation(ax, rel, grid, r * grid[1] + c, style)
            ax.set_title(f"{kind}: query {(r, c)}", fontsize=9)
    fig.suptitle("Constant q and k, two queries, blocks of 4 (random, std 0.5): LieRE's free generators per axis do not "
                 "commute, its maps change shape;\nComRoPE-LD's commute, its maps are one map moved", fontsize=10)
    return fig


@figure("vrope", "rope")
def vrope_ids():
    """VRoPE: two of a frame's four ids (h + w and h - w, each also mirrored), and the score of q = k = 1 around the
    centre query beside a text model's RoPE over the frame's raster index."""
    frame, big = (5, 5), (1, 11, 11)
    pe = seeded(dims=3, kind="vrope", dim=64, heads=1)
    ids = pe.ids(pe.layout(pe.coords((1, *frame)), (1, *frame))).reshape(*frame, 4)
    fig, axes = plt.subplots(1, 4, figsize=(14, 3.6), layout="constrained")
    for ax, c, name in ((axes[0], 0, "c0 = h + w"), (axes[1], 1, "c1 = h + (W-1-w)")):
        ax.imshow(ids[..., c], cmap="Greens")
        for (r, col), v in zip(torch.cartesian_prod(torch.arange(5), torch.arange(5)).tolist(), ids[..., c].flatten()):
            ax.text(col, r, f"{int(v)}", ha="center", va="center", fontsize=8)
        ax.set(title=f"{name} (c3, c2 mirror them)", xlabel="column w", ylabel="row h")
    n = big[1] * big[2]
    ones = torch.ones(1, 1, n, 64)
    centre = centre_index(big[1:])
    maps = []
    for enc, grid in ((pe, big), (seeded(dims=1, kind="rope", dim=64, heads=1), (n,))):
        with torch.no_grad():
            rq, rk = ndpe.apply_qk(ones, ones, enc(grid))
            maps.append((rq @ rk.transpose(-1, -2))[0, 0, centre] / 64 ** 0.5)
    style = color_scale(*maps)
    for ax, values, name in zip(axes[2:], maps, ("vrope", "rope over the raster index")):
        show_relation(ax, values, big[1:], centre, style)
        ax.set_title(f"{name}:\nq = k = 1, centre query", fontsize=9)
    fig.suptitle("VRoPE (Liu et al. 2025), head_dim 64: frequency j turns by id c_(j mod 4); the score is the same at "
                 "(dh, dw), (dw, dh) and their negatives,\nwhere a text model's RoPE over the raster order is not",
                 fontsize=10)
    return fig
