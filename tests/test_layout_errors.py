"""A tensor of the wrong layout or token count is one line that names the expected layout and the likely cause:
axes swapped (another axis holds the encoding's tokens), or prefix tokens (cls, registers) on one side only."""
from __future__ import annotations

import pytest
import torch

import ndpe

PE = ndpe.make(dims=2, kind="rope", dim=384, heads=6, theta=100.0)
POS = PE((14, 14), num_prefix=1)  # 197 tokens: 196 grid + 1 cls
BIAS = ndpe.make(dims=2, kind="alibi", dim=384, heads=6)((14, 14), num_prefix=1)
ADD = ndpe.make(dims=2, kind="sinusoidal", dim=384)((14, 14), num_prefix=1)


def qk(*shape):
    x = torch.randn(*shape)
    return lambda pos=POS: ndpe.apply_qk(x, x, pos)


CASES = [
    # (id, thunk, fragments the one line must hold)
    ("apply_qk (B, T, H, D)", qk(2, 197, 6, 64),
     ["q has 6 tokens but the encoding covers 197 (196 grid + 1 prefix)", "q must be (B, heads, T, head_dim)",
      "got (2, 197, 6, 64)", "einops.rearrange(q, 'b t heads head_dim -> b heads t head_dim')"]),
    ("apply_qk without the cls token", qk(2, 6, 196, 64),
     ["q has 196 tokens but the encoding covers 197", "1 prefix token(s) more than q has",
      "or build the encoding with num_prefix=0"]),
    ("apply_qk, encoding built without num_prefix", lambda: qk(2, 6, 197, 64)(PE((14, 14))),
     ["covers 196 (196 grid + 0 prefix)", "if q's first 1 tokens are cls / register tokens", "num_prefix=1"]),
    ("apply_qk with 4 registers the encoding lacks", qk(2, 6, 201, 64), ["num_prefix=5"]),
    ("apply_qk one head (T, B, D)", lambda: ndpe.apply_qk(torch.randn(197, 2, 64), torch.randn(197, 2, 64), POS),
     ["q must be (B, T, head_dim)", "einops.rearrange(q, 't b head_dim -> b t head_dim')"]),
    ("apply_qk per-head rotation, (B, T, H, D)",
     lambda: qk(2, 197, 6, 64)(ndpe.make(dims=2, kind="rope-mixed", dim=384, heads=6)((14, 14), num_prefix=1)),
     ["its axis 1 looks like the tokens"]),  # before the heads check, which would blame heads=197
    ("apply_tokens sequence first", lambda: ndpe.apply_tokens(torch.randn(197, 2, 384), ADD),
     ["tokens have length 2 but the encoding's add covers 197", "x must be (B, T, C)", "einops.rearrange(x, 't b c -> b t c')"]),
    ("apply_tokens without the cls token", lambda: ndpe.apply_tokens(torch.randn(2, 196, 384), ADD),
     ["num_prefix=0"]),
    ("Attention sequence first", lambda: ndpe.Attention(384, 6)(torch.randn(197, 2, 384), BIAS),
     ["x must be (B, T, dim)", "einops.rearrange(x, 't b dim -> b t dim')"]),
    ("Attention, bias without the prefix", lambda: ndpe.Attention(384, 6)(torch.randn(2, 198, 384), BIAS),
     ["x has 198 tokens but the encoding covers 197", "num_prefix=2"]),
]


@pytest.mark.parametrize("thunk, fragments", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_a_wrong_layout_names_the_expected_one_and_the_fix(thunk, fragments):
    with pytest.raises(ValueError) as err:
        thunk()
    message = str(err.value)
    assert "\n" not in message
    for fragment in fragments:
        assert fragment in message


def test_a_count_off_by_more_than_a_prefix_gets_no_guess():
    with pytest.raises(ValueError) as err:
        qk(2, 6, 100, 64)()
    assert "q must be (B, heads, T, head_dim)" in str(err.value)
    assert "num_prefix=" not in str(err.value) and "rearrange" not in str(err.value)


def test_help_shows_attentions_own_forward_and_kvcache_is_one_per_layer():
    assert "(B, T, dim)" in ndpe.Attention.forward.__doc__ and "KVCache" in ndpe.Attention.forward.__doc__
    assert "One per layer" in ndpe.KVCache.__doc__
