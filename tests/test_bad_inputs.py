"""A table of bad inputs: each must raise a clear error (type and message), never a silent wrong result."""
from __future__ import annotations

import pytest
import torch

import ndpe
from ndpe.functional import apply_rotary


def make(**kw):
    args = {"dims": 2, "kind": "none", "dim": 32, "heads": 4, **kw}
    return lambda: ndpe.make(**args)


def call(kind="none", dims=2, args=(), dim=32, heads=4, opts=None, **kw):
    def run():
        pe = ndpe.make(dims=dims, kind=kind, dim=dim, heads=heads, **(opts or {}))
        return pe(*args, **kw)
    return run


nan_pos = torch.tensor([[0.0, float("nan")]])
CASES = [
    # (id, kinds needed, thunk, exception, message fragment)
    ("unknown kind", (), make(kind="ropee"), ValueError, "expected one of"),
    ("dims=4", (), make(dims=4), ValueError, "supports dims"),
    ("dims=0", (), make(dims=0), ValueError, "supports dims"),
    ("unknown option", (), make(temprature=1.0), TypeError, "valid options"),
    ("dim=0", (), make(dim=0), ValueError, "dim must be a positive int"),
    ("dim not divisible by heads", (), make(dim=30, heads=4), ValueError, "not divisible"),
    ("heads=0", (), make(heads=0), ValueError, "heads must be a positive int"),
    ("grid of wrong rank", (), call(args=((4,),)), ValueError, "has 1 axes but the encoding has dims=2"),
    ("negative size", (), call(args=((4, -1),)), ValueError, ">= 1"),
    ("zero size", (), call(args=((0, 3),)), ValueError, ">= 1"),
    ("float size", (), call(args=((4.5, 3),)), TypeError, "must hold ints"),
    ("grid not a sequence", (), call(args=(object(),)), TypeError, "tuple of 2 ints"),
    ("positions wrong last dim", (), call(positions=torch.zeros(5, 3)), ValueError, "(N, 2)"),
    ("positions wrong rank", (), call(positions=torch.zeros(5)), ValueError, "(N, 2)"),
    ("positions not a tensor", (), call(positions=[[0, 1]]), TypeError, "must be a tensor"),
    ("positions NaN", (), call(positions=nan_pos), ValueError, "NaN"),
    ("positions count != grid", (), call(args=((2, 2),), positions=torch.zeros(5, 2)), ValueError, "5 tokens"),
    ("negative num_prefix", (), call(args=((2, 2),), num_prefix=-1), ValueError, "num_prefix"),
    ("neither grid nor positions", (), call(), ValueError, "pass grid_shape"),
    ("rope odd axis_dims", ("rope",), make(kind="rope", axis_dims=(3, 4)), ValueError, "even"),
    ("rope axis_dims too many channels", ("rope",), make(kind="rope", axis_dims=(8, 8)), ValueError, "head_dim"),
    ("rope axis_dims wrong length", ("rope",), make(kind="rope", axis_dims=(4, 2, 2)), ValueError, "axis"),
    ("rope odd head_dim", ("rope",), make(kind="rope", dim=36, heads=4), ValueError, "head_dim"),
    ("rope unknown scaling", ("rope",), make(kind="rope", scaling="xntk"), ValueError, "scaling"),
    ("learned grid beyond table", ("learned",),
     call(kind="learned", opts={"grid_shape": (4, 4)}, args=((5, 4),)), ValueError, "resize"),
    ("sinusoidal concat split", ("sinusoidal",), make(kind="sinusoidal", dim=31, heads=1), ValueError, "dim"),
    ("alibi causal in 2D", ("alibi",), make(kind="alibi", causal=True), ValueError, "causal"),
    ("relative negative distance", ("relative",), make(kind="relative", max_distance=-1), ValueError, "max_distance"),
    ("continuous augment on integer kind", ("relative",), make(kind="relative", augment="cape"), ValueError,
     "integer positions"),
    ("augment a table kind", ("learned",), make(kind="learned", grid_shape=(4, 4), augment="cape"), ValueError,
     "coordinate-based"),
]


@pytest.mark.parametrize("name,kinds,thunk,exc,fragment", CASES, ids=[c[0] for c in CASES])
def test_bad_input_raises_clear_error(name, kinds, thunk, exc, fragment):
    missing = [k for k in kinds if k not in ndpe.available()]
    if missing:
        pytest.skip(f"kinds not registered yet: {missing}")
    with pytest.raises(exc) as info:
        thunk()
    assert fragment in str(info.value), f"{name}: message {str(info.value)!r} lacks {fragment!r}"


APPLY_CASES = [
    ("apply_tokens width", lambda: ndpe.apply_tokens(torch.zeros(1, 4, 8), ndpe.PosOut(add=torch.zeros(4, 6))),
     ValueError, "dim=8"),
    ("apply_tokens length", lambda: ndpe.apply_tokens(torch.zeros(1, 5, 8), ndpe.PosOut(add=torch.zeros(4, 8))),
     ValueError, "length 5"),
    ("apply_qk length", lambda: ndpe.apply_qk(torch.zeros(1, 1, 5, 8), torch.zeros(1, 1, 5, 8),
                                              ndpe.PosOut(rot=(torch.ones(4, 2), torch.zeros(4, 2)))),
     ValueError, "5 tokens"),
    ("rotary wider than head", lambda: apply_rotary(torch.zeros(1, 4, 4), torch.ones(4, 4), torch.zeros(4, 4)),
     ValueError, "head_dim"),
    ("bad pairing", lambda: ndpe.PosOut(pairing="pairs"), ValueError, "pairing"),
    ("merge two rotations", lambda: ndpe.merge(ndpe.PosOut(rot=(torch.ones(2, 1), torch.zeros(2, 1))),
                                               ndpe.PosOut(rot=(torch.ones(2, 1), torch.zeros(2, 1)))),
     ValueError, "two rotary"),
    ("merge different prefixes", lambda: ndpe.merge(ndpe.PosOut(num_prefix=1), ndpe.PosOut()), ValueError, "num_prefix"),
]


@pytest.mark.parametrize("name,thunk,exc,fragment", APPLY_CASES, ids=[c[0] for c in APPLY_CASES])
def test_bad_apply_raises_clear_error(name, thunk, exc, fragment):
    with pytest.raises(exc) as info:
        thunk()
    assert fragment in str(info.value), f"{name}: message {str(info.value)!r} lacks {fragment!r}"
