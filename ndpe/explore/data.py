"""The numbers behind every picture of the explorer, computed by ndpe (the page only draws them).

Each ``*_data`` function returns plain JSON-able dicts: maps as :func:`~ndpe.explore.codec.pack` strings (a byte
per value over the map's own range, base64), angles and slopes as floats, and for every picture the ``ndpe.make`` call that made it (``"made"``). No formula of an
encoding is written again in the page's JavaScript: it looks numbers up, colours them and outlines cells.
"""
from __future__ import annotations

import math
from typing import Any, Callable, Sequence, cast

import torch
from torch import Tensor

from ..catalog import acts_by, colour, marker
from ..coords import COORD_MODES, axis_coords, grid_coords
from ..registry import available, kind_class, make
from ..registry import options as registry_options
from ..scaling import needs_train_shape
from ..viz.fields import Content, centre_index, content_of, quantity_of, relation, shown_field
from .codec import pack, unpack  # noqa: F401 (unpack: the page's inverse, for the tests)

# Settings of the pictures; the page names them beside each picture (``made``).
DIM, HEADS = 128, 4  # head_dim 32: 8 rotary pairs per axis in 2D
TRAIN_2D = (8, 8)  # the grid the growth tab's "model" was trained on
GROWTHS = (1.0, 1.5, 2.0, 3.0)  # test grid = growth x training grid
COMPARE_GRIDS = {1: (24,), 2: (8, 8), 3: (4, 6, 6)}  # every query of these grids is clickable
SCALINGS = {"none": None, "pi": "linear", "ntk": "ntk", "yarn": "yarn"}  # the page's names -> rope's `scaling`
QUERIES = {"centre": (0.5, 0.5), "edge": (0.5, 0.0), "corner": (0.0, 0.0)}  # growth tab, in content units
# options every picture of a kind uses beyond its defaults, and why (shown on the page)
KIND_OPTIONS: dict[str, tuple[dict[str, Any], str]] = {
    "rope": ({"theta": 100.0}, "theta 100, as RoPE-ViT / the benchmark's image tasks (10000 barely turns on 8 patches)"),
    "string": ({"theta": 100.0}, "theta 100, as rope"),
    "videorope": ({"theta": 100.0}, "theta 100, as rope"),
}


def made(kind: str, dims: int, *, dim: int = DIM, heads: int = HEADS, **options: Any) -> str:
    """The call that made a picture, as the page prints it."""
    args = "".join(f", {k}={v!r}" for k, v in options.items())
    return f"ndpe.make(dims={dims}, kind={kind!r}, dim={dim}, heads={heads}{args})"


def kind_options(kind: str, dims: int, grid: Sequence[int]) -> dict[str, Any]:
    """The options the explorer builds ``kind`` with: its example options (required ones), a learned table of the
    training grid resized by interpolation, and :data:`KIND_OPTIONS`."""
    options = dict(kind_class(kind).example_options(dims))
    if kind == "learned":
        options.update(grid_shape=tuple(grid))
    options.update(KIND_OPTIONS.get(kind, ({}, ""))[0])
    return options


def build(kind: str, dims: int, *, heads: int = HEADS, dim: int = DIM, **options: Any):
    """``ndpe.make`` in eval mode, learned weights drawn from seed 0 (the same picture on every build; torch's
    global generator is left as it was)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        return make(dims=dims, kind=kind, dim=dim, heads=heads, **options).eval()


@torch.no_grad()
def relation_rows(pe, grid: Sequence[int], queries: Sequence[int] | None = None) -> tuple[Tensor, str]:
    """:func:`ndpe.viz.relation` (mean over heads) of each query (default: every token) to all tokens, ``(Q, N)``,
    and the quantity they measure (:func:`ndpe.viz.quantity_of`: their colour map), from one encoding."""
    grid = tuple(grid)
    pos, content = pe(grid), content_of(pe, grid)
    n = math.prod(grid)
    rows = torch.stack([relation(pos, q, content=content) for q in (range(n) if queries is None else queries)])
    return rows, quantity_of(pos)


def kinds_table() -> dict[str, Any]:
    """Every registered kind: its dims, colour, marker, how it acts and what it is (the README's row)."""
    return {k: {"dims": list(d), "colour": colour(k), "marker": marker(k), "acts": acts_by(k),
                "what": kind_class(k).description or "", "options": KIND_OPTIONS.get(k, ({}, ""))[1]}
            for k, d in available().items()}


def _attempt(fn: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """``fn()``, or ``{"error": message}`` where the kind cannot do it (a table that cannot grow, say)."""
    try:
        return fn()
    except (ValueError, TypeError, RuntimeError, NotImplementedError) as e:
        return {"error": str(e).splitlines()[0]}


# --- compare: every query of a small grid, two kinds side by side -------------------------------------------

def compare_data(kinds: Sequence[str]) -> dict[str, Any]:
    out: dict[str, Any] = {"grids": {str(d): list(g) for d, g in COMPARE_GRIDS.items()}, "maps": {}}
    for dims, grid in COMPARE_GRIDS.items():
        for kind in kinds:
            if dims not in available()[kind]:
                continue
            options = kind_options(kind, dims, grid)

            def one(kind=kind, dims=dims, grid=grid, options=options) -> dict[str, Any]:
                pe = build(kind, dims, **options)
                if kind == "none":
                    return {"error": "no position: every key relates to the query alike (nothing to draw)"}
                rows, quantity = relation_rows(pe, grid)
                return {"rows": pack(rows), "quantity": quantity, "made": made(kind, dims, **options)}

            out["maps"][f"{kind}/{dims}"] = _attempt(one)
    return out


# --- growth: the training grid and a grown one, zoom or canvas --------------------------------------------

def query_index(grid: Sequence[int], where: tuple[float, float], growth: float, mode: str) -> int:
    """Row-major index of the query at content point ``where`` (fractions of the training image) on ``grid``.

    Zoom: the same image sampled finer, so the same fraction of the grid. Canvas: the image keeps its patches
    and more content is appended right and below, so the same patch index as at the training size.
    """
    train = [round(n / growth) for n in grid]
    cells = [min(int(f * n), n - 1) if mode == "zoom" else min(int(f * t), t - 1)
             for f, n, t in zip(where, grid, train)]
    return cells[0] * grid[1] + cells[1]


def seen_masks(grid: Sequence[int], query: int, coords: str) -> dict[str, Tensor]:
    """Which keys of ``grid`` sit inside what the training grid showed, for the page's outline.

    ``offset``: the coordinate offset from the query is one a training query had to some key, per axis (relative
    kinds); ``coord``: the key's coordinates lie in the training grid's range (absolute kinds). ``coords``: the
    coordinate mode of the kind (``index`` for kinds without one).
    """
    lo = torch.stack([axis_coords(n, coords)[0] for n in TRAIN_2D])
    hi = torch.stack([axis_coords(n, coords)[-1] for n in TRAIN_2D])
    c = grid_coords(tuple(grid), coords)
    eps = 1e-6
    offset = ((c - c[query]).abs() <= hi - lo + eps).all(-1)
    inside = ((c >= lo - eps) & (c <= hi + eps)).all(-1)
    return {"offset": offset, "coord": inside}


def _bits(mask: Tensor) -> str:
    return "".join("1" if b else "0" for b in mask.tolist())


def growth_data(kinds: Sequence[str]) -> dict[str, Any]:
    """Per 2D kind, growth, coordinates and scaling: relation maps of the three query presets at the training
    size and at the grown size, with the seen-offset / seen-coordinate masks."""
    out: dict[str, Any] = {"train": list(TRAIN_2D), "growths": list(GROWTHS), "queries": list(QUERIES),
                           "scalings": list(SCALINGS), "settings": {}}
    for kind in kinds:
        if 2 not in available()[kind] or kind == "none":
            continue
        coord_modes = COORD_MODES if "coords" in registry_options(kind) else ("-",)
        scalings = list(SCALINGS) if kind == "rope" else ["none"]
        for coords in coord_modes:
            for scaling in scalings:
                for growth in GROWTHS:
                    both = _attempt(lambda: _growth_modes(kind, coords, scaling, growth))
                    for mode in ("zoom", "canvas"):
                        out["settings"][f"{kind}|{coords}|{scaling}|{growth:g}|{mode}"] = both.get(mode, both)
    return out


def _growth_modes(kind: str, coords: str, scaling: str, growth: float) -> dict[str, Any]:
    """Both modes of one setting: the encodings are the same, the queries sit at other patches."""
    grid = tuple(round(n * growth) for n in TRAIN_2D)
    options = kind_options(kind, 2, TRAIN_2D)
    if coords != "-":
        options["coords"] = coords
    scaling_type = SCALINGS[scaling]
    if scaling_type is not None:
        if growth == 1.0:
            raise ValueError("scaling acts beyond the training size: pick a growth above 1")
        options.update(scaling=scaling_type, scale=growth)
        if needs_train_shape(scaling_type):
            options["train_shape"] = TRAIN_2D
    pe = build(kind, 2, **options)
    train_pe = build(kind, 2, **{k: v for k, v in options.items() if k not in ("scaling", "scale", "train_shape")})
    queries = {m: [query_index(grid, w, growth, m) for w in QUERIES.values()] for m in ("zoom", "canvas")}
    train_queries = {m: [query_index(TRAIN_2D, w, 1.0, m) for w in QUERIES.values()] for m in ("zoom", "canvas")}
    every = sorted({q for qs in queries.values() for q in qs})
    every_train = sorted({q for qs in train_queries.values() for q in qs})
    (rows, quantity), (train_rows, _) = relation_rows(pe, grid, every), relation_rows(train_pe, TRAIN_2D, every_train)
    coord_mode = coords if coords != "-" else "index"
    absolute = acts_by(kind) in ("add", "concat", "transforms tokens")
    return {mode: {"grid": list(grid), "queries": queries[mode],
                   "rows": pack(rows[[every.index(q) for q in queries[mode]]]),
                   "train_rows": pack(train_rows[[every_train.index(q) for q in train_queries[mode]]]),
                   "train_queries": train_queries[mode],
                   "seen": [{k: _bits(v) for k, v in seen_masks(grid, q, coord_mode).items()} for q in queries[mode]],
                   "quantity": quantity, "made": made(kind, 2, **options), "absolute": absolute}
            for mode in ("zoom", "canvas")}


# --- RoPE angle dials ------------------------------------------------------------------------------------

DIAL_LENGTH, DIAL_HEAD_DIM = 16, 32
DIAL_THETAS = (10.0, 100.0, 1000.0, 10000.0)
DIAL_GROWTHS = (1.0, 1.5, 2.0, 4.0)


@torch.no_grad()
def angle_steps(pe) -> Tensor:
    """Each rotary pair's angle per unit of position, read from ndpe's ``rot`` at positions 0 and 1 (``(P,)``)."""
    positions = torch.tensor([[0.0], [1.0]])
    cos, sin = pe(positions=positions).rot
    a = torch.atan2(sin[0, 1], cos[0, 1]) - torch.atan2(sin[0, 0], cos[0, 0])
    return a.double()


def dials_data() -> dict[str, Any]:
    """Per theta, scaling and growth: each pair's largest angle between two tokens at training and at test.

    The model trains at :data:`DIAL_LENGTH` tokens with no scaling: pair ``j`` saw angles in
    ``[0, (L - 1) w_j]``. At ``growth x L`` with a scaling, it turns ``w'_j`` per position and meets
    ``[0, (gL - 1) w'_j]``. Index coordinates, ``dim = heads * 32`` (16 pairs).
    """
    out: dict[str, Any] = {"length": DIAL_LENGTH, "thetas": list(DIAL_THETAS), "growths": list(DIAL_GROWTHS),
                           "scalings": list(SCALINGS), "settings": {}}
    for theta in DIAL_THETAS:
        train_pe = make(dims=1, kind="rope", dim=DIAL_HEAD_DIM, theta=theta)
        w = angle_steps(train_pe)
        for scaling, name in SCALINGS.items():
            for growth in DIAL_GROWTHS:
                key = f"{theta:g}|{scaling}|{growth:g}"
                options: dict[str, Any] = {"theta": theta}
                if name is not None:
                    if growth == 1.0:
                        out["settings"][key] = {"error": "scaling acts beyond the training length: pick a growth above 1"}
                        continue
                    options.update(scaling=name, scale=growth)
                    if needs_train_shape(name):
                        options["train_shape"] = (DIAL_LENGTH,)
                pe = make(dims=1, kind="rope", dim=DIAL_HEAD_DIM, **options)
                w_test = angle_steps(pe)
                out["settings"][key] = {
                    "train": [float(x) * (DIAL_LENGTH - 1) for x in w],
                    "test": [float(x) * (round(growth * DIAL_LENGTH) - 1) for x in w_test],
                    "step": [float(x) for x in w_test],
                    "made": made("rope", 1, dim=DIAL_HEAD_DIM, heads=1, **options)}
    return out


# --- axis decomposition: row term + column term, turned by a mixing angle ---------------------------------

AXES_GRID = (15, 15)
AXES_ANGLES = (0, 15, 30, 45, 60, 75, 90)
AXES_WEIGHTS = (0.5, 0.75, 1.0)  # the share of group 0 in a head's relation (0.5: both groups alike, axial RoPE)


def diagonal_preference(values: Tensor, grid: Sequence[int], query: int) -> float:
    """Mean of ``values`` ``(N,)`` on the keys of the down-right diagonal through ``query`` (row and column grow
    together) minus their mean on the up-right anti-diagonal, the query left out: 0 when neither is preferred.

    >>> m = torch.zeros(3, 3); m[0, 0] = m[2, 2] = 1.0   # the down-right diagonal through the centre
    >>> diagonal_preference(m.flatten(), (3, 3), 4)
    1.0
    """
    rows, cols = grid
    r0, c0 = divmod(query, cols)
    image = values.reshape(rows, cols)
    down = [image[r0 + d, c0 + d] for d in range(-min(rows, cols), min(rows, cols))
            if d and 0 <= r0 + d < rows and 0 <= c0 + d < cols]
    up = [image[r0 - d, c0 + d] for d in range(-min(rows, cols), min(rows, cols))
          if d and 0 <= r0 - d < rows and 0 <= c0 + d < cols]
    return float(torch.stack(down).mean() - torch.stack(up).mean())


@torch.no_grad()
def axes_data() -> dict[str, Any]:
    """2D RoPE as two groups of pairs: the axis-0 group's term, the axis-1 group's, and a head's relation that
    weights them ``w`` and ``1 - w`` (:data:`AXES_WEIGHTS`; ``w = 0.5`` is the mean, the relation of axial RoPE's
    content-free q, k), with each map's :func:`diagonal_preference`.

    A mixing angle ``alpha`` turns each group's frequency vectors from its axis by ``alpha`` (``rope-mixed`` with
    ``rotate=False`` and its ``freqs`` turned): 0 is axial RoPE, other angles see diagonals. A group's term depends
    on ``cos(beta) row + sin(beta) column`` (``beta = alpha`` for group 0, ``alpha + 90`` for group 1), so at 45
    degrees the two groups see the two diagonals and a head weighting one group more prefers one diagonal.
    """
    out: dict[str, Any] = {"grid": list(AXES_GRID), "angles": list(AXES_ANGLES), "weights": list(AXES_WEIGHTS),
                           "settings": {}}
    query = centre_index(AXES_GRID)
    for alpha in AXES_ANGLES:
        pe = make(dims=2, kind="rope-mixed", dim=DIM, heads=HEADS, rotate=False)
        a = math.radians(alpha)
        turn = torch.tensor([[math.cos(a), -math.sin(a)], [math.sin(a), math.cos(a)]])
        freqs = cast(Tensor, pe.freqs)
        freqs.copy_(torch.einsum("ab,hbp->hap", turn, freqs))  # each pair's direction turned by alpha
        pos = pe(AXES_GRID)
        cos, sin = cast("tuple[Tensor, Tensor]", pos.rot)  # (H, N, P)
        half = cos.shape[-1] // 2  # pairs of the axis-0 group, then the axis-1 group
        terms = []
        for sl in (slice(0, half), slice(half, None)):
            c, s = cos[..., sl], sin[..., sl]
            terms.append((c[:, query, None] * c + s[:, query, None] * s).mean(-1).mean(0))  # (N,) in [-1, 1]
        maps = {"row": terms[0], "col": terms[1], "total": relation(pos, query)}
        maps.update({f"{w:g}": w * terms[0] + (1 - w) * terms[1] for w in AXES_WEIGHTS if w != 0.5})
        out["settings"][str(alpha)] = {
            **{k: pack(v) for k, v in maps.items()},
            "diagonal": {k: diagonal_preference(v, AXES_GRID, query) for k, v in maps.items()},
            "made": f"ndpe.make(dims=2, kind='rope-mixed', dim={DIM}, heads={HEADS}, rotate=False), freqs turned by "
                    f"{alpha} degrees"}
    out["query"] = query
    return out


# --- spectrogram: time x frequency, an encoding per axis --------------------------------------------------

SPEC_GRID = (16, 8)  # (time frames, frequency bins)
SPEC_AXIS_KINDS = ("none", "learned", "sinusoidal", "rope")


@torch.no_grad()
def _axis_rows(kind: str, n: int, queries: Sequence[int], train_n: int) -> Tensor | None:
    """1D relation rows of ``kind`` on one axis of ``n`` points (None for ``none``: the axis adds nothing); a learned
    table holds ``train_n`` rows (the training clip) and is resized to ``n``."""
    if kind == "none":
        return None
    pe = build(kind, 1, dim=DIM // 2, **kind_options(kind, 1, (train_n,)))  # each axis: half the channels
    return relation_rows(pe, (n,), queries)[0]


@torch.no_grad()
def spectrogram_data() -> dict[str, Any]:
    """Per (time kind, frequency kind): the relation of every query of a 16-frame x 8-bin spectrogram, and of the
    queries of the middle frame on a clip twice as long.

    Each axis gets half the channels and its own 1D encoding; with equal channel shares the 2D relation is the
    mean of the two axis relations (exact for concatenated sinusoids and for axial RoPE); an axis with ``none``
    adds nothing, so the other axis alone decides.
    """
    t, f = SPEC_GRID
    out: dict[str, Any] = {"grid": list(SPEC_GRID), "kinds": list(SPEC_AXIS_KINDS), "settings": {}}
    for tk in SPEC_AXIS_KINDS:
        for fk in SPEC_AXIS_KINDS:
            key = f"{tk}|{fk}"
            if tk == fk == "none":
                out["settings"][key] = {"error": "no position on either axis"}
                continue
            out["settings"][key] = {"rows": pack(_spec_rows(tk, fk, t, f, range(t * f))),
                                    "long": pack(_spec_rows(tk, fk, 2 * t, f, [t * f + b for b in range(f)])),
                                    "made": f"time: {tk}, frequency: {fk} (1D encodings, dim {DIM // 2} each)"}
    return out


def _spec_rows(tk: str, fk: str, t: int, f: int, queries: Sequence[int]) -> Tensor:
    qt = [q // f for q in queries]
    qf = [q % f for q in queries]
    frames, bins = sorted(set(qt)), sorted(set(qf))
    time = _axis_rows(tk, t, frames, SPEC_GRID[0])
    freq = _axis_rows(fk, f, bins, SPEC_GRID[1])
    rows = []
    for a, b in zip(qt, qf):
        terms = []
        if time is not None:
            terms.append(time[frames.index(a)][:, None].expand(t, f))
        if freq is not None:
            terms.append(freq[bins.index(b)][None, :].expand(t, f))
        rows.append(torch.stack(terms).mean(0).flatten())
    return torch.stack(rows)


# --- bias receptive field: per head, one shared scale -----------------------------------------------------

BIAS_GRID = (15, 15)
BIAS_HEADS = 8


@torch.no_grad()
def bias_data(kinds: Sequence[str]) -> dict[str, Any]:
    """Per 2D bias kind (and ALiBi's distances): the bias of the centre query to every key, per head."""
    out: dict[str, Any] = {"grid": list(BIAS_GRID), "heads": BIAS_HEADS, "settings": {}}
    query = centre_index(BIAS_GRID)
    variants: list[tuple[str, dict[str, Any]]] = []
    for kind in kinds:
        if 2 not in available()[kind] or kind == "none":
            continue
        if shown_field(build(kind, 2, heads=BIAS_HEADS, **kind_options(kind, 2, BIAS_GRID))(BIAS_GRID)) != "bias":
            continue
        if kind == "alibi":
            variants += [("alibi", {"distance": d}) for d in ("euclidean", "manhattan")]
        else:
            variants.append((kind, {}))
    for kind, extra in variants:
        options = {**kind_options(kind, 2, BIAS_GRID), **extra}
        pe = build(kind, 2, heads=BIAS_HEADS, **options)
        bias = pe(BIAS_GRID).bias
        bias = bias.float().reshape(-1, *bias.shape[-2:])[:, query]  # (H, N)
        name = kind + "".join(f" ({v})" for v in extra.values())
        slopes = getattr(pe, "slopes", None)
        out["settings"][name] = {"heads": pack(bias), "made": made(kind, 2, heads=BIAS_HEADS, **options),
                                 "slopes": None if slopes is None else [float(s) for s in slopes.flatten()]}
    out["query"] = query
    return out


def content_note() -> str:
    c = Content(heads=HEADS, head_dim=DIM // HEADS, num_tokens=1)
    return (f"content-dependent kinds are drawn for constant content: one query vector and one key vector at every "
            f"token (N(0, 1), seed {c.seed}), so the term varies with positions alone")
