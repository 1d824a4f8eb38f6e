"""``rope``: axial rotary position embedding on 1, 2 or 3 positional axes (RoPE-ND).

Conventions:
- Channels. Each head rotates its first ``rot_dim = sum(axis_dims)`` channels; channels past
  ``rot_dim`` are passed through unrotated (partial rotation). The default ``axis_dims`` gives
  every axis the same even share, ``2 * (head_dim // (2 * dims))``: head_dim 64 in 3D rotates
  3 x 20 channels and leaves 4 unrotated.
- Axis order ``ij``: axis 0 = rows (frames in 3D) owns the first ``axis_dims[0] / 2`` frequencies
  of the ``rot_dim / 2``, then axis 1, ... Frequency ``j`` of axis ``a`` is
  ``theta_a ** (-2j / d_a)`` and its angle is ``coord_a * freq``. ``grid_indexing="xy"`` (timm's
  ``RotaryEmbeddingCat(grid_indexing="xy")``, which its ``vit_*_rope_*`` models use) swaps the channel
  blocks of the first two axes: axis 1 (columns) owns the first frequencies, then axis 0, then axis 2.
  Grids, coordinates, ``axis_dims``, ``theta`` and scaling stay in ``ij`` order (per grid axis);
  only which channels each axis rotates changes (timm: "only the coordinate channel order changes").
- p-RoPE (``proportion=p < 1``, Barbero et al. 2025, HF's ``proportional`` type): the series keeps its
  exponents over the axis' channels but its slowest ``1 - p`` share of frequencies is set to 0: those
  channel pairs are not rotated (semantic channels). Unlike ``axis_dims`` below ``head_dim``, the kept
  frequencies are the full series' fastest and the rotated pairs keep their places (HF's ``rotate_half``
  over the whole head).
- Frequency schemes (``freqs=``, one registered function each in :data:`ndpe.frequencies.FREQUENCIES`): ``"theta"``
  (default) is the series above; the two below are picked by name or by their options (``max_res=`` picks pixel bands).
- Pixel bands (``freqs="pixel"``, ``max_res=R``, timm's ``in_pixels=True``): for coordinates in ``[-1, 1]``
  (``coords="pixel"``) the frequencies of every axis are ``pi * 2 ** linspace(0, log2(R) - 1, d_a / 2)``
  (``linear_bands=True``: ``pi * linspace(1, R / 2, d_a / 2)``, rotary-embedding-torch's
  ``freqs_for="pixel"``) instead of ``theta_a ** (-2j / d_a)``.
- Periods (``freqs="periods"`` or ``periods=True``, DINOv3: timm ``RotaryEmbeddingDinoV3``, HF ``DINOv3ViTRopePositionEmbedding``):
  the angle is ``2 pi * coord / period_j`` with ``period_j = theta_a ** (2j / d_a)`` (the theta series in
  turns instead of radians); ``min_period=`` and ``max_period=`` (which imply it) space the ``d_a / 2``
  periods of every axis log-evenly from one to the other. DINOv3 uses it with ``coords="centered"``,
  ``theta=100`` and ``augment="dinov3"`` (:class:`ndpe.augment.CoordAug`).
- Pairing. ``"half"`` (default; HF / GPT-NeoX ``rotate_half``, timm ``rotate_half=True``):
  frequency ``i`` rotates channels ``(i, i + rot_dim / 2)``. ``"interleaved"`` (RoFormer,
  rotary-embedding-torch, timm's default): it rotates ``(2i, 2i + 1)``. Same rotation up to a
  channel permutation.
- Coordinates (``coords``): ``"index"`` 0..n-1 (default), ``"pixel"`` -1..1 (0 when n = 1),
  ``"centered"`` ``(i + 0.5) / n * 2 - 1``.
- Scaling for extrapolation, per axis (one registered function per type, formulas in :mod:`ndpe.scaling`): ``"linear"``
  (position interpolation), ``"ntk"``, ``"dynamic-ntk"``, ``"yarn"``, ``"llama3"`` (Llama 3.1)
  and ``"longrope"`` (Phi-3; the last four need ``train_shape``, HF's
  ``original_max_position_embeddings``, or ``max_position_embeddings`` for dynamic); ``scale``
  is target / trained length (HF's ``factor``), ``>= 1``; ``"linear"`` takes any ``scale > 0`` per
  axis (positions divided by ``scale``: timm EVA's ``ref_feat_shape=R`` on a grid ``F`` is
  ``scale=F / R``, below 1 where ``R > F``). Scaling needs ``coords="index"``. Each matches
  Hugging Face transformers' ``ROPE_INIT_FUNCTIONS`` (``tests/test_rope_hf.py``), with HF's
  keyword options and defaults: YaRN ``beta_fast=32``, ``beta_slow=1``, ``mscale``,
  ``mscale_all_dim``, ``attention_factor``, ``truncate=True``; Llama 3 ``low_freq_factor=1``,
  ``high_freq_factor=4``; LongRoPE ``short_factor`` / ``long_factor`` (``rot_dim / 2`` numbers,
  axes in order; the long ones are used on an axis whose ``max(position) + 1`` exceeds its
  ``train_shape``) and ``attention_factor``: each type's options are its table entry's, passed as keywords or inside
  ``scaling=ndpe.RopeScaling(...)``. ``ndpe.from_hf_rope(config)`` builds the rope of a HF config (:mod:`ndpe.hf`).
- Channel layouts (``channels=``, one registered function each in :data:`ndpe.rope_layouts.LAYOUTS`): ``"axial"``
  (default) is the split above, with ``grid_indexing``, ``proportion`` and ``head_axes``; ``"mrope"`` the one below.
- M-RoPE (Qwen2-VL, ``mrope_section=``): ONE frequency series ``theta ** (-2j / rot_dim)`` over
  ``rot_dim = 2 * sum(mrope_section)`` channels, cut in consecutive sections, axis ``a`` taking
  ``mrope_section[a]`` frequencies (Qwen2-VL: ``(16, 24, 24)`` for (t, h, w), head_dim 128),
  instead of a separate series per axis. ``mrope_interleaved=True`` (Qwen3-VL) deals them out
  instead: frequency ``j`` goes to axis ``a >= 1`` when ``j % dims == a`` and
  ``j < dims * mrope_section[a]``, to axis 0 otherwise. Drive it with explicit (t, h, w) ids
  through ``positions=`` (text tokens: t = h = w); no scaling.
- Head map (``head_axes=``, one entry per head; rotary-embedding-torch's wish "which head takes which axis, and
  some heads not rotated"): an axis ``a`` rotates that head's ``rot_dim`` channels by axis ``a`` alone, the whole
  rotary budget spent on it (axis ``a``'s frequency scheme, ``theta[a]`` and scaling over ``rot_dim`` channels, as
  a 1D rope of ``axis_dims=(rot_dim,)``), so with head_dim 64 in 3D a time head gets 32 frequencies instead of 10;
  ``None`` leaves the head unrotated (a NoPE head: its q and k pass through); ``"all"`` is the axial split above.
  E.g. 2D, 6 heads: ``head_axes=(0, 0, 1, 1, "all", None)``. ``rot`` is then ``(heads, N, rot_dim / 2)``. Not with
  ``mrope_section`` (its own layout), nor LongRoPE's per-frequency factors on single-axis heads in N-D.
- Precision. Angles are computed in float64 (float32 on MPS) from float32 positions, cos/sin
  returned in float32 (or ``dtype=``). Integer positions are exact up to 2**24 and angles keep
  an error below 1e-10 rad up to position 100,000, so the only rounding left is that of the
  output dtype (``tests/test_precision.py``).
- Output. ``rot = (cos, sin)`` of shape ``(1, N, rot_dim / 2)`` (heads axis of size 1), or
  ``(B, 1, N, rot_dim / 2)`` for batched positions ``(B, N, dims)``; with ``head_axes``, ``heads`` in place of 1.

>>> import ndpe, torch
>>> pe = ndpe.make(dims=2, kind="rope", dim=384, heads=6)        # head_dim 64: 32 + 32 channels
>>> pos = pe((14, 14), num_prefix=1)
>>> pos.rot[0].shape, pos.pairing
(torch.Size([1, 197, 32]), 'half')
>>> q = k = torch.randn(2, 6, 197, 64)
>>> ndpe.apply_qk(q, k, pos)[0].shape
torch.Size([2, 6, 197, 64])
"""
from __future__ import annotations

from typing import Any, Sequence, cast

import torch
from einops import rearrange
from torch import Tensor

from ..base import Encoding
from ..checks import check_bool, check_pairing, per_axis
from ..contract import PosOut
from ..coords import angle_limit
from ..frequencies import FREQUENCIES, axial_inv_freq, resolve_scheme
from ..registry import register
from ..rope_layouts import LAYOUTS, check_head_axes, resolve_axis_dims, resolve_channels  # noqa: F401  (re-exported)
from ..scaling import SCALINGS
from ..scaling_config import RopeScaling, rope_scaling
from ..tables import check_known, equal


def angle_dtype(device: torch.device) -> torch.dtype:
    """float64 for angles, except on MPS which has none."""
    return torch.float32 if device.type == "mps" else torch.float64


@register("rope", dims=(1, 2, 3))
class RoPE(Encoding):
    """Axial RoPE: each axis rotates its own share of every head's channels (see the module doc).

    Args, by group:
        Frequency scheme (:data:`ndpe.frequencies.FREQUENCIES`):
            freqs: the scheme, ``"theta"`` (default), ``"pixel"``, ``"periods"`` or any registered one; left None, the
                scheme whose options are set (``max_res=`` picks ``"pixel"``), else ``"theta"``.
            theta: frequency base, one or per axis.
            periods: DINOv3's schedule, ``freqs="periods"`` (angle ``2 pi * coord / theta_a ** (2j / d_a)``).
            the scheme's own options, as its table entry declares them: ``"pixel"`` ``max_res`` (timm
                ``in_pixels=True, max_res=``, for ``coords="pixel"``) and ``linear_bands`` (timm ``linear_bands=True``);
                ``"periods"`` ``min_period`` and ``max_period`` (both or neither: periods log-spaced between them).
        Channels (:data:`ndpe.rope_layouts.LAYOUTS`):
            channels: the layout, ``"axial"`` (default) or ``"mrope"`` or any registered one; left None, the layout
                whose options are set (``mrope_section=`` picks ``"mrope"``), else ``"axial"``.
            axis_dims: rotary channels per axis (even, sum <= head_dim); default equal even shares.
            pairing: ``"half"`` or ``"interleaved"``.
            the layout's own options, as its table entry declares them: ``"axial"`` ``grid_indexing`` (``"ij"``,
                default: axis 0's channels first, or ``"xy"``, timm's: axis 1's first), ``proportion`` (p-RoPE, Barbero
                et al. 2025, HF's ``proportional``: the fastest ``int(proportion * d_a // 2)`` frequencies of each axis
                keep their value, the slower ones are 0; default 1) and ``head_axes`` (one entry per head: an axis, the
                head's ``rot_dim`` channels all rotating by it, None, not rotated, or ``"all"``, the axial split);
                ``"mrope"`` ``mrope_section`` (frequencies per axis of one shared series; replaces axis_dims) and
                ``mrope_interleaved`` (Qwen3-VL's layout). Another layout's option set away from its default raises.
        Coordinates:
            coords: ``"index"``, ``"pixel"`` or ``"centered"`` coordinates.
        Scaling (:data:`ndpe.scaling.SCALINGS`; theta's series, ``coords="index"``):
            scaling: a :class:`ndpe.RopeScaling`, or its type (None, ``"linear"``, ``"ntk"``, ``"dynamic-ntk"``,
                ``"yarn"``, ``"llama3"``, ``"longrope"`` or any registered one), which builds one (``pe.rope_scaling``,
                per axis) from ``scale``, ``train_shape`` and the type's own options.
            scale: target / trained length, one or per axis; required with a scaling. ``>= 1``, except
                ``"linear"`` which takes any finite ``scale > 0`` (below 1 it stretches positions).
            train_shape: grid the model was trained on (``dynamic-ntk``, ``yarn``, ``llama3``, ``longrope``).
            the type's own options, as its table entry declares them (Hugging Face's names and defaults): YaRN
                ``beta_fast``, ``beta_slow``, ``mscale``, ``mscale_all_dim``, ``truncate``; YaRN and LongRoPE
                ``attention_factor``; Llama 3 ``low_freq_factor``, ``high_freq_factor``; LongRoPE ``short_factor``,
                ``long_factor``. Another type's option set away from its default raises.
    """

    takes_key_positions = True  # refuses options that cannot decode
    description = "axial RoPE-ND, per-axis channels and theta; PI / NTK / dynamic NTK / YaRN"
    colour, marker = "#d62728", "o"

    inv_freq: Tensor  # (rot_dim / 2,) float64 buffer
    freq_axis: Tensor  # (rot_dim / 2,) int64 buffer: the axis turning each pair, in channel order
    order: Tensor  # (rot_dim / 2,) int64 buffer: each pair's frequency in the axes' series (axis order)
    option_tables = (FREQUENCIES, SCALINGS, LAYOUTS)  # their entries' options, declared there, taken as **options

    def __init__(self, *, dims: int, dim: int, heads: int = 1, freqs: str | None = None,
                 theta: float | Sequence[float] = 10000.0, periods: bool = False, channels: str | None = None,
                 axis_dims: Sequence[int] | None = None, pairing: str = "half", coords: str = "index",
                 scaling: str | RopeScaling | None = None, scale: float | Sequence[float] | None = None,
                 train_shape: int | Sequence[int] | None = None, **options: Any):
        check_known(f"{type(self).__qualname__}.__init__()", options, RoPE.option_defaults())
        super().__init__(dims=dims, dim=dim, heads=heads)
        if check_bool(periods, "periods") and freqs not in (None, "periods"):
            raise ValueError(f"periods=True is freqs='periods', got freqs={freqs!r}: pass one of them")
        scaling_options = {n: options.pop(n) for n in list(options) if n in SCALINGS.defaults()}
        self.channel_layout, layout_options = resolve_channels(
            channels, {n: options.pop(n) for n in list(options) if n in LAYOUTS.defaults()})
        layout = LAYOUTS[self.channel_layout]
        theta_series = {"theta": None if equal(theta, 10000.0) else theta, "scaling": scaling,
                        "mrope_section": layout_options.get("mrope_section")}  # what only theta's series takes
        self.freq_scheme, self.freq_options = resolve_scheme(
            "periods" if periods else freqs, options, {n: v for n, v in theta_series.items() if v is not None})
        self.axis_dims, freq_axis, order = layout.fn(dims, self.head_dim, axis_dims, **layout_options)
        self.rot_dim = sum(self.axis_dims)
        self.grid_indexing = layout_options.get("grid_indexing", "ij")
        self.proportion = float(layout_options.get("proportion", 1.0))
        self.mrope_section = tuple(d // 2 for d in self.axis_dims) if layout.shared_series else None
        self.mrope_interleaved = bool(layout_options.get("mrope_interleaved", False))
        # pair j turns with coordinate freq_axis[j] at frequency order[j] of the axes' series (concatenated in axis order)
        self._pairs = (self._mrope_freq_axis(freq_axis) if layout.shared_series else freq_axis, order)  # CPU copies
        self.register_buffer("freq_axis", self._pairs[0].clone(), persistent=False)
        self.register_buffer("order", order.clone(), persistent=False)
        self.theta = per_axis(theta, dims, "theta", low=1.0, inclusive=False)
        if layout.shared_series and len(set(self.theta)) > 1:
            raise ValueError(f"channels={self.channel_layout!r} ({layout.summary}) shares one frequency series between "
                             f"axes: theta must be one number, got {theta!r}")
        check_pairing(pairing)
        self.coords_mode, self.pairing = coords, pairing
        self.rope_scaling = self._scaling_per_axis(rope_scaling(scaling, scale, train_shape, **scaling_options))
        self.head_axes = self._check_head_axes(layout_options.get("head_axes"))
        inv_freq, self.attn_factor = self._build_inv_freq(torch.device("cpu"))
        self.register_buffer("inv_freq", inv_freq, persistent=False)  # (rot_dim / 2,) float64
        # single-axis heads: each axis' series over all rot_dim channels, (dims * rot_dim / 2,) float64
        head_freq, self.head_attn_factor = self._build_head_inv_freq(torch.device("cpu"))
        self.register_buffer("head_inv_freq", head_freq, persistent=False)
        self.fastest = float(torch.cat([inv_freq, head_freq]).abs().max()) if self.rot_dim else 0.0  # rad per unit

    def position_limit(self, dtype: torch.dtype = torch.float32) -> tuple[float, str] | None:
        """Positions whose angles stay within :data:`ndpe.coords.MAX_ANGLE` (float64 keeps their precision)."""
        return angle_limit(self.kind, self.fastest)

    def _check_head_axes(self, head_axes) -> tuple[int | str | None, ...] | None:
        """``head_axes`` checked (:func:`ndpe.rope_layouts.check_head_axes`) against the scaling: a per-frequency one's
        factors fit the axial layout alone."""
        head_axes = check_head_axes(head_axes, self.heads, self.dims)
        if head_axes and any(isinstance(e, int) for e in head_axes) and self.dims > 1 and self.rope_scaling is not None \
                and any(dict(self.rope_scaling.options).get(n) is not None for n in self.rope_scaling.entry.per_frequency):
            raise ValueError(f"scaling={self.scaling!r} gives per-frequency factors for the axial layout; a single-axis "
                             "head spends every rotary channel on one axis: use head_axes 'all' / None with it")
        return head_axes

    def _build_head_inv_freq(self, device: torch.device) -> tuple[Tensor, tuple[float, ...]]:
        """Single-axis heads' frequencies (each axis' series over all ``rot_dim`` channels), built only where a head
        takes one axis (a per-frequency scaling's factors fit the axial layout alone); empty otherwise."""
        if self.head_axes is None or not any(isinstance(e, int) for e in self.head_axes):
            return torch.zeros(0, dtype=torch.float64, device=device), self.attn_factor
        return self._build_inv_freq(device, self.single_axis_dims)

    @property
    def single_axis_dims(self) -> tuple[int, ...]:
        """The channels a single-axis head gives each axis: all ``rot_dim`` of them."""
        return (self.rot_dim,) * self.dims

    def _scaling_per_axis(self, scaling: RopeScaling | None) -> RopeScaling | None:
        """The scaling resolved per axis (validated by :class:`RopeScaling`; here what it needs of the encoding)."""
        if scaling is None:
            return None
        if self.mrope_section is not None:
            raise ValueError(f"mrope_section takes no scaling, got scaling={scaling.type!r}")
        if self.coords_mode != "index":
            raise ValueError(f"scaling={scaling.type!r} works on lengths in tokens: it needs coords='index', "
                             f"got {self.coords_mode!r}")
        return scaling.for_axes(self.axis_dims)

    @property
    def scaling(self) -> str | None:
        """The scaling's type (``rope_scaling.type``), or None."""
        return None if self.rope_scaling is None else self.rope_scaling.type

    @property
    def scale(self) -> tuple[float, ...]:
        """Target / trained length per axis (1 without scaling)."""
        return (1.0,) * self.dims if self.rope_scaling is None else cast(tuple, self.rope_scaling.scale)

    @property
    def train_shape(self) -> tuple[float, ...] | None:
        """The trained length per axis of a scaling that reads it, else None."""
        return None if self.rope_scaling is None else cast("tuple | None", self.rope_scaling.train_shape)

    def _build_inv_freq(self, device: torch.device,
                        axis_dims: tuple[int, ...] | None = None) -> tuple[Tensor, tuple[float, ...]]:
        """Static per-axis frequencies concatenated ``(sum(axis_dims) / 2,)`` (default: the encoding's ``axis_dims``)
        and the cos/sin factor per axis; with ``proportion < 1`` the slowest ones of each axis are 0 (those channels
        are not rotated)."""
        axis_dims = self.axis_dims if axis_dims is None else axis_dims
        freq, factors = self._series(device, axis_dims)
        if self.proportion == 1.0 or self.mrope_section is not None:
            return freq, factors
        keep = torch.cat([torch.arange(d // 2, device=device) < int(self.proportion * d // 2) for d in axis_dims])
        return torch.where(keep, freq, torch.zeros_like(freq)), factors

    def _series(self, device: torch.device, axis_dims: tuple[int, ...]) -> tuple[Tensor, tuple[float, ...]]:
        if self.mrope_section is not None:  # one series over rot_dim, shared out by freq_axis
            return axial_inv_freq(self.rot_dim, self.theta[0], device=device).to(angle_dtype(device)), (1.0,) * self.dims
        if self.rope_scaling is not None:  # theta's series under the scaling type's formula, axis by axis
            scaled = [self.rope_scaling.axis_inv_freq(a, axis_dims, self.theta[a], device=device)
                      for a in range(self.dims)]
            return torch.cat([f for f, _ in scaled]).to(angle_dtype(device)), tuple(m for _, m in scaled)
        scheme = FREQUENCIES[self.freq_scheme].fn
        freqs = [scheme(d, self.theta[a], **self.freq_options, device=device) for a, d in enumerate(axis_dims)]
        return torch.cat(freqs).to(angle_dtype(device)), (1.0,) * self.dims

    def _mrope_freq_axis(self, freq_axis: Tensor) -> Tensor:
        """The axis each of the ``rot_dim / 2`` frequencies of a shared series turns by, ``(rot_dim / 2,)`` int64:
        the layout's ``freq_axis``; a kind with ids of its own (vrope, videorope) deals them out otherwise."""
        return freq_axis

    def _apply(self, fn, *args, **kwargs):
        out = super()._apply(fn, *args, **kwargs)
        self.inv_freq = self._build_inv_freq(self.inv_freq.device)[0]  # .half() / .to(bf16) never reach it
        self.head_inv_freq = self._build_head_inv_freq(self.inv_freq.device)[0]
        self.freq_axis, self.order = (t.to(self.inv_freq.device) for t in self._pairs)  # to_empty never reaches them
        return out

    def axis_inv_freqs(self, positions: Tensor, single: bool = False) -> list[Tensor]:
        """Per-axis frequencies ``(d_a / 2,)`` (``single``: a single-axis head's, ``(rot_dim / 2,)`` each); a dynamic
        scaling (dynamic NTK, LongRoPE) picks them by ``max(positions) + 1``."""
        axis_dims = self.single_axis_dims if single else self.axis_dims
        freqs = list((self.head_inv_freq if single else self.inv_freq).split([d // 2 for d in axis_dims]))
        if self.rope_scaling is not None and self.rope_scaling.dynamic:
            for a, d in enumerate(axis_dims):
                if d:
                    length = positions[..., a].max() + 1
                    freqs[a] = self.rope_scaling.at_length(a, axis_dims, freqs[a], length, self.theta[a])
        return freqs

    def _cos_sin(self, pos: Tensor, single: bool = False) -> tuple[list[Tensor], list[Tensor]]:
        """Per-axis ``cos`` and ``sin`` ``(..., N, d_a / 2)`` of ``pos`` (float64), times the axis' factor."""
        factors = self.head_attn_factor if single else self.attn_factor
        cos_axes, sin_axes = [], []
        for a, freq in enumerate(self.axis_inv_freqs(pos, single)):
            angle = pos[..., a, None] * freq  # (..., N, d_a / 2)
            m = factors[a]
            cos_axes.append(angle.cos() * m if m != 1.0 else angle.cos())
            sin_axes.append(angle.sin() * m if m != 1.0 else angle.sin())
        return cos_axes, sin_axes

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        if key_positions is not None and self.rope_scaling is not None and self.rope_scaling.dynamic:
            static = ", ".join(n for n in SCALINGS if SCALINGS[n].at_length is None)
            raise ValueError(f"rope scaling={self.scaling!r} picks its frequencies from the current length, so keys "
                             "cached at shorter lengths were rotated with other ones: decoding with a KV cache needs a "
                             f"static scaling ({static})")
        pos = positions.to(self.inv_freq.dtype)  # (..., N, dims), float64
        pattern = "b n r -> b 1 n r" if positions.ndim == 3 else "n r -> 1 n r"  # heads axis
        cos, sin = self._rotation(pos)
        if self.head_axes is not None:
            return PosOut(rot=self._per_head(pos, cos, sin), pairing=self.pairing)
        return PosOut(rot=(rearrange(cos, pattern), rearrange(sin, pattern)), pairing=self.pairing)

    def _rotation(self, pos: Tensor) -> tuple[Tensor, Tensor]:
        """``cos``, ``sin`` ``(..., N, rot_dim / 2)`` float32 of ``pos`` (float64) in channel order, as the layout lays
        the pairs out: pair ``j`` turns with coordinate ``freq_axis[j]`` at frequency ``order[j]``, times its axis'
        factor."""
        angle = pos[..., self.freq_axis] * torch.cat(self.axis_inv_freqs(pos))[self.order]
        cos, sin = angle.cos(), angle.sin()
        if any(m != 1.0 for m in self.attn_factor):
            factor = torch.tensor(self.attn_factor, dtype=angle.dtype, device=angle.device)[self.freq_axis]
            cos, sin = cos * factor, sin * factor
        return cos.float(), sin.float()

    def _per_head(self, pos: Tensor, cos: Tensor, sin: Tensor) -> tuple[Tensor, Tensor]:
        """``head_axes``' rotation ``(..., heads, N, rot_dim / 2)``: per head the axial ``cos`` / ``sin``, one axis'
        over every rotary channel, or the identity (cos 1, sin 0)."""
        single_cos, single_sin = self._cos_sin(pos, single=True) if any(
            isinstance(e, int) for e in cast(tuple, self.head_axes)) else ([], [])
        table: dict[int | str | None, tuple[Tensor, Tensor]] = {
            "all": (cos, sin), None: (torch.ones_like(cos), torch.zeros_like(sin)),
            **{a: (c.float(), s.float()) for a, (c, s) in enumerate(zip(single_cos, single_sin))}}
        rows = [table[e] for e in cast(tuple, self.head_axes)]
        return torch.stack([c for c, _ in rows], dim=-3), torch.stack([s for _, s in rows], dim=-3)
