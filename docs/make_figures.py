"""Regenerate every figure of docs/guide.md into docs/figures/ (deterministic: seeds fixed).

    python docs/make_figures.py                 # all figures
    python docs/make_figures.py rope_scaling    # only the ones whose name contains a word

Untrained learned parameters (learned tables, relative biases, RoPE-Mixed frequencies) are shown
at their seeded initialisation; each figure says so. Kinds not registered are skipped with a note.

Every map uses its quantity's colour map and one scale per figure wherever panels are compared
(``ndpe.viz.style``: relations and biases red-blue around 0, encoding values purple-orange); the
variants of one kind (RoPE's scalings) take the palette ``style.VARIANT_COLOURS``.
"""
from __future__ import annotations

import sys
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import torch  # noqa: E402

import ndpe  # noqa: E402
from ndpe.viz import (as_image, centre_index, color_scale, encoding_relation, kind_colour,  # noqa: E402
                      make_figure, offset_curve, relation, save, show_relation, style)
from ndpe.viz.panels import mark_trained_range, trained_window  # noqa: E402

OUT = Path(__file__).parent / "figures"
FIGURES = {}
# line styles / markers of the variants of one kind in one figure (each in its own colour, style.VARIANT_COLOURS):
# the style and marker tell them apart in grey print too
VARIANT_LINES = [("-", "o"), ("--", "v"), (":", "^"), ("-.", "s"), ((0, (3, 1, 1, 1, 1, 1)), "d")]
RELATION = style.colourbar_label("relation", "normalized q.k")  # the colourbar of RoPE's relation maps


def figure(*kinds):
    """Register a figure builder; it is skipped (with a note) when one of ``kinds`` is not registered."""
    def wrap(fn):
        FIGURES[fn.__name__] = (fn, kinds)
        return fn
    return wrap


def seeded(**make_args):
    torch.manual_seed(0)
    return ndpe.make(**make_args).eval()


@figure("sinusoidal")
def sinusoidal_table():
    pe = seeded(dims=1, kind="sinusoidal", dim=128, layout="blocks")
    return make_figure("table", pe, (100,), name='sinusoidal, dim 128, layout="blocks"')


@figure("sinusoidal")
def sinusoidal_offset():
    pe = seeded(dims=1, kind="sinusoidal", dim=64)
    return make_figure("offset", pe, (64,), name="sinusoidal, dim 64")


@figure("sinusoidal")
def sinusoidal_2d_concat_vs_add():
    grid, query = (16, 16), (3, 11)
    index = query[0] * grid[1] + query[1]
    rel = {c: relation(seeded(dims=2, kind="sinusoidal", dim=64, combine=c)(grid), index) for c in ("concat", "add")}
    scale = color_scale(*rel.values())  # one scale: the two panels are compared
    fig, axes = plt.subplots(1, 2, figsize=(9, 4.2), layout="constrained")
    for ax, combine in zip(axes, rel):
        image = show_relation(ax, rel[combine], grid, index, scale)
        ax.plot(query[0], query[1], "o", mfc="none", mec="k", ms=9, mew=1.5)  # the mirror token (j, i)
        ax.set_title(f'combine="{combine}"')
    fig.colorbar(image, ax=axes, shrink=0.8, label=style.colourbar_label("relation", "cosine similarity"))
    fig.suptitle(f"2D sinusoidal, dim 64: similarity of token {query} (+) to all; circle: its mirror "
                 f"{query[::-1]}", fontsize=10)
    return fig


@figure("rope")
def rope_2d_grow():
    """RoPE trained on 8x8, on a 24x24 grid: as it is (extrapolation: offsets beyond the training grid's, hatched)
    and with position interpolation (every angle divided by 3: each offset's angles stay within the trained ones).
    Theta 100, so the relation varies over these few tokens (theta 1e4's slow pairs barely turn over 24 tokens)."""
    train, grow, s = (8, 8), (24, 24), 3.0
    panels = [(train, {}, f"trained grid {train}"),
              (grow, {}, f"{grow}: extrapolate\n(dashed: offsets seen in training)"),
              (grow, {"scaling": "linear", "scale": s}, f'{grow}: scaling="linear", scale {s:g}\n'
                                                        f"(every angle within those of the {train} grid)")]
    fig, axes = plt.subplots(1, 3, figsize=(12, 4.1), layout="constrained",
                             gridspec_kw={"width_ratios": [train[1], grow[1], grow[1]]})
    pes = [seeded(dims=2, kind="rope", dim=32, theta=100.0, **opts) for _, opts, _ in panels]
    rels = [relation(pe(grid), centre_index(grid)) for pe, (grid, _, _) in zip(pes, panels)]
    scale = color_scale(*rels)  # one scale for the three panels
    for ax, pe, (grid, opts, title), rel in zip(axes, pes, panels, rels):
        image = show_relation(ax, rel, grid, centre_index(grid), scale)
        if grid != train and not opts:  # extrapolation: outline the trained offsets, hatch the others
            mark_trained_range(ax, trained_window(pe, train, grid, centre_index(grid)), grid)
        ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label=RELATION)
    fig.suptitle("2D RoPE, head_dim 32, theta 100, index coordinates: relation to the centre token as the grid grows; "
                 "hatched: offsets the model never saw", fontsize=10)
    return fig


@figure("rope")
def rope_dinov3_zoom():
    """DINOv3's rope: centred coordinates in [-1, 1] with periods, so a larger grid samples the same map finer."""
    dino = {"coords": "centered", "periods": True, "theta": 100.0}
    panels = [((8, 8), dino, "trained grid (8, 8)"), ((16, 16), dino, "(16, 16), DINOv3: the same map, finer"),
              ((16, 16), {"theta": 100.0}, "(16, 16), index coordinates: wider")]
    fig, axes = plt.subplots(1, 3, figsize=(11, 3.8), layout="constrained", gridspec_kw={"width_ratios": [8, 16, 16]})
    rels = [relation(seeded(dims=2, kind="rope", dim=32, **opts)(grid), centre_index(grid)) for grid, opts, _ in panels]
    scale = color_scale(*rels)
    for ax, (grid, opts, title), rel in zip(axes, panels, rels):
        image = show_relation(ax, rel, grid, centre_index(grid), scale)
        ax.set_title(title, fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label=RELATION)
    fig.suptitle("2D RoPE, head_dim 32, theta 100: relation to the centre token, DINOv3's periods on centred "
                 "coordinates (zoom) vs index coordinates (canvas)", fontsize=10)
    return fig


@figure("rope")
def rope_3d_frames():
    grid = (5, 12, 12)  # (frames, rows, cols)
    pe = seeded(dims=3, kind="rope", dim=48, theta=100.0)  # head_dim 48: 16 rotary channels per axis
    q = centre_index(grid)
    rel = relation(pe(grid), q)
    fig, axes = plt.subplots(1, 5, figsize=(12.5, 3.3), layout="constrained")
    scale = color_scale(rel)  # one scale for every frame
    ticks = list(range(0, grid[1], 3))
    for ax, frame in zip(axes, range(grid[0])):
        image = ax.imshow(as_image(rel, grid, frame).numpy(), **scale, interpolation="nearest")
        ax.set_title(f"frame {frame} (offset {frame - grid[0] // 2:+d})", fontsize=9)
        ax.set(xticks=ticks, yticks=ticks)
        ax.tick_params(labelsize=7)
        ax.set_xlabel("column (axis 2)", fontsize=8)
        ax.set_ylabel("row (axis 1)", fontsize=8)
    axes[grid[0] // 2].plot(grid[2] // 2, grid[1] // 2, "k+", ms=8, mew=1.5)
    fig.colorbar(image, ax=axes, shrink=0.8, label=RELATION)
    fig.suptitle(f"3D RoPE (video grid {grid}, theta 100): relation of the centre token (+) to every frame",
                 fontsize=10)
    return fig


# RoPE scaling figures: a trained length long enough that YaRN's three bands all exist at its defaults
# (beta_fast 32, beta_slow 1): below about 200 tokens no frequency turns 32 times, and nothing is kept
SCALING_TRAIN, SCALING_SCALE, SCALING_DIM = 1024, 4.0, 64


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


@figure("rope")
def rope_scaling_offset():
    train, scale, dim = SCALING_TRAIN, SCALING_SCALE, SCALING_DIM
    length = int(train * scale)
    colours = scaling_colours(rope_scalings(train, scale))
    fig, (near, far) = plt.subplots(1, 2, figsize=(11, 4), layout="constrained", gridspec_kw={"width_ratios": [1, 1.6]})
    for (label, opts), (ls, _) in zip(rope_scalings(train, scale).items(), VARIANT_LINES):
        rel = relation(seeded(dims=1, kind="rope", dim=dim, **opts)((length,)), 0).numpy()
        near.plot(rel[:65], label=label, lw=1.3, ls=ls, color=colours[label], marker=".", ms=3)
        window = 64  # the far panel: the mean over windows of 64 offsets (the fast ripples averaged out)
        far.plot(torch.arange(0, length, window).numpy() + window / 2,
                 torch.tensor(rel).reshape(-1, window).mean(-1).numpy(), label=label, lw=1.4, ls=ls,
                 color=colours[label])
    far.axvspan(train - 0.5, length, facecolor="0.93", edgecolor="0.6", hatch=style.OUTSIDE_HATCH, lw=0, zorder=0)
    far.axvline(train - 1, color="gray", ls=":", lw=1)
    far.text(train + 40, 1.0, f"beyond the trained length {train}", fontsize=8, color="0.3", va="top")
    near.set(xlabel="offset (key - query), query at position 0", ylabel=RELATION, title="offsets 0-64: local order",
             ylim=(-0.3, 1.02))
    far.set(xlabel="offset (key - query)",
            title=f"offsets 0-{length - 1} (target length {length}), mean over windows of 64 offsets",
            ylim=(-0.3, 1.02), xlim=(0, length))
    near.legend(fontsize=8)
    for ax in (near, far):
        ax.title.set_fontsize(9)
    fig.suptitle(f"1D RoPE, head_dim {dim}, theta 1e4: relation vs offset, scale {scale:g}, trained length {train}",
                 fontsize=10)
    return fig


@figure("rope-mixed")
def rope_mixed_heads():
    pe = seeded(dims=2, kind="rope-mixed", dim=128, heads=4)
    return make_figure("heads", pe, (16, 16), name="rope-mixed at init (seed 0), head_dim 32")


@figure("learned")
def learned_resize():
    """A learned 8x8 table resized bicubic to 16x16; its values are set to a smooth 2D pattern as a trained stand-in."""
    small, large = (8, 8), (16, 16)
    pe = seeded(dims=2, kind="learned", dim=32, grid_shape=small, resize="bicubic")
    with torch.no_grad():  # stand-in for a trained table: a smooth pattern (2D sinusoidal, temperature 16)
        smooth = ndpe.make(dims=2, kind="sinusoidal", dim=32, temperature=16.0)(small).add
        pe.table.copy_(smooth.reshape(*small, 32))
    fig, axes = plt.subplots(2, 2, figsize=(7.5, 7), layout="constrained", gridspec_kw={"width_ratios": [8, 16]})
    with torch.no_grad():
        grids = (small, large)
        channels = [pe(g).add[:, 2].reshape(g) for g in grids]  # channel 2 of (N, 32)
        rels = [relation(pe(g), centre_index(g)) for g in grids]
        channel_style, rel_style = color_scale(*channels, quantity="encoding"), color_scale(*rels)
        for col, grid in enumerate(grids):
            im0 = axes[0, col].imshow(channels[col].numpy(), interpolation="nearest", **channel_style)
            axes[0, col].set_title(f"channel 2, grid {grid}" + (" (stored)" if grid == small else " (bicubic)"),
                                   fontsize=9)
            axes[0, col].set(xlabel="column (axis 1)", ylabel="row (axis 0)")
            im1 = show_relation(axes[1, col], rels[col], grid, centre_index(grid), rel_style)
            axes[1, col].set_title("cosine similarity to the centre", fontsize=9)
    fig.colorbar(im0, ax=axes[0], shrink=0.8, label=style.colourbar_label("encoding", "channel 2"))
    fig.colorbar(im1, ax=axes[1], shrink=0.8, label=style.colourbar_label("relation", "cosine similarity"))
    fig.suptitle("learned 8x8 table (set to a smooth stand-in pattern) resized bicubic to 16x16", fontsize=10)
    return fig


@figure("alibi")
def alibi_1d_bias():
    pe = seeded(dims=1, kind="alibi", dim=64, heads=8)
    return make_figure("table", pe, (32,), name="alibi, 8 heads")


@figure("dd-alibi")
def dd_alibi_gates():
    """Data-dependent ALiBi's bias from the last token back, for gates set by hand: constant (ALiBi), and one
    token closing its gate (everything before it forgotten)."""
    from ndpe.kinds.dd_alibi import forget_bias
    n, m = 24, 0.1
    constant = torch.full((1, n, 1), -m)
    closing = constant.clone()
    closing[0, 12, 0] = torch.log(torch.tensor(0.02))  # token 12's gate: 0.02
    fig, ax = plt.subplots(figsize=(6.5, 3.4), layout="constrained")
    colour = kind_colour("dd-alibi")
    for gates, ls, label in ((constant, "-", f"every gate exp(-{m}): ALiBi's slope {m}"),
                             (closing, "--", "token 12 closes its gate (0.02)")):
        row = forget_bias(gates)[0, 0, -1]  # the last query's bias to every key
        ax.plot(range(n), row.numpy(), ls, color=colour, marker="o", ms=3, label=label)
    ax.set(xlabel="key position j (query at 23)", ylabel="bias = sum of log gates after j")
    ax.legend(fontsize=8)
    ax.set_title("dd-alibi (Forgetting Transformer): the bias is the log of the gates between key and query",
                 fontsize=9)
    return fig


@figure("pope")
def pope_what_where():
    """RoPE's logit against the offset moves with the content (its phase adds to the position's); PoPE's does not."""
    n, d = 65, 32
    query = n // 2
    g = torch.Generator().manual_seed(0)
    fig, axes = plt.subplots(1, 2, figsize=(11, 3.6), layout="constrained", sharey=False)
    for ax, kind in zip(axes, ("rope", "pope")):
        pe = seeded(dims=1, kind=kind, dim=d, heads=1)
        for sample in range(3):
            q = torch.randn(1, 1, 1, d, generator=g).expand(1, 1, n, d)
            k = torch.randn(1, 1, 1, d, generator=g).expand(1, 1, n, d)
            with torch.no_grad():
                pos = pe((n,))
                rq, rk = ndpe.apply_qk(q.contiguous(), k.contiguous(), pos)
                logits = rq @ rk.transpose(-1, -2) * d ** -0.5
                if pos.logits is not None:
                    logits = logits + pos.logits(rq, rk)
            ax.plot(range(n), logits[0, 0, query].numpy(), color=kind_colour(kind), alpha=1 - 0.3 * sample,
                    lw=1.2, label=f"content {sample + 1}")
        ax.axvline(query, color="0.5", ls=":", lw=1)
        ax.set(xlabel="key position (query at 32)", ylabel="logit")
        ax.set_title(f"{kind}: the same q and k at every position", fontsize=9)
        ax.legend(fontsize=7)
    fig.suptitle("Where the logit peaks: RoPE's peak moves with the content, PoPE's stays at offset 0 (phase offsets "
                 "0, the init)", fontsize=10)
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


@figure("alibi")
def alibi_1d_heads():
    pe = seeded(dims=1, kind="alibi", dim=64, heads=8)
    return make_figure("heads", pe, (32,), name="alibi, slopes 1/2 .. 1/256")


@figure("alibi")
def alibi_2d_heads():
    pe = seeded(dims=2, kind="alibi", dim=64, heads=8)  # slopes 1/2 .. 1/256: bias -1 at distances 2, 4, 8, 16, ...
    return make_figure("heads", pe, (25, 25), name='alibi 2D, distance="euclidean", 8 heads')


@figure("relative")
def relative_2d_clip():
    pe = seeded(dims=2, kind="relative", dim=64, heads=4, max_distance=3)
    return make_figure("heads", pe, (15, 15), name="relative clip, max_distance 3, at init")


@figure("relative")
def relative_t5_offset():
    pe = seeded(dims=1, kind="relative", dim=64, heads=1, mode="t5", num_buckets=32, max_distance=128)
    with torch.no_grad():  # table row b set to b: the bias then reads as the bucket of each offset
        pe.table.copy_(torch.arange(pe.table.shape[0], dtype=torch.float32).reshape(pe.table.shape))
    offsets, values = offset_curve(pe, (64,))
    fig, ax = plt.subplots(figsize=(7, 3.8), layout="constrained")
    ax.step(offsets.numpy(), values.numpy(), where="mid", color=kind_colour("relative"))
    ax.axvline(-63, color="gray", ls=":", lw=1)
    ax.axvline(63, color="gray", ls=":", lw=1)
    ax.set(xlabel="offset (key - query)", ylabel="bucket (bias with table[b] = b)",
           title="relative t5, 32 buckets, max_distance 128: the bucket of each offset\n"
                 "(keys before the query: buckets 0-15, after: 16-31; dotted: largest offset of a 64 grid)")
    ax.title.set_fontsize(9)
    return fig


@figure("coord")
def coord_channels():
    grid = (8, 12)
    pe = seeded(dims=2, kind="coord", dim=64, with_r=True)
    cat = pe(grid).cat  # (N, 3)
    fig, axes = plt.subplots(1, 3, figsize=(10.5, 3.2), layout="constrained")
    scale = color_scale(cat, quantity="encoding")  # one scale for the three channels
    for ax, c, label in zip(axes, range(3), ("channel 0: row coordinate", "channel 1: column coordinate",
                                             "channel 2: r (distance to centre)")):
        image = ax.imshow(cat[:, c].reshape(grid).numpy(), interpolation="nearest", **scale)
        ax.set(title=label, xlabel="column (axis 1)", ylabel="row (axis 0)")
        ax.title.set_fontsize(9)
    fig.colorbar(image, ax=axes, shrink=0.8, label=style.colourbar_label("encoding", "coordinate"))
    fig.suptitle('coord, grid (8, 12), coords="pixel", with_r=True', fontsize=10)
    return fig


@figure("fourier")
def fourier_sigma():
    grid = (16, 16)
    q = centre_index(grid)
    fig, axes = plt.subplots(1, 3, figsize=(10, 3.4), layout="constrained")
    sigmas = (0.5, 2.0, 8.0)
    rels = [relation(seeded(dims=2, kind="fourier", dim=128, sigma=sigma, seed=0)(grid), q) for sigma in sigmas]
    scale = color_scale(*rels)  # one scale, so the panels compare
    for ax, sigma, rel in zip(axes, sigmas, rels):
        image = show_relation(ax, rel, grid, q, scale)
        ax.set_title(f"sigma = {sigma:g}", fontsize=9)
    fig.colorbar(image, ax=axes, shrink=0.8, label=style.colourbar_label("relation", "cosine similarity"))
    fig.suptitle("fourier features, dim 128, pixel coords: similarity to the centre token", fontsize=10)
    return fig


NEW_1D_KINDS = {  # kind -> (options, what the panel's title adds)
    "xpos": ({"scale_base": 32.0}, "scale_base 32"),
    "complex": ({}, "frequencies at init"),
    "cope": ({"max_pos": 16}, "max_pos 16, table E ~ N(0, 1 / 64) stand-in"),
    "transformer-xl": ({}, "W_R, u, v at init"),
    "fire": ({}, "MLP at init"),
    "cpb": ({}, 'style "swin", MLP at init'),
}


@figure(*NEW_1D_KINDS)
def kinds_1d_middle_query():
    """One panel per 1D kind of issue 11: the relation of the middle query to every key, content terms for constant
    content (ndpe.viz.Content: one seeded q, k and token at every position)."""
    from ndpe.viz.figures import _causal_note, _what

    grid = (64,)
    query = centre_index(grid)
    fig, axes = plt.subplots(2, 3, figsize=(13, 6.6), layout="constrained")
    for ax, (kind, (opts, note)) in zip(axes.flat, NEW_1D_KINDS.items()):
        pe = seeded(dims=1, kind=kind, dim=64, heads=1, **opts)
        if kind == "cope":  # its table starts at 0 (no term at all): a seeded stand-in for a trained one
            with torch.no_grad():
                pe.table.normal_(std=pe.head_dim ** -0.5, generator=torch.Generator().manual_seed(0))
        with torch.no_grad():
            pos = pe(grid)
            rel = encoding_relation(pe, grid, query)
        show_relation(ax, rel, grid, query, color=kind_colour(kind))
        ax.set_title(f"{kind} ({note})\n{_what(pos)}{_causal_note(pos)}", fontsize=9)
        ax.set_ylabel(_what(pos), fontsize=8)
        ax.set_xlabel("key position", fontsize=8)
    fig.suptitle(f"1D kinds: relation of the middle query (position {query}, dotted) to every key, grid {grid}, "
                 "dim 64, 1 head\ncontent-dependent terms (logits, tokens) for one constant seeded q, k, token at "
                 "every position", fontsize=10)
    return fig


def main(words: list[str]) -> None:
    OUT.mkdir(parents=True, exist_ok=True)
    registered = ndpe.available()
    for name, (build, kinds) in FIGURES.items():
        if words and not any(w in name for w in words):
            continue
        missing = [k for k in kinds if k not in registered]
        if missing:
            print(f"skip {name}: kind(s) {missing} not registered")
            continue
        path = save(build(), OUT / f"{name}.png")
        print(f"{path}  {path.stat().st_size // 1024} KB")


if __name__ == "__main__":
    main(sys.argv[1:])
