"""Hugging Face transformers glue: :func:`use` puts any ndpe kind in a HF decoder (its :class:`ndpe.hf_use.Adapter`);
:func:`from_hf_rope` and :func:`hf_cos_sin` (the ``rope`` of a HF config, cos/sin in HF's layout) live in
:mod:`ndpe.hf_rope`, how a model hands its rotation to its attention in :mod:`ndpe.hf_rotary`."""
from __future__ import annotations

from .hf_rope import from_hf_rope, hf_cos_sin
from .hf_use import use

__all__ = ["from_hf_rope", "hf_cos_sin", "use"]
