"""``cpb``: equal to timm's Swin V2 ``WindowAttention`` (2D) and x-transformers' ``DynamicPositionBias`` (1D) with
copied weights, a per-pair loop in 3D, one MLP row per distinct offset, both paths agree, decoding, flex, errors."""
from __future__ import annotations

import math

import pytest
import torch

import ndpe
from ndpe import flex
from ndpe.kinds.cpb import offset_grid, swin_log_coords
from ndpe.pairs import pair_axes
from tests.conftest import assert_tells_apart

x_transformers = pytest.importorskip("x_transformers.x_transformers")
swin_v2 = pytest.importorskip("timm.models.swin_transformer_v2")


def make(dims=2, heads=3, seed=0, perturb=True, **opts):
    torch.manual_seed(seed)
    pe = ndpe.make(dims=dims, kind="cpb", dim=8 * heads, heads=heads, **opts)
    if perturb:
        with torch.no_grad():
            for p in pe.parameters():
                p.add_(0.1 * torch.randn_like(p))
    return pe


def timm_bias(attn):
    """Swin V2's bias as WindowAttention.forward builds it (table, index, 16 sigmoid)."""
    n = attn.window_size[0] * attn.window_size[1]
    table = attn.cpb_mlp(attn.relative_coords_table).view(-1, attn.num_heads)
    bias = table[attn.relative_position_index.view(-1)].view(n, n, -1).permute(2, 0, 1)
    return 16 * torch.sigmoid(bias)


@pytest.mark.parametrize("window,pretrained", [((7, 7), (0, 0)), ((3, 5), (0, 0)), ((8, 8), (4, 6)),
                                               ((5, 2), (6, 3)), ((1, 4), (0, 0))])
def test_swin_style_equals_timm_swin_v2(window, pretrained):
    """Copy timm's cpb_mlp into ours: same bias; pretrained_window_size (0, 0) = no train_shape (the grid)."""
    attn = swin_v2.WindowAttention(dim=24, window_size=window, num_heads=3, pretrained_window_size=pretrained)
    pe = make(train_shape=pretrained if pretrained[0] else None, perturb=False)
    with torch.no_grad():
        pe.mlp[0].weight.copy_(attn.cpb_mlp[0].weight)
        pe.mlp[0].bias.copy_(attn.cpb_mlp[0].bias)
        pe.mlp[2].weight.copy_(attn.cpb_mlp[2].weight)
        other = make(train_shape=(2 * window[0] + 2, 2 * window[1] + 2), perturb=False)  # another normalisation
        other.load_state_dict(pe.state_dict())
        assert_tells_apart(pe(window).bias, other(window).bias, timm_bias(attn), rtol=1.3e-6, atol=1e-5)
        # the table itself: timm's rows, in timm's order, and timm's index
        features = swin_log_coords(offset_grid((window[0] - 1, window[1] - 1)), pe._divisor(pe.coords(window), window))
        torch.testing.assert_close(features, attn.relative_coords_table.reshape(-1, 2))
        coords = pe.coords(window)
        rows = pe.pair_row(*pair_axes(coords.long()), (window[0] - 1, window[1] - 1))
        assert torch.equal(rows, attn.relative_position_index)


def test_swin_mlp_is_swins():
    pe = ndpe.make(dims=2, kind="cpb", dim=64, heads=4)
    assert [type(m).__name__ for m in pe.mlp] == ["Linear", "ReLU", "Linear"]
    assert pe.mlp[0].weight.shape == (512, 2) and pe.mlp[2].weight.shape == (4, 512) and pe.mlp[2].bias is None


def copy_dynamic(pe, ref):
    """x-transformers' parameters in order (Linear, [its gamma-only LayerNorm | nn.LayerNorm], ..., Linear)."""
    ours, theirs = list(pe.state_dict().items()), list(ref.state_dict().items())
    assert [v.shape for _, v in ours] == [v.shape for _, v in theirs]
    pe.load_state_dict({k: v for (k, _), (_, v) in zip(ours, theirs)})


@pytest.mark.parametrize("depth,log_distance,norm", [(2, False, False), (1, True, False), (3, True, True),
                                                     (2, False, True)])
def test_dynamic_style_equals_x_transformers(depth, log_distance, norm):
    torch.manual_seed(0)
    ref = x_transformers.DynamicPositionBias(dim=12, heads=3, depth=depth, log_distance=log_distance, norm=norm)
    with torch.no_grad():
        for p in ref.parameters():  # LayerNorm gains and biases away from 1 and 0
            p.add_(0.1 * torch.randn_like(p))
    pe = make(dims=1, style="dynamic", mlp_hidden=12, depth=depth, log_distance=log_distance, norm=norm,
              perturb=False)
    copy_dynamic(pe, ref)
    other = make(dims=1, style="dynamic", mlp_hidden=12, depth=depth, log_distance=not log_distance, norm=norm,
                 perturb=False)  # the other distance
    other.load_state_dict(pe.state_dict())
    with torch.no_grad():
        assert_tells_apart(pe((10,)).bias, other((10,)).bias, ref(10, 10), rtol=1.3e-6, atol=1e-5)
        # decoding: x-transformers' (i, j) = (new queries, all keys) is pe((n,), past=j - i)
        torch.testing.assert_close(pe((3,), past=7).bias, ref(3, 10))


def test_dynamic_defaults_are_x_transformers():
    """dim // 4 hidden units, depth 2, SiLU, a last Linear with bias, no log, no norm (TransformerWrapper's)."""
    pe = ndpe.make(dims=1, kind="cpb", dim=64, heads=4, style="dynamic")
    ref = x_transformers.DynamicPositionBias(dim=64 // 4, heads=4, depth=2)
    assert [type(m).__name__ for m in pe.mlp] == ["Linear", "SiLU", "Linear", "SiLU", "Linear"]
    assert [v.shape for v in pe.state_dict().values()] == [v.shape for v in ref.state_dict().values()]


def naive(pe, coords, divisor=None):
    """Per pair: offset p_i - p_j, the style's transform, the MLP, Swin's 16 sigmoid."""
    n = len(coords)
    out = torch.empty(pe.heads, n, n)
    for i in range(n):
        for j in range(n):
            off = coords[i] - coords[j]
            if pe.style == "swin":
                x = off / divisor * 8
                feat = torch.sign(x) * torch.log2(x.abs() + 1) / math.log2(8)
            else:
                feat = torch.sign(off) * torch.log(off.abs() + 1) if pe.log_distance else off
            y = pe.mlp(feat)
            out[:, i, j] = 16 * torch.sigmoid(y) if pe.style == "swin" else y
    return out


@pytest.mark.parametrize("grid,opts", [((2, 3, 4), {}), ((3, 2, 2), {"train_shape": (2, 5, 3)}),
                                       ((2, 3, 3), {"style": "dynamic", "log_distance": True, "norm": True}),
                                       ((3, 4), {"style": "dynamic"}), ((6,), {})])
def test_equals_naive_loop(grid, opts):
    """The N-D generalisation: the same per-axis transform of a dims-vector offset."""
    pe = make(dims=len(grid), **opts)
    sizes = pe.train_shape or grid
    divisor = torch.tensor([max(n - 1, 1) for n in sizes], dtype=torch.float32)
    with torch.no_grad():
        torch.testing.assert_close(pe(grid).bias, naive(pe, ndpe.grid_coords(grid), divisor))


@pytest.mark.parametrize("grid", [(9,), (4, 5), (3, 2, 4)])
def test_mlp_runs_once_per_distinct_offset(grid):
    pe = make(dims=len(grid))
    rows = []
    pe.mlp[0].register_forward_hook(lambda m, args, out: rows.append(args[0].shape[:-1].numel()))
    pe(grid)
    assert rows == [math.prod(2 * n - 1 for n in grid)] == [pe.table_rows(grid)]


@pytest.mark.parametrize("grid,opts", [((12,), {"style": "dynamic"}), ((4, 5), {"train_shape": 4}),
                                       ((3, 3, 4), {}), ((5, 4), {})])
def test_translation_invariant(grid, opts):
    """bias(i, j) depends only on the offset p_i - p_j (fixed divisor: train_shape, or the grid's)."""
    pe = make(dims=len(grid), **opts)
    coords = ndpe.grid_coords(grid)
    with torch.no_grad():
        bias = pe(grid).bias.reshape(3, -1)
    offsets = (coords[:, None] - coords[None]).reshape(-1, len(grid))
    for off in offsets.unique(dim=0):
        vals = bias[:, (offsets == off).all(-1)]
        torch.testing.assert_close(vals, vals[:, :1].expand_as(vals))


def test_fractional_positions_per_pair_equal_the_table():
    """Shifting every position by 0.5 keeps the offsets: the per-pair path (fractional) equals the table path."""
    for opts in ({"train_shape": (3, 4)}, {"style": "dynamic", "log_distance": True}):
        pe = make(**opts)
        coords = ndpe.grid_coords((3, 4))
        rows = []
        pe.mlp[0].register_forward_hook(lambda m, args, out: rows.append(args[0].shape[:-1].numel()))
        with torch.no_grad():
            torch.testing.assert_close(pe((3, 4), positions=coords + 0.5).bias, pe((3, 4)).bias)
        assert rows == [12 * 12, 5 * 7]  # per pair, then per distinct offset


def test_train_shape_keeps_offsets_across_grids_and_grid_normalisation_does_not():
    """With train_shape the bias of an offset is the same on every grid (Swin V2 fine-tuning at a larger
    window); without it each grid maps its largest offset to +-8 (timm's pretrained_window_size=0)."""
    fixed, per_grid = make(train_shape=(4, 4)), make()
    with torch.no_grad():
        small, large = fixed((4, 4)).bias, fixed((8, 8)).bias
        idx = torch.tensor([r * 8 + c for r in range(4) for c in range(4)])  # the 4 x 4 corner of the 8 x 8 grid
        torch.testing.assert_close(large[:, idx][:, :, idx], small)
        a, b = per_grid((4, 4)).bias, per_grid((8, 8)).bias
        assert not torch.allclose(b[:, idx][:, :, idx], a)
        torch.testing.assert_close(a[:, -1, 0], b[:, -1, 0])  # the largest offset (n - 1, n - 1) on both


@pytest.mark.parametrize("opts", [{"style": "dynamic"}, {"train_shape": (8,)}])
def test_decoding_rows_equal_full_sequence(opts):
    pe = make(dims=1, **opts).eval()
    with torch.no_grad():
        for past, n, prefix in [(5, 1, 0), (4, 3, 2)]:
            step = pe((n,), past=past, num_prefix=prefix).bias
            full = pe((past + n,), num_prefix=prefix).bias
            assert step.shape == (3, n, prefix + past + n)
            torch.testing.assert_close(step, full[:, prefix + past:, :])


def test_batched_positions_with_per_sample_extent():
    """positions only, no train_shape: each sample's key extent stands for its grid (one table per sample)."""
    pe = make(dims=1)
    pos = torch.stack([torch.arange(6.0), torch.tensor([0.0, 2, 3, 7, 8, 20])])[..., None]
    with torch.no_grad():
        out = pe(positions=pos).bias
        assert out.shape == (2, 3, 6, 6)
        for b, extent in enumerate((5.0, 20.0)):
            torch.testing.assert_close(out[b], pe(positions=pos[b]).bias)
            torch.testing.assert_close(out[b], naive(pe, pos[b], torch.tensor([extent])))


def evaluate(fn, heads, n):
    t = torch.tensor
    return torch.tensor([[[float(fn(t(0), t(h), t(i), t(j))) for j in range(n)] for i in range(n)]
                         for h in range(heads)])


@pytest.mark.parametrize("grid,opts,mode", [((7,), {"style": "dynamic", "log_distance": True}, "index"),
                                            ((3, 4), {}, "index"), ((3, 4), {"train_shape": 5}, "pixel"),
                                            ((2, 2, 3), {"style": "dynamic"}, "centered")])
def test_score_bias_equals_materialized(grid, opts, mode):
    pe = make(dims=len(grid), **opts)
    pe.coords_mode = mode
    with torch.no_grad():
        got = evaluate(pe.score_bias(pe.coords(grid)), 3, math.prod(grid))
        torch.testing.assert_close(got, pe(grid).bias, rtol=1e-5, atol=1e-5)


@pytest.mark.skipif(not flex.flex_available()[0], reason=flex.flex_available()[1])
@pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")
@pytest.mark.parametrize("grid,opts,causal", [((9,), {"style": "dynamic"}, True), ((3, 4), {}, False)])
def test_flex_attention_equals_sdpa(grid, opts, causal):
    pe = make(dims=len(grid), **opts)
    n = 1 + math.prod(grid)
    q, k, v = (torch.randn(2, 3, n, 8) for _ in range(3))
    with torch.no_grad():
        out = flex.attention(q, k, v, pe, grid, num_prefix=1, causal=causal, compiled=False)
        mask = pe(grid, num_prefix=1).bias + (ndpe.causal_mask(n) if causal else 0)
        ref = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_compiled_table_refuses_positions_outside_the_grid():
    """Under torch.compile the table spans the grid; positions beyond it fail loudly, not silently."""
    torch._dynamo.reset()
    pe = make(dims=1).eval()
    compiled = torch.compile(lambda pos: pe((6,), positions=pos).bias, fullgraph=True, dynamic=False)
    coords = pe.coords((6,))
    with torch.no_grad():
        torch.testing.assert_close(compiled(coords), pe((6,)).bias)
        with pytest.raises(RuntimeError, match="integers within the grid"):
            compiled(coords * 2)


def test_fractional_positions_over_budget_refused():
    pe = make(dims=1)
    previous = ndpe.set_bias_budget(10 ** 6)
    try:
        pe((20,))  # the table path fits
        with pytest.raises(MemoryError, match="per pair"):
            pe(positions=torch.arange(20.0)[:, None] * 0.5)
    finally:
        ndpe.set_bias_budget(previous)


@pytest.mark.parametrize("dims,opts,exc,fragment", [
    (2, {"style": "t5"}, ValueError, "style must be one of"),
    (2, {"log_distance": True}, ValueError, "apply to style='dynamic'"),
    (2, {"norm": True}, ValueError, "apply to style='dynamic'"),
    (1, {"style": "dynamic", "train_shape": 8}, ValueError, "train_shape applies to style='swin'"),
    (2, {"train_shape": (4, 0)}, ValueError, "train_shape must be >= 1"),
    (2, {"train_shape": (4, 4, 4)}, ValueError, "one per axis"),
    (2, {"train_shape": 4.5}, TypeError, "train_shape must hold ints"),
    (2, {"mlp_hidden": 0}, ValueError, "mlp_hidden must be a positive int"),
    (2, {"depth": 0}, ValueError, "depth must be a positive int"),
    (1, {"style": "dynamic", "norm": "yes"}, TypeError, "norm must be a bool"),
])
def test_bad_options(dims, opts, exc, fragment):
    with pytest.raises(exc, match=fragment):
        ndpe.make(dims=dims, kind="cpb", dim=16, heads=2, **opts)


@pytest.mark.parametrize("window", [(2, 2), (4, 3)])
def test_relu_and_dropout_equal_timm_rel_pos_mlp(window):
    """``style="dynamic"``, ``log_distance=True``, ``depth=1``, ``act="relu"``, ``dropout=0.125`` is timm's
    ``RelPosMlp`` (MaxViT's ``rel_pos_type="mlp"``, mode ``"cr"``) with copied weights; SiLU (the dynamic style's
    default) is not; the dropout acts in training only."""
    from timm.layers.pos_embed_rel import RelPosMlp

    torch.manual_seed(0)
    ref = RelPosMlp(window, num_heads=3, hidden_dim=32).eval()
    opts = dict(style="dynamic", log_distance=True, depth=1, mlp_hidden=32, dropout=0.125)
    pe, silu = make(act="relu", perturb=False, **opts).eval(), make(perturb=False, **opts).eval()
    with torch.no_grad():
        for theirs in (ref.mlp.fc1, ref.mlp.fc2):  # large enough that the activation matters
            theirs.weight.normal_(0.0, 2.0 / theirs.weight.shape[1] ** 0.5)
        for ours in (pe, silu):
            for i, theirs in ((0, ref.mlp.fc1), (-1, ref.mlp.fc2)):
                ours.mlp[i].weight.copy_(theirs.weight)
                ours.mlp[i].bias.copy_(theirs.bias)
        assert_tells_apart(pe(window).bias, silu(window).bias, ref.get_bias()[0], rtol=1.3e-6, atol=1e-5)
        assert [type(m).__name__ for m in pe.mlp] == ["Linear", "ReLU", "Dropout", "Linear"]
        pe.train()
        assert not torch.equal(pe(window).bias, pe(window).bias)
