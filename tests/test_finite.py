"""Every kind's output is finite, or the call is refused in one line: explicit positions of any magnitude, in every
output dtype.

A kind whose arithmetic overflows past some coordinate declares it (:meth:`ndpe.Encoding.position_limit`, from its
formula and the output dtype; :meth:`~ndpe.Encoding.check_range`); positions beyond it raise ``ValueError``, and
positions within it give finite tensors in every field (``rot``, ``bias``, ``add``, ``cat``, ``basis``, ``frame``,
``prob_bias``, and the ``logits`` / ``tokens`` terms evaluated on random q, k and tokens).
"""
from __future__ import annotations

import pytest
import torch

import ndpe
from conftest import KIND_DIMS, build

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
MAGNITUDES = (1e3, 1e5, 1e10, 1e30, 3e38)
# token coordinates as fractions of the magnitude: from the origin, and spanning both signs (the widest offsets);
# both increase, as kinds whose positions order the tokens require; a second axis runs the other way
PATTERNS = {"from-zero": (0.0, 0.1, 0.25, 0.5, 0.75, 1.0), "signed": (-1.0, -0.5, -0.25, 0.0, 0.5, 1.0)}
# options that change a kind's formula (and so its limit), beside the small examples every kind is built with
VARIANTS = [("alibi", 1, {"causal": True}), ("alibi", 3, {"distance": "manhattan"}), ("alibi", 2, {"heads": 8}),
            ("coord", 3, {"with_r": True}), ("cpb", 2, {"style": "dynamic", "log_distance": True}),
            ("fire", 1, {"causal": True}), ("tape", 1, {"length": 16, "temperature": 0.5}),
            ("transformer-xl", 1, {"clamp_len": 8}), ("rope-learned", 2, {"custom_freqs": [2.0, 0.5], "learned_freq": False}),
            ("point-transformer", 3, {"offset": "j-i", "hidden": 8}), ("relative-proj", 1, {"max_dist": 4}),
            ("coupling", 1, {"convention": "up"})]
CASES = [(kind, dims, {}) for kind, dims in KIND_DIMS] + [v for v in VARIANTS if v[0] in ndpe.available()]
IDS = [f"{kind}-{dims}d" + "".join(f"-{k}={v}" for k, v in opts.items()) for kind, dims, opts in CASES]


def positions(dims: int, magnitude: float, pattern: str) -> torch.Tensor:
    """Six tokens' coordinates ``(6, dims)``: ``magnitude`` times the pattern's fractions (axis 1 reversed)."""
    p = (torch.tensor(PATTERNS[pattern], dtype=torch.float64)[:, None] * magnitude).repeat(1, dims)
    if dims > 1:
        p[:, 1] = p[:, 1].flip(0)
    return p.float()


def field_tensors(out: ndpe.PosOut, pe: ndpe.Encoding, t: int = 6) -> dict[str, torch.Tensor]:
    """Every float tensor of ``out`` for ``t`` tokens by name, the content-dependent terms evaluated on random q, k
    and tokens."""
    named = {"add": out.add, "cat": out.cat, "bias": out.bias, "prob_bias": out.prob_bias, "basis": out.basis}
    for name in ("rot", "rot_k", "frame"):
        pair = getattr(out, name)
        if pair is not None:
            named[f"{name}[0]"], named[f"{name}[1]"] = pair
    g = torch.Generator().manual_seed(0)
    if out.logits is not None:
        q, k = torch.randn(2, 1, pe.heads, t, pe.head_dim, generator=g)
        named["logits"] = out.logits(q, k, torch.randn(1, t, pe.dim, generator=g))
    if out.tokens is not None:
        named["tokens"] = out.tokens(torch.randn(1, t, pe.dim - pe.cat_dim, generator=g))
    return {k: v for k, v in named.items() if v is not None}


def finite_or_refused(pe: ndpe.Encoding, p: torch.Tensor, dtype: torch.dtype) -> str | None:
    """Call ``pe`` on positions ``p``: the refusal's message (one line), or None once every field is checked finite."""
    try:
        out = pe(positions=p, dtype=dtype)
    except ValueError as err:
        assert "\n" not in str(err).strip(), f"refusal is not one line: {err}"
        return str(err)
    for name, t in field_tensors(out, pe).items():
        assert torch.isfinite(t).all(), f"{name} is not finite for positions up to {p.abs().max():g} in {dtype}"
    return None


@pytest.mark.parametrize("kind,dims,options", CASES, ids=IDS)
def test_every_output_is_finite_or_refused(kind, dims, options):
    pe = build(kind, dims, **options).eval()
    for bad in (float("inf"), float("nan")):
        p = positions(dims, 1.0, "from-zero")
        p[-1, 0] = bad
        with pytest.raises(ValueError, match="NaN or inf; expected finite coordinates"):
            pe(positions=p)
    for dtype in DTYPES:
        for magnitude in MAGNITUDES:
            for pattern in PATTERNS:
                finite_or_refused(pe, positions(dims, magnitude, pattern), dtype)


@pytest.mark.parametrize("kind,dims,options", CASES, ids=IDS)
def test_position_limits_are_where_outputs_stay_finite(kind, dims, options):
    """Just inside a kind's limit every output is finite (the limit is sound); just past it, the call is refused with
    the limit's reason."""
    pe = build(kind, dims, **options).eval()
    for dtype in DTYPES:
        limit = pe.position_limit(dtype)
        if limit is None:
            continue
        for pattern in PATTERNS:
            inside = positions(dims, limit[0] * (1 - 1e-3), pattern)
            refusal = finite_or_refused(pe, inside, dtype)
            assert refusal is None or limit[1] not in refusal, refusal  # refused for another reason only
            if limit[0] * 1.001 < torch.finfo(torch.float32).max:
                with pytest.raises(ValueError, match="past"):
                    pe(positions=positions(dims, limit[0] * 1.001, "signed"), dtype=dtype)


@pytest.mark.parametrize("kind,dims", KIND_DIMS, ids=[f"{k}-{d}d" for k, d in KIND_DIMS])
def test_a_grid_call_reads_no_limit(kind, dims, monkeypatch):
    """A default grid's coordinates are known from its shape: its call never asks for the limit (which may read a
    parameter, a host sync on an accelerator), nor does decoding."""
    pe = build(kind, dims).eval()

    def refuse(self, dtype=torch.float32):
        raise AssertionError("position_limit called on a grid call")

    monkeypatch.setattr(type(pe), "position_limit", refuse)
    pe((6,) * dims, dtype=torch.float16)  # 6: the small examples' table size (learned resamples others)
    if dims == 1:
        try:
            pe((2,), past=3, dtype=torch.float16)
        except ValueError:
            pass  # a kind that cannot decode (or not with these options) refuses it, for reasons of its own


# -- every other tensor a kind reads: cameras (gta, prope) and slopes (great-circle), at every magnitude and dtype
CAMERA_VALUES = (0.0, 1e-45, 1e-3, 1.0, 1e3, 7e4, 1e10, 1e30, 3e38, float("inf"), float("nan"), -1e4)
CAMERA_ENTRIES = {"translation": ("extrinsics", 0, 3), "fx": ("intrinsics", 0, 0), "fy": ("intrinsics", 1, 1),
                  "cx": ("intrinsics", 0, 2), "cy": ("intrinsics", 1, 2)}


def cameras(n: int, entry: str, value: float) -> dict[str, torch.Tensor]:
    """Identity extrinsics and a 64 x 64 image's intrinsics (fx = fy = 64, c = (32, 32)) for ``n`` tokens, one entry
    set to ``value``."""
    e = torch.eye(4).repeat(n, 1, 1)
    k = torch.tensor([[64.0, 0.0, 32.0], [0.0, 64.0, 32.0], [0.0, 0.0, 1.0]]).repeat(n, 1, 1)
    name, i, j = CAMERA_ENTRIES[entry]
    (e if name == "extrinsics" else k)[-1, i, j] = value
    return {"extrinsics": e, "intrinsics": k}


def blocks(t: torch.Tensor) -> torch.Tensor:
    """A ``frame`` tensor ``(..., N, 16 n)`` as its ``(..., N, n, 4, 4)`` blocks, the identity added back."""
    return t.double().unflatten(-1, (-1, 4, 4)) + torch.eye(4, dtype=torch.float64)


@pytest.mark.parametrize("kind", ["gta", "prope"])
def test_camera_inputs_are_finite_or_refused(kind):
    """Any translation or intrinsic: refused in one line, or every frame entry finite in the output dtype; and in
    float32 each token's ``D D^-1`` within 1e-2 of the identity (intrinsics too ill-conditioned for that are
    refused)."""
    pe = ndpe.make(dims=3, kind=kind, dim=32, heads=2, **({"image_size": 64} if kind == "prope" else {}))
    entries = CAMERA_ENTRIES if kind == "prope" else {"translation": CAMERA_ENTRIES["translation"]}
    for dtype in DTYPES:
        for entry in entries:
            for value in CAMERA_VALUES:
                cams = cameras(8, entry, value)
                if kind == "gta":
                    cams.pop("intrinsics")
                try:
                    out = pe((2, 2, 2), dtype=dtype, **cams)
                except ValueError as err:
                    assert "\n" not in str(err).strip(), err
                    continue
                d, d_inv = out.frame
                assert torch.isfinite(d).all() and torch.isfinite(d_inv).all(), f"{entry}={value:g} in {dtype}"
                if dtype == torch.float32 and entry != "translation":
                    eye = torch.eye(4, dtype=torch.float64)
                    assert (blocks(d) @ blocks(d_inv) - eye).abs().max() < 1e-2, f"{entry}={value:g}: D D^-1 != I"


@pytest.mark.parametrize("unit", ["degree", "radian", "km"])
def test_great_circle_slopes_are_finite_or_refused(unit):
    """Any finite slope, either sign, in every output dtype: the bias over the whole sphere is finite, or the call is
    refused in one line (the slope's limit is the dtype's range over the longest distance)."""
    grid = (6, 12)  # cell centres 15 degrees apart in latitude: the farthest pair 165 degrees apart
    for slope in (1e-3, 1.0, 3.0, 300.0, 1e4, 1e30, 1e36):
        for sign in (1.0, -1.0):
            pe = ndpe.make(dims=2, kind="great-circle", dim=8, heads=2, unit=unit, slopes=[sign * slope, 0.5])
            for dtype in DTYPES:
                try:
                    bias = pe(grid, dtype=dtype).bias
                except ValueError as err:
                    assert "\n" not in str(err).strip() and "slopes" in str(err), err
                    continue
                assert torch.isfinite(bias).all(), f"slope {sign * slope:g} per {unit} in {dtype}"
