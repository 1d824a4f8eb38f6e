"""Speech Commands v2 (Warden 2018) from its official layout, read without torchaudio.

``root`` is the data folder that holds every dataset (default ``$NDPE_DATA`` or ``~/.cache/ndpe/data``); the
archive is extracted into ``<root>/speech_commands_v0.02`` (:data:`FOLDER`). A ``root`` that is itself a complete
extraction (it holds the marker below) is used as it is. Layout of that folder (the archive's top level)::

    <word>/<speaker>_nohash_<n>.wav    16 kHz mono 16-bit PCM, <= 1 s
    validation_list.txt                "<word>/<file>.wav" per line -> split "val"
    testing_list.txt                   -> split "test"; every other file is "train"
    _background_noise_/*.wav           long noise recordings
    .ndpe-complete                     marker written after a verified, complete extraction; without it
                                       the folder is never used (create it yourself after a manual extraction)

``classes=35``: the 35 words, sorted (torchaudio / AST label set). ``classes=12``: the ten
commands, ``_unknown_`` (every other word, a seeded random ``unknown_percent`` % subset of
the command count, as TensorFlow's ``input_data.py``) and ``_silence_`` (``silence_percent`` %
of the command count, a random 1 s cut of a background file at volume U(0, 1)). As in
TensorFlow's recipe, the background files are shared by all splits.

Training items (``augment``, default on for "train") are padded with zeros at the end or cut to
``duration`` seconds, shifted by up to +-100 ms and, with probability 0.8, mixed with a background cut
at volume U(0, 0.1) (TensorFlow's recipe); this randomness comes from torch's RNG (so
``torch.manual_seed`` and DataLoader worker seeding make it reproducible). Evaluation items (augment
off: val, test) place the keyword at a random offset in a clip of ``duration`` seconds filled with a
background cut of the dataset's own ``_background_noise_`` recordings at volume U(0, 0.1), the
training range (``eval_noise=True``, default): so a longer clip holds more audio (more noise around the
same keyword), not digital silence. ``eval_noise=False`` keeps the plain zero-padded clip. Both are
fixed by ``(seed, split, index)``; the offset and the noise are drawn after the clip is chosen, so a
clip's draws do not depend on ``duration`` beyond the offset range. Item:
``(float (1, 64, 1 + 100 * duration), int)``, the :class:`LogMel` of the clip standardised
with the constants of ``train.data.tones`` (measured on synthetic tones; close enough to
centre the inputs, re-measure for careful work).
"""
from __future__ import annotations

import math
import wave
import zlib
from functools import lru_cache
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ._base import FETCH, check_choice, check_split, default_root
from .audio_features import LogMel
from .download import MARKER, MAX_BYTES, MAX_MEMBERS, download, extract_complete, file_lock, is_complete
from .tones import LOG_MEL_MEAN, LOG_MEL_STD

URL = "http://download.tensorflow.org/data/speech_commands_v0.02.tar.gz"
# 2,428,923,189 bytes; the value pinned by TensorFlow Datasets' checksums and torchaudio's SPEECHCOMMANDS.
SHA256 = "af14739ee7dc311471de98f5f9d2c9191b18aedfe957f4a6ff791c709868ff58"
SAMPLE_RATE = 16000
BACKGROUND = "_background_noise_"
COMMANDS = ("yes", "no", "up", "down", "left", "right", "on", "off", "stop", "go")
CLASSES_12 = (*COMMANDS, "_unknown_", "_silence_")
WORDS_35 = (
    "backward", "bed", "bird", "cat", "dog", "down", "eight", "five", "follow", "forward", "four", "go",
    "happy", "house", "learn", "left", "marvin", "nine", "no", "off", "on", "one", "right", "seven",
    "sheila", "six", "stop", "three", "tree", "two", "up", "visual", "wow", "yes", "zero",
)  # fmt: skip
SHIFT_S, BACKGROUND_P, BACKGROUND_VOLUME = 0.1, 0.8, 0.1
FOLDER = "speech_commands_v0.02"  # the dataset's folder inside the data folder


def dataset_folder(root: str | Path | None) -> Path:
    """Where the extraction lives for data folder ``root``: ``root`` itself if it is a complete extraction (it holds
    the marker), else ``<root>/speech_commands_v0.02``; ``root=None`` is :func:`default_root`."""
    base = Path(root) if root is not None else default_root()
    return base if is_complete(base) else base / FOLDER


def read_wav(path: str | Path, sample_rate: int = SAMPLE_RATE) -> np.ndarray:
    """Mono 16-bit PCM WAV -> float32 ``(samples,)`` in [-1, 1) (``int16 / 32768``); raise for any other format."""
    try:
        with wave.open(str(path), "rb") as f:
            channels, width, rate, frames = f.getnchannels(), f.getsampwidth(), f.getframerate(), f.readframes(f.getnframes())
    except (wave.Error, EOFError) as err:
        raise ValueError(f"{path}: not a PCM WAV file ({err}); expected 16-bit PCM mono at {sample_rate} Hz") from err
    if (channels, width, rate) != (1, 2, sample_rate):
        raise ValueError(f"{path}: {channels} channel(s), {8 * width}-bit, {rate} Hz; expected 1 channel, 16-bit PCM, {sample_rate} Hz")
    return np.frombuffer(frames, dtype="<i2").astype(np.float32) / 32768.0


def fit(wave_: np.ndarray, num_samples: int) -> np.ndarray:
    """Zero-pad at the end or cut to ``num_samples``.

    >>> fit(np.ones(3), 5)
    array([1., 1., 1., 0., 0.])
    """
    return np.pad(wave_[:num_samples], (0, max(0, num_samples - len(wave_))))


def download_speech_commands(
    root: str | Path, *, url: str = URL, sha256: str = SHA256, max_members: int = MAX_MEMBERS, max_bytes: int = MAX_BYTES
) -> Path:
    """Download the v0.02 archive next to ``root``, verify its SHA-256, extract it safely into ``root``, delete the archive.

    ``root`` appears only complete: the archive is extracted into a temporary sibling folder, the
    marker ``.ndpe-complete`` is written inside it, and the folder is renamed to ``root`` last. An
    interrupted run leaves ``<root>.tar.gz.part`` (resumed next time) and possibly a staging folder
    (removed next time), never a partial ``root``. A non-empty ``root`` without the marker is
    refused, not overwritten. Runs under a lock file, so concurrent callers download once.
    """
    root = Path(root)
    archive = root.with_name(root.name + ".tar.gz")
    with file_lock(root.with_name(f".{root.name}.lock")):
        if not is_complete(root):
            if root.exists() and (not root.is_dir() or any(root.iterdir())):
                raise FileExistsError(
                    f"{root} exists without the {MARKER} marker written after a complete extraction (an interrupted or older "
                    f"download, or a copy of your own): delete it and retry with download=True, or, if it is a complete "
                    f"extraction of {URL}, create the empty file {root / MARKER}"
                )
            download(url, archive, sha256=sha256)
            extract_complete(archive, root, sha256=sha256, max_members=max_members, max_bytes=max_bytes)
        for leftover in (archive, archive.with_name(archive.name + ".part")):
            leftover.unlink(missing_ok=True)
    return root


@lru_cache(maxsize=2)
def load_background(root: str) -> tuple[np.ndarray, ...]:
    """All ``_background_noise_/*.wav`` of ``root`` as float32 arrays, sorted by name."""
    return tuple(read_wav(p) for p in sorted((Path(root) / BACKGROUND).glob("*.wav")))


class SpeechCommands(Dataset):
    """Keyword spotting on Speech Commands v2, 12 or 35 classes.

    >>> SpeechCommands.classes_for(12)[-2:]
    ('_unknown_', '_silence_')
    """

    name, domain, task = "speech_commands", "audio", "classify"
    sample_rate = SAMPLE_RATE

    def __init__(
        self, split: str, *, seed: int = 0, root: str | None = None, classes: int = 12, duration: float = 1.0,
        download: bool = False, augment: bool | None = None, silence_percent: float = 10.0, unknown_percent: float = 10.0,
        eval_noise: bool = True,
    ):
        check_choice("classes", classes, (12, 35))
        self.split, self.seed, self.duration = check_split(split), int(seed), float(duration)
        if not self.duration > 0:
            raise ValueError(f"duration must be > 0 seconds, got {duration!r}")
        self.root = dataset_folder(root)
        if not is_complete(self.root):
            if not download:
                raise FileNotFoundError(
                    f"Speech Commands v2 not found complete under {self.root} (no {MARKER}, which is written only after a "
                    f"verified extraction): fetch it with {FETCH}; download=True fetches {URL} (2.4 GB, sha256 "
                    f"{SHA256}); or, after extracting that archive there yourself so that {self.root}/yes/*.wav, "
                    f"{self.root}/validation_list.txt and {self.root}/testing_list.txt exist, create the empty file "
                    f"{self.root / MARKER}."
                )
            download_speech_commands(self.root, url=URL, sha256=SHA256)
        self.eval_noise = bool(eval_noise)
        self.classes = self.classes_for(classes)
        self.num_classes = len(self.classes)
        self.augment = split == "train" if augment is None else bool(augment)
        self.items = self.index(silence_percent, unknown_percent)  # [(relpath | None, label)]
        if not self.augment and self.eval_noise and not load_background(str(self.root)):
            raise FileNotFoundError(f"{self.root / BACKGROUND} has no .wav files; evaluation clips are placed in its "
                                    "noise (pass eval_noise=False for zero-padded clips)")
        self.featurizer = LogMel(sample_rate=SAMPLE_RATE)

    @staticmethod
    def classes_for(count: int) -> tuple[str, ...]:
        """Class names of the 12- or 35-class task."""
        return CLASSES_12 if count == 12 else WORDS_35

    def files(self) -> list[str]:
        """Sorted ``word/file.wav`` of this split."""
        lists = {s: set((self.root / f"{n}_list.txt").read_text().split()) for s, n in (("val", "validation"), ("test", "testing"))}
        out = []
        for word_dir in sorted(p for p in self.root.iterdir() if p.is_dir() and not p.name.startswith("_")):
            if word_dir.name not in WORDS_35:
                raise ValueError(f"{word_dir}: {word_dir.name!r} is not a Speech Commands v2 word; expected one of {WORDS_35}")
            for wav in sorted(word_dir.glob("*.wav")):
                rel = f"{word_dir.name}/{wav.name}"
                if self.split == ("val" if rel in lists["val"] else "test" if rel in lists["test"] else "train"):
                    out.append(rel)
        return out

    def index(self, silence_percent: float, unknown_percent: float) -> list[tuple[str | None, int]]:
        files = self.files()
        if len(self.classes) == 35:
            return [(rel, WORDS_35.index(rel.split("/")[0])) for rel in files]
        wanted = [(rel, COMMANDS.index(rel.split("/")[0])) for rel in files if rel.split("/")[0] in COMMANDS]
        unknown = [rel for rel in files if rel.split("/")[0] not in COMMANDS]
        rng = np.random.default_rng([zlib.crc32(b"speech_commands"), self.seed, ("train", "val", "test").index(self.split)])
        rng.shuffle(unknown)
        unknown = unknown[: math.ceil(len(wanted) * unknown_percent / 100)]
        silence = [(None, CLASSES_12.index("_silence_"))] * math.ceil(len(wanted) * silence_percent / 100)
        if silence and not load_background(str(self.root)):
            raise FileNotFoundError(f"{self.root / BACKGROUND} has no .wav files; they are needed for the _silence_ class")
        return wanted + [(rel, CLASSES_12.index("_unknown_")) for rel in unknown] + silence

    def __len__(self) -> int:
        return len(self.items)

    def background(self, rng, num_samples: int) -> np.ndarray:
        """A random cut of ``num_samples`` from a random background file (looped if shorter)."""
        noises = load_background(str(self.root))
        noise = noises[int(rng.integers(len(noises)))]
        noise = np.tile(noise, -(-num_samples // len(noise)) + 1)
        start = int(rng.integers(0, len(noise) - num_samples + 1))
        return noise[start : start + num_samples]

    def waveform(self, index: int) -> np.ndarray:
        """The clip of item ``index`` after padding/cutting (and augmentation when on), float32 ``(samples,)``."""
        rel, _ = self.items[index]
        num_samples = int(round(self.duration * SAMPLE_RATE))
        if self.augment:
            rng = np.random.default_rng(int(torch.randint(0, 2**62, ())))
        else:
            rng = np.random.default_rng([zlib.crc32(b"speech_commands"), self.seed, index])
        if rel is None:  # _silence_
            return (rng.uniform(0, 1) * self.background(rng, num_samples)).astype(np.float32)
        if not self.augment and self.eval_noise:  # the keyword at a random offset in a clip of background noise
            word = read_wav(self.root / rel)[:num_samples]
            start = int(rng.integers(0, num_samples - len(word) + 1))
            clip = rng.uniform(0, BACKGROUND_VOLUME) * self.background(rng, num_samples)
            clip[start:start + len(word)] += word
            return np.clip(clip, -1, 1).astype(np.float32)
        clip = fit(read_wav(self.root / rel), num_samples)
        if self.augment:
            shift = int(rng.integers(-int(SHIFT_S * SAMPLE_RATE), int(SHIFT_S * SAMPLE_RATE) + 1))
            clip = fit(np.pad(clip, (max(shift, 0), 0))[max(-shift, 0) :], num_samples)
            if load_background(str(self.root)) and rng.uniform() < BACKGROUND_P:
                clip = np.clip(clip + rng.uniform(0, BACKGROUND_VOLUME) * self.background(rng, num_samples), -1, 1)
        return clip.astype(np.float32)

    def __getitem__(self, index: int):
        mel = self.featurizer(torch.from_numpy(self.waveform(index)))  # (64, frames)
        return ((mel - LOG_MEL_MEAN) / LOG_MEL_STD).unsqueeze(0), self.items[index][1]
