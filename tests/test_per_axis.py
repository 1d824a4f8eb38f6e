"""``ndpe.PerAxis``: each axis its own kind and channels, pinned against merging the per-axis encodings by hand
(``ndpe.merge`` of each encoding fed its axis's coordinates, docs/guide.md Q5); the swapped-layout error; refusals."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ndpe
from ndpe import grid_coords
from ndpe.contract import pad_prefix


def assert_same(out: ndpe.PosOut, ref: ndpe.PosOut) -> None:
    for name in ("add", "cat", "bias", "num_prefix", "pairing"):
        a, b = getattr(out, name), getattr(ref, name)
        assert (a is None and b is None) or (torch.equal(a, b) if isinstance(a, torch.Tensor) else a == b), name
    assert (out.rot is None) == (ref.rot is None)
    if out.rot is not None:
        assert all(torch.equal(a, b) for a, b in zip(out.rot, ref.rot))


def seeded(build):
    torch.manual_seed(0)
    return build()


@pytest.mark.parametrize("grid, num_prefix", [((16, 8), 0), ((5, 8), 1), ((1, 8), 2)])
def test_audio_equals_the_guides_manual_merge(grid, num_prefix):
    """RoPE on time, a learned vector per frequency bin: the recipe of guide Q5, outputs equal."""
    pe = seeded(lambda: ndpe.PerAxis({"time": "rope", "freq": {"kind": "learned", "size": 8}}, dim=64, heads=2))
    time, freq = seeded(lambda: (ndpe.make(dims=2, kind="rope", dim=64, heads=2, axis_dims=(32, 0)),
                                 ndpe.make(dims=1, kind="learned", dim=64, heads=2, grid_shape=(8,))))
    ref = ndpe.merge(time(grid), freq(positions=grid_coords(grid)[:, 1:]))
    assert_same(pe(grid, num_prefix=num_prefix), pad_prefix(ref, num_prefix))
    assert torch.equal(pe.encodings["freq"].table, freq.table)  # the same seed, the same table: no draw in between


def test_video_sinusoidal_frames_and_rope_on_space_equal_the_manual_merge():
    pe = ndpe.PerAxis({"frames": "sinusoidal", "rows": "rope", "cols": "rope"}, dim=96, heads=2)
    frames = ndpe.make(dims=1, kind="sinusoidal", dim=96)
    space = ndpe.make(dims=2, kind="rope", dim=96, heads=2)
    coords = grid_coords((4, 3, 5))
    assert_same(pe((4, 3, 5), num_prefix=1),
                pad_prefix(ndpe.merge(frames(positions=coords[:, :1]), space(positions=coords[:, 1:])), 1))
    assert list(pe.encodings) == ["frames", "rows_cols"]


def test_channels_of_adding_axes_are_blocks_of_the_token_and_of_rotating_axes_axis_dims():
    pe = ndpe.PerAxis({"rows": {"kind": "sinusoidal", "channels": 16}, "cols": {"kind": "sinusoidal", "channels": 32}},
                      dim=64, heads=4)
    coords = grid_coords((3, 5))
    rows = ndpe.make(dims=1, kind="sinusoidal", dim=16)(positions=coords[:, :1]).add
    cols = ndpe.make(dims=1, kind="sinusoidal", dim=32)(positions=coords[:, 1:]).add
    assert torch.equal(pe((3, 5)).add, F.pad(torch.cat([rows, cols], -1), (0, 16)))  # the last 16: no encoding

    rope = ndpe.PerAxis({"time": {"kind": "rope", "channels": 12}, "freq": {"kind": "rope", "channels": 4}},
                        dim=64, heads=4)
    assert_same(rope((6, 3)), ndpe.make(dims=2, kind="rope", dim=64, heads=4, axis_dims=(12, 4))((6, 3)))


def test_bias_on_one_axis_depends_on_that_axis_only():
    pe = ndpe.PerAxis({"time": "alibi", "freq": {"kind": "sinusoidal"}}, dim=32, heads=4)
    alibi = ndpe.make(dims=1, kind="alibi", dim=32, heads=4)
    sin = ndpe.make(dims=1, kind="sinusoidal", dim=32)
    coords = grid_coords((4, 3))
    assert_same(pe((4, 3)), ndpe.merge(alibi(positions=coords[:, :1]), sin(positions=coords[:, 1:])))


def test_explicit_positions_give_each_axis_its_columns():
    pe = ndpe.PerAxis({"time": "rope", "freq": {"kind": "learned", "size": 4}}, dim=32, heads=2)
    assert_same(pe(positions=grid_coords((6, 4))), pe((6, 4)))
    assert_same(pe((6, 4), positions=grid_coords((6, 4))), pe((6, 4)))


def test_a_resized_table_follows_its_axis_and_the_table_trains():
    pe = ndpe.PerAxis({"time": {"kind": "learned", "grid_shape": (8,), "resize": "linear"}, "freq": "rope"},
                      dim=32, heads=2)
    table = pe.encodings["time"]
    assert torch.equal(pe((16, 3)).add, table((16,)).add.repeat_interleave(3, 0))
    pe((8, 3)).add.sum().backward()
    assert table.table.grad is not None and sorted(pe.state_dict()) == ["encodings.time.table"]


@pytest.mark.parametrize("grid, hint", [
    ((8, 16), "as if given (freq, time): rearrange the input, e.g. einops.rearrange(x, '... freq time -> ... time freq')"),
    ((5, 7), "the grid (time, freq) is (5, 7)"),  # no order fits: the layout alone
])
def test_a_swapped_non_square_input_is_one_line_naming_the_layout(grid, hint):
    pe = ndpe.PerAxis({"time": "rope", "freq": {"kind": "learned", "size": 8}}, dim=32, heads=2)
    with pytest.raises(ValueError, match="axis 'freq' has .* positions but is built for size=8") as err:
        pe(grid)
    assert hint in str(err.value) and "\n" not in str(err.value)


def axes(**kw):
    return lambda: ndpe.PerAxis(kw, dim=32, heads=2)


@pytest.mark.parametrize("build, error, fragment", [
    (axes(time="rope"), ValueError, "2 or 3 named axes"),
    (lambda: ndpe.PerAxis(["rope", "rope"], dim=32), ValueError, "2 or 3 named axes"),
    (axes(time="rope", freq=3), TypeError, "a kind name or a dict with 'kind'"),
    (axes(time="ropee", freq="rope"), ValueError, "unknown kind 'ropee'"),
    (axes(time={"kind": "rope", "tehta": 1.0}, freq="rope"), TypeError, "unknown option(s) ['tehta']"),
    (axes(time="rope", freq="liere"), ValueError, "computes its term from whole sequences"),
    (axes(time="rope", freq={"kind": "alibi", "channels": 8}), ValueError, "takes no channels"),
    (axes(time="rope", freq="string"), ValueError, "q and k rotate once"),
    (axes(time={"kind": "rope", "theta": 100.0}, freq="rope"), ValueError, "give them the same options"),
    (axes(time={"kind": "rope", "channels": 8}, freq="rope"), ValueError, "every rotating axis"),
    (axes(time={"kind": "sinusoidal", "channels": 24}, freq={"kind": "sinusoidal", "channels": 16}), ValueError,
     "together at most dim"),
    (axes(time="rope", freq={"kind": "learned", "size": 0}), ValueError, "axis 'freq' size must be a positive int"),
])
def test_bad_axes_are_one_line_errors(build, error, fragment):
    with pytest.raises(error) as err:
        build()
    assert fragment in str(err.value) and "\n" not in str(err.value)


def test_bad_calls_are_one_line_errors():
    pe = ndpe.PerAxis({"time": "rope", "freq": {"kind": "learned", "size": 4}}, dim=32, heads=2)
    with pytest.raises(ValueError, match=r"has 3 axes but the encoding has dims=2, \(time, freq\)"):
        pe((2, 4, 4))
    with pytest.raises(ValueError, match="needs one token axis"):
        pe((2, 4), past=3)
    with pytest.raises(ValueError, match="axis 'time' of the grid"):
        ndpe.PerAxis({"time": {"kind": "learned", "grid_shape": (4,)}, "freq": "rope"}, dim=32, heads=2)((9, 2))


def test_building_it_draws_from_the_seed_as_its_encodings_do():
    """How each kind acts is read off an example; that example must not use the seed's stream."""
    torch.manual_seed(0)
    ndpe.PerAxis({"time": "fourier", "freq": {"kind": "learned", "size": 4}}, dim=32, heads=2)
    after = torch.rand(1)
    torch.manual_seed(0)
    ndpe.make(dims=1, kind="fourier", dim=16), ndpe.make(dims=1, kind="learned", dim=16, grid_shape=(4,))  # 16 each
    assert torch.equal(torch.rand(1), after)


def test_in_attention_and_the_audio_model():
    pe = ndpe.PerAxis({"time": "rope", "freq": {"kind": "learned", "size": 4}}, dim=32, heads=2)
    pos = pe((6, 4), num_prefix=1)
    x = ndpe.apply_tokens(torch.randn(2, 25, 32), pos)
    assert ndpe.Attention(32, 2)(x, pos).shape == (2, 25, 32)

    from models import build_model

    model = build_model({"name": "audio", "num_classes": 3, "dim": 32, "heads": 2, "depth": 1, "patch_size": [4, 8],
                         "pe": {"kind": {"freq": {"kind": "learned", "size": 2}, "time": "rope"}}})  # any order
    assert model.encoder.pe.axis_names == ("time", "freq")
    assert model(torch.randn(2, 1, 16, 40)).shape == model(torch.randn(2, 1, 16, 80)).shape == (2, 3)  # longer audio
    with pytest.raises(ValueError, match="axis 'freq' has 5 positions but is built for size=2"):
        model(torch.randn(2, 1, 40, 16))  # (frames, n_mels) given for (n_mels, frames)


@pytest.mark.parametrize("pe, fragment", [
    ({"kind": {"time": "rope"}}, "names each axis of this model's grid ('time', 'freq') once"),
    ({"kind": {"time": "rope", "freq": "rope"}, "options": {"theta": 100.0}}, "inside it"),
])
def test_the_audio_model_refuses_a_per_axis_pe_of_other_axes(pe, fragment):
    from models import build_model

    with pytest.raises(ValueError) as err:
        build_model({"name": "audio", "num_classes": 3, "dim": 32, "heads": 2, "depth": 1, "pe": pe})
    assert fragment in str(err.value)


def test_a_config_takes_a_per_axis_kind_and_checks_it_at_load():
    from train.config import ConfigError, load_config

    cfg = load_config("configs/audio_tones.yaml", ["model.pe.kind={time: rope, freq: {kind: learned, size: 4}}"])
    assert cfg.model.pe.kind == {"time": "rope", "freq": {"kind": "learned", "size": 4}}
    with pytest.raises(ConfigError, match="model.pe.kind: axis 'freq': kind 'cope'"):
        load_config("configs/audio_tones.yaml", ["model.pe.kind={time: rope, freq: cope}"])


def test_viz_draws_it(tmp_path):
    pytest.importorskip("matplotlib")
    from ndpe.cli import viz_main

    paths = viz_main(["--axis", "time=rope", "--axis", "freq=learned", "--grid", "8", "4", "--dim", "32",
                      "--heads", "2", "--figures", "table", "similarity", "--out", str(tmp_path)])
    assert [p.name for p in paths] == ["time=rope+freq=learned_2d_table.png", "time=rope+freq=learned_2d_similarity.png"]
