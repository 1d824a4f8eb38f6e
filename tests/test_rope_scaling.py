"""RoPE scaling: PI / NTK / dynamic NTK / YaRN against the paper formulas, hand values, and per-axis behaviour."""
from __future__ import annotations

import dataclasses
import math

import pytest
import torch

import ndpe
from ndpe import scaling as S


def naive_freqs(d, base):
    return [base ** (-2 * j / d) for j in range(d // 2)]


def naive_yarn(d, base, s, L, alpha=1.0, beta=32.0):
    """YaRN as its reference code: a ramp over the pair index between the indices turning beta and alpha times."""
    def index_turning(r):  # solve L / (2 pi base ** (2j / d)) = r for j
        return d * math.log(L / (2 * math.pi * r)) / (2 * math.log(base))

    lo, hi = max(math.floor(index_turning(beta)), 0), min(math.ceil(index_turning(alpha)), d - 1)
    out = []
    for j, f in enumerate(naive_freqs(d, base)):
        ramp = min(max((j - lo) / (hi - lo), 0.0), 1.0)
        out.append(f / s * ramp + f * (1 - ramp))
    return out, 0.1 * math.log(s) + 1


def test_hand_computed_values():
    # NTK: d = 4, base 1e4, s = 4 -> base' = 1e4 * 4 ** 2 = 1.6e5; f_1 = 1.6e5 ** -0.5 = 0.0025
    assert S.ntk_theta(4, 1e4, 4.0) == pytest.approx(1.6e5)
    torch.testing.assert_close(S.scaled_inv_freq(4, 1e4, "ntk", 4.0)[0], torch.tensor([1.0, 0.0025], dtype=torch.float64))
    # PI: s = 2 halves every frequency
    torch.testing.assert_close(S.scaled_inv_freq(4, 1e4, "linear", 2.0)[0], torch.tensor([0.5, 0.005], dtype=torch.float64))
    # dynamic NTK: d = 4, s = 2, length 2L -> base * (2 * 2 - 1) ** 2 = 9 * base
    assert S.dynamic_ntk_theta(4, 1e4, 2.0, 64, 32) == pytest.approx(9e4)
    assert S.dynamic_ntk_theta(4, 1e4, 2.0, 20, 32) == pytest.approx(1e4)  # below L: unchanged
    # YaRN: d = 8, base 1e4, L = 64, s = 4: index turning 32 times = -0.497 -> 0, once = 1.008 -> 2;
    # ramp over j = 0..3 is [0, .5, 1, 1]: f = [1, .5 * .1 / 4 + .5 * .1, .01 / 4, .001 / 4]
    freq, factor = S.scaled_inv_freq(8, 1e4, "yarn", 4.0, 64)
    torch.testing.assert_close(freq, torch.tensor([1.0, 0.0625, 0.0025, 0.00025], dtype=torch.float64))
    assert factor == pytest.approx(0.1 * math.log(4) + 1) == pytest.approx(1.1386294)


@pytest.mark.parametrize("d,base,s,L", [(8, 1e4, 4.0, 64), (32, 1e4, 8.0, 2048), (64, 5e5, 2.0, 4096), (16, 100.0, 3.0, 16)])
def test_yarn_matches_naive_formula(d, base, s, L):
    ref, ref_factor = naive_yarn(d, base, s, L)
    freq, factor = S.scaled_inv_freq(d, base, "yarn", s, L)
    torch.testing.assert_close(freq, torch.tensor(ref, dtype=torch.float64))
    assert factor == pytest.approx(ref_factor)


@pytest.mark.parametrize("d,base,s,L", [(32, 1e4, 8.0, 2048), (64, 1e4, 4.0, 512)])
def test_yarn_regions_of_the_paper(d, base, s, L):
    """Frequencies turning > beta = 32 times over L are kept; < alpha = 1 time are divided by s."""
    freq = S.yarn_inv_freq(d, base, s, L)
    for f0, f in zip(naive_freqs(d, base), freq.tolist()):
        turns = L * f0 / (2 * math.pi)
        if turns > 32:
            assert f == pytest.approx(f0)
        elif turns < 1:
            assert f == pytest.approx(f0 / s)
        else:
            assert f0 / s <= f <= f0


@pytest.mark.parametrize("d,base,s", [(8, 1e4, 2.0), (32, 1e4, 8.0), (64, 5e5, 4.0)])
def test_ntk_matches_naive_formula(d, base, s):
    ref = naive_freqs(d, base * s ** (d / (d - 2)))
    torch.testing.assert_close(S.scaled_inv_freq(d, base, "ntk", s)[0], torch.tensor(ref, dtype=torch.float64))
    # the design of d / (d - 2): the highest frequency is kept, the lowest is interpolated by exactly s
    assert ref[0] == 1.0 and ref[-1] == pytest.approx(naive_freqs(d, base)[-1] / s)


def cos_sin(pe, grid):
    cos, sin = pe(grid).rot
    return cos[0], sin[0]


def test_linear_module_equals_divided_positions():
    kw = dict(dims=2, kind="rope", dim=16, heads=1)
    scaled, plain = ndpe.make(scaling="linear", scale=(2.0, 4.0), **kw), ndpe.make(**kw)
    coords = plain.coords((4, 8)) / torch.tensor([2.0, 4.0])
    for a, b in zip(cos_sin(scaled, (4, 8)), plain(positions=coords).rot):
        torch.testing.assert_close(a, b[0])


def test_scaling_is_per_axis():
    """scale 1 on axis 0 leaves its channels alone; axis 1 channels change."""
    kw = dict(dims=2, kind="rope", dim=16, heads=1)
    plain = cos_sin(ndpe.make(**kw), (5, 6))[0]
    for scaling, extra in (("linear", {}), ("ntk", {}), ("yarn", {"train_shape": (4, 4)})):
        cos = cos_sin(ndpe.make(scaling=scaling, scale=(1.0, 3.0), **extra, **kw), (5, 6))[0]
        torch.testing.assert_close(cos[:, :4], plain[:, :4])
        assert not torch.allclose(cos[:, 5:], plain[:, 5:])


def test_dynamic_ntk_identity_up_to_train_length_then_ntk_of_current_length():
    kw = dict(dims=2, kind="rope", dim=16, heads=1)
    plain = ndpe.make(**kw)
    dyn = ndpe.make(scaling="dynamic-ntk", scale=2.0, train_shape=(8, 6), **kw)
    for grid in ((8, 6), (3, 6), (1, 1)):
        torch.testing.assert_close(cos_sin(dyn, grid)[0], cos_sin(plain, grid)[0])
    # grid (16, 6): axis 0 at 2L -> base * (2 * 2 - 1) ** (8 / 6); axis 1 unchanged
    cos = cos_sin(dyn, (16, 6))[0]
    theta0 = 1e4 * 3.0 ** (8 / 6)
    ref = ndpe.make(theta=(theta0, 1e4), **kw)
    torch.testing.assert_close(cos, cos_sin(ref, (16, 6))[0])
    # explicit positions: the current length is max(position) + 1
    pos = dyn.coords((16, 6))
    torch.testing.assert_close(dyn(positions=pos).rot[0][0], cos)


def test_yarn_module_scales_cos_and_sin_by_attention_factor():
    pe = ndpe.make(dims=2, kind="rope", dim=16, heads=1, scaling="yarn", scale=(4.0, 1.0), train_shape=(8, 8))
    cos, sin = cos_sin(pe, (6, 6))
    magnitude = (cos ** 2 + sin ** 2).sqrt()
    torch.testing.assert_close(magnitude[:, :4], torch.full((36, 4), 0.1 * math.log(4) + 1))
    torch.testing.assert_close(magnitude[:, 4:], torch.ones(36, 4))  # s = 1: factor 1
    ref, _ = naive_yarn(8, 1e4, 4.0, 8)
    angle = torch.atan2(sin[6, :4], cos[6, :4])  # token (1, 0): angle = the frequencies themselves
    torch.testing.assert_close(angle, torch.tensor(ref, dtype=torch.float32))


def test_ntk_module_equals_rescaled_theta():
    pe = ndpe.make(dims=1, kind="rope", dim=32, heads=1, scaling="ntk", scale=4.0)
    ref = ndpe.make(dims=1, kind="rope", dim=32, heads=1, theta=1e4 * 4.0 ** (32 / 30))
    torch.testing.assert_close(cos_sin(pe, (50,))[1], cos_sin(ref, (50,))[1])


def test_scaling_object_equals_the_keyword_options():
    """scaling=RopeScaling(...) and scaling="yarn", scale=... build the same encoding; the object is kept per axis."""
    obj = ndpe.RopeScaling("yarn", scale=(2.0, 4.0), train_shape=8, beta_fast=16.0)
    a = ndpe.make(dims=2, kind="rope", dim=32, heads=2, scaling=obj)
    b = ndpe.make(dims=2, kind="rope", dim=32, heads=2, scaling="yarn", scale=(2.0, 4.0), train_shape=8, beta_fast=16.0)
    assert torch.equal(a.inv_freq, b.inv_freq) and a.attn_factor == b.attn_factor
    assert a.rope_scaling == b.rope_scaling and a.rope_scaling.train_shape == (8.0, 8.0)
    assert (a.scaling, a.scale, a.train_shape) == ("yarn", (2.0, 4.0), (8.0, 8.0))
    assert torch.equal(a.replace(theta=100.0).inv_freq, b.replace(theta=100.0).inv_freq)
    with pytest.raises(dataclasses.FrozenInstanceError):
        obj.scale = 3.0  # type: ignore[misc]


@pytest.mark.parametrize("make_scaling,fragment", [
    (lambda: ndpe.RopeScaling("ntk-by-parts", scale=2.0), "scaling must be None or one of"),
    (lambda: ndpe.RopeScaling("linear"), "needs scale="),
    (lambda: ndpe.RopeScaling("ntk", scale=(1.0, 0.5)), "scale must be >= 1"),
    (lambda: ndpe.RopeScaling("yarn", scale=2.0), "needs train_shape="),
    (lambda: ndpe.RopeScaling("linear", scale=2.0, beta_fast=8.0), "beta_fast is used by scaling='yarn' only"),
    (lambda: ndpe.RopeScaling("longrope", scale=2.0, train_shape=8, short_factor=[1.0]), "needs long_factor"),
    (lambda: ndpe.RopeScaling("yarn", scale=2.0, train_shape=(4, 4, 4)).for_axes((8, 8)), "one per axis"),
    (lambda: ndpe.make(dims=1, kind="rope", dim=8, scaling=ndpe.RopeScaling("ntk", scale=2.0), scale=2.0),
     "pass scale inside it"),
])
def test_scaling_object_validates_once_with_one_line(make_scaling, fragment):
    with pytest.raises(ValueError, match=fragment) as err:
        make_scaling()
    assert "\n" not in str(err.value)


def test_scaling_from_hf_parameters():
    """HF rope_parameters -> RopeScaling: the type renamed, a missing factor from the lengths, dynamic's length."""
    RS = ndpe.RopeScaling
    assert RS.from_hf({"rope_type": "default"}) is None
    assert RS.from_hf({"rope_type": "dynamic", "factor": 2.0}, 4096) == RS("dynamic-ntk", scale=2.0, train_shape=4096)
    yarn = RS.from_hf({"rope_type": "yarn", "original_max_position_embeddings": 1024}, 4096)
    assert (yarn.type, yarn.scale, yarn.train_shape, yarn.beta_fast) == ("yarn", 4.0, 1024.0, 32.0)
    with pytest.raises(ValueError, match=r"rope_parameters\['rope_type'\] 'su' has no ndpe equivalent"):
        RS.from_hf({"rope_type": "su"})
