"""``cpb``: continuous relative position bias, a learned MLP of relative coordinates (Swin V2; x-transformers).

Conventions:
- Offset. ``offset = p_i - p_j`` (query minus key) per axis, as Swin's ``relative_coords_table``
  and x-transformers' ``DynamicPositionBias``; coordinates in index units (token steps). One bias
  per head for any offset, so any grid size works; 1D, 2D and 3D take the same per-axis transform
  of a ``dims``-vector offset.
- ``style="swin"`` (default; Swin V2, timm ``swin_transformer_v2.WindowAttention``): per axis
  ``x = offset / max(R_a - 1, 1) * 8`` then ``sign(x) * log2(|x| + 1) / log2(8)``; MLP
  ``Linear(dims, 512) -> ReLU -> Linear(512, heads, bias=False)`` (``mlp_hidden``; ``depth``
  hidden layers, 1 in Swin); bias ``16 * sigmoid(mlp)``. ``R_a`` is ``train_shape`` (timm's
  ``pretrained_window_size``: offsets keep their trained scale and a larger grid extrapolates
  log-spaced beyond +-8) or, without it, the grid the encoding sees (timm's default ``(0, 0)``:
  every grid maps its largest offset to +-8, so a given offset's bias changes with the grid; the
  extent ``max - min`` of the keys stands for ``R_a - 1`` when only ``positions`` are passed).
  A model trained at one grid and run at another passes ``train_shape``.
- ``style="dynamic"`` (x-transformers ``DynamicPositionBias``): the raw offsets, or
  ``sign(x) * log(|x| + 1)`` (natural log) with ``log_distance=True``; MLP ``Linear(dims, h)``
  [``LayerNorm`` without bias if ``norm``] ``SiLU``, then ``depth - 1`` times ``Linear(h, h)``
  [``LayerNorm``] ``SiLU``, then ``Linear(h, heads)``; no output squashing. Defaults as
  x-transformers: ``h = dim // 4`` (``mlp_hidden``), ``depth=2``, no log, no norm. The offsets do
  not depend on the grid, so decoding and larger grids keep every offset's bias.
- ``act`` (``"relu"`` or ``"silu"``; default ReLU for swin, SiLU for dynamic) and ``dropout`` (on
  each hidden layer's activations in training, default 0) give other MLPs of the same form: timm's
  ``RelPosMlp`` (MaxViT's ``rel_pos_type="mlp"``, mode ``"cr"``) is ``style="dynamic"``,
  ``log_distance=True``, ``depth=1``, ``act="relu"``, ``dropout=0.125``.
- Table. Integer positions (the default grid, ``"random"`` augmentation, decoding) evaluate the
  MLP once per distinct offset, ``prod(2 E_a + 1)`` rows with ``E_a`` the largest offset on axis
  ``a`` (``2 n_a - 1`` per axis on a grid), then gather ``(N, N)`` rows, row-major over axes like
  Swin's ``relative_position_index``. Fractional positions (continuous augmentation, ``"pixel"``
  coordinates) evaluate it per pair (refused over the bias budget). Under ``torch.compile`` with
  index coordinates the table spans the grid and the positions are asserted to be integers
  within it (a runtime error otherwise); with a position augmentation in training, per pair.
- Init: ``nn.Linear``'s default, as both references build the MLP (timm's whole-model init
  redraws Swin V2's ``cpb_mlp`` with ``trunc_normal_(std=0.02)``, a model's own init can too).
- Decoding (``pe((n,), past=p)``): queries ``p .. p + n - 1`` against keys ``0 .. p + n - 1``
  (x-transformers' ``DynamicPositionBias(n, p + n)``); ``swin`` without ``train_shape``
  would normalise by the ``p + n`` keys, so earlier steps would have seen other biases: it raises,
  and a decoder uses ``style="dynamic"`` or ``train_shape``.
- Output ``(heads, N, N)`` float32, ``(B, heads, N, N)`` for batched positions.

>>> import ndpe
>>> pe = ndpe.make(dims=2, kind="cpb", dim=64, heads=4, train_shape=8)   # Swin V2, pretrained window 8
>>> pe((7, 7)).bias.shape, pe.table_rows((7, 7))                          # 13 x 13 offsets, then gather
(torch.Size([4, 49, 49]), 169)
>>> pe = ndpe.make(dims=1, kind="cpb", dim=64, heads=4, style="dynamic", log_distance=True)
>>> pe((5,), past=3).bias.shape                                         # 5 new queries, 8 keys
torch.Size([4, 5, 8])
"""
from __future__ import annotations

import math
from typing import Any, Sequence, cast

import torch
from torch import Tensor, nn

from ..base import Encoding
from ..checks import check_bool, check_choice, check_int, check_number, per_axis
from ..contract import PosOut
from ..coords import FLOAT32_MAX, pair_limit, tightest
from ..memory import check_memory
from ..pairs import pair_axes
from ..registry import register
from .relative import gather_heads_first, heads_first

STYLES = ("swin", "dynamic")
ACTS = ("relu", "silu")
_SWIN_HIDDEN = 512
_LAYER_BYTES = 4096  # the Python objects of one MLP layer (nn.Linear, its activation), beside its weights


def swin_log_coords(offsets: Tensor, divisor: Tensor) -> Tensor:
    """Swin V2's log-spaced coordinates of ``offsets (..., dims)``: ``x = offsets / divisor * 8``,
    ``sign(x) * log2(|x| + 1) / log2(8)``.

    >>> x = swin_log_coords(torch.tensor([[-6.0], [0.0], [3.0], [6.0]]), torch.tensor([6.0]))
    >>> [round(v, 4) for v in x.flatten().tolist()]                      # log2(9) / 3, log2(5) / 3
    [-1.0566, 0.0, 0.774, 1.0566]
    """
    x = offsets / divisor * 8
    return torch.sign(x) * torch.log2(x.abs() + 1.0) / math.log2(8)


def offset_grid(extent: Sequence[int], device=None) -> Tensor:
    """Every integer offset vector with ``|offset_a| <= extent[a]``, ``(prod(2 e + 1), dims)`` float32, row-major.

    >>> offset_grid((1, 0)).tolist()
    [[-1.0, 0.0], [0.0, 0.0], [1.0, 0.0]]
    """
    axes = [torch.arange(-e, e + 1, device=device, dtype=torch.float32) for e in extent]
    return torch.stack(torch.meshgrid(*axes, indexing="ij"), dim=-1).reshape(-1, len(extent))


@register("cpb", dims=(1, 2, 3))
class ContinuousBias(Encoding):
    """Continuous relative position bias, an MLP of (log-spaced) offsets; see the module docstring for conventions.

    Args:
        style: ``"swin"`` (Swin V2, default) or ``"dynamic"`` (x-transformers ``DynamicPositionBias``).
        mlp_hidden: hidden width (default 512 for swin, ``dim // 4`` for dynamic).
        depth: hidden layers (default 1 for swin, 2 for dynamic).
        train_shape: swin only; the grid whose ``size - 1`` divides the offsets (int or per axis;
            Swin's ``pretrained_window_size``). Default: the grid being encoded.
        log_distance: dynamic only; ``sign(x) * log(|x| + 1)`` of the offsets.
        norm: dynamic only; LayerNorm after each hidden linear layer.
        act: the hidden layers' activation, ``"relu"`` or ``"silu"`` (default: the style's).
        dropout: dropout on each hidden layer's activations in training (timm's ``RelPosMlp``: 0.125).
    """

    takes_key_positions = True  # decodes its pairwise term against cached keys
    has_parameters = True
    description = "continuous relative bias: Swin V2 log-spaced CPB, x-transformers `DynamicPositionBias`"
    colour, marker = "#800080", "x"

    @classmethod
    def task_options(cls, *, dims: int, causal: bool, train_grid: tuple[int, ...] | None,
                     max_grid: tuple[int, ...] | None) -> dict[str, Any]:
        """1D: x-transformers' ``DynamicPositionBias``; N-D: Swin V2, offsets normalized by the training grid."""
        return {"style": "dynamic"} if dims == 1 else {"train_shape": list(train_grid or ())}

    def __init__(self, *, dims: int, dim: int, heads: int = 1, style: str = "swin", mlp_hidden: int | None = None,
                 depth: int | None = None, train_shape: int | tuple[int, ...] | None = None,
                 log_distance: bool = False, norm: bool = False, act: str | None = None, dropout: float = 0.0):
        super().__init__(dims=dims, dim=dim, heads=heads)
        check_choice(style, "style", STYLES)
        check_bool(log_distance, "log_distance")
        check_bool(norm, "norm")
        act = check_choice(("relu" if style == "swin" else "silu") if act is None else act, "act", ACTS)
        dropout = check_number(dropout, "dropout", low=0.0, high=1.0)
        swin = style == "swin"
        if swin and (log_distance or norm):
            raise ValueError("log_distance and norm apply to style='dynamic'; style='swin' is always log-spaced "
                             "(sign(x) * log2(|8 x| + 1) / 3) and has no norm")
        if not swin and train_shape is not None:
            raise ValueError("train_shape applies to style='swin' (Swin V2's pretrained_window_size); "
                             "style='dynamic' takes the raw offsets in index units")
        self.style, self.log_distance, self.norm, self.act, self.dropout = style, log_distance, norm, act, dropout
        self.train_shape = None if train_shape is None else per_axis(train_shape, dims, "train_shape", low=1,
                                                                     integer=True)
        self.mlp_hidden = check_int((_SWIN_HIDDEN if swin else max(dim // 4, 1)) if mlp_hidden is None
                                    else mlp_hidden, "mlp_hidden", low=1)
        self.depth = check_int((1 if swin else 2) if depth is None else depth, "depth", low=1)
        h = self.mlp_hidden
        weights = dims * h + (self.depth - 1) * h * h + h * heads + self.depth * h * (3 if norm else 1) + heads
        check_memory(4 * weights + _LAYER_BYTES * self.depth, f"cpb MLP ({self.depth} hidden layers of mlp_hidden={h}: "
                     f"{weights} floats)", "use a smaller mlp_hidden or depth")
        layers: list[nn.Module] = []
        for layer in range(self.depth):
            layers.append(nn.Linear(dims if layer == 0 else h, h))
            if norm:  # x-transformers: its bias-free LayerNorm first, nn.LayerNorm after
                layers.append(nn.LayerNorm(h, bias=layer > 0))
            layers.append(nn.ReLU() if act == "relu" else nn.SiLU())
            if dropout:
                layers.append(nn.Dropout(dropout))
        layers.append(nn.Linear(h, heads, bias=not swin))
        self.mlp = nn.Sequential(*layers)

    def position_limit(self, dtype: torch.dtype = torch.float32) -> tuple[float, str] | None:
        """Coordinates whose float32 offsets stay finite, and for ``swin`` their coordinates
        ``offset / max(R - 1, 1) * 8`` (at most ``16 |coordinate|``); the log-spaced features then keep the MLP finite,
        and ``16 sigmoid`` the bias."""
        offsets = pair_limit(self.kind, self.dims, False)
        if self.style != "swin":
            return offsets
        return tightest(offsets, (FLOAT32_MAX / 16, "where cpb's float32 Swin coordinates 8 * offset overflow"))

    # -- the function of an offset ---------------------------------------------------------------
    def _features(self, offsets: Tensor, divisor: Tensor | None) -> Tensor:
        """MLP input of offsets ``(..., dims)`` (index units); ``divisor`` broadcasts over them (swin)."""
        if self.style == "swin":
            return swin_log_coords(offsets, cast(Tensor, divisor))
        if self.log_distance:
            return torch.sign(offsets) * torch.log(offsets.abs() + 1)
        return offsets

    def offset_bias(self, offsets: Tensor, divisor: Tensor | None = None) -> Tensor:
        """Per-head bias ``(..., heads)`` of offsets ``(..., dims)``: the transform, the MLP, Swin's ``16 sigmoid``."""
        weight = cast(nn.Linear, self.mlp[0]).weight  # a model cast to half precision runs the MLP in its dtype
        out = self.mlp(self._features(offsets, divisor).to(weight.dtype)).float()
        return 16 * torch.sigmoid(out) if self.style == "swin" else out

    def _divisor(self, keys: Tensor, grid_shape) -> Tensor | None:
        """Swin's ``max(R_a - 1, 1)``, ``(dims,)`` or per sample ``(B, dims)``; None for dynamic."""
        if self.style != "swin":
            return None
        if self.train_shape is not None or grid_shape is not None:
            sizes = self.train_shape if self.train_shape is not None else grid_shape
            return torch.tensor([max(n - 1, 1) for n in sizes], dtype=torch.float32, device=keys.device)
        return (keys.amax(-2) - keys.amin(-2)).clamp(min=1)  # the keys' extent stands for the grid's

    # -- table path --------------------------------------------------------------------------------
    def table_rows(self, grid_shape: Sequence[int]) -> int:
        """Rows of the offset table of a grid: ``prod(2 n_a - 1)``."""
        return math.prod(2 * n - 1 for n in grid_shape)

    def _extent(self, q: Tensor, k: Tensor, grid_shape) -> tuple[int, ...] | None:
        """Per-axis largest offset for the table path, or None for the per-pair path."""
        if torch.compiler.is_compiling():
            if grid_shape is None or self.coords_mode != "index" or (self.augment is not None and self.training):
                return None
            extent = tuple(n - 1 for n in grid_shape)
            bound = torch.tensor(extent, dtype=torch.float32, device=q.device)
            fits = ((q == q.round()).all() & (k == k.round()).all()
                    & (q.flatten(0, -2).amax(0) - k.flatten(0, -2).amin(0) <= bound).all()
                    & (k.flatten(0, -2).amax(0) - q.flatten(0, -2).amin(0) <= bound).all())
            torch._assert_async(fits, "cpb under torch.compile tabulates the grid's offsets: positions must be "
                                "integers within the grid (eager mode evaluates other positions per pair)")
            return extent
        if not (bool((q == q.round()).all()) and bool((k == k.round()).all())):
            return None
        qf, kf = q.flatten(0, -2), k.flatten(0, -2)
        extent = tuple(int(v) for v in torch.maximum(qf.amax(0) - kf.amin(0), kf.amax(0) - qf.amin(0)).clamp(min=0))
        pairs = math.prod(q.shape[:-1]) * k.shape[-2]
        return extent if math.prod(2 * e + 1 for e in extent) <= max(pairs, 1024) else None

    def _table(self, extent: tuple[int, ...], divisor: Tensor | None, device) -> Tensor:
        """The bias of every offset in the box: ``(rows, heads)``, or ``(B, rows, heads)`` for a per-sample divisor."""
        if not torch.compiler.is_compiling():
            rows = math.prod(2 * e + 1 for e in extent) * (divisor.shape[0] if divisor is not None and divisor.ndim == 2
                                                            else 1)
            check_memory(self._mlp_bytes(rows),
                         lambda: f"cpb evaluates its MLP on the table of distinct offsets: {rows} rows x "
                                 f"{self.mlp_hidden} hidden units",
                         "pass positions spanning fewer offsets")
        offsets = offset_grid(extent, device=device)  # (rows, dims)
        if divisor is not None and divisor.ndim == 2:
            return self.offset_bias(offsets, divisor[:, None, :])
        return self.offset_bias(offsets, divisor)

    @staticmethod
    def pair_row(qc: list[Tensor], kc: list[Tensor], extent: tuple[int, ...]) -> Tensor:
        """Table rows of integer per-axis query and key grid coordinates (broadcasting, :mod:`ndpe.pairs`):
        ``p_i - p_j + E`` row-major over axes; the one formula of both the materialized bias (``table[row]``) and
        the flex score_mod (``table[row, h]``)."""
        index = None
        for q, k, e in zip(qc, kc, extent):
            row = q - k + e
            index = row if index is None else index * (2 * e + 1) + row
        return cast(Tensor, index)

    # -- encode ------------------------------------------------------------------------------------
    def pair_words(self) -> int:
        """Float32 words per pair at the peak of the table path: the int64 index with its per-axis temporaries, then
        the gather ``(N, N, heads)`` next to it (the table of distinct offsets is ``O(N)``, not counted)."""
        return max(8, 2 + self.heads)

    def _mlp_bytes(self, inputs: int) -> int:
        """Peak bytes of the MLP on ``inputs`` offsets: their features, each layer's activations, the output."""
        return 4 * inputs * (2 * self.dims + 2 * self.depth * self.mlp_hidden + 2 * self.heads)

    def _check_pairs(self, pairs: int) -> None:
        check_memory(self._mlp_bytes(pairs), f"cpb evaluates its MLP per pair for fractional positions: {pairs} pairs "
                     f"x {self.mlp_hidden} hidden units", "pass integer (index) positions, which share one table of "
                     "offsets")

    def encode(self, positions: Tensor, grid_shape, key_positions: Tensor | None = None) -> PosOut:
        if key_positions is not None and self.style == "swin" and self.train_shape is None:
            raise ValueError("cpb style='swin' normalizes offsets by the current grid, which grows with every decoded "
                             "token; decoding with a KV cache needs a fixed train_shape=(length,) (or style='dynamic')")
        q = positions.float()
        k = q if key_positions is None else key_positions.float()
        divisor = self._divisor(k, grid_shape)
        extent = self._extent(q, k, grid_shape)
        if extent is None:  # per pair
            if not torch.compiler.is_compiling():
                self._check_pairs(math.prod(q.shape[:-1]) * k.shape[-2])
            offsets = q[..., :, None, :] - k[..., None, :, :]  # (..., Nq, Nk, dims)
            div = None if divisor is None else divisor[..., None, None, :]
            return PosOut(bias=heads_first(self.offset_bias(offsets, div)))  # from (..., Nq, Nk, heads)
        else:
            table = self._table(extent, divisor, q.device)
            index = self.pair_row(*pair_axes(q.long(), k.long()), extent)  # (..., Nq, Nk)
            if table.ndim == 2:
                return PosOut(bias=gather_heads_first(index, table))
            batch = torch.arange(table.shape[0], device=q.device)[:, None, None]  # one table per sample
            return PosOut(bias=heads_first(table[batch, index]))

    def score_bias(self, coords: Tensor, *, q: Tensor | None = None, k: Tensor | None = None):
        """``(b, h, i, j) -> table[row(i, j), h]`` for flex attention (see :meth:`Encoding.score_bias`): the MLP runs
        once per distinct offset of the grid ``coords (N, dims)`` (any coordinate mode: a regular grid per axis),
        each logit indexes the table with per-token integer grid indices."""
        pos = coords.float()
        steps, ks, sizes = [], [], []
        for a in range(pos.shape[1]):
            values = pos[:, a].unique()  # sorted
            step = float(values[1] - values[0]) if values.numel() > 1 else 1.0
            idx = ((pos[:, a] - values[0]) / step).round()
            if not torch.allclose(idx * step + values[0], pos[:, a], atol=1e-5 * max(abs(step), 1.0)):
                raise ValueError(f"cpb score_bias needs a regular grid (evenly spaced coordinates per axis); "
                                 f"axis {a} is not")
            steps.append(step)
            ks.append(idx.long().contiguous())
            sizes.append(values.numel())
        extent = tuple(n - 1 for n in sizes)
        offsets = offset_grid(extent, device=pos.device) * torch.tensor(steps, device=pos.device)
        table = self.offset_bias(offsets, self._divisor(pos, tuple(sizes)))  # (rows, heads)

        return lambda b, h, i, j: table[self.pair_row([kk[i] for kk in ks], [kk[j] for kk in ks], extent), h]
