"""``ndpe.hf.use(model, kind)``: any 1D ndpe kind in a Hugging Face decoder of the Llama family, through an
:class:`Adapter` that owns what it registers in transformers and removes it when its model goes.

transformers is imported when ``use`` is called, not before (it is an optional extra).
"""
from __future__ import annotations

import copy
import inspect
import itertools
import weakref
from typing import Any, cast

import torch
from torch import Tensor

from .apply import attention as apply_attention, refuse_states, token_fields
from .contract import PosOut, apply_tokens
from .hf_rope import from_hf_rope, own_rope
from .hf_rotary import ModelRotary
from .registry import make, options as kind_options

__all__ = ["Adapter", "use"]

CACHE_NAMES = ("cache", "past_key_values")  # the decoder's KV-cache argument: transformers >= 5.24, and before
DECODER_DEFAULTS = {"causal": True, "center": 0}  # the options a decoder needs, where the kind takes them
_names = itertools.count()  # one attention implementation name per adapter, never reused


def use(model: Any, kind: str, **options: Any) -> Any:
    """Make a Hugging Face decoder of the Llama family (Llama, Qwen2, Mistral, Gemma: ``model.model.rotary_emb``,
    ``embed_tokens`` and attention modules calling transformers' attention interface) use ndpe's ``kind``; returns
    the same model, changed in place, its :class:`Adapter` at ``model.ndpe_adapter``. Through transformers' own
    extension points, no model code copied:

    - ``rope`` with no options is :func:`~ndpe.from_hf_rope` of the model's config (the model's own rope: the same
      logits; with ``partial_rotary_factor`` < 1, the rope the model applies); any rotary kind with HF's pairing and
      one rotation for q and k replaces ``rotary_emb``'s cos/sin, so keys enter the KV cache rotated, as HF's;
    - any other kind: ``rotary_emb`` gives the identity, and an attention function registered with
      ``AttentionInterface`` (the model's ``attn_implementation`` becomes ``"ndpe-<n>"``, on the model's own copy of
      its config: other models built from the same config are left alone) applies the encoding with
      :func:`ndpe.apply.attention`: every key and value mapped by its position (the cache holds them raw), the
      kind's bias or logits term beside HF's causal mask, terms after the softmax, a frame's map of the output;
    - a kind that adds to or transforms the tokens does it on ``embed_tokens``' output, at the positions after the
      cached ones.

    What ``use`` sets for a decoder: ``causal=True`` and ``center=0`` (xPos's fixed center) for the kinds that take
    those options, unless given (``DECODER_DEFAULTS``). ``generate()`` with the KV cache works for every 1D kind
    that decodes. Positions count from the first token of each row: other ``position_ids`` (left-padded batches,
    packed rows) are refused in one line, except by the kinds that go through ``rotary_emb``, which take them as
    HF's rope does. Tested against transformers 5.23 and 5.24, whose decoder's cache argument is named
    ``past_key_values`` and ``cache`` (``tests/test_hf_use.py``). Deleting the model (or
    ``model.ndpe_adapter.close()``) removes what was registered in transformers.
    """
    model.ndpe_adapter = Adapter(model, kind, options)
    return model


class Adapter:
    """What :func:`use` attaches to a decoder: its encoding, the state of the current forward, the hooks, and the
    attention and mask functions it registered in transformers' global interfaces. It holds no reference to the
    model: transformers' registries hold it, the model does not stay alive through them, and the model's deletion
    (or :meth:`close`) unregisters both functions."""

    def __init__(self, model: Any, kind: str, options: dict[str, Any]):
        inner = getattr(model, "model", None)
        if inner is None or not all(hasattr(inner, a) for a in ("rotary_emb", "embed_tokens", "layers")):
            raise TypeError(f"ndpe.hf.use supports HF decoders of the Llama family (model.model with rotary_emb, "
                            f"embed_tokens and layers), got {type(model).__name__}")
        if getattr(model, "ndpe_pe", None) is not None:
            raise ValueError("this model already uses an ndpe encoding (model.ndpe_pe): load a fresh model to use "
                             "another")
        self.own = own = ModelRotary(inner)  # how this model hands its rotation to its attention (run to find out)
        self.kind, self.head_dim = kind, own.head_dim
        self.pe = pe = self._encoding(model, kind, options)
        refuse_states(pe((2,)), f"kind {kind!r}", "transformers' attention interface",
                      "use it in ndpe.Attention or ndpe.timm.use")
        self.via_rotary = own.takes(pe)  # the model's attention applies pe's cos/sin exactly as ndpe does
        if kind == "rope" and not options and not self.via_rotary:
            raise ValueError(f"this model's attention does not apply its config's rope (from_hf_rope: {pe.rot_dim} "
                             f"channels, pairing {pe.pairing!r}) as ndpe does; its rotary_emb gives {own.form!r} "
                             f"cos/sin over {own.width} channels")
        self.past = 0  # the cache length before this forward's tokens
        self.encoded: dict[tuple[int, int], PosOut] = {}  # this forward's encodings, shared by its layers
        model.ndpe_pe = pe
        inner.rotary_emb.forward = self.rotary
        self.handles = [inner.register_forward_pre_hook(self.remember_past, with_kwargs=True),
                        inner.embed_tokens.register_forward_hook(self.encode_tokens)]
        self.name: str | None = None
        if not self.via_rotary:
            self.name = f"ndpe-{next(_names)}"
            self._finalizer = weakref.finalize(model, _unregister, self.name)
            _register(self.name, self.attention)
            _own_config(model)
            model.set_attn_implementation(self.name)

    def _encoding(self, model: Any, kind: str, options: dict[str, Any]) -> Any:
        config, inner = model.config, model.model
        if kind == "rope" and not options:
            pe = cast(Any, from_hf_rope(config))
            if isinstance(pe, dict):
                raise ValueError("this config has one rope per layer type: ndpe.hf.use takes one encoding for all "
                                 "layers")
            pe = own_rope(pe, self.own, config, self.head_dim)
        else:
            takes = kind_options(kind)
            options = {**{k: v for k, v in DECODER_DEFAULTS.items() if k in takes}, **options}
            heads = config.num_attention_heads
            pe = make(dims=1, kind=kind, dim=heads * self.head_dim, heads=heads, **options)
        if pe.cat_dim:
            raise ValueError(f"kind {kind!r} concatenates {pe.cat_dim} channels to the tokens; a HF model's width is "
                             "fixed: use a kind that adds, rotates or biases")
        short, longer = pe((4,)).add, pe((5,)).add
        if short is not None and longer is not None and not torch.allclose(short, longer[..., :4, :]):
            raise ValueError(f"kind {kind!r} encodes each token by the length of the whole sequence, so in a decoder "
                             "later tokens would change earlier ones: give it a fixed length (tape: length=; learned: resize=None)")
        return pe

    def close(self) -> None:
        """Unregister the attention and mask functions now (the model's deletion does it otherwise)."""
        if self.name is not None:
            self._finalizer()

    def encode(self, n: int, past: int) -> PosOut:
        """``n`` tokens after ``past`` cached ones, once per forward whatever the number of layers."""
        if (n, past) not in self.encoded:
            self.encoded[(n, past)] = self.pe((n,), past=past) if past > 0 else self.pe((n,))
        return self.encoded[(n, past)]

    def rotary(self, x: Tensor, position_ids: Tensor, *args: Any, **kwargs: Any) -> Any:
        """``rotary_emb``'s forward: the kind's cos/sin where it goes through it, else the identity."""
        if self.via_rotary:
            return self.own.cos_sin(self.pe, position_ids, dtype=x.dtype)
        past, n = self.past, position_ids.shape[-1]
        if not torch.equal(position_ids, torch.arange(past, past + n, device=position_ids.device).expand_as(position_ids)):
            raise ValueError(f"ndpe.hf.use with kind {self.kind!r} counts positions from the first token of each row: "
                             f"it takes position_ids {past}..{past + n - 1} only (no left padding, packed or shifted "
                             "rows)")
        return self.own.identity(position_ids, x)

    def remember_past(self, module: Any, args: tuple, kwargs: dict) -> None:
        cache = _cache_argument(module.forward, args, kwargs)
        self.past = int(cache.get_seq_length()) if cache is not None else 0
        self.encoded.clear()  # parameters may have changed since the last forward

    def encode_tokens(self, module: Any, args: tuple, output: Tensor) -> Tensor:
        return apply_tokens(output, self.encode(output.shape[1], self.past))

    def attention(self, module: Any, query: Tensor, key: Tensor, value: Tensor, attention_mask: Tensor | None,
                  dropout: float = 0.0, scaling: float | None = None, **kwargs: Any) -> tuple[Tensor, None]:
        """transformers' attention interface: ``(B, heads, n, d)`` queries against every key of the cache."""
        groups = query.shape[1] // key.shape[1]
        if groups > 1:
            key, value = key.repeat_interleave(groups, dim=1), value.repeat_interleave(groups, dim=1)
        n, total = query.shape[-2], key.shape[-2]
        pos = self.encode(n, total - n)  # the new queries against every key
        keys = self.encode(total, 0) if total > n and token_fields(pos) else None  # the cache holds raw keys
        out = apply_attention(query, key, value, pos, keys=keys, attn_mask=attention_mask, is_causal=True,
                              dropout_p=dropout, scale=scaling)
        return out.transpose(1, 2).contiguous(), None


def _interfaces() -> tuple[Any, Any]:
    from transformers import AttentionInterface
    from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS
    return AttentionInterface, type(ALL_MASK_ATTENTION_FUNCTIONS)


def _register(name: str, attention: Any) -> None:
    from transformers.masking_utils import eager_mask
    functions, masks = _interfaces()
    functions.register(name, attention)
    masks.register(name, eager_mask)


def _unregister(name: str) -> None:
    for interface in _interfaces():
        interface._global_mapping.pop(name, None)


def _own_config(model: Any) -> None:
    """Give ``model`` its own copy of its config, in every module that holds it (or one of its sub-configs), so that
    setting its attention implementation leaves the other models built from the same config alone."""
    memo: dict[int, Any] = {}
    model.config = copy.deepcopy(model.config, memo)
    for module in model.modules():
        held = getattr(module, "config", None)
        if held is not None and id(held) in memo and module is not model:
            module.config = memo[id(held)]


def _cache_argument(forward: Any, args: tuple, kwargs: dict) -> Any:
    """The KV cache a decoder's ``forward`` receives, by keyword or by position, under either of its names
    (:data:`CACHE_NAMES`: transformers 5.24 renamed ``past_key_values`` to ``cache``); None without one."""
    for name in CACHE_NAMES:
        if kwargs.get(name) is not None:
            return kwargs[name]
    names = list(inspect.signature(forward).parameters)
    return next((a for name, a in zip(names, args) if name in CACHE_NAMES), None)
