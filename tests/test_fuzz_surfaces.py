"""Table-driven fuzz of the surfaces added since the first fuzz table (tests/test_fuzz_api.py): the drop-ins
(``ndpe.timm.use``, ``ndpe.hf.use``, ``ndpe.from_hf_rope``), packing (``ndpe.pack``, ``ndpe.stack``,
``pe.packed``), flex attention, ``ndpe.mrope_positions``, ``ndpe.PerAxis``, the 2025 kinds, alibi's ``slopes=`` /
``alibi_heads=``, rope's ``head_axes=``, ``cat_dim=`` and the ``ndpe viz`` / ``ndpe explore`` options.

``CASES``: (id, thunk, exception type, fragment of the message): bad input that must raise a clear one-line error.
``VALUES``: (id, thunk, expected thunk): a right answer, compared with an expectation computed another way.
Fast: tiny grids, tiny models built with ``pretrained=False``.
"""
from __future__ import annotations

import contextlib
import io
import math
from types import SimpleNamespace

import pytest
import torch

import ndpe
from conftest import raises_one_line
import ndpe.flex
from ndpe.contract import PosOut

NAN, INF = float("nan"), float("inf")
NEW_KINDS = ["liere", "comrope", "string", "pope", "dd-alibi", "rope-mixed", "videorope", "vrope"]
NEW_DIMS = {"liere": 2, "comrope": 2, "string": 2, "pope": 1, "dd-alibi": 1, "rope-mixed": 2, "videorope": 3,
            "vrope": 3}
GRID = {1: (4,), 2: (2, 3), 3: (2, 2, 2)}


class CliError(Exception):
    """What a command printed to stderr when it failed (exit status not 0)."""


def cli(*argv: str, viz: bool = False):
    """Run ``ndpe explore ...`` (or ``ndpe viz ...``) and raise :class:`CliError` with its stderr if it fails."""
    def run():
        from ndpe.cli import main, viz_main

        err = io.StringIO()
        with contextlib.redirect_stderr(err):
            try:
                rc = viz_main(list(argv)) if viz else main(list(argv))
            except SystemExit as exit_:
                rc = exit_.code
        if viz and isinstance(rc, list):
            rc = 0
        if rc not in (0, None):
            raise CliError(err.getvalue().strip())
        return rc
    return run


def build(kind, dims=None, dim=32, heads=2, **opts):
    dims = dims or NEW_DIMS.get(kind, 2)
    return ndpe.make(dims=dims, kind=kind, dim=dim, heads=heads, **opts)


def make(kind, dims=None, dim=32, heads=2, **opts):
    return lambda: build(kind, dims, dim, heads, **opts)


def call(kind, dims=None, grid="default", opts=None, **kw):
    def run():
        pe = build(kind, dims, **(opts or {}))
        shape = GRID[pe.dims] if grid == "default" else grid
        return pe(shape, **kw) if shape is not None else pe(**kw)
    return run


def positions(kind, value):
    """Positions of the kind's dims, every coordinate ``value``."""
    def run():
        pe = build(kind)
        return pe(positions=torch.full((4, pe.dims), value))
    return run


# -- timm / hf models, tiny and random
def vit(**kw):
    from timm.models.vision_transformer import VisionTransformer

    torch.manual_seed(0)
    return VisionTransformer(img_size=16, patch_size=8, embed_dim=16, depth=1, num_heads=2, num_classes=3, **kw)


def eva(**kw):
    from timm.models.eva import Eva

    torch.manual_seed(0)
    return Eva(img_size=16, patch_size=8, embed_dim=16, depth=1, num_heads=2, num_classes=3, **kw)


def naflex(**kw):
    from timm.models.naflexvit import NaFlexVit, NaFlexVitCfg

    torch.manual_seed(0)
    return NaFlexVit(NaFlexVitCfg(patch_size=8, embed_dim=16, depth=1, num_heads=2, **kw), num_classes=3)


def timm_use(model, kind, **opts):
    import ndpe.timm

    return lambda: ndpe.timm.use(model(), kind, **opts)


SMALL = dict(vocab_size=61, hidden_size=32, intermediate_size=64, num_hidden_layers=1, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=64)


def llama(**kw):
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(0)
    return LlamaForCausalLM(LlamaConfig(**{**SMALL, **kw})).eval()


def hf_use(kind, model=llama, **opts):
    import ndpe.hf

    return lambda: ndpe.hf.use(model(), kind, **opts)


def ns(**kw):
    """A SimpleNamespace config: Llama-sized unless overridden."""
    return SimpleNamespace(**{"hidden_size": 32, "num_attention_heads": 4, "rope_theta": 10000.0, **kw})


def from_hf(config, **kw):
    return lambda: ndpe.from_hf_rope(config, **kw)


def rope_out(grid=(4,), dims=1, **kw):
    return ndpe.make(dims=dims, kind="rope", dim=32, heads=2)(grid, **kw)


def packed(kind, grids, dims=None, **kw):
    return lambda: build(kind, dims).packed(grids, **kw)


def flex(kind="alibi", grid=(2, 3), t=None, causal=False, fn="attention", pe=None, q=None, **kw):
    def run():
        enc = build(kind) if pe is None else pe
        n = t if t is not None else math.prod(grid) if fn == "attention" else sum(math.prod(g) for g in grid)
        x = torch.randn(1, 2, n, 16) if q is None else q
        f = ndpe.flex.attention if fn == "attention" else ndpe.flex.packed_attention
        return f(x, x, x, enc, grid, causal=causal, compiled=False, **kw)
    return run


def per_axis(axes, dim=32, heads=2):
    return lambda: ndpe.PerAxis(axes, dim=dim, heads=heads)


def per_axis_call(axes, grid, **kw):
    return lambda: ndpe.PerAxis(axes, dim=32, heads=2)(grid, **kw)


CASES = [
    ("liere positions 1e30", positions("liere", 1e30), ValueError, "position"),
    ("comrope positions 1e30", positions("comrope", 1e30), ValueError, "position"),
]
# -- the 2025 kinds: each kind x each bad call
for k in NEW_KINDS:
    d = NEW_DIMS[k]
    CASES += [
        (f"{k} grid with a 0", call(k, grid=(0,) * d), ValueError, "grid"),
        (f"{k} grid of other dims", call(k, grid=(2,) * (d % 3 + 1)), ValueError, "dims"),
        (f"{k} grid float", call(k, grid=(2.5,) * d), TypeError, "int"),
        (f"{k} positions nan", positions(k, NAN), ValueError, "finite"),
        (f"{k} positions inf", positions(k, -INF), ValueError, "finite"),
        (f"{k} num_prefix negative", call(k, num_prefix=-1), ValueError, "num_prefix"),
        (f"{k} dtype int", call(k, dtype=torch.int64), ValueError, "floating dtype"),
        (f"{k} unknown option", make(k, thetaa=1.0), TypeError, "valid options"),
        (f"{k} dim 0", make(k, dim=0), ValueError, "dim must be a positive int"),
        (f"{k} packed of no grids", packed(k, []), TypeError, "grid_shapes"),
    ]
# -- huge finite positions: past what float64 rotary angles represent (ndpe.coords.angle_limit), or not the token
# order that dd-alibi's gates run in
for k in ("string", "pope", "videorope", "vrope", "rope"):
    CASES += [
        (f"{k} positions 1e30", positions(k, 1e30), ValueError, "positions reach 1e+30"),
        (f"{k} positions -1e14", positions(k, -1e14), ValueError, "float64 angles"),
        (f"{k} batched positions 1e30", lambda k=k: build(k)(positions=torch.full((2, 4, NEW_DIMS.get(k, 2)), 1e30)),
         ValueError, "positions reach"),
    ]
CASES += [
    ("vrope positions 5e13 (ids of twice that)", positions("vrope", 5e13), ValueError, "each id adds two"),
    ("rope positions 0 and 3e38", lambda: build("rope", dims=1)(positions=torch.tensor([[0.0], [3e38]])),
     ValueError, "float64 angles"),
    ("dd-alibi positions 1e30", positions("dd-alibi", 1e30), ValueError, "must increase along the sequence"),
    ("dd-alibi positions reversed", lambda: build("dd-alibi")(positions=torch.tensor([[3.0], [2.0], [1.0]])),
     ValueError, "token 1 is at 2.0 after 3.0"),
]
# -- alibi slopes= / alibi_heads=
CASES += [
    ("alibi slopes too few", make("alibi", heads=4, slopes=[0.5, 0.25]), ValueError, "slopes"),
    ("alibi slopes too many", make("alibi", heads=2, slopes=[0.5, 0.25, 0.1]), ValueError, "slopes"),
    ("alibi slopes nan", make("alibi", heads=2, slopes=[0.5, NAN]), ValueError, "finite"),
    ("alibi slopes inf", make("alibi", heads=2, slopes=[INF, 0.5]), ValueError, "finite"),
    ("alibi slopes str", make("alibi", heads=2, slopes="0.5"), ValueError, "slopes"),
    ("alibi slopes of strs", make("alibi", heads=2, slopes=["a", "b"]), ValueError, "slopes"),
    ("alibi slopes 2d tensor", make("alibi", heads=2, slopes=torch.ones(2, 1)), ValueError, "slopes"),
    ("alibi_heads 0", make("alibi", heads=4, alibi_heads=0), ValueError, "alibi_heads"),
    ("alibi_heads past heads", make("alibi", heads=4, alibi_heads=5), ValueError, "alibi_heads"),
    ("alibi_heads negative", make("alibi", heads=4, alibi_heads=-1), ValueError, "alibi_heads"),
    ("alibi_heads float", make("alibi", heads=4, alibi_heads=2.0), TypeError, "alibi_heads"),
    ("alibi_heads bool", make("alibi", heads=4, alibi_heads=True), TypeError, "alibi_heads"),
    ("alibi_heads list out of range", make("alibi", heads=4, alibi_heads=[0, 4]), ValueError, "alibi_heads"),
    ("alibi_heads list repeated", make("alibi", heads=4, alibi_heads=[1, 1]), ValueError, "alibi_heads"),
    ("alibi_heads list empty", make("alibi", heads=4, alibi_heads=[]), TypeError, "alibi_heads"),
    ("alibi_heads and slopes of other counts", make("alibi", heads=4, alibi_heads=2, slopes=[0.5]), ValueError,
     "slopes"),
]
# -- rope head_axes=
CASES += [
    ("head_axes too short", make("rope", heads=4, head_axes=(0, 1)), ValueError, "head_axes"),
    ("head_axes too long", make("rope", heads=2, head_axes=(0, 1, 0)), ValueError, "head_axes"),
    ("head_axes axis past dims", make("rope", heads=2, head_axes=(0, 2)), ValueError, "head_axes"),
    ("head_axes negative axis", make("rope", heads=2, head_axes=(0, -1)), ValueError, "head_axes"),
    ("head_axes unknown word", make("rope", heads=2, head_axes=(0, "any")), ValueError, "head_axes"),
    ("head_axes float axis", make("rope", heads=2, head_axes=(0, 1.0)), ValueError, "head_axes"),
    ("head_axes a string", make("rope", heads=2, head_axes="01"), ValueError, "head_axes"),
    ("head_axes bool axis", make("rope", heads=2, head_axes=(True, 0)), ValueError, "head_axes"),
]
# -- cat_dim= on sinusoidal and learned
for k, extra in (("sinusoidal", {}), ("learned", {"grid_shape": (2, 3)})):
    CASES += [
        (f"{k} cat_dim = dim", make(k, cat_dim=32, **extra), ValueError, "cat_dim"),
        (f"{k} cat_dim past dim", make(k, cat_dim=40, **extra), ValueError, "cat_dim"),
        (f"{k} cat_dim negative", make(k, cat_dim=-2, **extra), ValueError, "cat_dim"),
        (f"{k} cat_dim float", make(k, cat_dim=8.0, **extra), TypeError, "cat_dim"),
        (f"{k} cat_dim bool", make(k, cat_dim=True, **extra), TypeError, "cat_dim"),
        (f"{k} cat_dim str", make(k, cat_dim="8", **extra), TypeError, "cat_dim"),
    ]
CASES += [
    ("sinusoidal cat_dim odd", make("sinusoidal", dims=1, cat_dim=7), ValueError, "even"),
    ("sinusoidal concat axis_dims not summing to cat_dim", make("sinusoidal", cat_dim=16, combine="concat",
                                                                axis_dims=(8, 4)), ValueError, "axis_dims"),
]
# -- ndpe.pack / ndpe.stack / pe.packed
a2, a3 = (lambda: PosOut(add=torch.ones(2, 8))), (lambda: PosOut(add=torch.zeros(3, 8)))
CASES += [
    ("pack empty", lambda: ndpe.pack([]), TypeError, "non-empty list"),
    ("pack not a list", lambda: ndpe.pack(a2()), TypeError, "PosOut"),
    ("pack of a tensor", lambda: ndpe.pack([torch.ones(2, 8)]), TypeError, "PosOut"),
    ("pack of a string", lambda: ndpe.pack(["rope"]), TypeError, "PosOut"),
    ("pack mixed dtypes", lambda: ndpe.pack([a2(), PosOut(add=torch.zeros(3, 8, dtype=torch.bfloat16))]), ValueError,
     "dtype"),
    ("pack mixed widths", lambda: ndpe.pack([a2(), PosOut(add=torch.zeros(3, 4))]), ValueError, "add"),
    ("pack mixed fields", lambda: ndpe.pack([a2(), rope_out()]), ValueError, "field"),
    ("pack meta and cpu", lambda: ndpe.pack([a2(), PosOut(add=torch.zeros(3, 8, device="meta"))]), ValueError,
     "device"),
    ("pack batches 2 and 3", lambda: ndpe.pack([PosOut(add=torch.ones(2, 2, 8)), PosOut(add=torch.ones(3, 2, 8))]),
     ValueError, "batch"),
    ("pack sizes of other length", lambda: ndpe.pack([a2(), a3()], sizes=[2]), ValueError, "sizes"),
    ("pack sizes wrong count", lambda: ndpe.pack([a2(), a3()], sizes=[2, 4]), ValueError, "sizes"),
    ("pack sizes negative", lambda: ndpe.pack([PosOut(), PosOut()], sizes=[2, -1]), ValueError, "sizes"),
    ("pack none without sizes", lambda: ndpe.pack([PosOut(), PosOut()]), ValueError, "sizes"),
    ("pack decoding output", lambda: ndpe.pack([rope_out(past=2), rope_out()]), ValueError, "past"),
    ("stack empty", lambda: ndpe.stack([]), TypeError, "non-empty list"),
    ("stack length too short", lambda: ndpe.stack([a2(), a3()], length=2), ValueError, "length"),
    ("stack length float", lambda: ndpe.stack([a2(), a3()], length=3.0), TypeError, "length"),
    ("stack mixed dtypes", lambda: ndpe.stack([a2(), PosOut(add=torch.zeros(3, 8, dtype=torch.float64))]), ValueError,
     "dtype"),
    ("stack of a tensor", lambda: ndpe.stack([torch.ones(2, 8)]), TypeError, "PosOut"),
    ("packed grid of other dims", packed("rope", [(2, 3), (4,)], dims=2), ValueError, "dims"),
    ("packed grid string", packed("rope", "23", dims=2), TypeError, "grid_shapes"),
    ("packed num_prefix negative", packed("alibi", [(2, 3)], dims=2, num_prefix=-1), ValueError, "num_prefix"),
    ("packed num_prefix float", packed("alibi", [(2, 3)], dims=2, num_prefix=1.0), TypeError, "num_prefix"),
    ("packed too much memory", packed("alibi", [(16, 16)] * 200, dims=2), MemoryError, "GiB"),
    ("packed prefix of 1e6 too much memory", packed("rope", [(2, 3)], dims=2, num_prefix=10 ** 6), MemoryError,
     "GiB"),
    ("packed dtype int", packed("rope", [(2, 3)], dims=2, dtype=torch.int32), ValueError, "floating dtype"),
    ("packed a grid with 0", packed("rope", [(2, 3), (0, 2)], dims=2), ValueError, "grid"),
]
# -- flex.attention / flex.packed_attention
CASES += [
    ("flex pe a string", flex(pe="alibi"), TypeError, "encoding"),
    ("flex pe None", flex(pe=None, kind="none"), ValueError, "nothing"),
    ("flex q/k tokens wrong", flex(t=5), ValueError, "tokens"),
    ("flex num_prefix negative", flex(num_prefix=-1), ValueError, "num_prefix"),
    ("flex q int", flex(q=torch.zeros(1, 2, 6, 16, dtype=torch.int64)), ValueError, "floating dtype"),
    ("flex q 3d", flex(q=torch.randn(2, 6, 16)), ValueError, "(B, heads, T, head_dim)"),
    ("flex heads wrong", flex(q=torch.randn(1, 3, 6, 16)), ValueError, "heads"),
    ("flex grid of other dims", flex(grid=(6,), t=6), ValueError, "dims"),
    ("packed_attention pe a string", flex(pe="alibi", fn="packed", grid=[(2, 3)]), TypeError, "encoding"),
    ("packed_attention grid_shapes empty", flex(fn="packed", grid=[], t=6), TypeError, "grid_shapes"),
    ("packed_attention grid_shapes string", flex(fn="packed", grid="23", t=6), TypeError, "grid_shapes"),
    ("packed_attention tokens wrong", flex(fn="packed", grid=[(2, 3), (1, 2)], t=7), ValueError, "packed tokens"),
    ("packed_attention causal str", flex(fn="packed", grid=[(2, 3)], causal="yes"), TypeError, "causal"),
    ("packed_attention num_prefix float", flex(fn="packed", grid=[(2, 3)], num_prefix=0.0), TypeError, "num_prefix"),
    ("packed_attention q int", flex(fn="packed", grid=[(2, 3)], q=torch.zeros(1, 2, 6, 16, dtype=torch.int64)),
     ValueError, "floating dtype"),
]
# -- mrope_positions
CASES += [
    ("mrope segment float", lambda: ndpe.mrope_positions([2.0]), ValueError, "segment"),
    ("mrope segment bool", lambda: ndpe.mrope_positions([True]), ValueError, "segment"),
    ("mrope segment str", lambda: ndpe.mrope_positions(["ab"]), ValueError, "segment"),
    ("mrope grid with a float", lambda: ndpe.mrope_positions([(1, 2.0, 2)]), ValueError, "positive int"),
    ("mrope grid of 5", lambda: ndpe.mrope_positions([(1, 2, 2, 1.0, 3)]), ValueError, "(T, H, W)"),
    ("mrope seconds nan", lambda: ndpe.mrope_positions([(2, 2, 2, NAN)], tokens_per_second=2), ValueError,
     "seconds_per_grid"),
    ("mrope seconds inf", lambda: ndpe.mrope_positions([(2, 2, 2, INF)], tokens_per_second=2), ValueError,
     "seconds_per_grid"),
    ("mrope tokens_per_second nan", lambda: ndpe.mrope_positions([3], tokens_per_second=NAN), ValueError,
     "tokens_per_second"),
    ("mrope tokens_per_second str", lambda: ndpe.mrope_positions([3], tokens_per_second="2"), TypeError,
     "tokens_per_second"),
    ("mrope spatial_merge float", lambda: ndpe.mrope_positions([3], spatial_merge=2.0), ValueError, "spatial_merge"),
    ("mrope start negative", lambda: ndpe.mrope_positions([3], start=-1), ValueError, "start"),
    ("mrope start float", lambda: ndpe.mrope_positions([3], start=1.5), ValueError, "start"),
    ("mrope text 1e10 too much memory", lambda: ndpe.mrope_positions([10 ** 10]), MemoryError, "GiB"),
    ("mrope video too much memory", lambda: ndpe.mrope_positions([(10 ** 4, 10 ** 3, 10 ** 3)]), MemoryError, "GiB"),
    ("mrope resume None", lambda: ndpe.mrope_positions([3], resume=None), ValueError, "resume must be one of"),
]
# -- PerAxis
CASES += [
    ("per_axis not a mapping", per_axis("rope"), ValueError, "2 or 3 named axes"),
    ("per_axis 4 axes", per_axis(dict(a="rope", b="rope", c="rope", d="rope")), ValueError, "2 or 3 named axes"),
    ("per_axis name not a str", per_axis({0: "rope", 1: "rope"}), ValueError, "axis names"),
    ("per_axis dict without kind", per_axis({"time": {"theta": 1.0}, "freq": "rope"}), TypeError, "'kind'"),
    ("per_axis a 2d-only kind", per_axis({"time": "rope-mixed", "freq": "rope"}), ValueError, "rope-mixed"),
    ("per_axis a 3d-only kind", per_axis({"time": "vrope", "freq": "rope"}), ValueError, "vrope"),
    ("per_axis dim float", per_axis({"time": "rope", "freq": "rope"}, dim=32.0), TypeError, "dim"),
    ("per_axis heads 0", per_axis({"time": "rope", "freq": "rope"}, heads=0), ValueError, "heads"),
    ("per_axis call 1 axis", per_axis_call({"time": "rope", "freq": "rope"}, (4,)), ValueError, "axes"),
    ("per_axis call grid 0", per_axis_call({"time": "rope", "freq": "rope"}, (0, 4)), ValueError, "grid"),
    ("per_axis positions of 3 columns", lambda: ndpe.PerAxis({"time": "rope", "freq": "rope"}, dim=32, heads=2)(
        positions=torch.zeros(4, 3)), ValueError, "positions"),
    ("per_axis num_prefix negative", per_axis_call({"time": "rope", "freq": "rope"}, (2, 2), num_prefix=-1),
     ValueError, "num_prefix"),
]
# -- from_hf_rope on SimpleNamespace configs
CASES += [
    ("from_hf no hidden size", from_hf(SimpleNamespace(rope_theta=1e4)), ValueError, "head"),
    ("from_hf theta nan", from_hf(ns(rope_theta=NAN)), ValueError, "theta"),
    ("from_hf theta str", from_hf(ns(rope_theta="1e4")), ValueError, "theta"),
    ("from_hf theta negative", from_hf(ns(rope_theta=-1.0)), ValueError, "theta"),
    ("from_hf unknown rope_type", from_hf(ns(rope_scaling={"rope_type": "fancy", "factor": 2.0})), ValueError,
     "fancy"),
    ("from_hf linear without factor", from_hf(ns(rope_scaling={"rope_type": "linear"})), ValueError, "factor"),
    ("from_hf factor nan", from_hf(ns(rope_scaling={"rope_type": "linear", "factor": NAN})), ValueError, "scale must be finite"),
    ("from_hf factor str", from_hf(ns(rope_scaling={"rope_type": "linear", "factor": "2"})), ValueError, "factor"),
    ("from_hf unknown key", from_hf(ns(rope_scaling={"rope_type": "linear", "factor": 2.0, "fator": 3})), ValueError,
     "fator"),
    ("from_hf mrope_section of 2", from_hf(ns(rope_scaling={"rope_type": "default", "mrope_section": [2, 2]})),
     ValueError, "mrope_section"),
    ("from_hf scaling and parameters disagree", from_hf(ns(rope_scaling={"rope_type": "linear", "factor": 2.0},
                                                           rope_parameters={"rope_type": "default",
                                                                            "rope_theta": 1e4})),
     ValueError, "rope_scaling"),
    ("from_hf heads str", from_hf(ns(), heads="4"), TypeError, "heads"),
    ("from_hf per_layer without layers", from_hf(ns(), per_layer=True), ValueError, "num_hidden_layers"),
    ("from_hf a string config", from_hf("llama"), ValueError, "head_dim"),
    ("from_hf yarn factor below 1", from_hf(ns(rope_scaling={"rope_type": "yarn", "factor": 0.5,
                                                             "original_max_position_embeddings": 16})),
     ValueError, "scale must be >= 1.0"),
]
# -- hf.use on a tiny Llama
CASES += [
    ("hf.use unknown kind", hf_use("ropee"), ValueError, "unknown kind"),
    ("hf.use kind None", hf_use(None), ValueError, "unknown kind"),
    ("hf.use unknown option", hf_use("rope", thetaa=1.0), TypeError, "valid options"),
    ("hf.use a 2d-only kind", hf_use("rope-mixed"), ValueError, "rope-mixed"),
    ("hf.use a 3d kind", hf_use("vrope"), ValueError, "vrope"),
    ("hf.use on a config", hf_use("rope", model=lambda: SimpleNamespace(config=ns())), TypeError, "Llama family"),
    ("hf.use learned cat_dim", hf_use("learned", grid_shape=(64,), cat_dim=8), ValueError, "concatenates"),
    ("hf.use rope theta nan", hf_use("rope", theta=NAN), ValueError, "theta must be finite"),
]
# -- timm.use on tiny ViT / Eva / NaFlexVit
for k in ("cope", "dd-alibi", "pope", "xpos", "complex", "transformer-xl", "videorope", "vrope"):
    CASES.append((f"timm.use ViT {k} (not 2D)", timm_use(vit, k), ValueError, k))
CASES += [
    ("timm.use unknown kind", timm_use(vit, "ropee"), ValueError, "unknown kind"),
    ("timm.use unknown option", timm_use(vit, "rope", thetaa=1.0), TypeError, "valid options"),
    ("timm.use on a Linear", lambda: __import__("ndpe.timm").timm.use(torch.nn.Linear(2, 2), "rope"), TypeError,
     "VisionTransformer"),
    ("timm.use twice", lambda: __import__("ndpe.timm").timm.use(timm_use(vit, "rope")(), "alibi"), ValueError,
     "already"),
    ("timm.use Eva unknown kind", timm_use(eva, "ropee"), ValueError, "unknown kind"),
    ("timm.use Eva 1d kind", timm_use(eva, "cope"), ValueError, "cope"),
    ("timm.use NaFlex unknown kind", timm_use(naflex, "ropee"), ValueError, "unknown kind"),
    ("timm.use ViT rope theta inf", timm_use(vit, "rope", theta=INF), ValueError, "theta must be finite"),
    ("timm.use ViT alibi slopes too few", timm_use(vit, "alibi", slopes=[0.5]), ValueError, "slopes"),
    ("timm.use ViT rope head_axes too short", timm_use(vit, "rope", head_axes=(0,)), ValueError, "head_axes"),
]
for k in ("alibi", "rope", "liere", "cpb"):
    CASES.append((f"timm.use ViT patch dropout {k}", timm_use(vit, k) if False else
                  (lambda k=k: __import__("ndpe.timm").timm.use(vit(patch_drop_rate=0.5), k)), ValueError,
                  "patch"))
# -- ndpe viz --name / ndpe explore
VIZ = ("--kind", "rope", "--grid", "4", "--dim", "8", "--figures", "table", "--out", "/tmp/ndpe-fuzz-viz-none")
CASES += [
    ("viz --name ../x", cli(*VIZ, "--name", "../x", viz=True), CliError, "without folders"),
    ("viz --name a/b", cli(*VIZ, "--name", "a/b", viz=True), CliError, "without folders"),
    ("viz --name absolute", cli(*VIZ, "--name", "/tmp/x", viz=True), CliError, "without folders"),
    ("viz --name backslash", cli(*VIZ, "--name", "..\\x", viz=True), CliError, "without folders"),
    ("viz --grid 0", cli("--kind", "rope", "--grid", "0", "--out", "/tmp/ndpe-fuzz-viz-none", viz=True), CliError,
     "grid"),
    ("viz --dim 0", cli("--kind", "rope", "--grid", "4", "--dim", "0", "--out", "/tmp/ndpe-fuzz-viz-none", viz=True),
     CliError, "dim"),
    ("viz --kind and --axis", cli("--kind", "rope", "--axis", "time=rope", "--grid", "4", "4", viz=True), CliError,
     "--axis"),
    ("explore unknown kind", cli("explore", "--out", "/tmp/ndpe-fuzz-explore-none", "--kinds", "ropee"), CliError,
     "unknown kinds"),
    ("explore missing results", cli("explore", "--out", "/tmp/ndpe-fuzz-explore-none", "--results",
                                    "/tmp/ndpe-fuzz-no-run"), CliError, "no results.csv"),
    ("explore --kinds without a name", cli("explore", "--kinds"), CliError, "--kinds"),
    ("explore unknown flag", cli("explore", "--bogus"), CliError, "--bogus"),
]


@pytest.mark.parametrize("name,thunk,exc,fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_clear_one_line_error(name, thunk, exc, fragment):
    raises_one_line(name, thunk, exc, fragment)


def geometric(n):
    """The ALiBi paper's slopes for ``n`` heads, a power of two: ``2 ** (-8 h / n)``, h = 1..n."""
    return [2.0 ** (-8.0 * h / n) for h in range(1, n + 1)]


def mrope_text(n, start=0):
    return [[i, i, i] for i in range(start, start + n)]


def image_ids(t, h, w, start=0):
    return [[start + a, start + b, start + c] for a in range(t) for b in range(h) for c in range(w)]


VALUES = []
for h in (1, 2, 4, 8):
    VALUES.append((f"alibi default slopes, {h} heads", lambda h=h: build("alibi", dims=1, heads=h).slopes.tolist(),
                   lambda h=h: geometric(h)))
for n in (1, 2, 4):
    VALUES.append((f"alibi_heads={n} of 8", lambda n=n: build("alibi", dims=1, heads=8, alibi_heads=n).slopes.tolist(),
                   lambda n=n: geometric(n) + [0.0] * (8 - n)))
VALUES += [
    ("alibi slopes given", lambda: build("alibi", dims=1, heads=2, slopes=[0.5, 0.125]).slopes.tolist(),
     lambda: [0.5, 0.125]),
    ("alibi_heads list with slopes", lambda: build("alibi", dims=1, heads=4, alibi_heads=[3, 1],
                                                   slopes=[0.5, 0.25]).slopes.tolist(), lambda: [0.0, 0.25, 0.0, 0.5]),
]
for c in (2, 8, 16, 30):
    VALUES.append((f"sinusoidal cat_dim={c} width", lambda c=c: build("sinusoidal", dims=1, cat_dim=c)((5,)).cat.shape,
                   lambda c=c: (5, c)))
    VALUES.append((f"learned cat_dim={c} width", lambda c=c: build("learned", dims=1, cat_dim=c,
                                                                    grid_shape=(5,))((5,)).cat.shape,
                   lambda c=c: (5, c)))
for n, start in ((1, 0), (3, 0), (4, 7)):
    VALUES.append((f"mrope text {n} from {start}", lambda n=n, s=start: ndpe.mrope_positions([n], start=s).tolist(),
                   lambda n=n, s=start: mrope_text(n, s)))
for t, hh, w in ((1, 2, 2), (2, 1, 3), (1, 4, 2)):
    VALUES.append((f"mrope image {(t, hh, w)}", lambda g=(t, hh, w): ndpe.mrope_positions([g]).tolist(),
                   lambda g=(t, hh, w): image_ids(*g)))
VALUES.append(("mrope merge 2", lambda: ndpe.mrope_positions([(1, 4, 4)], spatial_merge=2).tolist(),
               lambda: image_ids(1, 2, 2)))
for sizes in ((2, 3), (1, 1, 1), (4,)):
    def packed_adds(sizes=sizes):
        p = ndpe.pack([PosOut(add=torch.full((n, 2), float(i))) for i, n in enumerate(sizes)])
        return p.add[:, 0].tolist(), (p.bias == 0).int().tolist()

    def expected(sizes=sizes):
        doc = [i for i, n in enumerate(sizes) for _ in range(n)]
        return [float(i) for i in doc], [[int(a == b) for b in doc] for a in doc]
    VALUES.append((f"pack adds and mask {sizes}", packed_adds, expected))


def cos_at(kind, value):
    """The cosine of the fastest frequency (1 rad per unit) at a position ``value`` on every axis."""
    def run():
        pe = build(kind)
        return [float(pe(positions=torch.full((1, pe.dims), value)).rot[0][0, 0, 0])]
    return run


def dd_alibi_term(grid=None, positions=None):
    """dd-alibi's logits term for 3 tokens, on fixed states, queries and keys."""
    def run():
        torch.manual_seed(0)
        pe, x, q = build("dd-alibi", causal=False), torch.randn(1, 3, 32), torch.randn(1, 2, 3, 16)
        return pe(grid, positions=positions).logits(q, q, x).flatten().tolist()
    return run


# positions under the angle limit are kept: float64 angles, then float32 cos (7e13: just under it; vrope's first id
# is u + a, twice the coordinate)
for k, value, ids in (("rope", 1e13, 1), ("string", 1e13, 1), ("videorope", 7e13, 1), ("vrope", 3.5e13, 2)):
    VALUES.append((f"{k} positions {value:g} kept", cos_at(k, value),
                   lambda value=value, ids=ids: [math.cos(ids * float(torch.tensor(value, dtype=torch.float32)))]))
VALUES.append(("dd-alibi increasing positions: only their order counts",
               dd_alibi_term(positions=torch.tensor([[0.0], [5.0], [1e30]])), dd_alibi_term((3,))))


@pytest.mark.parametrize("name,thunk,expected", VALUES, ids=[v[0] for v in VALUES])
def test_right_answer(name, thunk, expected):
    got, want = thunk(), expected()
    if isinstance(got, torch.Size):
        got = tuple(got)
    assert got == pytest.approx(want) if isinstance(want, list) and want and isinstance(want[0], float) else got == want


def test_table_is_large_enough():
    assert len(CASES) + len(VALUES) >= 200
