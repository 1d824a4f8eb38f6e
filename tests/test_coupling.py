"""coupling: pinned to the reference's coupled position ids (ported), digits of equal significance sharing a row, the
random start per sequence in training (1 in eval), errors."""
from __future__ import annotations

import pytest
import torch

import ndpe
from ndpe.kinds.coupling import coupled_ids
from tests.conftest import raises_one_line
from train.data.text import NUM_SPECIAL, PLUS, AdditionTask


def reference_positions(a: str, b: str, labels: str, start: int) -> tuple[list[int], list[int]]:
    """The coupled ids of ``AdditionDatasetWithCoupledPositions.__getitem__`` (the default, neither cyclic nor
    vanilla, with ``reverse_output=True``), ported from github.com/HanseulJo/position-coupling ``src/data/addition.py``
    (commit 01dd272) with its random ``start`` passed in. ``a``, ``b``, ``labels``: digits most significant first
    (zero-padded, ``padding=True``); returns the ids of ``a + b =`` (the last one is "=") and of the reversed result."""
    max_len = max(len(a), len(b))
    end = start + max_len + 1
    input_positions = list(range(end - len(a), end + 1)) + list(range(end - len(b), end + 1))
    label_positions = list(range(end - len(labels), end))
    return input_positions, label_positions[::-1]  # reverse_output: the labels and their positions reversed


def reference_positions_up(a: str, b: str, labels: str, start: int) -> tuple[list[int], list[int]]:
    """The coupled ids of the reference's current ``AdditionDatasetWithCoupledPositions.__getitem__`` (the mirrored
    convention, "least significant digit has least position ID"), ported from ``src/data/addition.py`` at commit
    b9cad94 (2025-04-18; so since e35e9de, 2024-10-16) with ``reverse_input=False, reverse_output=True`` and its random
    ``start`` passed in; the arguments as in :func:`reference_positions`. Returns the ids of ``a + b`` and of
    ``=`` then the reversed result (its ``label_positions``)."""
    a_positions = list(range(start + 1, start + 1 + len(a)))[::-1]  # not reverse_input
    b_positions = list(range(start + 1, start + 1 + len(b)))[::-1]
    input_positions = a_positions + [start] + b_positions  # plus_position = start
    return input_positions, [start] + list(range(start + 1, start + 1 + len(labels)))  # eq_position = start


def full_sequence(n: int, start: int, convention: str) -> tuple[torch.Tensor, list[int]]:
    """The place ids of ``a + b = result`` with ``n``-digit operands (zero-padded, the reference's ``padding=True``)
    and the whole ``n + 1``-digit result, all reversed as ndpe writes numbers (e.g. "99+99=891"), and the reference's
    ids for them in ``convention``."""
    place = torch.tensor([*range(1, n + 1), 0, *range(1, n + 1), 0, *range(1, n + 2)])
    a = b = "9" * n  # the ids depend on the lengths only
    labels = f"{int(a) + int(b):0{n + 1}d}"
    if convention == "down":
        inputs, result = reference_positions(a, b, labels, start)  # inputs end with "="; result reversed
        return place, inputs[:n][::-1] + [inputs[n]] + inputs[n + 1:2 * n + 1][::-1] + [inputs[-1]] + result
    inputs, result = reference_positions_up(a, b, labels, start)
    return place, inputs[:n][::-1] + [inputs[n]] + inputs[n + 1:][::-1] + result


def reference_ids(tokens: torch.Tensor, start: int) -> list[int]:
    """The reference's ids for one of ndpe's decoder-only addition items (numbers least significant digit first:
    the reference's ``revall`` layout, each digit keeping its id), over the tokens before the padding."""
    n = int((tokens == PLUS).nonzero()[0])
    digits = (tokens - NUM_SPECIAL).tolist()
    a, b = digits[:n], digits[n + 1: 2 * n + 1]
    total = sum(d * 10 ** i for i, d in enumerate(a)) + sum(d * 10 ** i for i, d in enumerate(b))
    as_text = lambda ds: "".join(map(str, reversed(ds)))  # noqa: E731  (most significant first)
    inputs, labels = reference_positions(as_text(a), as_text(b), f"{total:0{n + 1}d}", start)
    a_ids, plus, b_ids, equals = inputs[:n], inputs[n], inputs[n + 1: 2 * n + 1], inputs[2 * n + 1]
    return a_ids[::-1] + [plus] + b_ids[::-1] + [equals] + labels[:n]  # the result's last digit is only predicted


@pytest.mark.parametrize("start", [1, 2, 7])
def test_ids_equal_the_references(start):
    data = AdditionTask("train", seed=3, length=7, causal=True, min_length=1, place=True, size=32)
    for i in range(len(data)):
        item = data[i][0]
        tokens, place = item[:, 0], item[:, 1]
        want = reference_ids(tokens, start)
        assert coupled_ids(place, start)[: len(want)].tolist() == want


@pytest.mark.parametrize("convention", ["down", "up"])
@pytest.mark.parametrize("start", [1, 2, 7])
def test_full_sequences_with_a_carry_equal_each_convention(convention, start):
    """The whole sequence, the result's carry-out digit included ("99+99=891"), in both conventions; each convention
    differs from the other's reference on every sequence."""
    other = {"down": "up", "up": "down"}[convention]
    for n in range(1, 7):
        place, want = full_sequence(n, start, convention)
        assert coupled_ids(place, start, convention).tolist() == want
        assert coupled_ids(place, start, other).tolist() != want
    pe = ndpe.make(dims=1, kind="coupling", dim=8, max_position=16, convention=convention).eval()
    place, want = full_sequence(2, 1, convention)
    torch.testing.assert_close(pe(positions=place[:, None].float()).add, pe.embedding.weight[want], rtol=0, atol=0)


def test_digits_of_one_significance_share_a_row():
    pe = ndpe.make(dims=1, kind="coupling", dim=8, max_position=16).eval()
    place = torch.tensor([1.0, 2.0, 3.0, 0.0, 1.0, 2.0, 3.0, 0.0, 1.0, 2.0, 3.0])[:, None]
    out, ids = pe(positions=place).add, coupled_ids(place[:, 0].long(), 1)
    torch.testing.assert_close(out, pe.embedding.weight[ids], rtol=0, atol=0)
    assert ids.tolist() == [4, 3, 2, 5, 4, 3, 2, 5, 4, 3, 2]
    assert not torch.equal(out[0], out[1])


def test_training_draws_a_start_per_sequence():
    pe = ndpe.make(dims=1, kind="coupling", dim=4, max_position=12)
    place = torch.tensor([1.0, 2.0, 0.0, 1.0, 2.0, 0.0, 1.0, 2.0])[None, :, None].expand(400, -1, -1)  # n = 2
    starts = set()
    for row_out in pe(positions=place).add:
        rows = [int((pe.embedding.weight == r).all(1).nonzero()) for r in row_out]
        assert rows == coupled_ids(place[0, :, 0].long(), rows[1] - 1).tolist()  # one start per sequence
        starts.add(rows[1] - 1)
    assert starts == set(range(1, 12 - 2))  # 1 .. max_position - n - 1, as the reference's torch.randint
    fixed = ndpe.make(dims=1, kind="coupling", dim=4, max_position=12, randomize=False)
    torch.testing.assert_close(fixed(positions=place[:2]).add, fixed.eval()(positions=place[:2]).add)


def test_errors():
    pe = ndpe.make(dims=1, kind="coupling", dim=8, max_position=10)
    raises_one_line("fractional", lambda: pe(positions=torch.tensor([[0.5]])), ValueError, "integers >= 0")
    raises_one_line("too long", lambda: pe(positions=torch.tensor([[8.0]])), ValueError, "max_position >= 11")
    assert pe.eval()(positions=torch.tensor([[8.0]])).add.shape == (1, 8)  # 8 + 2 ids fit at start 1
    raises_one_line("bool", lambda: ndpe.make(dims=1, kind="coupling", dim=8, randomize=1), TypeError, "randomize")
    raises_one_line("convention", lambda: ndpe.make(dims=1, kind="coupling", dim=8, convention="mirrored"), ValueError,
                    "convention must be one of ('down', 'up')")
