"""abacus: pinned to the reference Abacus class (its place ids and its embedding, offset included), the task's place
ids, the shared rows, the training offset, errors; the text model hands the data's positions to its encoding."""
from __future__ import annotations

import random

import pytest
import torch

import ndpe
from models.text import TextTransformer
from tests.conftest import raises_one_line
from train.data.text import NUM_SPECIAL, AdditionTask
from train.floors import floors

DIGIT_TOKENS = list(range(NUM_SPECIAL, NUM_SPECIAL + 10))  # train.data.text: symbol d is token 3 + d


class ReferenceAbacus(torch.nn.Module):
    """McLeish et al. 2024's ``Abacus``, ported from github.com/mcleish7/arithmetic ``abacus.py`` (commit 55af9d5):
    the place id of every digit token (its index in its run of digits, from 1; 0 elsewhere), plus one random
    ``k`` in ``0..max_k`` per call in training, looked up in an ``nn.Embedding``."""

    def __init__(self, digit_tokens, embedding_dim, max_seq_length=1024, max_k=99):
        super().__init__()
        self.embedding = torch.nn.Embedding(max_seq_length, embedding_dim)
        self.register_buffer("digits", torch.tensor(digit_tokens), persistent=False)
        self.max_k = max_k

    def helper(self, mask, device):
        mask_shape = mask.shape
        shifted_mask = torch.cat([torch.zeros((mask_shape[0], 1), device=device, dtype=mask.dtype), mask[:, :-1]], dim=1)
        starts = (shifted_mask != mask) & mask
        segment_ids = torch.cumsum(starts, dim=1)
        index = torch.arange(mask.size(1)).repeat(mask.size(0), 1).to(device)
        reset_index = torch.zeros_like(mask).long()
        second_term = index * starts.long()
        reset_index = reset_index.scatter_add(1, segment_ids, second_term)
        positions = index - reset_index.gather(1, segment_ids) + 1
        return positions * mask

    def forward(self, input_ids):
        mask = torch.isin(input_ids, self.digits)
        output = self.helper(mask, input_ids.device)
        if self.training:
            k = random.randint(0, self.max_k)
            output[output > 0] += k
        return self.embedding(output)


def addition_batch(length=6, n=16, seed=0):
    """``n`` decoder-only addition items of 1..``length`` digits with place ids: ``(n, T, 2)``."""
    data = AdditionTask("train", seed=seed, length=length, causal=True, min_length=1, place=True, size=n)
    return torch.stack([data[i][0] for i in range(n)])


def pair(dim=16, size=64, max_k=9):
    """ndpe's abacus and the reference with the same table."""
    pe = ndpe.make(dims=1, kind="abacus", dim=dim, size=size, max_k=max_k)
    ref = ReferenceAbacus(DIGIT_TOKENS, dim, max_seq_length=size, max_k=max_k)
    ref.embedding.weight.data.copy_(pe.embedding.weight.data)
    return pe, ref


def test_the_tasks_place_ids_are_the_references():
    items = addition_batch()
    ref = ReferenceAbacus(DIGIT_TOKENS, 4)
    tokens, place = items[..., 0], items[..., 1]
    assert (place > 0).any() and bool((ref.helper(torch.isin(tokens, ref.digits), "cpu") == place).all())


@pytest.mark.parametrize("train", [False, True])
def test_equals_the_reference(train):
    """Eval mode, and training mode with the same draw of k (both call Python's random.randint once)."""
    items = addition_batch()
    pe, ref = pair()
    pe.train(train), ref.train(train)
    for seed in range(5):
        random.seed(seed)
        want = ref(items[..., 0])
        random.seed(seed)
        got = pe(positions=items[..., 1:].float()).add
        torch.testing.assert_close(got, want, rtol=0, atol=0)


def test_digits_of_one_place_share_a_row_wherever_they_sit():
    pe = ndpe.make(dims=1, kind="abacus", dim=8, size=32, max_k=9).eval()
    place = torch.tensor([[1.0], [2.0], [0.0], [0.0], [0.0], [1.0], [2.0], [3.0]])  # a number shifted along
    out = pe(positions=place).add
    torch.testing.assert_close(out[0], out[5]), torch.testing.assert_close(out[1], out[6])
    torch.testing.assert_close(out[2], pe.embedding.weight[0])
    assert not torch.equal(out[0], out[1])


def test_training_shifts_every_digit_by_one_k_and_leaves_non_digits():
    pe = ndpe.make(dims=1, kind="abacus", dim=8, size=32, max_k=5)
    place = torch.tensor([[0.0], [1.0], [2.0], [3.0]])
    seen = set()
    for _ in range(200):
        out = pe(positions=place).add
        rows = [int((pe.embedding.weight == row).all(1).nonzero()) for row in out]
        assert rows[0] == 0 and rows[2] == rows[1] + 1 and rows[3] == rows[1] + 2
        seen.add(rows[1] - 1)
    assert seen == set(range(6))


def test_errors():
    pe = ndpe.make(dims=1, kind="abacus", dim=8, size=16, max_k=4)
    raises_one_line("fractional", lambda: pe(positions=torch.tensor([[0.5]])), ValueError, "integers >= 0")
    raises_one_line("negative", lambda: pe(positions=torch.tensor([[-1.0]])), ValueError, "integers >= 0")
    raises_one_line("past the table", lambda: pe(positions=torch.tensor([[12.0]])), ValueError, "larger size")  # 12 + 4
    assert pe.eval()(positions=torch.tensor([[12.0]])).add.shape == (1, 8)  # no offset in eval
    raises_one_line("2D", lambda: ndpe.make(dims=2, kind="abacus", dim=8), ValueError, "dims")


def test_the_text_model_hands_the_datas_positions_to_its_encoding():
    """(B, L, 2) items: the ids and the data's positions, read by every kind alike; positions equal to the default
    grid give the default output, and abacus reads the place ids."""
    items = addition_batch(length=4, n=3)
    steps = torch.arange(items.shape[1]).expand(items.shape[:2])
    as_grid = torch.stack([items[..., 0], steps], -1)
    for kind in ("none", "rope"):
        torch.manual_seed(0)
        model = TextTransformer(vocab_size=13, num_classes=10, pe={"kind": kind}, dim=16, depth=1, heads=2,
                                causal=True).eval()
        torch.testing.assert_close(model(as_grid), model(items[..., 0]))
    model = TextTransformer(vocab_size=13, num_classes=10, pe={"kind": "abacus", "options": {"size": 64, "max_k": 9}}, dim=16,
                            depth=1, heads=2, causal=True).eval()
    seen = {}
    model.encoder.pe.register_forward_hook(lambda m, args, kwargs, out: seen.update(kwargs), with_kwargs=True)
    model(items)
    assert torch.equal(seen["positions"], items[..., 1:].float())
    raises_one_line("3 channels", lambda: model(torch.zeros(1, 5, 3, dtype=torch.long)), ValueError, "(B, L, 2)")


def test_floors_read_the_token_ids_of_place_items():
    plain = {s: AdditionTask(s, length=3, causal=True, size=64) for s in ("train", "val", "test")}
    place = {s: AdditionTask(s, length=3, causal=True, size=64, place=True) for s in ("train", "val", "test")}
    assert floors(*place.values(), "seq_acc") == floors(*plain.values(), "seq_acc")
