"""``complex``: the paper's f(j, p) = r_j exp(i (w_j p + theta_j)) as a per-token loop, Property 1, gradients,
decoding, the sinusoidal special case, token-dependent frequencies, errors."""
from __future__ import annotations

import cmath
import math

import pytest
import torch

import ndpe

torch.manual_seed(0)


def make(dim=8, **opts):
    return ndpe.make(dims=1, kind="complex", dim=dim, **opts)


def halves(x, pairing):
    """(Re, Im) channel blocks ``(..., dim / 2)`` of x in the kind's layout."""
    m = x.shape[-1] // 2
    return (x[..., :m], x[..., m:]) if pairing == "half" else (x[..., 0::2], x[..., 1::2])


def naive(r, theta, w, positions, pairing):
    """The paper's formula per token and dimension: r (B, N, m), theta (B, N, m), w (m,) or (B, N, m)."""
    b, n, m = r.shape
    out = torch.zeros(b, n, 2 * m, dtype=torch.float64)
    re, im = halves(out, pairing)
    for bi in range(b):
        for t in range(n):
            p = float(positions[t])
            for j in range(m):
                wj = float(w[j]) if w.ndim == 1 else float(w[bi, t, j])
                f = float(r[bi, t, j]) * cmath.exp(1j * (wj * p + float(theta[bi, t, j])))
                re[bi, t, j], im[bi, t, j] = f.real, f.imag
    return out


def embed(r, theta, pairing):
    """Token embedding whose channel pairs are r e^{i theta} in the kind's layout."""
    x = torch.zeros(*r.shape[:-1], 2 * r.shape[-1])
    re, im = halves(x, pairing)
    re.copy_(r * theta.cos())
    im.copy_(r * theta.sin())
    return x


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
@pytest.mark.parametrize("num_prefix", [0, 2])
def test_equals_the_papers_formula(pairing, num_prefix):
    pe = make(dim=10, pairing=pairing)
    with torch.no_grad():
        pe.freq.copy_(torch.rand(5) * 2)  # learned, arbitrary frequencies
    n, m = 7, 5
    r, theta = torch.rand(2, n, m) + 0.1, (torch.rand(2, n, m) - 0.5) * 2 * math.pi
    x = embed(r, theta, pairing)
    prefix = torch.randn(2, num_prefix, 10)
    out = ndpe.apply_tokens(torch.cat([prefix, x], dim=1), pe((n,), num_prefix=num_prefix))
    assert torch.equal(out[:, :num_prefix], prefix)  # prefix tokens pass through
    want = naive(r, theta, pe.freq.detach(), range(n), pairing)
    torch.testing.assert_close(out[:, num_prefix:], want.float(), rtol=1e-5, atol=1e-5)


def reference_code(amplitude_table, frequency_table, words, positions):
    """The paper's public code (zhaodongh/Encoding-Word-Order-in-Complex-valued-Embedding, Fasttext/model_fasttext/
    Complex_order.py ``concat_embedding`` and ``multiply.ComplexMultiply``), ported from TensorFlow: amplitude and
    frequency looked up per word, phase = position x frequency, ``[real, imag] = [cos(phase) * amp,
    sin(phase) * amp]``. Returns (real, imag), each ``(B, N, D)``."""
    amplitude = amplitude_table[words]  # tf.nn.embedding_lookup(self.embedding_W, words_indice)
    phase = frequency_table[words]  # tf.nn.embedding_lookup(self.embedding_W_pos, words_indice)
    phase = positions[..., None].float() * phase  # tf.multiply(tf.expand_dims(position_indice, 2), phase)
    return phase.cos() * amplitude, phase.sin() * amplitude  # ComplexMultiply()([phase, amplitude])


@pytest.mark.parametrize("pairing", ["half", "interleaved"])
def test_equals_the_papers_code_with_shared_frequencies(pairing):
    """The reference code with every word's frequency row equal (the paper's word-sharing simplification, ndpe's
    ``freq``) and no initial phase (its embedding is the amplitude): ndpe on tokens ``[amp | 0]`` gives its
    ``[real | imag]``, at the positions its data feeds (1-based here)."""
    vocab, d, b, n = 11, 6, 3, 9
    pe = make(dim=2 * d, pairing=pairing)
    with torch.no_grad():
        pe.freq.copy_(torch.rand(d) * 2)
    amplitude_table = torch.rand(vocab, d) * 2 - 1  # the code's tf.random_uniform([vocab, D], -1, 1)
    frequency_table = pe.freq.detach().expand(vocab, d)
    words = torch.randint(0, vocab, (b, n))
    positions = torch.arange(1, n + 1).expand(b, n)
    real, imag = reference_code(amplitude_table, frequency_table, words, positions)
    x = embed(amplitude_table[words], torch.zeros(b, n, d), pairing)  # r = amp, theta = 0
    out = pe(positions=positions[..., None].float()).tokens(x)
    re, im = halves(out, pairing)
    torch.testing.assert_close(re, real, rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(im, imag, rtol=1e-5, atol=1e-5)


def test_explicit_and_batched_positions_equal_the_formula():
    pe = make(dim=6)
    r, theta = torch.rand(2, 4, 3) + 0.1, torch.rand(2, 4, 3) * 6
    x = embed(r, theta, "half")
    positions = torch.tensor([[[0.0], [3.0], [4.5], [10.0]], [[2.0], [2.0], [7.0], [100.0]]])
    out = pe(positions=positions).tokens(x)
    for b in range(2):
        want = naive(r[b:b + 1], theta[b:b + 1], pe.freq.detach(), positions[b, :, 0].tolist(), "half")
        torch.testing.assert_close(out[b:b + 1], want.float(), rtol=1e-5, atol=1e-5)


def test_large_positions_keep_precision():
    """Angles w p are formed in float64: at p ~ 1e5 a float32 product would be off by ~1e-3 rad."""
    pe = make(dim=8)
    r, theta = torch.ones(1, 3, 4), torch.zeros(1, 3, 4)
    positions = torch.tensor([[100000.0], [123457.0], [16777215.0]])
    out = pe(positions=positions).tokens(embed(r, theta, "half"))
    want = naive(r, theta, pe.freq.detach(), positions[:, 0].tolist(), "half")
    torch.testing.assert_close(out, want.float(), rtol=0, atol=2e-6)


def test_property_1_offset_is_a_linear_map_of_k_only():
    """f(p + k) = T_k f(p): T_k is fitted once (least squares over many tokens at p = 3) and must map every
    other position and token as well; T_k differs for another k."""
    pe = make(dim=8)
    with torch.no_grad():
        pe.freq.copy_(torch.tensor([1.0, 0.37, 0.05, 2.2]))
    n = 40
    pos = pe((n,))

    def at(x, p):  # the embedding of token x placed at position p
        seq = torch.zeros(1, n, 8)
        seq[0, p] = x
        return pos.tokens(seq)[0, p].double()

    xs = torch.randn(32, 8)
    for k in (1, 5):
        a = torch.stack([at(x, 3) for x in xs])
        b = torch.stack([at(x, 3 + k) for x in xs])
        t_k = torch.linalg.lstsq(a, b).solution  # b = a @ t_k
        for p in (0, 11, 30):
            ys = torch.randn(6, 8)
            torch.testing.assert_close(torch.stack([at(y, p) for y in ys]) @ t_k,
                                       torch.stack([at(y, p + k) for y in ys]), rtol=1e-4, atol=1e-4)
        if k == 1:
            t_1 = t_k
    assert not torch.allclose(t_1, t_k, atol=1e-3)


def test_gradients_reach_the_frequencies():
    pe = make(dim=8)
    x = torch.randn(2, 6, 8)
    pe((6,)).tokens(x).sum().backward()
    assert pe.freq.grad is not None and (pe.freq.grad != 0).all()
    # and through a model: apply_tokens then attention
    pe.zero_grad()
    attn = ndpe.Attention(8, heads=2)
    attn(ndpe.apply_tokens(x, pe((6,))), pe((6,))).square().sum().backward()
    assert (pe.freq.grad != 0).all()


@pytest.mark.parametrize("past,n", [(4, 1), (3, 5)])
@pytest.mark.parametrize("token_frequencies", [False, True])
def test_decoding_rows_equal_the_full_sequence(past, n, token_frequencies):
    pe = make(dim=8, token_frequencies=token_frequencies).eval()
    if token_frequencies:
        with torch.no_grad():
            pe.freq_proj.weight.normal_(std=0.1)
    x = torch.randn(2, 1 + past + n, 8)
    full = ndpe.apply_tokens(x, pe((past + n,), num_prefix=1))
    step = ndpe.apply_tokens(x[:, -n:], pe((n,), past=past, num_prefix=1))
    torch.testing.assert_close(step, full[:, -n:])


def test_unit_tokens_give_the_sinusoids():
    """The paper's remark: with z = 1 (r = 1, theta = 0) the output is the Transformer's cos / sin of w p at the
    same width, i.e. ndpe's sinusoidal encoding (layout "blocks": sin then cos) with the halves swapped."""
    dim, n = 16, 9
    pe = make(dim=dim)
    x = torch.cat([torch.ones(1, n, dim // 2), torch.zeros(1, n, dim // 2)], dim=-1)
    out = pe((n,)).tokens(x)[0]
    sin_cos = ndpe.make(dims=1, kind="sinusoidal", dim=dim, layout="blocks")((n,)).add
    torch.testing.assert_close(out, torch.cat([sin_cos[..., dim // 2:], sin_cos[..., :dim // 2]], dim=-1))


def test_norm_is_kept():
    """|f(j, p)| = r_j: the encoding only turns each complex channel (the paper's boundedness)."""
    pe = make(dim=8, pairing="interleaved")
    x = torch.randn(3, 20, 8)
    out = pe((20,)).tokens(x)
    norm = lambda t: t.unflatten(-1, (4, 2)).norm(dim=-1)  # noqa: E731
    torch.testing.assert_close(norm(out), norm(x))


def test_token_frequencies_equal_the_formula_with_per_token_w():
    pe = make(dim=8, token_frequencies=True)
    with torch.no_grad():
        pe.freq_proj.weight.normal_(std=0.2)
    n = 6
    r, theta = torch.rand(2, n, 4) + 0.1, torch.rand(2, n, 4) * 6
    x = embed(r, theta, "half")
    w = (pe.freq + pe.freq_proj(x)).detach()  # (2, n, 4): each token its own frequencies
    out = pe((n,)).tokens(x)
    torch.testing.assert_close(out, naive(r, theta, w, range(n), "half").float(), rtol=1e-5, atol=1e-5)
    # Property 1 word by word: the same token moved by k turns by w(x) k whatever its position
    seq = x[:1, :1].expand(1, n, 8)
    moved = pe((n,)).tokens(seq)[0]
    wk = (pe.freq + pe.freq_proj(x[0, 0])).detach()
    for p, k in ((0, 2), (1, 2), (3, 2), (0, 5)):
        turned = ndpe.functional.apply_rotary(moved[p], (wk * k).cos(), (wk * k).sin(), "half")
        torch.testing.assert_close(turned, moved[p + k], rtol=1e-5, atol=1e-5)


def test_token_frequencies_start_shared_and_learn():
    pe = make(dim=8, token_frequencies=True)
    x = torch.randn(2, 5, 8)
    torch.testing.assert_close(pe((5,)).tokens(x), make(dim=8)((5,)).tokens(x))  # W = 0 at init
    pe((5,)).tokens(x).square().sum().backward()
    assert pe.freq_proj.weight.grad.abs().sum() > 0 and pe.freq.grad.abs().sum() > 0


def test_compile_fullgraph():
    torch._dynamo.reset()
    for token_frequencies in (False, True):
        pe = make(dim=8, token_frequencies=token_frequencies).eval()

        def f(x):
            return ndpe.apply_tokens(x, pe((6,), num_prefix=1))

        x = torch.randn(2, 7, 8)
        torch.testing.assert_close(torch.compile(f, fullgraph=True)(x), f(x))


@pytest.mark.parametrize("opts,error,match", [
    (dict(dim=7), ValueError, "even dim"),
    (dict(theta=0.5), ValueError, "theta must be > 1"),
    (dict(theta=math.inf), ValueError, "theta"),
    (dict(theta="1e4"), TypeError, "theta must be a number"),
    (dict(pairing="rows"), ValueError, "pairing must be one of"),
    (dict(token_frequencies=1), TypeError, "token_frequencies must be a bool"),
])
def test_bad_options(opts, error, match):
    with pytest.raises(error, match=match):
        make(**opts)


def test_bad_inputs():
    with pytest.raises(ValueError, match="supports dims"):
        ndpe.make(dims=2, kind="complex", dim=8)
    pos = make(dim=8)((5,), num_prefix=1)
    with pytest.raises(ValueError, match=r"complex encodes tokens \(B, 5, 8\).*got \(2, 5, 6\)"):
        ndpe.apply_tokens(torch.randn(2, 6, 6), pos)
    with pytest.raises(ValueError, match=r"got \(2, 4, 8\)"):
        ndpe.apply_tokens(torch.randn(2, 5, 8), pos)
    with pytest.raises(ValueError, match="floating dtype"):
        ndpe.apply_tokens(torch.ones(2, 6, 8, dtype=torch.long), pos)


def test_dtype_follows_the_tokens():
    pe = make(dim=8)
    x = torch.randn(2, 5, 8, dtype=torch.bfloat16)
    assert ndpe.apply_tokens(x, pe((5,), dtype=torch.bfloat16)).dtype == torch.bfloat16
    assert "token_frequencies=True" in repr(make(dim=8, token_frequencies=True))
