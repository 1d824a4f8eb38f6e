"""Text datasets: the tagging tasks copy / reverse / addition, and a character LM on Python's stdlib.

Tagging layout (one output per position, solvable by a bidirectional encoder; ``causal=True``
gives the decoder-only layout of :class:`TagTask` instead)::

    copy     L=4:  tokens  3 1 4 1 | SEP | _ _ _ _        targets -100 x 5, then 3 1 4 1
    reverse  L=4:  tokens  3 1 4 1 | SEP | _ _ _ _        targets -100 x 5, then 1 4 1 3
    addition L=3:  tokens  a0 a1 a2 + b0 b1 b2 = _ _ _ _  targets -100 x 8, then s0 s1 s2 s3

``_`` is the blank token that marks an output slot. Numbers are written least significant
digit first, so output slot ``k`` needs digit ``k`` of both operands and the carry from
lower digits. Token ids: 0 blank, 1 separator (SEP / "="), 2 plus, ``3 + d`` for symbol
``d``; targets are the symbol ``d`` itself (``num_classes`` = 10 symbols). The output slot
for input ``i`` sits at a fixed relative offset (``L + 1``, or ``2L + 2`` for the first
operand) that grows with ``L``, so the same task at 2L and 4L tests length extrapolation.

``stdlib_lm``: the ``.py`` files of the running Python's standard library
(``sysconfig.get_paths()["stdlib"]``, skipping ``site-packages`` and test folders), in sorted
order, split by file (crc32 of the relative path: 90% train, 5% val, 5% test), concatenated
and encoded with a fixed 98-character vocabulary (``<unk>``, tab, newline, printable ASCII);
other bytes are ``<unk>``. The corpus depends on the Python version: record it with results.
"""
from __future__ import annotations

import functools
import os
import sysconfig
import zlib
from pathlib import Path

import numpy as np
import torch
from torch.utils.data import Dataset

from ._base import SyntheticDataset, check_min, check_split

BLANK, SEP, PLUS, NUM_SPECIAL, NUM_SYMBOLS = 0, 1, 2, 3, 10
IGNORE = -100


class TagTask(SyntheticDataset):
    """Base of the tagging tasks: items ``(tokens (T,), targets (T,))``, LongTensor.

    Subclasses draw one example, ``example(rng, n) -> (input tokens, output symbols)`` for ``n``
    symbols per operand; this class lays it out:

    - ``causal=False`` (bidirectional tagging): ``input SEP _ ... _`` with one blank per output,
      targets -100 on the input part and the output symbols on the blanks;
    - ``causal=True`` (decoder-only, as Kazemnejad et al. 2023): the sequence ``input SEP output``
      shifted by one, ``tokens = seq[:-1]``, ``targets[i] = seq[i + 1]`` on the output part (-100
      elsewhere). Teacher-forced, so a sequence is all right exactly when greedy decoding is
      (``seq_acc`` is the exact-match rate of generation). ``min_length`` draws the length
      uniformly from ``[min_length, length]`` per item (training "on lengths up to L") and pads
      the end with blanks (targets -100): a causal model never sees the padding of a shorter item.
    """

    domain, task = "text", "tag"
    order_blind_bag = False  # see train.floors: copy / reverse have an exact order-blind floor
    num_classes = NUM_SYMBOLS
    vocab_size = NUM_SPECIAL + NUM_SYMBOLS

    def __init__(self, split: str, *, seed: int = 0, length: int = 8, size: int | None = None, causal: bool = False,
                 min_length: int | None = None):
        super().__init__(split, seed=seed, size=size)
        check_min("length", length, 1)
        if not isinstance(causal, bool):
            raise TypeError(f"causal must be a bool, got {causal!r}")
        if min_length is not None:
            if not causal:
                raise ValueError("min_length (lengths varying per item) needs causal=True: a bidirectional model "
                                 "would attend to the padding")
            if not 1 <= min_length <= length:
                raise ValueError(f"min_length must be in [1, length={length}], got {min_length}")
        self.length, self.causal, self.min_length = int(length), causal, min_length
        inputs, outputs = self.example(np.random.default_rng(0), self.length)
        self.full_length = len(inputs) + len(outputs)  # causal items are padded to it (the length at n = length)

    def example(self, rng, n: int) -> tuple[np.ndarray, np.ndarray]:
        raise NotImplementedError

    def make(self, rng):
        n = self.length if self.min_length is None else int(rng.integers(self.min_length, self.length + 1))
        inputs, outputs = self.example(rng, n)
        if not self.causal:
            tokens = np.concatenate([inputs, [SEP], np.full(len(outputs), BLANK)])
            targets = np.concatenate([np.full(len(inputs) + 1, IGNORE), outputs])
        else:
            seq = np.concatenate([inputs, [SEP], outputs + NUM_SPECIAL])
            tokens = seq[:-1]
            targets = np.concatenate([np.full(len(inputs), IGNORE), outputs])
            tokens = np.concatenate([tokens, np.full(self.full_length - len(tokens), BLANK)])
            targets = np.concatenate([targets, np.full(self.full_length - len(targets), IGNORE)])
        return torch.from_numpy(tokens.astype(np.int64)), torch.from_numpy(targets.astype(np.int64))


class CopyTask(TagTask):
    """Copy ``L`` random symbols into the ``L`` blank slots after the separator. Sequence length ``2L + 1``
    (``2L`` with ``causal=True``).

    >>> tokens, targets = CopyTask("train", length=4)[0]
    >>> tokens.shape, (targets[5:] + 3 == tokens[:4]).all().item()
    (torch.Size([9]), True)
    >>> tokens, targets = CopyTask("train", length=4, causal=True)[0]   # predict the next token
    >>> tokens.shape, (targets[4:] + 3 == tokens[:4]).all().item(), (tokens[5:] == tokens[:3]).all().item()
    (torch.Size([8]), True, True)
    """

    name = "copy"
    order_blind_bag = True  # the output is a function of the bag of input symbols plus their order

    def output(self, symbols: np.ndarray) -> np.ndarray:
        return symbols

    def example(self, rng, n: int):
        symbols = rng.integers(0, NUM_SYMBOLS, n)  # (n,)
        return symbols + NUM_SPECIAL, self.output(symbols)


class ReverseTask(CopyTask):
    """Write the ``L`` symbols in reverse order into the blank slots. Sequence length ``2L + 1``.

    >>> tokens, targets = ReverseTask("train", length=4)[0]
    >>> (targets[5:] + 3 == tokens[:4].flip(0)).all().item()
    True
    """

    name = "reverse"

    def output(self, symbols: np.ndarray) -> np.ndarray:
        return symbols[::-1].copy()


class AdditionTask(TagTask):
    """Add two ``L``-digit numbers (least significant digit first); ``L + 1`` output slots. Length ``3L + 3``.

    ``place=True`` gives each token its place id beside its token id (items ``(T, 2)``: ``[..., 0]`` the token,
    ``[..., 1]`` the place): ``i + 1`` for the digit of ``10**i`` of an operand or of the result (an output slot, blank
    or written), 0 for ``+``, ``=`` and the padding. The text model hands them to its encoding as ``positions`` (every
    kind reads them; ``abacus`` and ``coupling`` are built for them). The tokens and targets are those of
    ``place=False``.

    >>> tokens, targets = AdditionTask("train", length=3)[0]
    >>> tokens.shape, (targets >= 0).sum().item()
    (torch.Size([12]), 4)
    >>> AdditionTask("train", length=3, causal=True, place=True)[0][0][:, 1].tolist()   # 3 + 1 + 3 + 1 + 3 tokens
    [1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3]
    """

    name = "addition"

    def __init__(self, split: str, *, seed: int = 0, length: int = 8, size: int | None = None, causal: bool = False,
                 min_length: int | None = None, place: bool = False):
        if not isinstance(place, bool):
            raise TypeError(f"place must be a bool, got {place!r}")
        self.place = place
        super().__init__(split, seed=seed, length=length, size=size, causal=causal, min_length=min_length)

    def make(self, rng):
        tokens, targets = super().make(rng)
        if not self.place:
            return tokens, targets
        n = int((tokens == PLUS).nonzero()[0])  # digits per operand (this item's length)
        digits = np.arange(1, n + 1)
        full = np.concatenate([digits, [0], digits, [0], digits, [n + 1]])  # a + b = s (s has n + 1 digits)
        full = full[: len(full) - int(self.causal)]  # causal: the result's last digit is only predicted
        place = np.zeros(len(tokens), dtype=np.int64)  # the padding after a shorter item: 0
        place[: len(full)] = full
        return torch.stack([tokens, torch.from_numpy(place)], -1), targets  # (T, 2)

    def example(self, rng, n: int):
        a, b = rng.integers(0, 10, (2, n))  # digits, least significant first
        place = 10 ** np.arange(n + 1, dtype=object)
        total = int((a * place[:-1]).sum() + (b * place[:-1]).sum())  # exact (object ints) at any length
        digits = np.array([(total // int(p)) % 10 for p in place], dtype=np.int64)
        return np.concatenate([a + NUM_SPECIAL, [PLUS], b + NUM_SPECIAL]), digits


# ---------------------------------------------------------------- stdlib character LM
CHARS = ["<unk>", "\t", "\n"] + [chr(c) for c in range(32, 127)]
_BYTE_TO_ID = np.zeros(256, dtype=np.uint8)  # every other byte -> <unk> (0)
_BYTE_TO_ID[[9, 10]] = [1, 2]
_BYTE_TO_ID[32:127] = np.arange(3, 98)
SKIP_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}


@functools.lru_cache(maxsize=4)
def stdlib_files(root: str | None = None) -> tuple[str, ...]:
    """Sorted relative paths of the ``.py`` files under ``root`` (default: the stdlib), skipping test/site dirs."""
    root = Path(root or sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        raise FileNotFoundError(f"stdlib_lm: source folder {root} does not exist; pass root= a folder of .py files")
    found = []
    for folder, subdirs, names in os.walk(root):
        subdirs[:] = [d for d in subdirs if d not in SKIP_DIRS]  # prune: never walk site-packages or tests
        found += [(Path(folder) / n).relative_to(root).as_posix() for n in names if n.endswith(".py")]
    return tuple(sorted(found))


def file_split(relpath: str) -> str:
    """Deterministic split of one file: crc32 % 20 == 0 -> test, == 1 -> val, else train."""
    bucket = zlib.crc32(relpath.encode()) % 20
    return "test" if bucket == 0 else "val" if bucket == 1 else "train"


def encode(text: bytes) -> np.ndarray:
    """Bytes -> uint8 token ids of :data:`CHARS` (non-ASCII and control bytes -> ``<unk>``)."""
    return _BYTE_TO_ID[np.frombuffer(text, dtype=np.uint8)]


def decode(ids) -> str:
    """Token ids -> text (``<unk>`` shown as U+FFFD)."""
    return "".join("\ufffd" if int(i) == 0 else CHARS[int(i)] for i in ids)


@functools.lru_cache(maxsize=6)
def load_corpus(root: str | None, split: str) -> np.ndarray:
    """All files of ``split`` concatenated in sorted order, as uint8 ids ``(num_chars,)``."""
    base = Path(root or sysconfig.get_paths()["stdlib"])
    parts = [encode((base / f).read_bytes()) for f in stdlib_files(str(base)) if file_split(f) == split]
    if not parts:
        raise ValueError(f"stdlib_lm: no .py files of split {split!r} under {base}")
    return np.concatenate(parts)


class StdlibLM(Dataset):
    """Next-character prediction on the stdlib sources: items ``(x (C,), y (C,))`` LongTensor, ``y[t] = x[t+1]``.

    Windows of ``context`` characters at stride ``context``; the first window starts at an offset
    drawn from ``seed`` (so seeds see different cuts of the same text: seeds below the stride, and seeds of one block
    of ``stride`` consecutive seeds, get distinct offsets). With ``score_last=S`` the
    windows step by ``S`` instead (the offset drawn below ``S``) and only their last ``S`` targets are
    scored (the others are -100);
    ``align=A`` (>= context) places the scored blocks where a window of ``A`` characters would put
    them, so every context ``C <= A`` scores *the same characters* (item ``i`` at any ``C``), and a
    longer context only adds history (the sliding-window evaluation of Press et al. 2022).

    >>> x, y = StdlibLM("val", context=16)[0]
    >>> x.shape, bool((x[1:] == y[:-1]).all())
    (torch.Size([16]), True)
    >>> a, b = StdlibLM("val", context=16, score_last=4, align=64), StdlibLM("val", context=64, score_last=4, align=64)
    >>> len(a) == len(b), bool((a[3][1][-4:] == b[3][1][-4:]).all()), int((a[3][1] >= 0).sum())
    (True, True, 4)
    """

    name, domain, task = "stdlib_lm", "text", "lm"
    vocab_size = num_classes = len(CHARS)

    def __init__(self, split: str, *, seed: int = 0, context: int = 128, root: str | None = None,
                 score_last: int | None = None, align: int | None = None):
        self.split, self.seed, self.context = check_split(split), int(seed), int(context)
        check_min("context", self.context, 1)
        if score_last is not None:
            check_min("score_last", score_last, 1)
            if score_last > self.context:
                raise ValueError(f"score_last={score_last} must be <= context={context}")
        if align is not None:
            if score_last is None:
                raise ValueError("align places the scored blocks of score_last: pass score_last too")
            if align < self.context:
                raise ValueError(f"align={align} must be >= context={context} (the longest context it aligns)")
        self.score_last, self.align = score_last, align
        self.corpus = load_corpus(None if root is None else str(root), split)
        self.stride = score_last or self.context
        block, index = divmod(self.seed, self.stride)  # seeds 0..stride-1 (and each later block): distinct offsets
        self.offset = int(np.random.default_rng([zlib.crc32(b"stdlib_lm"), block]).permutation(self.stride)[index])
        self.first_end = self.offset + (align or self.context)  # end (exclusive) of item 0's input window
        self.size = (len(self.corpus) - 1 - self.first_end) // self.stride + 1
        if self.size < 1:
            raise ValueError(f"stdlib_lm {split}: corpus of {len(self.corpus)} chars is shorter than context={context}")

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, index: int):
        if not 0 <= index < self.size:
            raise IndexError(f"index {index} out of range for stdlib_lm {self.split} of size {self.size}")
        end = self.first_end + index * self.stride
        chunk = torch.from_numpy(self.corpus[end - self.context : end + 1].astype(np.int64))
        x, y = chunk[:-1], chunk[1:].clone()
        if self.score_last is not None:
            y[: self.context - self.score_last] = IGNORE
        return x, y
