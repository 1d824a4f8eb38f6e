"""``xpos``: q and k equal rotary-embedding-torch 0.9.1 ``use_xpos=True``, offset-only logits, decoding, errors."""
from __future__ import annotations

import math

import pytest
import torch

import ndpe
from tests.conftest import assert_tells_apart

rotary_embedding_torch = pytest.importorskip("rotary_embedding_torch")

torch.manual_seed(0)


def make(head_dim=16, heads=2, **opts):
    return ndpe.make(dims=1, kind="xpos", dim=head_dim * heads, heads=heads, **opts)


def logits(pe, q, k, **call):
    qr, kr = ndpe.apply_qk(q, k, pe(**call))
    return qr @ kr.mT


@pytest.mark.parametrize("n,head_dim,rot_dim,scale_base,theta", [
    (9, 16, 16, 512, 10000.0),   # the reference's defaults
    (12, 16, 16, 4, 10000.0),    # a small base: scales far from 1
    (11, 24, 16, 8, 100.0),      # partial rotation: channels 16..23 neither rotated nor scaled
    (64, 32, 32, 16, 500.0),
])
def test_q_and_k_equal_rotary_embedding_torch(n, head_dim, rot_dim, scale_base, theta):
    """Pinned at float32 tolerance against the reference run in float64 with our float64 frequencies (its own
    are rounded to float32 when built: at position 63 that moves an angle by ~4e-6 rad); the stock float32
    reference agrees to that rounding (values up to ~30 here, scales up to ~12)."""
    pe = make(head_dim=head_dim, heads=3, rot_dim=rot_dim, scale_base=float(scale_base), theta=theta)

    def ref(**kw):
        return rotary_embedding_torch.RotaryEmbedding(rot_dim, use_xpos=True, xpos_scale_base=scale_base,
                                                      theta=theta, cache_if_possible=False, **kw)

    q, k = torch.randn(2, 3, n, head_dim), torch.randn(2, 3, n, head_dim)
    exact = ref(custom_freqs=pe.inv_freq.clone()).double()
    ref_q, ref_k = (t.float() for t in exact.rotate_queries_and_keys(q.double(), k.double()))
    ref32_q, ref32_k = ref().rotate_queries_and_keys(q, k)
    ours_q, ours_k = ndpe.apply_qk(q, k, pe((n,)))
    wrong_q, wrong_k = ndpe.apply_qk(q, k, make(head_dim=head_dim, heads=3, rot_dim=rot_dim, scale_base=float(scale_base),
                                                theta=10 * theta)((n,)))  # another theta
    assert_tells_apart(ours_q, wrong_q, ref_q, rtol=1.3e-6, atol=1e-5)  # assert_close's float32 tolerances
    assert_tells_apart(ours_k, wrong_k, ref_k, rtol=1.3e-6, atol=1e-5)
    torch.testing.assert_close(ours_q, ref32_q, rtol=1e-5, atol=2e-4)
    torch.testing.assert_close(ours_k, ref32_k, rtol=1e-5, atol=2e-4)
    if rot_dim < head_dim:
        assert torch.equal(ours_q[..., rot_dim:], q[..., rot_dim:])
        assert torch.equal(ours_k[..., rot_dim:], k[..., rot_dim:])


def test_fields_are_the_papers_formula():
    """Written out: zeta_j = (2j + 0.4 d) / (1.4 d), s = zeta ** ((p - center) / base), interleaved pairs."""
    d, base, n = 8, 4.0, 7
    pe = make(head_dim=d, heads=1, scale_base=base)
    out = pe((n,))
    assert out.pairing == "interleaved"
    p = torch.arange(n, dtype=torch.float64)[:, None]
    j = torch.arange(d // 2, dtype=torch.float64)
    angle = p * 10000.0 ** (-2 * j / d)
    s = ((2 * j + 0.4 * d) / (1.4 * d)) ** ((p - n // 2) / base)
    for got, want in zip(out.rot + out.rot_k, (angle.cos() * s, angle.sin() * s, angle.cos() / s, angle.sin() / s)):
        torch.testing.assert_close(got[0], want.float())


def test_logits_depend_on_offsets_only():
    """q_i . k_j carries zeta ** ((i - j) / base): shifting every position leaves the logits unchanged."""
    pe = make(scale_base=6.0, center=3)
    n = 10
    q, k = torch.randn(1, 2, n, 16), torch.randn(1, 2, n, 16)
    coords = pe.coords((n,))
    base = logits(pe, q, k, positions=coords)
    for shift in (1.0, 7.0, 25.5):
        torch.testing.assert_close(logits(pe, q, k, positions=coords + shift), base, rtol=1e-4, atol=1e-4)
    # the per-token fields themselves do move with the shift (a fixed center: absolute positions)
    assert not torch.allclose(pe(positions=coords + 7.0).rot[0], pe(positions=coords).rot[0])


def test_center_cancels_in_the_logits():
    """center=None (the reference) and a fixed center give different q and k but equal logits."""
    n = 9
    q, k = torch.randn(1, 2, n, 16), torch.randn(1, 2, n, 16)
    auto, fixed = make(scale_base=5.0), make(scale_base=5.0, center=0)
    assert not torch.allclose(auto((n,)).rot[0], fixed((n,)).rot[0])
    torch.testing.assert_close(logits(auto, q, k, grid_shape=(n,)), logits(fixed, q, k, grid_shape=(n,)),
                               rtol=1e-4, atol=1e-4)


def test_logits_decay_with_distance():
    """The point of xPos: the factor s_q(i) / s_k(j) = zeta ** ((i - j) / base) shrinks as the key recedes."""
    pe = make(head_dim=8, heads=1, scale_base=4.0, center=0)
    out = pe((6,))
    s_q = out.rot[0].square() + out.rot[1].square()  # s ** 2 per token and frequency
    s_k = out.rot_k[0].square() + out.rot_k[1].square()  # s ** -2
    ratio = (s_q[0, -1] * s_k[0, :]).sqrt()  # s(5) / s(j): zeta ** ((5 - j) / base), j = 0..5
    assert (ratio[1:] > ratio[:-1]).all() and torch.allclose(ratio[-1], torch.ones(4))
    assert (ratio[:-1] < 1).all()


@pytest.mark.parametrize("past,n", [(5, 1), (3, 4), (7, 2)])
def test_decoding_rows_equal_the_full_sequence(past, n):
    pe = make(scale_base=6.0, center=4).eval()
    full = pe((past + n,), num_prefix=1)
    step = pe((n,), past=past, num_prefix=1)
    for got, want in zip(step.rot + step.rot_k, full.rot + full.rot_k):
        assert got.shape[-2] == n
        torch.testing.assert_close(got, want[..., 1 + past:, :])
    # the new queries' logits against the cached keys equal the full sequence's rows
    q, k = torch.randn(1, 2, 1 + past + n, 16), torch.randn(1, 2, 1 + past + n, 16)
    full_q, full_k = ndpe.apply_qk(q, k, full)
    new_q, new_k = ndpe.apply_qk(q[..., -n:, :], k[..., -n:, :], step)
    torch.testing.assert_close(new_k, full_k[..., -n:, :])
    cache = torch.cat([full_k[..., :-n, :], new_k], dim=-2)
    torch.testing.assert_close(new_q @ cache.mT, (full_q @ full_k.mT)[..., -n:, :])


def test_decoding_needs_a_fixed_center():
    with pytest.raises(ValueError, match="fixed center.*center=<int>"):
        make()((1,), past=4)
    make(center=0)((1,), past=4)  # fine


def test_attention_with_xpos_is_translation_invariant():
    """ndpe.Attention applies rot to q and rot_k to k: same output for a shifted sequence."""
    pe = make(scale_base=5.0, center=2)
    attn = ndpe.Attention(pe.dim, heads=pe.heads, causal=True)
    x = torch.randn(2, 8, pe.dim)
    coords = pe.coords((8,))
    torch.testing.assert_close(attn(x, pe(positions=coords + 9.0)), attn(x, pe(positions=coords)), rtol=1e-4, atol=1e-4)


def test_keys_scaled_inversely():
    out = make(scale_base=3.0)((7,))
    s2_q = out.rot[0].square() + out.rot[1].square()
    s2_k = out.rot_k[0].square() + out.rot_k[1].square()
    torch.testing.assert_close(s2_q * s2_k, torch.ones_like(s2_q))
    assert not torch.allclose(s2_q, torch.ones_like(s2_q))


@pytest.mark.parametrize("opts,error,match", [
    (dict(scale_base=0.0), ValueError, "scale_base must be > 0"),
    (dict(scale_base=-1.0), ValueError, "scale_base"),
    (dict(scale_base=math.inf), ValueError, "scale_base"),
    (dict(scale_base=math.nan), ValueError, "scale_base"),
    (dict(scale_base="512"), TypeError, "scale_base must be a number"),
    (dict(scale_base=True), TypeError, "scale_base must be a number"),
    (dict(center=-1), ValueError, "center must be an int >= 0"),
    (dict(center=2.0), TypeError, "center must be an int >= 0"),
    (dict(center=True), TypeError, "center"),
    (dict(rot_dim=7), ValueError, "rot_dim must be even"),
    (dict(rot_dim=18), ValueError, "rot_dim must be even and <= head_dim=16"),
    (dict(rot_dim=0), ValueError, "rot_dim"),
    (dict(theta=1.0), ValueError, "theta must be > 1"),
    (dict(pairing="rows"), ValueError, "pairing must be one of"),
])
def test_bad_options(opts, error, match):
    with pytest.raises(error, match=match):
        make(**opts)


def test_bad_shapes():
    with pytest.raises(ValueError, match="supports dims"):
        ndpe.make(dims=2, kind="xpos", dim=32, heads=2)
    with pytest.raises(ValueError, match="even head_dim"):
        ndpe.make(dims=1, kind="xpos", dim=30, heads=2)
    pe = make()
    q = torch.randn(1, 2, 5, 16)
    with pytest.raises(ValueError, match="k has 4 tokens"):
        ndpe.apply_qk(q, q[..., :4, :], pe((5,)))


def test_repr_and_dtype():
    pe = make(scale_base=64.0, center=0)
    assert "scale_base=64.0" in repr(pe) and "center=0" in repr(pe)
    out = pe((5,), dtype=torch.bfloat16)
    assert out.rot[0].dtype == out.rot_k[0].dtype == torch.bfloat16
    pe.half()  # the float64 tables stay float64
    assert pe.inv_freq.dtype == pe.zeta.dtype == torch.float64


@pytest.mark.parametrize("scaling", [ndpe.RopeScaling("linear", scale=2.0), ndpe.RopeScaling("ntk", scale=4.0),
                                     ndpe.RopeScaling("yarn", scale=4.0, train_shape=16)])
def test_rope_scaling_scales_the_rotation_as_rope(scaling):
    """The same RopeScaling gives xpos rope's frequencies and cos/sin factor: q.k's rotation part equals rope's."""
    x = ndpe.make(dims=1, kind="xpos", dim=32, heads=2, center=0, scaling=scaling)
    r = ndpe.make(dims=1, kind="rope", dim=32, heads=2, scaling=scaling)
    torch.testing.assert_close(x.inv_freq, r.inv_freq, rtol=0, atol=0)
    xq, rq = x((40,)), r((40,))
    torch.testing.assert_close(xq.rot[0] * xq.rot_k[0], rq.rot[0] ** 2)  # decay cancels: cos^2 times the factor^2
    plain = ndpe.make(dims=1, kind="xpos", dim=32, heads=2, center=0)
    assert not torch.allclose(plain((40,)).rot[0], xq.rot[0])
    assert x.replace(center=1).rope_scaling == x.rope_scaling


def test_rope_scaling_of_xpos_is_static():
    with pytest.raises(ValueError, match="xpos takes a static scaling"):
        ndpe.make(dims=1, kind="xpos", dim=32, scaling="dynamic-ntk", scale=2.0, train_shape=16)
    with pytest.raises(ValueError, match="needs train_shape"):
        ndpe.make(dims=1, kind="xpos", dim=32, scaling="yarn", scale=2.0)


def test_meta_device_gives_shapes():
    """On the meta device (shapes only, e.g. building a large model before loading it) xpos has no values to check:
    it returns the shapes it returns on the CPU."""
    pe = ndpe.make(dims=1, kind="xpos", dim=32, heads=2)
    cpu = pe((5,), num_prefix=1)
    meta = pe.to("meta")((5,), num_prefix=1)
    for a, b in zip(cpu.rot + cpu.rot_k, meta.rot + meta.rot_k):
        assert b.device.type == "meta" and b.shape == a.shape and b.dtype == a.dtype
