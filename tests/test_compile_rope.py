"""torch.compile path of ``apply_qk``: one graph, no graph breaks, no recompiles when batch or grid change."""
from __future__ import annotations

import pytest
import torch
import torch._dynamo
from einops import rearrange
from torch._dynamo.utils import counters

import ndpe
from ndpe.functional import rotate_reference


def rotate_qkv(qkv: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, heads: int, pairing: str):
    """A fused qkv projection ``(B, T, 3 * dim)`` split into heads, q and k rotated."""
    q, k, v = rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=heads)
    q, k = ndpe.apply_qk(q, k, ndpe.PosOut(rot=(cos, sin), pairing=pairing))
    return q * 2 + k, v


def inputs(batch, grid, heads=2, head_dim=8, requires_grad=False):
    pe = ndpe.make(dims=2, kind="rope", dim=heads * head_dim, heads=heads)
    cos, sin = pe(grid, num_prefix=1).rot
    qkv = torch.randn(batch, cos.shape[-2], 3 * heads * head_dim, requires_grad=requires_grad)
    return qkv, cos, sin


@pytest.fixture(autouse=True)
def fresh_dynamo():
    torch._dynamo.reset()
    counters.clear()
    yield
    torch._dynamo.reset()


def test_no_graph_breaks():
    qkv, cos, sin = inputs(2, (3, 4))
    explanation = torch._dynamo.explain(rotate_qkv)(qkv, cos, sin, 2, "half")
    assert explanation.graph_break_count == 0 and explanation.graph_count == 1


# Graph breaks and recompiles are decided by Dynamo; aot_eager (Dynamo + AOTAutograd, no codegen) keeps
# the file fast. Inductor, the compiler the benchmark measures, is checked forward-only below.
@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_no_recompile_across_batch_and_grid(pairing):
    """Batch and token axes marked dynamic: batch 2 -> 3 and grid 3x4 -> 4x5 reuse the first graph; grads match."""
    fn = torch.compile(rotate_qkv, fullgraph=True, backend="aot_eager")
    for batch, grid in [(2, (3, 4)), (3, (3, 4)), (3, (4, 5))]:
        qkv, cos, sin = inputs(batch, grid, requires_grad=True)
        torch._dynamo.mark_dynamic(qkv, 0)
        torch._dynamo.mark_dynamic(qkv, 1)
        torch._dynamo.mark_dynamic(cos, 1)  # (1, T, half); mark_dynamic takes no negative index
        torch._dynamo.mark_dynamic(sin, 1)
        with torch._dynamo.config.patch(error_on_recompile=batch > 2):
            out, _ = fn(qkv, cos, sin, 2, pairing)
        out.sum().backward()
        q, k, _ = rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=2)
        ref = rotate_reference(q, cos, sin, pairing) * 2 + rotate_reference(k, cos, sin, pairing)
        torch.testing.assert_close(out, ref)
        grad = qkv.grad.clone()
        qkv.grad = None
        ref.sum().backward()
        torch.testing.assert_close(grad, qkv.grad)
    assert counters["stats"]["unique_graphs"] == 1


def test_inductor_dynamic_matches_eager():
    """Inductor with dynamic batch and tokens: one graph, same numbers as the eager fast path."""
    fn = torch.compile(rotate_qkv, fullgraph=True, backend="inductor")
    with torch.no_grad():
        for batch, grid in [(2, (3, 4)), (3, (4, 5))]:
            qkv, cos, sin = inputs(batch, grid)
            for t, axes in ((qkv, (0, 1)), (cos, (1,)), (sin, (1,))):
                for a in axes:
                    torch._dynamo.mark_dynamic(t, a)
            with torch._dynamo.config.patch(error_on_recompile=batch > 2):
                out, _ = fn(qkv, cos, sin, 2, "half")
            torch.testing.assert_close(out, rotate_qkv(qkv, cos, sin, 2, "half")[0])
    assert counters["stats"]["unique_graphs"] == 1


@pytest.fixture
def rotary_kernel():
    """Set a rotary kernel for one test, restoring the previous one after."""
    from ndpe.functional import set_rotary_kernel
    previous = set_rotary_kernel("auto")
    yield set_rotary_kernel
    set_rotary_kernel(previous)


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_compile_kernel_matches_eager_forward_and_backward(rotary_kernel, pairing):
    """``set_rotary_kernel("compile")`` from eager code: same values and gradients; new sizes share one dynamic graph."""
    heads, head_dim = 2, 10  # 4 + 4 of 10 channels rotated, 2 passed through
    pe = ndpe.make(dims=2, kind="rope", dim=heads * head_dim, heads=heads, pairing=pairing, axis_dims=(4, 4))

    def run(batch, grid):
        torch.manual_seed(0)
        qkv = torch.randn(batch, 1 + grid[0] * grid[1], 3 * heads * head_dim, requires_grad=True)
        q, k, v = rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=heads)
        q, k = ndpe.apply_qk(q, k, pe(grid, num_prefix=1))
        loss = (q * k).sum() + (q * v).square().sum()
        return q.detach(), torch.autograd.grad(loss, qkv)[0]

    for batch, grid in [(3, (3, 4)), (4, (5, 3)), (5, (3, 3))]:  # no size equal to heads (duck sizing ties them)
        rotary_kernel("eager")
        ref = run(batch, grid)
        rotary_kernel("compile")
        for got, want in zip(run(batch, grid), ref):
            torch.testing.assert_close(got, want)
    assert counters["stats"]["unique_graphs"] == 2  # static for the first shape, one dynamic graph for the rest


def test_rotary_kernel_choices(rotary_kernel, monkeypatch):
    monkeypatch.delenv("TRITON_INTERPRET", raising=False)  # the interpreter would take CPU tensors
    with pytest.raises(ValueError, match=r"rotary kernel must be one of \('auto', 'eager', 'compile', 'triton'\), got 'fast'"):
        rotary_kernel("fast")
    if torch.cuda.is_available():
        pytest.skip("the Triton kernel may run here")
    rotary_kernel("triton")  # CPU tensors without the Triton interpreter: refused with the reason
    q = torch.randn(1, 1, 3, 4)
    with pytest.raises(RuntimeError, match="needs Triton and q/k as CUDA tensors"):
        ndpe.apply_qk(q, q, ndpe.PosOut(rot=(torch.ones(3, 2), torch.zeros(3, 2))))


def test_rotary_kernel_context_restores_on_error():
    from ndpe import functional
    before = functional._kernel
    with pytest.raises(KeyError):
        with functional.rotary_kernel("compile"):
            assert functional._kernel == "compile"
            raise KeyError("inside")
    assert functional._kernel == before
