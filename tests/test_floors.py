"""Floors from the data: each against a naive reference or a case whose answer is known by hand."""
from __future__ import annotations

import math

import numpy as np
import pytest
import torch

from train.data import build_dataset
from train.floors import classify_floors, mean_predictor, most_common_symbol, ngram_floors, ngram_ppl


def naive_ngram_ppl(train, evaluate, order, vocab, k):
    """Per-position loop: add-k n-gram counted inside training windows, history cut at the window start."""
    counts, contexts = {}, {}
    for w in train:
        for n in range(1, order + 1):
            for t in range(n - 1, len(w)):
                gram = tuple(w[t - n + 1 : t + 1])
                counts[gram] = counts.get(gram, 0) + 1
                contexts[gram[:-1]] = contexts.get(gram[:-1], 0) + 1
    nll, count = 0.0, 0
    for w in evaluate:
        for t in range(1, len(w)):
            n = min(order, t + 1)
            gram = tuple(w[t - n + 1 : t + 1])
            p = (counts.get(gram, 0) + k) / (contexts.get(gram[:-1], 0) + k * vocab)
            nll -= math.log(p)
            count += 1
    return math.exp(nll / count)


@pytest.mark.parametrize("order", [1, 2, 3])
@pytest.mark.parametrize("k", [0.01, 1.0])
def test_ngram_matches_a_per_position_loop(order, k):
    rng = np.random.default_rng(order)
    train, evaluate = rng.integers(0, 5, (6, 9)), rng.integers(0, 5, (4, 7))
    assert ngram_ppl(train, evaluate, order, 5, k) == pytest.approx(naive_ngram_ppl(train, evaluate, order, 5, k))


def test_ngram_of_a_deterministic_text():
    text = torch.tensor([[0, 1] * 8] * 4)  # "abab...": the next character is known from the last one
    floors = ngram_floors(text, (text[:, :-1], text[:, 1:]), (text[:, :-1], text[:, 1:]), vocab=4)
    assert floors["unigram"] == pytest.approx(2.0, rel=0.01) and floors["bigram"] == pytest.approx(1.0, abs=0.01)


def test_most_common_symbol_on_hand_made_sequences():
    # token 3 + d is symbol d; 1 is the separator; scored targets are symbols, -100 elsewhere
    tokens = torch.tensor([[3, 3, 4, 1, 0, 0, 0],    # input symbols 0 0 1: mode 0, right on 2 of 3 slots
                           [5, 5, 6, 1, 6, 6, 6]])   # input 2 2 3: mode 2 (the 3s after the separator do not count)
    targets = torch.tensor([[-100, -100, -100, -100, 0, 0, 1],
                            [-100, -100, -100, -100, 2, 3, 3]])
    assert most_common_symbol(tokens, targets) == pytest.approx(3 / 6)


def test_most_common_symbol_of_copy_is_a_position_free_score():
    tokens, targets = zip(*(build_dataset("copy", "test", length=8, size=200)[i] for i in range(200)))
    tokens, targets = torch.stack(tokens), torch.stack(targets)
    rate = most_common_symbol(tokens, targets)
    mode = torch.stack([torch.bincount(t[:8] - 3, minlength=10).argmax() for t in tokens])
    assert rate == pytest.approx(float((targets[:, 9:] == mode[:, None]).float().mean()))
    assert 0.1 < rate < 0.4  # above chance: the mode of 8 draws from 10 symbols repeats


def test_classify_and_regress_floors():
    assert classify_floors(torch.tensor([2, 2, 1]), torch.tensor([2, 0, 2, 2]), 3) == {"chance": 1 / 3, "majority": 0.75}
    train_y, test_y = torch.tensor([[0.0, 0.0], [1.0, 1.0]]), torch.tensor([[0.5, 1.5]])
    assert mean_predictor(train_y, test_y) == pytest.approx(1.0)


def test_quick_audio_task_needs_both_axes():
    """The quick preset's audio task: a logistic regression on either one-axis summary stays near chance."""
    from train.bench import TASKS
    from train.floors import floors

    task = TASKS["audio/tones"]

    def data(split, size):
        items = [build_dataset("tones", split, size=size, **task.data)[i] for i in range(size)]
        return type("D", (), {"x": torch.stack([x for x, _ in items]), "y": torch.tensor([y for _, y in items]),
                              "task": "classify", "domain": "audio", "num_classes": 9})()

    train, test = data("train", 768), data("test", 256)
    result = floors(train, test, test)
    assert result["time-profile"] < 0.25 and result["frequency-profile"] < 0.25, result  # chance is 1/9


def test_summary_floors_see_a_one_axis_task():
    """Sanity: a label carried by one axis alone is found by that axis' summary (so the floor is not blind)."""
    from train.floors import summary_floors

    gen = torch.Generator().manual_seed(0)
    y = torch.randint(0, 2, (400,), generator=gen)
    x = torch.randn(400, 1, 8, 10, generator=gen)
    x[:, :, 2, :] += 2.0 * y[:, None, None]  # class 1 is louder in frequency band 2 at all times
    result = summary_floors(x[:300], y[:300], x[300:], y[300:])
    assert result["frequency-profile"] > 0.95 and result["time-profile"] > 0.6


def test_order_blind_classify_by_hand():
    """Labels 0/1 differ only by order (group 0), label 2 is alone: the order-blind ceiling guesses, per group,
    its most common training label."""
    from train.floors import classify_floors

    train_y, test_y = torch.tensor([0, 0, 1, 2, 2]), torch.tensor([0, 1, 1, 2])
    out = classify_floors(train_y, test_y, 3, groups=[0, 0, 1])
    assert out["order-blind"] == pytest.approx(2 / 4)  # guesses 0 for {0, 1}: right on one of three; 2 always right


def test_order_blind_tones_and_trajectories_reach_their_exact_ceilings():
    tones = build_dataset("tones", "test", syllables=2, size=8)
    assert sorted(tones.order_blind_groups) == [0, 1, 1, 2, 2, 3, 4, 4, 5], "6 multisets of 2 contours out of 9 orders"
    labels = torch.arange(9).repeat(100)  # balanced: identify the multiset, guess the order: 3 + 6/2 = 6 of 9
    from train.floors import classify_floors

    assert classify_floors(labels, labels, 9, tones.order_blind_groups)["order-blind"] == pytest.approx(6 / 9)
    traj = build_dataset("trajectory", "test", motions="linear", size=4, frames=8)
    assert traj.order_blind_groups == [0, 0, 1, 1]


def naive_bag_guesses(tokens):
    """Per position: the most common input symbol not yet written after the separator (a loop)."""
    out = torch.zeros_like(tokens)
    for b, seq in enumerate(tokens.tolist()):
        sep = seq.index(1) if 1 in seq else len(seq)
        remaining = [0] * 10
        for t in seq[:sep]:
            if t >= 3:
                remaining[t - 3] += 1
        for i, t in enumerate(seq):
            if i > sep and t >= 3:
                remaining[t - 3] -= 1
            out[b, i] = max(range(10), key=lambda d: (remaining[d], -d))
    return out


def test_bag_guesses_match_a_loop_and_copy_is_beaten_only_with_order():
    from train.floors import bag_guesses, score_guesses

    data = build_dataset("copy", "test", length=6, size=300, causal=True)
    tokens, targets = map(torch.stack, zip(*(data[i] for i in range(300))))
    guesses = bag_guesses(tokens)
    assert torch.equal(guesses, naive_bag_guesses(tokens))
    per_token, per_seq = score_guesses(guesses, targets, False), score_guesses(guesses, targets, True)
    assert 0.3 < per_token < 0.9 and per_seq < per_token, "the last slot is always right, the first rarely"
    assert score_guesses(targets.clamp(min=0), targets, True) == 1.0


def test_lm_floors_score_the_same_characters_at_every_context():
    """With score_last and align, the n-gram floors (2 characters of history) are equal at every context."""
    from train.floors import ngram_floors

    train = build_dataset("stdlib_lm", "train", context=32)
    train_x = torch.stack([train[i][0] for i in range(200)])
    val = build_dataset("stdlib_lm", "val", context=32)
    val_xy = tuple(map(torch.stack, zip(*(val[i] for i in range(50)))))
    floors = []
    for context in (32, 128):
        test = build_dataset("stdlib_lm", "test", context=context, score_last=16, align=128)
        test_xy = tuple(map(torch.stack, zip(*(test[i] for i in range(40)))))
        assert int((test_xy[1] >= 0).sum()) == 40 * 16
        floors.append(ngram_floors(train_x, val_xy, test_xy, 98))
    assert floors[0] == pytest.approx(floors[1])
