"""Reference models: every model x every registered kind trains at one size and runs at a larger one.

Kinds come from ``ndpe.available()`` (filtered by the dims a model needs), so kinds added later are
covered without editing this file; kinds that need options get them from ``OPTIONS``.
"""
from __future__ import annotations

import pytest
import torch

import ndpe
from models import build_model
from models.text import TextTransformer

torch.manual_seed(0)
DIM, HEADS = 48, 4  # head_dim 12: splits evenly over 1, 2 and 3 rotary axes

# model name -> (dims, extra config, train input, larger input, train grid)
CASES = {
    "vit": (2, {"patch_size": 4}, (2, 3, 16, 16), (2, 3, 24, 32), (4, 4)),
    "audio": (2, {"patch_size": [4, 8]}, (2, 1, 16, 32), (2, 1, 16, 48), (8, 2)),  # (1, mels, frames); grid (t, f)
    "text": (1, {"vocab_size": 11}, (2, 12), (2, 20), (12,)),
    "video": (3, {"tubelet": [2, 4, 4]}, (2, 3, 4, 8, 8), (2, 3, 8, 8, 12), (2, 2, 2)),
}
RESIZE = {1: "linear", 2: "bicubic", 3: "trilinear"}
# Options a kind needs, given the train grid.
OPTIONS = {"learned": lambda grid: {"grid_shape": list(grid), "resize": RESIZE[len(grid)]}}  # else its example's
MODEL_KINDS = [(m, k) for m, (dims, *_rest) in CASES.items() for k, ds in ndpe.available().items() if dims in ds]


def make(name, kind, num_classes=5, **over):
    dims, extra, _, _, grid = CASES[name]
    example = ndpe.registry.kind_class(kind).example_options(dims)  # what a small example of the kind needs
    pe = {"kind": kind, "options": OPTIONS.get(kind, lambda g: example)(grid)}
    if ndpe.registry.kind_class(kind).causal_only:  # e.g. cope: a causal text model
        extra = {**extra, "causal": True}
    cfg = {"name": name, "num_classes": num_classes, "dim": DIM, "depth": 2, "heads": HEADS, "pe": pe, **extra, **over}
    return build_model(cfg)


def inputs(name, shape):
    return torch.randint(0, 11, shape) if name == "text" else torch.randn(shape)


@pytest.mark.parametrize("name, kind", MODEL_KINDS)
def test_forward_backward_then_larger_input(name, kind):
    model = make(name, kind)
    _, _, train_shape, large_shape, _ = CASES[name]
    out = model(inputs(name, train_shape))
    out.float().square().mean().backward()
    grads = [p.grad for p in model.parameters() if p.requires_grad and p.numel()]
    assert all(g is not None and torch.isfinite(g).all() for g in grads)
    model.eval()
    with torch.no_grad():
        large = model(inputs(name, large_shape))
    expect = (2, large_shape[1], 5) if name == "text" else (2, 5)
    assert large.shape == expect and torch.isfinite(large).all()


@pytest.mark.parametrize("name", list(CASES))
def test_learned_table_without_resize_refuses_larger_inputs_clearly(name):
    model = make(name, "learned", pe={"kind": "learned", "options": {"grid_shape": list(CASES[name][4])}})
    with pytest.raises(ValueError, match="exceeds the learned table"):
        model(inputs(name, CASES[name][3]))


@pytest.mark.parametrize("name, shape, grid", [
    ("vit", (1, 3, 16, 24), (4, 6)),  # (rows, cols)
    ("audio", (1, 1, 16, 40), (10, 2)),  # (1, n_mels=16, frames=40), patch (4 t, 8 f) -> (time, freq)
    ("text", (1, 9), (9,)),
    ("video", (1, 3, 4, 8, 12), (2, 2, 3)),  # (frames, rows, cols)
])
def test_grid_is_ij_and_encoded_once_per_forward(name, shape, grid):
    model = make(name, "none")
    calls = []
    model.encoder.pe.register_forward_pre_hook(lambda m, args, kwargs: calls.append((args, kwargs)), with_kwargs=True)
    model(inputs(name, shape))
    assert len(calls) == 1  # depth 2, one PosOut shared by both blocks
    args, kwargs = calls[0]
    assert tuple(args[0]) == grid and kwargs["num_prefix"] == (0 if name == "text" else 1)


@pytest.mark.parametrize("kind", ["none", "rope"])
def test_vit_without_encoding_ignores_patch_order(kind):
    """No encoding + mean pooling: permutation invariant over patches; any real encoding breaks that."""
    if kind not in ndpe.available():
        pytest.skip(f"kind {kind!r} not registered")
    model = make("vit", kind, pool="mean").eval()
    for blk in model.encoder.blocks:  # sharper attention than at init, so positions matter visibly
        blk.attn.qkv.weight.data.mul_(20)
    x = torch.randn(1, 3, 16, 16)
    patches = x.unfold(2, 4, 4).unfold(3, 4, 4)  # (1, 3, 4, 4, 4, 4): grid rows, cols, patch h, w
    perm = torch.randperm(16)
    shuffled = patches.reshape(1, 3, 16, 4, 4)[:, :, perm].reshape(1, 3, 4, 4, 4, 4)
    y = shuffled.permute(0, 1, 2, 4, 3, 5).reshape(1, 3, 16, 16)  # back to an image
    with torch.no_grad():
        diff = (model(x) - model(y)).abs().max().item()
    assert diff < 1e-5 if kind == "none" else diff > 1e-3


@pytest.mark.parametrize("kind", [k for k, ds in ndpe.available().items() if 1 in ds])
def test_causal_text_never_sees_the_future(kind):
    model = make("text", kind, causal=True).eval()
    a = torch.randint(0, 11, (1, 12))
    b = a.clone()
    b[0, 7:] = (b[0, 7:] + 1) % 11
    with torch.no_grad():
        torch.testing.assert_close(model(a)[:, :7], model(b)[:, :7])


def test_tied_head_shares_the_embedding():
    model = make("text", "none", num_classes=11, tie_weights=True)
    assert model.head.weight is model.tok_embed.weight
    with pytest.raises(ValueError, match="tie_weights needs num_classes == vocab_size"):
        make("text", "none", num_classes=7, tie_weights=True)


def test_concatenated_encoding_narrows_the_token_embedding():
    if "coord" not in ndpe.available():
        pytest.skip("coord kind not registered")
    model = make("vit", "coord")
    assert model.patch_embed.proj.out_channels == DIM - model.encoder.pe.cat_dim
    assert model.head.in_features == DIM


@pytest.mark.parametrize("add_coords", [False, True])
def test_conv_net_runs_at_any_size(add_coords):
    if add_coords:
        pytest.importorskip("ndpe.kinds.coord", reason="AddCoords not available yet")
    model = build_model({"name": "conv", "num_classes": 2, "channels": [8, 16], "add_coords": add_coords})
    model(torch.randn(4, 1, 32, 32)).square().mean().backward()
    assert model.eval()(torch.randn(2, 1, 48, 40)).shape == (2, 2)
    first = model.features[1 if add_coords else 0]
    assert first.in_channels == 1 + 2 * add_coords


def test_conv_coords_make_position_readable():
    """With AddCoords, one linear map of the features can read the position of a dot; without, it cannot."""
    pytest.importorskip("ndpe.kinds.coord", reason="AddCoords not available yet")
    from ndpe.kinds.coord import AddCoords

    x = torch.zeros(1, 1, 5, 7)
    feat = AddCoords(2)(x)
    torch.testing.assert_close(feat[0, 1, :, 0], torch.linspace(-1, 1, 5))  # rows first (ij)
    torch.testing.assert_close(feat[0, 2, 0], torch.linspace(-1, 1, 7))


@pytest.mark.parametrize("cfg, match", [
    ({"name": "vit", "num_classes": 3, "tubelet": [2, 2, 2]}, r"model 'vit' has no option\(s\) \['tubelet'\]"),
    ({"name": "conv", "num_classes": 2, "pe": {"kind": "rope"}}, "model 'conv' takes no pe"),
    ({"name": "transformer", "num_classes": 2}, "unknown model name 'transformer'"),
    ({"name": "vit", "num_classes": 3, "pe": {"kind": "rope", "optoins": {}}}, r"unknown pe key\(s\) \['optoins'\]"),
    ({"name": "vit", "num_classes": 3, "pool": "max"}, "pool must be 'cls' or 'mean'"),
])
def test_build_model_errors(cfg, match):
    with pytest.raises((ValueError, TypeError), match=match):
        build_model(cfg)


def test_unknown_kind_option_is_named():
    with pytest.raises(TypeError, match="unknown option"):
        build_model({"name": "vit", "num_classes": 3, "dim": DIM, "heads": HEADS,
                     "pe": {"kind": "none", "options": {"thetaa": 1.0}}})


def test_text_tokens_enter_at_the_scale_of_fixed_encodings():
    """Vaswani et al.: embeddings x sqrt(d), so a unit-amplitude sinusoidal table does not swamp the tokens."""
    torch.manual_seed(0)
    m = build_model({"name": "text", "vocab_size": 512, "num_classes": 512, "dim": 64, "depth": 1, "heads": 4,
                     "pe": {"kind": "sinusoidal"}})
    tokens = m.tok_embed.weight * m.embed_scale  # what forward feeds the encoder, per token id
    pos = m.encoder.pe((16,)).add
    ratio = tokens.pow(2).mean().sqrt() / pos.pow(2).mean().sqrt()
    assert 0.5 < ratio < 2.0, f"token / position RMS ratio {ratio:.3f}"


# ---- iRoPE: every n-th block position-free (Llama 4's no_rope_layers) ---------------------------------------------

def _text(kind, nope_every=0, seed=0, nope_temperature=None):
    torch.manual_seed(seed)
    return TextTransformer(vocab_size=13, num_classes=13, pe={"kind": kind}, dim=32, depth=4, heads=4, causal=True,
                           nope_every=nope_every, nope_temperature=nope_temperature).eval()


@pytest.mark.parametrize("kind", ["rope", "alibi", "xpos"])
def test_nope_every_block_equals_no_encoding(kind):
    tokens = torch.randint(0, 13, (2, 10))
    free, none = _text(kind, nope_every=1), _text("none")
    none.load_state_dict(free.state_dict(), strict=False)
    torch.testing.assert_close(free(tokens), none(tokens), rtol=0, atol=0)
    assert not torch.allclose(_text(kind)(tokens), none(tokens))


def test_nope_every_second_block_gets_no_rotation(monkeypatch):
    model, seen = _text("rope", nope_every=2), []
    for blk in model.encoder.blocks:
        original = blk.forward
        monkeypatch.setattr(blk, "forward", lambda x, pos, cache, f=original: (seen.append(pos.rot is not None),
                                                                               f(x, pos, cache))[1])
    model(torch.randint(0, 13, (1, 6)))
    assert seen == [True, False, True, False]
    with pytest.raises(ValueError, match="nope_every must be an int >= 0"):
        _text("rope", nope_every=-1)


@pytest.mark.parametrize("kind,temperature", [("rope", None), ("alibi", None), ("rope", (2, 0.5))])
def test_nope_layers_decode_with_a_kv_cache(kind, temperature):
    model = _text(kind, nope_every=2, nope_temperature=temperature)
    prompt = torch.randint(0, 13, (2, 5))
    assert torch.equal(model.generate(prompt, 6), model.generate(prompt, 6, use_cache=False))
    if temperature is not None:  # cached steps see their true position: logits equal the full forward's
        tokens = torch.randint(0, 13, (2, 11))
        caches = model.new_caches()
        steps = [model(tokens[:, :5], caches)] + [model(tokens[:, i:i + 1], caches) for i in range(5, 11)]
        torch.testing.assert_close(torch.cat(steps, 1), model(tokens), rtol=1e-5, atol=1e-5)


def llama4_attn_scales(positions, floor_scale, attn_scale):
    """transformers 5.23 Llama4TextAttention (attn_temperature_tuning, no-rope layers), copied."""
    return torch.log1p(torch.floor((positions.float() + 1.0) / floor_scale)) * attn_scale + 1.0


@pytest.mark.parametrize("past", [0, 7])
def test_nope_temperature_scales_queries_as_llama4(past):
    """The position-free blocks' PosOut multiplies each query by Llama 4's scale at its position and leaves keys."""
    model = _text("rope", nope_every=2, nope_temperature=(3, 0.2))
    x = torch.randn(2, 9, 32)
    pos = model.encoder.pe((9,), past=past)
    free = model.encoder._free(pos, x)
    q, k = torch.randn(2, 4, 9, 8), torch.randn(2, 4, 9, 8)
    q2, k2 = ndpe.apply_qk(q, k, free)
    scales = llama4_attn_scales(torch.arange(9) + past, 3, 0.2)
    torch.testing.assert_close(q2, q * scales[:, None], rtol=1e-6, atol=1e-6)
    assert torch.equal(k2, k) and scales.max() > 1.2
    tokens = torch.randint(0, 13, (2, 12))
    hot, plain = _text("rope", nope_every=2, nope_temperature=(1, 5.0)), _text("rope", nope_every=2)
    assert (hot(tokens) - plain(tokens)).abs().max() > 1e-5  # same weights (near-uniform attention at init)


@pytest.mark.parametrize("value,match", [((0, 0.1), "floor_scale > 0"), ((8192,), "floor_scale > 0"),
                                         ((8192, -1.0), "floor_scale > 0"), ((8192, float("nan")), "floor_scale")])
def test_nope_temperature_refusals(value, match):
    with pytest.raises(ValueError, match=match):
        _text("rope", nope_every=2, nope_temperature=value)
    with pytest.raises(ValueError, match="needs nope_every > 0"):
        _text("rope", nope_temperature=(8192, 0.1))


@pytest.mark.parametrize("use_cache, temperature", [(True, 0.0), (False, 0.0), (True, 1.0)])
def test_generate_on_an_empty_prompt_batch_returns_an_empty_batch(use_cache, temperature):
    """A batch of no prompts (0, L) continues to (0, L + max_new_tokens), as a batch of one would, not a min() error."""
    model = _text("rope")
    out = model.generate(torch.zeros(0, 3, dtype=torch.long), 2, use_cache=use_cache, temperature=temperature)
    assert out.shape == (0, 5) and out.dtype == torch.long
