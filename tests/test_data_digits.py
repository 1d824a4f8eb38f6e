"""Growth modes of the image datasets: ``digits`` (sklearn 8x8) and ``shapes``, zoom vs canvas."""
from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from train.data import DATASETS, build_dataset
from train.data.digits import SPLIT_SEED, SPLIT_SIZES, Digits, load, split_entropy, split_indices

pytest.importorskip("sklearn")


def down(x: torch.Tensor, size: int = 32) -> torch.Tensor:
    return F.interpolate(x[None], size=(size, size), mode="area")[0]


def foreground(x: torch.Tensor, threshold: float = 0.25) -> int:
    """Pixels brighter than ``threshold`` (in [0, 1]) in any channel."""
    return int(((x * 0.5 + 0.5) > threshold).any(0).sum())


# ------------------------------------------------------------------ digits: interface, splits
def test_digits_items_and_registry():
    assert DATASETS["digits"].options == {"image_size": 32, "growth": "zoom", "digit_size": 32, "channels": 3,
                                          "split_seed": None}
    data = build_dataset("digits", "train")
    assert (data.domain, data.task, data.num_classes) == ("image", "classify", 10)
    x, y = data[0]
    assert x.shape == (3, 32, 32) and x.dtype == torch.float32 and isinstance(y, int) and 0 <= y < 10
    assert -1 <= x.min() and x.max() <= 1 and torch.equal(x[0], x[2])  # grey, normalised with mean = std = 0.5
    assert build_dataset("digits", "test", channels=1, image_size=48)[0][0].shape == (1, 48, 48)
    with pytest.raises(IndexError):
        data[len(data)]


def test_digits_labels_match_sklearn():
    images, labels = load()
    data = Digits("val", seed=3)
    for k in (0, 7, 179):
        i = data.indices[k]
        assert data[k][1] == labels[i]
        small = down(data[k][0], 8)[0].numpy() * 0.5 + 0.5  # bilinear blur: close, not equal
        assert np.corrcoef(small.ravel(), images[i].ravel())[0, 1] > 0.95 and np.abs(small - images[i]).mean() < 0.1


def check_disjoint_stratified(idx: dict) -> None:
    assert {s: len(v) for s, v in idx.items()} == SPLIT_SIZES and sum(SPLIT_SIZES.values()) == 1797
    assert len(np.unique(np.concatenate(list(idx.values())))) == 1797  # disjoint, complete
    labels = load()[1]
    for split, size in SPLIT_SIZES.items():
        counts = np.bincount(labels[idx[split]], minlength=10)
        assert counts.min() >= 0.09 * size and counts.max() <= 0.11 * size  # ~10 % per class


def test_digits_split_follows_the_data_seed():
    splits = {seed: {s: Digits(s, seed=seed).indices for s in SPLIT_SIZES} for seed in (0, 1, 2)}
    for seed, idx in splits.items():
        check_disjoint_stratified(idx)
        np.testing.assert_array_equal(idx["test"], Digits("test", seed=seed).indices)  # a pure function of the seed
    for a, b in ((0, 1), (1, 2), (0, 2)):
        for split in SPLIT_SIZES:
            overlap = len(np.intersect1d(splits[a][split], splits[b][split])) / SPLIT_SIZES[split]
            assert overlap < 0.8  # other images, not a shuffle of the same ones
    assert not np.array_equal(Digits("test", seed=0).indices, split_indices()["test"])  # not the fixed split
    assert split_entropy(5, 7) == 7 and split_entropy(5, None) != split_entropy(6, None)


def test_digits_splits_fixed_disjoint_stratified():
    idx = split_indices()
    check_disjoint_stratified(idx)
    assert SPLIT_SIZES["test"] >= 512
    for split in ("train", "test"):  # split_seed: the fixed split, whatever the seed
        fixed = [Digits(split, seed=s, split_seed=SPLIT_SEED) for s in (0, 3)]
        np.testing.assert_array_equal(fixed[0].indices, split_indices()[split])
        np.testing.assert_array_equal(fixed[1].indices, split_indices()[split])
        assert torch.equal(fixed[0][5][0], fixed[1][5][0])  # zoom: no per-item randomness


def test_digits_deterministic_and_canvas_offsets_follow_the_seed():
    a = Digits("test", growth="canvas", image_size=64)
    assert torch.equal(a[3][0], Digits("test", growth="canvas", image_size=64)[3][0])
    offsets = {a.offset(i) for i in range(50)}
    assert len(offsets) > 30 and all(0 <= r <= 32 and 0 <= c <= 32 for r, c in offsets)
    assert [a.offset(i) for i in range(10)] != [Digits("test", growth="canvas", image_size=64, seed=1).offset(i)
                                                for i in range(10)]
    train = Digits("train", growth="canvas", image_size=32, digit_size=24)  # training sees random offsets too
    assert len({train.offset(i) for i in range(50)}) > 20


# ------------------------------------------------------------------ digits: zoom keeps the scene, canvas the size
@pytest.mark.parametrize("size", [48, 64])
def test_digits_zoom_keeps_the_digit(size):
    small, big = Digits("test"), Digits("test", image_size=size)
    for i in (0, 11, 300):
        (x, y), (xb, yb) = small[i], big[i]
        assert y == yb and xb.shape == (3, size, size)
        assert (down(xb) - x).abs().mean() < 0.05


def test_digits_canvas_keeps_the_object_size():
    assert torch.equal(Digits("test", growth="canvas")[4][0], Digits("test")[4][0])  # 32 px: canvas == zoom
    for i in (0, 11, 300):
        counts = [foreground(Digits("test", growth="canvas", image_size=s)[i][0]) for s in (32, 48, 64, 96)]
        assert max(counts) <= 1.05 * min(counts) and counts[0] > 100
        zoom64 = foreground(Digits("test", image_size=64)[i][0])
        assert zoom64 > 3.5 * counts[0]  # zoom: area grows with the square of the scale
    x = Digits("test", growth="canvas", image_size=64, digit_size=16)[0][0]
    assert foreground(x) < 300 and x.shape == (3, 64, 64)


@pytest.mark.parametrize(
    "opts,words",
    [(dict(growth="stretch"), ["stretch", "zoom", "canvas"]), (dict(growth="canvas", image_size=32, digit_size=40),
                                                               ["digit_size", "image_size"]),
     (dict(image_size=4), ["image_size"]), (dict(channels=2), ["channels"])],
)
def test_digits_errors(opts, words):
    with pytest.raises(ValueError) as info:
        build_dataset("digits", "train", **opts)
    assert all(w in str(info.value) for w in words)


def test_digits_missing_sklearn_names_the_extra(monkeypatch):
    import sys

    load.cache_clear()
    monkeypatch.setitem(sys.modules, "sklearn.datasets", None)  # makes the import fail
    try:
        with pytest.raises(ImportError, match=r"ndpe\[train\]"):
            load()
    finally:
        monkeypatch.undo()
        load.cache_clear()


def test_digits_pickles():
    import pickle

    data = Digits("val", growth="canvas", image_size=48)
    assert torch.equal(data[2][0], pickle.loads(pickle.dumps(data))[2][0])


# ------------------------------------------------------------------ shapes: zoom mode
@pytest.mark.parametrize("size", [48, 64])
def test_shapes_zoom_keeps_the_scene(size):
    small = build_dataset("shapes", "test", size=20, growth="zoom")
    big = build_dataset("shapes", "test", size=20, growth="zoom", image_size=size)
    for i in range(20):
        (x, y), (xb, yb) = small[i], big[i]
        assert y == yb and xb.shape == (3, size, size)
        assert (down(xb) - x).abs().mean() < 0.06  # only edge pixels differ
        assert foreground(xb) > 0.8 * (size / 32) ** 2 * foreground(x)  # objects scale with the image


def test_shapes_zoom_at_32_and_canvas_default_unchanged():
    canvas, zoom = build_dataset("shapes", "val", size=8), build_dataset("shapes", "val", size=8, growth="zoom")
    assert all(torch.equal(canvas[i][0], zoom[i][0]) and canvas[i][1] == zoom[i][1] for i in range(8))
    default64 = build_dataset("shapes", "val", size=8, image_size=64)
    canvas64 = build_dataset("shapes", "val", size=8, image_size=64, growth="canvas")
    assert all(torch.equal(default64[i][0], canvas64[i][0]) for i in range(8))


def test_shapes_canvas_keeps_the_object_size():
    def mean_area(size):
        data = build_dataset("shapes", "test", size=30, image_size=size)
        return np.mean([foreground(data[i][0]) for i in range(30)])

    a32, a64 = mean_area(32), mean_area(64)
    assert 0.85 < a64 / a32 < 1.15


def test_shapes_growth_is_validated():
    with pytest.raises(ValueError, match="growth"):
        build_dataset("shapes", "train", growth="stretch")
