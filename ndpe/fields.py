"""What a :class:`~ndpe.PosOut` field is: its :class:`Field` declaration, and the two function-valued kinds of field.

``PosOut`` declares each of its fields once, with ``dataclasses.field(metadata={"ndpe": Field(...)})`` (see
:func:`declare`); every operation on a ``PosOut`` (prefix padding, dtype, pytree, the cache's version check,
:func:`ndpe.merge`, :func:`ndpe.pack`, :func:`ndpe.stack`) reads those declarations, so a new way of acting is one
declaration in a ``PosOut`` subclass and nothing else (``tests/test_contract_fields.py`` adds one).

A field is one of these roles (``T`` tokens, leading ``*`` broadcast to what :attr:`Field.lead` names):

========== ====================================== ===========================================================
role       value                                  example
========== ====================================== ===========================================================
``token``  ``(*, T, C)`` per token                ``add``, ``cat``, ``rot`` (``(cos, sin)``), ``frame``
``pair``   ``(*, Tq, Tk)`` per query-key pair     ``bias``
``whole``  ``(*, ...)``, no token axis            ``basis`` (one change of basis for every token)
``term``   a function of attention's tensors      ``logits`` (:class:`LogitsTerm`), ``tokens`` (:class:`TokenTerm`)
``meta``   a Python value                         ``pairing``, ``num_prefix``, ``past``
========== ====================================== ===========================================================
"""
from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Any, Callable, TypeVar

import torch
import torch.nn.functional as F
import torch.utils._pytree as pytree
from einops import rearrange
from torch import Tensor

from .checks import check_float_tensor
from .layout import check_leading

_T = TypeVar("_T")

ROLES = ("token", "pair", "whole", "term", "meta")
STAGES = ("tokens", "qk", "probs", "qkvo")  # where a field with an act of its own acts (Field.stage)
TENSOR_ROLES = ("token", "pair", "whole")
MERGES = ("sum", "concat", "one", "same", "rot")


@dataclass(frozen=True)
class Field:
    """How one ``PosOut`` field behaves.

    role: one of :data:`ROLES` (the table in the module doc).
    lead: what the tensor's leading dims broadcast to, innermost last: ``("batch",)`` for what is added to the
        tokens ``(B, T, C)``, ``("batch", "heads")`` for what meets ``(B, heads, T, head_dim)``.
    identity: the value of a token that the field leaves alone (prefix tokens, padding); one per component for a
        tuple value (``rot``: ``(1.0, 0.0)``, cos and sin).
    merge: how :func:`ndpe.merge` combines encodings that have it: ``"sum"`` (broadcast sum), ``"concat"`` (along the
        channels), ``"one"`` (at most one of them), ``"same"`` (equal in all), ``"rot"`` (taken with the rotation,
        from the one encoding that rotates).
    refusal: the error :func:`ndpe.merge` raises for a ``"one"`` or ``"same"`` field (``{values}``: the values met).
    off_block: a pair field in :func:`ndpe.pack`: its value between two samples; a field with one (``bias``:
        ``-inf``) is the mask that keeps packed samples apart, so it is built even where no sample has it.
    per_sample: a meta field describing one sample's layout (``num_prefix``, ``past``): packing or stacking
        samples resets it to its default.
    keys: a token field that covers the keys where they differ from the queries (``rot_k``: a decoder whose cache
        holds unrotated keys rotates all of them).
    acts: how a kind with this field acts, as the kinds table (docs/reference.md) says (:data:`ndpe.catalog.ACTS`).
    stage, act: a field no apply function of ndpe knows acts through ``act``: ``stage="tokens"`` calls
        ``act(x, value) -> x`` in :func:`ndpe.apply_tokens` (after ``add`` and ``cat``), ``stage="qk"`` calls
        ``act(q, k, value) -> (q, k)`` in :func:`ndpe.apply_qk` (after the rotation), ``stage="probs"`` calls
        ``act(probs, value) -> probs`` on the attention probabilities ``(B, heads, Tq, Tk)`` after the softmax, before
        they weigh v (:func:`ndpe.attend`: attention with such a field leaves fused SDPA for the explicit
        softmax; ``prob_bias``, eRPE). ``stage="qkvo"``: a per-token map of every head's channels, as GTA and PRoPE
        apply one: ``act(t, value, which) -> t`` is called on q and k in :func:`ndpe.apply_qk` (``which`` ``"q"`` /
        ``"k"``, after the rotation), on the values before attention (``"v"``, :func:`ndpe.apply_v`) and on
        attention's output per query token (``"out"``, :func:`ndpe.apply_out`); a field acting on v and the output
        alone returns q and k as they are.
    """

    role: str
    lead: tuple[str, ...] = ()
    identity: float | tuple[float, ...] = 0.0
    merge: str = "one"
    refusal: str = ""
    off_block: float | None = None
    per_sample: bool = False
    keys: bool = False
    acts: str = ""
    stage: str = ""
    act: Callable[..., Any] | None = None

    def __post_init__(self) -> None:
        if self.role not in ROLES or self.merge not in MERGES:
            raise ValueError(f"Field role must be one of {ROLES} and merge one of {MERGES}, got {self.role!r}, "
                             f"{self.merge!r}")
        if (self.act is None) != (self.stage == "") or self.stage not in ("", *STAGES):
            raise ValueError(f"Field act needs a stage of {STAGES} (and a stage needs an act), got {self.stage!r}")

    @property
    def is_tensor(self) -> bool:
        return self.role in TENSOR_ROLES

    def identities(self, value: Any) -> tuple[float, ...]:
        """One identity value per component of ``value`` (a tensor, or a tuple of them)."""
        ids = self.identity if isinstance(self.identity, tuple) else (self.identity,)
        return ids if isinstance(value, tuple) else ids[:1]

    def check(self, name: str, value: Any) -> None:
        """Refuse a value of this tensor field (``PosOut.<name>``) that is not floating tensors (a tuple of them where
        its identity is one) of at least its rank, every component covering the same tokens and channels."""
        ids = self.identity if isinstance(self.identity, tuple) else None
        ts = parts(value)
        what = f"a tuple of {len(ids)} tensors" if ids else "a tensor"
        if (isinstance(value, tuple) != bool(ids) or len(ts) != len(ids or (0,))
                or not all(isinstance(t, Tensor) for t in ts)):
            raise TypeError(f"PosOut.{name} must be {what}, got {type(value).__name__}")
        rank = 1 if self.role == "whole" else 2
        for t in ts:
            if not t.is_floating_point() or t.dim() < rank:
                raise ValueError(f"PosOut.{name} must be floating with at least {rank} dims, got {t.dtype} "
                                 f"{tuple(t.shape)}")
        if any(t.shape[-2:] != ts[0].shape[-2:] for t in ts[1:]):
            raise ValueError(f"PosOut.{name}'s tensors must cover the same tokens and channels, got "
                             f"{[tuple(t.shape) for t in ts]}")


def declare(spec: Field, default: Any = None) -> Any:
    """A dataclass field of ``PosOut`` (or a subclass) carrying its :class:`Field` declaration."""
    return field(default=default, metadata={"ndpe": spec})


def declared(cls: type, inherited: tuple[tuple[str, Field, Any], ...] = ()) -> None:
    """Record on ``cls`` (a ``PosOut`` class, before or after ``@dataclass`` made it one) its fields' declarations:
    ``inherited`` (its base's) then those of its own body, for :func:`specs` and :func:`acting`."""
    own, names = [], {n for n, _, _ in inherited}
    # after @dataclass its fields (the base's too), before it declare()'s fields, not yet turned into defaults
    processed = "__dataclass_fields__" in vars(cls)
    for name, value in (cls.__dataclass_fields__ if processed else vars(cls)).items():  # type: ignore[attr-defined]
        if not isinstance(value, dataclasses.Field) or (processed and name in names):
            continue
        if "ndpe" not in value.metadata or name in names:
            raise TypeError(f"{cls.__name__}.{name}: declare each new PosOut field once, with "
                            "ndpe.fields.declare(Field(...))")
        own.append((name, value.metadata["ndpe"], value.default))
    cls._ndpe_specs = table = inherited + tuple(own)  # type: ignore[attr-defined]
    cls._ndpe_acting = {stage: tuple((name, spec.act) for name, spec, _ in table  # type: ignore[attr-defined]
                                     if spec.stage == stage and spec.act is not None) for stage in STAGES}


def specs(cls: type) -> tuple[tuple[str, Field, Any], ...]:
    """``(name, Field, default)`` of every field of the ``PosOut`` class ``cls``, in declaration order."""
    return cls._ndpe_specs  # type: ignore[attr-defined]


def acting(cls: type, stage: str) -> tuple[tuple[str, Callable[..., Any]], ...]:
    """``(name, act)`` of the fields of ``cls`` that act at ``stage`` through their declared ``act``."""
    return cls._ndpe_acting[stage]  # type: ignore[attr-defined]


def derive(cls: type[_T], values: dict[str, Any]) -> _T:
    """A ``PosOut`` of class ``cls`` (or a subclass) made from checked ones by an operation of ndpe (valid by construction, so not
    checked again); fields left out of ``values`` take their defaults."""
    out = object.__new__(cls)
    for name, _, default in specs(cls):
        object.__setattr__(out, name, values.get(name, default))
    return out


def register_pytree(cls: type, serialized_name: str) -> None:
    """Make ``cls`` (a ``PosOut`` class) a pytree node, so it crosses torch.compile / torch.export boundaries: the tensor fields are its
    children, the rest (the functions of content-dependent kinds travel there, as code does) its context."""
    def names(tensor: bool) -> list[str]:
        return [name for name, spec, _ in specs(cls) if spec.is_tensor == tensor]

    def flatten(out):
        return [getattr(out, n) for n in names(True)], tuple(getattr(out, n) for n in names(False))

    def unflatten(children, context):
        values = {n: tuple(v) if isinstance(v, list) else v for n, v in zip(names(True), children)}
        return derive(cls, {**values, **dict(zip(names(False), context))})

    pytree.register_pytree_node(cls, flatten, unflatten, serialized_type_name=serialized_name,
                                flatten_with_keys_fn=lambda o: ([(pytree.GetAttrKey(n), getattr(o, n))
                                                                 for n in names(True)], flatten(o)[1]))


def parts(value: Any) -> tuple[Tensor, ...]:
    """The tensors of a tensor field's value: none, itself, or its components."""
    return () if value is None else tuple(value) if isinstance(value, tuple) else (value,)


def each(spec: Field, value: Any, fn: Callable[[Tensor, float], Tensor]) -> Any:
    """``fn(tensor, identity)`` on each component of a tensor field's value (the same structure back)."""
    if value is None:
        return None
    out = tuple(fn(t, i) for t, i in zip(parts(value), spec.identities(value)))
    return out if isinstance(value, tuple) else out[0]


@dataclass(frozen=True)
class LogitsTerm:
    """A term of the attention logits computed from queries and keys (content-dependent kinds).

    ``fn(q, k)`` takes the grid tokens' queries ``(B, heads, Nq, head_dim)`` and keys ``(B, heads, Nk, head_dim)``
    as attention sees them (after :func:`apply_qk`) and returns the float32 term ``(B | 1, heads, Nq, Nk)`` that
    is added to SDPA's logits ``q.k / sqrt(head_dim)``. Calling the term with all tokens pads the prefix rows
    (``q_prefix``) and columns (``k_prefix``) with zeros, as for a bias. ``causal_only``: the term is defined
    for causal attention only (CoPE's gates count keys up to the query).

    ``uses_states``: the term also reads the token states ``x`` ``(B, T, C)``, what the attention layer
    receives (data-dependent ALiBi's forget gates); ``fn(q, k, x)`` then gets the grid tokens' states.
    ``ndpe.Attention`` passes them; a caller of :func:`attn_bias` passes ``x=``.
    """

    fn: Callable[..., Tensor]
    causal_only: bool = False
    q_prefix: int = 0
    k_prefix: int = 0
    uses_states: bool = False

    def __call__(self, q: Tensor, k: Tensor, x: Tensor | None = None) -> Tensor:
        check_float_tensor(q, "q")
        check_float_tensor(k, "k")
        pq, pk = self.q_prefix, self.k_prefix
        if not self.uses_states:
            term = self.fn(q[..., pq:, :], k[..., pk:, :])
        else:
            if x is None:
                raise ValueError("this encoding's logits read the token states: pass x= (B, T, C), the tokens the "
                                 "attention layer receives (ndpe.Attention does)")
            check_float_tensor(x, "x")
            term = self.fn(q[..., pq:, :], k[..., pk:, :], x[..., pq:, :])
        return F.pad(term, (pk, 0, pq, 0)) if pq or pk else term

    def with_prefix(self, q_prefix: int, k_prefix: int) -> "LogitsTerm":
        """The term over ``q_prefix`` / ``k_prefix`` leading queries / keys more (their rows and columns 0)."""
        return LogitsTerm(self.fn, self.causal_only, q_prefix, k_prefix, self.uses_states)

    @staticmethod
    def pack(terms: list["LogitsTerm"], sizes: list[int]) -> "LogitsTerm":
        """Samples packed into one sequence: each sample's term on its diagonal block, 0 elsewhere."""
        return LogitsTerm(functools.partial(_packed_logits, terms, sizes),
                          causal_only=any(t.causal_only for t in terms), uses_states=any(t.uses_states for t in terms))

    @staticmethod
    def stack(terms: list["LogitsTerm"], sizes: list[int], length: int) -> "LogitsTerm":
        """Samples stacked along the batch, each padded to ``length`` tokens: its term, 0 on the padding."""
        return LogitsTerm(functools.partial(_stacked_logits, terms, sizes, length),
                          causal_only=any(t.causal_only for t in terms), uses_states=any(t.uses_states for t in terms))


def _packed_logits(terms: list[LogitsTerm], sizes: list[int], q: Tensor, k: Tensor, x: Tensor | None = None) -> Tensor:
    """Each sample's logits term on its block, 0 elsewhere (the packed bias masks those)."""
    out = q.new_zeros(*torch.broadcast_shapes(q.shape[:-2], k.shape[:-2]), q.shape[-2], k.shape[-2], dtype=torch.float32)
    start = 0
    for term, n in zip(terms, sizes):
        states = None if x is None else x[..., start:start + n, :]
        block = term(q[..., start:start + n, :], k[..., start:start + n, :], states)
        out[..., start:start + n, start:start + n] = block
        start += n
    return out


def _stacked_logits(terms: list[LogitsTerm], sizes: list[int], length: int, q: Tensor, k: Tensor,
                    x: Tensor | None = None) -> Tensor:
    """Sample ``b``'s term on its first ``sizes[b]`` queries and keys, 0 on its padding."""
    return torch.cat([F.pad(term(q[b:b + 1, :, :n], k[b:b + 1, :, :n], None if x is None else x[b:b + 1, :n]),
                            (0, length - n, 0, length - n)) for b, (term, n) in enumerate(zip(terms, sizes))])


@dataclass(frozen=True)
class TokenTerm:
    """A function of the token embeddings (kinds that transform tokens rather than add to them).

    ``fn(x)`` maps the grid tokens ``(B, N, C)`` to ``(B, N, C)``; the ``num_prefix`` leading tokens pass through.
    """

    fn: Callable[[Tensor], Tensor]
    num_prefix: int = 0

    def __call__(self, x: Tensor) -> Tensor:
        p = self.num_prefix
        return torch.cat([x[..., :p, :], self.fn(x[..., p:, :])], dim=-2) if p else self.fn(x)

    def with_prefix(self, q_prefix: int, k_prefix: int) -> "TokenTerm":
        """The term over ``q_prefix`` leading tokens more, passed through."""
        return TokenTerm(self.fn, q_prefix)

    @staticmethod
    def pack(terms: list["TokenTerm"], sizes: list[int]) -> "TokenTerm":
        """Samples packed into one sequence: each sample's term on its tokens."""
        return TokenTerm(functools.partial(_packed_tokens, terms, sizes))

    @staticmethod
    def stack(terms: list["TokenTerm"], sizes: list[int], length: int) -> "TokenTerm":
        """Samples stacked along the batch: sample ``b``'s term on its first ``sizes[b]`` tokens, padding passed."""
        return TokenTerm(functools.partial(_stacked_tokens, terms, sizes))


def _packed_tokens(terms: list[TokenTerm], sizes: list[int], x: Tensor) -> Tensor:
    return torch.cat([term(part) for term, part in zip(terms, x.split(sizes, dim=-2))], dim=-2)


def _stacked_tokens(terms: list[TokenTerm], sizes: list[int], x: Tensor) -> Tensor:
    return torch.cat([torch.cat([term(x[b:b + 1, :n]), x[b:b + 1, n:]], 1)
                      for b, (term, n) in enumerate(zip(terms, sizes))])


def transform_frame(t: Tensor, frame: tuple[Tensor, Tensor], which: str) -> Tensor:
    """The act of :class:`~ndpe.PosOut`'s ``frame`` (``stage="qkvo"``): each token's 4 x 4 matrices ``D`` on its
    channels in blocks of 4, ``D^T`` for q, ``D^-1`` for k and v, ``D`` for the attention output, so that
    ``q_i . k_j`` sees ``D_i D_j^-1`` and the output is ``D_i sum_j a_ij D_j^-1 v_j`` (GTA's form).

    ``t``: ``(B, heads, T, head_dim)``; ``frame``: ``(D - I, D^-1 - I)``, each ``(*, T, 16 n)``, the ``n`` matrices of
    the first ``4 n`` channels of a token, row-major (stored minus the identity, so a prefix token's 0 leaves it
    alone); the channels past ``4 n`` pass through.
    """
    delta = frame[1] if which in ("k", "v") else frame[0]
    n = delta.shape[-1] // 16
    if 4 * n > t.shape[-1]:
        raise ValueError(f"the encoding's frame covers {4 * n} channels but the attention has head_dim {t.shape[-1]}; "
                         "build it with the attention's dim and heads")
    blocks = rearrange(t[..., :4 * n], "... (n j) -> ... n j", j=4)
    mats = rearrange(delta.to(t.dtype), "... (n i j) -> ... n i j", i=4, j=4)
    pattern = "...nji,...nj->...ni" if which == "q" else "...nij,...nj->...ni"  # q: D^T
    out = rearrange(blocks + torch.einsum(pattern, mats, blocks), "... n i -> ... (n i)")
    return out if 4 * n == t.shape[-1] else torch.cat([out, t[..., 4 * n:]], dim=-1)


def add_after_softmax(probs: Tensor, prob_bias: Tensor) -> Tensor:
    """``probs + prob_bias``: the attention probabilities ``(B, heads, Tq, Tk)`` with an encoding's term added after the
    softmax (eRPE, Foumani et al. 2023: ConvTran's ``attn = softmax(q.k) + relative_bias``); ``prob_bias``
    ``(*, Tq, Tk)``, ``*`` broadcast to ``(B, heads)``. The act of ``PosOut.prob_bias`` (stage ``"probs"``)."""
    if prob_bias.shape[-2:] != probs.shape[-2:]:
        raise ValueError(f"tokens have length {probs.shape[-2]} (keys {probs.shape[-1]}) but the encoding's prob_bias "
                         f"covers {tuple(prob_bias.shape[-2:])} (grid + prefix; with a KV cache build it with past=)")
    check_leading(prob_bias.shape[:-2], probs, "prob_bias")
    return probs + prob_bias.to(probs.dtype)
