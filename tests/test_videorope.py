"""``videorope`` against a port of VideoRoPE's public code (Wiselnn570/VideoRoPE, videorope-transformer/
modeling_videorope.py, Apache-2.0: ``get_t_scale_rope_index``'s video ids and
``apply_m_modify_multimodal_rotary_pos_emb``), a per-pair loop of the formula, and its relative property."""
from __future__ import annotations

import math

import pytest
import torch

import ndpe


# ---- port of the reference (video tokens only: no text before them, so its st_idx and text_len are 0) -------------

def reference_ids(t: int, h: int, w: int, scale_factor: float = 2.0) -> torch.Tensor:
    """``get_t_scale_rope_index``'s (t, h, w) ids of one video grid, ``(3, N)``."""
    t_index = torch.arange(t).view(-1, 1).expand(-1, h * w).flatten()
    h_index = torch.arange(h).view(1, -1, 1).expand(t, -1, w).flatten() - (h - 1) // 2
    w_index = torch.arange(w).view(1, 1, -1).expand(t, h, -1).flatten() - (w - 1) // 2
    t_index = t_index * scale_factor
    h_index = h_index + t_index
    w_index = w_index + t_index
    return torch.stack([t_index, h_index, w_index])


def rotate_half(x):
    x1, x2 = x[..., : x.shape[-1] // 2], x[..., x.shape[-1] // 2:]
    return torch.cat((-x2, x1), dim=-1)


def reference_apply(q, k, cos, sin, mrope_section):
    """``apply_m_modify_multimodal_rotary_pos_emb`` (cos, sin: ``(3, B, N, head_dim)``)."""
    mrope_section = [mrope_section[0], mrope_section[1] + mrope_section[2]]
    mrope_section = (mrope_section * 2)[::-1]
    index, result_cos, result_sin = 0, [], []
    for i, section in enumerate(mrope_section):
        if i % 2 == 0:
            for j in range(section):
                row = 1 if j % 2 == 0 else 2
                result_cos.append(cos[row, ..., index: index + 1])
                result_sin.append(sin[row, ..., index: index + 1])
                index += 1
        else:
            result_cos.append(cos[0, ..., index:index + section])
            result_sin.append(sin[0, ..., index:index + section])
            index += section
    cos, sin = torch.cat(result_cos, dim=-1).unsqueeze(1), torch.cat(result_sin, dim=-1).unsqueeze(1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


def reference_cos_sin(ids, head_dim, theta=10000.0):
    """Qwen2-VL's rotary embedding of (3, B, N) ids: one series over the head, ``cat(freqs, freqs)``."""
    inv_freq = 1.0 / theta ** (torch.arange(0, head_dim, 2, dtype=torch.float64) / head_dim)
    freqs = ids[..., None].double() * inv_freq  # (3, B, N, head_dim / 2)
    emb = torch.cat([freqs, freqs], -1)
    return emb.cos().float(), emb.sin().float()


@pytest.mark.parametrize("grid", [(2, 4, 6), (3, 3, 3), (4, 2, 5), (1, 5, 4)], ids=str)
@pytest.mark.parametrize("head_dim,section", [(64, (8, 12, 12)), (128, (16, 24, 24)), (32, (4, 6, 6))])
def test_equals_the_reference(grid, head_dim, section):
    pe = ndpe.make(dims=3, kind="videorope", dim=head_dim * 2, heads=2)
    assert pe.temporal_frequencies == section[0]
    ids = reference_ids(*grid)[:, None]  # (3, 1, N)
    q, k = torch.randn(2, 1, 2, math.prod(grid), head_dim).unbind(0)
    ref = reference_apply(q, k, *reference_cos_sin(ids, head_dim), list(section))
    mine = ndpe.apply_qk(q, k, pe(grid))
    for a, b in zip(mine, ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(pe.layout(pe.coords(grid), grid).T, reference_ids(*grid).float())


def test_temporal_spacing_and_frequencies():
    pe = ndpe.make(dims=3, kind="videorope", dim=64, heads=1, temporal_spacing=3.0, temporal_frequencies=4)
    ids = pe.layout(pe.coords((2, 3, 3)), (2, 3, 3))
    assert ids[9].tolist() == [3.0, 2.0, 2.0]  # frame 1, row 0, column 0: t' = 3, h' = 0 - 1 + 3
    assert pe.freq_axis.tolist()[-4:] == [0] * 4 and pe.freq_axis.tolist().count(0) == 4
    freqs = pe.inv_freq
    assert freqs[pe.freq_axis == 0].max() < freqs[pe.freq_axis != 0].min()  # time on the slowest


def test_formula_per_pair():
    """q'.k' = sum_j (q, k pair j) rotated by (id_q - id_k)[axis(j)] * f_j: a per-pair loop."""
    pe = ndpe.make(dims=3, kind="videorope", dim=16, heads=1, pairing="half")
    grid = (2, 2, 3)
    ids = pe.layout(pe.coords(grid), grid).double()
    q, k = torch.randn(2, 1, 1, 12, 16, dtype=torch.float64).unbind(0)
    rq, rk = ndpe.apply_qk(q.float(), k.float(), pe(grid))
    got = (rq @ rk.transpose(-1, -2))[0, 0]
    f, axis = pe.inv_freq, pe.freq_axis
    for i in range(12):
        for m in range(12):
            total = 0.0
            for j in range(8):
                a = (ids[i, axis[j]] - ids[m, axis[j]]) * f[j]
                qa, qb, ka, kb = q[0, 0, i, j], q[0, 0, i, j + 8], k[0, 0, m, j], k[0, 0, m, j + 8]
                total += (qa * ka + qb * kb) * torch.cos(a) - (qb * ka - qa * kb) * torch.sin(a)  # Re(z e^{ia})
            torch.testing.assert_close(got[i, m].double(), total, rtol=1e-4, atol=1e-4)


def test_refusals():
    with pytest.raises(ValueError, match="temporal_frequencies must leave"):
        ndpe.make(dims=3, kind="videorope", dim=32, heads=1, temporal_frequencies=16)
    with pytest.raises(ValueError, match="temporal_spacing must be"):
        ndpe.make(dims=3, kind="videorope", dim=32, heads=1, temporal_spacing=0.0)



def test_explicit_ids_are_used_as_they_are():
    """positions= alone are laid-out ids (a text + video sequence): equal to the grid call at the grid's layout."""
    pe = ndpe.make(dims=3, kind="videorope", dim=32, heads=1)
    grid = (2, 3, 4)
    ids = pe.layout(pe.coords(grid), grid)
    for a, b in zip(pe(positions=ids).rot, pe(grid).rot):
        torch.testing.assert_close(a, b)
