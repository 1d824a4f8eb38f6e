"""Speech Commands v2 on a tiny tree in the official layout; WAV reading; download check; safe extraction."""
from __future__ import annotations

import io
import math
import tarfile

import numpy as np
import pytest
import scipy.io.wavfile
import torch

from train.data import build_dataset
from train.data.download import safe_extract, sha256_of
from train.data.speech_commands import CLASSES_12, WORDS_35, download_speech_commands, read_wav

SR = 16000
WORDS = {"yes": 6, "no": 6, "up": 4, "cat": 5, "dog": 5, "wow": 4}  # word -> files; cat/dog/wow are _unknown_ in the 12-class set


def write_tree(root) -> dict[str, str]:
    """Write the layout with scipy's WAV writer; return {relpath: split}."""
    rng = np.random.default_rng(0)
    splits = {}
    for word, count in WORDS.items():
        (root / word).mkdir(parents=True)
        for i in range(count):
            rel = f"{word}/{i % 3:08x}_nohash_{i}.wav"
            length = int(SR * rng.uniform(0.6, 1.0))
            scipy.io.wavfile.write(root / rel, SR, (rng.uniform(-0.5, 0.5, length) * 32767).astype(np.int16))
            splits[rel] = "val" if i == 1 else "test" if i == 2 else "train"
    (root / "validation_list.txt").write_text("".join(f"{r}\n" for r, s in splits.items() if s == "val"))
    (root / "testing_list.txt").write_text("".join(f"{r}\n" for r, s in splits.items() if s == "test"))
    (root / "_background_noise_").mkdir()
    for name in ("white_noise.wav", "pink_noise.wav"):
        scipy.io.wavfile.write(root / "_background_noise_" / name, SR, (rng.uniform(-0.9, 0.9, int(1.5 * SR)) * 32767).astype(np.int16))
    return splits


@pytest.fixture(scope="module")
def tree(tmp_path_factory):
    root = tmp_path_factory.mktemp("speech_commands")
    return root, write_tree(root)


def test_splits_follow_the_lists(tree):
    root, splits = tree
    for split in ("train", "val", "test"):
        data = build_dataset("speech_commands", split, root=str(root), classes=35)
        assert sorted(rel for rel, _ in data.items) == sorted(r for r, s in splits.items() if s == split)
        assert all(label == WORDS_35.index(rel.split("/")[0]) for rel, label in data.items)
        assert data.num_classes == 35


def test_twelve_classes_unknown_and_silence(tree):
    root, splits = tree
    data = build_dataset("speech_commands", "train", root=str(root), unknown_percent=50, silence_percent=25)
    wanted = [r for r, s in splits.items() if s == "train" and r.split("/")[0] in ("yes", "no", "up")]
    labels = [label for _, label in data.items]
    assert data.classes == CLASSES_12 and data.num_classes == 12
    assert labels.count(10) == math.ceil(len(wanted) * 0.5) and labels.count(11) == math.ceil(len(wanted) * 0.25)
    assert sorted(r for r, label in data.items if label < 10) == sorted(wanted)
    assert all(r.split("/")[0] in ("cat", "dog", "wow") for r, label in data.items if label == 10)
    other_seed = build_dataset("speech_commands", "train", root=str(root), unknown_percent=50, seed=1)
    assert len(other_seed) > 0


def test_items_are_log_mel_of_padded_clips(tree):
    root, _ = tree
    data = build_dataset("speech_commands", "val", root=str(root))
    mel, label = data[0]
    assert mel.shape == (1, 64, 101) and mel.dtype == torch.float32 and label == CLASSES_12.index(data.items[0][0].split("/")[0])
    rel = data.items[0][0]
    wave = data.waveform(0)
    reference = scipy.io.wavfile.read(root / rel)[1] / 32768.0
    np.testing.assert_allclose(wave[: len(reference)], reference, atol=1e-7)  # no augmentation off the train split
    assert (wave[len(reference) :] == 0).all() and len(wave) == SR  # zero-padded at the end to 1 s
    longer = build_dataset("speech_commands", "val", root=str(root), duration=2.0)
    assert longer[0][0].shape == (1, 64, 201)
    assert torch.equal(data[0][0], data[0][0])  # val items are fixed


def test_silence_is_background_noise_and_fixed_off_train(tree):
    root, _ = tree
    data = build_dataset("speech_commands", "test", root=str(root), silence_percent=100)
    index = next(i for i, (rel, _) in enumerate(data.items) if rel is None)
    wave = data.waveform(index)
    assert len(wave) == SR and 0 < np.abs(wave).max() <= 0.9 + 1e-4
    np.testing.assert_array_equal(wave, data.waveform(index))


def test_train_augmentation_follows_torch_seed(tree):
    root, _ = tree
    data = build_dataset("speech_commands", "train", root=str(root))
    torch.manual_seed(0)
    a = [data.waveform(0) for _ in range(4)]
    torch.manual_seed(0)
    b = [data.waveform(0) for _ in range(4)]
    assert all(np.array_equal(x, y) for x, y in zip(a, b))
    assert not all(np.array_equal(a[0], x) for x in a[1:])  # shifts / noise differ between draws


@pytest.mark.parametrize(
    "rate,samples,words",
    [(44100, np.zeros(100, np.int16), ["44100 Hz"]), (SR, np.zeros((100, 2), np.int16), ["2 channel"]),
     (SR, np.zeros(100, np.uint8), ["8-bit"]), (SR, np.zeros(100, np.float32), ["not a PCM WAV"])],
)  # fmt: skip
def test_read_wav_rejects_other_formats(tmp_path, rate, samples, words):
    scipy.io.wavfile.write(tmp_path / "x.wav", rate, samples)
    with pytest.raises(ValueError) as info:
        read_wav(tmp_path / "x.wav")
    assert all(w in str(info.value) for w in words)


def test_read_wav_matches_scipy(tmp_path):
    pcm = np.array([0, 1, -1, 32767, -32768, 1234], np.int16)
    scipy.io.wavfile.write(tmp_path / "x.wav", SR, pcm)
    np.testing.assert_array_equal(read_wav(tmp_path / "x.wav"), pcm / np.float32(32768))


def test_missing_or_wrong_root_raises(tmp_path):
    with pytest.raises(FileNotFoundError, match="download=True"):
        build_dataset("speech_commands", "train", root=str(tmp_path))
    (tmp_path / "validation_list.txt").write_text("")
    (tmp_path / "testing_list.txt").write_text("")
    (tmp_path / "hello").mkdir()
    with pytest.raises(ValueError, match="'hello' is not a Speech Commands v2 word"):
        build_dataset("speech_commands", "train", root=str(tmp_path), classes=35)


# ------------------------------------------------------------------ download and extraction
def tar_of(tmp_path, members) -> str:
    """A .tar.gz of ``members``: (name, bytes) regular files or (name, "symlink"/"hardlink", target)."""
    path = tmp_path / "archive.tar.gz"
    with tarfile.open(path, "w:gz") as tar:
        for name, *rest in members:
            info = tarfile.TarInfo(name)
            if rest[0] in ("symlink", "hardlink"):
                info.type, info.linkname = (tarfile.SYMTYPE if rest[0] == "symlink" else tarfile.LNKTYPE), rest[1]
                tar.addfile(info)
            else:
                info.size = len(rest[0])
                tar.addfile(info, io.BytesIO(rest[0]))
    return str(path)


def test_download_verifies_sha256_then_extracts(tree, tmp_path):
    source, _ = tree
    archive = tmp_path / "src.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        for path in sorted(source.rglob("*")):
            tar.add(path, arcname=path.relative_to(source).as_posix(), recursive=False)
    url, digest = archive.as_uri(), sha256_of(archive)
    with pytest.raises(OSError, match="checksum mismatch"):
        download_speech_commands(tmp_path / "bad", url=url, sha256="0" * 64)
    assert not any((tmp_path / "bad").iterdir())  # nothing kept, not even a partial file
    root = download_speech_commands(tmp_path / "good", url=url, sha256=digest)
    assert not (root / "speech_commands_v0.02.tar.gz").exists()
    assert len(build_dataset("speech_commands", "test", root=str(root), classes=35)) == len(WORDS)


@pytest.mark.parametrize(
    "member",
    [("../evil.txt", b"x"), ("/tmp/evil_abs.txt", b"x"), ("a/../../evil.txt", b"x"),
     ("link", "symlink", "/etc/passwd"), ("link", "symlink", "../../outside"), ("hard", "hardlink", "../outside")],
)  # fmt: skip
def test_safe_extract_rejects_malicious_members(tmp_path, member):
    archive = tar_of(tmp_path, [("ok.txt", b"fine"), member])
    target = tmp_path / "out"
    with pytest.raises(ValueError, match="unsafe tar member"):
        safe_extract(archive, target)
    assert not (tmp_path / "evil.txt").exists() and not (target / "ok.txt").exists()  # checked before writing anything


def test_safe_extract_keeps_links_inside(tmp_path):
    archive = tar_of(tmp_path, [("a/data.txt", b"fine"), ("a/alias", "symlink", "data.txt")])
    out = safe_extract(archive, tmp_path / "out")
    assert (out / "a" / "alias").read_bytes() == b"fine"
