"""CIFAR-10 through torchvision's real loader, on a tiny file set in the official python format."""
from __future__ import annotations

import hashlib
import pickle
import struct

import numpy as np
import pytest
import torch

import train.data.cifar as cifar
from train.data import build_dataset

PER_BATCH, TEST_SIZE = 6, 8
LABEL_NAMES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]


def py2_pickle(obj: dict) -> bytes:
    """Pickle with the dict keys as Python 2 ``str`` (BINSTRING), as in the official files.

    They load as ``str`` under torchvision's ``encoding="latin1"`` and as ``b"data"`` under ``encoding="bytes"``.
    """
    blob = pickle.dumps(obj, protocol=2)
    for key in obj:
        raw = key.encode()
        blob = blob.replace(b"X" + struct.pack("<I", len(raw)) + raw, b"T" + struct.pack("<I", len(raw)) + raw, 1)
    return blob


@pytest.fixture(scope="module")
def cifar_root(tmp_path_factory):
    """``<root>/cifar-10-batches-py/`` with data_batch_1..5, test_batch, batches.meta, and a loader class with their md5s."""
    root = tmp_path_factory.mktemp("cifar")
    folder = root / "cifar-10-batches-py"
    folder.mkdir()
    rng = np.random.default_rng(0)
    names = [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]
    batches = {}
    for name in names:
        n = TEST_SIZE if name == "test_batch" else PER_BATCH
        batch = {"batch_label": name, "labels": rng.integers(0, 10, n).tolist(), "data": rng.integers(0, 256, (n, 3072), dtype=np.uint8), "filenames": [f"{name}_{i}.png" for i in range(n)]}
        (folder / name).write_bytes(py2_pickle(batch))
        batches[name] = batch
    (folder / "batches.meta").write_bytes(py2_pickle({"num_cases_per_batch": PER_BATCH, "label_names": LABEL_NAMES, "num_vis": 3072}))
    md5 = {p.name: hashlib.md5(p.read_bytes()).hexdigest() for p in folder.iterdir()}

    class FixtureCIFAR10(cifar.torchvision.datasets.CIFAR10):
        train_list = [[n, md5[n]] for n in names[:5]]
        test_list = [["test_batch", md5["test_batch"]]]
        meta = {"filename": "batches.meta", "key": "label_names", "md5": md5["batches.meta"]}

    return root, batches, FixtureCIFAR10


@pytest.fixture
def fixture_loader(cifar_root, monkeypatch):
    root, batches, loader = cifar_root
    monkeypatch.setattr(cifar, "TorchvisionCIFAR10", loader)
    return root, batches


def test_fixture_is_in_the_official_format(cifar_root):
    root, _, _ = cifar_root
    with open(root / "cifar-10-batches-py" / "data_batch_1", "rb") as f:
        raw = pickle.load(f, encoding="bytes")  # how the CIFAR page reads it
    assert raw[b"data"].dtype == np.uint8 and raw[b"data"].shape == (PER_BATCH, 3072) and len(raw[b"labels"]) == PER_BATCH


def test_test_split_matches_manual_decoding(fixture_loader):
    root, batches = fixture_loader
    data = build_dataset("cifar10", "test", root=str(root))
    assert len(data) == TEST_SIZE and data.num_classes == 10 and data.classes == tuple(LABEL_NAMES)
    mean, std = torch.tensor(cifar.MEAN)[:, None, None], torch.tensor(cifar.STD)[:, None, None]
    for i in range(TEST_SIZE):
        image, label = data[i]
        rgb = torch.from_numpy(batches["test_batch"]["data"][i].reshape(3, 32, 32)).float() / 255  # rows: R plane, G, B
        torch.testing.assert_close(image, (rgb - mean) / std)
        assert label == batches["test_batch"]["labels"][i]


def test_train_val_partition_and_augmentation(fixture_loader):
    root, batches = fixture_loader
    train = build_dataset("cifar10", "train", root=str(root), val_size=7, seed=1)
    val = build_dataset("cifar10", "val", root=str(root), val_size=7, seed=1)
    assert len(train) == 5 * PER_BATCH - 7 and len(val) == 7
    assert sorted([*train.indices, *val.indices]) == list(range(5 * PER_BATCH))
    assert set(val.indices) != set(build_dataset("cifar10", "val", root=str(root), val_size=7, seed=2).indices)
    plain = build_dataset("cifar10", "train", root=str(root), val_size=7, seed=1, augment=False)
    torch.manual_seed(0)
    views = [train[0][0] for _ in range(8)]
    assert all(v.shape == (3, 32, 32) for v in views)
    assert any(not torch.equal(v, plain[0][0]) for v in views)  # random crop / flip change the view
    big = build_dataset("cifar10", "test", root=str(root), image_size=64)
    assert big[0][0].shape == (3, 64, 64)


def test_missing_files_raise_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError) as info:
        build_dataset("cifar10", "train", root=str(tmp_path))
    message = str(info.value)
    assert all(w in message for w in ["cifar-10-batches-py", "data_batch_1", "download=True", "cifar-10-python.tar.gz"])


def test_fixture_fails_the_official_checksums(cifar_root):
    """The real md5 list rejects files that are not the official ones (nothing gets unpickled)."""
    root, _, _ = cifar_root
    with pytest.raises(FileNotFoundError, match="corrupted"):
        build_dataset("cifar10", "test", root=str(root))


def test_default_root_is_the_data_folder(fixture_loader, monkeypatch, tmp_path):
    root, batches = fixture_loader
    monkeypatch.setenv("NDPE_DATA", str(root))  # <data folder>/cifar-10-batches-py, as torchvision lays it out
    assert len(build_dataset("cifar10", "test")) == TEST_SIZE
    monkeypatch.setenv("NDPE_DATA", str(tmp_path))
    with pytest.raises(FileNotFoundError, match=r"Fetch it with python -m train\.bench --config configs/bench/real\.yaml "
                                                r"download=true"):
        build_dataset("cifar10", "test")
