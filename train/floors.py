"""Floors: what a task's data allows without learning anything about position (or anything at all).

A benchmark number means something only above its task's floor. Each floor is computed from the
data the models see (the same training items, the same test items), never from a trained model:

==========  ============================================================================================
task        floors
==========  ============================================================================================
classify    ``chance`` (1 / classes); ``majority`` (the most common training label, scored on the test set);
            audio only, at the training duration: ``time-profile`` / ``frequency-profile``, a logistic
            regression on the log-mel averaged over frequency / over time: a task that needs both axes
            of the spectrogram is not solved by either summary
tag         ``chance``; ``most-common-symbol`` (every scored slot gets the most common symbol of the
            sequence's input part, before its first separator: what a model blind to order can do)
lm          ``unigram``, ``bigram``, ``trigram`` perplexity: add-k n-grams fit on the training windows,
            k chosen on the validation windows, scored on the test windows with the context a window
            gives (the first characters of a window see less history, as the model's do)
regress     ``mean-predictor``: the mean training target, mean Euclidean error on the test set
==========  ============================================================================================

>>> import torch
>>> class Data:  # any dataset with x, y tensors (train.cache.TensorData) or items (x, y)
...     task, num_classes = "classify", 4
...     def __init__(self, y): self.y = torch.tensor(y); self.x = torch.zeros(len(y), 1)
>>> floors(Data([0, 0, 1, 2]), Data([1, 0, 0, 0]), Data([0, 3]))
{'chance': 0.25, 'majority': 0.5}
"""
from __future__ import annotations

import math

import numpy as np
import torch
from torch.utils.data import DataLoader, Dataset

IGNORE_INDEX = -100
SEP_TOKEN, NUM_SPECIAL = 1, 3  # the tagging tasks' separator id and first symbol id (train.data.text)
ADD_K = (1e-3, 3e-3, 1e-2, 3e-2, 0.1, 0.3, 1.0)  # candidates for the n-gram smoothing constant


def tensors(dataset: Dataset) -> tuple[torch.Tensor, torch.Tensor]:
    """All items of ``dataset`` as ``(x, y)`` tensors (``train.cache.TensorData`` holds them already)."""
    if isinstance(getattr(dataset, "x", None), torch.Tensor) and isinstance(getattr(dataset, "y", None), torch.Tensor):
        return dataset.x, dataset.y
    xs, ys = zip(*(batch for batch in DataLoader(dataset, batch_size=256)))
    return torch.cat(xs), torch.cat(ys)


def floors(train: Dataset, val: Dataset, test: Dataset) -> dict[str, float]:
    """The floors of ``test`` (see the module docstring), from ``train`` (and ``val`` for tuning)."""
    task = train.task
    if task == "classify":
        out = classify_floors(tensors(train)[1], tensors(test)[1], int(train.num_classes))
        if train.domain == "audio" and tensors(train)[0].shape[1:] == tensors(test)[0].shape[1:]:
            out.update(summary_floors(*tensors(train), *tensors(test)))
        return out
    if task == "tag":
        return {"chance": 1.0 / int(train.num_classes), "most-common-symbol": most_common_symbol(*tensors(test))}
    if task == "lm":
        return ngram_floors(tensors(train)[0], tensors(val), tensors(test), int(train.vocab_size))
    if task == "regress":
        return {"mean-predictor": mean_predictor(tensors(train)[1], tensors(test)[1])}
    raise ValueError(f"no floors for task {task!r}; expected classify, tag, lm or regress")


def classify_floors(train_y: torch.Tensor, test_y: torch.Tensor, num_classes: int) -> dict[str, float]:
    majority = int(torch.bincount(train_y.long(), minlength=num_classes).argmax())
    return {"chance": 1.0 / num_classes, "majority": float((test_y == majority).float().mean())}


def summary_floors(train_x: torch.Tensor, train_y: torch.Tensor, test_x: torch.Tensor,
                   test_y: torch.Tensor) -> dict[str, float]:
    """Test accuracy of a logistic regression on each one-axis summary of ``(B, 1, freq, time)`` log-mels."""
    from sklearn.linear_model import LogisticRegression  # the train extra
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    out = {}
    for name, axis in (("time-profile", 2), ("frequency-profile", 3)):  # average over frequency / over time
        clf = make_pipeline(StandardScaler(), LogisticRegression(C=0.1, max_iter=2000))
        clf.fit(train_x.mean(axis).flatten(1).numpy(), train_y.numpy())
        out[name] = float(clf.score(test_x.mean(axis).flatten(1).numpy(), test_y.numpy()))
    return out


def most_common_symbol(tokens: torch.Tensor, targets: torch.Tensor) -> float:
    """Accuracy of tagging every scored slot with the most common input symbol of its sequence.

    The input part of a sequence is what precedes its first separator; symbols are ids >= 3 (symbol
    ``d`` is token ``3 + d`` and target ``d``), ties go to the smaller symbol.
    """
    tokens, targets = tokens.long(), targets.long()
    is_sep = tokens == SEP_TOKEN
    first_sep = torch.where(is_sep.any(1), is_sep.float().argmax(1), torch.full_like(tokens[:, 0], tokens.shape[1]))
    before = torch.arange(tokens.shape[1]) < first_sep[:, None]  # (B, L)
    symbols = (tokens - NUM_SPECIAL).clamp(min=0)
    counts = torch.zeros(tokens.shape[0], int(symbols.max()) + 1)
    counts.scatter_add_(1, symbols, (before & (tokens >= NUM_SPECIAL)).float())
    guess = counts.argmax(1)  # (B,) first maximum: the smaller symbol on ties
    scored = targets != IGNORE_INDEX
    return float(((targets == guess[:, None]) & scored).sum() / scored.sum())


def mean_predictor(train_y: torch.Tensor, test_y: torch.Tensor) -> float:
    return float((test_y.float() - train_y.float().mean(0)).norm(dim=-1).mean())


def ngram_counts(windows: np.ndarray, order: int, vocab: int) -> tuple[np.ndarray, np.ndarray]:
    """Counts of ``order``-grams inside windows ``(W, C)`` and of their ``order - 1``-gram contexts.

    Returns flat arrays indexed by ``context * vocab + next`` and by ``context`` (base-``vocab`` codes).
    """
    grams = ngram_codes(windows, order, vocab, full_only=True)
    counts = np.bincount(grams, minlength=vocab ** order).astype(np.float64)
    return counts, counts.reshape(-1, vocab).sum(1)


def ngram_codes(windows: np.ndarray, order: int, vocab: int, *, full_only: bool) -> np.ndarray:
    """Base-``vocab`` codes of every ``order``-gram ending at each position of each window.

    With ``full_only`` only positions with ``order - 1`` characters of history in the window count;
    otherwise a position with less history gets the code of its shorter n-gram (see :func:`ngram_ppl`).
    """
    windows = windows.astype(np.int64)
    codes = np.zeros_like(windows)
    for back in range(order):
        shifted = np.zeros_like(windows)
        shifted[:, back:] = windows[:, : windows.shape[1] - back]
        codes += shifted * vocab ** back
    return codes[:, order - 1:].ravel() if full_only else codes


def ngram_ppl(train: np.ndarray, evaluate: np.ndarray, order: int, vocab: int, k: float) -> float:
    """Perplexity of an add-``k`` ``order``-gram model on positions ``1..`` of ``evaluate`` windows.

    Position 0 of a window is context only (the model never predicts it); position ``t`` has ``t``
    characters of history, so ``t < order - 1`` is scored by the ``(t + 1)``-gram model: a model that
    sees a window cannot use characters before it, and neither can the n-gram floor.
    """
    nll, count = 0.0, 0
    for n in range(1, order + 1):
        first = max(n - 1, 1)  # positions scored by this order: t = n - 1 (less history), or every t >= order - 1
        if n < order and n - 1 < 1:
            continue
        gram_counts, context_counts = ngram_counts(train, n, vocab)
        codes = ngram_codes(evaluate, n, vocab, full_only=False)
        cols = slice(first, None) if n == order else slice(first, first + 1)
        picked = codes[:, cols].ravel()
        p = (gram_counts[picked] + k) / (context_counts[picked // vocab] + k * vocab)
        nll -= float(np.log(p).sum())
        count += picked.size
    return math.exp(nll / count)


def ngram_floors(train_x: torch.Tensor, val: tuple, test: tuple, vocab: int) -> dict[str, float]:
    """Unigram, bigram and trigram perplexities of the test windows, smoothing tuned on val."""
    train_w = train_x.numpy()  # the characters the model is trained on
    val_w, test_w = _lm_windows(*val), _lm_windows(*test)
    out = {}
    for order, name in ((1, "unigram"), (2, "bigram"), (3, "trigram")):
        k = min(ADD_K, key=lambda k: ngram_ppl(train_w, val_w, order, vocab, k))
        out[name] = ngram_ppl(train_w, test_w, order, vocab, k)
    return out


def _lm_windows(x: torch.Tensor, y: torch.Tensor) -> np.ndarray:
    """The character windows the model predicts: its input plus the last target, ``(W, C + 1)``.

    The model is scored on ``y = x[1:] + [next]``; the n-gram scores the same ``C`` characters
    (positions ``1..C`` of the returned window; position 0 is context only).
    """
    return np.concatenate([x.numpy(), y.numpy()[:, -1:]], axis=1)
