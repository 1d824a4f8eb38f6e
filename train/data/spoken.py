"""Audio dataset "spoken": the 35 Speech Commands v2 words spoken by eSpeak NG, synthesized offline.

Needs the optional extra ``speech`` (``pip install 'ndpe[speech]'``: the ``espeakng-loader`` wheel,
which ships ``libespeak-ng`` and its data; GPL-3, so it is never a dependency of ``ndpe`` itself).
The library is driven through ``ctypes`` in ``AUDIO_OUTPUT_SYNCHRONOUS`` mode (a synth callback
collects the 16-bit samples; no audio device, no threads), initialised lazily once per process;
calls are serialised by a lock because libespeak-ng is not thread-safe.

A clip: one word (class = index in :data:`WORDS`, the sorted 35-word label set of Speech Commands
v2) in a voice ``<accent>+<variant>``: accent one of :data:`ACCENTS` (8 English voices), variant
one of the voice variants shipped in ``espeak-ng-data/voices/!v`` (all 103 whose file name has no
space, plus the plain accent), with a random rate (110-230 words per minute), base pitch (20-80)
and pitch range (20-90). The 22.05 kHz synthesis is resampled to 16 kHz with :func:`resample` (a
Kaiser-windowed sinc polyphase filter, checked against ``librosa.resample``), trimmed of leading
and trailing silence, scaled to a random peak (0.1-0.9), placed at a random offset anywhere inside
the clip of ``duration`` seconds, and mixed with coloured noise (spectrum ``1/f^a``, ``a`` in
[0, 2]: white to brown) at a random SNR of 5-30 dB. Words keep their length in samples at every
duration (1.5 s and 2 s clips test extrapolation); a word longer than the clip (slow rate, slow
variant, short clip) is re-synthesized once at the rate raised in proportion (at most 450 wpm) and
then, if still too long, trimmed to the clip.

Held-out voices: the variants are sorted case-insensitively and every 4th (positions 3, 7, 11, ...)
is a **test** variant (:data:`TEST_VARIANTS`, 25 of them: Andrea, Annie, aunty, caleb, Denis,
edward2, f4, Gene2, Henrique, iven2, john, klatt3, Lee, m3, m7, Mario, miguel, norbert, quincy,
RicishayMax3, robosoft2, robosoft6, shelby, Storm, victor); "train" and "val" use the other 78 and
the plain accent (:data:`TRAIN_VARIANTS`, 79). Accents are shared by all splits.

Items ``(float (1, 64, frames), int)`` with ``frames = 1 + 100 * duration``: the log-mel of
:class:`LogMel` (defaults) shifted and scaled by fixed constants (:data:`LOG_MEL_MEAN`,
:data:`LOG_MEL_STD`) measured once on train clips (``python -m train.data.spoken``). Items are a
pure function of ``(seed, split, index, options)`` (and of the espeak-ng data of the installed
``espeakng-loader``, pinned by the extra).
"""
from __future__ import annotations

import ctypes
import math
import threading
from functools import lru_cache
from typing import NamedTuple

import numpy as np
import torch

from ._base import SyntheticDataset, check_min
from .audio_features import LogMel

SAMPLE_RATE = 16000
WORDS = (
    "backward", "bed", "bird", "cat", "dog", "down", "eight", "five", "follow", "forward", "four", "go",
    "happy", "house", "learn", "left", "marvin", "nine", "no", "off", "on", "one", "right", "seven",
    "sheila", "six", "stop", "three", "tree", "two", "up", "visual", "wow", "yes", "zero",
)  # fmt: skip
ACCENTS = ("en", "en-us", "en-029", "en-gb-scotland", "en-gb-x-gbclan", "en-gb-x-gbcwmd", "en-gb-x-rp", "en-us-nyc")
# The files of espeak-ng-data/voices/!v in espeakng-loader 0.2.4 (espeak-ng 1.52), "Mr serious" left out.
VARIANTS = tuple(sorted((
    "Alex", "Alicia", "Andrea", "Andy", "Annie", "AnxiousAndy", "Demonic", "Denis", "Diogo", "Gene", "Gene2",
    "Henrique", "Hugo", "Jacky", "Lee", "Marco", "Mario", "Michael", "Mike", "Nguyen", "Reed", "RicishayMax",
    "RicishayMax2", "RicishayMax3", "Storm", "Tweaky", "UniRobot", "adam", "anika", "anikaRobot", "announcer",
    "antonio", "aunty", "belinda", "benjamin", "boris", "caleb", "croak", "david", "ed", "edward", "edward2",
    "f1", "f2", "f3", "f4", "f5", "fast", "grandma", "grandpa", "gustave", "ian", "iven", "iven2", "iven3",
    "iven4", "john", "kaukovalta", "klatt", "klatt2", "klatt3", "klatt4", "klatt5", "klatt6", "linda", "m1",
    "m2", "m3", "m4", "m5", "m6", "m7", "m8", "marcelo", "max", "michel", "miguel", "mike2", "norbert", "pablo",
    "paul", "pedro", "quincy", "rob", "robert", "robosoft", "robosoft2", "robosoft3", "robosoft4", "robosoft5",
    "robosoft6", "robosoft7", "robosoft8", "sandro", "shelby", "steph", "steph2", "steph3", "travis", "victor",
    "whisper", "whisperf", "zac",
), key=str.lower))  # fmt: skip
TEST_VARIANTS = VARIANTS[3::4]
TRAIN_VARIANTS = ("",) + tuple(v for v in VARIANTS if v not in TEST_VARIANTS)  # "": the accent's own voice
RATE, PITCH, RANGE = (110, 230), (20, 80), (20, 90)  # espeak units: words/minute, 0-100, 0-100
MAX_RATE = 450
SNR_DB, PEAK, NOISE_EXPONENT = (5.0, 30.0), (0.1, 0.9), (0.0, 2.0)
LOG_MEL_MEAN, LOG_MEL_STD = -8.4, 3.3  # measured by `python -m train.data.spoken` on 512 train clips

EXTRA_ERROR = ("the 'spoken' dataset needs the optional extra 'speech' (libespeak-ng, GPL-3): "
               "pip install 'ndpe[speech]' (or: pip install espeakng-loader)")

# -- resampling ----------------------------------------------------------------------------------


@lru_cache(maxsize=8)
def _polyphase_table(up: int, down: int, num_zeros: int, rolloff: float, beta: float) -> tuple[np.ndarray, int]:
    """Filter taps ``(up, 2 * half)`` for each output phase and ``half`` (taps each side, input samples)."""
    cutoff = rolloff * min(1.0, up / down)  # fraction of the input Nyquist
    width = num_zeros / cutoff  # half-width of the windowed sinc, in input samples
    half = int(math.ceil(width))
    offsets = np.arange(-half + 1, half + 1)  # input taps i + j around the output position
    dist = offsets[None, :] - np.arange(up)[:, None] / up  # (up, taps): input tap - output position
    window = np.i0(beta * np.sqrt(np.clip(1.0 - (dist / width) ** 2, 0.0, None))) / np.i0(beta)
    return cutoff * np.sinc(cutoff * dist) * window * (np.abs(dist) <= width), half


def resample(x: np.ndarray, orig_sr: int, target_sr: int, *, num_zeros: int = 32, rolloff: float = 0.945,
             beta: float = 10.0) -> np.ndarray:
    """Band-limited resampling of 1-D ``x`` (Kaiser-windowed sinc, ``num_zeros`` zero crossings a side).

    Output sample ``n`` sits at input time ``n * orig_sr / target_sr`` (as librosa / resampy), length
    ``ceil(len(x) * target_sr / orig_sr)``; the signal is zero outside ``x``. The low-pass cuts at
    ``rolloff`` times the lower Nyquist frequency.

    >>> y = resample(np.sin(np.arange(22050) * 2 * np.pi * 440 / 22050), 22050, 16000)
    >>> y.shape, bool(np.abs(y[100:-100] - np.sin(np.arange(100, 15900) * 2 * np.pi * 440 / 16000)).max() < 1e-3)
    ((16000,), True)
    """
    x = np.asarray(x, dtype=np.float64)
    g = math.gcd(int(orig_sr), int(target_sr))
    up, down = int(target_sr) // g, int(orig_sr) // g
    if up == down:
        return x.copy()
    table, half = _polyphase_table(up, down, num_zeros, float(rolloff), float(beta))
    n_out = -(-len(x) * up // down)
    pos = np.arange(n_out, dtype=np.int64) * down
    base, phase = pos // up, pos % up  # output n sits at input base + phase / up
    padded = np.pad(x, (half, half + 1))
    idx = base[:, None] + np.arange(1, 2 * half + 1)[None, :]  # padded index of input base - half + 1 + j
    return np.einsum("nk,nk->n", padded[idx], table[phase])


# -- libespeak-ng through ctypes -----------------------------------------------------------------

AUDIO_OUTPUT_SYNCHRONOUS, INITIALIZE_DONT_EXIT = 2, 0x8000
ESPEAK_RATE, ESPEAK_PITCH, ESPEAK_RANGE = 1, 3, 4  # espeak_PARAMETER
POS_CHARACTER, CHARS_UTF8 = 1, 1
# int SynthCallback(short *wav, int numsamples, espeak_EVENT *events); events are not read.
_CALLBACK = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.POINTER(ctypes.c_short), ctypes.c_int, ctypes.c_void_p)
_LOCK = threading.Lock()
_STATE: dict = {}  # lib, sample_rate, callback (kept alive), chunks


def require_espeak():
    """The ``espeakng_loader`` module, or ImportError naming the extra to install."""
    try:
        import espeakng_loader
    except ImportError as err:
        raise ImportError(EXTRA_ERROR) from err
    return espeakng_loader


def _espeak() -> dict:
    """Load and initialise libespeak-ng once per process (call with ``_LOCK`` held)."""
    if _STATE:
        return _STATE
    loader = require_espeak()
    lib = ctypes.CDLL(loader.get_library_path())
    lib.espeak_Initialize.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_char_p, ctypes.c_int]
    lib.espeak_Initialize.restype = ctypes.c_int
    lib.espeak_SetSynthCallback.argtypes = [_CALLBACK]
    lib.espeak_SetSynthCallback.restype = None
    lib.espeak_SetVoiceByName.argtypes = [ctypes.c_char_p]
    lib.espeak_SetVoiceByName.restype = ctypes.c_int
    lib.espeak_SetParameter.argtypes = [ctypes.c_int, ctypes.c_int, ctypes.c_int]
    lib.espeak_SetParameter.restype = ctypes.c_int
    # espeak_Synth(text, size, position, position_type, end_position, flags, unique_identifier*, user_data*)
    lib.espeak_Synth.argtypes = [ctypes.c_char_p, ctypes.c_size_t, ctypes.c_uint, ctypes.c_int, ctypes.c_uint,
                                 ctypes.c_uint, ctypes.c_void_p, ctypes.c_void_p]
    lib.espeak_Synth.restype = ctypes.c_int
    # path: the espeak-ng-data folder of the wheel (espeak-ng accepts the data folder itself)
    rate = lib.espeak_Initialize(AUDIO_OUTPUT_SYNCHRONOUS, 0, loader.get_data_path().encode(), INITIALIZE_DONT_EXIT)
    if rate <= 0:
        raise RuntimeError(f"espeak_Initialize failed ({rate}) with data path {loader.get_data_path()}")
    chunks: list[np.ndarray] = []

    def collect(wav, num_samples, events):
        if wav and num_samples > 0:
            chunks.append(np.ctypeslib.as_array(wav, (num_samples,)).copy())
        return 0  # continue

    callback = _CALLBACK(collect)
    lib.espeak_SetSynthCallback(callback)
    _STATE.update(lib=lib, sample_rate=rate, callback=callback, chunks=chunks)
    return _STATE


def synthesize(word: str, voice: str = "en-us", *, rate: int = 175, pitch: int = 50, pitch_range: int = 50) -> tuple[np.ndarray, int]:
    """``(int16 samples, sample_rate)`` of ``word`` spoken by espeak-ng ``voice`` (e.g. "en-gb-x-rp+f2")."""
    text = word.encode() + b"\0"
    with _LOCK:
        state = _espeak()
        lib, chunks = state["lib"], state["chunks"]
        if lib.espeak_SetVoiceByName(voice.encode()) != 0:
            raise ValueError(f"espeak-ng has no voice {voice!r}")
        for param, value in ((ESPEAK_RATE, rate), (ESPEAK_PITCH, pitch), (ESPEAK_RANGE, pitch_range)):
            if lib.espeak_SetParameter(param, int(value), 0) != 0:
                raise RuntimeError(f"espeak_SetParameter({param}, {value}) failed")
        chunks.clear()
        err = lib.espeak_Synth(text, len(text), 0, POS_CHARACTER, 0, CHARS_UTF8, None, None)
        if err != 0:
            raise RuntimeError(f"espeak_Synth({word!r}) failed with error {err}")
        wave = np.concatenate(chunks) if chunks else np.zeros(0, dtype=np.int16)
        chunks.clear()
        return wave, state["sample_rate"]


def trim(wave: np.ndarray, threshold: float = 1e-3) -> np.ndarray:
    """Cut leading and trailing samples with ``|x| <= threshold`` (keeps at least one sample).

    >>> trim(np.array([0.0, 0.0, 0.5, 0.0, -0.2, 0.0]))
    array([ 0.5,  0. , -0.2])
    """
    loud = np.flatnonzero(np.abs(wave) > threshold)
    return wave[loud[0] : loud[-1] + 1] if len(loud) else wave[:1]


@lru_cache(maxsize=4096)
def spoken_word(word: str, voice: str, rate: int, pitch: int, pitch_range: int) -> np.ndarray:
    """``word`` by ``voice`` at 16 kHz, float32 in [-1, 1], silence trimmed.

    Cached per process (at most 4096 words, about 150 MB): a second epoch over up to ~4k items
    skips synthesis and resampling (~4x faster). The returned array is read-only.
    """
    raw, sr = synthesize(word, voice, rate=rate, pitch=pitch, pitch_range=pitch_range)
    wave = trim(resample(raw.astype(np.float64) / 32768.0, sr, SAMPLE_RATE)).astype(np.float32)
    wave.setflags(write=False)
    return wave


# -- the dataset ---------------------------------------------------------------------------------


class Clip(NamedTuple):
    """One clip before its log-mel: the waveform, label, voice and where the word lies."""

    wave: np.ndarray  # float32 (samples,)
    label: int
    voice: str  # "<accent>+<variant>" or "<accent>"
    rate: int  # words per minute actually used (raised when the word did not fit)
    start: int  # first sample of the word
    length: int  # samples of the word


def colored_noise(rng: np.random.Generator, num_samples: int, exponent: float) -> np.ndarray:
    """Gaussian noise with power spectrum ``~ 1 / f^exponent`` (0 white, 1 pink, 2 brown), unit RMS."""
    spec = np.fft.rfft(rng.standard_normal(num_samples))
    freqs = np.fft.rfftfreq(num_samples)
    freqs[0] = freqs[1] if num_samples > 1 else 1.0
    noise = np.fft.irfft(spec * freqs ** (-exponent / 2), n=num_samples)
    return noise / max(float(np.sqrt(np.mean(noise**2))), 1e-12)


class SpokenWords(SyntheticDataset):
    """35 spoken words (eSpeak NG voices, held-out test voices) as log-mel ``(1, 64, 1 + 100 * duration)``.

    >>> data = SpokenWords("test", size=4, duration=1.5)
    >>> mel, label = data[0]
    >>> mel.shape, SpokenWords.classes[label] in WORDS, data.clip(0).voice.split("+")[1] in TEST_VARIANTS
    (torch.Size([1, 64, 151]), True, True)
    """

    name, domain, task = "spoken", "audio", "classify"
    num_classes, classes = len(WORDS), WORDS
    sample_rate = SAMPLE_RATE

    def __init__(self, split: str, *, seed: int = 0, duration: float = 1.0, size: int | None = None):
        super().__init__(split, seed=seed, size=size)
        check_min("duration", duration, 0.5)
        require_espeak()
        self.duration = float(duration)
        self.num_samples = int(round(self.duration * SAMPLE_RATE))
        self.variants = TEST_VARIANTS if split == "test" else TRAIN_VARIANTS
        self.featurizer = LogMel(sample_rate=SAMPLE_RATE)

    def draw(self, rng: np.random.Generator) -> Clip:
        """The clip of generator ``rng``: every draw but the noise is made before the duration is used."""
        label = int(rng.integers(len(WORDS)))
        accent = ACCENTS[rng.integers(len(ACCENTS))]
        variant = self.variants[rng.integers(len(self.variants))]
        rate, pitch, pitch_range = (int(rng.integers(lo, hi + 1)) for lo, hi in (RATE, PITCH, RANGE))
        peak, snr_db, exponent, where = rng.uniform(*PEAK), rng.uniform(*SNR_DB), rng.uniform(*NOISE_EXPONENT), rng.random()
        voice = f"{accent}+{variant}" if variant else accent
        word = spoken_word(WORDS[label], voice, rate, pitch, pitch_range)
        if len(word) > self.num_samples:  # too long for the clip: speak faster, then cut what still sticks out
            rate = min(MAX_RATE, int(math.ceil(rate * len(word) / self.num_samples)))
            word = spoken_word(WORDS[label], voice, rate, pitch, pitch_range)[: self.num_samples]
        word = word * (peak / max(float(np.abs(word).max()), 1e-6))
        start = int(where * (self.num_samples - len(word) + 1))
        wave = np.zeros(self.num_samples)
        wave[start : start + len(word)] = word
        word_rms = float(np.sqrt(np.mean(word**2)))
        wave += word_rms * 10 ** (-snr_db / 20) * colored_noise(rng, self.num_samples, exponent)
        return Clip(wave.astype(np.float32), label, voice, rate, start, len(word))

    def clip(self, index: int) -> Clip:
        """The :class:`Clip` behind item ``index``."""
        if not 0 <= index < self.size:
            raise IndexError(f"index {index} out of range for {self.name} {self.split} of size {self.size}")
        return self.draw(self.rng(index))

    def make(self, rng):
        clip = self.draw(rng)
        mel = self.featurizer(torch.from_numpy(clip.wave))  # (64, frames)
        return ((mel - LOG_MEL_MEAN) / LOG_MEL_STD).unsqueeze(0), clip.label


if __name__ == "__main__":  # re-measure LOG_MEL_MEAN / LOG_MEL_STD
    data = SpokenWords("train", size=512)
    mels = torch.stack([data.featurizer(torch.from_numpy(data.clip(i).wave)) for i in range(len(data))])
    print(f"LOG_MEL_MEAN, LOG_MEL_STD = {mels.mean():.1f}, {mels.std():.1f}")
