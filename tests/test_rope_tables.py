"""RoPE's frequency schemes, scaling types and channel layouts are tables: a new one is one registered function, made from here
alone, and works through ``ndpe.make(kind="rope")`` with its options as keywords; bad names get one line naming
the valid ones."""
from __future__ import annotations

import inspect
import math

import pytest
import torch

import ndpe
from ndpe.frequencies import FREQUENCIES, frequency_scheme
from ndpe.rope_layouts import LAYOUTS, Channels, channel_layout
from ndpe.scaling import SCALINGS, scaling_type


@pytest.fixture
def geometric():
    """A frequency scheme of this file: ``f_j = fastest * ratio ** j`` (theta unused), ``ratio`` required."""
    @frequency_scheme("geometric", theta=False, summary="a geometric series fastest * ratio ** j: it takes no theta")
    def geometric_freqs(dim, theta, *, ratio, fastest=1.0, device=None):
        return fastest * ratio ** torch.arange(dim // 2, device=device, dtype=torch.float64)

    yield geometric_freqs
    FREQUENCIES.unregister("geometric")


@pytest.fixture
def keep_fast():
    """A scaling type of this file: position interpolation of all but the ``keep`` fastest pairs of each axis; beyond
    the trained length (``at_length``) every pair is interpolated."""
    def at_length(freq, length, dim, theta, scale, train_length, **options):
        return torch.where(length > train_length, freq.new_tensor(naive_freqs(dim, theta)) / scale, freq)

    @scaling_type("keep-fast", at_length=at_length)
    def keep_fast_scaling(dim, theta, scale, train_length, *, keep=1, device=None):
        freq = torch.tensor(naive_freqs(dim, theta), dtype=torch.float64, device=device)
        return torch.where(torch.arange(dim // 2, device=device) < keep, freq, freq / scale), 1.0

    yield keep_fast_scaling
    SCALINGS.unregister("keep-fast")


def naive_freqs(d, theta):
    return [theta ** (-2 * j / d) for j in range(d // 2)]


def test_a_registered_scheme_works_through_make(geometric):
    assert "ratio" in ndpe.options("rope") and ndpe.options("rope")["fastest"] == 1.0
    pe = ndpe.make(dims=2, kind="rope", dim=32, heads=2, freqs="geometric", ratio=0.5, fastest=2.0)
    naive = torch.tensor([2.0 * 0.5 ** j for j in range(4)], dtype=torch.float64)  # axis_dims (8, 8): 4 pairs each
    assert torch.equal(pe.inv_freq, torch.cat([naive, naive]))
    cos, sin = pe((3, 5)).rot  # token (row 2, col 4): angles 2 * f (axis 0) and 4 * f (axis 1)
    torch.testing.assert_close(cos[0, 14], torch.cat([(2 * naive).cos(), (4 * naive).cos()]).float())
    torch.testing.assert_close(sin[0, 14], torch.cat([(2 * naive).sin(), (4 * naive).sin()]).float())
    by_option = ndpe.make(dims=2, kind="rope", dim=32, heads=2, ratio=0.5, fastest=2.0)  # its option picks it
    assert by_option.freq_scheme == "geometric" and torch.equal(by_option.inv_freq, pe.inv_freq)
    assert "ratio=0.5" in repr(pe)


def test_a_registered_scheme_keeps_the_tables_rules(geometric):
    for opts, match in [(dict(freqs="geometric"), "freqs='geometric' needs ratio="),
                        (dict(ratio=0.5, theta=100.0), "takes no theta, got theta=100.0"),
                        (dict(ratio=0.5, scaling="linear", scale=2.0), "got scaling='linear'"),
                        (dict(ratio=0.5, max_res=16.0), "options of 2 frequency schemes"),
                        (dict(freqs="theta", ratio=0.5), "ratio is used by freqs='geometric' only")]:
        with pytest.raises(ValueError, match=match) as err:
            ndpe.make(dims=1, kind="rope", dim=16, **opts)
        assert "\n" not in str(err.value)


def test_a_registered_scaling_type_works_through_make(keep_fast):
    assert ndpe.options("rope")["keep"] == 1
    pe = ndpe.make(dims=2, kind="rope", dim=32, heads=2, scaling="keep-fast", scale=(2.0, 4.0), train_shape=(4, 6),
                   keep=2)
    f = naive_freqs(8, 1e4)
    naive = [*f[:2], *(x / 2.0 for x in f[2:]), *f[:2], *(x / 4.0 for x in f[2:])]
    assert torch.equal(pe.inv_freq, torch.tensor(naive, dtype=torch.float64))
    assert pe.rope_scaling == ndpe.RopeScaling("keep-fast", scale=(2.0, 4.0), train_shape=(4, 6), keep=2)
    assert pe.rope_scaling.keep == 2 and "keep=2" in repr(pe)
    within, beyond = pe.axis_inv_freqs(pe.coords((4, 6))), pe.axis_inv_freqs(pe.coords((5, 6)))
    assert torch.equal(torch.cat(within), pe.inv_freq)  # at_length: within the trained length, the static ones
    assert torch.equal(beyond[0], torch.tensor([x / 2.0 for x in f], dtype=torch.float64))  # axis 0 past 4 rows
    assert torch.equal(beyond[1], pe.inv_freq[4:])
    angle = torch.atan2(pe((2, 1)).rot[1][0, 1, :4], pe((2, 1)).rot[0][0, 1, :4])  # token (1, 0): the frequencies
    torch.testing.assert_close(angle, torch.tensor(naive[:4]).float())
    text = ndpe.make(dims=1, kind="rope", dim=16, scaling="keep-fast", scale=2.0, train_shape=4)
    with pytest.raises(ValueError, match=r"needs a static scaling \(linear, ntk, yarn, llama3\)"):
        text((1,), past=2)  # it picks frequencies by the length: no KV cache


def test_a_registered_scaling_type_keeps_the_tables_rules(keep_fast):
    for make, err, match in [
        (lambda: ndpe.RopeScaling("keep-fast", scale=2.0), ValueError, "needs train_shape="),
        (lambda: ndpe.RopeScaling("keep-fast", scale=2.0, train_shape=8, beta_fast=8.0), ValueError,
         "beta_fast is used by scaling='yarn' only, not by scaling='keep-fast'"),
        (lambda: ndpe.make(dims=1, kind="rope", dim=16, scaling="yarn", scale=2.0, train_shape=8, keep=3), ValueError,
         "keep is used by scaling='keep-fast' only, not by scaling='yarn'"),
        (lambda: ndpe.make(dims=1, kind="rope", dim=16, keep=3), ValueError, "not by scaling=None"),
    ]:
        with pytest.raises(err, match=match) as info:
            make()
        assert "\n" not in str(info.value)


@pytest.mark.parametrize("make,err,names", [
    (lambda: ndpe.make(dims=1, kind="rope", dim=16, freqs="nope"), ValueError, ["'theta'", "'pixel'", "'periods'"]),
    (lambda: ndpe.make(dims=1, kind="rope", dim=16, scaling="nope", scale=2.0), ValueError, ["'linear'", "'longrope'"]),
    (lambda: ndpe.make(dims=1, kind="rope", dim=16, bta_fast=8.0), TypeError, ["'beta_fast'", "'max_res'"]),
    (lambda: ndpe.registry.kind_class("rope")(dims=1, dim=16, bta_fast=8.0), TypeError, ["'beta_fast'", "'freqs'"]),
    (lambda: ndpe.make(dims=1, kind="rope", dim=16).replace(bta_fast=8.0), TypeError, ["'beta_fast'"]),
    (lambda: ndpe.RopeScaling("yarn", scale=2.0, train_shape=8, bta_fast=8.0), TypeError, ["'beta_fast'", "'keep'"]
     if "keep-fast" in SCALINGS else ["'beta_fast'", "'long_factor'"]),
    (lambda: ndpe.scaling.scaled_inv_freq(8, 1e4, "longrope", 2.0, 8, factors=[1.0] * 4), TypeError,
     ["'short_factor'", "'long_factor'", "'factors'"]),  # the former spelling of LongRoPE's factors
    (lambda: ndpe.RopeScaling("ntk", scale=2.0).for_axes((8,)).axis_inv_freq(0, 8, 1e4), TypeError, ["(8,)"]),
])
def test_a_wrong_name_gets_one_line_naming_the_valid_ones(make, err, names):
    with pytest.raises(err) as info:
        make()
    message = str(info.value)
    assert "\n" not in message and all(n in message for n in names), message


def test_registration_rules(geometric, keep_fast):
    with pytest.raises(ValueError, match="already registered"):
        frequency_scheme("geometric")(geometric)
    with pytest.raises(ValueError, match="'beta_fast' .* defaults to 8.0, but other entries default it to 32.0"):
        scaling_type("bad")(lambda dim, theta, scale, train_length, *, beta_fast=8.0, device=None: None)
    assert "bad" not in SCALINGS


def test_unregistering_takes_the_options_away_again():
    @frequency_scheme("flat")
    def flat(dim, theta, *, level=0.5, device=None):
        return torch.full((dim // 2,), level, dtype=torch.float64, device=device)

    try:
        assert ndpe.make(dims=1, kind="rope", dim=8, level=0.25).inv_freq.tolist() == [0.25] * 4
    finally:
        FREQUENCIES.unregister("flat")
    assert "level" not in ndpe.options("rope")
    with pytest.raises(TypeError, match="unknown option"):
        ndpe.make(dims=1, kind="rope", dim=8, level=0.25)


def test_the_tables_hold_every_builtin_once():
    assert tuple(FREQUENCIES) == ("theta", "pixel", "periods")
    assert tuple(SCALINGS) == ("linear", "ntk", "dynamic-ntk", "yarn", "llama3", "longrope")
    assert SCALINGS["yarn"].options == {"beta_fast": 32.0, "beta_slow": 1.0, "mscale": None, "mscale_all_dim": None,
                                        "attention_factor": None, "truncate": True}
    assert SCALINGS.owners("attention_factor") == ("yarn", "longrope")
    yarn = ndpe.RopeScaling("yarn", scale=4.0, train_shape=64)
    assert yarn.beta_fast == 32.0 and math.isclose(yarn.for_axes((8,)).axis_inv_freq(0, (8,), 1e4)[1], 0.1 * math.log(4) + 1)


# ---- channel layouts (ndpe.rope_layouts.LAYOUTS): rope's switches as entries ------------------------------------------
@pytest.fixture
def rolled():
    """A channel layout of this file: the axial blocks in rolled axis order (``shift`` required: the first axis)."""
    @channel_layout("rolled")
    def rolled_channels(dims, head_dim, axis_dims, *, shift):
        axial = LAYOUTS["axial"].fn(dims, head_dim, axis_dims)
        blocks = [(shift + i) % dims for i in range(dims)]
        starts = [sum(axial.axis_dims[:a]) // 2 for a in range(dims)]
        order = torch.cat([torch.arange(starts[a], starts[a] + axial.axis_dims[a] // 2) for a in blocks])
        return Channels(axial.axis_dims, torch.tensor([a for a in blocks for _ in range(axial.axis_dims[a] // 2)]),
                        order)

    yield rolled_channels
    LAYOUTS.unregister("rolled")


def test_a_registered_layout_works_through_make(rolled):
    assert ndpe.options("rope")["shift"] is None and "channels" in ndpe.options("rope")
    pe = ndpe.make(dims=3, kind="rope", dim=36, axis_dims=(4, 8, 6), shift=1)  # its option picks it
    assert pe.channel_layout == "rolled" and "shift=1" in repr(pe)
    cos = pe((2, 3, 4)).rot[0][0, 23]  # token (1, 2, 3): axis 1's 4 pairs, then axis 2's 3, then axis 0's 2
    naive = [c * 1e4 ** (-2 * j / d) for a, c, d in [(1, 2.0, 8), (2, 3.0, 6), (0, 1.0, 4)] for j in range(d // 2)]
    torch.testing.assert_close(cos, torch.tensor(naive, dtype=torch.float64).cos().float(), rtol=0, atol=0)
    assert torch.equal(pe.inv_freq, ndpe.make(dims=3, kind="rope", dim=36, axis_dims=(4, 8, 6)).inv_freq)


def test_a_registered_layout_keeps_the_tables_rules(rolled):
    for opts, match in [(dict(channels="rolled"), "channels='rolled' needs shift="),
                        (dict(shift=1, grid_indexing="xy"), r"set options of 2 channel layouts \('rolled', 'axial'\)"),
                        (dict(channels="axial", shift=1), "shift is used by channels='rolled' only"),
                        (dict(channels="mrope", grid_indexing="xy", mrope_section=(2, 3, 3)),
                         "grid_indexing is used by channels='axial' only, not by channels='mrope'")]:
        with pytest.raises(ValueError, match=match) as err:
            ndpe.make(dims=3, kind="rope", dim=32, **opts)
        assert "\n" not in str(err.value)


@pytest.mark.parametrize("dims, opts", [
    (3, dict(mrope_section=(4, 6, 6))), (3, dict(mrope_section=(6, 5, 5), mrope_interleaved=True)),
    (2, dict(grid_indexing="xy")), (2, dict(proportion=0.5)), (2, dict(head_axes=(0, None))), (1, {})])
def test_a_layout_picked_by_name_equals_one_picked_by_its_options(dims, opts):
    name = "mrope" if "mrope_section" in opts else "axial"
    by_option = ndpe.make(dims=dims, kind="rope", dim=64, heads=2, **opts)
    by_name = ndpe.make(dims=dims, kind="rope", dim=64, heads=2, channels=name, **opts)
    assert by_option.channel_layout == by_name.channel_layout == name
    grid = (2, 3, 4)[:dims]
    for a, b in zip(by_option(grid).rot, by_name(grid).rot):
        assert torch.equal(a, b)


def test_the_layouts_table_holds_rope_switches_once():
    assert tuple(LAYOUTS) == ("axial", "mrope")
    assert LAYOUTS["axial"].options == {"grid_indexing": "ij", "proportion": 1.0, "head_axes": None}
    assert LAYOUTS["mrope"].options["mrope_interleaved"] is False and LAYOUTS["mrope"].shared_series
    params = inspect.signature(ndpe.registry.kind_class("rope").__init__).parameters
    assert not {"grid_indexing", "proportion", "head_axes", "mrope_section", "beta_fast", "max_res"} & params.keys()
