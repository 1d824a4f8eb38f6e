"""onehot_pixel (Liu et al. 2018 supervised coordinate regression) and the paper's conv nets in models/conv.py."""
from __future__ import annotations

import numpy as np
import pytest
import torch

from models import build_model
from models.conv import ConvNet
from train.data import DATASETS, build_dataset
from train.data.coord import OneHotPixel, onehot_splits


def positions(split_mode, seed=0, **opts):
    return {s: OneHotPixel(s, seed=seed, split_mode=split_mode, **opts).positions for s in ("train", "val", "test")}


@pytest.mark.parametrize("split_mode,n_test", [("uniform", 819), ("quadrant", 1024)])
def test_split_sizes_and_disjoint(split_mode, n_test):
    pos = positions(split_mode)
    assert len(pos["test"]) == n_test >= 512
    assert sum(len(v) for v in pos.values()) == 64 * 64
    assert len(pos["val"]) == (4096 - n_test) // 10
    keys = {s: {tuple(p) for p in v} for s, v in pos.items()}
    assert all(len(keys[s]) == len(pos[s]) for s in keys)
    assert not (keys["train"] & keys["val"]) and not (keys["train"] & keys["test"]) and not (keys["val"] & keys["test"])


def test_quadrant_test_is_the_fourth_quadrant():
    pos = positions("quadrant")
    assert (pos["test"] >= 32).all()
    assert not (pos["train"] >= 32).all(axis=1).any() and not (pos["val"] >= 32).all(axis=1).any()


def test_paper_margin_keeps_56x56_centres():
    pos = positions("quadrant", margin=4)
    assert sum(len(v) for v in pos.values()) == 56 * 56 and len(pos["test"]) == 28 * 28
    assert min(v.min() for v in pos.values()) == 4 and max(v.max() for v in pos.values()) == 59


@pytest.mark.parametrize("split_mode", ["uniform", "quadrant"])
def test_item_is_one_hot_and_target_its_pixel(split_mode):
    data = build_dataset("onehot_pixel", "test", split_mode=split_mode)
    for i in (0, len(data) // 2, len(data) - 1):
        image, target = data[i]
        row, col = (int(v) for v in data.positions[i])
        assert image.shape == (1, 64, 64) and image.sum() == 1 and image[0, row, col] == 1
        torch.testing.assert_close(target, torch.tensor([row, col]) * 2.0 / 63 - 1)
    assert data.num_classes == 2 and DATASETS["onehot_pixel"].task == "regress"
    image, target = OneHotPixel("train", split_mode=split_mode)[0]
    assert target.min() >= -1 and target.max() <= 1


def test_deterministic_given_seed():
    for mode in ("uniform", "quadrant"):
        a, b = onehot_splits(64, mode, 3), onehot_splits(64, mode, 3)
        assert all(np.array_equal(a[s], b[s]) for s in a)
    a, b = onehot_splits(64, "uniform", 0), onehot_splits(64, "uniform", 1)
    assert not np.array_equal(a["test"], b["test"])


def test_bad_options():
    with pytest.raises(ValueError, match="split_mode"):
        OneHotPixel("train", split_mode="corner")
    with pytest.raises(ValueError, match="margin"):
        OneHotPixel("train", margin=-1)


@pytest.mark.parametrize("arch,add_coords", [("coordconv_regressor", True), ("coordconv_regressor", False),
                                             ("conv_uniform", False), ("conv_quadrant", False), ("conv_quadrant", True)])
def test_paper_archs_build_and_run(arch, add_coords):
    model = build_model({"name": "conv", "num_classes": 2, "arch": arch, "add_coords": add_coords})
    out = model(torch.zeros(3, 1, 64, 64))
    assert out.shape == (3, 2)
    out.sum().backward()
    assert model(torch.zeros(2, 1, 48, 80)).shape == (2, 2)


def test_paper_arch_layers():
    cc = ConvNet(num_classes=2, arch="coordconv_regressor", add_coords=True)
    convs = [m for m in cc.modules() if isinstance(m, torch.nn.Conv2d)]
    assert [m.kernel_size[0] for m in convs] == [1, 1, 1, 3, 3] and convs[0].in_channels == 3
    assert not any(isinstance(m, (torch.nn.ReLU, torch.nn.BatchNorm2d)) for m in cc.modules())
    assert any(isinstance(m, torch.nn.AdaptiveMaxPool2d) for m in cc.modules())
    q = ConvNet(num_classes=2, arch="conv_quadrant")
    assert [m.stride[0] for m in q.modules() if isinstance(m, torch.nn.Conv2d)] == [2, 1, 1, 2, 2, 2, 1, 2, 1]
    with pytest.raises(ValueError, match="channels"):
        ConvNet(num_classes=2, arch="conv_uniform", channels=(8,))
    with pytest.raises(ValueError, match="arch"):
        ConvNet(num_classes=2, arch="resnet")


def test_default_arch_unchanged():
    torch.manual_seed(0)
    a = ConvNet(num_classes=2, add_coords=True)
    torch.manual_seed(0)
    b = ConvNet(num_classes=2, channels=(16, 32, 32), add_coords=True)
    assert [p.shape for p in a.parameters()] == [p.shape for p in b.parameters()]
    assert all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters()))


def test_coordconv_regressor_represents_the_exact_solution():
    """Linear 1x1/3x3 stack + global max pool: channel k = A * (hot - 1) + coord_k peaks at the hot pixel."""
    model = ConvNet(num_classes=2, arch="coordconv_regressor", add_coords=True).eval()
    convs = [m for m in model.modules() if isinstance(m, torch.nn.Conv2d)]
    big = 10.0
    with torch.no_grad():
        for m in convs:
            m.weight.zero_()
            m.bias.zero_()
        for m in convs[:4]:  # carry (hot, row, col) through on channels 0..2 (centre tap)
            k = m.kernel_size[0] // 2
            for c in range(3):
                m.weight[c, c, k, k] = 1.0
        last = convs[4]
        for out, coord in ((0, 1), (1, 2)):
            last.weight[out, 0, 1, 1], last.weight[out, coord, 1, 1], last.bias[out] = big, 1.0, -big
    for split_mode in ("uniform", "quadrant"):
        data = build_dataset("onehot_pixel", "test", split_mode=split_mode)
        images, targets = (torch.stack(t) for t in zip(*[data[i] for i in range(0, len(data), 7)]))
        with torch.no_grad():
            torch.testing.assert_close(model(images), targets, atol=1e-5, rtol=0)


def _hot_pixel_wins(model, rows, cols):
    """Per image, whether the hot pixel is the unique argmax of both pre-pool output maps (margin > 1e-3)."""
    images = torch.zeros(len(rows), 1, 64, 64)
    images[torch.arange(len(rows)), 0, rows, cols] = 1.0
    pre_pool = torch.nn.Sequential(*list(model.features)[:-2])  # drop the global max pool and the flatten
    with torch.no_grad():
        maps = pre_pool(images).float().flatten(2)  # (n, 2, 4096)
    hot = maps[torch.arange(len(rows)), :, rows * 64 + cols]  # (n, 2)
    others = maps.clone()
    others[torch.arange(len(rows)), :, rows * 64 + cols] = -float("inf")
    return (hot > others.amax(-1) + 1e-3).all(dim=1)


@pytest.mark.parametrize("seed", [0, 1, 2, 3, 1234])
def test_coordconv_value_init_makes_the_hot_pixel_win_the_max(seed):
    """The property that makes training reliable: at init the hot pixel is the max of both output maps.

    With the paper's init (value_gain=0) the max sits elsewhere for most images, so no gradient reaches
    the value weights (see the models/conv.py docstring)."""
    gen = torch.Generator().manual_seed(seed)
    rows, cols = torch.randint(0, 64, (256,), generator=gen), torch.randint(0, 64, (256,), generator=gen)
    rows[:4], cols[:4] = torch.tensor([0, 0, 63, 63]), torch.tensor([0, 63, 0, 63])  # the corners too
    torch.manual_seed(seed)
    model = ConvNet(num_classes=2, arch="coordconv_regressor", add_coords=True).eval()
    assert bool(_hot_pixel_wins(model, rows, cols).all())
    images = torch.zeros(4, 1, 64, 64)
    images[torch.arange(4), 0, rows[:4], cols[:4]] = 1.0
    with torch.no_grad():  # and every output starts at 0 (the value path cancels its bias)
        torch.testing.assert_close(model(images), torch.zeros(4, 2))
    torch.manual_seed(seed)
    paper = ConvNet(num_classes=2, arch="coordconv_regressor", add_coords=True, value_gain=0).eval()
    assert float(_hot_pixel_wins(paper, rows, cols).float().mean()) < 0.5


def test_value_gain_only_for_the_coordconv_regressor():
    with pytest.raises(ValueError, match="value_gain"):
        ConvNet(num_classes=2, arch="conv_uniform", value_gain=10.0)
    with pytest.raises(ValueError, match="value_gain"):
        ConvNet(num_classes=2, arch="coordconv_regressor", add_coords=False, value_gain=10.0)
    with pytest.raises(ValueError, match="value_gain"):
        ConvNet(num_classes=2, arch="coordconv_regressor", add_coords=True, value_gain=-1.0)
