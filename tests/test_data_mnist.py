"""MNIST (zoom) and MNIST pairs (canvas) through torchvision's real loader, on a tiny file set in the idx format."""
from __future__ import annotations

import gzip
import hashlib
import os
import struct
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F

import train.data.mnist as mnist
from train.data import DATASETS, build_dataset

N_TRAIN, N_TEST, VAL = 40, 20, 8
REAL = Path("/work/shared/data/mnist")


def idx_bytes(array: np.ndarray) -> bytes:
    """The idx format: magic (0, 0, type 0x08 = uint8, number of dimensions), big-endian sizes, then the bytes."""
    return struct.pack(">BBBB", 0, 0, 8, array.ndim) + struct.pack(f">{array.ndim}I", *array.shape) + array.tobytes()


def smooth_digits(rng, n: int) -> np.ndarray:
    """``(n, 28, 28)`` uint8 images of 7x7 blocks of 4x4 pixels: bilinear zoom and back keeps them."""
    return np.kron(rng.integers(0, 256, (n, 7, 7)), np.ones((1, 4, 4))).astype(np.uint8)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """A folder of the four files gzipped, their arrays, and the sha256 of each unpacked file."""
    folder = tmp_path_factory.mktemp("mnist_files")
    rng = np.random.default_rng(0)
    arrays = {"train-images-idx3-ubyte": smooth_digits(rng, N_TRAIN),
              "train-labels-idx1-ubyte": (np.arange(N_TRAIN) % 10).astype(np.uint8),
              "t10k-images-idx3-ubyte": smooth_digits(rng, N_TEST),
              "t10k-labels-idx1-ubyte": (np.arange(N_TEST) * 3 % 10).astype(np.uint8)}
    sha = {}
    for name, array in arrays.items():
        raw = idx_bytes(array)
        sha[name] = hashlib.sha256(raw).hexdigest()
        (folder / f"{name}.gz").write_bytes(gzip.compress(raw))
    return folder, arrays, sha


@pytest.fixture
def fixture_pins(files, monkeypatch):
    folder, arrays, sha = files
    monkeypatch.setattr(mnist, "SHA256", sha)
    monkeypatch.delenv(mnist.ENV, raising=False)
    mnist._load.cache_clear()
    return folder, arrays


@pytest.fixture
def root(fixture_pins, tmp_path):
    """A data folder with the fixture staged into ``MNIST/raw``."""
    mnist.stage_mnist(fixture_pins[0], tmp_path / "data")
    return str(tmp_path / "data")


def every_file(folder: Path) -> set[str]:
    return {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file() or p.is_symlink()}


def test_fixture_is_in_the_idx_format(files, tmp_path):
    from torchvision.datasets.mnist import read_image_file, read_label_file

    folder, arrays, _ = files
    for name, reader in (("t10k-images-idx3-ubyte", read_image_file), ("t10k-labels-idx1-ubyte", read_label_file)):
        (tmp_path / name).write_bytes(gzip.decompress((folder / f"{name}.gz").read_bytes()))
        assert np.array_equal(reader(str(tmp_path / name)).numpy(), arrays[name])


def test_stage_writes_only_the_four_files_into_the_raw_folder(fixture_pins, tmp_path):
    source, arrays = fixture_pins
    outside = tmp_path / "outside.bin"
    outside.write_bytes(b"keep")
    raw = tmp_path / "data" / "MNIST" / "raw"
    raw.mkdir(parents=True)
    (raw / "train-labels-idx1-ubyte").symlink_to(outside)  # a link under a staged name is replaced, not written through
    before = every_file(tmp_path)
    assert mnist.stage_mnist(source, tmp_path / "data") == raw
    assert outside.read_bytes() == b"keep" and not (raw / "train-labels-idx1-ubyte").is_symlink()
    new = every_file(tmp_path) - before
    assert new == {f"data/MNIST/raw/{n}" for n in ["train-images-idx3-ubyte", "t10k-images-idx3-ubyte",
                                                    "t10k-labels-idx1-ubyte", ".stage.lock"]}
    data = build_dataset("mnist", "test", root=str(tmp_path / "data"))
    assert np.array_equal(data.images, arrays["t10k-images-idx3-ubyte"])
    inode = (raw / "train-images-idx3-ubyte").stat().st_ino
    mnist.stage_mnist(source, tmp_path / "data")  # files already good are left as they are
    assert (raw / "train-images-idx3-ubyte").stat().st_ino == inode


def test_stage_refuses_a_corrupted_file_in_one_line(fixture_pins, tmp_path):
    source, arrays = fixture_pins
    bad = tmp_path / "bad"
    bad.mkdir()
    for name in mnist.SHA256:
        raw = gzip.decompress((source / f"{name}.gz").read_bytes())
        if name == "t10k-labels-idx1-ubyte":
            raw = raw[:-1] + bytes([(raw[-1] + 1) % 10])  # one label changed: still valid idx, not the official file
        (bad / name).write_bytes(raw)  # unpacked files are accepted as sources too
    with pytest.raises(ValueError) as info:
        mnist.stage_mnist(bad, tmp_path / "data")
    message = str(info.value)
    assert "\n" not in message and "t10k-labels-idx1-ubyte" in message and "sha256" in message
    assert "download=true" in message and mnist.ENV in message
    raw_folder = tmp_path / "data" / "MNIST" / "raw"
    assert not (raw_folder / "t10k-labels-idx1-ubyte").exists()  # nothing under its name
    assert not [p for p in raw_folder.iterdir() if p.suffix == ".part"]  # no temporary left behind


def test_a_damaged_staged_file_is_refused_when_loading(root):
    target = Path(root) / "MNIST" / "raw" / "t10k-images-idx3-ubyte"
    target.write_bytes(target.read_bytes()[:-5])
    with pytest.raises(FileNotFoundError) as info:
        build_dataset("mnist", "test", root=root)
    assert "\n" not in str(info.value) and "corrupted" in str(info.value) and "t10k-images-idx3-ubyte" in str(info.value)


def test_missing_files_say_how_to_get_them(fixture_pins, tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        build_dataset("mnist_pair", "train", root=str(tmp_path))
    message = str(info.value)
    assert "\n" not in message and "download=true" in message and mnist.ENV in message
    assert "train-images-idx3-ubyte (missing)" in message
    with pytest.raises(FileNotFoundError, match="not found in"):
        mnist.stage_mnist(tmp_path / "nowhere", tmp_path / "data")
    assert not (tmp_path / "data").exists()


def test_the_environment_variable_stages_the_files(fixture_pins, tmp_path, monkeypatch):
    monkeypatch.setenv(mnist.ENV, str(fixture_pins[0]))
    monkeypatch.setenv("NDPE_DATA", str(tmp_path / "default"))  # root left out: the data folder of every dataset
    data = build_dataset("mnist", "test")
    assert len(data) == N_TEST and (tmp_path / "default" / "MNIST" / "raw" / "t10k-images-idx3-ubyte").is_file()


@pytest.fixture
def mirror(files):
    """The fixture's .gz files served over HTTP on 127.0.0.1 (torchvision's download reads a response's length)."""
    import functools
    import http.server
    import threading

    class Quiet(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Quiet, directory=str(files[0])))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_port}/"
    server.shutdown()
    thread.join()
    server.server_close()


def test_download_goes_through_torchvision(files, fixture_pins, mirror, tmp_path, monkeypatch):
    source, arrays, _ = files
    md5 = {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in source.iterdir()}

    class MNIST(mnist.torchvision.datasets.MNIST):  # the class name is torchvision's folder name: <root>/MNIST/raw
        mirrors = [mirror]
        resources = [(f"{name}.gz", md5[f"{name}.gz"]) for name in mnist.SHA256]

    monkeypatch.setattr(mnist, "TorchvisionMNIST", MNIST)
    data = build_dataset("mnist", "train", root=str(tmp_path), download=True, val_size=VAL)
    assert len(data) == N_TRAIN - VAL
    assert (tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte").is_file()
    monkeypatch.setattr(mnist, "SHA256", {**mnist.SHA256, "t10k-images-idx3-ubyte": "0" * 64})  # not the pinned file
    with pytest.raises(FileNotFoundError, match="corrupted"):
        build_dataset("mnist", "test", root=str(tmp_path), download=True)


def test_registry_and_items(root):
    assert DATASETS["mnist"].options == {"download": False, "source": None, "image_size": 28, "channels": 1,
                                         "size": None, "val_size": 5000}
    assert DATASETS["mnist_pair"].options["width"] == 64 and DATASETS["mnist_pair"].takes_root
    data = build_dataset("mnist", "test", root=root)
    assert (data.domain, data.task, data.num_classes, len(data)) == ("image", "classify", 10, N_TEST)
    x, y = data[3]
    assert x.shape == (1, 28, 28) and x.dtype == torch.float32 and isinstance(y, int) and y == 9
    assert -1 <= x.min() and x.max() <= 1
    pair = build_dataset("mnist_pair", "test", root=root, width=96, channels=3, size=5)
    (x, y), = [pair[0]]
    assert x.shape == (3, 28, 96) and y in (0, 1) and (pair.num_classes, len(pair)) == (2, 5)
    with pytest.raises(IndexError):
        pair[5]
    for opts, word in ((dict(width=50), "width"), (dict(channels=2), "channels"), (dict(val_size=40), "val_size")):
        with pytest.raises(ValueError, match=word):
            build_dataset("mnist_pair", "train", root=root, **{"val_size": VAL, **opts})
    with pytest.raises(ValueError, match="size=21"):
        build_dataset("mnist", "test", root=root, size=21)


def test_seeded_splits_disjoint_and_deterministic(root, fixture_pins):
    arrays = fixture_pins[1]
    train, val = (build_dataset("mnist", s, root=root, val_size=VAL, seed=1) for s in ("train", "val"))
    assert len(val) == VAL and sorted([*train.source_indices, *val.source_indices]) == list(range(N_TRAIN))
    np.testing.assert_array_equal(val.labels, arrays["train-labels-idx1-ubyte"][val.source_indices])
    other = build_dataset("mnist", "val", root=root, val_size=VAL, seed=2)
    assert set(other.source_indices) != set(val.source_indices)  # the data seed changes the split
    test = build_dataset("mnist", "test", root=root)
    np.testing.assert_array_equal(test.images, arrays["t10k-images-idx3-ubyte"])  # test: MNIST's test file only
    again = build_dataset("mnist", "val", root=root, val_size=VAL, seed=1)
    assert all(torch.equal(again[i][0], val[i][0]) for i in range(VAL))
    sub = [build_dataset("mnist", "train", root=root, val_size=VAL, size=10, seed=s).source_indices for s in (0, 0, 1)]
    assert len(sub[0]) == 10 and np.array_equal(sub[0], sub[1]) and not np.array_equal(sub[0], sub[2])
    pairs = [build_dataset("mnist_pair", "val", root=root, val_size=VAL, size=6, seed=s) for s in (0, 0, 1)]
    assert all(torch.equal(pairs[0][i][0], pairs[1][i][0]) for i in range(6))
    assert any(not torch.equal(pairs[0][i][0], pairs[2][i][0]) for i in range(6))
    pool = pairs[0].source_indices  # pairs of the val split draw only val images
    assert set(pool) == set(build_dataset("mnist", "val", root=root, val_size=VAL, seed=0).source_indices)


def test_zoom_keeps_the_digit(root):
    small = build_dataset("mnist", "train", root=root, val_size=VAL, size=12, seed=3)
    for size in (42, 56):
        big = build_dataset("mnist", "train", root=root, val_size=VAL, size=12, seed=3, image_size=size)
        for i in range(12):
            (x, y), (xb, yb) = small[i], big[i]
            back = F.interpolate(xb[None], size=(28, 28), mode="area")[0]
            assert y == yb and xb.shape == (1, size, size)
            assert (back - x).abs().mean() < 0.1  # only the edges of the 4-px blocks blur
            assert (back - small[(i + 1) % 12][0]).abs().mean() > 0.3  # a different digit is far


def test_pairs_labels_placement_and_swap(root, fixture_pins):
    arrays = fixture_pins[1]
    data = build_dataset("mnist_pair", "test", root=root, size=200, seed=4)
    labels = arrays["t10k-labels-idx1-ubyte"]
    images = arrays["t10k-images-idx3-ubyte"]
    for i in range(200):
        left, right, lx, rx = data.pair(i)
        assert 0 <= lx and lx + 28 <= rx and rx + 28 <= 64  # never overlapping, inside the canvas
        assert labels[left] != labels[right]
        x, y = data[i]
        assert y == int(labels[left] > labels[right])
        pixels = np.round((x[0].numpy() * 0.5 + 0.5) * 255).astype(int)
        np.testing.assert_array_equal(pixels[:, lx:lx + 28], images[left])
        np.testing.assert_array_equal(pixels[:, rx:rx + 28], images[right])
        background = np.ones(64, bool)
        background[lx:lx + 28] = background[rx:rx + 28] = False
        assert (pixels[:, background] == 0).all()
        swapped, y_swapped = data.render(left, right, rx, lx)  # the same digits, offsets swapped
        assert y_swapped == 1 - y and torch.equal(swapped[:, :, lx:lx + 28], x[:, :, rx:rx + 28])
    assert 0.35 < np.mean([data[i][1] for i in range(200)]) < 0.65


def test_pairs_are_balanced_whatever_the_class_counts(root):
    """Which digit goes left is a coin flip: with 18 images of 0 and 2 of 1 the labels are still balanced."""
    data = build_dataset("mnist_pair", "test", root=root, size=400)
    data.labels = np.array([0] * 18 + [1] * 2)
    labels = [data.render(*data.pair(i))[1] for i in range(400)]
    assert 0.42 < np.mean(labels) < 0.58  # 0.1 if the first image drawn (mostly a 0) always went left


def test_a_wider_canvas_reaches_new_offsets(root):
    offsets = {x for i in range(300) for x in build_dataset("mnist_pair", "test", root=root, width=128,
                                                              size=300).pair(i)[2:]}
    assert max(offsets) > 64 - 28 and max(offsets) <= 128 - 28 and min(offsets) < 36
    narrow = {x for i in range(300) for x in build_dataset("mnist_pair", "test", root=root, size=300).pair(i)[2:]}
    assert max(narrow) <= 36


def test_floors_see_the_order_blind_ceiling(root):
    from train.floors import floors

    train, val, test = (build_dataset("mnist_pair", s, root=root, val_size=VAL, size=300) for s in ("train", "val", "test"))
    out = floors(train, val, test)
    assert set(out) == {"chance", "majority", "order-blind"} and out["chance"] == 0.5
    assert out["order-blind"] == out["majority"] and 0.4 < out["order-blind"] < 0.6


def test_the_benchmark_caches_it_from_the_data_root(root, tmp_path):
    from train.bench import bench_dataset

    opts = dict(dataset="mnist", cache=str(tmp_path / "cache"), train_items=10, eval_items=5, val_size=VAL)
    train = bench_dataset("train", seed=0, root=root, **opts)
    test = bench_dataset("test", seed=0, root=root, **opts, image_size=56)
    assert len(train) == 10 and len(test) == 5 and test.x.shape == (5, 1, 56, 56) and train.num_classes == 10
    assert len(list((tmp_path / "cache").glob("*.pt"))) == 2


def test_the_benchmark_checks_the_files_before_any_cell(root, tmp_path, capsys):
    from train import bench

    bench.fetch_real(bench.load_bench_config(None, ["tasks=[image/mnist-pair]", f"data_root={root}"]))
    assert "mnist_pair: checking" in capsys.readouterr().out
    empty = bench.load_bench_config(None, ["tasks=[image/mnist-zoom]", f"data_root={tmp_path / 'empty'}"])
    with pytest.raises(FileNotFoundError, match="download=true"):
        bench.fetch_real(empty)


@pytest.mark.skipif(not REAL.is_dir(), reason="the official MNIST files are not on this machine")
def test_the_real_files(tmp_path, monkeypatch):
    monkeypatch.delenv(mnist.ENV, raising=False)
    mnist._load.cache_clear()
    assert mnist.stage_mnist(REAL, tmp_path) == tmp_path / "MNIST" / "raw"
    counts = {False: [980, 1135, 1032, 1010, 982, 892, 958, 1028, 974, 1009],
              True: [5923, 6742, 5958, 6131, 5842, 5421, 5918, 6265, 5851, 5949]}
    for train, expected in counts.items():
        images, labels = mnist.load(tmp_path, train)
        assert images.shape == (sum(expected), 28, 28) and np.bincount(labels).tolist() == expected
    assert len(build_dataset("mnist", "val", root=str(tmp_path))) == 5000
    assert os.environ.get(mnist.ENV) is None
    mnist._load.cache_clear()


def test_pairs_can_ask_for_the_left_digit(root, fixture_pins):
    """target="left": the label is the value of the digit on the left (10 classes); swapping the offsets gives the
    other digit's value; a model blind to which digit is left reaches 1/2 (the floors say so)."""
    from train.floors import floors

    labels = fixture_pins[1]["t10k-labels-idx1-ubyte"]
    data = build_dataset("mnist_pair", "test", root=root, size=100, seed=4, target="left")
    assert data.num_classes == 10
    for i in range(100):
        left, right, lx, rx = data.pair(i)
        assert data[i][1] == labels[left] and data.render(left, right, rx, lx)[1] == labels[right]
    train, val, test = (build_dataset("mnist_pair", s, root=root, val_size=VAL, size=100, target="left")
                        for s in ("train", "val", "test"))
    assert floors(train, val, test)["order-blind"] == 0.5
    with pytest.raises(ValueError, match="target"):
        build_dataset("mnist_pair", "test", root=root, target="right")
