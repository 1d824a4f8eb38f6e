"""The contract every kind keeps, checked for every registered kind and every dims it supports."""
from __future__ import annotations

import pytest
import torch

import ndpe
from conftest import KIND_DIMS, build

GRIDS = {1: [(7,), (11,)], 2: [(2, 5), (5, 2)], 3: [(2, 3, 4), (4, 3, 2)]}
ids = [f"{k}-{d}d" for k, d in KIND_DIMS]
pytestmark = pytest.mark.parametrize("kind,dims", KIND_DIMS, ids=ids)


def fields(out: ndpe.PosOut):
    """Every tensor of a PosOut, by name."""
    named = {"add": out.add, "cat": out.cat, "bias": out.bias}
    if out.rot is not None:
        named["cos"], named["sin"] = out.rot
    return {k: v for k, v in named.items() if v is not None}


def test_shapes_and_dtypes(kind, dims):
    pe = build(kind, dims)
    for grid in GRIDS[dims]:
        n = torch.Size(grid).numel()
        out = pe(grid, num_prefix=2)
        assert out.num_prefix == 2
        if out.add is not None:
            assert out.add.shape[-2:] == (n + 2, pe.dim)
        if out.cat is not None:
            assert out.cat.shape[-2:] == (n + 2, pe.cat_dim) and pe.cat_dim > 0
        else:
            assert pe.cat_dim == 0
        if out.rot is not None:
            cos, sin = out.rot
            assert cos.shape == sin.shape and cos.shape[-2] == n + 2
            assert 2 * cos.shape[-1] <= pe.head_dim
            assert cos.ndim == 2 or cos.shape[-3] in (1, pe.heads)
        if out.bias is not None:
            assert out.bias.shape[-2:] == (n + 2, n + 2)
            assert out.bias.ndim == 2 or out.bias.shape[-3] in (1, pe.heads)
        for name, t in fields(out).items():
            assert t.dtype == torch.float32, name
            assert torch.isfinite(t).all(), name
        for name, t in fields(pe(grid, dtype=torch.bfloat16)).items():
            assert t.dtype == torch.bfloat16, name


def test_prefix_tokens_are_identity(kind, dims):
    pe = build(kind, dims)
    grid, p = GRIDS[dims][0], 3
    plain, out = pe(grid), pe(grid, num_prefix=p)
    if out.add is not None:
        assert (out.add[..., :p, :] == 0).all()
        torch.testing.assert_close(out.add[..., p:, :], plain.add)
    if out.cat is not None:
        assert (out.cat[..., :p, :] == 0).all()
    if out.rot is not None:
        assert (out.rot[0][..., :p, :] == 1).all() and (out.rot[1][..., :p, :] == 0).all()
        torch.testing.assert_close(out.rot[0][..., p:, :], plain.rot[0])
    if out.bias is not None:
        assert (out.bias[..., :p, :] == 0).all() and (out.bias[..., :, :p] == 0).all()
        torch.testing.assert_close(out.bias[..., p:, p:], plain.bias)


def test_transposed_grids_differ(kind, dims):
    """(2, 5) and (5, 2) are different grids: an encoding must never treat them alike."""
    if ndpe.registry.kind_class(kind).position_free or dims == 1:
        pytest.skip("nothing to distinguish")
    pe = build(kind, dims).eval()
    a, b = (fields(pe(g)) for g in GRIDS[dims])
    assert a.keys() == b.keys()
    assert any(not torch.allclose(a[k], b[k]) for k in a)


def test_explicit_positions_equal_grid(kind, dims):
    pe = build(kind, dims).eval()
    grid = GRIDS[dims][0]
    coords = pe.coords(grid)
    assert coords.shape == (torch.Size(grid).numel(), dims)
    a, b = fields(pe(grid)), fields(pe(grid, positions=coords))
    for k in a:
        torch.testing.assert_close(a[k], b[k])


def test_batched_positions(kind, dims):
    pe = build(kind, dims).eval()
    if not pe.coordinate_based:
        pytest.skip("table kind: positions are indices into the table")
    grid = GRIDS[dims][0]
    coords = pe.coords(grid)
    batched = torch.stack([coords, coords + 1.0])  # (2, N, dims): a shifted second sample
    out = fields(pe(positions=batched))
    ref0, ref1 = fields(pe(positions=coords)), fields(pe(positions=coords + 1.0))
    for k, t in out.items():
        torch.testing.assert_close(t[0].expand_as(ref0[k]) if t.shape[0] == 1 else t[0], ref0[k])
        torch.testing.assert_close(t[-1].expand_as(ref1[k]) if t.shape[0] == 1 else t[-1], ref1[k])


def test_parameters_and_gradients(kind, dims):
    pe = build(kind, dims)
    params = [p for p in pe.parameters() if p.requires_grad]
    out = fields(pe(GRIDS[dims][0], num_prefix=1))
    if not params:
        assert pe(GRIDS[dims][0]) is pe(GRIDS[dims][0]), "fixed kinds are cached per grid"
        return
    loss = sum(t.float().sum() for t in out.values())  # not squares: cos^2 + sin^2 is constant
    loss.backward()
    for p in params:
        assert p.grad is not None and p.grad.abs().sum() > 0


def test_state_dict_round_trip(kind, dims):
    torch.manual_seed(0)
    a = build(kind, dims)
    torch.manual_seed(1)
    b = build(kind, dims)
    b.load_state_dict(a.state_dict())
    grid = GRIDS[dims][1]
    fa, fb = fields(a(grid)), fields(b(grid))
    for k in fa:
        torch.testing.assert_close(fa[k], fb[k])


def test_attention_consumes_any_kind(kind, dims):
    """A model applies every kind the same way: apply_tokens, then Attention with the PosOut."""
    pe = build(kind, dims)
    attn = ndpe.Attention(pe.dim, heads=pe.heads)
    grid = GRIDS[dims][0]
    n = torch.Size(grid).numel() + 1
    x = torch.randn(2, n, pe.dim - pe.cat_dim)
    pos = pe(grid, num_prefix=1)
    y = attn(ndpe.apply_tokens(x, pos), pos)
    assert y.shape == (2, n, pe.dim) and torch.isfinite(y).all()


def test_compile_fullgraph_changing_grids(kind, dims):
    torch._dynamo.reset()
    pe = build(kind, dims).eval()
    compiled = torch.compile(pe, fullgraph=True, dynamic=False)
    for grid in GRIDS[dims]:
        with torch.no_grad():
            a, b = fields(pe(grid, num_prefix=1)), fields(compiled(grid, num_prefix=1))
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-5)


class _Wrap(torch.nn.Module):
    """A model fragment: encode a fixed grid, apply to tokens and attention."""

    def __init__(self, pe, grid):
        super().__init__()
        self.pe, self.grid = pe, grid
        self.attn = ndpe.Attention(pe.dim, heads=pe.heads)

    def forward(self, x):
        pos = self.pe(self.grid, num_prefix=1)
        return self.attn(ndpe.apply_tokens(x, pos), pos)


def test_torch_export(kind, dims):
    pe = build(kind, dims).eval()
    grid = GRIDS[dims][0]
    model = _Wrap(pe, grid).eval()
    x = torch.randn(2, torch.Size(grid).numel() + 1, pe.dim - pe.cat_dim)
    ep = torch.export.export(model, (x,))
    with torch.no_grad():
        torch.testing.assert_close(ep.module()(x), model(x), rtol=1e-5, atol=1e-5)
