"""``ndpe.attend``: SDPA that takes a ``PosOut``. Against attention written out from the fields themselves, for one kind
of each way of acting in attention (a rotation, a bias, a logits term, a term after the softmax, a map of q, k, v and
the output); the caller's own masks (padding, causal, decoding); and ``ndpe.attn_bias`` refusing what SDPA's
``attn_mask`` cannot carry instead of dropping it."""
from __future__ import annotations

import math
from dataclasses import dataclass

import pytest
import torch
import torch.nn.functional as F
from einops import rearrange
from torch import Tensor

import ndpe
from conftest import assert_tells_apart
from ndpe.contract import attn_term
from ndpe.fields import Field, declare

DIM, HEADS = 32, 4
HEAD_DIM = DIM // HEADS


def written_out(q: Tensor, k: Tensor, v: Tensor, pos: ndpe.PosOut | None, *, keep: Tensor | None = None,
                causal: bool = False, x: Tensor | None = None) -> Tensor:
    """Attention from the fields themselves: ``softmax(q.k / sqrt(d) + bias + logits(q, k, x))`` over the keys that
    ``keep`` (boolean, True: attend) and the causal triangle (queries the last of the keys) leave, ``+ prob_bias`` on
    those keys after the softmax, times v. ``q``, ``k``, ``v`` as attention uses them (after apply_qk / apply_v)."""
    logits = q @ k.transpose(-2, -1) / q.shape[-1] ** 0.5
    if pos is not None and pos.bias is not None:
        logits = logits + pos.bias
    if pos is not None and pos.logits is not None:
        logits = logits + pos.logits(q, k, x)
    seen = torch.ones(logits.shape[-2:], dtype=torch.bool)
    if causal:
        seen = seen.tril(k.shape[-2] - q.shape[-2])
    if keep is not None:
        seen = seen & keep
    probs = logits.masked_fill(~seen, float("-inf")).softmax(-1)
    if pos is not None and pos.prob_bias is not None:
        probs = (probs + pos.prob_bias).masked_fill(~seen, 0.0)
    return probs @ v


def encoding(kind: str, dims: int, grid: tuple[int, ...]) -> tuple[ndpe.Encoding, ndpe.PosOut]:
    """The kind, its learned tables drawn at random (erpe's starts at 0), and its PosOut of ``grid`` (gta: random
    cameras, one per token)."""
    torch.manual_seed(0)
    options = {"length": grid[0]} if kind == "erpe" else {}
    pe = ndpe.make(dims=dims, kind=kind, dim=DIM, heads=HEADS, **options)
    with torch.no_grad():
        for p in pe.parameters():
            p.copy_(0.3 * torch.randn_like(p))
    if kind != "gta":
        return pe, pe(grid)
    n = grid[0] * grid[1]
    rot = torch.linalg.qr(torch.randn(n, 3, 3)).Q
    cams = torch.eye(4).repeat(n, 1, 1)
    cams[:, :3, :3], cams[:, :3, 3] = rot, torch.randn(n, 3)
    return pe, pe(grid, extrinsics=cams)


WAYS = [("rope", 2, (3, 4), False), ("alibi", 2, (3, 4), False), ("cope", 1, (12,), True), ("erpe", 1, (12,), False),
        ("gta", 2, (3, 4), False)]  # a rotation, a bias, a logits term (causal only), after the softmax, a frame


@pytest.mark.parametrize("kind, dims, grid, causal", WAYS)
def test_attend_and_attention_equal_attention_written_out(kind, dims, grid, causal):
    """The recipe ``apply_qk``, ``apply_v``, ``ndpe.attend``, ``apply_out`` and ``ndpe.Attention`` (same weights)
    equal attention written out from the PosOut's fields; without the encoding both would differ by far."""
    pe, pos = encoding(kind, dims, grid)
    attn = ndpe.Attention(DIM, HEADS, causal=causal)
    x = torch.randn(2, math.prod(grid), DIM)
    with torch.no_grad():
        q, k, v = rearrange(attn.qkv(x), "b t (three h d) -> three b h t d", three=3, h=HEADS)
        q, k = ndpe.apply_qk(q, k, pos)
        v = ndpe.apply_v(v, pos)
        merge = lambda o: attn.proj(rearrange(ndpe.apply_out(o, pos), "b h t d -> b t (h d)"))  # noqa: E731
        expected = merge(written_out(q, k, v, pos, causal=causal, x=x))
        recipe = merge(ndpe.attend(q, k, v, pos, is_causal=causal, x=x))
        plain = merge(F.scaled_dot_product_attention(q, k, v, is_causal=causal))  # its terms in attention dropped
        assert_tells_apart(recipe, plain if kind in ("alibi", "cope", "erpe") else attn(x), expected,
                           rtol=1e-5, atol=1e-5)
        assert_tells_apart(attn(x, pos), attn(x), expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("kw", [{}, {"scale": 0.3}, {"is_causal": True}, {"attn_mask": "bool"},
                                {"attn_mask": "float"}])
def test_attend_without_encoding_is_sdpa(kw):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(2, HEADS, 6, HEAD_DIM, generator=g) for _ in range(3))
    if kw.get("attn_mask") == "bool":
        kw = {"attn_mask": (torch.rand(6, 6, generator=g) > 0.3).fill_diagonal_(True)}
    elif kw.get("attn_mask") == "float":
        kw = {"attn_mask": torch.randn(2, 1, 6, 6, generator=g)}
    assert torch.equal(ndpe.attend(q, k, v, None, **kw), F.scaled_dot_product_attention(q, k, v, **kw))


@pytest.mark.parametrize("kind", ["alibi", "erpe"])
@pytest.mark.parametrize("causal", [False, True])
def test_attend_adds_the_callers_padding_mask(kind, causal):
    """A boolean padding mask ``(B, 1, 1, T)`` (each sample its own padded keys) with the kind's bias, or with its
    term after the softmax (0 on padded keys), causal or not, equals the written-out attention; so does the same
    mask given as an additive float mask, with any value at or below ``apply.HIDDEN`` hiding a key (-inf,
    transformers' finfo.min, float16's -65504, -1e9, -1e4): a term after the softmax (erpe) never reaches it. eRPE's
    term used to leak through every finite value (up to 2.2 from the boolean mask's result)."""
    pe, pos = encoding(kind, 1, (8,))
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, HEADS, 8, HEAD_DIM, generator=g) for _ in range(3))
    keep = torch.ones(2, 1, 1, 8, dtype=torch.bool)
    keep[0, ..., 6:], keep[1, ..., 3:5] = False, False
    expected = written_out(q, k, v, pos, keep=keep, causal=causal)
    got = ndpe.attend(q, k, v, pos, attn_mask=keep, is_causal=causal)
    assert_tells_apart(got, ndpe.attend(q, k, v, pos, is_causal=causal), expected, rtol=1e-5, atol=1e-5)
    hides = [torch.zeros(keep.shape).masked_fill(~keep, hide) for hide in (
        float("-inf"), torch.finfo(torch.float32).min, torch.finfo(torch.float16).min, -1e9, -1e4)]
    for attention in (ndpe.attend, lambda *a, **kw: ndpe.apply.attention(*a, **kw)):
        for additive in hides:
            torch.testing.assert_close(attention(q, k, v, pos, attn_mask=additive, is_causal=causal), expected)


def test_causal_decoding_takes_the_queries_as_the_last_keys():
    """``is_causal`` with fewer queries than keys: the queries are the last of the keys, as ``ndpe.Attention`` decodes
    with a KV cache (SDPA's own is_causal would align them first); with and without a bias built with ``past=``."""
    pe, _ = encoding("alibi", 1, (6,))
    g = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, HEADS, 6, HEAD_DIM, generator=g) for _ in range(3))
    for full, new in ((None, None), (pe((6,)), pe((2,), past=4))):
        square = ndpe.attend(q, k, v, full, is_causal=True)[..., 4:, :]
        top_left = F.scaled_dot_product_attention(q[..., 4:, :], k, v, is_causal=True)
        assert_tells_apart(ndpe.attend(q[..., 4:, :], k, v, new, is_causal=True), top_left, square,
                           rtol=1e-5, atol=1e-5)


@dataclass(frozen=True)
class TemperedOut(ndpe.PosOut):
    """A PosOut with a field of its own acting after the softmax: the probabilities raised to a per-head power."""
    temper: Tensor | None = declare(Field("whole", ("batch", "heads"), stage="probs",
                                          act=lambda probs, t: probs ** t.to(probs.dtype)))


def test_attn_bias_refuses_what_acts_after_the_softmax():
    """eRPE's prob_bias, alone or merged with a bias, and any field declared with ``stage="probs"`` (the rule reads
    the declarations, not the kind): refused in one line naming ``ndpe.attend``. ``ndpe.Attention``'s own path
    (``attn_term``) takes them, and ``ndpe.attend`` applies them."""
    _, erpe = encoding("erpe", 1, (6,))
    _, alibi = encoding("alibi", 1, (6,))
    tempered = TemperedOut(bias=alibi.bias, temper=torch.full((HEADS, 1, 1), 2.0))
    for pos, field in ((erpe, "prob_bias"), (ndpe.merge(erpe, alibi), "prob_bias"), (tempered, "temper")):
        with pytest.raises(ValueError, match=rf"^this encoding's {field} acts .* after the softmax, which SDPA's "
                                             r"attn_mask cannot carry: call ndpe\.attend\(q, k, v, pos"):
            ndpe.attn_bias(pos)
    assert attn_term(erpe) is None and attn_term(tempered) is not None
    q, k, v = (torch.randn(1, HEADS, 6, HEAD_DIM) for _ in range(3))
    probs = (q @ k.transpose(-2, -1) / HEAD_DIM ** 0.5 + alibi.bias).softmax(-1)
    torch.testing.assert_close(ndpe.attend(q, k, v, tempered), probs ** 2 @ v)


def test_attend_refuses_bad_input_in_one_line():
    _, alibi = encoding("alibi", 1, (6,))
    q = torch.randn(1, HEADS, 5, HEAD_DIM)
    with pytest.raises(TypeError, match="^v must be a \\(B, heads, T, head_dim\\) tensor, got list$"):
        ndpe.attend(q, q, [1.0], None)
    with pytest.raises(TypeError, match="^pos must be an ndpe.PosOut"):
        ndpe.attend(q, q, q, {"bias": alibi.bias})
    with pytest.raises(ValueError, match=r"^tokens have length 5 \(keys 5\) but the encoding's bias covers \(6, 6\)"):
        ndpe.attend(q, q, q, alibi)


@pytest.mark.parametrize("dtype", [torch.uint8, torch.int64, torch.int32])
def test_an_integer_mask_is_refused(dtype):
    """An integer mask is neither boolean nor additive: refused in one line, as SDPA refuses it, with a bias, a term
    after the softmax or neither (it used to be added as 0 / 1, attending the hidden keys)."""
    for kind in ("alibi", "erpe", None):
        pos = encoding(kind, 1, (6,))[1] if kind else None
        q = torch.randn(1, HEADS, 6, HEAD_DIM)
        with pytest.raises(ValueError, match=r"^attn_mask must be boolean .* an integer mask is neither[^\n]*$"):
            ndpe.attend(q, q, q, pos, attn_mask=torch.ones(6, 6, dtype=dtype))


@pytest.mark.parametrize("call,error,match", [
    (lambda q: ndpe.attend(q, q.double(), q, None), ValueError, r"^q, k, v must have one dtype"),
    (lambda q: ndpe.attend(q, q[..., :5, :], q, None), ValueError, r"^q \(1, 4, 6, 8\), k \(1, 4, 5, 8\), v .* do not match"),
    (lambda q: ndpe.attend(q, q, q[..., :4], None), None, None),  # v may have its own head_dim
    (lambda q: ndpe.attend(q, q[..., :4], q[..., :4], None), ValueError, r"q and k one head_dim"),
    (lambda q: ndpe.attend(q, q, q, None, attn_mask=torch.zeros(5, 6)), ValueError, r"^attn_mask of shape \(5, 6\) does not broadcast"),
    (lambda q: ndpe.attend(q, q, q, None, attn_mask=torch.zeros(6, 6, dtype=torch.float64)), ValueError, r"cast it with mask.to\(torch.float32\)"),
    (lambda q: ndpe.attend(q, q, q, None, attn_mask=torch.zeros(6, 6, device="meta")), ValueError, r"^attention needs one device"),
    (lambda q: ndpe.attend(q, q, q, None, attn_mask=[[True]]), TypeError, r"^attn_mask must be a tensor"),
    (lambda q: ndpe.attend(q, q, q, None, dropout_p=2), ValueError, r"dropout_p"),
    (lambda q: ndpe.attend(q, q, q, None, is_causal=1), TypeError, r"is_causal"),
    (lambda q: ndpe.attend(q, q, q.long(), None), ValueError, r"^v must be a floating"),
    (lambda q: ndpe.attend(q[0], q, q, None), ValueError, r"^k must be a floating .* like q"),
])
def test_attend_checks_its_inputs_at_its_door(call, error, match):
    """q, k, v, the mask and the options, each refused in one line naming what was expected (SDPA's raw errors used
    to pass through)."""
    q = torch.randn(1, HEADS, 6, HEAD_DIM)
    if error is None:
        assert call(q).shape == (1, HEADS, 6, 4)
        return
    with pytest.raises(error, match=match) as err:
        call(q)
    assert "\n" not in str(err.value)
