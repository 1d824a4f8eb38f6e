"""Argument validation shared by every kind and API function: one validator per rule.

Each raises ``TypeError`` for a value of the wrong type and ``ValueError`` for one out of range,
with a one-line message that names the argument and repeats the bad value.

>>> check_number(2, "theta", low=1.0, inclusive=False)
2.0
>>> per_axis(3, 2, "scale", low=1.0)
(3.0, 3.0)
>>> check_bool("no", "with_r")
Traceback (most recent call last):
...
TypeError: with_r must be a bool (True or False), got 'no'
"""
from __future__ import annotations

import math
from typing import Sequence

import torch


def shown(value) -> str:
    """``repr(value)`` on one line, for an error message: a tensor of up to 8 elements as its values, a larger one
    as its shape and dtype (a tensor's repr spans lines).

    >>> shown(torch.ones(2, 1)), shown(torch.zeros(3, 4)), shown([0.5, "a"])
    ('tensor([[1.], [1.]])', 'a tensor of shape (3, 4) (torch.float32)', "[0.5, 'a']")
    """
    if isinstance(value, torch.Tensor) and value.numel() > 8:
        return f"a tensor of shape {tuple(value.shape)} ({value.dtype})"
    text = repr(value)
    return " ".join(text.split()) if "\n" in text else text


def is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def check_bool(value, name: str) -> bool:
    """``value`` must be a real ``bool`` (a string such as ``"no"`` is not one)."""
    if not isinstance(value, bool):
        raise TypeError(f"{name} must be a bool (True or False), got {shown(value)}")
    return value


def check_int(value, name: str, *, low: int | None = None) -> int:
    """An ``int`` (not a bool, not a float such as ``2.0``), ``>= low`` when given."""
    what = "an int" if low is None else "a positive int" if low == 1 else f"an int >= {low}"
    if not is_int(value):
        raise TypeError(f"{name} must be {what}, got {shown(value)} ({type(value).__name__})")
    if low is not None and value < low:
        raise ValueError(f"{name} must be {what}, got {value!r}")
    return value


def check_cat_dim(cat_dim, dim: int, kind: str) -> int:
    """A table's ``cat_dim``: 0 (the table is added to the tokens) or the channels it concatenates to tokens of
    ``dim - cat_dim`` channels, below ``dim``."""
    check_int(cat_dim, "cat_dim", low=0)
    if cat_dim >= dim:
        raise ValueError(f"{kind} cat_dim={cat_dim} concatenates that many channels to tokens of dim - cat_dim: it "
                         f"must be below dim={dim} (0 adds the table instead)")
    return cat_dim


def check_heads(dim, heads) -> int:
    """``dim`` and ``heads`` positive ints, ``dim`` split evenly across the heads; returns ``head_dim``."""
    check_int(dim, "dim", low=1)
    check_int(heads, "heads", low=1)
    if dim % heads:
        raise ValueError(f"dim={dim} is not divisible by heads={heads}")
    return dim // heads


def check_dims(dims, kind: str, supported: tuple[int, ...]) -> int:
    """``dims`` must be an int (not ``2.0``) among the kind's supported positional dims."""
    if isinstance(dims, bool) or not isinstance(dims, int):
        raise TypeError(f"dims must be an int (1, 2 or 3), got {shown(dims)} ({type(dims).__name__})")
    if dims not in supported:
        raise ValueError(f"kind {kind!r} supports dims {supported}, got dims={dims!r}")
    return dims


def _range_text(low, inclusive: bool, high) -> str:
    parts = []
    if low is not None:
        parts.append(f"{'>=' if inclusive else '>'} {low}")
    if high is not None:
        parts.append(f"<= {high}")
    return " and ".join(parts)


def _out_of_range(v, low, inclusive: bool, high) -> bool:
    return ((low is not None and (v < low or (not inclusive and v == low))) or (high is not None and v > high))


def _range_error(value, name: str, low, inclusive: bool, high, what: str | None, finite: bool) -> ValueError:
    cond = what or _range_text(low, inclusive, high)
    if not finite and what is None:
        cond = "finite" + (f" and {cond}" if cond else "")
    return ValueError(f"{name} must be {cond}, got {value!r}")


def check_number(value, name: str, *, low: float | None = None, inclusive: bool = True,
                 high: float | None = None, what: str | None = None, dtype: torch.dtype | None = None) -> float:
    """A finite real number (int or float, not a bool) in ``[low, high]`` (``(low, high]`` when not
    ``inclusive``); returned as float. ``what`` replaces the condition in the message. With ``dtype`` (the dtype
    the value is used in, such as a float32 parameter) the checks apply to the value cast to it, so ``1e39``
    (inf in float32) and a positive ``1e-50`` (0 in float32) are refused too."""
    if not is_number(value):
        raise TypeError(f"{name} must be a number, got {shown(value)} ({type(value).__name__})")
    if not math.isfinite(value) or _out_of_range(value, low, inclusive, high):
        raise _range_error(value, name, low, inclusive, high, what, math.isfinite(value))
    if dtype is not None:
        cast = float(torch.tensor(float(value), dtype=torch.float64).to(dtype))
        if not math.isfinite(cast) or _out_of_range(cast, low, inclusive, high) or (cast == 0) != (value == 0):
            info = torch.finfo(dtype)
            raise ValueError(f"{name} must be representable in {dtype} (magnitude {info.smallest_normal:.3g} to "
                             f"{info.max:.3g}), got {value!r}, which is {cast!r} there")
    return float(value)


def per_axis(value, dims: int, name: str, *, low: float | None = None, inclusive: bool = True,
             integer: bool = False, what: str | None = None) -> tuple:
    """A number or a tuple/list of ``dims`` numbers (one per axis), each checked as :func:`check_number`
    (or as an int with ``integer=True``). Floats come back as floats, ints as ints."""
    values = tuple(value) if isinstance(value, (tuple, list)) else (value,) * dims
    kind = "int" if integer else "number"
    if len(values) != dims:
        raise ValueError(f"{name} must be a{'n' if integer else ''} {kind} or a tuple of {dims} {kind}s "
                         f"(one per axis), got {shown(value)}")
    for v in values:
        if not (is_int(v) if integer else is_number(v)):
            raise TypeError(f"{name} must hold {kind}s, got {shown(value)}")
    finite = all(math.isfinite(v) for v in values)
    if not finite or any(_out_of_range(v, low, inclusive, None) for v in values):
        err = _range_error(value, name, low, inclusive, None, what, finite)
        raise ValueError(str(err).replace(", got", " on every axis, got", 1) if dims > 1 else str(err))
    return values if integer else tuple(float(v) for v in values)


PAIRINGS = ("half", "interleaved")  # RoPE channel pairings: (x[i], x[i + r/2]) or (x[2i], x[2i+1])


def check_pairing(pairing) -> str:
    """A RoPE channel pairing, ``"half"`` or ``"interleaved"`` (the one check of every rotary path)."""
    return check_choice(pairing, "pairing", PAIRINGS)


def check_choice(value, name: str, choices: Sequence[str]) -> str:
    """One of the strings ``choices`` (any other value, hashable or not, is refused the same way)."""
    if not isinstance(value, str) or value not in choices:
        raise ValueError(f"{name} must be one of {tuple(choices)}, got {shown(value)}")
    return value


def check_float_dtype(dtype, name: str = "dtype") -> torch.dtype | None:
    """``None`` or a floating ``torch.dtype`` (float32, float16, bfloat16, float64, ...).

    Encodings are real values: an integer or bool cast truncates cos/sin to 0 and turns a bias into a
    boolean mask that means "attend" instead of "add", so those are refused.
    """
    if dtype is None:
        return None
    if not isinstance(dtype, torch.dtype):
        raise TypeError(f"{name} must be a torch.dtype such as torch.float32, got {shown(dtype)}")
    if not dtype.is_floating_point:
        raise ValueError(f"{name} must be a floating dtype (float32, float16, bfloat16, float64), got {dtype}")
    return dtype


def check_devices(where: str, **named: torch.Tensor | torch.device) -> None:
    """Tensors (or devices) that meet in ``where`` must be on one device; the error names each one's.

    >>> check_devices("attention", q=torch.zeros(1), k=torch.zeros(1, device="meta"))
    Traceback (most recent call last):
    ...
    ValueError: attention needs one device, got q on cpu, k on meta: move them to one device (.to(device))
    """
    devices = {name: v if isinstance(v, torch.device) else v.device for name, v in named.items()}
    if len(set(devices.values())) > 1:
        listed = ", ".join(f"{name} on {device}" for name, device in devices.items())
        raise ValueError(f"{where} needs one device, got {listed}: move them to one device (.to(device))")


def check_dtypes(where: str, **named: torch.Tensor) -> None:
    """Tensors that meet in ``where`` must have one dtype; the error names the first one of each dtype met.

    >>> check_dtypes("pack() add", sample_0=torch.zeros(1), sample_1=torch.zeros(1, dtype=torch.bfloat16))
    Traceback (most recent call last):
    ...
    ValueError: pack() add needs one dtype, got torch.float32 (sample_0), torch.bfloat16 (sample_1): convert them to one (.to(dtype))
    """
    first: dict[torch.dtype, str] = {}
    for name, t in named.items():
        first.setdefault(t.dtype, name)
    if len(first) > 1:
        listed = ", ".join(f"{dtype} ({name})" for dtype, name in first.items())
        raise ValueError(f"{where} needs one dtype, got {listed}: convert them to one (.to(dtype))")


def check_float_tensor(x, name: str) -> None:
    """``x`` must be a tensor of a floating dtype (tokens, queries, keys)."""
    if not isinstance(x, torch.Tensor):
        raise TypeError(f"{name} must be a tensor, got {type(x).__name__}")
    if not x.dtype.is_floating_point:
        raise ValueError(f"{name} must have a floating dtype, got {x.dtype}")
