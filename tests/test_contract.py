"""The contract every kind keeps, checked for every registered kind and every dims it supports."""
from __future__ import annotations

import inspect

import pytest
import torch

import ndpe
from conftest import KIND_DIMS, build
from ndpe.fields import specs

GRIDS = {1: [(7,), (11,)], 2: [(2, 5), (5, 2)], 3: [(2, 3, 4), (4, 3, 2)]}
ids = [f"{k}-{d}d" for k, d in KIND_DIMS]
pytestmark = pytest.mark.parametrize("kind,dims", KIND_DIMS, ids=ids)


def fields(out: ndpe.PosOut, pe, t: int):
    """Every tensor of a PosOut by name, with the content-dependent terms evaluated on fixed q, k and tokens
    ``(2, heads, t, head_dim)`` / ``(2, t, dim - cat_dim)`` (``t`` = prefix + grid tokens)."""
    named = {"add": out.add, "cat": out.cat, "bias": out.bias, "prob_bias": out.prob_bias}
    if out.rot is not None:
        named["cos"], named["sin"] = out.rot
    if out.rot_k is not None:
        named["cos_k"], named["sin_k"] = out.rot_k
    if out.basis is not None:
        named["basis"] = out.basis
    if out.frame is not None:
        named["frame"], named["frame_inv"] = out.frame
    g = torch.Generator().manual_seed(0)
    if out.logits is not None:
        q, k = torch.randn(2, 2, pe.heads, t, pe.head_dim, generator=g)
        named["logits"] = out.logits(q, k, states(pe, t))
    if out.tokens is not None:
        named["tokens"] = out.tokens(torch.randn(2, t, pe.dim - pe.cat_dim, generator=g))
    return {k: v for k, v in named.items() if v is not None}


def states(pe, t: int) -> torch.Tensor:
    """Fixed token states ``(2, t, dim)`` for a logits term that reads them (``uses_states``: dd-alibi)."""
    return torch.randn(2, t, pe.dim, generator=torch.Generator().manual_seed(1))


def tokens(grid, num_prefix=0):
    return torch.Size(grid).numel() + num_prefix


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
        for name, t in fields(out, pe, n + 2).items():
            assert t.dtype == torch.float32, name
            assert torch.isfinite(t).all(), name
        for name, t in fields(pe(grid, dtype=torch.bfloat16), pe, n).items():
            if name not in ("logits", "tokens"):  # functions: their results follow q, k, x
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
    if out.rot_k is not None:
        assert (out.rot_k[0][..., :p, :] == 1).all() and (out.rot_k[1][..., :p, :] == 0).all()
        torch.testing.assert_close(out.rot_k[0][..., p:, :], plain.rot_k[0])
    n = tokens(grid)
    terms, plain_terms = fields(out, pe, n + p), fields(plain, pe, n)
    if "logits" in terms:
        got = terms["logits"]
        assert (got[..., :p, :] == 0).all() and (got[..., :, :p] == 0).all()
        g = torch.Generator().manual_seed(0)  # the grid tokens' q, k alone give the grid block
        q, k = torch.randn(2, 2, pe.heads, n + p, pe.head_dim, generator=g)
        torch.testing.assert_close(got[..., p:, p:], plain.logits(q[..., p:, :], k[..., p:, :],
                                                                 states(pe, n + p)[:, p:]))
    if "tokens" in terms:
        x = torch.randn(2, n + p, pe.dim - pe.cat_dim)
        y = out.tokens(x)
        torch.testing.assert_close(y[:, :p], x[:, :p])
        torch.testing.assert_close(y[:, p:], plain.tokens(x[:, p:]))
    assert plain_terms.keys() <= terms.keys()


def test_decoding_rows_equal_the_full_sequence(kind, dims):
    """``pe((n,), past=p)``: the new tokens' fields are the full sequence's last rows, queries against all keys."""
    if dims != 1:
        with pytest.raises(ValueError, match="dims=1"):
            build(kind, dims).eval()(GRIDS[dims][0], past=2)
        return
    pe = build(kind, dims).eval()
    full, p, n = pe((9,), num_prefix=1), 6, 3
    try:
        step = pe((n,), num_prefix=1, past=p)
    except ValueError as err:  # a kind that cannot decode says so in one line
        assert "decod" in str(err) and "\n" not in str(err)
        pytest.skip(f"{kind} does not decode with these options: {err}")
    a = fields(full, pe, 10)
    g = torch.Generator().manual_seed(0)
    q, k = torch.randn(2, 2, pe.heads, 10, pe.head_dim, generator=g)
    x = torch.randn(2, 10, pe.dim - pe.cat_dim, generator=g)
    rows = slice(1 + p, None)  # the new tokens among prefix + 9
    for name, t in (("add", step.add), ("cat", step.cat)):
        if t is not None:
            torch.testing.assert_close(t, a[name][..., rows, :])
    if step.rot is not None:
        torch.testing.assert_close(step.rot[0], full.rot[0][..., rows, :])
        torch.testing.assert_close(step.rot[1], full.rot[1][..., rows, :])
    if step.rot_k is not None:
        torch.testing.assert_close(step.rot_k[0], full.rot_k[0][..., rows, :])
    if step.bias is not None:
        torch.testing.assert_close(step.bias, full.bias[..., rows, :])
    if step.logits is not None:
        torch.testing.assert_close(step.logits(q[..., rows, :], k, states(pe, 10)[:, rows]),
                                   full.logits(q, k, states(pe, 10))[..., rows, :])
    if step.tokens is not None:
        torch.testing.assert_close(step.tokens(x[:, rows]), full.tokens(x)[:, rows])


def test_declared_capabilities_are_what_the_kind_does(kind, dims):
    """The class attributes others read (ndpe.base.Encoding's docstring) say what the kind's code does."""
    cls, pe = ndpe.registry.kind_class(kind), build(kind, dims)
    assert cls.has_parameters == any(True for _ in pe.parameters())
    assert cls.takes_key_positions == ("key_positions" in inspect.signature(cls.encode).parameters)
    out = pe(GRIDS[dims][0])
    if (out.bias is not None or out.logits is not None) and not cls.takes_key_positions and dims == 1:
        with pytest.raises(ValueError, match="decod") as refused:  # undeclared, so it refuses past= in one line
            pe.eval()((2,), past=3)
        assert "\n" not in str(refused.value)
    assert cls.position_free == all(getattr(out, name) is None for name, spec, _ in specs(type(out)) if spec.role != "meta")


def test_transposed_grids_differ(kind, dims):
    """(2, 5) and (5, 2) are different grids: an encoding must never treat them alike."""
    if ndpe.registry.kind_class(kind).position_free or dims == 1:
        pytest.skip("nothing to distinguish")
    pe = build(kind, dims).eval()
    a, b = (fields(pe(g), pe, tokens(g)) for g in GRIDS[dims])
    assert a.keys() == b.keys()
    assert any(not torch.allclose(a[k], b[k]) for k in a)


def test_explicit_positions_equal_grid(kind, dims):
    pe = build(kind, dims).eval()
    grid = GRIDS[dims][0]
    coords = pe.coords(grid)
    assert coords.shape == (torch.Size(grid).numel(), dims)
    a, b = fields(pe(grid), pe, tokens(grid)), fields(pe(grid, positions=coords), pe, tokens(grid))
    for k in a:
        torch.testing.assert_close(a[k], b[k])


def test_batched_positions(kind, dims):
    pe = build(kind, dims).eval()
    if not pe.coordinate_based:
        pytest.skip("table kind: positions are indices into the table")
    grid = GRIDS[dims][0]
    coords = pe.coords(grid)
    batched = torch.stack([coords, coords + 1.0])  # (2, N, dims): a shifted second sample
    out = fields(pe(positions=batched), pe, tokens(grid))
    ref0, ref1 = fields(pe(positions=coords), pe, tokens(grid)), fields(pe(positions=coords + 1.0), pe, tokens(grid))
    for k, t in out.items():
        if k == "basis":  # learned, not per position: the same for every sample
            torch.testing.assert_close(t, ref0[k])
            continue
        if k in ("logits", "tokens"):  # evaluated on a batch of 2 already: sample b against the unbatched call's b
            torch.testing.assert_close(t[0], ref0[k][0])
            torch.testing.assert_close(t[-1], ref1[k][-1])
            continue
        torch.testing.assert_close(t[0].expand_as(ref0[k]) if t.shape[0] == 1 else t[0], ref0[k])
        torch.testing.assert_close(t[-1].expand_as(ref1[k]) if t.shape[0] == 1 else t[-1], ref1[k])


def test_parameters_and_gradients(kind, dims):
    pe = build(kind, dims)
    params = [p for p in pe.parameters() if p.requires_grad]
    out = fields(pe(GRIDS[dims][0], num_prefix=1), pe, tokens(GRIDS[dims][0], 1))
    if not params:
        assert pe(GRIDS[dims][0]) is pe(GRIDS[dims][0]), "fixed kinds are cached per grid"
        return
    loss = sum(t.float().sum() for t in out.values())  # not squares: cos^2 + sin^2 is constant
    loss.backward()
    for p in params:
        assert p.grad is not None and p.grad.abs().sum() > 0


def test_frozen_parameters_changed_in_place_are_seen(kind, dims):
    """An EMA copy: frozen parameters (so the output is cached) updated in place give the new output, not the cache."""
    pe = build(kind, dims).eval().requires_grad_(False)
    if not list(pe.parameters()):
        pytest.skip("no parameters")
    grid = GRIDS[dims][0]
    before = fields(pe(grid), pe, tokens(grid))
    with torch.no_grad():
        for p in pe.parameters():
            p.mul_(1.5).add_(0.1)
    after, fresh = fields(pe(grid), pe, tokens(grid)), fields(pe.replace()(grid), pe, tokens(grid))
    for k in after:
        torch.testing.assert_close(after[k], fresh[k])
    assert any(not torch.allclose(before[k], after[k]) for k in after)


def test_a_model_cast_to_bfloat16(kind, dims):
    """``model.to(torch.bfloat16)`` casts the encoding's parameters too; every kind still runs in attention."""
    pe = build(kind, dims).to(torch.bfloat16)
    attn = ndpe.Attention(pe.dim, heads=pe.heads, causal=pe.causal_only).to(torch.bfloat16)
    grid = GRIDS[dims][0]
    x = torch.randn(2, tokens(grid, 1), pe.dim - pe.cat_dim, dtype=torch.bfloat16)
    pos = pe(grid, num_prefix=1, dtype=torch.bfloat16)
    y = attn(ndpe.apply_tokens(x, pos), pos)
    assert y.dtype == torch.bfloat16 and torch.isfinite(y).all()


def test_state_dict_round_trip(kind, dims):
    torch.manual_seed(0)
    a = build(kind, dims)
    torch.manual_seed(1)
    b = build(kind, dims)
    b.load_state_dict(a.state_dict())
    grid = GRIDS[dims][1]
    fa, fb = fields(a(grid), a, tokens(grid)), fields(b(grid), b, tokens(grid))
    for k in fa:
        torch.testing.assert_close(fa[k], fb[k])


def test_attention_consumes_any_kind(kind, dims):
    """A model applies every kind the same way: apply_tokens, then Attention with the PosOut."""
    pe = build(kind, dims)
    attn = ndpe.Attention(pe.dim, heads=pe.heads, causal=pe.causal_only)
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
            a, b = (fields(pe(grid, num_prefix=1), pe, tokens(grid, 1)),
                    fields(compiled(grid, num_prefix=1), pe, tokens(grid, 1)))
        for k in a:
            torch.testing.assert_close(a[k], b[k], rtol=1e-5, atol=1e-5)


class _Wrap(torch.nn.Module):
    """A model fragment: encode a fixed grid, apply to tokens and attention."""

    def __init__(self, pe, grid):
        super().__init__()
        self.pe, self.grid = pe, grid
        self.attn = ndpe.Attention(pe.dim, heads=pe.heads, causal=pe.causal_only)

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
