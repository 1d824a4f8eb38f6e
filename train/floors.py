"""Floors: what a task's data allows without learning anything about position (or anything at all).

A benchmark number means something only above its task's floor. Each floor is computed from the
data the models see (the same training items, the same test items), never from a trained model:

==========  ============================================================================================
task        floors
==========  ============================================================================================
classify    ``chance`` (1 / classes); ``majority`` (the most common training label, scored on the test set);
            ``order-blind`` where the dataset says which labels differ only by order
            (``order_blind_groups``: label -> group): the ceiling of a model that identifies the group
            perfectly and guesses its most common training label (or the dataset's ``order_blind_ceiling``,
            where the label depends on the pair of items: mnist_pair's left digit, 1/2); audio only, at the training
            duration: ``time-profile`` / ``frequency-profile``, a logistic regression on the log-mel
            averaged over frequency / over time
tag         ``chance``; ``most-common-symbol`` (every scored slot gets the most common symbol of the
            sequence's input part); ``order-blind`` for copy / reverse (``order_blind_bag``): each slot
            gets the most common input symbol not yet written before it, all a model that sees the
            bag of the earlier tokens (not their order) can know; with ``metric="seq_acc"`` each is
            scored per sequence (all slots right)
lm          ``unigram``, ``bigram``, ``trigram`` perplexity: add-k n-grams fit on the training windows,
            k chosen on the validation windows, scored on the scored test positions with the context
            a window gives; ``order-blind``: a softmax regression on the normalized histogram of the
            window's characters up to each position (a bag: what a model blind to their order sees)
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


def floors(train: Dataset, val: Dataset, test: Dataset, metric: str | None = None) -> dict[str, float]:
    """The floors of ``test`` in ``metric`` (see the module docstring), from ``train`` (and ``val`` for tuning)."""
    task = train.task
    if task == "classify":
        out = classify_floors(tensors(train)[1], tensors(test)[1], int(train.num_classes),
                              getattr(train, "order_blind_groups", None))
        if getattr(train, "order_blind_ceiling", None) is not None:  # stated by the dataset (mnist_pair: 1/2)
            out["order-blind"] = float(train.order_blind_ceiling)
        if train.domain == "audio" and tensors(train)[0].shape[1:] == tensors(test)[0].shape[1:]:
            out.update(summary_floors(*tensors(train), *tensors(test)))
        return out
    if task == "tag":
        per_seq = metric == "seq_acc"
        tokens, targets = tensors(test)
        tokens = tokens[..., 0] if tokens.dim() == 3 else tokens  # (B, L, 2): ids beside the data's positions
        out = {"chance": chance_tags(targets, int(train.num_classes), per_seq),
               "most-common-symbol": score_guesses(most_common_guesses(tokens), targets, per_seq)}
        if getattr(train, "order_blind_bag", False):
            out["order-blind"] = score_guesses(bag_guesses(tokens), targets, per_seq)
        return out
    if task == "lm":
        out = ngram_floors(tensors(train)[0], tensors(val), tensors(test), int(train.vocab_size))
        out["order-blind"] = bag_lm_ppl(tensors(train)[0], tensors(test), int(train.vocab_size))
        return out
    if task == "regress":
        return {"mean-predictor": mean_predictor(tensors(train)[1], tensors(test)[1])}
    raise ValueError(f"no floors for task {task!r}; expected classify, tag, lm or regress")


def classify_floors(train_y: torch.Tensor, test_y: torch.Tensor, num_classes: int,
                    groups=None) -> dict[str, float]:
    """``chance``, ``majority`` and, given ``groups`` (label -> group of labels that differ only by order),
    ``order-blind``: the accuracy of guessing, per group, its most common training label."""
    counts = torch.bincount(train_y.long(), minlength=num_classes)
    out = {"chance": 1.0 / num_classes, "majority": float((test_y == int(counts.argmax())).float().mean())}
    if groups is not None:
        groups = torch.as_tensor(list(groups))  # (num_classes,)
        best = {int(g): int(torch.where(groups == g, counts, -1).argmax()) for g in groups.unique()}
        guess = torch.tensor([best[int(g)] for g in groups])  # label -> the guess for its group
        out["order-blind"] = float((guess[test_y.long()] == test_y).float().mean())
    return out


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


def _input_counts(tokens: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Per sequence: symbol counts of the input part (before the first separator) ``(B, S)``, and a mask of the
    positions after it ``(B, L)``. Symbols are ids >= 3 (symbol ``d`` is token ``3 + d``)."""
    tokens = tokens.long()
    is_sep = tokens == SEP_TOKEN
    first_sep = torch.where(is_sep.any(1), is_sep.float().argmax(1), torch.full_like(tokens[:, 0], tokens.shape[1]))
    after = torch.arange(tokens.shape[1]) > first_sep[:, None]  # (B, L)
    symbols = (tokens - NUM_SPECIAL).clamp(min=0)
    is_symbol = tokens >= NUM_SPECIAL
    counts = torch.zeros(tokens.shape[0], int(symbols.max()) + 1)
    counts.scatter_add_(1, symbols, (~after & ~is_sep & is_symbol).float())
    return counts, after


def most_common_guesses(tokens: torch.Tensor) -> torch.Tensor:
    """``(B, L)`` guesses: every slot gets its sequence's most common input symbol (ties: the smaller symbol)."""
    counts, _ = _input_counts(tokens)
    return counts.argmax(1)[:, None].expand(tokens.shape)


def bag_guesses(tokens: torch.Tensor) -> torch.Tensor:
    """``(B, L)`` guesses of a model blind to order: at position ``i``, the most common input symbol minus the
    symbols written after the separator up to ``i`` (teacher-forced: the right ones). Ties: the smaller symbol."""
    counts, after = _input_counts(tokens)
    tokens = tokens.long()
    written = torch.zeros(*tokens.shape, counts.shape[1])  # (B, L, S)
    symbols = (tokens - NUM_SPECIAL).clamp(min=0, max=counts.shape[1] - 1)
    written.scatter_(2, symbols[..., None], (after & (tokens >= NUM_SPECIAL)).float()[..., None])
    return (counts[:, None] - written.cumsum(1)).argmax(2)


def score_guesses(guesses: torch.Tensor, targets: torch.Tensor, per_seq: bool) -> float:
    """Accuracy of ``guesses`` on the scored slots, per token or per sequence (every slot right)."""
    targets = targets.long()
    scored = targets != IGNORE_INDEX
    right = (guesses == targets) & scored
    if per_seq:
        return float((right == scored).all(1).float().mean())
    return float(right.sum() / scored.sum())


def chance_tags(targets: torch.Tensor, num_classes: int, per_seq: bool) -> float:
    """Uniform guessing: ``1 / classes`` per token, ``(1 / classes) ** slots`` per sequence (mean over sequences)."""
    if not per_seq:
        return 1.0 / num_classes
    slots = (targets != IGNORE_INDEX).sum(1).double()
    return float((num_classes ** -slots).mean())


def most_common_symbol(tokens: torch.Tensor, targets: torch.Tensor) -> float:
    """Per-token accuracy of tagging every scored slot with the most common input symbol of its sequence."""
    return score_guesses(most_common_guesses(tokens), targets, per_seq=False)


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


def ngram_ppl(train: np.ndarray, evaluate: np.ndarray, order: int, vocab: int, k: float,
              scored: np.ndarray | None = None) -> float:
    """Perplexity of an add-``k`` ``order``-gram model on positions ``1..`` of ``evaluate`` windows.

    Position 0 of a window is context only (the model never predicts it); position ``t`` has ``t``
    characters of history, so ``t < order - 1`` is scored by the ``(t + 1)``-gram model: a model that
    sees a window cannot use characters before it, and neither can the n-gram floor. ``scored``
    (bool, the shape of ``evaluate``) keeps only those positions.
    """
    scored = np.ones(evaluate.shape, bool) if scored is None else scored
    nll, count = 0.0, 0
    for n in range(1, order + 1):
        first = max(n - 1, 1)  # positions scored by this order: t = n - 1 (less history), or every t >= order - 1
        if n < order and n - 1 < 1:
            continue
        gram_counts, context_counts = ngram_counts(train, n, vocab)
        codes = ngram_codes(evaluate, n, vocab, full_only=False)
        cols = slice(first, None) if n == order else slice(first, first + 1)
        picked = codes[:, cols][scored[:, cols]]
        p = (gram_counts[picked] + k) / (context_counts[picked // vocab] + k * vocab)
        nll -= float(np.log(p).sum())
        count += picked.size
    return math.exp(nll / count)


def ngram_floors(train_x: torch.Tensor, val: tuple, test: tuple, vocab: int) -> dict[str, float]:
    """Unigram, bigram and trigram perplexities of the scored test positions, smoothing tuned on val."""
    train_w = train_x.numpy()  # the characters the model is trained on
    val_w, test_w = _lm_windows(*val), _lm_windows(*test)
    out = {}
    for order, name in ((1, "unigram"), (2, "bigram"), (3, "trigram")):
        k = min(ADD_K, key=lambda k: ngram_ppl(train_w, val_w[0], order, vocab, k, val_w[1]))
        out[name] = ngram_ppl(train_w, test_w[0], order, vocab, k, test_w[1])
    return out


def _lm_windows(x: torch.Tensor, y: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """The character windows the model predicts, its input plus the last target ``(W, C + 1)``, and which of their
    positions are scored (``y != -100`` shifted by one; position 0 is context only)."""
    windows = np.concatenate([x.numpy(), y.numpy()[:, -1:]], axis=1)
    scored = np.concatenate([np.zeros((len(y), 1), bool), y.numpy() != IGNORE_INDEX], axis=1)
    return windows, scored


def bag_histograms(x: torch.Tensor, vocab: int) -> torch.Tensor:
    """``(W, C, vocab)``: at each position the normalized histogram of the window's characters up to it."""
    counts = torch.nn.functional.one_hot(x.long(), vocab).float().cumsum(1)
    return counts / counts.sum(-1, keepdim=True)


def bag_lm_ppl(train_x: torch.Tensor, test: tuple, vocab: int, *, samples: int = 65536, steps: int = 200,
               seed: int = 0) -> float:
    """Perplexity of a softmax regression from the bag of a window's characters up to ``t`` to the next one.

    Fit by full-batch L-BFGS on ``samples`` positions of the training windows (position ``t`` predicts
    ``x[t + 1]``), scored on the test positions with targets (``y != -100``).
    """
    g = torch.Generator().manual_seed(seed)
    feats, nxt = bag_histograms(train_x[:, :-1], vocab), train_x[:, 1:].long()
    pick = torch.randint(0, feats.shape[0] * feats.shape[1], (samples,), generator=g)
    feats, nxt = feats.reshape(-1, vocab)[pick], nxt.reshape(-1)[pick]
    model = torch.nn.Linear(vocab, vocab)
    opt = torch.optim.LBFGS(model.parameters(), max_iter=steps, history_size=20, line_search_fn="strong_wolfe")

    def closure():
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(model(feats), nxt) + 1e-4 * model.weight.square().sum()
        loss.backward()
        return loss

    opt.step(closure)
    x, y = test
    scored = y != IGNORE_INDEX
    with torch.no_grad():
        logits = model(bag_histograms(x, vocab)[scored])
        return math.exp(float(torch.nn.functional.cross_entropy(logits, y[scored].long())))
