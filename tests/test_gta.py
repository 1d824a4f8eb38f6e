"""``gta``: GTA pinned against the PRoPE authors' "GTA formula" (their ``Ks=None`` branch, ported in
``tests/test_prope.py``), the property that makes it relative, and the contract's ``frame`` field carried by every
attention layer (``ndpe.Attention``, the reference models) and every operation (prefix, batch, merge, pack)."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

import ndpe
from ndpe.fields import transform_frame
from ndpe.kinds.gta import check_extrinsics, ring_extrinsics
from test_prope import (COLS, HEAD_DIM, HEADS, N, ROWS, VIEWS, attend, cameras, ours, qkv, random_rotation, reference,
                        rigid)

GRID = (VIEWS, ROWS, COLS)


def gta(dims: int = 3, dim: int = HEADS * HEAD_DIM, heads: int = HEADS, **options):
    return ndpe.make(dims=dims, kind="gta", dim=dim, heads=heads, **options)


def test_equals_the_reference_gta_formula():
    e, _ = cameras()
    q, k, v = qkv()
    want = reference(e, None, q, k, v)
    assert want.abs().max() > 1.0
    torch.testing.assert_close(ours("gta", e, None, q, k, v), want, rtol=1e-5, atol=1e-5)


def test_a_shared_change_of_world_frame_changes_nothing_and_conventions_matter():
    """``E -> E G`` for every camera leaves the output unchanged; q mapped by ``D`` instead of ``D^T`` (a transposed
    convention) or the output left unmapped moves it by orders of magnitude more."""
    e, _ = cameras()
    world = rigid(random_rotation(torch.Generator().manual_seed(7), 1)[0],
                  torch.tensor([-5.0, 2.0, 3.0], dtype=torch.float64))
    q, k, v = qkv()
    pe = gta()
    outs = {"gta": [], "q by D": [], "no output map": []}
    for cams in (e, e @ world):
        pos = pe(GRID, extrinsics=cams).to(torch.float64)
        outs["gta"].append(attend(pos, q, k, v))
        rk, rv = ndpe.apply_qk(q, k, pos)[1], ndpe.apply_v(v, pos)
        wrong_q = transform_frame(q, pos.frame, "out")  # D q
        outs["q by D"].append(ndpe.apply_out(F.scaled_dot_product_attention(wrong_q, rk, rv), pos))
        outs["no output map"].append(F.scaled_dot_product_attention(ndpe.apply_qk(q, k, pos)[0], rk, rv))
    moved = {name: float((b - a).abs().max()) for name, (a, b) in outs.items()}
    assert moved["gta"] < 1e-4
    assert moved["q by D"] > 1e3 * max(moved["gta"], 1e-6) and moved["no output map"] > 1e3 * max(moved["gta"], 1e-6)


def test_the_default_ring():
    """View 0 at ``R = I``, ``t = (0, 0, 2)``; each view 45 degrees on from the last, all looking at the origin;
    a 2D grid is view 0; ``pe(grid)`` is the ring passed as extrinsics."""
    ring = ring_extrinsics(torch.arange(8.0))
    torch.testing.assert_close(ring[0], rigid(torch.eye(3), torch.tensor([0.0, 0.0, 2.0])).float())
    check_extrinsics(ring, 8)  # rigid
    relative = ring[1] @ torch.linalg.inv(ring[0])
    assert float(torch.rad2deg(torch.arccos((relative[:3, :3].trace() - 1) / 2))) == pytest.approx(45.0, abs=1e-3)
    origin = torch.tensor([0.0, 0.0, 0.0, 1.0])
    torch.testing.assert_close((ring @ origin)[:, :3], torch.tensor([0.0, 0.0, 2.0]).expand(8, 3))  # straight ahead
    pe = gta()
    views = ring_extrinsics(pe.coords(GRID)[:, 0])
    for a, b in zip(pe(GRID).frame, pe(GRID, extrinsics=views).frame):
        torch.testing.assert_close(a, b)
    flat = gta(dims=2)((ROWS, COLS)).frame[0]
    torch.testing.assert_close(flat, pe(GRID).frame[0][:, :ROWS * COLS])


def test_attention_and_the_reference_models_apply_the_frame():
    """``ndpe.Attention`` is the contract's attention (apply_qk, apply_v, SDPA, apply_out) with its projections; the
    reference models hand it the encoding without looking at the kind, so a ViT on three views sees the cameras."""
    torch.manual_seed(0)
    pe, attn = gta(), ndpe.Attention(HEADS * HEAD_DIM, HEADS)
    e, _ = cameras()
    pos = pe(GRID, extrinsics=e, num_prefix=1)
    x = torch.randn(2, 1 + N, HEADS * HEAD_DIM)
    q, k, v = attn.qkv(x).unflatten(-1, (3, HEADS, HEAD_DIM)).permute(2, 0, 3, 1, 4)
    manual = attend(pos, q, k, v).transpose(1, 2).flatten(2)
    torch.testing.assert_close(attn(x, pos), attn.proj(manual))
    from models.block import Encoder, make_pe

    enc = Encoder(make_pe({"kind": "gta"}, dims=3, dim=HEADS * HEAD_DIM, heads=HEADS), dim=HEADS * HEAD_DIM, depth=1,
                  heads=HEADS).eval()
    plain = Encoder(make_pe({"kind": "none"}, dims=3, dim=HEADS * HEAD_DIM, heads=HEADS), dim=HEADS * HEAD_DIM,
                    depth=1, heads=HEADS).eval()
    plain.load_state_dict(enc.state_dict())
    assert not torch.allclose(enc(x, GRID, num_prefix=1), plain(x, GRID, num_prefix=1))


def test_prefix_tokens_batches_merge_and_pack():
    """Prefix tokens get the identity (0); per-sample cameras equal each sample alone; merged with an additive kind
    the frame stays, two frames refuse; packed samples attend as each alone."""
    pe = gta()
    e, _ = cameras()
    plain, out = pe(GRID, extrinsics=e), pe(GRID, extrinsics=e, num_prefix=2)
    for a, b in zip(out.frame, plain.frame):
        assert (a[..., :2, :] == 0).all()
        torch.testing.assert_close(a[..., 2:, :], b)
    e2 = e @ rigid(random_rotation(torch.Generator().manual_seed(3), 1)[0], torch.ones(3, dtype=torch.float64))
    batched = pe(GRID, extrinsics=torch.stack([e, e2]))
    assert batched.frame[0].shape == (2, 1, N, 4 * HEAD_DIM)
    torch.testing.assert_close(batched.frame[0][1], pe(GRID, extrinsics=e2).frame[0])
    merged = ndpe.merge(ndpe.make(dims=3, kind="sinusoidal", dim=HEADS * HEAD_DIM, heads=HEADS)(GRID), plain)
    assert merged.frame is plain.frame and merged.add is not None
    with pytest.raises(ValueError, match="frame"):
        ndpe.merge(plain, plain)
    grids = [(2, 2, 2), (1, 2, 3)]
    packed = pe.packed(grids, num_prefix=1)
    total = sum(1 + g[0] * g[1] * g[2] for g in grids)
    q, k, v = qkv(tokens=total)
    rq, rk = ndpe.apply_qk(q, k, packed)
    together = ndpe.apply_out(F.scaled_dot_product_attention(rq, rk, ndpe.apply_v(v, packed),
                                                             attn_mask=ndpe.attn_bias(packed, q.dtype)), packed)
    start = 0
    for grid in grids:
        part = slice(start, start + 1 + grid[0] * grid[1] * grid[2])
        alone = attend(pe(grid, num_prefix=1).to(torch.float64), q[..., part, :], k[..., part, :], v[..., part, :])
        torch.testing.assert_close(together[..., part, :], alone)
        start = part.stop


def test_refusals_are_one_line():
    pe = gta()
    e = torch.eye(4).expand(N, 4, 4)
    squashed = e.clone()
    squashed[:, 0, 0] = 2.0
    cases = [(lambda: pe(GRID, extrinsics=e, intrinsics=torch.eye(3).expand(N, 3, 3)), "intrinsics are PRoPE's"),
             (lambda: pe(GRID, extrinsics=e[:-1]), "one per grid token"),
             (lambda: pe(GRID, extrinsics=squashed), "rigid transforms"),
             (lambda: gta(dim=30, heads=3), "a multiple of 4, at least 8"),
             (lambda: gta(dim=8, heads=2), "a multiple of 4, at least 8"),
             (lambda: ndpe.apply_v(torch.randn(1, 2, 5, 8), pe(GRID)), "tokens"),
             (lambda: attend(pe(GRID), *qkv()[:2], torch.randn(1, HEADS, N, 8)), "head_dim")]
    for call, match in cases:
        with pytest.raises(ValueError, match=match) as err:
            call()
        assert "\n" not in str(err.value)


def test_a_head_dim_8_does_not_divide():
    """head_dim 12 (the benchmark's models): one camera block, two rotated pairs per patch axis, still relative."""
    pe = gta(dim=48, heads=4)
    e, _ = cameras()
    world = rigid(random_rotation(torch.Generator().manual_seed(9), 1)[0], torch.tensor([1.0, 2.0, -4.0]).double())
    q, k, v = (t[..., :12] for t in qkv())
    before, after = (attend(pe(GRID, extrinsics=cams).to(torch.float64), q, k, v) for cams in (e, e @ world))
    assert pe(GRID).frame[0].shape[-1] == 12 * 4
    assert (after - before).abs().max() < 1e-4 < (before - attend(pe(GRID).to(torch.float64), q, k, v)).abs().max()


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_low_precision_extrinsics_are_rigid_at_their_dtype(dtype):
    """Rotations rounded to float16 (R R^T off by up to 8e-4) or bfloat16 (6e-3) are rigid at their dtype's tolerance
    and give the float32 cameras' frame to that rounding; a squashed axis (off by 0.1) is still refused."""
    rotations = random_rotation(torch.Generator().manual_seed(3), N)
    e = rigid(rotations, torch.randn(N, 3, generator=torch.Generator().manual_seed(4), dtype=torch.float64))
    pe, eps = gta(), torch.finfo(dtype).eps
    low = pe(GRID, extrinsics=e.to(dtype)).frame[0]
    torch.testing.assert_close(low, pe(GRID, extrinsics=e.float()).frame[0], rtol=0, atol=8 * eps)
    squashed = e.clone()
    squashed[:, 0, :3] *= 1.1
    with pytest.raises(ValueError, match="rigid transforms"):
        pe(GRID, extrinsics=squashed.to(dtype))
