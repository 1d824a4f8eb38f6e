"""Built-in datasets: interface, determinism, balance, larger sizes, and labels that depend on position."""
from __future__ import annotations

import sysconfig
from pathlib import Path

import numpy as np
import pytest
import torch

from train.data import DATASETS, build_dataset
from train.data.shapes import RADIUS
from train.data.text import CHARS, decode, file_split, stdlib_files

# name -> (small options, larger "test size" options, expected item shapes at the small options)
BUILTIN = {
    "copy": (dict(length=5), dict(length=20), [(11,), (11,)]),
    "reverse": (dict(length=5), dict(length=20), [(11,), (11,)]),
    "addition": (dict(length=4), dict(length=16), [(15,), (15,)]),
    "stdlib_lm": (dict(context=32), dict(context=256), [(32,), (32,)]),
    "shapes": (dict(image_size=32), dict(image_size=64), [(3, 32, 32), ()]),
    "tones": (dict(duration=1.0), dict(duration=2.0), [(1, 64, 101), ()]),
    "trajectory": (dict(frames=8), dict(frames=16), [(3, 8, 16, 16), ()]),
    "not_so_clevr": (dict(split_mode="uniform"), dict(image_size=96), [(1, 64, 64), (2,)]),
}
DOMAIN_TASK = {
    "copy": ("text", "tag"), "reverse": ("text", "tag"), "addition": ("text", "tag"), "stdlib_lm": ("text", "lm"),
    "shapes": ("image", "classify"), "tones": ("audio", "classify"), "trajectory": ("video", "classify"),
    "not_so_clevr": ("coord", "regress"),
}  # fmt: skip


def items(data, n=4):
    return [data[i] for i in range(n)]


def same(a, b) -> bool:
    return all(torch.equal(torch.as_tensor(x), torch.as_tensor(y)) for p, q in zip(a, b) for x, y in zip(p, q))


def sized(name, opts, n):
    return {**opts, "size": n} if "size" in DATASETS[name].options else opts


@pytest.mark.parametrize("name", BUILTIN)
def test_interface_and_item_shapes(name):
    opts, _, shapes = BUILTIN[name]
    data = build_dataset(name, "train", **opts)
    assert (data.domain, data.task) == DOMAIN_TASK[name] == (DATASETS[name].domain, DATASETS[name].task)
    x, y = data[0]
    assert [tuple(torch.as_tensor(v).shape) for v in (x, y)] == shapes
    if data.domain == "text":
        assert x.dtype == y.dtype == torch.long and 0 <= x.min() and x.max() < data.vocab_size
        scored = y[y != -100]
        assert len(scored) > 0 and scored.max() < data.num_classes and scored.min() >= 0
    elif data.task == "regress":
        assert x.dtype == y.dtype == torch.float32 and y.shape == (data.num_classes,) and y.abs().max() <= 1
    else:
        assert x.dtype == torch.float32 and isinstance(y, int) and 0 <= y < data.num_classes
        assert -1.5 < x.mean() < 1.5 and x.std() < 5  # normalised
    assert len(data) > 0


@pytest.mark.parametrize("name", BUILTIN)
def test_deterministic_and_differs_across_seeds_and_splits(name):
    opts = BUILTIN[name][0]
    if name == "not_so_clevr":  # items are positions of a split: compare the split's position sets
        sets = {(s, sd): {tuple(c) for c in build_dataset(name, s, seed=sd).centres} for s in ("train", "test") for sd in (0, 1)}
        assert sets[("train", 0)] == {tuple(c) for c in build_dataset(name, "train", seed=0).centres}
        assert sets[("test", 0)] != sets[("test", 1)] and not sets[("train", 0)] & sets[("test", 0)]
        return
    a = items(build_dataset(name, "train", seed=0, **opts))
    assert same(a, items(build_dataset(name, "train", seed=0, **opts)))
    assert not same(a, items(build_dataset(name, "train", seed=1, **opts)))
    assert not same(a, items(build_dataset(name, "val", seed=0, **opts)))
    data = build_dataset(name, "val", **opts)
    assert same([data[3]], [data[3]]) and same([data[2]], items(data, 3)[2:])  # order of access is irrelevant


@pytest.mark.parametrize("name,n", [("shapes", 600), ("trajectory", 600), ("tones", 540)])
def test_labels_are_balanced(name, n):
    data = build_dataset(name, "train", **sized(name, BUILTIN[name][0], n))
    counts = np.bincount([data[i][1] for i in range(n)], minlength=data.num_classes)
    expected = n / data.num_classes
    assert counts.min() > 0.4 * expected and counts.max() < 1.8 * expected, counts


@pytest.mark.parametrize("name", BUILTIN)
def test_larger_sizes_work(name):
    small, large, _ = BUILTIN[name]
    x, y = build_dataset(name, "test", **large)[0]
    x0, _ = build_dataset(name, "test", **small)[0]
    assert x.ndim == x0.ndim and x.numel() > x0.numel()


# ------------------------------------------------------------------ text: naive references
def digits_value(tokens) -> int:
    return int("".join(str(int(t) - 3) for t in reversed(tokens)))  # least significant digit first


@pytest.mark.parametrize("length", [3, 12, 48])
def test_text_targets_match_naive_reference(length):
    for i in range(5):
        tok, tgt = build_dataset("copy", "test", length=length)[i]
        assert tok[length] == 1 and (tok[length + 1 :] == 0).all() and (tgt[: length + 1] == -100).all()
        assert tgt[length + 1 :].tolist() == [int(t) - 3 for t in tok[:length]]
        tok, tgt = build_dataset("reverse", "test", length=length)[i]
        assert tgt[length + 1 :].tolist() == [int(t) - 3 for t in tok[:length]][::-1]
        tok, tgt = build_dataset("addition", "test", length=length)[i]
        a, b = digits_value(tok[:length]), digits_value(tok[length + 1 : 2 * length + 1])
        assert tok[length] == 2 and tok[2 * length + 1] == 1 and (tok[2 * length + 2 :] == 0).all()
        out = tgt[2 * length + 2 :]
        assert int("".join(str(int(d)) for d in reversed(out))) == a + b and (tgt[: 2 * length + 2] == -100).all()


@pytest.mark.parametrize("name", ["copy", "reverse"])
def test_text_bag_of_tokens_baseline_fails(name):
    """Without positions, the best guess for every output slot is the most frequent input symbol: far from solved."""
    data = build_dataset(name, "test", length=8, size=200)
    hits = []
    for tok, tgt in (data[i] for i in range(len(data))):
        guess = int(torch.bincount(tok[:8] - 3, minlength=10).argmax())
        hits += (tgt[9:] == guess).tolist()
    assert np.mean(hits) < 0.4


def test_stdlib_lm_corpus():
    files = stdlib_files()
    assert list(files) == sorted(files) and not any("site-packages" in f or f.startswith("test/") for f in files)
    shares = {s: sum(file_split(f) == s for f in files) / len(files) for s in ("train", "val", "test")}
    assert shares["train"] > 0.8 and 0.02 < shares["val"] < 0.1 and 0.02 < shares["test"] < 0.1
    data = build_dataset("stdlib_lm", "val", context=64)
    x, y = data[5]
    assert torch.equal(x[1:], y[:-1]) and torch.equal(data[6][0][0], y[-1])  # windows tile the text
    assert data.vocab_size == data.num_classes == len(CHARS) == 98
    first = next(f for f in files if file_split(f) == "val")  # the val corpus starts with this file
    source = (Path(sysconfig.get_paths()["stdlib"]) / first).read_bytes().decode("ascii", "replace")
    assert decode(data[0][0]) == source[data.offset : data.offset + 64]


# ------------------------------------------------------------------ shapes: pixel oracle, position-free baseline
def centroid(image: torch.Tensor, colour) -> np.ndarray:
    pixels = (image * 0.5 + 0.5).numpy()  # back to [0, 1]
    mask = np.all(np.abs(pixels - np.asarray(colour)[:, None, None]) < 1e-6, axis=0)
    rows, cols = np.nonzero(mask)
    return np.array([rows.mean(), cols.mean()]), mask.sum()


@pytest.mark.parametrize("image_size", [32, 64])
def test_shapes_label_is_the_relation_of_red_and_blue_pixels(image_size):
    data = build_dataset("shapes", "test", image_size=image_size, size=100)
    areas = []
    for i in range(len(data)):
        image, label = data[i]
        (red, area), (blue, _) = centroid(image, (1, 0, 0)), centroid(image, (0, 0, 1))
        assert label == 2 * int(red[0] < blue[0]) + int(red[1] < blue[1])
        areas.append(area)
    assert 0.6 * np.pi * RADIUS**2 < np.median(areas) < 1.2 * np.pi * RADIUS**2  # same pixel size at every image size


def ridge_accuracy(train_x, train_y, test_x, test_y, classes) -> float:
    mu, sd = train_x.mean(0), train_x.std(0) + 1e-6
    a, b = (train_x - mu) / sd, (test_x - mu) / sd
    w = np.linalg.solve(a.T @ a + 10 * np.eye(a.shape[1]), a.T @ np.eye(classes)[train_y])
    return float(((b @ w).argmax(1) == test_y).mean())


def test_shapes_position_free_features_are_at_chance():
    """Per-channel colour histograms (pixel positions thrown away) carry no label information."""

    def features(split, n):
        data = build_dataset("shapes", split, size=n)
        xs, ys = zip(*(data[i] for i in range(n)))
        hist = [np.concatenate([np.histogram(c, bins=8, range=(-1, 1))[0] for c in x.numpy()]) for x in xs]
        return np.array(hist, float), np.array(ys)

    acc = ridge_accuracy(*features("train", 600), *features("test", 300), classes=4)
    assert acc < 0.25 + 0.1


# ------------------------------------------------------------------ trajectory: centroid-track oracle
REVERSED = {0: 1, 1: 0, 2: 3, 3: 2, 4: 5, 5: 4, 6: 6, 7: 7}


def trajectory_oracle(video: torch.Tensor) -> int:
    """Classify a clip from its brightness-weighted centroid track (row, col) per frame."""
    w = (video * 0.5 + 0.5).sum(0).numpy()  # (T, H, W)
    w = np.clip(w - 0.4, 0, None)  # drop the background noise
    rows, cols = np.indices(w.shape[1:]) + 0.5
    track = np.stack([(w * rows).sum((1, 2)), (w * cols).sum((1, 2))], -1) / w.sum((1, 2))[:, None]  # (T, 2)
    size = w.shape[-1]
    r, c = track[:, 0], track[:, 1]
    area = 0.5 * np.sum(c * np.roll(r, -1) - np.roll(c, -1) * r)  # shoelace in (x=col, y=row)
    if abs(area) > 0.02 * size**2:
        return 4 if area > 0 else 5
    net = track[-1] - track[0]
    if np.abs(net).max() < 0.15 * size:
        return 6 if np.ptp(c) > np.ptp(r) else 7
    axis = int(np.abs(net).argmax())
    return {(1, 1): 0, (1, -1): 1, (0, 1): 2, (0, -1): 3}[(axis, int(np.sign(net[axis])))]


@pytest.mark.parametrize("frames,frame_size", [(8, 16), (16, 16), (12, 32)])
def test_trajectory_label_is_the_motion_and_time_order_matters(frames, frame_size):
    data = build_dataset("trajectory", "test", frames=frames, frame_size=frame_size, size=80)
    for i in range(len(data)):
        video, label = data[i]
        assert trajectory_oracle(video) == label, (i, label)
        assert trajectory_oracle(video.flip(1)) == REVERSED[label]  # reversed time -> the mirrored class


def test_trajectory_duration_growth_continues_the_motion_at_the_training_frame_rate():
    """growth="duration": item i at 16 frames is its whole motion, and its 8-frame clip a window of it (the same
    track at some offset), moving at the same speed; every clip still holds its label."""
    opts = dict(motions="linear", growth="duration", disk_radius=2.2, size=40)
    short, long = build_dataset("trajectory", "test", frames=8, **opts), build_dataset("trajectory", "test", frames=16, **opts)
    for i in range(len(short)):
        (a, label), (b, label_b) = short[i], long[i]
        assert label == label_b and trajectory_oracle(b) == label and trajectory_oracle(b.flip(1)) == REVERSED[label]
        ta, tb = centroid_track(a), centroid_track(b)
        gaps = [np.abs(ta - tb[o:o + 8]).max() for o in range(9)]
        assert min(gaps) < 0.35  # the same motion, seen through a window
        step = np.abs(np.diff(tb, axis=0)).max(1)
        assert step.std() < 0.35 and abs(step[:7].mean() - step[8:].mean()) < 0.2  # one speed all along
    rate = build_dataset("trajectory", "test", frames=8, motions="linear", disk_radius=2.2, size=40)
    assert not torch.equal(rate[0][0], short[0][0])  # at 8 frames the rate growth shows the whole motion, faster


def test_trajectory_duration_windows_do_not_tell_the_direction_by_place():
    """A model blind to frame order sees where the disk is: over many clips, right- and left-moving disks must visit
    the same columns (a first-half window would put right-moving disks on the left of the frame)."""
    data = build_dataset("trajectory", "test", frames=8, motions="linear", growth="duration", disk_radius=2.2, size=800)
    mean_col = {0: [], 1: []}
    for i in range(len(data)):
        video, label = data[i]
        if label in mean_col:
            mean_col[label].append(centroid_track(video)[:, 1].mean())
    assert abs(np.mean(mean_col[0]) - np.mean(mean_col[1])) < 0.5  # pixels, on a 16-pixel frame


def centroid_track(video: torch.Tensor) -> np.ndarray:
    w = np.clip((video * 0.5 + 0.5).sum(0).numpy() - 0.4, 0, None)  # as trajectory_oracle
    rows, cols = np.indices(w.shape[1:]) + 0.5
    return np.stack([(w * rows).sum((1, 2)), (w * cols).sum((1, 2))], -1) / w.sum((1, 2))[:, None]


@pytest.mark.parametrize("opts,match", [(dict(growth="duration"), "linear motions only"),
                                        (dict(growth="duration", motions="linear", frames=20), "frames <= max_frames"),
                                        (dict(growth="speed"), "growth")])
def test_trajectory_duration_growth_refuses_what_it_cannot_continue(opts, match):
    with pytest.raises(ValueError, match=match):
        build_dataset("trajectory", "test", **opts)


# ------------------------------------------------------------------ tones: ridge-track oracle
def tones_oracle(mel: torch.Tensor) -> int:
    """Contours from the peak mel bin of the loud frames in each third of the clip."""
    m = mel[0].numpy()  # (64, frames)
    frames = m.shape[1]
    label = 0
    for k in range(3):
        part = m[:, k * frames // 3 : (k + 1) * frames // 3]
        energy = part.max(0)
        loud = np.nonzero(energy > energy.max() - 1.0)[0]
        peak = part[:, loud].argmax(0)
        slope = np.polyfit(loud, peak, 1)[0] if len(loud) > 2 else 0.0
        contour = 0 if slope > 0.3 else 1 if slope < -0.3 else 2
        label = 3 * label + contour
    return label


@pytest.mark.parametrize("duration", [1.0, 2.0])
def test_tones_label_is_the_ordered_contours(duration):
    data = build_dataset("tones", "test", duration=duration, size=60)
    hits = [tones_oracle(data[i][0]) == data[i][1] for i in range(len(data))]
    assert np.mean(hits) >= 0.9


def test_tones_order_matters():
    """Reading the syllables in reverse time order gives another class for most clips."""
    data = build_dataset("tones", "val", size=40)
    changed = [tones_oracle(data[i][0].flip(-1)) != data[i][1] for i in range(len(data))]
    assert np.mean(changed) > 0.6


# ------------------------------------------------------------------ not_so_clevr
@pytest.mark.parametrize("split_mode", ["uniform", "quadrant"])
def test_not_so_clevr_splits_and_targets(split_mode):
    splits = {s: build_dataset("not_so_clevr", s, split_mode=split_mode, seed=3) for s in ("train", "val", "test")}
    sets = {s: {tuple(c) for c in d.centres} for s, d in splits.items()}
    assert sum(map(len, sets.values())) == 56 * 56 == len(set.union(*sets.values()))
    test = np.array(sorted(sets["test"]))
    if split_mode == "quadrant":
        assert len(test) == 28 * 28 and (test >= 32).all()
        assert not any(r >= 32 and c >= 32 for r, c in sets["train"] | sets["val"])
    else:
        assert len(test) == 3136 // 5 and (test < 32).all(1).any() and (test >= 32).all(1).any()
    for i in (0, 100):
        image, target = splits["train"][i]
        rows, cols = np.nonzero(image[0].numpy())
        assert image.sum() == 81 and np.ptp(rows) == np.ptp(cols) == 8
        centre = np.array([rows.mean(), cols.mean()])
        np.testing.assert_allclose(target.numpy(), centre / 63 * 2 - 1, atol=1e-6)  # "pixel" coordinates


# ------------------------------------------------------------------ errors
@pytest.mark.parametrize(
    "call,error,words",
    [
        (lambda: build_dataset("imagenet", "train"), ValueError, ["imagenet", "shapes", "copy"]),
        (lambda: build_dataset("copy", "dev"), ValueError, ["dev", "train", "val", "test"]),
        (lambda: build_dataset("copy", "train", lenght=4), TypeError, ["lenght", "length"]),
        (lambda: build_dataset("not_so_clevr", "train", split_mode="corner"), ValueError, ["corner", "quadrant"]),
        (lambda: build_dataset("copy", "train", length=0), ValueError, ["length"]),
    ],
)
def test_errors_name_the_valid_choices(call, error, words):
    with pytest.raises(error) as info:
        call()
    assert all(w in str(info.value) for w in words)


def test_index_out_of_range_stops_iteration():
    data = build_dataset("copy", "test", length=3, size=5)
    assert len(list(iter(data[i] for i in range(len(data))))) == 5
    with pytest.raises(IndexError):
        data[5]


@pytest.mark.parametrize("name", BUILTIN)
def test_pickle_round_trip_for_dataloader_workers(name):
    import pickle

    data = build_dataset(name, "val", **BUILTIN[name][0])
    assert same([data[1]], [pickle.loads(pickle.dumps(data))[1]])
