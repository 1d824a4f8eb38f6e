"""``tape``: tAPE pinned against ConvTran's code (ported below), its scale by the series length, its refusals."""
from __future__ import annotations

import math

import pytest
import torch
from torch import nn

import ndpe


class ConvTranTAPE(nn.Module):
    """ConvTran's tAPE, ported from github.com/Navidfoumani/ConvTran, ``Models/AbsolutePositionalEncoding.py``
    (class ``tAPE``, commit 148afb6) unchanged but for the dropout (p = 0 here)."""

    def __init__(self, d_model, dropout=0.0, max_len=1024, scale_factor=1.0):
        super().__init__()
        self.dropout = nn.Dropout(p=dropout)
        pe = torch.zeros(max_len, d_model)  # positional encoding
        position = torch.arange(0, max_len, dtype=torch.float).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2).float() * (-math.log(10000.0) / d_model))

        pe[:, 0::2] = torch.sin((position * div_term) * (d_model / max_len))
        pe[:, 1::2] = torch.cos((position * div_term) * (d_model / max_len))
        pe = scale_factor * pe.unsqueeze(0)
        self.register_buffer('pe', pe)

    def forward(self, x):
        x = x + self.pe
        return self.dropout(x)


@pytest.mark.parametrize("dim,length", [(64, 16), (16, 100), (128, 128), (32, 7)])
def test_equals_convtran(dim, length):
    """The table ConvTran adds to a series of its length (``max_len = seq_len``), and what ndpe adds."""
    x = torch.randn(2, length, dim)
    ref = ConvTranTAPE(dim, max_len=length)(x)
    pe = ndpe.make(dims=1, kind="tape", dim=dim)
    got = ndpe.apply_tokens(x, pe((length,)))
    torch.testing.assert_close(got, ref, rtol=1e-5, atol=1e-5)
    # the scale d / L is what tells tAPE from the vanilla sinusoid: dropping it misses by far (d != L)
    if dim != length:
        plain = ndpe.make(dims=1, kind="sinusoidal", dim=dim)((length,)).add
        assert (plain - ref[0] + x[0]).abs().max() > 0.5


def test_fixed_length_keeps_the_frequencies():
    """``length=L``: a shorter series gets the first rows of ConvTran's table for ``L``, a longer one continues it."""
    ref = ConvTranTAPE(32, max_len=20).pe[0]
    pe = ndpe.make(dims=1, kind="tape", dim=32, length=20)
    torch.testing.assert_close(pe((12,)).add, ref[:12], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(pe((40,)).add[:20], ref, rtol=1e-5, atol=1e-5)
    grown = ndpe.make(dims=1, kind="tape", dim=32)((40,)).add  # length=None: the longer series, rescaled
    assert not torch.allclose(grown[:20], ref, atol=1e-2)


def test_explicit_positions_decoding_and_prefix():
    pe = ndpe.make(dims=1, kind="tape", dim=16, length=10).eval()
    full = pe((10,), num_prefix=1)
    torch.testing.assert_close(pe(positions=torch.arange(10.0)[:, None]).add, full.add[1:])
    assert (full.add[0] == 0).all()
    torch.testing.assert_close(pe((3,), num_prefix=1, past=7).add, full.add[-3:])
    with pytest.raises(ValueError, match="length=None.*decod"):
        ndpe.make(dims=1, kind="tape", dim=16).eval()((3,), past=7)


@pytest.mark.parametrize("options,error,fragment", [
    ({"dim": 15}, ValueError, "even dim"),
    ({"dim": 16, "length": 0}, ValueError, "length"),
    ({"dim": 16, "temperature": -1.0}, ValueError, "temperature"),
])
def test_bad_options_raise_one_line(options, error, fragment):
    with pytest.raises(error, match=fragment) as info:
        ndpe.make(dims=1, kind="tape", **options)
    assert "\n" not in str(info.value)
    with pytest.raises(ValueError, match="dims"):
        ndpe.make(dims=2, kind="tape", dim=16)
