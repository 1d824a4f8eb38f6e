"""``vrope`` against a port of VRoPE's public code (johncaged/VRoPE, vrope.py: ``VRoPE.generate_nd_positions``,
``generate_1d_positions`` and the ``current_index`` that runs through a video + text sequence), a per-pair loop of
the four ids' formula, and the paper's properties: symmetric scores around a query, frames that continue a text
index, logits that depend on offsets alone."""
from __future__ import annotations

import math

import pytest
import torch

import ndpe


# ---- port of the reference --------------------------------------------------------------------------------------

def reference_video_ids(t: int, h: int, w: int, half_head_dim: int, start: int = 0) -> torch.Tensor:
    """``generate_nd_positions((t, h, w))`` at ``current_index=start`` (``half_time_dim`` is 0 in the code):
    ``(t * h * w, half_head_dim)`` ids, frequency ``i`` taking the ``i mod 4``-th of the 2^2 flip combinations."""
    shape, n = (h, w), h * w
    span = h + w - 1  # indices one frame uses
    per_axis = []
    for x, size in enumerate(shape):
        before, after = math.prod(shape[:x]), math.prod(shape[x + 1:])
        pos = torch.arange(size).view(1, size, 1).expand(before, size, after)
        both = torch.stack([pos.flatten(), pos.flip(dims=(1,)).flatten()])  # as is, flipped
        view = [1, 1]
        view[x] = 2
        per_axis.append(both.view(*view, n))
    combos = sum(per_axis).reshape(-1, n).unsqueeze(0).expand(t, -1, -1)  # (t, 4, n): flip bits (row, col)
    combos = combos + (torch.arange(t) * span)[:, None, None]
    combos = combos.permute(1, 0, 2).flatten(start_dim=1) + start  # (4, t * n)
    return torch.stack([combos[i % 4] for i in range(half_head_dim)], dim=-1)


def reference_text_ids(n: int, half_head_dim: int, start: int) -> torch.Tensor:
    """``generate_1d_positions(n)`` at ``current_index=start``."""
    return torch.arange(start, start + n).unsqueeze(-1).expand(-1, half_head_dim)


def reference_apply(q, k, ids, theta=10000.0):
    """Per-frequency ids ``(N, d/2)`` -> angles ``id * inv_freq``, ``cat(freqs, freqs)``, HF's ``rotate_half``."""
    d = q.shape[-1]
    inv_freq = 1.0 / theta ** (torch.arange(0, d, 2, dtype=torch.float64) / d)
    emb = torch.cat([ids.double() * inv_freq] * 2, dim=-1)
    cos, sin = emb.cos().float(), emb.sin().float()

    def rotate_half(x):
        return torch.cat((-x[..., d // 2:], x[..., :d // 2]), dim=-1)
    return q * cos + rotate_half(q) * sin, k * cos + rotate_half(k) * sin


@pytest.mark.parametrize("grid", [(2, 4, 6), (3, 3, 3), (1, 5, 4), (4, 2, 5)], ids=str)
@pytest.mark.parametrize("head_dim", [16, 64])
def test_equals_the_reference(grid, head_dim):
    pe = ndpe.make(dims=3, kind="vrope", dim=2 * head_dim, heads=2)
    q, k = torch.randn(2, 1, 2, math.prod(grid), head_dim).unbind(0)
    ref = reference_apply(q, k, reference_video_ids(*grid, head_dim // 2))
    for a, b in zip(ndpe.apply_qk(q, k, pe(grid)), ref):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_text_video_text_sequence_equals_the_reference():
    """One ``positions=`` call of (u, a, b) ids: text ``(n, 0, 0)``, the video's layout shifted to where it starts."""
    pe = ndpe.make(dims=3, kind="vrope", dim=32, heads=1)
    grid, before, after = (2, 3, 4), 5, 3
    span = grid[0] * (grid[1] + grid[2] - 1)
    ref_ids = torch.cat([reference_text_ids(before, 16, 0), reference_video_ids(*grid, 16, start=before),
                         reference_text_ids(after, 16, before + span)])
    video = pe.layout(pe.coords(grid), grid) + torch.tensor([before, 0.0, 0.0])
    text = [torch.stack([torch.arange(s, s + n, dtype=torch.float32), torch.zeros(n), torch.zeros(n)], -1)
            for s, n in ((0, before), (before + span, after))]
    ids = torch.cat([text[0], video, text[1]])
    n = ids.shape[0]
    q, k = torch.randn(2, 1, 1, n, 32).unbind(0)
    for a, b in zip(ndpe.apply_qk(q, k, pe(positions=ids)), reference_apply(q, k, ref_ids)):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5)


def test_formula_per_pair():
    """q'.k' = sum_j (pair j of q, k) rotated by (c_{j mod 4}(query) - c_{j mod 4}(key)) * f_j, with the four ids
    written from the paper's definition: tL + h + w, tL + h + (W-1-w), tL + (H-1-h) + w, tL + (H-1-h) + (W-1-w)."""
    pe = ndpe.make(dims=3, kind="vrope", dim=16, heads=1)
    T, H, W = grid = (2, 2, 3)
    L = H + W - 1
    cells = [(t, h, w) for t in range(T) for h in range(H) for w in range(W)]
    c = [[t * L + h + w, t * L + h + (W - 1 - w), t * L + (H - 1 - h) + w, t * L + (H - 1 - h) + (W - 1 - w)]
         for t, h, w in cells]
    q, k = torch.randn(2, 1, 1, 12, 16, dtype=torch.float64).unbind(0)
    rq, rk = ndpe.apply_qk(q.float(), k.float(), pe(grid))
    got = (rq @ rk.transpose(-1, -2))[0, 0]
    f = 10000.0 ** (-torch.arange(8, dtype=torch.float64) / 8)
    for i in range(12):
        for m in range(12):
            total = 0.0
            for j in range(8):
                a = (c[i][j % 4] - c[m][j % 4]) * f[j]
                qa, qb, ka, kb = q[0, 0, i, j], q[0, 0, i, j + 8], k[0, 0, m, j], k[0, 0, m, j + 8]
                total += (qa * ka + qb * kb) * torch.cos(a) - (qb * ka - qa * kb) * torch.sin(a)  # Re(z e^{ia})
            torch.testing.assert_close(got[i, m].double(), total, rtol=1e-4, atol=1e-4)


def ones_scores(pe, grid):
    """Scores of q = k = (1, ..., 1) from the centre token of a one-frame grid to every token, ``(H, W)``."""
    n = math.prod(grid)
    ones = torch.ones(1, 1, n, pe.head_dim)
    rq, rk = ndpe.apply_qk(ones, ones, pe(grid))
    centre = (grid[1] // 2) * grid[2] + grid[2] // 2
    return (rq @ rk.transpose(-1, -2))[0, 0, centre].reshape(grid[1], grid[2])


def test_symmetric_scores_around_the_query():
    """The score of q = k = 1 at spatial offset (dh, dw) equals those at (dw, dh) and (-dh, -dw): no direction is
    favoured. Plain RoPE over the raster index of the frame (a text model's 1D RoPE) is not symmetric."""
    grid = (1, 7, 7)
    s = ones_scores(ndpe.make(dims=3, kind="vrope", dim=64, heads=1), grid)
    torch.testing.assert_close(s, s.T, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(s, s.flip(0, 1), rtol=1e-5, atol=1e-5)
    raster = ndpe.make(dims=1, kind="rope", dim=64, heads=1)
    ones = torch.ones(1, 1, 49, 64)
    rq, rk = ndpe.apply_qk(ones, ones, raster((49,)))
    r = (rq @ rk.transpose(-1, -2))[0, 0, 24].reshape(7, 7)
    assert (r - r.T).abs().max() > 1.0


def test_frames_continue_a_text_index():
    """Frame t spans the ids tL .. tL + L - 1 (every one of its four ids), a token's ids come in pairs mirrored about
    its frame's centre, and the largest id of a T-frame video is T L - 1: the next text token (T L) follows it."""
    pe = ndpe.make(dims=3, kind="vrope", dim=32, heads=1)
    T, H, W = grid = (3, 4, 5)
    L = H + W - 1
    ids = pe.ids(pe.layout(pe.coords(grid), grid)).reshape(T, H * W, 4)
    for t in range(T):
        assert ids[t].min() == t * L and ids[t].max() == t * L + L - 1
        centre = torch.full((H * W,), t * L + (L - 1) / 2)
        torch.testing.assert_close(ids[t, :, 0] + ids[t, :, 3], 2 * centre)  # c3 mirrors c0 about the centre
        torch.testing.assert_close(ids[t, :, 1] + ids[t, :, 2], 2 * centre)  # c2 mirrors c1
    assert ids.max() + 1 == T * L


def test_relative_and_refusals():
    pe = ndpe.make(dims=3, kind="vrope", dim=32, heads=2)
    grid = (2, 3, 3)
    ids = pe.layout(pe.coords(grid), grid)
    q, k = torch.randn(2, 1, 2, 18, 16).unbind(0)
    logits = [(lambda a, b: a @ b.transpose(-1, -2))(*ndpe.apply_qk(q, k, pe(positions=ids + s)))
              for s in (torch.zeros(3), torch.tensor([7.0, -2.5, 1.25]))]
    torch.testing.assert_close(logits[0], logits[1], rtol=1e-4, atol=1e-4)
    with pytest.raises(ValueError, match="supports dims \\(3,\\)"):
        ndpe.make(dims=2, kind="vrope", dim=32, heads=2)
    with pytest.raises(ValueError, match="even head_dim"):
        ndpe.make(dims=3, kind="vrope", dim=30, heads=2)
    with pytest.raises(ValueError, match="needs a token order"):  # no KV-cache decoding on a grid: one line
        pe((1, 3, 3), past=4)
    with pytest.raises(ValueError, match="pairing"):
        ndpe.make(dims=3, kind="vrope", dim=32, heads=2, pairing="pairs")
