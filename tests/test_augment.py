"""Position augmentation: CAPE and randomized positions. Eval is exact, ranges hold, seeds reproduce."""
from __future__ import annotations

import math

import pytest
import torch

import ndpe
from ndpe.augment import CAPE, RandomPositions, make_augment

COORD_KINDS = ["sinusoidal", "rope", "fourier", "coord", "alibi"]


def fields(out: ndpe.PosOut):
    named = {"add": out.add, "cat": out.cat, "bias": out.bias}
    if out.rot is not None:
        named["cos"], named["sin"] = out.rot
    return {k: v for k, v in named.items() if v is not None}


def kind_param(kind):
    return pytest.param(kind, marks=pytest.mark.skipif(kind not in ndpe.available(),
                                                       reason=f"kind {kind!r} not registered yet"))


@pytest.mark.parametrize("augment", ["cape", "random"])
@pytest.mark.parametrize("kind", [kind_param(k) for k in COORD_KINDS])
def test_make_with_augment_trains_augmented_and_evals_exact(kind, augment):
    torch.manual_seed(0)
    plain = ndpe.make(dims=2, kind=kind, dim=32, heads=2)
    torch.manual_seed(0)
    aug = ndpe.make(dims=2, kind=kind, dim=32, heads=2, augment=augment)
    grid = (3, 4)
    ref = fields(plain.eval()(grid, num_prefix=1))
    trained = fields(aug.train()(grid, num_prefix=1))
    assert any(not torch.allclose(trained[k], ref[k]) for k in ref), "training mode must augment"
    evaluated = fields(aug.eval()(grid, num_prefix=1))
    for k in ref:
        assert torch.equal(evaluated[k], ref[k]), f"eval must give exactly the un-augmented {k}"


@pytest.mark.parametrize("kind", [kind_param("rope"), kind_param("sinusoidal"), kind_param("alibi")])
def test_per_sample_augmentation_through_attention(kind):
    pe = ndpe.make(dims=2, kind=kind, dim=32, heads=2, augment={"name": "cape", "batch_size": 3}).train()
    attn = ndpe.Attention(32, heads=2)
    pos = pe((3, 4), num_prefix=1)
    x = ndpe.apply_tokens(torch.randn(3, 13, 32 - pe.cat_dim), pos)
    assert attn(x, pos).shape == (3, 13, 32)
    t = next(iter(fields(pos).values()))
    assert t.shape[0] == 3 and not torch.allclose(t[0], t[1]), "each sample gets its own draw"


def test_eval_mode_is_identity_on_positions():
    """The base calls the augmentation only in training mode: eval positions are the grid's, bit for bit."""
    seen = []

    class Spy(torch.nn.Module):
        def forward(self, positions, grid_shape):
            seen.append(positions)
            return positions + 1

    pe = ndpe.make(dims=1, kind="alibi", dim=8, heads=1, augment=Spy())
    pe.eval()((5,))
    assert not seen
    pe.train()((5,))
    assert len(seen) == 1


def pixel_grid(grid):
    return ndpe.grid_coords(grid, "pixel")


def test_cape_global_shift_range_per_sample_per_axis():
    aug = CAPE(dims=2, max_global_shift=(0.3, 2.0), max_local_shift=0.0, max_global_scaling=1.0, batch_size=64)
    p = pixel_grid((3, 5))
    delta = aug(p, (3, 5)) - p  # (64, 15, 2)
    torch.testing.assert_close(delta, delta[:, :1].expand_as(delta))  # one shift per sample and axis
    for a, g in enumerate((0.3, 2.0)):
        assert delta[..., a].abs().max() <= g and delta[..., a].abs().max() > 0.5 * g
    assert delta[:, 0, 0].std() > 0 and not torch.allclose(delta[:, 0, 0], delta[:, 0, 1])  # axes independent


def test_cape_local_shift_is_half_a_step_times_max_local_shift():
    grid = (5, 9)
    p = pixel_grid(grid)  # steps 2/4 and 2/8
    aug = CAPE(dims=2, max_global_shift=0.0, max_local_shift=1.0, max_global_scaling=1.0, batch_size=32)
    delta = aug(p, grid) - p
    for a, step in enumerate((0.5, 0.25)):
        bound = step / 2
        assert delta[..., a].abs().max() <= bound + 1e-6 and delta[..., a].abs().max() > 0.8 * bound
    assert delta[:, 0].std() > 0 and not torch.allclose(delta[:, 0], delta[:, 1])  # per token


def test_cape_local_shift_keeps_token_order_in_index_units():
    aug = CAPE(dims=1, max_global_shift=0.0, max_local_shift=1.0, max_global_scaling=1.0, batch_size=16)
    p = aug(torch.arange(50.0)[:, None], (50,))
    assert (p.diff(dim=1) >= 0).all()


def test_cape_global_scaling_one_factor_for_all_axes():
    s = 1.4
    aug = CAPE(dims=3, max_global_shift=0.0, max_local_shift=0.0, max_global_scaling=s, batch_size=64)
    p = ndpe.grid_coords((2, 3, 4)) + 1.0  # nonzero everywhere
    ratio = aug(p, (2, 3, 4)) / p
    torch.testing.assert_close(ratio, ratio[:, :1, :1].expand_as(ratio))
    assert ratio.min() >= 1 / s - 1e-6 and ratio.max() <= s + 1e-6
    assert ratio.log().abs().max() > 0.5 * math.log(s)


def test_cape_batched_input_gets_per_sample_draws_and_unbatched_stays_unbatched():
    aug = CAPE(dims=1)
    p = torch.arange(6.0)[:, None]
    assert aug(p, (6,)).shape == (6, 1)
    out = aug(torch.stack([p, p, p]), (6,))
    assert out.shape == (3, 6, 1) and not torch.allclose(out[0], out[1])
    with pytest.raises(ValueError, match="batch of 3 but batch_size=2"):
        CAPE(dims=1, batch_size=2)(torch.stack([p, p, p]), (6,))


@pytest.mark.parametrize("cls,opts", [(CAPE, {}), (RandomPositions, {"max_len": 64})])
def test_seeded_runs_reproduce(cls, opts):
    p = ndpe.grid_coords((4, 5))
    aug = cls(dims=2, batch_size=2, **opts)
    torch.manual_seed(7)
    a = aug(p, (4, 5))
    torch.manual_seed(7)
    assert torch.equal(aug(p, (4, 5)), a)
    gen = cls(dims=2, batch_size=2, generator=torch.Generator().manual_seed(3), **opts)(p, (4, 5))
    again = cls(dims=2, batch_size=2, generator=torch.Generator().manual_seed(3), **opts)(p, (4, 5))
    assert torch.equal(gen, again) and not torch.equal(gen, a)


def test_random_positions_sorted_distinct_integers_per_axis():
    grid, max_len = (4, 6), (10, 50)
    aug = RandomPositions(dims=2, max_len=max_len, batch_size=200)
    out = aug(ndpe.grid_coords(grid), grid)  # (200, 24, 2)
    assert torch.equal(out, out.round())
    axes = out.reshape(200, *grid, 2)
    rows, cols = axes[:, :, 0, 0], axes[:, 0, :, 1]  # (200, 4), (200, 6)
    torch.testing.assert_close(axes[..., 0], rows[:, :, None].expand(200, *grid))  # row value depends on row only
    torch.testing.assert_close(axes[..., 1], cols[:, None, :].expand(200, *grid))
    for ax, m in ((rows, 10), (cols, 50)):
        assert (ax.diff(dim=1) > 0).all() and ax.min() >= 0 and ax.max() <= m - 1
    assert rows.unique(dim=0).shape[0] > 50  # per-sample draws
    # uniform over [0, max_len): every value is drawn, the mean sits near the middle
    assert rows.unique().numel() == 10 and abs(cols.mean().item() - 24.5) < 2.0


def test_random_positions_keep_the_grid_units():
    """A pixel grid keeps its origin and step: index r becomes -1 + r * step."""
    aug = RandomPositions(dims=1, max_len=40)
    out = aug(pixel_grid((5,)), (5,))
    r = (out + 1) / 0.5
    assert torch.allclose(r, r.round(), atol=1e-5) and r.min() >= 0 and r.max() <= 39


def test_random_positions_errors():
    with pytest.raises(ValueError, match="exceeds max_len"):
        RandomPositions(dims=1, max_len=4)(torch.arange(5.0)[:, None], (5,))
    with pytest.raises(ValueError, match="needs grid_shape"):
        RandomPositions(dims=1)(torch.arange(5.0)[:, None], None)


def test_relative_accepts_random_positions_not_cape():
    pe = ndpe.make(dims=1, kind="relative", dim=16, heads=2, max_distance=4, augment="random").train()
    assert pe((6,)).bias.shape == (2, 6, 6)
    with pytest.raises(ValueError, match="needs integer positions"):  # refused when attached, not at first use
        pe.set_augment(make_augment("cape", dims=1))


def test_make_augment_specs():
    assert isinstance(make_augment("cape", dims=2), CAPE)
    assert isinstance(make_augment("random", dims=1), RandomPositions)
    cape = make_augment({"name": "cape", "max_global_shift": 3.0, "max_global_scaling": 2.0}, dims=2)
    assert cape.max_global_shift == (3.0, 3.0) and cape.max_global_scaling == 2.0
    module = CAPE(dims=1)
    assert make_augment(module, dims=1) is module


@pytest.mark.parametrize("spec,exc,fragment", [
    ("jitter", ValueError, "unknown augment 'jitter'"),
    ({"name": "cape", "max_shift": 1.0}, TypeError, "valid options"),
    ({"max_global_shift": 1.0}, TypeError, "'name' key"),
    (3, TypeError, "'name' key"),
    ({"name": "cape", "max_global_shift": -1.0}, ValueError, "max_global_shift must be finite and >= 0"),
    ({"name": "cape", "max_local_shift": (1.0, 1.0, 1.0)}, ValueError, "one per axis"),
    ({"name": "cape", "max_global_scaling": 0.5}, ValueError, "max_global_scaling must be finite and >= 1"),
    ({"name": "cape", "batch_size": 0}, ValueError, "batch_size must be None or a positive int"),
    ({"name": "random", "max_len": 0}, ValueError, "max_len must be a positive int"),
    ({"name": "random", "max_len": (8, 8, 8)}, ValueError, "max_len must be a positive int"),
])
def test_bad_specs(spec, exc, fragment):
    with pytest.raises(exc, match=fragment):
        make_augment(spec, dims=2)
