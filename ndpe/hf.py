"""Hugging Face transformers glue: :func:`use` puts any ndpe kind in a HF decoder; :func:`from_hf_rope` and
:func:`hf_cos_sin` (the ``rope`` of a HF config, cos/sin in HF's layout) live in :mod:`ndpe.hf_rope`."""
from __future__ import annotations

import dataclasses
from typing import Any, cast

import torch

from .contract import PosOut
from .hf_rope import _own_rope, from_hf_rope, hf_cos_sin
from .hf_rotary import ModelRotary
from .registry import make

__all__ = ["from_hf_rope", "hf_cos_sin", "use"]


def use(model: Any, kind: str, **options: Any) -> Any:
    """Make a Hugging Face decoder of the Llama family (Llama, Qwen2, Mistral, Gemma: ``model.model.rotary_emb``,
    ``embed_tokens`` and attention modules calling transformers' attention interface) use ndpe's ``kind``; returns
    the same model, changed in place. Through transformers' own extension points, no model code copied:

    - ``rope`` with no options is :func:`from_hf_rope` of the model's config (the model's own rope: the same
      logits; with ``partial_rotary_factor`` < 1, the rope the model applies, see :func:`_own_rope`); any rotary kind with HF's pairing and one rotation for q and k replaces ``rotary_emb``'s cos/sin, so
      keys enter the KV cache rotated, as HF's;
    - any other kind: ``rotary_emb`` gives the identity, and an attention function registered with
      ``AttentionInterface`` (the model's ``attn_implementation`` becomes ``"ndpe-<id>"``) rotates q and every
      key by their positions and adds the kind's bias or logits term to HF's causal mask before SDPA;
    - a kind that adds to or transforms the tokens does it on ``embed_tokens``' output, at the positions after the
      cached ones.

    ``generate()`` with the KV cache works for every 1D kind that decodes. Positions count from the first token of
    each row: other ``position_ids`` (left-padded batches, packed rows) are refused in one line, except by the kinds
    that go through ``rotary_emb``, which take them as HF's rope does. Pinned against
    transformers 5.23 (``tests/test_hf_use.py``).
    """
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS, eager_mask

    from .attention import additive_mask, attend_probs
    from .contract import apply_tokens, attn_term
    from .functional import apply_qk

    inner = getattr(model, "model", None)
    if inner is None or not all(hasattr(inner, a) for a in ("rotary_emb", "embed_tokens", "layers")):
        raise TypeError(f"ndpe.hf.use supports HF decoders of the Llama family (model.model with rotary_emb, "
                        f"embed_tokens and layers), got {type(model).__name__}")
    if getattr(model, "ndpe_pe", None) is not None:
        raise ValueError("this model already uses an ndpe encoding (model.ndpe_pe): load a fresh model to use another")
    config = model.config
    own = ModelRotary(inner)  # how this model hands its rotation to its attention
    heads, head_dim = config.num_attention_heads, own.head_dim
    if kind == "rope" and not options:
        pe = cast(Any, from_hf_rope(config))
        if isinstance(pe, dict):
            raise ValueError("this config has one rope per layer type: ndpe.hf.use takes one encoding for all layers")
        pe = _own_rope(pe, own, config, head_dim)
    else:
        pe = make(dims=1, kind=kind, dim=heads * head_dim, heads=heads, **options)
    if pe.cat_dim:
        raise ValueError(f"kind {kind!r} concatenates {pe.cat_dim} channels to the tokens; a HF model's width is "
                         "fixed: use a kind that adds, rotates or biases")
    probe = pe((2,))
    if probe.logits is not None and probe.logits.uses_states:
        raise ValueError(f"kind {kind!r} reads the token states, which transformers' attention interface does not "
                         "receive: use it in ndpe.Attention or ndpe.timm.use")
    via_rotary = own.takes(pe)  # the model's attention applies pe's cos/sin exactly as ndpe does
    if kind == "rope" and not options and not via_rotary:
        raise ValueError(f"this model's attention does not apply its config's rope (from_hf_rope: {pe.rot_dim} "
                         f"channels, pairing {pe.pairing!r}) as ndpe does; its rotary_emb gives {own.form!r} cos/sin "
                         f"over {own.width} channels")
    model.ndpe_pe = pe
    state: dict[str, int] = {"past": 0}
    encoded: dict[tuple[int, int], PosOut] = {}  # this forward's encodings, shared by its layers

    def encode(n: int, past: int) -> PosOut:
        """``n`` tokens after ``past`` cached ones, once per forward whatever the number of layers."""
        if (n, past) not in encoded:
            encoded[(n, past)] = pe((n,), past=past) if past > 0 else pe((n,))
        return encoded[(n, past)]

    def rotary(x, position_ids, *args, **kwargs):
        if via_rotary:
            return own.cos_sin(pe, position_ids, dtype=x.dtype)
        past, n = state["past"], position_ids.shape[-1]
        if not torch.equal(position_ids, torch.arange(past, past + n, device=position_ids.device).expand_as(position_ids)):
            raise ValueError(f"ndpe.hf.use with kind {kind!r} counts positions from the first token of each row: it "
                             f"takes position_ids {past}..{past + n - 1} only (no left padding, packed or shifted rows)")
        return own.identity(position_ids, x)

    inner.rotary_emb.forward = rotary

    def remember_past(module, args, kwargs):  # the cache length before this forward's tokens
        cache = kwargs.get("past_key_values")
        state["past"] = int(cache.get_seq_length()) if cache is not None else 0
        encoded.clear()  # parameters may have changed since the last forward

    def encode_tokens(module, args, output):
        pos = encode(output.shape[1], state["past"])
        if pos.add is None and pos.tokens is None:
            return output
        return apply_tokens(output, dataclasses.replace(pos, past=0))

    inner.register_forward_pre_hook(remember_past, with_kwargs=True)
    inner.embed_tokens.register_forward_hook(encode_tokens)

    if not via_rotary:
        name = f"ndpe-{id(model)}"

        def attention(module, query, key, value, attention_mask, dropout=0.0, scaling=None, **kwargs):
            groups = query.shape[1] // key.shape[1]
            if groups > 1:
                key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
            n, total = query.shape[-2], key.shape[-2]
            if probe.rot is not None:  # every key by its position (cached unrotated), the queries by theirs
                full = encode(total, 0)
                rot = cast(tuple, full.rot)
                pos = PosOut(rot=(rot[0][..., total - n:, :], rot[1][..., total - n:, :]), rot_k=full.rot_k or rot,
                             pairing=full.pairing, basis=full.basis)  # the new queries, every key
                query, key = apply_qk(query, key, pos)
            pos = encode(n, total - n)
            bias = attn_term(pos, query.dtype, q=query, k=key, causal=True)
            mask = None if attention_mask is None else additive_mask(attention_mask, query.dtype)
            if bias is not None:
                mask = bias if mask is None else mask + bias
            out = attend_probs(query, key, value, pos, attn_mask=mask, dropout_p=dropout, scale=scaling,
                               is_causal=mask is None and n == total)
            return out.transpose(1, 2).contiguous(), None

        AttentionInterface.register(name, attention)
        ALL_MASK_ATTENTION_FUNCTIONS.register(name, eager_mask)
        model.set_attn_implementation(name)
    return model
