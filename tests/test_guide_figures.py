"""Each figure of the guide and its "what to see" sentence: the figure is built by its committed builder
(docs/figures_rope.py, docs/figures_other.py, docs/figures_sphere.py; the explorer's screenshot from the page's data,
ndpe/explore/data.py), the numbers are measured on what the figure draws (its images' arrays, its curves' points, its
dots' colours), the claim is checked on them, and the guide's sentence must print those numbers. The last test checks
that every figure the guide shows has such a sentence and a test here."""
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


# --- the other figures: each test builds the figure, measures what it draws and checks the guide's "what to see" ----

@pytest.fixture(scope="module")
def others():
    import matplotlib

    matplotlib.use("Agg")
    import figures_other

    return figures_other


def drawn(fig) -> tuple[list[np.ndarray], list]:
    """The figure's images (as arrays, in drawing order) and its axes; the figure is closed."""
    import matplotlib.pyplot as plt

    images = [np.asarray(image.get_array(), float) for ax in fig.axes for image in ax.get_images()]
    axes = list(fig.axes)
    plt.close(fig)
    return images, axes


def floor2(x: float) -> str:
    """``x`` rounded down to two decimals: a lower bound the guide can state with "above"."""
    return f"{np.floor(x * 100) / 100:.2f}"


def additive_gap(values: np.ndarray) -> float:
    """How far a map is from a row term plus a column term: the largest residual of the best such sum."""
    return float(np.abs(values - values.mean(0) - values.mean(1, keepdims=True) + values.mean()).max())


def translation_gap(a: np.ndarray, b: np.ndarray, qa: tuple[int, int], qb: tuple[int, int]) -> float:
    """The largest difference of two maps at the same offset from their queries (0 for one map moved)."""
    rows, cols = a.shape
    return max(abs(a[r, c] - b[r2, c2]) for r in range(rows) for c in range(cols)
               for r2, c2 in [(r - qa[0] + qb[0], c - qa[1] + qb[1])] if 0 <= r2 < rows and 0 <= c2 < cols)


def test_explorer_outline_leaves_out_the_offsets_never_trained():
    """The screenshot's setting (docs/explorer_screenshot.py's VIEW: rope, zoom x2, index coordinates, centre
    query): the outline marks the keys at offsets the 8 x 8 training grid showed."""
    from ndpe.explore import data

    view = data._growth_modes("rope", "index", "none", 2.0)["zoom"]
    (rows, cols), query = view["grid"], view["queries"][list(data.QUERIES).index("centre")]
    seen = np.array([bit == "1" for bit in view["seen"][list(data.QUERIES).index("centre")]["offset"]])
    r, c = np.divmod(np.arange(rows * cols), cols)
    far = np.maximum(abs(r - query // cols), abs(c - query % cols))[~seen]
    train = data.TRAIN_2D
    assert set(far) == {train[0]} and ((r[~seen] == 0) | (c[~seen] == 0)).all()
    said(f"the outline holds {seen.sum()} of the {seen.size} keys; the other {(~seen).sum()}, in row 0 and column 0, "
         f"sit {train[0]} patches from the query, one more than the {train[0]} x {train[1]} grid ever showed")


def test_sinusoidal_table_fast_and_slow_channels(others):
    """Fast channels flip sign many times over the 100 positions, the slowest sine and cosine barely move."""
    (table,), _ = drawn(others.sinusoidal_table())
    assert table.shape == (100, 128)  # positions x channels, layout "blocks": 64 sines then 64 cosines
    signs = [np.sign(table[:, c])[np.sign(table[:, c]) != 0] for c in (0, 64)]  # sin 0 = 0 at position 0: no sign
    flips = [int((np.diff(s) != 0).sum()) for s in signs]
    assert min(flips) > 20 and np.ptp(table[:, 63]) < 0.05 and table[:, 127].min() > 0.99
    said(f"channel 0 changes sign {flips[0]} times over the 100 positions, channel 63 stays between "
         f"{table[:, 63].min():.2f} and {table[:, 63].max():.2f}")
    said(f"the fastest cosine (channel 64) changes sign {flips[1]} times, the slowest (channel 127) stays above "
         f"{np.floor(table[:, 127].min() * 1e4) / 1e4:.4f}")


def test_sinusoidal_offset_peaks_and_stays_positive(others):
    """The similarity against the offset: symmetric, 1 at offset 0, a floor within the grid and over the plot."""
    _, (ax,) = drawn(others.sinusoidal_offset())
    (x, y), = [(np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)) for line in ax.get_lines()
               if len(line.get_xdata()) > 2]  # the curve (the dotted lines mark the grid's offsets)
    both = np.isin(x, -x)
    assert np.allclose(y[both], [y[x == -v][0] for v in x[both]], atol=1e-6)  # symmetric
    assert x[y.argmax()] == 0 and y.max() == pytest.approx(1, abs=1e-6)
    inside = np.abs(x) <= 63  # the offsets of the 64 positions
    said(f"it is 1 at offset 0 and never falls below {floor2(y.min())} over the plotted offsets, "
         f"{x.min():.0f} to {x.max():.0f}")
    said(f"{y[x == 3][0]:.2f} at offset 3, above {floor2(y[inside].min())} over the offsets of the 64 positions "
         f"(dotted lines) and {y[np.abs(x).argmax()]:.2f} at the farthest plotted")


def test_rope_mixed_heads_tilt_the_plus_but_weigh_both_diagonals(figures):
    """Each head's map is no row term plus column term (axial RoPE's is one), yet at init it is symmetric between
    the two diagonals."""
    import ndpe
    from ndpe.viz import centre_index, relation

    images, _ = drawn(figures.rope_mixed_heads())  # top row: axial rope, heads 0-3; bottom: what rows + columns miss
    drawn_axial, maps, rests = images[0], images[1:5], images[5:]
    grid = maps[0].shape
    axial = relation(ndpe.make(dims=2, kind="rope", dim=128, heads=4, theta=100.0)(grid), centre_index(grid)).reshape(grid)
    assert additive_gap(axial.numpy()) < 1e-5 and np.allclose(drawn_axial, axial.numpy(), atol=1e-6)
    gaps = [additive_gap(m) for m in maps]
    assert [float(np.abs(r).max()) for r in rests] == pytest.approx([additive_gap(m) for m in images[:5]], abs=1e-5)
    assert min(gaps) > 0.1
    c = grid[0] // 2
    diagonal = max(abs(m[c + d, c + d] - m[c + d, c - d]) for m in maps for d in range(1, c))
    said(f"no head's map is a row term plus a column term, as axial RoPE's upright \"+\" is: each departs from the "
         f"nearest such sum by {min(gaps):.2f} to {max(gaps):.2f}")
    said(f"each head still weighs the two diagonals alike (its map at (d, d) and at (d, -d) differ by {diagonal:.2f})")


def test_rope_scaling_offset_smoothest_and_only_unscaled_below_zero(figures):
    """Left: PI's curve turns least often (its fast frequencies removed); right: beyond the trained length only the
    unscaled relation's windowed mean falls below 0."""
    _, axes = drawn(figures.rope_scaling_offset())  # one column per scaling: offsets 0-64 above, windowed means below
    columns = len(axes) // 2
    near = {k: v for ax in axes[:columns] for k, v in curves(ax).items()}
    far = {k: v for ax in axes[columns:2 * columns] for k, v in curves(ax).items()}
    turns = {label: int((np.diff(np.sign(np.diff(y))) != 0).sum()) for label, (_, y) in near.items()}
    pi = turns.pop("linear (PI)")
    beyond = {label: float(y[x > figures.SCALING_TRAIN].min()) for label, (x, y) in far.items()}
    lowest = beyond.pop("no scaling")
    assert len(set(turns.values())) == 1 and pi < min(turns.values())
    assert lowest < 0 < min(beyond.values())
    said(f"over offsets 0-64 PI's curve turns {pi} times, every other curve {turns['ntk']} times; beyond the trained "
         f"length only the unscaled windowed mean falls below 0, to {lowest:.2f}")


def test_relative_t5_buckets_exact_then_log_spaced(others):
    """The bucket of each offset: one per offset near the query, then buckets spanning more and more offsets."""
    _, (ax,) = drawn(others.relative_t5_offset())
    (x, y), = [(np.asarray(line.get_xdata(), float), np.asarray(line.get_ydata(), float)) for line in ax.get_lines()
               if len(line.get_xdata()) > 2]
    bucket = dict(zip(x.astype(int), y.astype(int)))
    shared = {b: list(bucket.values()).count(b) for b in bucket.values()}
    exact = 0  # the largest offset up to which every offset, either side, has a bucket of its own
    while shared[bucket[exact + 1]] == shared[bucket[-exact - 1]] == 1:
        exact += 1

    def span(offset: int) -> tuple[int, int]:
        shared = [o for o in bucket if o > 0 and bucket[o] == bucket[offset]]
        return min(shared), max(shared)

    (a0, a1), (b0, b1) = span(32), span(64)
    assert exact > 0 and a1 - a0 > 1 and b1 - b0 > a1 - a0
    said(f"one bucket per offset up to {exact} on either side, then log-spaced ones")
    said(f"offsets -{exact} to {exact} each have a bucket of their own; beyond, offsets {a0} to {a1} share one bucket "
         f"and {b0} to {b1} another")


def test_sinusoidal_add_makes_the_mirror_alike(others):
    maps, _ = drawn(others.sinusoidal_2d_concat_vs_add())
    concat, add = maps  # the panels: combine="concat", "add"; query (3, 11), its mirror (11, 3)
    assert concat[3, 11] == pytest.approx(1, abs=1e-5) and add[11, 3] > 0.999 > concat[11, 3]
    said(f"the similarity of `(3, 11)` to its mirror is {add[11, 3]:.2f} with `\"add\"` and {concat[11, 3]:.2f} with "
         f"`\"concat\"`")


def test_learned_resize_doubles_the_neighbourhood(others):
    """On the centre row, the similarity the 8 x 8 table has two tokens away is reached four tokens away on 16 x 16."""
    from ndpe.viz import centre_index

    maps, _ = drawn(others.learned_resize())
    small, large = maps[2], maps[3]  # the cosine similarity to the centre (the top row: channel 2)
    (rs, cs), (rl, cl) = (divmod(centre_index(m.shape), m.shape[1]) for m in (small, large))
    row_s, row_l = small[rs], large[rl]
    two = row_s[cs + 2]
    assert abs(row_l[cl + 4] - two) < 0.01 and row_l[cl + 2] > two + 0.1
    said(f"on the centre row the similarity falls to {two:.2f} two tokens from the centre on 8x8 and "
         f"{row_l[cl + 4]:.2f} four tokens from it on 16x16")


def test_coord_channels_span_the_extent(others):
    (rows, cols, r), _ = drawn(others.coord_channels())
    assert np.allclose(rows, rows[:, :1]) and np.allclose(cols, cols[:1])  # each a function of one axis
    assert r.argmax() in (0, r.size - 1) and r.max() == pytest.approx(np.sqrt(2), abs=1e-5)
    said(f"channel 0 runs from {rows[0, 0]:.0f} on the top row to {rows[-1, 0]:.0f} on the bottom one, channel 1 from "
         f"{cols[0, 0]:.0f} to {cols[0, -1]:.0f} across the {cols.shape[1]} columns, and r from {r.min():.2f} beside "
         f"the centre to {r.max():.2f} at the corners")


def test_fourier_sigma_nearest_neighbour(others):
    maps, _ = drawn(others.fourier_sigma())
    near = [m.flat[m.argmax() + 1] for m in maps]  # the centre token's right-hand neighbour
    assert near[0] > 0.8 and near[0] > near[1] > near[2]
    said(f"the nearest neighbour's similarity to the centre is {near[0]:.2f} at sigma 0.5, {near[1]:.2f} at sigma 2 "
         f"and {near[2]:.2f} at sigma 8")


def test_liere_maps_change_shape_rope_maps_move(figures):
    maps, _ = drawn(figures.liere_queries())
    queries = [(6, 6), (2, 9)]  # figures_rope.liere_queries's two queries, for rope then liere
    rope, liere = translation_gap(*maps[:2], *queries), translation_gap(*maps[2:], *queries)
    assert rope < 1e-5 and liere > 0.5
    said(f"at the same offset from the query, RoPE's two maps agree (largest difference {rope:.2f}) and LieRE's "
         f"differ by up to {liere:.2f}")


def test_comrope_maps_move_liere_maps_change_shape(figures):
    maps, _ = drawn(figures.comrope_queries())
    queries = [(6, 6), (2, 9)]
    liere, comrope = translation_gap(*maps[:2], *queries), translation_gap(*maps[2:], *queries)
    assert comrope < 1e-5 and liere > 0.5
    said(f"with the same blocks, LieRE's two maps differ by up to {liere:.2f} at the same offset from the query, "
         f"ComRoPE's by {comrope:.2f}")


def test_string_keeps_a_row_plus_a_column_term(figures):
    """A basis per head mixes channels, not axes: every map stays a row term plus a column term; the basis changes
    how much the terms vary."""
    maps, _ = drawn(figures.string_directions())
    gaps, spans = [additive_gap(m) for m in maps], [float(np.ptp(m)) for m in maps]
    assert max(gaps) < 1e-4 and spans[0] < spans[1] < spans[2]
    said(f"each of the three maps is a row term plus a column term (it departs from one by at most {max(gaps):.2f}): "
         f"the basis mixes channels, not axes. It changes the terms' shapes: the logits span {spans[0]:.2f} (rope), "
         f"{spans[1]:.2f} (Cayley) and {spans[2]:.2f} (circulant)")


def test_videorope_puts_time_on_the_slowest_frequencies(figures):
    import matplotlib.colors as mcolors

    _, (left, right) = drawn(figures.videorope_layout())
    time = "#1b9e77"  # figures_rope.videorope_layout's colour of the time axis (the right panel's title: t green)
    rows = {}
    for dots in right.collections:
        y = float(dots.get_offsets()[0][1])
        rows[y] = np.array([mcolors.to_hex(c) == time for c in dots.get_facecolors()])
    mrope, video = rows[0.0], rows[1.0]  # yticklabels: M-RoPE, VideoRoPE
    n = int(video.sum())
    assert mrope.sum() == n and mrope[:n].all() and video[-n:].all()
    spread = set()
    for frame in left.collections:  # one scatter per frame: (t', h')
        ids = np.asarray(frame.get_offsets())
        spread.add((ids[:, 1].min() - ids[0, 0], ids[:, 1].max() - ids[0, 0]))
    (lo, hi), = spread
    said(f"M-RoPE gives time the {n} fastest of the {len(video)} frequencies, VideoRoPE the {n} slowest; each frame's "
         f"row ids run from t' - {-lo:.0f} to t' + {hi:.0f}")


def test_vrope_scores_are_symmetric(figures):
    maps, _ = drawn(figures.vrope_ids())
    vrope, raster = maps[2], maps[3]
    c = vrope.shape[0] // 2

    def asymmetry(m: np.ndarray) -> float:
        return max(abs(m[c + a, c + b] - other) for a in range(-c, c + 1) for b in range(-c, c + 1)
                   for other in (m[c + b, c + a], m[c - a, c - b]))

    v, r = asymmetry(vrope), asymmetry(raster)
    assert v < 1e-4 and r > 0.5
    said(f"VRoPE's score is the same at (dh, dw), (dw, dh) and their negatives (largest difference {v:.2f}); the "
         f"raster RoPE's differs by up to {r:.2f}")


def test_alibi_1d_bias_is_linear_in_the_distance(others):
    (bias,), _ = drawn(others.alibi_1d_bias())
    n = bias.shape[0]
    slope = -bias[0, 1]
    i, j = np.indices(bias.shape)
    assert np.allclose(bias, -slope * abs(i - j), atol=1e-5)
    said(f"head 0's bias falls by {slope:g} per token of distance, to {bias[0, n - 1]:g} between the first and the last "
         f"token")


def test_alibi_1d_heads_halve_their_slopes(others):
    _, (ax,) = drawn(others.alibi_1d_heads())
    heads = [y for _, (x, y) in curves(ax).items()]
    x = next(iter(curves(ax).values()))[0]
    far = int(np.abs(x - 16).argmax())  # the centre query (16) of 32 tokens: key 0 is the farthest
    assert all(np.allclose(a[x != 16], 2 * b[x != 16]) for a, b in zip(heads, heads[1:]))
    said(f"at the farthest key, {abs(x[far] - 16):.0f} tokens from the query, head 0's bias is {heads[0][far]:.2f} and "
         f"head {len(heads) - 1}'s {heads[-1][far]:.2f}: each head's slope is half the one before")


def test_alibi_2d_heads_contour_radii(others):
    """The bias = -1 contour: a circle of radius 1 / slope while it fits in the grid."""
    maps, _ = drawn(others.alibi_2d_heads())
    n = maps[0].shape[0]
    c = n // 2
    dist = np.hypot(*(np.indices(maps[0].shape) - c))
    radii = [-1 / m[c, c + 1] for m in maps]  # 1 / slope
    circles = [r for m, r in zip(maps, radii) if np.array_equal(m >= -1 - 1e-6, dist <= r + 1e-6) and r < c]
    corners = [h for h, m in enumerate(maps) if m.min() < -1 and (dist[m < -1] > c).all()]
    nowhere = [h for h, m in enumerate(maps) if m.min() > -1]
    assert len(circles) + len(corners) + len(nowhere) == len(maps) and corners == [len(circles)]
    said(f"a circle of radius {', '.join(f'{r:.0f}' for r in circles[:-1])} and {circles[-1]:.0f} tokens for heads 0 to "
         f"{len(circles) - 1}; head {corners[0]} reaches -1 only in the corners and heads {nowhere[0]} to {nowhere[-1]} "
         f"nowhere (head {nowhere[0]}'s lowest bias: {maps[nowhere[0]].min():.2f})")


def test_relative_clip_has_one_value_per_clipped_offset(others):
    maps, _ = drawn(others.relative_2d_clip())
    n, m = maps[0].shape[0], 3  # max_distance 3
    c = n // 2
    edge = c - m  # rows and columns beyond the block on each side
    for bias in maps:
        assert len(np.unique(bias)) == (2 * m + 1) ** 2
        for block in (bias, bias.T):
            assert (block[:edge + 1] == block[edge]).all() and (block[c + m:] == block[c + m]).all()
    said(f"each head's map holds exactly {(2 * m + 1) ** 2} distinct values, one per offset of the {2 * m + 1} x "
         f"{2 * m + 1} block around the query; the {edge} rows and columns beyond it on each side repeat its edge")


def test_dd_alibi_closing_gate_forgets_the_past(others):
    _, (ax,) = drawn(others.dd_alibi_gates())
    (x, constant), (_, closing) = curves(ax).values()
    step = constant[1] - constant[0]
    drop = closing - constant
    before, after = drop[x < 12], drop[x >= 12]
    assert np.allclose(np.diff(constant), step) and np.allclose(before, before[0]) and np.abs(after).max() < 1e-5
    said(f"with every gate exp(-{step:.1f}) the bias falls {step:.1f} per key, to {constant[0]:.2f} at key 0; when "
         f"token 12 closes its gate, keys 0 to 11 drop by a further {-before[0]:.2f} (log 0.02 + {step:.1f}) and keys "
         f"12 to 23 do not move")


def test_pope_peaks_at_offset_zero_rope_does_not(others):
    _, axes = drawn(others.pope_what_where())
    rope, pope = ([int(x[y.argmax()]) - 32 for x, y in curves(ax).values()] for ax in axes[:2])
    assert set(pope) == {0} and all(p != 0 for p in rope)
    said(f"RoPE's three curves peak at offsets {rope[0]}, {rope[1]} and {rope[2]}, PoPE's all at 0")


def test_kinds_1d_symmetry_and_causal_blank(others):
    _, axes = drawn(others.kinds_1d_middle_query())
    panel = {}
    for ax in axes:
        lines = [line for line in ax.get_lines() if len(line.get_xdata()) > 10]
        if lines:
            panel[ax.get_title().split(" ")[0]] = np.asarray(lines[0].get_ydata(), float)
    q = 32  # the middle query of 64 tokens

    def asymmetry(y: np.ndarray) -> float:
        return float(np.abs(y[1:] - y[1:][::-1]).max())  # keys q - k against q + k

    blank = int(np.isnan(panel["cope"]).sum())
    assert asymmetry(panel["complex"]) < 1e-5 and asymmetry(panel["xpos"]) > 0.1
    assert np.isnan(panel["cope"][q + 1:]).all() and not np.isnan(panel["cope"][:q + 1]).any()
    said(f"complex's curve is symmetric about the query, xpos's is not (keys before and after it differ by up to "
         f"{asymmetry(panel['xpos']):.2f}); cope's {blank} keys after the query are blank (causal only)")


def test_convtran_tape_one_curve_per_relative_position_erpe_moves_weights_by_its_size(others):
    """Left: tape's similarities at one position / length agree for lengths 32 and 128, the sinusoid's do not.
    Right: eRPE's 0.05 added after the softmax lifts the favoured keys by 0.05, before the softmax by far less."""
    _, axes = drawn(others.convtran_tape_erpe())
    left, right = curves(axes[0]), curves(axes[1])

    def length_gap(kind: str) -> float:
        (x1, y1), (x2, y2) = left[f"{kind}, length 32"], left[f"{kind}, length 128"]
        shared = np.isin(x2, x1)
        return float(np.abs(y2[shared] - y1[np.searchsorted(x1, x2[shared])]).max())

    tape, sinusoid = length_gap("tape"), length_gap("sinusoidal")
    (_, uniform), (_, after), (_, before) = right.values()  # softmax alone, erpe after it, the term before it
    favoured = after > uniform + 1e-6
    assert tape < 1e-5 and sinusoid > 0.1 and favoured.sum() == 4
    assert np.allclose(after[favoured] - uniform[favoured], 0.05) and before[favoured].max() < uniform[0] + 0.005
    said(f"tape's curves for lengths 32 and 128 agree (largest difference {tape:.2f}) and the sinusoid's differ by up "
         f"to {sinusoid:.2f}")
    said(f"lifts the query and the {favoured.sum() - 1} keys before it from {uniform[0]:.4f} to "
         f"{after[favoured][0]:.4f}, the same term before the softmax only to {before[favoured][0]:.4f}")


def test_camera_views_world_moved_changes_nothing_prope_sees_the_lens(others):
    """Rows: GTA on the ring, the world moved minus it, PRoPE with views 1-3 zoomed, PRoPE minus GTA; four views a row."""
    maps, _ = drawn(others.camera_views())  # rows: gta; world moved minus gta; prope zoomed; prope minus gta
    gta, moved_minus, prope, lens_minus = (np.stack(maps[4 * r:4 * r + 4]) for r in range(4))
    assert np.allclose(lens_minus, prope - gta, atol=1e-6)
    world = float(np.abs(moved_minus).max())
    lens = [float(np.abs(lens_minus[v]).max()) for v in range(4)]
    assert world < 1e-5 and lens[0] < 1e-5 and min(lens[1:]) > 0.1
    said(f"moving the world changes no logit (the second row, the difference, is white: at most {world:.2f}); PRoPE's "
         f"zoomed views 1 to 3 differ from GTA's by up to {max(lens[1:]):.2f}, its unzoomed view 0 by {lens[0]:.2f} "
         f"(the last row)")


@pytest.fixture(scope="module")
def sphere():
    import matplotlib

    matplotlib.use("Agg")
    import figures_sphere

    return figures_sphere


def sign_changes(values: np.ndarray, cyclic: bool = False) -> int:
    """How often ``values`` changes sign (its near-zero entries skipped); ``cyclic``: around a circle."""
    signs = np.sign(values[np.abs(values) > 1e-6 * np.abs(values).max()])
    if cyclic:
        signs = np.append(signs, signs[:1])
    return int((np.diff(signs) != 0).sum())


def test_sphere_harmonics_sign_changes_and_constant_degree_power(sphere):
    """Each panel Y_l^m: l - |m| sign changes along a meridian, 2|m| around a circle of latitude; the squares of a
    degree's features sum to one number (2l + 1) / (4 pi) at every cell."""
    fig = sphere.sphere_harmonics()
    titles = [ax.get_title() for ax in fig.axes if ax.get_images()]
    maps, _ = drawn(fig)
    for title, values in zip(titles, maps):
        l, m = (int(part.split("=")[1]) for part in title.split(", "))
        along = max(sign_changes(column) for column in values.T)
        around = max(sign_changes(row, cyclic=True) for row in values)
        assert (along, around) == (l - abs(m), 2 * abs(m)), title
    power = [sum(maps[i] ** 2 for i in range(l * l, (l + 1) ** 2)) for l in range(4)]
    assert all(np.ptp(p) < 1e-5 and p.mean() == pytest.approx((2 * l + 1) / (4 * np.pi), abs=1e-5)
               for l, p in enumerate(power))
    said("`Y_l^m` changes sign `l - |m|` times from pole to pole and `2|m|` times around a circle of latitude "
         "(`l=3, m=1`: 2 and 2)")
    said(f"the same number at every cell of the globe, {', '.join(f'{p.mean():.2f}' for p in power[:-1])} and "
         f"{power[-1].mean():.2f} for degrees 0 to 3")


def test_great_circle_discs_wrap_the_date_line(sphere):
    """The bias above -1 per head: discs of 4, 16 and 64 degrees of arc; head 1's crosses the date line (both edge
    columns) and spans more columns than its arc; head 3 never reaches -1."""
    maps, _ = drawn(sphere.great_circle_heads())
    discs = [m >= -1 for m in maps]
    cells = [int(d.sum()) for d in discs[:3]]
    columns = int(discs[1].any(0).sum())
    width = 360 // maps[1].shape[1]  # degrees of longitude per column
    lowest = float(maps[3].min())
    assert cells[0] < cells[1] < cells[2] and discs[1][:, 0].any() and discs[1][:, -1].any()
    assert columns * width > 2 * 16 and lowest > -1 and lowest == pytest.approx(-180 / 256)
    said(f"head 0's disc (bias above -1) holds {cells[0]} cells, head 1's {cells[1]} and head 2's {cells[2]}; "
         f"head 1's, 16 degrees of arc around the query, spans {columns} of the {maps[1].shape[1]} columns "
         f"({columns * width} degrees of longitude) on both sides of the date line; head 3's lowest bias is "
         f"{lowest:.2f}, at the antipode")


def addition_ids_and_similarity(fig) -> tuple[list[str], dict[str, np.ndarray], np.ndarray]:
    """The tokens, the ids each draw gives them (left panel) and the similarity map (right) of an addition figure."""
    (similarity,), axes = drawn(fig)
    tokens = [label.get_text() for label in axes[0].get_xticklabels()]
    ids = {label: y.astype(int) for label, (_, y) in curves(axes[0]).items()}
    return tokens, ids, similarity


def test_abacus_digits_of_one_place_share_a_row(others):
    tokens, ids, similarity = addition_ids_and_similarity(others.abacus_place_ids())
    row = ids["eval (k = 0)"]
    same = row[:, None] == row[None]
    units = [t for t, r in zip(tokens, row) if r == 1]
    shifted = sorted(set(ids["training, k = 9"][row > 0]))
    assert similarity[same].min() > 1 - 1e-5 and similarity[~same].max() < 0.5 and set(row[row == 0]) == {0}
    said(f"the units {', '.join(units[:-1])} and {units[-1]} row 1; + and = row 0), so their encodings' similarity is "
         f"{similarity[same].min():.2f} wherever they stand, and tokens of different rows at most "
         f"{similarity[~same].max():.2f}; training with k = 9 moves the digits to rows {shifted[0]} to {shifted[-1]}")


def test_coupling_ids_one_per_significance(others):
    tokens, ids, similarity = addition_ids_and_similarity(others.coupling_ids())
    row = ids["eval (start 1)"]
    by_token = dict(zip(tokens, row))
    units, tens, hundreds = by_token["3"], by_token["2"], by_token["1"]  # 123 written reversed: 3, 2, 1
    same = row[:, None] == row[None]
    late = ids["training, start 11"]
    assert by_token["+"] == by_token["="] == units + 1 and (units, tens, hundreds) == (4, 3, 2)
    assert similarity[same].min() > 1 - 1e-5 and similarity[~same].max() < 0.5
    said(f"in eval the units get id {units}, the tens {tens}, the hundreds {hundreds}, and + and = {by_token['+']} "
         f"(`start + n + 1`, n = 3); tokens of one id have similarity {similarity[same].min():.2f}, of different ids "
         f"at most {similarity[~same].max():.2f}; start 11 moves the ids to {late.min()} to {late.max()}")


# --- every figure of the guide: a "what to see" sentence after it and a test above that builds it -------------------

IMAGE = re.compile(r"!\[[^\]]*\]\(figures/([\w-]+)\.png\)")


def figure_paragraphs() -> list[tuple[str, str]]:
    """Each image the guide shows and the paragraph of text after it (consecutive images share the one after the
    last)."""
    blocks = [block.strip() for block in re.split(r"\n\s*\n", GUIDE)]
    shown = []
    for i, block in enumerate(blocks):
        for name in IMAGE.findall(block):
            rest = IMAGE.sub("", block).strip()
            after = i + 1
            while not rest and after < len(blocks) and IMAGE.fullmatch(blocks[after]):
                after += 1
            shown.append((name, rest or (blocks[after] if after < len(blocks) else "")))
    return shown


def test_every_guide_figure_says_what_to_see_and_has_a_test(figures, others, sphere):
    """Each figure named in the guide exists, is followed within its paragraph by a "what to see" sentence, and a test
    of this file builds it: calls its builder (``.name(``), or, for a figure no builder of docs/figure_registry.py
    draws (the explorer's screenshot), is named after it (``test_name_...``)."""
    import inspect

    from figure_registry import FIGURES

    shown = figure_paragraphs()
    assert len({name for name, _ in shown}) > 30  # the guide's figures were found
    tests = [(name, inspect.getsource(test)) for name, test in globals().items()
             if name.startswith("test_") and callable(test)]
    for name, paragraph in shown:
        assert (ROOT / "docs" / "figures" / f"{name}.png").is_file(), f"docs/figures/{name}.png is missing"
        assert "what to see" in paragraph.lower(), f"figures/{name}.png: no \"What to see\" in its paragraph"
        covered = [test for test, source in tests
                   if (f".{name}(" in source if name in FIGURES else test.startswith(f"test_{name}_"))]
        assert covered, f"figures/{name}.png: no test in tests/test_guide_figures.py builds it"


def viz_encoding(kind: str, grid: tuple[int, ...], heads: int = 1, **options):
    """The encoding ``ndpe viz --kind KIND --grid ... --heads H --option ...`` draws (seed 0, dim 64), in eval mode."""
    import torch

    import ndpe

    torch.manual_seed(0)
    return ndpe.make(dims=len(grid), kind=kind, dim=64, heads=heads, **options).eval()


def test_rope_learned_offset_depends_on_the_offset_alone():
    """Content-free q and k relate by the offset alone, symmetric in it, wherever the query sits (learned or not)."""
    from ndpe.viz import relation

    pe = viz_encoding("rope-learned", (64,))
    with torch_no_grad():
        pos = pe((64,))
        rows = [relation(pos, query).numpy() for query in (20, 40)]
    offsets = np.arange(-15, 16)
    curves_at = [row[query + offsets] for row, query in zip(rows, (20, 40))]
    np.testing.assert_allclose(curves_at[0], curves_at[1], atol=1e-5)
    np.testing.assert_allclose(curves_at[0], curves_at[0][::-1], atol=1e-5)


def test_relative_proj_offset_is_zero_after_the_query_and_beyond_its_bank():
    import torch

    pe = viz_encoding("relative-proj", (64,), max_dist=8)
    x = torch.ones(1, 64, 64)  # a constant token, as the figure's content
    q = k = torch.ones(1, 1, 64, 64)
    with torch.no_grad():
        row = pe((64,)).logits(q, k, x)[0, 0, 32]  # the query at 32 against every key
    offsets = torch.arange(64) - 32  # key - query
    assert (row[(offsets > 0) | (offsets < -7)] == 0).all() and (row[(offsets <= 0) & (offsets >= -7)] != 0).all()


def test_point_transformer_offset_extrapolates_linearly():
    """Past the offsets of the 8 x 8 grid (|offset| > 7 along axis 0) the bias is linear in the offset: no kink of
    the ReLU lies there."""
    import torch

    pe = viz_encoding("point-transformer", (8, 8), heads=2, hidden=16)
    offsets = torch.arange(-40.0, 41.0)
    points = torch.stack([offsets, torch.zeros_like(offsets)], -1)
    with torch.no_grad():
        row = pe(positions=points).bias[0, 40].numpy()  # the query at offset 0
    x = offsets.numpy()
    second = np.abs(np.diff(row, 2))
    assert second[np.abs(x[1:-1]) > 8].max() < 1e-4 and second.max() > 1e-3  # kinks only near the query


def test_dd_alibi_row_table_is_alibis_ramp_for_a_constant_token():
    import torch

    pe = viz_encoding("dd-alibi-row", (16,))
    x = torch.ones(1, 16, 64)
    q = k = torch.ones(1, 1, 16, 64)
    with torch.no_grad():
        term = pe((16,)).logits(q, k, x)[0, 0]
    step = term[1, 0]
    i, j = torch.meshgrid(torch.arange(16.0), torch.arange(16.0), indexing="ij")
    torch.testing.assert_close(term, (step * (i - j)).tril())
    assert step < 0


def torch_no_grad():
    import torch

    return torch.no_grad()
