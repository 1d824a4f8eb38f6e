"""``ndpe.flex``: flex_attention score_mods equal SDPA with the materialized bias (no N x N tensor)."""
from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import ndpe
from conftest import KIND_DIMS, build
from ndpe import flex
from ndpe.fields import specs

ok, why = flex.flex_available()
pytestmark = [pytest.mark.skipif(not ok, reason=why),
              pytest.mark.filterwarnings("ignore:flex_attention called without torch.compile")]

CASES = [  # (options, grid, causal attention)
    ({"dims": 1, "kind": "alibi"}, (9,), False),
    ({"dims": 1, "kind": "alibi", "causal": True}, (9,), True),
    ({"dims": 2, "kind": "alibi"}, (3, 4), False),
    ({"dims": 3, "kind": "alibi", "distance": "manhattan"}, (2, 3, 2), False),
    ({"dims": 1, "kind": "relative", "max_distance": 3}, (10,), True),
    ({"dims": 2, "kind": "relative", "max_distance": (1, 2)}, (4, 3), False),
    ({"dims": 3, "kind": "relative", "max_distance": 1}, (2, 2, 3), False),
    ({"dims": 1, "kind": "relative", "mode": "t5", "num_buckets": 8, "max_distance": 10}, (20,), False),
    ({"dims": 1, "kind": "relative", "mode": "t5", "num_buckets": 8, "max_distance": 10, "bidirectional": False},
     (20,), True),
]


def sdpa_reference(q, k, v, pe, grid, num_prefix, causal):
    mask = ndpe.attn_bias(pe(grid, num_prefix=num_prefix), q=q, k=k, causal=causal)
    if causal:
        mask = mask + ndpe.causal_mask(q.shape[-2])
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask)


def qkv(pe, grid, num_prefix, batch=2):
    n = num_prefix + torch.Size(grid).numel()
    return [torch.randn(batch, pe.heads, n, 8) for _ in range(3)]


IDS = [f"{o['kind']}-{o['dims']}d-{i}" for i, (o, *_) in enumerate(CASES)]


@pytest.mark.parametrize("opts,grid,causal", CASES, ids=IDS)
def test_eager_score_mod_equals_materialized_bias(opts, grid, causal):
    torch.manual_seed(0)
    pe = ndpe.make(dim=24, heads=3, **opts)
    q, k, v = qkv(pe, grid, num_prefix=2)
    with torch.no_grad():
        out = flex.attention(q, k, v, pe, grid, num_prefix=2, causal=causal, compiled=False)
        ref = sdpa_reference(q, k, v, pe, grid, 2, causal)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


SCORE_KINDS = [(k, d) for k, d in KIND_DIMS if ndpe.registry.kind_class(k).has_score_bias()]
GRIDS = {1: (7,), 2: (3, 4), 3: (2, 2, 3)}


@pytest.mark.parametrize("kind,dims", SCORE_KINDS, ids=[f"{k}-{d}d" for k, d in SCORE_KINDS])
def test_every_score_kind_flex_equals_materialized(kind, dims):
    """Every kind that adds to the logits supplies a score_mod, and it equals its materialized term."""
    torch.manual_seed(0)
    pe = build(kind, dims, dim=24, heads=3).eval()
    with torch.no_grad():  # parameters away from their init, so a wrong index or sign shows
        for p in pe.parameters():
            p.add_(0.3 * torch.randn_like(p))
    causal = dims == 1  # the causal-only kinds (cope) need it; the rest are checked causal in 1D, plain in N-D
    grid = GRIDS[dims]
    q, k, v = qkv(pe, grid, num_prefix=1)
    with torch.no_grad():
        out = flex.attention(q, k, v, pe, grid, num_prefix=1, causal=causal, compiled=False)
        ref = sdpa_reference(q, k, v, pe, grid, 1, causal)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_compiled_cpu_kernel_equals_materialized_bias():
    """The fused (torch.compile) flex kernel runs on CPU in inference; one compile, a 2D relative table."""
    torch.manual_seed(0)
    pe = ndpe.make(dims=2, kind="relative", dim=24, heads=3, max_distance=2)
    q, k, v = qkv(pe, (3, 4), num_prefix=1, batch=1)
    try:
        with torch.no_grad():
            out = flex.attention(q, k, v, pe, (3, 4), num_prefix=1)
    except Exception as err:  # no C++ compiler, unsupported backend ...
        pytest.skip(f"compiled flex_attention unavailable here: {type(err).__name__}: {err}")
    with torch.no_grad():
        ref = sdpa_reference(q, k, v, pe, (3, 4), 1, False)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_compiled_kernel_lowers_a_learned_function_per_logit():
    """fire's pair_bias per logit (an MLP, a 2D distance) lowers to the fused kernel and equals the materialized bias."""
    torch.manual_seed(0)
    pe = ndpe.make(dims=2, kind="fire", dim=24, heads=3, init_L=2.0).eval()
    q, k, v = qkv(pe, (3, 4), num_prefix=1, batch=1)
    try:
        with torch.no_grad():
            out = flex.attention(q, k, v, pe, (3, 4), num_prefix=1)
    except Exception as err:  # no C++ compiler, unsupported backend ...
        if "Lowering" in str(err):
            raise
        pytest.skip(f"compiled flex_attention unavailable here: {type(err).__name__}: {err}")
    with torch.no_grad():
        ref = sdpa_reference(q, k, v, pe, (3, 4), 1, False)
    torch.testing.assert_close(out, ref, rtol=1e-5, atol=1e-5)


def test_training_on_cpu_refused_with_reason():
    pe = ndpe.make(dims=1, kind="relative", dim=24, heads=3, max_distance=2)
    q, k, v = qkv(pe, (5,), 0)
    with pytest.raises(NotImplementedError, match="no backward"):
        flex.attention(q, k, v, pe, (5,), compiled=False)


@pytest.mark.parametrize("make_args,call,exc,fragment", [
    ({"heads": 3}, {"heads": 2}, ValueError, "2 heads but the encoding was built with heads=3"),
    ({"heads": 3}, {"tokens": 7}, ValueError, "tokens but grid"),
])
def test_bad_inputs(make_args, call, exc, fragment):
    pe = ndpe.make(dims=1, kind="alibi", dim=24, **make_args)
    q = torch.randn(1, call.get("heads", 3), call.get("tokens", 6), 8)
    with pytest.raises(exc, match=fragment), torch.no_grad():
        flex.attention(q, q, q, pe, (6,), compiled=False)


def test_unsupported_kind():
    pe = ndpe.make(dims=1, kind="none", dim=24, heads=3)
    with pytest.raises(ValueError, match="adds nothing to the attention logits"):
        flex.score_mod(pe, (6,))


def test_a_new_bias_kind_needs_no_change_to_flex():
    """flex.score_mod asks the kind for its score_bias: a bias kind written elsewhere works as it is."""
    from ndpe.base import Encoding
    from ndpe.contract import PosOut

    class HalfDistance(Encoding):  # not registered: a user's own kind
        kind = "half-distance"

        def encode(self, positions, grid_shape):
            d = (positions[:, None, 0] - positions[None, :, 0]).abs()  # (N, N)
            return PosOut(bias=-0.5 * d.expand(self.heads, -1, -1))

        def score_bias(self, coords, *, q=None, k=None):
            ax = coords[:, 0]
            return lambda b, h, i, j: -0.5 * (ax[i] - ax[j]).abs()

    pe = HalfDistance(dims=1, dim=8, heads=2)
    bias = pe((5,), num_prefix=1).bias  # (heads, 6, 6)
    mod = flex.score_mod(pe, (5,), num_prefix=1)
    got = torch.tensor([[[float(mod(torch.tensor(0.0), 0, torch.tensor(h), torch.tensor(i), torch.tensor(j)))
                          for j in range(6)] for i in range(6)] for h in range(2)])
    torch.testing.assert_close(got, bias)


PACKED = {1: [(7,), (3,), (5,)], 2: [(3, 4), (2, 2), (1, 3)], 3: [(2, 2, 3), (1, 2, 2)]}
QUICK = {("alibi", 2), ("relative", 1), ("cope", 1), ("cpb", 2), ("rope", 2)}  # the rest: slow (eager flex, 2-5 s)
PACKED_KINDS = [pytest.param(k, d, id=f"{k}-{d}d", marks=() if (k, d) in QUICK else pytest.mark.slow)
                for k, d in SCORE_KINDS + [("rope", 2), ("none", 1)]]


@pytest.mark.parametrize("kind,dims", PACKED_KINDS)
def test_packed_flex_equals_packed_sdpa(kind, dims):
    """packed_attention (a BlockMask per sample + the kind's score_mod on each sample's coordinates) equals SDPA with
    pe.packed's block-diagonal bias."""
    torch.manual_seed(0)
    pe = build(kind, dims, dim=24, heads=3).eval()
    with torch.no_grad():
        for p in pe.parameters():
            p.add_(0.3 * torch.randn_like(p))
    causal = dims == 1
    shapes = PACKED[dims]
    pos = pe.packed(shapes, num_prefix=1)
    n = pos.bias.shape[-1]
    q, k, v = (torch.randn(2, 3, n, 8) for _ in range(3))
    q, k = ndpe.apply_qk(q, k, pos)
    with torch.no_grad():
        out = flex.packed_attention(q, k, v, pe, shapes, num_prefix=1, causal=causal, compiled=False)
        mask = ndpe.attn_bias(pos, q=q, k=k, causal=causal)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=mask + ndpe.causal_mask(n) if causal else mask)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


def test_packed_flex_refusals():
    pe = ndpe.make(dims=1, kind="alibi", dim=24, heads=3)
    q = torch.randn(1, 3, 9, 8)
    with pytest.raises(ValueError, match="T = 10 packed tokens"):
        flex.packed_attention(q, q, q, pe, [(4,), (6,)], compiled=False)
    with pytest.raises(TypeError, match="non-empty list"):
        flex.packed_attention(q, q, q, pe, [], compiled=False)


def attention_terms(pos: ndpe.PosOut) -> list[str]:
    """The fields of ``pos`` that add to the attention logits, read from their declarations (not from a list of
    kinds): set, and per query-key pair (role ``pair``) or a function meeting q and k (role ``term``, leading axes
    batch and heads). The rest act on the tokens (``apply_tokens``) or on q and k (``apply_qk``: token fields
    meeting q and k, ``whole`` fields, fields acting at stage ``qk``), which the caller applies before flex, or act
    after the softmax (stage ``probs``: :func:`after_softmax`), which flex refuses."""
    return [name for name, spec, _ in specs(type(pos)) if getattr(pos, name) is not None and not spec.stage
            and (spec.role == "pair" or (spec.role == "term" and "heads" in spec.lead))]


def after_softmax(pos: ndpe.PosOut) -> bool:
    """Whether a field of ``pos`` acts on the attention probabilities (declared at stage ``probs``: eRPE)."""
    return any(getattr(pos, name) is not None and spec.stage == "probs" for name, spec, _ in specs(type(pos)))


def reads_states(pos: ndpe.PosOut) -> bool:
    return any(getattr(getattr(pos, name), "uses_states", False) for name in attention_terms(pos))


def every_kind():
    """Every registered (kind, dims); the kind's smallest dims in the default run, the others slow (eager flex)."""
    return [pytest.param(k, d, id=f"{k}-{d}d", marks=() if d == min(ndpe.available()[k]) else pytest.mark.slow)
            for k, d in KIND_DIMS]


def drawn(kind, dims):
    """The kind with its parameters moved off their init (so that a term left out shows), in eval mode."""
    torch.manual_seed(0)
    pe = build(kind, dims, dim=24, heads=3).eval()
    with torch.no_grad():
        for p in pe.parameters():
            p.add_(0.3 * torch.randn_like(p))
    return pe


@pytest.mark.parametrize("kind,dims", every_kind())
def test_packed_flex_equals_sdpa_for_every_kind(kind, dims):
    """packed_attention equals SDPA on pe.packed for every kind whose output adds to the logits (its term, derived
    from the field declarations, must move the output: leaving it out is caught), or refuses it in one line naming
    the kind; a kind adding nothing to the logits gets the block mask alone."""
    pe = drawn(kind, dims)
    causal = pe.causal_only
    shapes = PACKED[dims][:2]
    alone = pe(shapes[0])
    pos = pe.packed(shapes, num_prefix=1)
    n = pos.bias.shape[-1]
    q, k, v = (torch.randn(2, 3, n, 8) for _ in range(3))
    with torch.no_grad():
        q, k = ndpe.apply_qk(q, k, pos)
    if after_softmax(alone):
        with pytest.raises(ValueError, match=rf"^kind '{kind}' acts on the attention probabilities after the softmax"
                                             r"[^\n]*$"), torch.no_grad():
            flex.packed_attention(q, k, v, pe, shapes, num_prefix=1, causal=causal, compiled=False)
        return
    if reads_states(alone):
        with pytest.raises(ValueError, match=rf"^kind '{kind}' reads the token states \(logits\), which flex attention does not receive[^\n]*$"), \
                torch.no_grad():
            flex.packed_attention(q, k, v, pe, shapes, num_prefix=1, causal=causal, compiled=False)
        return
    mask = ndpe.causal_mask(n) if causal else 0.0
    with torch.no_grad():
        out = flex.packed_attention(q, k, v, pe, shapes, num_prefix=1, causal=causal, compiled=False)
        ref = F.scaled_dot_product_attention(q, k, v, attn_mask=ndpe.attn_bias(pos, q=q, k=k, causal=causal) + mask)
        apart = torch.zeros_like(pos.bias).masked_fill(pos.bias == float("-inf"), float("-inf"))  # no term
        blind = F.scaled_dot_product_attention(q, k, v, attn_mask=apart + mask)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    if attention_terms(alone):
        assert (blind - ref).abs().max() > 1e-3, f"{kind}'s logits term barely moves the output: the test is blind"


@pytest.mark.parametrize("kind,dims", every_kind())
def test_flex_attention_equals_sdpa_or_refuses_for_every_kind(kind, dims):
    """flex.attention (one grid) equals SDPA with attn_bias for every kind whose output adds to the logits, refuses
    a term of the token states, and says in one line that any other kind adds nothing to the logits."""
    pe = drawn(kind, dims)
    causal = pe.causal_only
    grid = PACKED[dims][0]
    pos = pe(grid, num_prefix=1)
    q, k, v = qkv(pe, grid, num_prefix=1)
    with torch.no_grad():
        q, k = ndpe.apply_qk(q, k, pos)
    if not attention_terms(pos) or reads_states(pos):
        what = ("after the softmax" if after_softmax(pos) else "adds nothing to the attention logits"
                if not attention_terms(pos) else "reads the token states")
        with pytest.raises(ValueError, match=rf"^kind '{kind}' [^\n]*{what}[^\n]*$"), torch.no_grad():
            flex.attention(q, k, v, pe, grid, num_prefix=1, causal=causal, compiled=False)
        return
    with torch.no_grad():
        out = flex.attention(q, k, v, pe, grid, num_prefix=1, causal=causal, compiled=False)
        ref = sdpa_reference(q, k, v, pe, grid, 1, causal)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("call,exc,match", [
    (lambda q, pe: flex.packed_attention(q, q, q, "alibi", [(4,), (6,)], compiled=False), TypeError,
     r"^pe must be an ndpe encoding \(pe = ndpe.make\(dims=..., kind=..., dim=..., heads=...\)\), got 'alibi' \(str\)$"),
    (lambda q, pe: flex.attention(q[..., :6, :], q[..., :6, :], q[..., :6, :], "alibi", (6,), compiled=False),
     TypeError, r"^pe must be an ndpe encoding"),
    (lambda q, pe: flex.score_mod("alibi", (6,)), TypeError, r"^pe must be an ndpe encoding"),
    (lambda q, pe: flex.packed_attention(q, q.to("meta"), q, pe, [(4,), (6,)], compiled=False), ValueError,
     r"^flex attention needs one device, got q on cpu, k on meta, v on cpu, encoding on cpu[^\n]*$"),
    (lambda q, pe: flex.packed_attention(q, q, q, copy.deepcopy(pe).to("meta"), [(4,), (6,)], compiled=False),
     ValueError, r"^flex attention needs one device, got q on cpu, k on cpu, v on cpu, encoding on meta[^\n]*$"),
    (lambda q, pe: flex.packed_attention(q, q[:1].expand(3, -1, -1, -1), q[:1].expand(3, -1, -1, -1), pe, [(4,), (6,)],
                                         compiled=False), ValueError, r"^q \(2, 3, 10, 8\), k \(3, 3, 10, 8\)[^\n]*one batch"),
])
def test_encodings_devices_and_batches_that_do_not_meet(call, exc, match):
    """A string where an encoding is expected, tensors on another device than each other or the encoding, and q of
    another batch than k and v: one-line errors before anything is computed."""
    pe = ndpe.make(dims=1, kind="alibi", dim=24, heads=3)
    q = torch.randn(2, 3, 10, 8)
    with pytest.raises(exc, match=match), torch.no_grad():
        call(q, pe)
