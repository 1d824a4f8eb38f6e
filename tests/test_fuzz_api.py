"""Table-driven fuzz of the public API with bad inputs: each must raise a clear one-line error.

Every row: (id, thunk, exception type, fragment of the message). Rows cover ``ndpe.make`` and each
kind's options, the encoding call (grid, positions, num_prefix, dtype), ``apply_tokens``,
``apply_qk``, ``attn_bias``, ``Attention``, ``Combine`` and the augmentations. Fast: tiny grids only.
"""
from __future__ import annotations

import pytest
import torch

import ndpe
from conftest import raises_one_line
from ndpe.augment import CAPE, RandomPositions, make_augment

NAN, INF = float("nan"), float("inf")


def make(kind="none", dims=2, dim=32, heads=4, **opts):
    return lambda: ndpe.make(dims=dims, kind=kind, dim=dim, heads=heads, **opts)


def call(kind="none", dims=2, grid=(2, 3), dim=32, heads=4, opts=None, **kw):
    def run():
        pe = ndpe.make(dims=dims, kind=kind, dim=dim, heads=heads, **(opts or {}))
        return pe(grid, **kw) if grid is not None else pe(**kw)
    return run


def rope_pos(n=4):
    return ndpe.make(dims=1, kind="rope", dim=32, heads=4)((n,))


def alibi_pos(n=4, heads=4):
    return ndpe.make(dims=1, kind="alibi", dim=32, heads=heads)((n,))


def attention(x, pos, heads=4):
    return lambda: ndpe.Attention(32, heads)(x, pos)


def qk(dtype=torch.float32):
    return torch.zeros(1, 4, 4, 8, dtype=dtype)


CASES = [
    # -- make: base arguments
    ("dims float", make(dims=2.0), TypeError, "dims must be an int"),
    ("dims str", make(dims="2"), TypeError, "dims must be an int"),
    ("dims bool", make(dims=True), TypeError, "dims must be an int"),
    ("dims 4", make(dims=4), ValueError, "supports dims"),
    ("dim float", make(dim=32.0), TypeError, "dim must be a positive int"),
    ("dim negative", make(dim=-8), ValueError, "dim must be a positive int"),
    ("heads str", make(heads="4"), TypeError, "heads must be a positive int"),
    ("heads bool", make(heads=True), TypeError, "heads must be a positive int"),
    ("kind list", make(kind=["rope"]), ValueError, "unknown kind"),
    ("kind None", make(kind=None), ValueError, "unknown kind"),
    ("unknown option", make(kind="rope", thetaa=1.0), TypeError, "valid options"),
    # -- kind options: type, finiteness, range
    ("rope theta nan", make(kind="rope", theta=NAN), ValueError, "theta must be finite"),
    ("rope theta inf", make(kind="rope", theta=INF), ValueError, "theta must be finite"),
    ("rope theta per-axis nan", make(kind="rope", theta=(100.0, NAN)), ValueError, "theta must be finite"),
    ("rope theta str", make(kind="rope", theta="1e4"), TypeError, "theta must hold numbers"),
    ("rope scale nan", make(kind="rope", dims=1, scaling="linear", scale=NAN), ValueError, "scale must be finite"),
    ("rope scale inf", make(kind="rope", dims=1, scaling="ntk", scale=INF), ValueError, "scale must be finite"),
    ("rope train_shape nan", make(kind="rope", dims=1, scaling="yarn", scale=2.0, train_shape=NAN), ValueError,
     "train_shape must be finite"),
    ("rope scaling list", make(kind="rope", scaling=["linear"]), ValueError, "scaling must be None or one of"),
    ("rope pairing list", make(kind="rope", pairing=["half"]), ValueError, "pairing must be one of"),
    ("rope coords None", make(kind="rope", coords=None), ValueError, "coords must be one of"),
    ("rope-mixed theta nan", make(kind="rope-mixed", theta=NAN), ValueError, "theta must be finite"),
    ("rope-mixed rotate str", make(kind="rope-mixed", rotate="no"), TypeError, "rotate must be a bool"),
    ("sinusoidal temperature inf", make(kind="sinusoidal", temperature=INF), ValueError,
     "temperature must be finite"),
    ("sinusoidal temperature nan", make(kind="sinusoidal", temperature=NAN), ValueError,
     "temperature must be finite"),
    ("sinusoidal temperature str", make(kind="sinusoidal", temperature="1e4"), TypeError,
     "temperature must be a number"),
    ("sinusoidal layout list", make(kind="sinusoidal", layout=["blocks"]), ValueError, "layout must be one of"),
    ("fourier sigma inf", make(kind="fourier", sigma=INF), ValueError, "sigma must be finite"),
    ("fourier sigma nan", make(kind="fourier", sigma=NAN), ValueError, "sigma must be finite"),
    ("fourier sigma negative", make(kind="fourier", sigma=-1.0), ValueError, "sigma must be > 0"),
    ("fourier learnable str", make(kind="fourier", learnable="no"), TypeError, "learnable must be a bool"),
    ("fourier seed float", make(kind="fourier", seed=1.5), TypeError, "seed must be"),
    ("coord with_r str", make(kind="coord", with_r="no"), TypeError, "with_r must be a bool"),
    ("coord with_r int", make(kind="coord", with_r=1), TypeError, "with_r must be a bool"),
    ("AddCoords with_r str", lambda: ndpe.AddCoords(2, with_r="no"), TypeError, "with_r must be a bool"),
    ("alibi distance None", make(kind="alibi", distance=None), ValueError, "distance must be one of"),
    ("alibi causal str", make(kind="alibi", dims=1, causal="no"), TypeError, "causal must be a bool"),
    ("relative mode list", make(kind="relative", mode=["clip"]), ValueError, "mode must be one of"),
    ("relative bidirectional str", make(kind="relative", dims=1, mode="t5", bidirectional="no"), TypeError,
     "bidirectional must be a bool"),
    ("relative max_distance float", make(kind="relative", max_distance=2.0), TypeError,
     "max_distance must hold ints"),
    ("learned factorized str", make(kind="learned", grid_shape=(2, 3), factorized="no"), TypeError,
     "factorized must be a bool"),
    ("learned resize list", make(kind="learned", grid_shape=(2, 3), resize=["bicubic"]), ValueError,
     "resize for dims=2"),
    # -- the encoding call
    ("grid float", call(grid=(2.0, 3)), TypeError, "must hold ints"),
    ("grid str", call(grid="23"), TypeError, "tuple of 2 ints"),
    ("grid too long", call(grid=(2, 3, 4)), ValueError, "has 3 axes"),
    ("num_prefix float", call(num_prefix=1.0), TypeError, "num_prefix must be an int >= 0"),
    ("num_prefix bool", call(num_prefix=True), TypeError, "num_prefix must be an int >= 0"),
    ("num_prefix negative", call(num_prefix=-2), ValueError, "num_prefix must be an int >= 0"),
    ("dtype bool alibi", call(kind="alibi", dtype=torch.bool), ValueError, "floating dtype"),
    ("dtype int64 rope", call(kind="rope", dtype=torch.int64), ValueError, "floating dtype"),
    ("dtype complex", call(kind="sinusoidal", dtype=torch.complex64), ValueError, "floating dtype"),
    ("dtype str", call(kind="rope", dtype="float16"), TypeError, "must be a torch.dtype"),
    ("dtype python float", call(kind="rope", dtype=float), TypeError, "must be a torch.dtype"),
    ("positions meta", call(grid=None, positions=torch.zeros(4, 2, device="meta")), ValueError, "meta device"),
    ("positions inf", call(grid=None, positions=torch.tensor([[0.0, INF]])), ValueError, "NaN or inf"),
    ("positions list", call(grid=None, positions=[[0.0, 1.0]]), TypeError, "must be a tensor"),
    ("positions 4-D", call(grid=None, positions=torch.zeros(1, 1, 4, 2)), ValueError, "(N, 2)"),
    ("alibi 128x128 over budget", call(kind="alibi", grid=(128, 128)), MemoryError, "ndpe.flex"),
    ("relative 128x128 over budget", call(kind="relative", grid=(128, 128)), MemoryError, "GiB budget"),
    ("alibi batched positions over budget", call(kind="alibi", dims=1, grid=None,
                                                 positions=torch.zeros(64, 4096, 1)), MemoryError, "budget"),
    # -- apply_tokens / apply_qk / attn_bias
    ("apply_tokens int tokens", lambda: ndpe.apply_tokens(torch.zeros(1, 4, 8, dtype=torch.long),
                                                          ndpe.PosOut(add=torch.zeros(4, 8))), ValueError,
     "floating dtype"),
    ("apply_tokens pos not PosOut", lambda: ndpe.apply_tokens(torch.zeros(1, 4, 8), torch.zeros(4, 8)), TypeError,
     "ndpe.PosOut"),
    ("apply_qk int q", lambda: ndpe.apply_qk(qk(torch.int64), qk(torch.int64), rope_pos()), ValueError,
     "q must have a floating dtype"),
    ("apply_qk pos tuple", lambda: ndpe.apply_qk(qk(), qk(), (torch.ones(4, 4), torch.zeros(4, 4))), TypeError,
     "ndpe.PosOut"),
    ("attn_bias int64", lambda: ndpe.attn_bias(alibi_pos(), torch.int64), ValueError, "floating dtype"),
    ("attn_bias bool", lambda: ndpe.attn_bias(alibi_pos(), torch.bool), ValueError, "floating dtype"),
    ("attn_bias dtype str", lambda: ndpe.attn_bias(alibi_pos(), "float32"), TypeError, "torch.dtype"),
    ("PosOut.to int", lambda: rope_pos().to(torch.int32), ValueError, "floating dtype"),
    # -- Attention
    ("Attention bias of other heads", attention(torch.randn(2, 4, 32), alibi_pos(heads=2)), ValueError,
     "bias has 2 heads but the attention has heads=4"),
    ("Attention bias of other length", attention(torch.randn(2, 5, 32), alibi_pos()), ValueError,
     "x has 5 tokens but the encoding covers 4"),  # the message names the layout (x must be (B, T, dim))
    ("Attention heads float", lambda: ndpe.Attention(32, 4.0), TypeError, "heads must be a positive int"),
    ("Attention dropout > 1", lambda: ndpe.Attention(32, 4, attn_drop=1.5), ValueError, "attn_drop must be"),
    ("Attention causal str", lambda: ndpe.Attention(32, 4, causal="no"), TypeError, "causal must be a bool"),
    # -- Combine
    ("Combine of a non-encoding", lambda: ndpe.Combine(ndpe.make(dims=1, kind="none", dim=8), 3), TypeError,
     "encodings built by ndpe.make"),
    ("Combine empty", lambda: ndpe.Combine(), ValueError, "at least one"),
    ("Combine dtype int", lambda: ndpe.Combine(ndpe.make(dims=1, kind="rope", dim=32, heads=4),
                                               ndpe.make(dims=1, kind="alibi", dim=32, heads=4))((4,),
                                                                                                 dtype=torch.int32),
     ValueError, "floating dtype"),
    # -- augment
    ("CAPE shift nan", lambda: CAPE(dims=2, max_global_shift=NAN), ValueError, "max_global_shift must be finite"),
    ("CAPE scaling inf", lambda: CAPE(dims=1, max_global_scaling=INF), ValueError,
     "max_global_scaling must be finite"),
    ("CAPE shift str", lambda: CAPE(dims=1, max_local_shift="1"), TypeError, "must hold numbers"),
    ("random max_len float", lambda: RandomPositions(dims=1, max_len=10.0), ValueError, "max_len must be a positive int"),
    ("augment unknown name", lambda: make_augment("jitter", dims=1), ValueError, "unknown augment"),
    ("augment on a table kind", make(kind="learned", grid_shape=(2, 3), augment="cape"), ValueError,
     "coordinate-based"),
]


@pytest.mark.parametrize("name,thunk,exc,fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_api_input_raises_clear_error(name, thunk, exc, fragment):
    raises_one_line(name, thunk, exc, fragment)


def test_table_is_large_enough():
    assert len(CASES) >= 50
