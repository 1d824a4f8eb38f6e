"""LogMel against librosa 0.11 (the peer): filterbank, mel scale, spectrogram, framing."""
from __future__ import annotations

import librosa
import numpy as np
import pytest
import torch

from train.data.audio_features import LogMel, hz_to_mel, mel_filterbank, mel_to_hz

# (mel_scale, norm) pairs and the librosa arguments that equal them
SCALES = [("slaney", "slaney", dict(htk=False, norm="slaney")), ("htk", None, dict(htk=True, norm=None)), ("htk", "slaney", dict(htk=True, norm="slaney"))]


def chirp_with_noise(num_samples: int, sr: int = 16000) -> np.ndarray:
    t = np.arange(num_samples) / sr
    rng = np.random.default_rng(0)
    return (0.5 * np.sin(2 * np.pi * (200 * t + 1500 * t**2)) + 0.05 * rng.standard_normal(num_samples)).astype(np.float32)


@pytest.mark.parametrize("scale", ["slaney", "htk"])
def test_mel_scale_matches_librosa(scale):
    hz = np.array([0.0, 50.0, 700.0, 999.0, 1000.0, 1001.0, 4000.0, 8000.0])
    mel = hz_to_mel(torch.from_numpy(hz), scale).numpy()
    np.testing.assert_allclose(mel, librosa.hz_to_mel(hz, htk=scale == "htk"), rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(mel_to_hz(torch.from_numpy(mel), scale).numpy(), hz, rtol=1e-10, atol=1e-9)


@pytest.mark.parametrize("mel_scale,norm,peer", SCALES)
@pytest.mark.parametrize("sr,n_fft,n_mels,f_min,f_max", [(16000, 400, 64, 0.0, None), (16000, 512, 40, 20.0, 7600.0), (22050, 1024, 128, 0.0, 11025.0)])
def test_filterbank_matches_librosa(mel_scale, norm, peer, sr, n_fft, n_mels, f_min, f_max):
    ours = mel_filterbank(sample_rate=sr, n_fft=n_fft, n_mels=n_mels, f_min=f_min, f_max=f_max, mel_scale=mel_scale, norm=norm)
    ref = librosa.filters.mel(sr=sr, n_fft=n_fft, n_mels=n_mels, fmin=f_min, fmax=f_max, dtype=np.float64, **peer)
    assert ours.shape == (n_fft // 2 + 1, n_mels)
    np.testing.assert_allclose(ours.T.numpy(), ref, rtol=1e-9, atol=1e-12 * ref.max())


@pytest.mark.parametrize("mel_scale,norm,peer", SCALES)
@pytest.mark.parametrize("seconds", [1.0, 1.5])
def test_log_mel_matches_librosa(mel_scale, norm, peer, seconds):
    """float32 torch STFT vs float64 librosa: within 1e-3 in natural log, i.e. 0.1% in power."""
    wave = chirp_with_noise(int(16000 * seconds))
    ours = LogMel(mel_scale=mel_scale, norm=norm)(torch.from_numpy(wave)).numpy()
    ref = librosa.feature.melspectrogram(
        y=wave.astype(np.float64), sr=16000, n_fft=400, hop_length=160, win_length=400, window="hann",
        center=True, pad_mode="constant", power=2.0, n_mels=64, **peer,
    )
    assert ours.shape == ref.shape == (64, 1 + int(16000 * seconds) // 160)
    np.testing.assert_allclose(ours, np.log(np.maximum(ref, 1e-6)), atol=1e-3)


def test_batch_dims_and_framing():
    fe = LogMel(n_mels=32, hop_length=128, n_fft=256)
    waves = torch.from_numpy(np.stack([chirp_with_noise(8000), chirp_with_noise(8000)[::-1].copy()]))
    out = fe(waves.reshape(1, 2, 8000))
    assert out.shape == (1, 2, 32, fe.num_frames(8000)) == (1, 2, 32, 63)
    torch.testing.assert_close(out[0, 1], fe(waves[1]))  # items of a batch are independent


def test_silence_hits_the_floor_and_buffers_are_not_saved():
    fe = LogMel(floor=1e-5)
    out = fe(torch.zeros(1600))
    torch.testing.assert_close(out, torch.full_like(out, float(np.log(1e-5))))
    assert fe.state_dict() == {}  # derived tables, rebuilt from the options
    assert {n for n, _ in fe.named_buffers()} == {"window", "fb"}
    assert fe.to(torch.float64).fb.dtype == torch.float64


@pytest.mark.parametrize("kwargs", [dict(mel_scale="mel"), dict(norm="area"), dict(f_max=9000.0), dict(floor=0.0)])
def test_bad_options_raise(kwargs):
    with pytest.raises(ValueError):
        LogMel(**kwargs)
