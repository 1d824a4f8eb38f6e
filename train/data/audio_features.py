"""Log-mel spectrogram in plain torch (no torchaudio): STFT -> power -> mel filterbank -> log.

Conventions (pinned against librosa 0.11 in ``tests/test_logmel.py``):

- STFT: ``torch.stft`` with a periodic Hann window of ``n_fft`` samples (= scipy's
  ``get_window("hann", n_fft, fftbins=True)`` that librosa uses), ``center=True`` with
  ``pad_mode="constant"`` (librosa's default since 0.10; torchaudio's default is "reflect"),
  so a clip of ``S`` samples gives ``1 + S // hop_length`` frames.
- Power spectrogram (``|X|^2``), then a triangular mel filterbank. Default mel scale and
  normalisation are **Slaney** (``mel_scale="slaney"``, ``norm="slaney"``: linear below 1 kHz,
  logarithmic above, each filter scaled to unit area) = librosa's defaults
  (``htk=False, norm="slaney"``) and Whisper's. ``mel_scale="htk", norm=None`` gives
  torchaudio ``MelSpectrogram``'s default filterbank (``2595 log10(1 + f/700)``, peak 1).
- Log: natural log of ``max(mel, floor)`` (``floor=1e-6`` by default), i.e. ``ln`` where
  librosa's ``power_to_db`` would use ``10 log10`` (a constant factor 10/ln 10 apart).

The filterbank and window are non-persistent buffers, computed in float64 and stored in
float32; they follow the module across devices.
"""
from __future__ import annotations

import math

import torch
from torch import nn

MEL_SCALES = ("slaney", "htk")


def hz_to_mel(hz: torch.Tensor, scale: str = "slaney") -> torch.Tensor:
    """Frequency in Hz -> mel (``scale`` "slaney": linear below 1 kHz, log above; "htk")."""
    hz = torch.as_tensor(hz, dtype=torch.float64)
    if scale == "htk":
        return 2595.0 * torch.log10(1.0 + hz / 700.0)
    f_sp, min_log_hz, min_log_mel, logstep = 200.0 / 3, 1000.0, 15.0, math.log(6.4) / 27.0
    linear = hz / f_sp
    return torch.where(hz >= min_log_hz, min_log_mel + torch.log(hz.clamp(min=1e-10) / min_log_hz) / logstep, linear)


def mel_to_hz(mel: torch.Tensor, scale: str = "slaney") -> torch.Tensor:
    """Inverse of :func:`hz_to_mel`."""
    mel = torch.as_tensor(mel, dtype=torch.float64)
    if scale == "htk":
        return 700.0 * (10.0 ** (mel / 2595.0) - 1.0)
    f_sp, min_log_hz, min_log_mel, logstep = 200.0 / 3, 1000.0, 15.0, math.log(6.4) / 27.0
    return torch.where(mel >= min_log_mel, min_log_hz * torch.exp(logstep * (mel - min_log_mel)), f_sp * mel)


def mel_filterbank(
    *, sample_rate: int, n_fft: int, n_mels: int, f_min: float = 0.0, f_max: float | None = None,
    mel_scale: str = "slaney", norm: str | None = "slaney",
) -> torch.Tensor:
    """Triangular mel filters, float64 ``(n_fft // 2 + 1, n_mels)`` (same values as librosa.filters.mel, transposed).

    >>> mel_filterbank(sample_rate=16000, n_fft=400, n_mels=64).shape
    torch.Size([201, 64])
    """
    if mel_scale not in MEL_SCALES:
        raise ValueError(f"mel_scale={mel_scale!r} is not supported; expected one of {MEL_SCALES}")
    if norm not in ("slaney", None):
        raise ValueError(f"norm={norm!r} is not supported; expected 'slaney' (unit area) or None (peak 1)")
    f_max = sample_rate / 2 if f_max is None else f_max
    if not 0 <= f_min < f_max <= sample_rate / 2:
        raise ValueError(f"need 0 <= f_min < f_max <= sample_rate/2, got f_min={f_min}, f_max={f_max}, sample_rate={sample_rate}")
    fft_freqs = torch.linspace(0, sample_rate / 2, n_fft // 2 + 1, dtype=torch.float64)  # (F,)
    mels = torch.linspace(float(hz_to_mel(f_min, mel_scale)), float(hz_to_mel(f_max, mel_scale)), n_mels + 2, dtype=torch.float64)
    edges = mel_to_hz(mels, mel_scale)  # (M + 2,) filter edges in Hz
    widths = edges.diff()  # (M + 1,)
    ramps = edges[:, None] - fft_freqs[None, :]  # (M + 2, F)
    lower = -ramps[:-2] / widths[:-1, None]  # rising slope of filter m
    upper = ramps[2:] / widths[1:, None]  # falling slope
    weights = torch.clamp(torch.minimum(lower, upper), min=0.0)  # (M, F)
    if norm == "slaney":
        weights = weights * (2.0 / (edges[2:] - edges[:-2]))[:, None]
    return weights.T.contiguous()


class LogMel(nn.Module):
    """Waveform ``(..., samples)`` -> log-mel ``(..., n_mels, frames)``, ``frames = 1 + samples // hop_length``.

    >>> LogMel()(torch.zeros(2, 16000)).shape
    torch.Size([2, 64, 101])
    """

    def __init__(
        self, *, sample_rate: int = 16000, n_fft: int = 400, hop_length: int = 160, n_mels: int = 64,
        f_min: float = 0.0, f_max: float | None = None, mel_scale: str = "slaney", norm: str | None = "slaney",
        floor: float = 1e-6, pad_mode: str = "constant",
    ):
        super().__init__()
        if floor <= 0:
            raise ValueError(f"floor must be > 0 (it keeps log finite), got {floor}")
        self.sample_rate, self.n_fft, self.hop_length, self.n_mels = sample_rate, n_fft, hop_length, n_mels
        self.floor, self.pad_mode = floor, pad_mode
        fb = mel_filterbank(sample_rate=sample_rate, n_fft=n_fft, n_mels=n_mels, f_min=f_min, f_max=f_max, mel_scale=mel_scale, norm=norm)
        self.register_buffer("window", torch.hann_window(n_fft, periodic=True, dtype=torch.float64).float(), persistent=False)
        self.register_buffer("fb", fb.float(), persistent=False)  # (n_fft // 2 + 1, n_mels)

    def num_frames(self, num_samples: int) -> int:
        """Frames produced for a clip of ``num_samples`` samples (``center=True``)."""
        return 1 + num_samples // self.hop_length

    def forward(self, wave: torch.Tensor) -> torch.Tensor:
        lead = wave.shape[:-1]
        x = wave.reshape(-1, wave.shape[-1]).to(self.window.dtype)  # (B, S) in float32
        spec = torch.stft(x, self.n_fft, self.hop_length, window=self.window, center=True, pad_mode=self.pad_mode, return_complex=True)
        power = spec.real**2 + spec.imag**2  # (B, F, T)
        mel = torch.einsum("bft,fm->bmt", power, self.fb)  # (B, M, T)
        out = torch.log(torch.clamp(mel, min=self.floor))
        return out.reshape(*lead, *out.shape[-2:])

    def extra_repr(self) -> str:
        return f"sample_rate={self.sample_rate}, n_fft={self.n_fft}, hop_length={self.hop_length}, n_mels={self.n_mels}, floor={self.floor}"
