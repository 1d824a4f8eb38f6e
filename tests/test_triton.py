"""``ndpe.kernels.triton.rotary`` (fused Triton RoPE kernel) against the eager ``ndpe.kernels.eager.rotate``.

The kernel runs on CPU under Triton's interpreter (``TRITON_INTERPRET=1``, set per test with
``monkeypatch``; ``triton._kernel`` decorates the kernel once per value of the flag, so no other
test gets an interpreted kernel). ``test_compiles_for_sm90`` compiles the real CUDA kernel to
PTX/cubin for an H100 target without a GPU, with the same argument specialization as a launch.
"""
from __future__ import annotations

import pytest
import torch
from einops import rearrange

triton = pytest.importorskip("triton")

from ndpe.kernels import triton as T  # noqa: E402
from ndpe.functional import rotate_reference  # noqa: E402
from ndpe.kernels.eager import empty_in_memory_order as _empty_in_memory_order  # noqa: E402
from ndpe.kernels.eager import rotate as _rotate  # noqa: E402


@pytest.fixture(autouse=True)
def interpret(monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "1")


def angles(*shape, seed=0, dtype=torch.float32):
    g = torch.Generator().manual_seed(seed)
    a = torch.rand(*shape, generator=g, dtype=torch.float64) * 20 - 10
    return a.cos().to(dtype), a.sin().to(dtype)


def randn(*shape, seed=1, dtype=torch.float32):
    return torch.randn(*shape, generator=torch.Generator().manual_seed(seed)).to(dtype)


B, H = 2, 3
# (x shape, cos/sin shape); T = product of the grid
CASES = [
    ((B, H, 24, 32), (24, 16)),              # 1D grid, full rotation
    ((B, H, 4 * 6, 64), (24, 30)),           # 2D grid 4x6, rot 60 of 64: 4 pass-through channels
    ((B, H, 2 * 3 * 4, 64), (24, 31)),       # 3D grid 2x3x4, rot 62: 2 pass-through
    ((B, H, 20, 21), (20, 8)),               # 5 pass-through (odd head_dim)
    ((B, H, 12, 17), (12, 8)),               # 1 pass-through
    ((B, H, 40, 16), (H, 40, 8)),            # per-head angles
    ((B, H, 12, 16), (B, 1, 12, 6)),         # per-sample angles, rot 12 of 16
    ((12, 16), (12, 8)),                     # no batch / heads
    ((12, 16), (H, 12, 8)),                  # cos/sin widen x: output (H, 12, 16)
    ((B, 2, H, 12, 16), (12, 8)),            # 5-D x (4 lead axes)
]


@pytest.mark.parametrize("inverse", [False, True])
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("x_shape,cs_shape", CASES)
def test_matches_eager_fp32(x_shape, cs_shape, pairing, inverse):
    x = randn(*x_shape)
    cos, sin = angles(*cs_shape)
    x0, cos0, sin0 = x.clone(), cos.clone(), sin.clone()
    assert T.available(x, cos, sin)
    (out,) = T.rotary((x,), cos, sin, pairing, inverse)
    ref = _rotate(x, cos, sin, pairing, inverse)
    assert out.shape == ref.shape and out.dtype == x.dtype and out.stride() == ref.stride()
    torch.testing.assert_close(out, ref, atol=1e-6, rtol=1e-6)
    rot = 2 * cs_shape[-1]
    assert torch.equal(out[..., rot:], x[..., rot:].expand_as(out[..., rot:]))  # pass-through is exact
    assert torch.equal(x, x0) and torch.equal(cos, cos0) and torch.equal(sin, sin0)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("head_dim,half", [(64, 32), (64, 30)])
def test_qkv_views_one_launch(monkeypatch, pairing, head_dim, half):
    """q, k as strided views of one fused qkv buffer: read in place, one launch, x's memory order out."""
    N = 24
    qkv = randn(B, N, 3 * H * head_dim)
    q, k, _ = rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=H)
    assert not q.is_contiguous()
    cos, sin = angles(N, half)
    qkv0 = qkv.clone()
    launches = []
    launch = T._launch
    monkeypatch.setattr(T, "_launch", lambda x, k, *a: launches.append(k is not None) or launch(x, k, *a))
    for inverse in (False, True):
        oq, ok = T.rotary((q, k), cos, sin, pairing, inverse)
        for o, x in ((oq, q), (ok, k)):
            ref = _rotate(x, cos, sin, pairing, inverse)
            torch.testing.assert_close(o, ref, atol=1e-6, rtol=1e-6)
            assert o.stride() == _empty_in_memory_order(x).stride() == ref.stride()
    assert launches == [True, True]  # q and k together, every call
    assert torch.equal(qkv, qkv0)


def test_launch_grouping(monkeypatch):
    """Tensors are paired only when shape, dtype and strides match; anything else gets its own launch."""
    q = randn(B, H, 12, 16)
    k = randn(B, 12, H, 16, seed=2).transpose(1, 2)  # other strides
    v = randn(B, 12, H, 16, seed=3).transpose(1, 2)  # same strides as k
    h = q.half()
    cos, sin = angles(12, 8)
    launches = []
    launch = T._launch
    monkeypatch.setattr(T, "_launch", lambda x, k, *a: launches.append(k is not None) or launch(x, k, *a))
    outs = T.rotary((q, k, v, h), cos, sin, "half")
    assert launches == [False, True, False]  # q alone; k with v; h alone (other dtype)
    for o, x in zip(outs, (q, k, v, h)):
        torch.testing.assert_close(o, _rotate(x, cos.to(x.dtype), sin.to(x.dtype), "half"), atol=2e-3, rtol=2e-3)


def test_broadcast_by_strides():
    """cos/sin reach the kernel as the caller's tensors with stride-0 broadcast axes (no expanded copy)."""
    x = randn(B, H, 12, 16)
    cos, sin = angles(12, 8)
    outs, args, grid = T._prepare(x, None, cos, sin, "half", False)
    assert args["cos_ptr"] is cos and args["sin_ptr"] is sin
    assert (args["sc0"], args["sc1"], args["sc2"], args["sct"], args["scc"]) == (0, 0, 0, 8, 1)
    assert args["q_ptr"] is x and args["NUM"] == 1
    cos_h, sin_h = angles(H, 12, 8)
    _, args, _ = T._prepare(x, None, cos_h, sin_h, "half", False)
    assert args["cos_ptr"] is cos_h and (args["sc0"], args["sc1"], args["sc2"]) == (0, 0, 96)


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("x_shape,cs_shape", [((B, H, 24, 64), (24, 32)), ((B, H, 24, 64), (24, 30))])
def test_low_precision_accuracy(dtype, pairing, x_shape, cs_shape):
    """Math in float32 on float32 angles, one rounding to x's dtype: within 2 eps max|x| of the float64
    rotation, and at least as accurate as the eager path (which computes in x's dtype)."""
    x = randn(*x_shape, dtype=dtype) * 4
    cos, sin = angles(*cs_shape)
    bound = 2 * torch.finfo(dtype).eps * x.abs().max().double()
    for q_k in ((x,), (x, x.flip(0))):
        for o, xi in zip(T.rotary(q_k, cos, sin, pairing), q_k):
            assert o.dtype == dtype
            ref = rotate_reference(xi.double(), cos.double(), sin.double(), pairing)
            assert (o.double() - ref).abs().max() <= bound
    out = T.rotary((x,), cos, sin, pairing)[0]
    f32 = rotate_reference(x.float(), cos, sin, pairing)  # the kernel's float32 math, before the store
    if dtype == torch.float16:
        assert torch.equal(out, f32.half())  # rounded to nearest, as on the GPU
    else:
        # The interpreter truncates float32 -> bfloat16; the GPU rounds to nearest (cvt.rn, checked in
        # test_compiles_for_sm90). Same float32 math either way.
        assert torch.equal(out, (f32.view(torch.int32) & -65536).view(torch.float32).to(dtype))
    ref = rotate_reference(x.double(), cos.double(), sin.double(), pairing)
    eager = _rotate(x, cos.to(dtype), sin.to(dtype), pairing)
    assert (f32.to(dtype).double() - ref).abs().max() <= (eager.double() - ref).abs().max()
    # angles already in x's dtype (as the eager path casts them): still one rounding of exact math
    cl, sl = cos.to(dtype), sin.to(dtype)
    ref_l = rotate_reference(x.double(), cl.double(), sl.double(), pairing)
    assert (T.rotary((x,), cl, sl, pairing)[0].double() - ref_l).abs().max() <= bound


def test_available(monkeypatch):
    x = randn(B, H, 12, 16)
    cos, sin = angles(12, 8)
    assert T.available(x, cos, sin)
    assert T.available(x.bfloat16(), x.half())
    assert not T.available()
    assert not T.available(x.double())                       # float64: not supported (eager keeps it)
    assert not T.available(x.int())
    assert not T.available(x.transpose(-1, -2))              # channels must have stride 1
    assert not T.available(x.reshape(1, 1, B, H, 12, 16))    # more than 5 dims
    monkeypatch.delenv("TRITON_INTERPRET")
    assert not T.available(x, cos, sin)                      # CPU tensors need the interpreter
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    monkeypatch.setattr(T, "triton", None)
    assert not T.available(x, cos, sin)                      # triton missing


def test_kernel_per_interpret_flag(monkeypatch):
    from triton.runtime.interpreter import InterpretedFunction
    from triton.runtime.jit import JITFunction
    assert isinstance(T._kernel(), InterpretedFunction)
    monkeypatch.delenv("TRITON_INTERPRET")
    assert isinstance(T._kernel(), JITFunction)
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    assert isinstance(T._kernel(), InterpretedFunction)


def test_bad_inputs():
    x = randn(B, H, 12, 16)
    cos, sin = angles(12, 8)
    with pytest.raises(ValueError, match="pairing"):
        T.rotary((x,), cos, sin, "pairs")
    with pytest.raises(ValueError, match="channels"):
        T.rotary((x,), *angles(12, 9), "half")
    with pytest.raises(ValueError, match="stride 1"):
        T.rotary((x.transpose(-1, -2).contiguous().transpose(-1, -2),), cos, sin, "half")
    with pytest.raises(ValueError, match="lead axes"):
        T.rotary((randn(2, 2, 2, 2, 12, 16),), cos, sin, "half")


@pytest.mark.parametrize("dtype,pairing,cs_shape,k", [
    (torch.bfloat16, "half", (24, 32), True),
    (torch.bfloat16, "interleaved", (24, 32), True),
    (torch.float32, "half", (24, 30), False),
    (torch.float16, "interleaved", (H, 24, 31), True),
])
def test_compiles_for_sm90(monkeypatch, tmp_path, dtype, pairing, cs_shape, k):
    """The compiled (non-interpreted) kernel builds for sm_90 with a launch's specialization and options; q/k of a
    qkv buffer with head_dim 64 get 128-bit loads and stores; bfloat16 is stored rounded to nearest; the rotation
    is fused multiply-adds whatever Triton's default (3.10 turns its default fusion off)."""
    monkeypatch.delenv("TRITON_INTERPRET")
    monkeypatch.setenv("TRITON_CACHE_DIR", str(tmp_path))
    try:
        from triton.backends.compiler import GPUTarget
        from triton.compiler import ASTSource, make_backend
        from triton.runtime.jit import create_function_from_signature
        target = GPUTarget("cuda", 90, 32)
        backend = make_backend(target)
    except Exception as e:  # noqa: BLE001 - no CUDA backend in this triton build
        pytest.skip(f"no triton CUDA backend: {e!r}")
    qkv = randn(B, 24, 3 * H * 64, dtype=dtype)
    q, kk, _ = rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=H)
    cos, sin = angles(*cs_shape)
    _, args, _ = T._prepare(q, kk if k else None, cos, sin, pairing, True)
    kernel = T._kernel()
    binder = create_function_from_signature(kernel.signature, kernel.params, backend)
    bound, spec, opts = binder(**args, **T.LAUNCH_OPTIONS)
    options, signature, constexprs, attrs = kernel._pack_args(backend, dict(T.LAUNCH_OPTIONS), bound, spec, opts)
    compiled = triton.compile(ASTSource(kernel, signature, constexprs, attrs), target=target,
                              options=options.__dict__)
    ptx = compiled.asm["ptx"]
    if cs_shape[-1] == 32:
        assert "ld.global.v4" in ptx and "st.global.v4" in ptx
    if dtype == torch.bfloat16:
        assert "cvt.rn.bf16x2.f32" in ptx
    assert ("fma.rn.f64" if dtype == torch.float32 else "fma.rn.f32") in ptx


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_apply_qk_through_the_kernel_with_autograd(pairing):
    """``set_rotary_kernel("triton")``: ``ndpe.apply_qk`` forward and backward (inverse rotation in the
    kernel, cos/sin sums in float32) equal the eager kernel's, learnable angles included."""
    import ndpe
    from ndpe.functional import rotary_kernel

    heads, head_dim, n = 3, 16, 13
    qkv = randn(2, n, 3 * heads * head_dim).requires_grad_()
    a = (torch.rand(heads, n, 6, generator=torch.Generator().manual_seed(2)) * 6).requires_grad_()  # rot 12 of 16

    def run(kernel):
        with rotary_kernel(kernel):
            q, k, v = rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=heads)
            q, k = ndpe.apply_qk(q, k, ndpe.PosOut(rot=(a.cos(), a.sin()), pairing=pairing))
            loss = (q * k).sum() + (q * v).square().sum()
            return (q.detach(), k.detach(), *torch.autograd.grad(loss, (qkv, a)))

    for got, want in zip(run("triton"), run("eager")):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_backward_takes_gradients_of_any_strides():
    """Gradients reaching the kernel's backward may be transposed (``q @ k.mT``) or expanded
    (``sum``); they are made channel-contiguous for the kernel and match the eager path."""
    import ndpe
    from ndpe.functional import rotary_kernel

    heads, head_dim, n = 2, 8, 6
    qkv = randn(2, n, 3 * heads * head_dim).requires_grad_()
    cos, sin = angles(n, 4)

    def grad(kernel, loss_fn):
        with rotary_kernel(kernel):
            q, k, _ = rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=heads)
            q, k = ndpe.apply_qk(q, k, ndpe.PosOut(rot=(cos, sin)))
            return torch.autograd.grad(loss_fn(q, k), qkv)[0]

    for loss_fn in (lambda q, k: (q @ k.mT).square().sum(), lambda q, k: q.sum() + 2 * k.sum()):
        torch.testing.assert_close(grad("triton", loss_fn), grad("eager", loss_fn), rtol=1e-5, atol=1e-5)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA GPU (the compiled kernel, not the interpreter)")
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16])
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_on_cuda_matches_eager(monkeypatch, dtype, pairing):
    """The real kernel on a GPU: forward and gradients through ``apply_qk`` against the eager kernel
    (float32 math in both for fp32; bf16 within the precision bound of a float64 reference)."""
    import ndpe
    from ndpe.functional import rotary_kernel

    monkeypatch.delenv("TRITON_INTERPRET")
    heads, head_dim, grid = 6, 64, (3, 8, 8)  # video-like: rot 60 of 64 channels
    pe = ndpe.make(dims=3, kind="rope", dim=heads * head_dim, heads=heads, pairing=pairing).cuda()
    pos = pe(grid, num_prefix=1)
    qkv = randn(2, pos.num_tokens, 3 * heads * head_dim).cuda().to(dtype).requires_grad_()

    def run(kernel):
        with rotary_kernel(kernel):
            q, k, v = rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=heads)
            q, k = ndpe.apply_qk(q, k, pos)
            return q.detach(), torch.autograd.grad((q @ k.mT).float().square().mean(), qkv)[0]

    (q_t, g_t), (q_e, g_e) = run("triton"), run("eager")
    if dtype == torch.float32:
        torch.testing.assert_close(q_t, q_e, rtol=1e-6, atol=1e-6)
        torch.testing.assert_close(g_t, g_e, rtol=1e-4, atol=1e-5)
    else:
        q, _, _ = rearrange(qkv.detach(), "b t (three h d) -> three b h t d", three=3, h=heads)
        cos, sin = pe(grid, num_prefix=1, dtype=torch.float64).rot
        ref = rotate_reference(q.double(), cos, sin, pairing)
        bound = 2 * torch.finfo(dtype).eps * q.double().abs().max()
        assert (q_t.double() - ref).abs().max() <= bound
        torch.testing.assert_close(g_t.float(), g_e.float(), rtol=3e-2, atol=3e-2)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_rope_mixed_training_through_the_kernel(pairing):
    """rope-mixed's learned rotation on the Triton kernel (its frequencies' gradient from the kernel's inverse
    rotation): the outputs and every gradient of the eager path, float32, a cls token in front."""
    import ndpe
    from ndpe.functional import rotary_kernel
    pe = ndpe.make(dims=2, kind="rope-mixed", dim=48, heads=2, pairing=pairing)
    qkv = randn(3, 1 + 12, 3 * 48).requires_grad_()
    weight = randn(13, 13, seed=2)

    def run(kernel):
        q, k = rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=2)[:2]
        with rotary_kernel(kernel):
            rq, rk = ndpe.apply_qk(q, k, pe((3, 4), num_prefix=1))
        assert type(rq.grad_fn).__name__ == "MixedRotaryBackward"
        grads = torch.autograd.grad(((rq @ rk.mT) * weight).sum(), (qkv, pe.freqs))
        return (rq, rk, *grads)

    for fused, plain in zip(run("triton"), run("eager")):
        torch.testing.assert_close(fused, plain, rtol=1e-5, atol=1e-5 * plain.abs().max().item())
