"""``Encoding``: the base module every kind derives from.

A kind implements :meth:`Encoding.encode` for ``N`` grid tokens; the base class validates
inputs, builds coordinates, applies position augmentation in training mode, pads the prefix
tokens with the identity, casts to the requested dtype and caches fixed (parameter-free)
encodings per ``(grid_shape, num_prefix, device, dtype)``.
"""
from __future__ import annotations

import copy
import inspect
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Sequence, TypeVar, cast

import torch
from torch import Tensor, nn

from .cache import TensorCache
from .checks import check_choice, check_dims, check_float_dtype, check_heads, check_int
from .contract import PosOut, pad_prefix, tensors  # noqa: F401  (pad_prefix re-exported)
from .coords import COORD_MODES, check_finite_output, check_grid_shape, check_positions, grid_coords, num_grid_tokens
from .decoding import decode
from .memory import bias_budget, check_bias_size, check_memory, set_bias_budget  # noqa: F401  (re-exported)
from .packing import check_mask_memory, pack
from .tables import Table, options_of

_E = TypeVar("_E", bound="Encoding")


class Encoding(nn.Module):
    """Base class of all kinds. Subclasses set ``coords_mode`` and implement ``encode``.

    Call as ``pe(grid_shape, *, positions=None, num_prefix=0, dtype=None, past=0) -> PosOut``.

    Args of ``forward``:
        grid_shape: sizes of the positional axes, ``ij`` order (e.g. ``(rows, cols)``).
        positions: explicit coordinates ``(N, dims)`` or ``(B, N, dims)`` in the kind's
            coordinate units (``pe.coords(grid_shape)`` gives the default ones).
        num_prefix: cls/register tokens placed before the grid tokens; never encoded.
        dtype: dtype of the returned tensors; the math runs in float32 regardless.
        past: KV-cache decoding (1D): ``grid_shape=(n,)`` are ``n`` new tokens after ``past`` cached ones.
            Per-token fields cover the new tokens (positions ``past .. past + n - 1``); pairwise fields
            (bias, logits) cover the ``n`` new queries against all ``num_prefix + past + n`` keys. The
            prefix tokens are in the cache, so no prefix rows are added.

    What a kind is, declared as class attributes (the base class, :mod:`ndpe.flex`, the benchmark and the
    docs read them from the class; nothing is inferred from a kind's code):
        kind, supported_dims: set by :func:`ndpe.register`.
        takes_key_positions: ``encode`` takes ``key_positions=`` (KV-cache decoding, see :meth:`encode`). A kind
            whose output pairs queries with keys (``bias``, ``logits``) declares it to decode; without it such a
            kind refuses ``past=``. A per-token kind may declare it to refuse options that cannot decode.
        causal_only: defined for causal attention only (CoPE): a bidirectional use raises.
        causal_only_option: the boolean option that, when true, makes it causal-only (its causal form; dd-alibi,
            transformer-xl: ``"causal"``); :meth:`is_causal_only` reads either.
        position_free: encodes no position at all (NoPE): nothing tells grids apart.
        has_parameters: learns parameters with its default options (``fourier`` only with ``learnable=True``).
        coordinate_based: accepts positions other than the grid's (position augmentation).
        integer_positions: positions must be integers (offset tables).
    The keyword options a kind is built with are recorded by ``Encoding.__new__`` for :meth:`replace`.
    """

    # what others read about a kind (ndpe.catalog: figures, the README table, the benchmark); docs/guide.md
    description: ClassVar[str] = ""  # one line for the README table ("": the class docstring's first line)
    colour: ClassVar[str | None] = None  # "#rrggbb" of its curves in every figure (None: derived from the name)
    marker: ClassVar[str | None] = None  # its matplotlib marker in the benchmark plots (None: derived from the name)
    causal_options: ClassVar[dict[str, Any]] = {}  # the options of its causal form, taken in causal attention

    kind: ClassVar[str] = ""
    supported_dims: ClassVar[tuple[int, ...]] = (1, 2, 3)
    takes_key_positions: ClassVar[bool] = False
    causal_only: ClassVar[bool] = False
    causal_only_option: ClassVar[str | None] = None
    position_free: ClassVar[bool] = False
    has_parameters: ClassVar[bool] = False
    coordinate_based: ClassVar[bool] = True
    integer_positions: ClassVar[bool] = False
    repr_attributes: ClassVar[dict[str, str]] = {"coords": "coords_mode"}  # option -> attribute holding its value
    option_tables: ClassVar[tuple[Table, ...]] = ()  # tables whose entries' options it takes as **options (rope)
    _anchor: Tensor
    _init_kwargs: dict[str, Any]

    if TYPE_CHECKING:  # nn.Module types __call__ as returning Any; an encoding's call is its forward
        def __call__(self, grid_shape: Sequence[int] | None = None, *, positions: Tensor | None = None,
                     num_prefix: int = 0, dtype: torch.dtype | None = None, past: int = 0) -> PosOut: ...

    def __new__(cls: type[_E], *args: Any, **kwargs: Any) -> _E:
        """Record the keyword options the encoding is built with (:meth:`replace` rebuilds from them)."""
        self = super().__new__(cls)
        object.__setattr__(self, "_init_kwargs", dict(kwargs))
        return self

    def __init__(self, *, dims: int, dim: int, heads: int = 1):
        super().__init__()
        check_dims(dims, self.kind, self.supported_dims)
        check_heads(dim, heads)
        check_memory(8 * dims * dim + 64 * heads, f"{self.kind} per-channel buffers for dim={dim}, dims={dims}, "
                     f"heads={heads} (float64 frequencies, per-head Python floats)", "use a smaller dim")
        self.dims, self.dim, self.heads = dims, dim, heads
        self.head_dim = dim // heads
        self._coords_mode = "index"
        self.cat_dim = 0  # channels a `cat` output appends to each token
        self.augment: nn.Module | None = None
        self.register_buffer("_anchor", torch.empty(0), persistent=False)  # follows .to(device)
        self._cache = TensorCache()

    @classmethod
    def task_options(cls, *, dims: int, causal: bool, train_grid: tuple[int, ...] | None,
                     max_grid: tuple[int, ...] | None) -> dict[str, Any]:
        """The options this kind needs for a task (the benchmark builds every kind with them): ``dims`` positional
        axes, ``causal`` attention or not, the grid trained on and the largest grid tested (None: not known).
        By default :attr:`causal_options` in causal attention, else none.

        >>> from ndpe.kinds.alibi import ALiBi
        >>> ALiBi.task_options(dims=1, causal=True, train_grid=(8,), max_grid=(32,))
        {'causal': True}
        """
        return dict(cls.causal_options) if causal else {}

    @classmethod
    def is_causal_only(cls, options: dict[str, Any]) -> bool:
        """Whether this kind built with ``options`` is defined for causal attention only (a bidirectional use
        raises): :attr:`causal_only`, or its :attr:`causal_only_option` set (or defaulting) to true.

        >>> from ndpe.kinds.dd_alibi import DataDependentAlibi
        >>> DataDependentAlibi.is_causal_only({}), DataDependentAlibi.is_causal_only({"causal": False})
        (True, False)
        """
        name = cls.causal_only_option
        if cls.causal_only or name is None:
            return cls.causal_only
        return bool(options.get(name, inspect.signature(cls.__init__).parameters[name].default))

    @classmethod
    def option_defaults(cls) -> dict[str, Any]:
        """Every keyword option with its default (``inspect.Parameter.empty``: required): those of ``__init__``'s
        signature, then, where it takes ``**options``, those its :attr:`option_tables` declare."""
        params = inspect.signature(cls.__init__).parameters.values()
        own = {p.name: p.default for p in params if p.kind is p.KEYWORD_ONLY}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return own
        return {**own, **{n: d for n, d in options_of(*cls.option_tables).items() if n not in own}}

    @classmethod
    def example_options(cls, dims: int) -> dict[str, Any]:
        """Options a small example of this kind needs beyond its defaults (the contract tests build every
        kind with them); a kind with a required option overrides this."""
        return {}

    # -- to implement --------------------------------------------------------------------
    def encode(self, positions: Tensor, grid_shape: tuple[int, ...] | None) -> PosOut:
        """Encode ``positions`` ``(N, dims)`` or ``(B, N, dims)`` (float32) for the ``N`` grid tokens.

        A kind declaring ``takes_key_positions = True`` (its output pairs queries with keys, or it must know it is
        decoding) takes a third argument ``key_positions=None``: ``None`` in the usual call (keys are the queries),
        the ``(past + n, 1)`` key coordinates in KV-cache decoding, where ``positions`` are the ``n`` new queries'
        (the last ``n`` rows) and ``grid_shape`` is ``(past + n,)``. Other kinds decode per-token fields only.
        """
        raise NotImplementedError

    # -- shared machinery ----------------------------------------------------------------
    @property
    def device(self) -> torch.device:
        """The device the encoding's outputs are built on (that of its parameters and buffers)."""
        return self._anchor.device

    @property
    def coords_mode(self) -> str:
        """Units of the default coordinates: ``"index"``, ``"pixel"`` or ``"centered"`` (see ``ndpe.coords``)."""
        return self._coords_mode

    @coords_mode.setter
    def coords_mode(self, mode: str) -> None:
        check_choice(mode, "coords", COORD_MODES)
        _check_augment_coords(self.augment, mode)
        self._coords_mode = mode
        self.clear_cache()

    def coords(self, grid_shape: Sequence[int]) -> Tensor:
        """Default coordinates ``(N, dims)`` of the grid in this kind's units (what ``pe(grid_shape)`` encodes; a kind
        whose positions are not grid coordinates, such as (latitude, longitude), overrides it)."""
        grid_shape = check_grid_shape(grid_shape, self.dims)
        return grid_coords(grid_shape, self.coords_mode, device=self.device)

    def set_augment(self, augment: nn.Module | None) -> None:
        """Attach a position augmentation (active in training mode only)."""
        if augment is not None and not self.coordinate_based:
            raise ValueError(f"kind {self.kind!r} looks positions up in a table; augmentation needs a coordinate-based kind")
        if augment is not None and self.integer_positions and getattr(augment, "continuous", True):
            raise ValueError(f"kind {self.kind!r} needs integer positions but {type(augment).__name__} makes fractional "
                             "ones; use an integer augmentation such as 'random'")
        _check_augment_coords(augment, self.coords_mode)
        self.augment = augment
        self.clear_cache()

    def score_bias(self, coords: Tensor, *, q: Tensor | None = None,
                   k: Tensor | None = None) -> Callable[[Tensor, Tensor, Tensor, Tensor], Tensor]:
        """The kind's logit term as a function ``(b, h, i, j) -> term`` of batch, head and grid-token indices.

        Bias and logits kinds implement it from the grid coordinates ``coords (N, dims)`` (and, for logits
        kinds, the grid tokens' queries and keys ``(B, heads, N, head_dim)``), so flex attention
        (:mod:`ndpe.flex`) adds the term per logit without a ``(heads, N, N)`` tensor. A kind without one refuses in
        one line (``ValueError``); :func:`ndpe.flex.grid_term` then materializes the term of its ``PosOut``, if any.
        """
        raise ValueError(f"{type(self).__name__} ({self.kind!r}) has no score function per logit of its own: "
                         "ndpe.flex.grid_term materializes its PosOut's logits term, if it has one")

    @classmethod
    def has_score_bias(cls) -> bool:
        """Whether the kind computes its logits term per logit for flex attention (it overrides score_bias)."""
        return cls.score_bias is not Encoding.score_bias

    def replace(self, **changes: Any) -> "Encoding":
        """A new encoding of the same kind with some options changed, e.g. test-time RoPE scaling.

        The copy keeps every other option, the position augmentation, the device and dtype, the
        train/eval mode and every parameter or buffer whose shape is unchanged (a trained table stays
        trained). Unknown options raise as in :func:`ndpe.make`.

        >>> import ndpe
        >>> pe = ndpe.make(dims=2, kind="rope", dim=64, heads=4, theta=100.0).eval()
        >>> yarn = pe.replace(scaling="yarn", scale=2.0, train_shape=(8, 8))
        >>> yarn.theta, yarn.scaling, yarn.training
        ((100.0, 100.0), 'yarn', False)
        """
        new = type(self)(**{**self._init_kwargs, **changes})
        if self.augment is not None:
            new.set_augment(copy.deepcopy(self.augment))
        new.to(device=self.device)
        floats = [p for p in self.parameters() if p.is_floating_point()]
        if floats:
            new.to(dtype=floats[0].dtype)
        state = new.state_dict()
        kept = {k: v for k, v in self.state_dict().items() if k in state and state[k].shape == v.shape}
        new.load_state_dict(kept, strict=False)
        return new.train(self.training)

    def clear_cache(self) -> None:
        """Forget cached outputs (call after changing options in place)."""
        self._cache.clear()

    def forward(self, grid_shape: Sequence[int] | None = None, *, positions: Tensor | None = None,
                num_prefix: int = 0, dtype: torch.dtype | None = None, past: int = 0) -> PosOut:
        """The :class:`~ndpe.PosOut` of ``num_prefix`` unencoded tokens then a grid of ``grid_shape`` (or of
        ``positions``); the arguments are described in the class docstring ("Args of ``forward``")."""
        grid_shape = self.check_call(grid_shape, positions, num_prefix, dtype, past)
        if past:
            return decode(self, cast(tuple, grid_shape), positions, num_prefix, dtype, past)
        augmenting, explicit = self.augment is not None and self.training, positions is not None
        key = None
        if positions is None and not augmenting and self._cacheable():
            key = (grid_shape, num_prefix, self.device, dtype)
            hit = self._cache.get(key)  # None also after a caller's in-place change of the cached output
            if hit is not None:
                return hit
        if positions is None:  # the bias (the larger) and the coordinates are checked from the shape first
            check_bias_size(self, None, num_grid_tokens(cast(Sequence[int], grid_shape)), grid_shape, num_prefix)
            positions = self.coords(cast(Sequence[int], grid_shape))
        else:
            positions = self.explicit_positions(positions, grid_shape, dtype)
        if augmenting:
            positions = cast(nn.Module, self.augment)(positions, grid_shape)
        check_bias_size(self, positions.shape[0] if positions.ndim == 3 else None, positions.shape[-2], grid_shape,
                              num_prefix)
        self.check_range(positions, dtype or torch.float32)
        out = pad_prefix(self.encode(positions, grid_shape), num_prefix)
        if dtype is not None:
            out = out.to(dtype)
        if explicit and type(self).position_limit is Encoding.position_limit:  # no limit declared: finite or refused
            check_finite_output(tensors(out), self.kind, positions, dtype or torch.float32)
        if key is not None:
            # also the parameters and buffers: a frozen one changed in place (an EMA copy) must not serve a stale output
            self._cache.put(key, out, tensors(out) + tuple(self.parameters()) + tuple(self.buffers()))
        return out

    def check_call(self, grid_shape: Sequence[int] | None, positions: Tensor | None, num_prefix: int,
                   dtype: torch.dtype | None, past: int) -> tuple[int, ...] | None:
        """Check ``forward``'s arguments but the positions themselves (one line each); the checked grid shape."""
        check_int(num_prefix, "num_prefix", low=0)
        check_int(past, "past", low=0)
        check_float_dtype(dtype)
        if grid_shape is None and positions is None:
            raise ValueError("pass grid_shape, positions, or both")
        return None if grid_shape is None else check_grid_shape(grid_shape, self.dims)

    def explicit_positions(self, positions: Tensor, grid_shape: tuple[int, ...] | None,
                           dtype: torch.dtype | None) -> Tensor:
        """Explicit ``positions`` checked (:func:`ndpe.coords.check_positions`: their shape, the grid's token count,
        finite and within :meth:`position_limit` of the output ``dtype``), as float32 (float64 kept)."""
        limit = None if torch.compiler.is_compiling() else self.position_limit(dtype or torch.float32)
        return check_positions(positions, self.dims, None if grid_shape is None else num_grid_tokens(grid_shape), limit)

    def packed(self, grid_shapes: Sequence[Sequence[int]], *, num_prefix: int = 0,
               dtype: torch.dtype | None = None) -> PosOut:
        """The encoding of samples of several grid shapes packed into one sequence: sample ``i`` takes
        ``num_prefix + prod(grid_shapes[i])`` tokens (its prefix first), after sample ``i - 1``'s; its positions are
        its own grid's, and the ``bias`` field (``(T, T)``, or per head) keeps attention inside each sample
        (:func:`ndpe.pack`). Attention over the packed tokens equals attention over each sample alone.

        >>> import ndpe
        >>> pe = ndpe.make(dims=2, kind="rope", dim=64, heads=4)
        >>> pos = pe.packed([(3, 4), (2, 2)], num_prefix=1)          # 13 + 5 tokens in one sequence
        >>> pos.rot[0].shape, pos.bias.shape
        (torch.Size([1, 18, 8]), torch.Size([18, 18]))
        """
        if isinstance(grid_shapes, (str, bytes)) or not isinstance(grid_shapes, (list, tuple)) or not grid_shapes:
            raise TypeError(f"grid_shapes must be a non-empty list of grid shapes (one per sample), got {grid_shapes!r}")
        shapes = [check_grid_shape(g, self.dims) for g in grid_shapes]
        check_int(num_prefix, "num_prefix", low=0)
        sizes = [num_prefix + num_grid_tokens(g) for g in shapes]
        check_mask_memory((), sizes, dtype or torch.float32)  # its smallest mask, before any sample is encoded
        outs = [self(g, num_prefix=num_prefix, dtype=dtype) for g in shapes]
        out = pack(outs, sizes, device=self.device)
        return out if dtype is None else out.to(dtype)

    def position_limit(self, dtype: torch.dtype = torch.float32) -> tuple[float, str] | None:
        """The largest ``|coordinate|`` explicit ``positions=`` may hold for an output in ``dtype``, and why (the
        error's clause), checked with their finiteness (:func:`ndpe.coords.check_positions`); None: any. A kind
        overrides it from its formula (:mod:`ndpe.coords`: ``angle_limit``, ``pair_limit``, ``output_max``); one that
        does not has its output of explicit positions checked finite after the fact (one more pass), so every output
        is finite or refused (``tests/test_finite.py``). Not called on a grid call, in decoding, or compiled."""
        return None

    def check_range(self, positions: Tensor, dtype: torch.dtype) -> None:
        """Refuse (``ValueError``, one line) positions ``(..., N, dims)`` whose output would overflow ``dtype``, the
        dtype it is returned in (float32 by default). Called before :meth:`encode` with the queries' (or, decoding,
        the keys') coordinates. Default: nothing to check; a kind whose values grow with the position overrides it."""

    def pair_words(self) -> int | None:
        """Float32 words per query-key pair alive at the peak of building the kind's materialized bias (its heads
        included); None: the kind builds no bias. A bias kind overrides it; :meth:`bias_bytes` does the rest."""
        return None

    def bias_bytes(self, batch: int, num_queries: int, num_prefix: int, num_keys: int | None = None) -> int | None:
        """Estimated peak bytes of the ``(batch, heads, Nq, Nk)`` bias from its shape: :meth:`pair_words` per pair,
        plus its copy padded with the prefix tokens (key columns; query rows too unless decoding, ``num_keys``
        given). None: no bias."""
        words = self.pair_words()
        if words is None:
            return None
        keys = num_queries if num_keys is None else num_keys
        rows = num_queries + (num_prefix if num_keys is None else 0)
        padded = self.heads * rows * (keys + num_prefix) if num_prefix else 0
        return 4 * batch * (words * num_queries * keys + padded)

    def _cacheable(self) -> bool:
        # inference-mode tensors cannot be saved for a later backward: never cache them (nor serve them)
        if torch.compiler.is_compiling() or torch.is_inference_mode_enabled():
            return False
        return not any(p.requires_grad for p in self.parameters())

    def _apply(self, fn, *args, **kwargs):
        self.clear_cache()
        return super()._apply(fn, *args, **kwargs)

    def _load_from_state_dict(self, *args, **kwargs):
        super()._load_from_state_dict(*args, **kwargs)
        self.clear_cache()  # loaded buffers invalidate outputs cached for the old ones

    def extra_repr(self) -> str:
        """``dims, dim, heads`` and every option that was passed or holds a value other than its default.

        Derived from the kind's options (:meth:`option_defaults`), so no option can be left out of the repr: an option shows the
        attribute of its name (or of :attr:`repr_attributes`), which holds the value as the kind
        resolved it (e.g. per-axis tuples), else the value passed.
        """
        parts = [f"dims={self.dims}", f"dim={self.dim}", f"heads={self.heads}"]
        passed = self._init_kwargs
        for name, default in self.option_defaults().items():
            if name in ("dims", "dim", "heads"):
                continue
            held = getattr(self, self.repr_attributes.get(name, name), None)
            value = passed.get(name, default) if held is None or isinstance(held, Tensor) else held
            if value is None or (name not in passed and _equal(value, default)):
                continue
            parts.append(f"{name}={value!r}")
        return ", ".join(parts)


def _check_augment_coords(augment: nn.Module | None, mode: str) -> None:
    """Refuse an augmentation made for other coordinates than ``mode`` (its ``coords_modes``, when it declares them)."""
    modes = getattr(augment, "coords_modes", COORD_MODES)
    if mode not in modes:
        raise ValueError(f"{type(augment).__name__} is made for coords in {modes}, got coords={mode!r}: build the "
                         "encoding with one of them")


def _equal(a: Any, b: Any) -> bool:
    try:
        return bool(a == b)
    except (TypeError, ValueError, RuntimeError):
        return False

