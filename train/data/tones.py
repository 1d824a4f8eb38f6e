"""Audio dataset "tones": three tone syllables whose contours (up / down / flat) and order are the class.

A clip of ``duration`` seconds at 16 kHz is cut into three equal slots; slot ``k`` holds one
syllable of 0.15-0.22 s at a random offset inside it. A syllable is an exponential up-chirp
(``f0 -> 2 f0``), down-chirp (``2 f0 -> f0``) or a flat tone at ``sqrt(2) f0``, with a Hann
envelope; ``f0`` is drawn per clip (log-uniform 300-1200 Hz, the "speaker") and jittered per
syllable. White noise is added at a random level. Class = ``9 c0 + 3 c1 + c2`` over the
contours ``c_k`` (27 classes, names like "up-flat-down"); the same multiset of contours in
another order is another class, so the time position of each syllable matters. ``syllables=2``
(9 classes) or ``1`` (3 classes) makes the task easier with the same construction.

Syllables keep their length in seconds at every duration, so 1.5 s and 2.0 s clips (for
extrapolation) spread the same syllables over more frames. Items ``(float (1, 64, frames),
int)`` with ``frames = 1 + 100 * duration``: the log-mel of :class:`LogMel` (defaults), shifted
and scaled by fixed constants (:data:`LOG_MEL_MEAN`, :data:`LOG_MEL_STD`) measured once on
train clips (``python -m train.data.tones``).
"""
from __future__ import annotations

import itertools

import numpy as np
import torch

from ._base import SyntheticDataset, check_min
from .audio_features import LogMel

SAMPLE_RATE = 16000
CONTOURS = ("up", "down", "flat")
CLASSES = tuple("-".join(c) for c in itertools.product(CONTOURS, repeat=3))
LOG_MEL_MEAN, LOG_MEL_STD = -6.2, 1.9  # measured by `python -m train.data.tones` on 512 train clips


def syllable(contour: str, f0: float, num_samples: int) -> np.ndarray:
    """One enveloped chirp / tone of ``num_samples`` samples, peak amplitude 1."""
    t = np.arange(num_samples) / SAMPLE_RATE
    length = num_samples / SAMPLE_RATE
    if contour == "flat":
        phase = 2 * np.pi * np.sqrt(2) * f0 * t
    else:  # f(t) = f_a * 2^(+-t/length): phase = 2 pi int f = 2 pi f_a length / ln r * (r^(t/length) - 1)
        f_a, ratio = (f0, 2.0) if contour == "up" else (2 * f0, 0.5)
        phase = 2 * np.pi * f_a * length / np.log(ratio) * (ratio ** (t / length) - 1)
    return np.sin(phase) * np.hanning(num_samples)


class Tones(SyntheticDataset):
    """27-class tone-syllable sequences as log-mel ``(1, 64, 1 + 100 * duration)``.

    >>> mel, label = Tones("train")[0]
    >>> mel.shape, Tones.classes[label].count("-")
    (torch.Size([1, 64, 101]), 2)
    """

    name, domain, task = "tones", "audio", "classify"
    num_classes, classes = len(CLASSES), CLASSES
    sample_rate = SAMPLE_RATE

    def __init__(self, split: str, *, seed: int = 0, duration: float = 1.0, syllables: int = 3,
                 size: int | None = None):
        super().__init__(split, seed=seed, size=size)
        check_min("duration", duration, 0.75)
        if syllables not in (1, 2, 3):
            raise ValueError(f"syllables must be 1, 2 or 3, got {syllables!r}")
        self.duration, self.syllables = float(duration), syllables
        self.classes = tuple("-".join(c) for c in itertools.product(CONTOURS, repeat=syllables))
        self.num_classes = len(self.classes)
        # labels with the same contours in another order share a group (the multiset of contours)
        multisets = sorted({tuple(sorted(c.split("-"))) for c in self.classes})
        self.order_blind_groups = [multisets.index(tuple(sorted(c.split("-")))) for c in self.classes]
        self.featurizer = LogMel(sample_rate=SAMPLE_RATE)

    def waveform(self, rng) -> tuple[np.ndarray, int]:
        """``(samples,)`` float32 clip and its label."""
        num_samples = int(round(self.duration * SAMPLE_RATE))
        contours = rng.integers(0, 3, self.syllables)
        f0 = np.exp(rng.uniform(np.log(300), np.log(1200)))
        wave = np.zeros(num_samples)
        slot = num_samples // self.syllables
        for k, c in enumerate(contours):
            length = int(rng.uniform(0.15, 0.22) * SAMPLE_RATE)
            start = k * slot + int(rng.integers(0, slot - length + 1))
            wave[start : start + length] += rng.uniform(0.3, 1.0) * syllable(CONTOURS[c], f0 * rng.uniform(0.9, 1.1), length)
        wave += rng.uniform(0.005, 0.05) * rng.standard_normal(num_samples)
        return wave.astype(np.float32), int(contours @ 3 ** np.arange(self.syllables)[::-1])

    def make(self, rng):
        wave, label = self.waveform(rng)
        mel = self.featurizer(torch.from_numpy(wave))  # (64, frames)
        return ((mel - LOG_MEL_MEAN) / LOG_MEL_STD).unsqueeze(0), label


if __name__ == "__main__":  # re-measure LOG_MEL_MEAN / LOG_MEL_STD
    data = Tones("train", size=512)
    mels = torch.stack([data.featurizer(torch.from_numpy(data.waveform(data.rng(i))[0])) for i in range(len(data))])
    print(f"LOG_MEL_MEAN, LOG_MEL_STD = {mels.mean():.1f}, {mels.std():.1f}")
