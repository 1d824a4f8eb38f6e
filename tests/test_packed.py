"""Packed batches (``pe.packed(grid_shapes)``, ``ndpe.pack``): samples of several grid sizes in one sequence, positions
restarting per sample, attention kept inside each sample; for every kind, attention over the packed sequence equals
attention over each sample alone."""
from __future__ import annotations

import copy
import math

import pytest
import torch

import ndpe
from conftest import KIND_DIMS, build

SHAPES = {1: [(7,), (3,), (11,)], 2: [(2, 5), (3, 3), (1, 4)], 3: [(2, 3, 2), (1, 2, 3), (2, 2, 2)]}


def run(pe, attn, x, pos):
    return attn(ndpe.apply_tokens(x, pos), pos)


@pytest.mark.parametrize("kind,dims", KIND_DIMS, ids=[f"{k}-{d}d" for k, d in KIND_DIMS])
@pytest.mark.parametrize("num_prefix", [0, 1])
def test_packed_attention_equals_each_sample_alone(kind, dims, num_prefix):
    torch.manual_seed(0)
    pe = build(kind, dims).eval()
    attn = ndpe.Attention(pe.dim, heads=pe.heads, causal=pe.causal_only)
    shapes = SHAPES[dims]
    sizes = [num_prefix + math.prod(g) for g in shapes]
    xs = [torch.randn(2, n, pe.dim - pe.cat_dim) for n in sizes]
    with torch.no_grad():
        alone = torch.cat([run(pe, attn, x, pe(g, num_prefix=num_prefix)) for x, g in zip(xs, shapes)], dim=1)
        pos = pe.packed(shapes, num_prefix=num_prefix)
        packed = run(pe, attn, torch.cat(xs, dim=1), pos)
    torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-5)
    assert pos.bias is not None and pos.bias.shape[-1] == sum(sizes)


def test_the_mask_is_what_keeps_samples_apart():
    """Without the packed bias (the same tokens as one long grid's neighbours) the samples see each other."""
    torch.manual_seed(0)
    pe = ndpe.make(dims=2, kind="rope", dim=32, heads=2)
    attn = ndpe.Attention(32, heads=2)
    shapes = [(2, 3), (3, 2)]
    x = torch.randn(1, 12, 32)
    with torch.no_grad():
        pos = pe.packed(shapes)
        good = attn(x, pos)
        leaky = attn(x, ndpe.PosOut(rot=pos.rot))
        first = attn(x[:, :6], pe(shapes[0]))
    torch.testing.assert_close(good[:, :6], first, rtol=1e-5, atol=1e-6)
    assert (leaky[:, :6] - first).abs().max() > 1e-3
    assert torch.equal(pos.bias[:6, 6:], torch.full((6, 6), float("-inf")))


def test_causal_documents_of_a_language_model():
    """Packed documents of a causal LM: positions restart, each document attends to its own past only."""
    torch.manual_seed(0)
    pe = ndpe.make(dims=1, kind="alibi", dim=32, heads=4)
    attn = ndpe.Attention(32, heads=4, causal=True)
    lengths = [5, 9, 2]
    x = torch.randn(3, sum(lengths), 32)
    with torch.no_grad():
        packed = attn(x, pe.packed([(n,) for n in lengths]))
        alone = torch.cat([attn(part, pe((n,))) for part, n in zip(x.split(lengths, 1), lengths)], 1)
    torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-6)


def test_packed_in_training_mode_draws_per_sample():
    """Augmentation draws once per sample (each sample is encoded alone); the packed output stays finite."""
    pe = ndpe.make(dims=2, kind="rope", dim=32, heads=2, augment="cape").train()
    torch.manual_seed(0)
    pos = pe.packed([(2, 2), (2, 2)])
    cos = pos.rot[0][0]
    assert not torch.allclose(cos[:4], cos[4:])  # the same grid, two draws


def test_dtype_and_bfloat16_mask():
    pe = ndpe.make(dims=1, kind="alibi", dim=32, heads=2)
    pos = pe.packed([(3,), (2,)], dtype=torch.bfloat16)
    assert pos.bias.dtype == torch.bfloat16 and pos.bias[0, 0, 4] == float("-inf")


@pytest.mark.parametrize("call,err,match", [
    (lambda pe: pe.packed([]), TypeError, "non-empty list"),
    (lambda pe: pe.packed((3, 4)), ValueError, "grid_shape"),
    (lambda pe: ndpe.pack(pe((3, 4))), TypeError, "list of PosOut"),
    (lambda pe: ndpe.pack([pe((3, 4)), ndpe.PosOut(bias=torch.zeros(2, 2))]), ValueError, "one encoding"),
    (lambda pe: ndpe.pack([ndpe.PosOut(), ndpe.PosOut()]), ValueError, "sizes="),
    (lambda pe: ndpe.pack([pe((3, 4))], sizes=[5]), ValueError, "do not match"),
])
def test_refusals(call, err, match):
    pe = ndpe.make(dims=2, kind="rope", dim=32, heads=2)
    with pytest.raises(err, match=match):
        call(pe)


def test_decoding_outputs_are_refused():
    pe = ndpe.make(dims=1, kind="rope", dim=32, heads=2)
    with pytest.raises(ValueError, match="decoding"):
        ndpe.pack([pe((1,), past=4)])


def test_mixed_resolution_vit_step():
    """The reference ViT on a packed batch of three image sizes: one output per image, equal to each image alone,
    and a training step runs."""
    from models.vit import ViT
    torch.manual_seed(0)
    model = ViT(patch_size=8, num_classes=5, pe={"kind": "rope"}, dim=32, depth=2, heads=2).eval()
    images = [torch.randn(3, 32, 32), torch.randn(3, 16, 40), torch.randn(3, 24, 8)]
    with torch.no_grad():
        packed = model.forward_packed(images)
        alone = torch.cat([model(img[None]) for img in images])
    assert packed.shape == (3, 5)
    torch.testing.assert_close(packed, alone, rtol=1e-5, atol=1e-5)
    model.train()
    loss = torch.nn.functional.cross_entropy(model.forward_packed(images), torch.tensor([0, 1, 2]))
    loss.backward()
    assert all(p.grad is not None for p in model.parameters() if p.requires_grad)


@pytest.mark.parametrize("outs,match", [
    (lambda pe: [pe((2, 2)), pe.to("meta")((2, 2))], r"^pack\(\) needs one device, got sample 0 on cpu, sample 1 on "
                                                      r"meta[^\n]*$"),
    (lambda pe: [pe(positions=torch.rand(2, 4, 2)), pe(positions=torch.rand(3, 4, 2))],
     r"^pack\(\) needs samples of one batch: their rot fields have leading dims \[\(2, 1\), \(3, 1\)\][^\n]*$"),
])
def test_devices_and_batches_that_do_not_meet(outs, match):
    pe = ndpe.make(dims=2, kind="rope", dim=32, heads=2)
    with pytest.raises(ValueError, match=match):
        ndpe.pack(outs(copy.deepcopy(pe)))
    with pytest.raises(ValueError, match=match.replace("pack", "stack")):
        ndpe.stack(outs(copy.deepcopy(pe)))
