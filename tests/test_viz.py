"""ndpe.viz: relation against the definitions it documents (apply_qk scores, cosine similarity, bias rows), the CLI."""
from __future__ import annotations

import math

import pytest
import torch

import ndpe
from ndpe import catalog
from ndpe.cli import _sized, parse_option
from ndpe.cli import viz_main as main
from ndpe.viz import centre_index, draw, offset_curve, relation, table
from tests.conftest import build

matplotlib = pytest.importorskip("matplotlib")
# the kinds that act by a bias alone (read off their output, as the README's table): a relation is the bias's row
BIAS_GRIDS = [(k, g) for k in ndpe.available() if catalog.acts_by(k) == "bias" for g in [(7,), (3, 4)]
              if len(g) in ndpe.available()[k]]


def rope_scores(pos: ndpe.PosOut, head_dim: int, heads: int) -> torch.Tensor:
    """``q_i . k_j`` ``(heads, N, N)`` of content-free unit q = k (every rotary pair (1, 0)), rotated by apply_qk."""
    half = pos.rot[0].shape[-1]
    n = pos.num_tokens
    q = torch.zeros(1, heads, n, head_dim, dtype=torch.float64)
    first = slice(0, half) if pos.pairing == "half" else slice(0, 2 * half, 2)  # first channel of each pair
    q[..., first] = 1 / math.sqrt(half)
    q, k = ndpe.apply_qk(q, q.clone(), pos)
    return (q @ k.transpose(-1, -2))[0]


ROPE_CASES = [  # kind, grid, options
    ("rope", (12,), {"pairing": "half"}),
    ("rope", (12,), {"pairing": "interleaved", "theta": 100.0}),
    ("rope", (5, 7), {"pairing": "half", "axis_dims": (4, 6)}),  # partial rotation: 6 channels unrotated
    ("rope", (6,), {"scaling": "yarn", "scale": 4.0, "train_shape": 6}),  # cos/sin carry YaRN's factor
    ("rope", (2, 3, 4), {}),
    ("rope-mixed", (4, 5), {"pairing": "interleaved"}),
]


@pytest.mark.parametrize("kind,grid,opts", ROPE_CASES)
def test_rope_relation_is_the_normalized_apply_qk_score(kind, grid, opts):
    heads, head_dim = 2, 16
    pe = ndpe.make(dims=len(grid), kind=kind, dim=heads * head_dim, heads=heads, **opts)
    pos = pe(grid)
    scores = rope_scores(pos, head_dim, heads)  # (H, N, N)
    for query in (0, centre_index(grid), math.prod(grid) - 1):
        ref = (scores[:, query] / scores[:, query, query, None]).mean(0)
        torch.testing.assert_close(relation(pos, query).double(), ref, atol=1e-5, rtol=0)
        assert relation(pos, query)[query].item() == pytest.approx(1.0, abs=1e-6)
        for h in range(heads):
            per_head = scores[h, query] / scores[h, query, query]
            torch.testing.assert_close(relation(pos, query, head=h).double(), per_head, atol=1e-5, rtol=0)


@pytest.mark.parametrize("grid", [(16,), (5, 6)])
def test_rope_relation_depends_only_on_the_offset(grid):
    pe = ndpe.make(dims=len(grid), kind="rope", dim=32, heads=1, theta=50.0)
    pos = pe(grid)
    maps = torch.stack([relation(pos, q) for q in range(math.prod(grid))]).reshape(*grid, *grid)  # (query, key)
    for query in [(0,) * len(grid), tuple(n // 2 for n in grid), tuple(n - 1 for n in grid)]:
        for key in [(0,) * len(grid), tuple(n - 2 for n in grid), tuple(n // 3 for n in grid)]:
            offset = [k - q for k, q in zip(key, query)]
            base = [max(0, -o) for o in offset]  # another query whose key at the same offset is in the grid
            other = tuple(b + o for b, o in zip(base, offset))
            assert maps[query + key].item() == pytest.approx(maps[tuple(base) + other].item(), abs=1e-5)


@pytest.mark.parametrize("grid,opts", [((20,), {}), ((4, 6), {"combine": "concat"}), ((4, 6), {"combine": "add"}),
                                       ((2, 3, 4), {"layout": "blocks"})])
def test_sinusoidal_relation_is_cosine_similarity_of_add_rows(grid, opts):
    add = ndpe.make(dims=len(grid), kind="sinusoidal", dim=24, **opts)(grid).add.double()  # (N, dim)
    unit = add / add.norm(dim=-1, keepdim=True)
    ref = unit @ unit.T
    rel = torch.stack([relation(ndpe.make(dims=len(grid), kind="sinusoidal", dim=24, **opts)(grid), q)
                       for q in range(add.shape[0])]).double()
    torch.testing.assert_close(rel, ref, atol=1e-5, rtol=0)
    torch.testing.assert_close(rel, rel.T, atol=1e-5, rtol=0)
    torch.testing.assert_close(rel.diagonal(), torch.ones(add.shape[0], dtype=torch.float64), atol=1e-5, rtol=0)


def test_relation_drops_prefix_tokens():
    pe = ndpe.make(dims=2, kind="rope", dim=32, heads=2)
    torch.testing.assert_close(relation(pe((3, 4), num_prefix=2), 5), relation(pe((3, 4)), 5))
    torch.testing.assert_close(table(pe((3, 4), num_prefix=2)), table(pe((3, 4))))


def test_bias_relation_is_the_mean_bias_row_of_any_posout():
    bias = torch.randn(3, 6, 6)
    pos = ndpe.PosOut(bias=bias)
    torch.testing.assert_close(relation(pos, 4), bias[:, 4].mean(0))
    torch.testing.assert_close(relation(pos, 4, head=2), bias[2, 4])
    torch.testing.assert_close(table(pos, head=1), bias[1])


@pytest.mark.parametrize("kind,grid", BIAS_GRIDS)
def test_bias_kinds_relation_is_the_bias_row_mean_over_heads(kind, grid):
    pos = build(kind, len(grid), dim=32, heads=4)(grid)
    bias = pos.bias.reshape(-1, *pos.bias.shape[-2:])  # (heads, N, N)
    for query in range(math.prod(grid)):
        torch.testing.assert_close(relation(pos, query), bias[:, query].mean(0))


def test_merged_posout_shows_its_bias():
    add = ndpe.make(dims=1, kind="sinusoidal", dim=8)((5,))
    bias = ndpe.PosOut(bias=torch.randn(2, 5, 5))
    torch.testing.assert_close(relation(ndpe.merge(add, bias), 1), bias.bias[:, 1].mean(0))


@pytest.mark.skipif("alibi" not in ndpe.available(), reason="alibi not registered yet")
def test_offset_curve_of_alibi_is_minus_mean_slope_times_distance():
    pe = ndpe.make(dims=2, kind="alibi", dim=32, heads=4)
    offsets, values = offset_curve(pe, (5, 3))  # axis 0 stretched to 20, query at its centre
    assert offsets.tolist() == list(range(-10, 10))
    torch.testing.assert_close(values, -pe.slopes.float().mean() * offsets.abs().float())


def test_offset_curve_of_rope_is_the_relation_at_that_offset():
    pe = ndpe.make(dims=1, kind="rope", dim=16, theta=100.0)
    offsets, values = offset_curve(pe, (6,))
    torch.testing.assert_close(values[offsets >= 0], relation(pe((12,)), 0), atol=1e-5, rtol=0)


def test_draw_skips_what_the_encoding_refuses(tmp_path, capsys):
    table_only = ndpe.make(dims=1, kind="learned", dim=8, grid_shape=(6,))  # no resize: a 4x longer grid raises
    assert draw(table_only, (6,), out_dir=tmp_path, figures=("offset",)) == []
    assert "skipped the offset figure" in capsys.readouterr().out
    assert draw(ndpe.make(dims=1, kind="none", dim=8), (6,), out_dir=tmp_path) == []
    with pytest.raises(ValueError, match="unknown figure"):
        draw(table_only, (6,), out_dir=tmp_path, figures=("tabel",))


def test_relation_of_an_empty_encoding_says_so():
    with pytest.raises(ValueError, match="outputs nothing"):
        relation(ndpe.make(dims=1, kind="none", dim=8)((4,)), 0)


# -- command line ----------------------------------------------------------------------
def read_png(path):
    import matplotlib.image

    image = matplotlib.image.imread(path)  # raises on a file that is not an image
    assert image.ndim == 3 and image.shape[0] > 100 and image.shape[1] > 100 and image.shape[2] in (3, 4)
    return image


@pytest.mark.parametrize("argv,files", [
    (["--kind", "sinusoidal", "--grid", "16", "--grow", "24", "--dim", "16"],
     ["sinusoidal_1d_table", "sinusoidal_1d_similarity", "sinusoidal_1d_offset", "sinusoidal_1d_grow"]),
    (["--kind", "rope", "--grid", "4", "5", "--grow", "6", "6", "--dim", "32", "--heads", "2", "--name", "r2"],
     ["r2_table", "r2_similarity", "r2_offset", "r2_grow"]),
])
def test_main_writes_the_png_files(tmp_path, argv, files):
    paths = main(argv + ["--out", str(tmp_path)])
    assert sorted(p.name for p in paths) == sorted(f"{f}.png" for f in files)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(f"{f}.png" for f in files)
    for p in paths:
        read_png(p)


@pytest.mark.skipif("alibi" not in ndpe.available(), reason="alibi not registered yet")
def test_main_draws_per_head_figures_for_per_head_encodings(tmp_path):
    paths = main(["--kind", "alibi", "--grid", "3", "4", "--heads", "4", "--dim", "16",
                  "--figures", "heads", "--out", str(tmp_path)])
    assert [p.name for p in paths] == ["alibi_2d_heads.png"]
    read_png(paths[0])


def test_main_option_values_are_python_literals(tmp_path):
    # a tuple, a bare string and a float must all arrive typed: learned refuses a non-tuple grid_shape
    paths = main(["--kind", "learned", "--grid", "4", "4", "--option", "grid_shape=(4, 4)",
                  "--option", "resize=bicubic", "--dim", "8", "--figures", "offset", "--out", str(tmp_path)])
    assert [p.name for p in paths] == ["learned_2d_offset.png"]  # the 4x longer grid needs resize="bicubic"
    assert parse_option("theta=100.0") == ("theta", 100.0)
    assert parse_option("axis_dims=(4, 6)") == ("axis_dims", (4, 6))
    assert parse_option("scaling=None") == ("scaling", None)
    assert parse_option("pairing=interleaved") == ("pairing", "interleaved")


@pytest.mark.parametrize("option,message", [
    ("theta", "KEY=VALUE"),             # no '='
    ("=3", "KEY=VALUE"),                # no key
    ("tehta=100.0", "valid options"),   # unknown option: the kind's valid ones are listed
    ("pairing=diagonal", "pairing must be one of"),
])
def test_main_rejects_bad_options_clearly(tmp_path, capsys, option, message):
    with pytest.raises(SystemExit):
        main(["--kind", "rope", "--grid", "8", "--option", option, "--out", str(tmp_path)])
    assert message in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


@pytest.mark.parametrize("name", ["../../../x", "sub/x", "absolute", "..\\x"])
def test_name_with_a_folder_is_refused_and_nothing_is_written_outside_out(tmp_path, capsys, name):
    out = tmp_path / "a" / "b" / "c"
    name = str(tmp_path / "x") if name == "absolute" else name
    with pytest.raises(SystemExit) as refused:  # ndpe viz: exit 2, one line
        main(["--kind", "rope", "--grid", "4", "--dim", "8", "--figures", "table", "--name", name, "--out", str(out)])
    assert refused.value.code == 2 and "file name prefix without folders" in capsys.readouterr().err
    assert not [p for p in tmp_path.rglob("*") if p.is_file()] and not list(tmp_path.parent.glob("x_*.png"))
    with pytest.raises(ValueError, match="without folders"):  # the library function too
        draw(build("rope", dims=1, dim=8), (4,), out_dir=out, name=name, figures=("table",))
    assert not [p for p in tmp_path.rglob("*") if p.is_file()]


# -- colour scales and kind colours ------------------------------------------------------
def test_scale_is_one_symmetric_scale_for_all_maps_of_a_diverging_quantity():
    from ndpe.viz import color_scale, style

    # every map passed shares the scale: the largest |value| of any of them, centred on 0, whatever the signs
    assert style.scale("relation", torch.tensor([0.4, 1.0]), torch.tensor([-0.2, 0.5])) == {
        "cmap": "RdBu_r", "vmin": -1.0, "vmax": 1.0}
    assert style.scale("bias", torch.tensor([-3.0, 0.0]), [[-0.5]]) == {"cmap": "RdBu_r", "vmin": -3.0, "vmax": 3.0}
    assert style.scale("encoding", [0.2, 0.5])["vmin"] == -0.5  # positive values too: centred on 0
    assert style.scale("count", [3, 7], [5]) == {"cmap": "viridis", "vmin": 3.0, "vmax": 7.0}  # sequential: the range
    assert style.scale("angle", [0.1])["vmin"] == pytest.approx(-math.pi)  # a fixed range
    # blank entries (NaN, inf) are left out; a constant map still gets a range
    assert style.scale("relation", [0.5, float("nan"), float("inf"), -2.0]) == {
        "cmap": "RdBu_r", "vmin": -2.0, "vmax": 2.0}
    for values in ([0.0], [float("nan")], []):
        lo, hi = style.scale("bias", values)["vmin"], style.scale("bias", values)["vmax"]
        assert lo == -hi < 0
    flat = style.scale("magnitude", torch.ones(4))
    assert flat["vmin"] < 1.0 < flat["vmax"]
    with pytest.raises(ValueError, match="unknown quantity"):
        style.scale("relations", [1.0])
    # color_scale is style.scale for the quantity of the field shown
    bias = ndpe.PosOut(bias=torch.full((1, 3, 3), -2.0))
    assert color_scale(torch.tensor([-2.0, 1.0]), pos=bias) == style.scale("bias", [-2.0, 1.0])
    assert color_scale(torch.tensor([0.4, 1.0])) == style.scale("relation", [0.4, 1.0])


def test_every_quantity_names_a_colour_map_and_relation_bias_encoding_differ_as_documented():
    from matplotlib import colormaps

    from ndpe.viz import QUANTITIES

    assert {"relation", "bias", "encoding", "angle", "count", "magnitude"} <= set(QUANTITIES)
    for name, q in QUANTITIES.items():
        assert q.name == name and q.cmap in colormaps and q.label
    assert QUANTITIES["relation"].diverging and QUANTITIES["bias"].diverging and QUANTITIES["encoding"].diverging
    assert QUANTITIES["encoding"].cmap != QUANTITIES["relation"].cmap
    assert QUANTITIES["angle"].cmap == "twilight" and QUANTITIES["bias"].unit == "logit"


def test_lut_is_the_colour_map_sampled_as_hex():
    from matplotlib import colormaps
    from matplotlib.colors import to_hex

    from ndpe.viz import style

    table = style.lut("relation")
    assert len(table) == 256 and all(len(c) == 7 and c[0] == "#" and int(c[1:], 16) >= 0 for c in table)
    cmap = colormaps["RdBu_r"]
    assert table == [to_hex(cmap(i)) for i in range(256)]  # entry i is the colour map's i-th colour
    assert style.lut("viridis", 5) == [to_hex(colormaps["viridis"](x)) for x in (0.0, 0.25, 0.5, 0.75, 1.0)]
    assert style.lut(style.QUANTITIES["encoding"], 3)[0] == to_hex(colormaps["PuOr_r"](0.0))
    with pytest.raises(ValueError):
        style.lut("relation", 1)


def test_the_style_module_imports_neither_torch_nor_matplotlib():
    import ast
    from pathlib import Path

    from ndpe.viz import style

    tree = ast.parse(Path(style.__file__).read_text())
    top = {alias.name.split(".")[0] for node in tree.body if isinstance(node, ast.Import) for alias in node.names}
    top |= {(node.module or "").split(".")[0] for node in tree.body if isinstance(node, ast.ImportFrom)}
    assert not top & {"torch", "matplotlib", "numpy", "ndpe"}, top


def test_kind_colours_match_the_benchmark_plots():
    plots = pytest.importorskip("train.plots")
    from ndpe.viz import KIND_COLOURS, kind_colour

    for kind, colour in KIND_COLOURS.items():
        assert plots.series_style(kind)["color"] == colour, kind
    assert set(KIND_COLOURS) == set(ndpe.available())  # read from the registry
    assert kind_colour("rope") == "#d62728" and kind_colour("unheard-of") == "#636363"


def test_one_quantity_one_colour_map_rope_and_rope_mixed_alike_and_curves_the_kind_colour():
    from matplotlib.colors import to_hex

    from ndpe.viz import KIND_COLOURS, make_figure, style

    maps = {}
    for kind in ("rope", "rope-mixed"):  # rope's relation is all positive, rope-mixed's is not: the same map anyway
        fig = make_figure("similarity", ndpe.make(dims=2, kind=kind, dim=32, heads=2), (8, 8))
        image = fig.axes[0].images[0]
        maps[kind] = (image.get_cmap().name, image.get_clim())
        assert "relation" in fig.axes[1].get_ylabel()  # the colorbar says what it shows
    assert maps["rope"][0] == maps["rope-mixed"][0] == style.QUANTITIES["relation"].cmap
    for lo, hi in (clim for _, clim in maps.values()):
        assert lo == pytest.approx(-hi) and hi == pytest.approx(1.0)  # centred on 0; 1 at the query
    fig = make_figure("offset", ndpe.make(dims=1, kind="sinusoidal", dim=16), (8,))
    assert to_hex(fig.axes[0].lines[0].get_color()) == KIND_COLOURS["sinusoidal"]


@pytest.mark.skipif("alibi" not in ndpe.available(), reason="alibi not registered yet")
def test_heads_share_one_scale_one_colorbar_and_bias_maps_outline_minus_one():
    from ndpe.viz import make_figure, style

    pe = ndpe.make(dims=2, kind="alibi", dim=64, heads=4)
    fig = make_figure("heads", pe, (9, 9))
    panels = [ax for ax in fig.axes if ax.images]
    assert len(panels) == 4 and len(fig.axes) == 5  # one colorbar for all heads
    clims = {ax.images[0].get_clim() for ax in panels}
    assert len(clims) == 1  # one scale: head 3's small slope shows as a paler map, not as head 0's picture
    (lo, hi), = clims
    rows = [relation(pe((9, 9)), centre_index((9, 9)), head=h) for h in range(4)]
    assert lo == pytest.approx(-hi) and lo == pytest.approx(float(rows[0].min()))  # head 0's, the steepest
    assert {ax.images[0].get_cmap().name for ax in panels} == {style.QUANTITIES["bias"].cmap}
    assert "logit" in fig.axes[-1].get_ylabel()
    contoured = [bool(ax.collections) for ax in panels]  # slopes 1/4 .. 1/256: only head 0 reaches -1 here
    assert contoured == [bool(r.min() < -1) for r in rows] == [True, False, False, False]
    (level,) = panels[0].collections[0].levels
    assert level == -1.0
    for ax in panels:
        assert ax.get_title() and ax.get_xlabel() and ax.get_ylabel()


def test_grow_figure_outlines_the_offsets_seen_at_the_training_size():
    from ndpe.viz import make_figure, trained_window

    pe = ndpe.make(dims=2, kind="rope", dim=32)
    fig = make_figure("grow", pe, (4, 5), grow=(10, 12))
    grown = fig.axes[1]
    (outline,) = [p for p in grown.patches if p.get_gid() == "trained-offsets"]
    # the query (5, 6): offsets up to 3 rows and 4 columns seen at (4, 5)
    assert outline.get_xy() == (1.5, 1.5) and (outline.get_width(), outline.get_height()) == (9, 7)
    assert any(p.get_gid() == "outside-trained" for p in grown.patches)
    assert not [p for p in fig.axes[0].patches if p.get_gid() == "trained-offsets"]  # the training grid: none
    assert trained_window(pe, (4, 5), (10, 12), 5 * 12 + 6) == [(2, 8), (2, 10)]
    pixel = ndpe.make(dims=2, kind="rope", dim=32, coords="pixel")  # coordinates keep their extent: all seen
    assert trained_window(pixel, (4, 5), (10, 12), 5 * 12 + 6) == [(0, 9), (0, 11)]
    one_d = make_figure("grow", ndpe.make(dims=1, kind="rope", dim=16), (6,), grow=(16,))
    assert [p for p in one_d.axes[0].patches if p.get_gid() == "outside-trained"]


# -- content-dependent fields (rot_k, logits, tokens) and every registered kind ------------------------------
from ndpe.contract import LogitsTerm, TokenTerm  # noqa: E402
from ndpe.viz import Content, content_term, num_heads, shown_field  # noqa: E402

KIND_DIMS = [(kind, dims) for kind, supported in sorted(ndpe.available().items()) for dims in supported]
GRIDS = {1: (12,), 2: (4, 5), 3: (3, 4, 5)}
GROWS = {1: (20,), 2: (6, 7), 3: (4, 5, 6)}


def xpos_like(n: int, rot_dim: int = 8, base: float = 4.0, pairing: str = "half", rotate: bool = True) -> ndpe.PosOut:
    """Stand-in for xPos: RoPE angles, queries scaled by zeta ** (p / base), keys by its inverse (zeta < 1)."""
    p = torch.arange(n, dtype=torch.float64)[:, None]
    freq = 10.0 ** -torch.arange(rot_dim // 2, dtype=torch.float64) * rotate
    zeta = torch.linspace(0.3, 0.9, rot_dim // 2, dtype=torch.float64)
    angle, scale = p * freq, zeta ** (p / base)
    cos, sin = angle.cos(), angle.sin()
    return ndpe.PosOut(rot=((cos * scale).float(), (sin * scale).float()),
                       rot_k=((cos / scale).float(), (sin / scale).float()), pairing=pairing)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_rot_k_relation_is_query_i_against_key_j_and_decays_with_the_offset(pairing):
    n, rot_dim = 16, 8
    pos = xpos_like(n, rot_dim, pairing=pairing)
    scores = rope_scores(pos, head_dim=rot_dim, heads=1)[0]  # apply_qk: queries by rot, keys by rot_k
    p = torch.arange(n, dtype=torch.float64)
    zeta = torch.linspace(0.3, 0.9, rot_dim // 2, dtype=torch.float64)
    freq = 10.0 ** -torch.arange(rot_dim // 2, dtype=torch.float64)
    for query in (0, 7, n - 1):
        rel = relation(pos, query).double()
        torch.testing.assert_close(rel, scores[query] / scores[query, query], atol=1e-5, rtol=0)
        offset = (query - p)[:, None]  # the paper's decay zeta ** ((i - j) / base) on top of the rotation
        ref = (zeta ** (offset / 4.0) * (offset * freq).cos()).mean(-1)
        torch.testing.assert_close(rel, ref, atol=1e-5, rtol=0)
    # without the rotation the decay alone is left: smaller the farther a key lies before the query, larger after
    decay = relation(xpos_like(n, pairing=pairing, rotate=False), 7)
    assert bool((decay[1:] > decay[:-1]).all()) and decay[7].item() == pytest.approx(1.0) and decay[0] < 0.5
    assert table(pos).shape == (n, n)  # query x key, one relation row per query
    torch.testing.assert_close(table(pos)[5], relation(pos, 5))
    assert not torch.allclose(table(pos), table(pos).T)  # q_i . k_j != q_j . k_i


def recording_term(calls: list, causal_only: bool = False, heads: int = 2) -> LogitsTerm:
    """A logits term ``-|i - j| * (1 + h) + q.k`` per head that records what it was called with."""
    def fn(q, k):
        calls.append((q, k))
        n = q.shape[-2]
        offset = (torch.arange(n)[:, None] - torch.arange(k.shape[-2])).abs().float()
        per_head = -offset * (1.0 + torch.arange(heads, dtype=torch.float32))[:, None, None]
        return per_head + (q @ k.transpose(-1, -2))
    return LogitsTerm(fn=fn, causal_only=causal_only)


def test_logits_are_drawn_for_one_constant_seeded_q_and_k():
    calls: list = []
    pos = ndpe.PosOut(logits=recording_term(calls))
    content = Content(heads=2, head_dim=4, num_tokens=6)
    rel = relation(pos, 2, content=content)
    q, k = calls[-1]
    assert q.shape == k.shape == (1, 2, 6, 4)
    assert bool((q == q[:, :1, :1]).all()) and bool((k == k[:, :1, :1]).all())  # every token and head the same
    assert not torch.equal(q[0, 0, 0], k[0, 0, 0])
    relation(pos, 2, content=content)
    assert torch.equal(calls[-1][0], q)  # seeded: the same q every call
    qk = float(q[0, 0, 0] @ k[0, 0, 0])
    offset = (2 - torch.arange(6)).abs().float()
    torch.testing.assert_close(rel, qk - 1.5 * offset)  # mean over the heads' slopes 1 and 2
    torch.testing.assert_close(relation(pos, 2, head=1, content=content), qk - 2 * offset)
    torch.testing.assert_close(table(pos, head=1, content=content), qk - 2 * (torch.arange(6)[:, None]
                                                                               - torch.arange(6)).abs().float())
    assert num_heads(pos, content=content) == 2 and shown_field(pos) == "logits"
    with pytest.raises(ValueError, match="content=ndpe.viz.Content.of"):
        relation(pos, 2)


def test_a_causal_only_term_is_blank_after_the_query_and_prefix_tokens_are_dropped():
    content = Content(heads=2, head_dim=4, num_tokens=5)
    causal = ndpe.PosOut(logits=recording_term([], causal_only=True))
    rel = relation(causal, 2, content=content)
    assert rel[:3].isfinite().all() and rel[3:].isnan().all()
    assert table(causal, content=content).triu(1).isnan().sum() == 10
    both_ways = relation(ndpe.PosOut(logits=recording_term([])), 2, content=content)
    assert both_ways.isfinite().all()
    torch.testing.assert_close(rel[:3], both_ways[:3])
    prefixed = ndpe.base.pad_prefix(causal, 2)  # the term then takes all 7 tokens, the grid's 5 are drawn
    torch.testing.assert_close(relation(prefixed, 2, content=content), rel, equal_nan=True)


def test_heads_of_a_logits_term_count_only_when_they_differ():
    content = Content(heads=3, head_dim=4, num_tokens=5)
    shared = ndpe.PosOut(logits=LogitsTerm(lambda q, k: (q @ k.transpose(-1, -2)) * 0 - 1.0))
    assert num_heads(shared, content=content) == 1
    assert num_heads(ndpe.PosOut(logits=recording_term([], heads=3)), content=content) == 3


def test_logits_see_the_rotated_q_and_k_of_a_merged_posout():
    calls: list = []
    rope = ndpe.make(dims=1, kind="rope", dim=8)((5,))
    merged = ndpe.merge(rope, ndpe.PosOut(logits=recording_term(calls, heads=1)))
    relation(merged, 1, content=Content(heads=1, head_dim=8, num_tokens=5))
    q, k = calls[-1]
    plain_q, plain_k = Content(heads=1, head_dim=8, num_tokens=5).qk()
    ref_q, ref_k = ndpe.apply_qk(plain_q.contiguous(), plain_k.contiguous(), rope)
    torch.testing.assert_close(q, ref_q)
    torch.testing.assert_close(k, ref_k)


def test_tokens_are_drawn_as_the_transformed_constant_token():
    n, dim = 7, 6
    scale = torch.linspace(0.5, 2.0, n)[:, None] * torch.tensor([1.0, -1.0, 2.0, 0.0, 1.0, 3.0])
    pos = ndpe.PosOut(tokens=TokenTerm(lambda x: x * scale + torch.arange(n)[:, None] * 0.1))
    content = Content(heads=2, head_dim=3, num_tokens=n)
    x = content.tokens()
    assert x.shape == (1, n, dim) and bool((x == x[:, :1]).all())
    ref = (x * scale + torch.arange(n)[:, None] * 0.1)[0]
    torch.testing.assert_close(table(pos, content=content), ref)
    torch.testing.assert_close(relation(pos, 3, content=content),
                               torch.nn.functional.cosine_similarity(ref[3], ref, dim=-1))
    assert num_heads(pos, content=content) == 1
    prefixed = ndpe.base.pad_prefix(pos, 1)
    torch.testing.assert_close(table(prefixed, content=content), ref)
    with pytest.raises(ValueError, match="depends on the content"):
        table(pos)


@pytest.mark.skipif("xpos" not in ndpe.available(), reason="xpos not registered yet")
def test_xpos_relation_is_its_normalized_apply_qk_score():
    heads, head_dim = 2, 8
    pe = build("xpos", 1, dim=heads * head_dim, heads=heads)
    pos = pe((10,))
    scores = rope_scores(pos, head_dim, heads)
    for query in (0, 5, 9):
        torch.testing.assert_close(relation(pos, query).double(), (scores[:, query] / scores[:, query, query, None])
                                   .mean(0), atol=1e-5, rtol=0)


@pytest.mark.parametrize("kind", [k for k in ("transformer-xl", "cope") if k in ndpe.available()])
def test_logits_kinds_relation_is_their_term_on_constant_q_k(kind):
    from ndpe.viz import encoding_relation

    pe = build(kind, 1, dim=32, heads=2)
    if kind == "cope":
        with torch.no_grad():
            pe.table.normal_(generator=torch.Generator().manual_seed(1))
    grid = (9,)
    content = Content.of(pe, grid)
    with torch.no_grad():
        term = pe(grid).logits(*content.qk())[0]  # (heads, N, N)
        for query in (0, 4, 8):
            rel = encoding_relation(pe, grid, query)
            if pe(grid).logits.causal_only:
                assert rel[query + 1:].isnan().all()
            torch.testing.assert_close(rel[:query + 1], term[:, query, :query + 1].mean(0))


@pytest.mark.parametrize("kind,dims", KIND_DIMS)
def test_every_registered_kind_draws_from_the_command_line(tmp_path, kind, dims):
    grid, grow = GRIDS[dims], GROWS[dims]
    argv = ["--kind", kind, "--grid", *map(str, grid), "--grow", *map(str, grow), "--dim", "32", "--heads", "2",
            "--out", str(tmp_path)]
    paths = main(argv)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)
    for p in paths:
        read_png(p)
    written = {p.name.removeprefix(f"{kind}_{dims}d_").removesuffix(".png") for p in paths}
    if kind == "none":
        assert written == set()
        return
    torch.manual_seed(0)  # the command's encoding: what it had to draw
    options = _sized(kind, grid, {})  # a required option (a table's size) sized to the grid, as the command does
    pe = ndpe.make(dims=dims, kind=kind, dim=32, heads=2, **options).eval()
    per_head = num_heads(pe(grid), content=Content.of(pe, grid)) > 1
    expected = {"table", "similarity"} | ({"heads"} if per_head else set())
    if kind != "learned":  # a learned table without resize= refuses the longer grids (skipped, with a note)
        expected |= {"offset", "grow"}
    assert written == expected


@pytest.mark.parametrize("kind,dims", KIND_DIMS)
def test_every_registered_kind_draws_through_draw(tmp_path, kind, dims):
    pe = build(kind, dims, dim=32, heads=4)
    grid = GRIDS[dims]
    paths = draw(pe, grid, GROWS[dims], out_dir=tmp_path, name="fig")
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(p.name for p in paths)
    if kind == "none":
        assert paths == []
        return
    assert {"fig_table.png", "fig_similarity.png", "fig_offset.png", "fig_grow.png"} <= {p.name for p in paths}
    for p in paths:
        read_png(p)


@pytest.mark.skipif("cope" not in ndpe.available(), reason="cope not registered yet")
def test_figures_of_a_causal_only_term_say_constant_q_k_and_blank_the_future():
    from ndpe.viz import make_figure

    pe = build("cope", 1, dim=32, heads=2)
    fig = make_figure("similarity", pe, (9,))
    title = fig.axes[0].get_title()
    assert "for constant q, k" in title and "keys after the query blank" in title
    y = torch.tensor(fig.axes[0].lines[0].get_ydata(), dtype=torch.float32)
    assert y[:5].isfinite().all() and y[5:].isnan().all()
    assert fig.axes[0].get_xlim()[1] >= 8  # every key position shown, blank ones included
    fig = make_figure("table", pe, (9,))
    assert "for constant q, k" in fig.axes[0].get_title() and fig.axes[0].get_xlabel().startswith("key")


def test_new_kinds_keep_the_old_colours_and_get_their_own():
    from ndpe.viz import KIND_COLOURS

    old = {"none": "#000000", "learned": "#1f77b4", "sinusoidal": "#ff7f0e", "alibi": "#2ca02c", "rope": "#d62728",
           "rope-mixed": "#9467bd", "coord": "#8c564b", "fourier": "#bcbd22", "relative": "#17becf"}
    assert {k: KIND_COLOURS[k] for k in old} == old
    for kind in ("xpos", "complex", "cope", "transformer-xl", "fire", "cpb"):
        assert kind in KIND_COLOURS
    assert len(set(KIND_COLOURS.values())) == len(KIND_COLOURS)
