"""``apply_rotary`` / ``apply_qk`` against a naive per-pair loop, for every fast path they take."""
from __future__ import annotations

import pytest
import torch
from einops import rearrange

import ndpe
from ndpe.functional import apply_rotary, apply_rotary_many, rotate_reference


def naive_rotary(x, cos, sin, pairing):
    """Rotate each pair (a, b) by its angle, one frequency at a time: (a cos - b sin, b cos + a sin)."""
    half = cos.shape[-1]
    cos, sin = cos.double(), sin.double()
    shape = torch.broadcast_shapes(x.shape[:-1], cos.shape[:-1]) + x.shape[-1:]
    out = x.double().expand(shape).clone()
    for i in range(half):
        a, b = (i, i + half) if pairing == "half" else (2 * i, 2 * i + 1)
        xa, xb = x[..., a].double(), x[..., b].double()
        out[..., a] = xa * cos[..., i] - xb * sin[..., i]
        out[..., b] = xb * cos[..., i] + xa * sin[..., i]
    return out


def angles(*shape, seed=0):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(*shape, generator=g) * 20 - 10
    return a.cos(), a.sin()


B, H, N = 2, 3, 5
# (x shape, cos/sin shape): full and partial rotation, cos/sin (N, half), (H, N, half), (B, 1, N, half)
CASES = [
    ((B, H, N, 8), (N, 4)),
    ((B, H, N, 10), (N, 3)),          # 6 of 10 channels rotated
    ((B, H, N, 8), (H, N, 4)),
    ((B, H, N, 8), (B, 1, N, 2)),     # 4 of 8 channels, per-sample angles
    ((N, 6), (N, 3)),                 # no batch / heads
    ((B, H, N, 7), (N, 3)),           # odd leftover channel (odd strides: no complex view)
]


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("x_shape,cs_shape", CASES)
def test_matches_naive_loop(pairing, x_shape, cs_shape):
    x = torch.randn(x_shape)
    cos, sin = angles(*cs_shape)
    out = apply_rotary(x, cos, sin, pairing)
    assert out.shape == x.shape and out.dtype == x.dtype
    torch.testing.assert_close(out.double(), naive_rotary(x, cos, sin, pairing), atol=1e-5, rtol=1e-5)
    rot = 2 * cs_shape[-1]
    assert torch.equal(out[..., rot:], x[..., rot:])  # channels past rot_dim untouched


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_qkv_split_views(pairing):
    """q, k as non-contiguous views of a fused qkv projection (the one-pass stacked path) and of different buffers."""
    qkv = torch.randn(B, N, 3 * H * 8)
    q, k, _ = rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=H)
    assert not q.is_contiguous()
    cos, sin = angles(N, 3)
    pos = ndpe.PosOut(rot=(cos, sin), pairing=pairing)
    q_out, k_out = ndpe.apply_qk(q, k, pos)
    torch.testing.assert_close(q_out.double(), naive_rotary(q, cos, sin, pairing), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(k_out.double(), naive_rotary(k, cos, sin, pairing), atol=1e-5, rtol=1e-5)
    k_other = k.contiguous()  # different storage: rotated separately
    torch.testing.assert_close(ndpe.apply_qk(q, k_other, pos)[1], k_out)
    k_first, q_second = ndpe.apply_qk(k, q, pos)  # k before q in memory: rotated separately
    torch.testing.assert_close(k_first, k_out)
    torch.testing.assert_close(q_second, q_out)
    q_same, k_same = ndpe.apply_qk(q, q, pos)  # one tensor passed twice
    torch.testing.assert_close(q_same, q_out)
    torch.testing.assert_close(k_same, q_out)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_low_precision(pairing, dtype):
    x = torch.randn(B, H, N, 8)
    cos, sin = angles(N, 3)
    out = apply_rotary(x.to(dtype), cos, sin, pairing)  # float32 cos/sin are cast to x's dtype
    assert out.dtype == dtype
    ref = naive_rotary(x.to(dtype), cos.to(dtype), sin.to(dtype), pairing)
    torch.testing.assert_close(out.double(), ref, atol=2e-2, rtol=2e-2)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("x_shape,cs_shape", [CASES[1], CASES[3], ((1, 2, 3, 4), (2, 3, 2))])
def test_gradcheck(pairing, x_shape, cs_shape):
    """Hand-written backward (inverse rotation; sums for cos/sin) against finite differences, float64."""
    x = torch.randn(x_shape, dtype=torch.float64, requires_grad=True)
    cos, sin = (t.double().requires_grad_() for t in angles(*cs_shape))
    assert torch.autograd.gradcheck(lambda x, c, s: apply_rotary(x, c, s, pairing), (x, cos, sin))


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_apply_qk_grads_match_reference(pairing):
    """q and k through one autograd node, from a fused qkv, give the gradients of the plain formula."""
    qkv = torch.randn(B, N, 3 * H * 8, dtype=torch.float64, requires_grad=True)
    a = torch.randn(N, 3, dtype=torch.float64, requires_grad=True)

    def loss(rotate):
        q, k, v = rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=H)
        q, k = rotate(q, k, a.cos(), a.sin())
        return (q * k).sum() + (q * v).sum()

    fast = torch.autograd.grad(loss(lambda q, k, c, s: ndpe.apply_qk(q, k, ndpe.PosOut(rot=(c, s), pairing=pairing))), (qkv, a))
    ref = torch.autograd.grad(loss(lambda q, k, c, s: [rotate_reference(t, c, s, pairing) for t in (q, k)]), (qkv, a))
    for f, r in zip(fast, ref):
        torch.testing.assert_close(f, r)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_learned_tables_with_bfloat16_qk_grads(pairing):
    """bfloat16 q and k that need gradients, rotated by float32 tables that need theirs (a learned rotation under
    autocast): the gradients of the plain formula in float32, within bfloat16's precision (interleaved pairs once
    raised: q's and k's float32 gradient stack met bfloat16 tables in a complex product)."""
    torch.manual_seed(0)
    qkv = torch.randn(B, N, 3 * H * 8, dtype=torch.bfloat16, requires_grad=True)
    a = torch.randn(N, 3, requires_grad=True)

    def loss(rotate):
        q, k, v = rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=H)
        q, k = rotate(q, k, a.cos(), a.sin())
        return (q.float() * k.float()).sum() + (q.float() * v.float()).sum()

    fast = torch.autograd.grad(loss(lambda q, k, c, s: ndpe.apply_qk(q, k, ndpe.PosOut(rot=(c, s), pairing=pairing))),
                               (qkv, a))
    ref = torch.autograd.grad(loss(lambda q, k, c, s: [rotate_reference(t.float(), c, s, pairing) for t in (q, k)]),
                              (qkv, a))
    for f, r in zip(fast, ref):
        torch.testing.assert_close(f.float(), r.float(), rtol=0, atol=2e-2 * r.abs().max().item())


@pytest.mark.parametrize("grad", [False, True])
def test_inputs_untouched_and_outputs_fresh(grad):
    qkv = torch.randn(B, N, 3 * H * 8, requires_grad=grad)
    q, k, _ = rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=H)
    before = qkv.detach().clone()
    cos, sin = angles(N, 4)
    q_out, k_out = ndpe.apply_qk(q, k, ndpe.PosOut(rot=(cos, sin)))
    assert torch.equal(qkv.detach(), before)
    storages = {t.untyped_storage().data_ptr() for t in (qkv, cos, sin)}
    assert q_out.untyped_storage().data_ptr() not in storages and k_out.untyped_storage().data_ptr() not in storages
    with torch.no_grad():
        q_out.mul_(2.0)  # outputs may be modified in place (e.g. scaling) without touching the other
    torch.testing.assert_close(k_out, ndpe.apply_qk(q, k, ndpe.PosOut(rot=(cos, sin)))[1])


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_outputs_modified_in_place_under_autograd(pairing):
    """q and k come out of one pass over the qkv buffer, yet are separate tensors: in-place ops on
    them (``q *= scale``) are allowed with autograd and give the plain formula's gradients."""
    qkv = torch.randn(B, N, 3 * H * 8, dtype=torch.float64, requires_grad=True)
    cos, sin = (t.double() for t in angles(N, 4))

    def grad(rotate):
        q, k, v = rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=H)
        q, k = rotate(q, k)
        q.mul_(0.5)
        k.add_(1.0)
        return torch.autograd.grad(((q * k).sum(-1, keepdim=True) * v).sum(), qkv)[0]

    fast = grad(lambda q, k: ndpe.apply_qk(q, k, ndpe.PosOut(rot=(cos, sin), pairing=pairing)))
    ref = grad(lambda q, k: [rotate_reference(t, cos, sin, pairing) for t in (q, k)])
    torch.testing.assert_close(fast, ref)


def test_pairings_are_one_rotation_up_to_channel_permutation():
    x = torch.randn(B, H, N, 8)
    cos, sin = angles(N, 4)
    perm = torch.tensor([0, 2, 4, 6, 1, 3, 5, 7])  # interleaved channel 2i -> i, 2i+1 -> i + 4
    inter = apply_rotary(x, cos, sin, "interleaved")
    torch.testing.assert_close(apply_rotary(x[..., perm], cos, sin, "half"), inter[..., perm])


def test_apply_rotary_many_mixed_dtypes():
    q, k = torch.randn(1, 2, N, 8), torch.randn(1, 2, N, 8, dtype=torch.float64)
    cos, sin = angles(N, 4)
    q_out, k_out = apply_rotary_many((q, k), cos, sin)
    assert (q_out.dtype, k_out.dtype) == (torch.float32, torch.float64)
    torch.testing.assert_close(k_out, naive_rotary(k, cos, sin, "half"))


def test_bad_pairing():
    with pytest.raises(ValueError, match="pairing"):
        apply_rotary(torch.zeros(1, 4, 8), torch.ones(4, 4), torch.zeros(4, 4), "pairs")


def test_the_rotation_is_differentiable_once_with_or_without_create_graph():
    """The fast backward (grad mode off) skips once_differentiable's wrapper; with create_graph=True the first
    derivative still works and the second is refused in one line, as the wrapper makes it."""
    pos = ndpe.make(dims=1, kind="rope", dim=16, heads=2)((5,))
    q, k = (torch.randn(1, 2, 5, 8, requires_grad=True) for _ in range(2))
    q2, k2 = ndpe.apply_qk(q, k, pos)
    (g,) = torch.autograd.grad((q2 * k2).sum(), q, create_graph=True)
    q3, k3 = ndpe.apply_qk(q, k, pos)
    (plain,) = torch.autograd.grad((q3 * k3).sum(), q)
    assert torch.equal(g.detach(), plain) and g.requires_grad
    with pytest.raises(RuntimeError, match="differentiate twice"):
        g.sum().backward()
