"""The eSpeak NG spoken-word dataset (train/data/spoken.py); skipped without the extra ``speech``."""
from __future__ import annotations

import sys

import numpy as np
import pytest
import torch

pytest.importorskip("espeakng_loader")

from train.data import DATASETS, build_dataset  # noqa: E402
from train.data.spoken import (  # noqa: E402
    ACCENTS, SAMPLE_RATE, TEST_VARIANTS, TRAIN_VARIANTS, VARIANTS, WORDS, SpokenWords, resample, synthesize,
)


def test_items_shape_dtype_labels():
    data = build_dataset("spoken", "train", size=16)
    assert (data.domain, data.task, data.num_classes) == ("audio", "classify", 35)
    assert list(data.classes) == sorted(data.classes) and len(set(WORDS)) == 35
    labels = []
    for i in range(len(data)):
        mel, label = data[i]
        assert mel.shape == (1, 64, 101) and mel.dtype == torch.float32 and torch.isfinite(mel).all()
        assert isinstance(label, int) and 0 <= label < 35
        labels.append(label)
    assert len(set(labels)) > 5
    assert DATASETS["spoken"].options == {"duration": 1.0, "size": None}


def test_deterministic_and_split_dependent():
    a, b = SpokenWords("val", size=4, seed=3), SpokenWords("val", size=4, seed=3)
    for i in (3, 0, 2):  # any order
        (ma, la), (mb, lb) = a[i], b[i]
        assert la == lb and torch.equal(ma, mb)
    assert not torch.equal(a[0][0], SpokenWords("val", size=4, seed=4)[0][0])
    assert not torch.equal(a[0][0], SpokenWords("train", size=4, seed=3)[0][0])


def test_held_out_voices():
    shipped = set(VARIANTS)
    assert not set(TEST_VARIANTS) & set(TRAIN_VARIANTS) and set(TEST_VARIANTS) | set(TRAIN_VARIANTS) == shipped | {""}
    assert len(TEST_VARIANTS) == 25 and len(TRAIN_VARIANTS) == 79
    seen = {split: {SpokenWords(split, size=64).clip(i).voice.partition("+")[2] for i in range(64)}
            for split in ("train", "val", "test")}
    assert seen["test"] <= set(TEST_VARIANTS) and len(seen["test"]) > 10
    assert (seen["train"] | seen["val"]) <= set(TRAIN_VARIANTS) and not (seen["train"] | seen["val"]) & seen["test"]


def test_shipped_variants_exist():
    from pathlib import Path

    import espeakng_loader

    on_disk = {p.name for p in (Path(espeakng_loader.get_data_path()) / "voices" / "!v").iterdir()}
    accents = {p.name.lower() for p in (Path(espeakng_loader.get_data_path()) / "lang" / "gmw").iterdir()}
    assert set(VARIANTS) <= on_disk and set(ACCENTS) <= accents
    for accent in ACCENTS:
        wave, rate = synthesize("yes", accent)
        assert rate == 22050 and wave.dtype == np.int16 and 0.1 * rate < len(wave) < 1.5 * rate
    with pytest.raises(ValueError, match="no voice"):
        synthesize("yes", "xx-not-a-voice")


def test_duration_changes_frames_not_word():
    clips = {}
    for duration, frames in ((1.0, 101), (1.5, 151), (2.0, 201)):
        data = SpokenWords("test", size=6, duration=duration)
        assert data[0][0].shape == (1, 64, frames)
        clips[duration] = [data.clip(i) for i in range(6)]
    for i in range(6):
        short, mid, long = (clips[d][i] for d in (1.0, 1.5, 2.0))
        assert short.length == mid.length == long.length and short.label == long.label and short.voice == long.voice
        assert len(long.wave) == 2 * SAMPLE_RATE and long.start + long.length <= len(long.wave)
    assert len({c.start for c in clips[2.0]}) > 1


def test_long_word_gets_faster():
    data = SpokenWords("train", size=8, duration=0.5)
    for i in range(len(data)):
        clip = data.clip(i)
        assert clip.length <= 0.5 * SAMPLE_RATE and len(clip.wave) == 8000


def test_resample_matches_librosa():
    librosa = pytest.importorskip("librosa")
    rng = np.random.default_rng(0)
    t = np.arange(22050) / 22050
    freqs, phases, amps = rng.uniform(50, 7000, 20), rng.uniform(0, 2 * np.pi, 20), rng.uniform(0.1, 1, 20)
    x = (amps[:, None] * np.sin(2 * np.pi * freqs[:, None] * t + phases[:, None])).sum(0) / 10  # band-limited < 7 kHz
    y = resample(x, 22050, 16000)
    ref = librosa.resample(x, orig_sr=22050, target_sr=16000)  # soxr_hq
    assert y.shape == ref.shape == (16000,)
    inner = slice(200, -200)  # edge handling differs
    np.testing.assert_allclose(y[inner], ref[inner], atol=5e-4)
    to = np.arange(16000) / 16000
    exact = (amps[:, None] * np.sin(2 * np.pi * freqs[:, None] * to + phases[:, None])).sum(0) / 10
    np.testing.assert_allclose(y[inner], exact[inner], atol=1e-5)
    # above the new Nyquist: removed, not aliased
    alias = resample(np.sin(2 * np.pi * 9000 * t), 22050, 16000)
    assert np.abs(alias[inner]).max() < 1e-3
    np.testing.assert_array_equal(resample(x, 16000, 16000), x)


def test_missing_extra_message(monkeypatch):
    monkeypatch.setitem(sys.modules, "espeakng_loader", None)  # import now raises ImportError
    with pytest.raises(ImportError, match=r"ndpe\[speech\]") as err:
        SpokenWords("train", size=2)
    assert "\n" not in str(err.value) and "GPL-3" in str(err.value)
