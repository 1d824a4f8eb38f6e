"""Shared test helpers: how to build any registered kind with the options it requires."""
from __future__ import annotations

import pytest
import torch

import ndpe

torch.set_num_threads(1)

# (kind, dims) pairs for every registered kind.
KIND_DIMS = [(k, d) for k, ds in ndpe.available().items() for d in ds]


def build(kind: str, dims: int, *, dim: int = 48, heads: int = 2, **opts):
    """``ndpe.make`` with the options ``kind`` requires for a small test grid (the kind says which)."""
    options = {**ndpe.registry.kind_class(kind).example_options(dims), **opts}
    return ndpe.make(dims=dims, kind=kind, dim=dim, heads=heads, **options)


def needs_kind(*kinds: str):
    """Skip a test when a kind it names is not registered."""
    missing = [k for k in kinds if k not in ndpe.available()]
    return pytest.mark.skipif(bool(missing), reason=f"kinds not registered: {missing}")


def page_data(html: str) -> dict:
    """The ``DATA`` object inlined in an explorer page."""
    import json
    import re

    blob = re.search(r"const DATA = (\{.*?\});\n</script>", html, re.S)
    assert blob is not None, "no DATA in the page"
    return json.loads(blob.group(1).replace("<\\/", "</"))


@pytest.fixture(scope="session")
def explorer_page(tmp_path_factory):
    """The explorer, every kind, with the committed quick run's benchmark tab, made once per test process by the
    command a user runs (tests/test_explore.py and tests/test_explore_browser.py share it: one xdist group)."""
    from pathlib import Path

    from ndpe.cli import main

    out = tmp_path_factory.mktemp("explorer")
    quick = Path(__file__).resolve().parent.parent / "benchmarks" / "results" / "quick"  # committed
    assert main(["explore", "--out", str(out), "--results", str(quick)]) == 0
    return out / "index.html"


# The every-kind tests that cost the most per kind (torch.compile, torch.export, eager flex, drawing with matplotlib:
# 0.1-2 s a kind each) run in the quick tier (the default) for these kinds only, one for each way a kind acts
# (``catalog.acts_by``; tests/test_tiers.py keeps it so); for every other kind they carry the ``kinds_full`` marker, a
# tier of their own that CI runs (``-m "not slow"``), so a new kind adds none of them to the quick tier.
QUICK_KINDS = ("none", "sinusoidal", "coord", "alibi", "erpe", "rope", "xpos", "cope", "complex", "gta")
every_dims = lambda kind, dims: True  # noqa: E731
largest = lambda kind, dims: dims == max(ndpe.available()[kind])  # noqa: E731
two_d = lambda kind, dims: dims == (2 if 2 in ndpe.available()[kind] else max(ndpe.available()[kind]))  # noqa: E731
# test name -> the dims of each kind it runs at outside the slow tier (the others: slow)
PER_KIND_COST = {"test_compile_fullgraph_changing_grids": largest,
                 "test_every_registered_kind_draws_from_the_command_line": largest,
                 "test_every_registered_kind_draws_through_draw": two_d,
                 "test_torch_export": every_dims,
                 "test_every_score_kind_flex_equals_materialized": every_dims,
                 "test_packed_flex_equals_sdpa_for_every_kind": every_dims,  # its other dims are marked slow there
                 "test_flex_attention_equals_sdpa_or_refuses_for_every_kind": every_dims}


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """The tests of ``PER_KIND_COST`` split by kind and dims: the slow tier (``-m slow``) takes the dims a test leaves
    out (``torch.compile`` and ``ndpe viz`` from the command line run at each kind's largest dims, ``ndpe.viz.draw``
    at 2D where the kind has it), the ``kinds_full`` tier the kinds outside ``QUICK_KINDS``, the quick tier the rest."""
    for item in items:
        spec = getattr(item, "callspec", None)
        keep = PER_KIND_COST.get(getattr(item, "originalname", None) or "")
        if keep is None or spec is None:
            continue
        kind, dims = spec.params["kind"], spec.params["dims"]
        if not keep(kind, dims):
            item.add_marker(pytest.mark.slow)
        elif kind not in QUICK_KINDS and item.get_closest_marker("slow") is None:
            item.add_marker(pytest.mark.kinds_full)


def raises_one_line(name: str, thunk, exc: type[BaseException], fragment: str) -> None:
    """A fuzz row: ``thunk()`` raises ``exc`` with a one-line message that contains ``fragment``."""
    with pytest.raises(exc) as info:
        thunk()
    msg = str(info.value)
    assert fragment in msg, f"{name}: message {msg!r} lacks {fragment!r}"
    assert "\n" not in msg.strip(), f"{name}: message is not one line: {msg!r}"


def assert_tells_apart(out: torch.Tensor, other: torch.Tensor, ref: torch.Tensor, *, rtol: float, atol: float) -> None:
    """``out`` equals the reference ``ref`` within (``rtol``, ``atol``), and ``other`` (the same model with a wrong
    option) differs from it by more than 100 x ``atol``: the test could tell the wrong option apart on any machine,
    whatever rounding makes of ``out - ref`` (a ratio of two tiny differences could not)."""
    torch.testing.assert_close(out, ref, rtol=rtol, atol=atol)
    gap = (other - ref).abs().max().item()
    assert gap > 100 * atol, f"the wrong option is only {gap:.3g} from the reference (needs > {100 * atol:.3g}): " \
                             "the model barely depends on positions"


def assert_attention_adds_the_term(attn: "ndpe.Attention", pos: "ndpe.PosOut", x: torch.Tensor) -> None:
    """Causal ``attn(x, pos)`` equals SDPA with ``pos.logits(q, k, x)`` (a term of the token states) and the causal
    mask added to its logits, from ``attn``'s own projections, and the term moves the output (the check is not blind)."""
    import torch.nn.functional as F

    b, n, dim = x.shape  # plain reshapes, not the module's own rearrange: the reference shares no code with it
    q, k, v = attn.qkv(x).reshape(b, n, 3, attn.heads, dim // attn.heads).permute(2, 0, 3, 1, 4)
    mask = pos.logits(q, k, x) + ndpe.causal_mask(n)
    ref = attn.proj(F.scaled_dot_product_attention(q, k, v, attn_mask=mask).transpose(1, 2).reshape(b, n, dim))
    with torch.no_grad():
        torch.testing.assert_close(attn(x, pos), ref, rtol=1e-5, atol=1e-5)
        assert (attn(x, pos) - attn(x, ndpe.PosOut())).abs().max() > 1e-3


def linear(module: torch.nn.Module, name: str) -> torch.nn.Module | None:
    """``module.<name>``, or the ``nn.Linear`` it wraps at ``.linear`` (Gemma 4's clippable linears)."""
    sub = getattr(module, name, None)
    return sub.linear if isinstance(getattr(sub, "linear", None), torch.nn.Linear) else sub


def sharpen_attention(model: torch.nn.Module, qk_gain: float = 1.5) -> torch.nn.Module:
    """Re-draw every attention's projections with std ``gain / sqrt(fan_in)`` (q and k: ``qk_gain``, logits of std
    about ``qk_gain ** 2``; v and output: 1), in place, from the current random state.

    A model's own init (std 0.02) makes attention nearly uniform and its branch small beside the residual stream,
    so a random model barely depends on positions and a wrong encoding moves it by rounding-sized amounts; with
    sharp attention of unit scale, positions matter. timm's layer-scale factors of the attention branch are set to 1
    for the same reason. Handles fused ``qkv`` linears with ``proj`` (timm: rows q, k,
    v) and separate ``q_proj`` / ``k_proj`` / ``v_proj`` with ``o_proj`` (Hugging Face, also wrapping a ``.linear``)
    or ``proj`` (timm's EVA).
    """
    found = 0
    with torch.no_grad():
        for module in model.modules():
            for name in ("gamma", "gamma_1"):  # timm's layer scale (LayerScale, EvaBlock), 1e-5 at init in some models
                gamma = getattr(module, name, None)
                if isinstance(gamma, torch.nn.Parameter):
                    gamma.fill_(1.0)
            qkv, proj = getattr(module, "qkv", None), getattr(module, "proj", None)
            if isinstance(qkv, torch.nn.Linear) and isinstance(proj, torch.nn.Linear):
                third = qkv.out_features // 3
                draws = [(qkv.weight[:2 * third], qk_gain), (qkv.weight[2 * third:], 1.0), (proj.weight, 1.0)]
            elif all(isinstance(linear(module, n), torch.nn.Linear) for n in ("q_proj", "k_proj", "v_proj")):
                out = linear(module, "o_proj") or proj
                draws = [(linear(module, "q_proj").weight, qk_gain), (linear(module, "k_proj").weight, qk_gain),
                         (linear(module, "v_proj").weight, 1.0),
                         *([(out.weight, 1.0)] if isinstance(out, torch.nn.Linear) else [])]
            else:
                continue
            for weight, gain in draws:
                weight.normal_(0.0, gain / weight.shape[1] ** 0.5)
            found += 1
    assert found, f"no attention projections found in {type(model).__name__}"
    return model
