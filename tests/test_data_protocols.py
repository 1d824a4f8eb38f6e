"""Dataset options of the benchmark's protocols: decoder-only tagging layout, trajectory motions."""
from __future__ import annotations

import pytest
import torch

from train.data import build_dataset
from train.data.text import BLANK, SEP


@pytest.mark.parametrize("name", ["copy", "reverse", "addition"])
def test_causal_layout_is_the_tag_layout_shifted(name):
    """Same example in both layouts: causal tokens are the sequence input SEP output, targets its next tokens."""
    tag, causal = build_dataset(name, "test", length=5), build_dataset(name, "test", length=5, causal=True)
    for i in range(20):
        (t_tok, t_tgt), (c_tok, c_tgt) = tag[i], causal[i]
        sep = int((t_tok == SEP).nonzero()[0])
        outputs = t_tgt[sep + 1:]
        seq = torch.cat([t_tok[:sep + 1], outputs + 3])  # input SEP output
        assert torch.equal(c_tok, seq[:-1])
        scored = c_tgt != -100
        assert torch.equal(c_tgt[scored], outputs) and int(scored.nonzero()[0]) == sep  # first prediction at SEP
        assert torch.equal(c_tgt[scored] + 3, seq[1:][scored])  # each target is the next token


def test_causal_lengths_vary_and_pad_at_the_end():
    data = build_dataset("copy", "train", length=8, causal=True, min_length=1, size=200)
    lengths = []
    for i in range(len(data)):
        tokens, targets = data[i]
        assert tokens.shape == (16,)
        n = int((targets != -100).sum())
        lengths.append(n)
        assert (tokens[:n] >= 3).all() and tokens[n] == SEP  # n input symbols, then the separator
        assert (tokens[2 * n:] == BLANK).all() and (targets[2 * n:] == -100).all()  # padding: never scored
    assert min(lengths) == 1 and max(lengths) == 8


@pytest.mark.parametrize("opts,error,match", [
    (dict(length=4, min_length=2), ValueError, "needs causal=True"),
    (dict(length=4, causal=True, min_length=5), ValueError, r"min_length must be in \[1, length=4\]"),
    (dict(length=4, causal="yes"), TypeError, "causal must be a bool"),
])
def test_bad_layout_options(opts, error, match):
    with pytest.raises(error, match=match):
        build_dataset("copy", "train", **opts)


def test_linear_motions_are_time_reversal_pairs():
    """motions="linear": 4 classes; reversing a right clip's frames gives a left clip's path (NoPE cannot tell)."""
    data = build_dataset("trajectory", "test", motions="linear", disk_radius=2.2, zero_background=True, size=64)
    labels = {int(data[i][1]) for i in range(len(data))}
    assert data.num_classes == 4 and labels == {0, 1, 2, 3}
    video, label = next(data[i] for i in range(len(data)) if data[i][1] == 0)  # moving right
    centre_col = lambda v: (v.sum((0, 2)) * torch.arange(16.0)).sum(-1) / v.sum((0, 2)).sum(-1)  # (T,)
    cols = centre_col(video)
    assert (cols.diff() > 0).all() and torch.allclose(centre_col(video.flip(1)), cols.flip(0))
    assert video.min() >= 0 and video.amin((0, 1)).min() == 0  # zero background


@pytest.mark.parametrize("opts,match", [
    (dict(motions="spiral"), "motions"), (dict(disk_radius=4.0), "disk_radius"),
    (dict(zero_background="no"), "zero_background must be a bool"),
])
def test_bad_trajectory_options(opts, match):
    with pytest.raises((ValueError, TypeError), match=match):
        build_dataset("trajectory", "train", **opts)
