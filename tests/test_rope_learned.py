"""``rope-learned``: equal to rotary-embedding-torch 0.9.1's ``RotaryEmbedding`` with its frequencies copied (1D
``rotate_queries_or_keys``; 2D / 3D ``get_axial_freqs`` + ``apply_rotary_emb``) for learned, custom, "constant" and
"pixel" frequencies, ``interpolate_factor`` and ``theta_rescale_factor``; a wrong ``interpolate_factor`` far away;
learned frequencies receive gradients and keep RoPE's relative property."""
from __future__ import annotations

import pytest
import torch

import ndpe
from tests.conftest import assert_tells_apart

ret = pytest.importorskip("rotary_embedding_torch")

HEAD_DIM, HEADS = 32, 2


def rotated(pe, q, grid=None, positions=None):
    pos = pe(grid, positions=positions)
    return ndpe.apply_qk(q, q, pos)[0]


def peer_and_ours(dims=1, peer_dim=16, learned=True, **options):
    """The peer (its ``dim``: rotary channels per axis) and ours, the peer's frequencies moved off their init (when
    learned) and copied into ours."""
    torch.manual_seed(0)
    custom = options.get("custom_freqs")
    peer_options = {k: v for k, v in options.items() if k != "custom_freqs"}
    peer = ret.RotaryEmbedding(peer_dim, custom_freqs=None if custom is None else torch.tensor(custom),
                               learned_freq=learned, **peer_options)
    if learned:
        with torch.no_grad():
            peer.freqs.mul_(1 + 0.3 * torch.rand_like(peer.freqs))
    axis = {} if custom is not None or options.get("freqs_for") == "constant" else {"axis_dim": peer_dim}
    pe = ndpe.make(dims=dims, kind="rope-learned", dim=HEADS * HEAD_DIM, heads=HEADS, learned_freq=learned, **axis,
                   **options)
    pe.load_state_dict({"freqs": peer.freqs.detach().clone()})
    return peer, pe


CASES = {
    "default": {},
    "custom": {"custom_freqs": [1.3, 0.4, 0.05]},
    "constant": {"freqs_for": "constant", "num_freqs": 3},
    "interpolate": {"interpolate_factor": 2.5},
    "rescale": {"theta_rescale_factor": 4.0, "theta": 500.0},
}


@pytest.mark.parametrize("case", list(CASES))
def test_1d_equals_rotary_embedding_torch(case):
    peer, pe = peer_and_ours(**CASES[case])
    q = torch.randn(2, HEADS, 40, HEAD_DIM, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = peer.rotate_queries_or_keys(q)
        ours = rotated(pe, q, (40,))
        wrong = rotated(pe.replace(interpolate_factor=pe.interpolate_factor + 1.0), q, (40,))
    assert_tells_apart(ours, wrong, ref, rtol=0, atol=3e-5)  # the peer's float32 angles: ~6e-8 x angle


def test_fixed_frequencies_are_the_peers_init():
    for options in CASES.values():
        peer, pe = peer_and_ours(learned=False, **options)
        torch.testing.assert_close(pe.freqs, peer.freqs.detach(), rtol=0, atol=0)
        assert not pe.freqs.requires_grad and not list(pe.parameters())


@pytest.mark.parametrize("dims,grid", [(2, (5, 7)), (3, (3, 4, 5))])
@pytest.mark.parametrize("freqs_for", ["lang", "pixel"])
def test_nd_equals_get_axial_freqs(dims, grid, freqs_for):
    peer, pe = peer_and_ours(dims=dims, peer_dim=HEAD_DIM // dims // 2 * 2, freqs_for=freqs_for)
    q = torch.randn(2, *grid, HEAD_DIM, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        ref = ret.apply_rotary_emb(peer.get_axial_freqs(*grid), q).flatten(1, -2)
        ours = rotated(pe, q.flatten(1, -2)[:, None], grid)[:, 0]
    torch.testing.assert_close(ours, ref, rtol=0, atol=3e-5)


def test_learned_frequencies_receive_gradients_and_keep_the_relative_property():
    """q_m . k_n depends on m - n only, for learned frequencies after a training step too."""
    _, pe = peer_and_ours(custom_freqs=[0.9, 0.31, 0.07, 0.011])
    q, k = torch.randn(2, 1, HEADS, 6, HEAD_DIM)
    p = torch.tensor([0.0, 1.0, 3.0, 4.5, 7.0, 11.0])[:, None]
    qr, kr = ndpe.apply_qk(q, k, pe(positions=p))
    (qr @ kr.transpose(-1, -2)).square().sum().backward()
    assert pe.freqs.grad is not None and (pe.freqs.grad != 0).all()
    with torch.no_grad():
        pe.freqs.sub_(0.1 * pe.freqs.grad)
        logits = [(lambda r: r[0] @ r[1].transpose(-1, -2))(ndpe.apply_qk(q, k, pe(positions=p + c)))
                  for c in (0.0, 37.25)]
    torch.testing.assert_close(logits[0], logits[1], rtol=1e-4, atol=1e-4)
    assert not pe._cacheable()  # a learned vector's outputs are never served stale


def test_half_pairing_is_a_channel_permutation_of_interleaved():
    _, pe = peer_and_ours()
    half = pe.replace(pairing="half")
    half.load_state_dict(pe.state_dict())
    q = torch.randn(1, HEADS, 9, HEAD_DIM)
    rd = pe.rot_dim
    perm = torch.cat([torch.arange(0, rd, 2), torch.arange(1, rd, 2), torch.arange(rd, HEAD_DIM)])
    with torch.no_grad():
        torch.testing.assert_close(rotated(half, q[..., perm], (9,)), rotated(pe, q, (9,))[..., perm])


def test_refusals():
    make = lambda **o: ndpe.make(dims=2, kind="rope-learned", dim=64, heads=2, **o)  # noqa: E731
    with pytest.raises(ValueError, match="custom_freqs must be"):
        make(custom_freqs=[1.0, float("nan")])
    with pytest.raises(ValueError, match="interpolate_factor"):
        make(interpolate_factor=0.5)
    with pytest.raises(ValueError, match="must fit an even head_dim"):
        make(custom_freqs=[1.0] * 9)
    with pytest.raises(ValueError, match="freqs_for"):
        make(freqs_for="text")
    with pytest.raises(ValueError, match="past"):
        make(custom_freqs=[100.0])(positions=torch.tensor([[1e13, 0.0]]))
