"""How a Hugging Face decoder hands its rotation from ``model.model.rotary_emb`` to its attention, found by running
them rather than read from a list of model families (:func:`ndpe.hf.use` relies on it).

transformers ships four forms of what ``rotary_emb`` returns: ``(cos, sin)`` with ``emb = cat(freqs, freqs)``
(Llama and most; ``"half"``), ``(cos, sin)`` with ``emb = repeat_interleave(freqs, 2)`` (Cohere; ``"interleaved"``),
complex ``freqs_cis`` (Llama 4; ``"complex"``) and ``(cos, sin)`` with one entry per pair (GPT-OSS; ``"pairs"``);
each at a width (the rotated channels: the whole head, or
``partial_rotary_factor`` of it, odd widths rounded up to whole pairs as the model does). How the attention pairs the
channels is the attention's own business (GLM takes the ``"half"`` form and rotates interleaved pairs), so
:class:`ModelRotary` does not guess it: :meth:`ModelRotary.takes` feeds the model's first rotary attention ndpe's
cos/sin in the model's form, captures the q and k it hands to its attention function, and compares them with ndpe's
own rotation of the unrotated q and k (:func:`ndpe.apply_qk`). A rope the model's attention applies exactly as ndpe
does goes through ``rotary_emb`` (keys enter the KV cache rotated, as HF's); any other kind gets the identity in the
model's form, and ndpe's attention applies it.
"""
from __future__ import annotations

from typing import Any

import torch
from torch import Tensor

from .apply import beyond_rotation
from .functional import apply_qk
from .kinds.rope import RoPE

PROBE = 7  # positions 0..6 in every probe: distinct angles for every frequency


class _Captured(Exception):
    """Raised by the probe's attention function once it has q and k: the rest of the forward is not needed."""


def _form(out: Any) -> tuple[str | None, int | None]:
    """The form and width of a ``rotary_emb`` output at positions ``0..PROBE-1``; ``(None, None)`` if unknown."""
    if isinstance(out, Tensor) and out.is_complex():
        return "complex", 2 * out.shape[-1]
    if not (isinstance(out, (tuple, list)) and len(out) == 2 and all(isinstance(t, Tensor) for t in out)):
        return None, None
    cos, width = out[0][..., 1:, :], out[0].shape[-1]
    if width % 2 == 0 and torch.equal(cos[..., :width // 2], cos[..., width // 2:]):
        return "half", width
    if width % 2 == 0 and torch.equal(cos[..., ::2], cos[..., 1::2]):
        return "interleaved", width
    return "pairs", 2 * width  # one cos per pair (GPT-OSS)


class ModelRotary:
    """A HF decoder's ``rotary_emb`` and first rotary attention, probed (see the module doc). Built before
    ``rotary_emb.forward`` is replaced: :attr:`own` is the model's own forward."""

    def __init__(self, inner: Any):
        attns: list[Any] = [getattr(layer, "self_attn", None) for layer in getattr(inner, "layers", ())]
        if not hasattr(inner, "rotary_emb") or not attns or not all(isinstance(getattr(a, "head_dim", None), int)
                                                                    for a in attns):
            raise TypeError("ndpe.hf.use supports HF decoders with a rotary_emb and layers that each have a self_attn "
                            "with one head_dim (the Llama family); this model has not")
        self.emb, self.own, self.head_dim = inner.rotary_emb, inner.rotary_emb.forward, attns[0].head_dim
        # the first softmax attention that rotates (Llama 4's NoPE layers say use_rope=False; hybrids' linear
        # attention layers have no config to dispatch on)
        self.attn: Any = next((a for a in attns if getattr(a, "use_rope", True) and hasattr(a, "config")), None)
        if self.attn is None:
            raise TypeError("ndpe.hf.use found no attention layer that dispatches through transformers' attention "
                            "interface (self_attn.config) in this model")
        param = next(inner.parameters(), None)
        self.device = param.device if param is not None else torch.device("cpu")
        self.hidden = int(getattr(self.attn.config, "hidden_size", 0) or 0)
        self.ids = torch.arange(PROBE, device=self.device)[None]
        try:
            self.form, self.width = _form(self.own(self._x(), self.ids))
        except Exception:  # a rotary_emb that needs more than (x, position_ids): the identity only
            self.form, self.width = None, None

    def _x(self) -> Tensor:
        return torch.zeros(1, PROBE, max(self.hidden, 1), device=self.device)

    def identity(self, position_ids: Tensor, x: Tensor) -> Any:
        """No rotation, in the model's form and width (the whole head where the form is unknown)."""
        width = self.width or self.head_dim
        if self.form == "complex":
            return torch.ones(*position_ids.shape, width // 2, dtype=torch.complex64, device=x.device)
        ones = x.new_ones(*position_ids.shape, width // 2 if self.form == "pairs" else width)
        return ones, torch.zeros_like(ones)

    def cos_sin(self, pe: RoPE, position_ids: Tensor, dtype: torch.dtype | None = None) -> Any:
        """``pe`` (a 1D rope) at ``position_ids`` ``(B, T)`` in the model's form: what its ``rotary_emb`` returns."""
        rot = pe(positions=position_ids[..., None].to(torch.float64)).rot
        assert rot is not None
        cos, sin = rot[0][:, 0], rot[1][:, 0]  # (B, T, rot_dim / 2)
        if self.form == "complex":
            return torch.complex(cos.float(), sin.float())
        if self.form == "interleaved":
            cos, sin = cos.repeat_interleave(2, dim=-1), sin.repeat_interleave(2, dim=-1)
        elif self.form == "half":
            cos, sin = torch.cat((cos, cos), dim=-1), torch.cat((sin, sin), dim=-1)
        return (cos, sin) if dtype is None else (cos.to(dtype), sin.to(dtype))

    def qk(self, position_embeddings: Any) -> tuple[Tensor, Tensor]:
        """The q and k ``(B, heads, T, head_dim)`` the probed attention hands to its attention function for a fixed
        input and these position embeddings (under a probe attention function, registered for this call only)."""
        from transformers import AttentionInterface

        got: dict[str, tuple[Tensor, Tensor]] = {}

        def capture(module, query, key, *args, **kwargs):
            got["qk"] = (query, key)
            raise _Captured

        name, config = f"ndpe-probe-{id(self)}", self.attn.config
        before = config._attn_implementation
        AttentionInterface.register(name, capture)
        config._attn_implementation = name
        try:
            with torch.no_grad():
                gen = torch.Generator(device="cpu").manual_seed(0)
                dtype = next(self.attn.parameters()).dtype
                hidden = torch.randn(1, PROBE, self.hidden, generator=gen).to(self.device, dtype)
                self.attn(hidden_states=hidden, position_embeddings=position_embeddings, attention_mask=None,
                          position_ids=self.ids)
        except _Captured:
            pass
        finally:
            config._attn_implementation = before
            AttentionInterface._global_mapping.pop(name, None)
        if "qk" not in got:
            raise RuntimeError("the model's attention did not call its attention function")
        return got["qk"]

    def runs_own(self) -> bool:
        """Whether the model's attention runs on its own ``rotary_emb`` output (transformers' Llama cannot apply a
        rope over part of the head, e.g. ``llama3`` with ``partial_rotary_factor`` < 1)."""
        try:
            self.qk(self.own(self._x(), self.ids))
        except Exception:
            return False
        return True

    def takes(self, pe: Any) -> bool:
        """Whether the model's attention, fed ``pe``'s cos/sin in its form, rotates q and k exactly as ndpe does:
        a 1D rope with one rotation for q and k, at the model's width and pairing."""
        if not (isinstance(pe, RoPE) and pe.dims == 1 and self.form is not None and pe.rot_dim == self.width):
            return False
        pos = pe((PROBE,))
        if beyond_rotation(pos):  # the model's rotary path carries the rotation only; the probe: whether exactly so
            return False
        try:
            q0, k0 = self.qk(self.identity(self.ids, self._x()))
            q1, k1 = self.qk(self.cos_sin(pe, self.ids, q0.dtype))
        except Exception:
            return False
        q, k = apply_qk(q0, k0, pos)
        return bool(torch.allclose(q1, q, rtol=1e-4, atol=1e-5) and torch.allclose(k1, k, rtol=1e-4, atol=1e-5))
