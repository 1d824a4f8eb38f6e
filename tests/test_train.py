"""Training loop: losses and metrics per task against naive references, and short runs that learn.

The fake datasets below follow the ``train.data`` interface (``domain``, ``task``, ``num_classes``,
``vocab_size``; items as documented there) and are reachable as ``data.name="tests.test_train:fake"``.
"""
from __future__ import annotations

import json
import math

import pytest
import torch
import torch.nn.functional as F
from torch.utils.data import Dataset

from train.config import load_config
from train.engine import summarize, task_loss
from train.main import evaluate_model, fit, load_trained, main


class FakeData(Dataset):
    """Tiny learnable tasks, item ``i`` generated from its own seed.

    image/classify: a (3, 16, 16) image whose brightness sets the label (4 levels) plus a bright 4x4 square
        in the quadrant of the label.
    text/tag: random tokens, target = the token one position earlier (-100 at position 0).
    coord/regress: a bright pixel in a (1, 16, 16) image; target its (row, col) in [-1, 1].
    """

    def __init__(self, split, *, seed=0, root=None, kind="image", size=64, image_size=16, length=12):
        self.kind, self.size, self.image_size, self.length = kind, size, image_size, length
        self.offset = {"train": 0, "val": 10_000, "test": 20_000}[split] + 100_000 * seed
        self.domain, self.task = {"image": ("image", "classify"), "text": ("text", "tag"),
                                  "coord": ("coord", "regress")}[kind]
        self.num_classes = {"image": 4, "text": 10, "coord": 2}[kind]
        self.vocab_size = 10

    def __len__(self):
        return self.size

    def __getitem__(self, i):
        g = torch.Generator().manual_seed(self.offset + i)
        n = self.image_size
        if self.kind == "image":
            label = int(torch.randint(4, (), generator=g))
            x = torch.randn(3, n, n, generator=g) * 0.1 + (label - 1.5)
            r, c = (label // 2) * n // 2 + 2, (label % 2) * n // 2 + 2
            x[:, r:r + 4, c:c + 4] += 2.0
            return x, label
        if self.kind == "text":
            tokens = torch.randint(10, (self.length,), generator=g)
            return tokens, torch.cat([torch.tensor([-100]), tokens[:-1]])
        rc = torch.randint(n, (2,), generator=g)
        x = torch.zeros(1, n, n)
        x[0, rc[0], rc[1]] = 1.0
        return x, rc.float() / (n - 1) * 2 - 1


def fake(split, *, seed=0, root=None, **opts):
    return FakeData(split, seed=seed, root=root, **opts)


def fake_config(tmp_path, kind="image", *overrides):
    model = {"image": ["model.name=vit", "model.patch_size=4"], "text": ["model.name=text"],
             "coord": ["model.name=conv", "model.channels=[8,16]", "model.add_coords=true"]}[kind]
    base = ["data.name=tests.test_train:fake", "data.allow_import=true", f"data.options.kind={kind}", "model.dim=32",
            "model.depth=1", "model.heads=4", "train.batch_size=16", "train.epochs=2", "optim.lr=3e-3", "optim.warmup_steps=2",
            f"train.out_dir={tmp_path}", "train.log_every=1"]
    if kind == "coord":
        base = [b for b in base if not b.startswith(("model.dim", "model.depth", "model.heads"))]
    return load_config(None, base + model + list(overrides))


# -- losses and metrics vs naive references -------------------------------------------------
def test_tag_loss_ignores_unscored_positions():
    out = torch.randn(3, 5, 7)
    target = torch.randint(7, (3, 5))
    target[:, :2] = -100
    loss, s = task_loss("tag", out, target)
    naive = torch.stack([F.cross_entropy(out[b, t][None], target[b, t][None]) for b in range(3) for t in range(2, 5)])
    torch.testing.assert_close(loss, naive.mean())
    right = (out.argmax(-1) == target)[:, 2:]
    assert s["count"] == 9 and s["correct"] == right.sum().item()
    assert s["seq_correct"] == right.all(-1).sum().item()


def test_metrics_are_exact_whatever_the_batching():
    out, target = torch.randn(10, 6, 5), torch.randint(5, (10, 6))
    target[target == 0] = -100
    whole = summarize("lm", task_loss("lm", out, target)[1])
    sums = {}
    for a, b in ((0, 3), (3, 4), (4, 10)):
        for k, v in task_loss("lm", out[a:b], target[a:b])[1].items():
            sums[k] = sums.get(k, 0.0) + v
    parts = summarize("lm", sums)
    assert parts == pytest.approx(whole)
    assert whole["ppl"] == pytest.approx(math.exp(whole["loss"]))


def test_regression_error_is_euclidean():
    out, target = torch.tensor([[0.0, 0.0], [1.0, 1.0]]), torch.tensor([[0.3, 0.4], [1.0, 1.0]])
    m = summarize("regress", task_loss("regress", out, target)[1])
    assert m["coord_err"] == pytest.approx(0.25)
    assert m["loss"] == pytest.approx(F.mse_loss(out, target).item())
    assert task_loss("regress", out, target, regress_loss="l1")[0].item() == pytest.approx(0.175)


def test_unknown_task_raises():
    with pytest.raises(ValueError, match="unknown task 'bogus'"):
        task_loss("bogus", torch.zeros(1, 2), torch.zeros(1))


# -- short runs learn ---------------------------------------------------------------------
@pytest.mark.parametrize("kind, extra, metric, goal", [
    ("image", ["model.pe.kind=rope"], "acc", 0.6),  # chance 0.25
    ("text", ["model.pe.kind=rope"], "acc", 0.3),  # chance 0.1
    ("coord", ["data.options.size=256"], "coord_err", None),
])
def test_few_steps_lower_the_loss(tmp_path, kind, extra, metric, goal):
    # text: unit-scale token embeddings (Vaswani et al.) move more slowly under Adam than GPT-2's 0.02 ones
    cfg = fake_config(tmp_path, kind, f"train.epochs={16 if kind == 'text' else 8}", "optim.lr=1e-2", *extra)
    if kind == "text":
        cfg.model.causal = True  # target = previous token: a causal LM-style tagger can see it
    model, result = fit(cfg)
    lines = [json.loads(l) for l in (tmp_path / "log.jsonl").read_text().splitlines()]
    steps = [l["loss"] for l in lines if l["phase"] == "train_step"]
    first = sum(steps[:3]) / 3
    assert sum(steps[-3:]) / 3 < 0.7 * first, steps
    if goal is not None:
        assert result["eval"][metric] >= goal, result
    assert (tmp_path / "config.yaml").is_file() and (tmp_path / "checkpoint.pt").is_file()


def test_trained_model_evaluates_at_other_sizes(tmp_path):
    cfg = fake_config(tmp_path, "image", "model.pe.kind=rope", "train.epochs=1")
    result = main(cfg)
    model, saved = load_trained(tmp_path)
    assert saved.model == cfg.model
    same = evaluate_model(model, saved)
    assert same == pytest.approx(result["eval"])  # reloaded weights give the same numbers
    larger = evaluate_model(model, saved, split="test", image_size=24)
    assert set(larger) == {"loss", "acc"}


def test_command_line_runs_a_config_with_overrides(tmp_path):
    from train.main import cli, get_args_parser

    (tmp_path / "x.yaml").write_text("data: {name: 'tests.test_train:fake', allow_import: true, options: {kind: text}}\n"
                                     "model: {name: text}\n")
    args = get_args_parser().parse_args(["--config", "c.yaml", "model.dim=32", "train.steps=2"])
    assert args.config == "c.yaml" and args.overrides == ["model.dim=32", "train.steps=2"]
    result = cli(["--config", str(tmp_path / "x.yaml"), "model.dim=32", "model.depth=1", "train.steps=2",
                  "train.batch_size=8", f"train.out_dir={tmp_path / 'run'}"])
    assert result["step"] == 2 and set(result["eval"]) == {"loss", "acc", "seq_acc"}
    assert load_config(tmp_path / "run" / "config.yaml").model.num_classes == 10  # resolved from the data


def test_model_must_fit_the_data_domain(tmp_path):
    cfg = fake_config(tmp_path, "image", "model.name=text")
    with pytest.raises(ValueError, match="model 'text' takes text data but dataset .* is 'image'"):
        main(cfg)


# -- the shipped configs on the built-in datasets --------------------------------------------
BUILT_IN = ["image_shapes", "audio_tones", "text_copy", "text_reverse", "text_addition", "text_lm",
            "video_trajectory", "coord", "coord_vit"]
TINY = {"vit": ["model.dim=32", "model.depth=1", "model.heads=4"], "audio": ["model.dim=32", "model.depth=1", "model.heads=4"],
        "text": ["model.dim=32", "model.depth=1", "model.heads=4"], "video": ["model.dim=48", "model.depth=1", "model.heads=4"],
        "conv": ["model.channels=[8,8]"]}


def built_in_config(tmp_path, name, *overrides):
    pytest.importorskip("train.data", reason="train.data not available yet")
    cfg = load_config(f"configs/{name}.yaml")
    size = [] if cfg.data.name in ("stdlib_lm", "not_so_clevr") else ["data.options.size=32"]
    return load_config(f"configs/{name}.yaml", TINY[cfg.model.name] + size + [
        "train.batch_size=8", "train.steps=2", "train.eval_batch_size=64", f"train.out_dir={tmp_path}",
        "optim.warmup_steps=1", *overrides])


@pytest.mark.parametrize("name", BUILT_IN)
def test_shipped_config_trains_on_its_built_in_data(tmp_path, name, monkeypatch):
    import train.main as tm

    real = tm.build_data
    monkeypatch.setattr(tm, "build_data", lambda cfg, split, **o: _head(real(cfg, split, **o), 64))
    result = main(built_in_config(tmp_path, name))
    assert result["step"] == 2 and math.isfinite(result["eval"]["loss"])


def _head(dataset, n):
    """The first ``n`` items, keeping the dataset's attributes (domain, task, num_classes...)."""
    from torch.utils.data import Subset

    sub = Subset(dataset, range(min(n, len(dataset))))
    for attr in ("domain", "task", "num_classes", "vocab_size"):
        if hasattr(dataset, attr):
            setattr(sub, attr, getattr(dataset, attr))
    return sub


def test_copy_task_loss_drops(tmp_path):
    cfg = built_in_config(tmp_path, "text_copy", "data.options.size=256", "train.steps=80", "optim.lr=3e-3",
                          "train.batch_size=32", "train.log_every=1", "data.options.length=4")
    cfg.train.epochs = 5
    main(cfg)
    steps = [json.loads(l)["loss"] for l in (tmp_path / "log.jsonl").read_text().splitlines()
             if json.loads(l)["phase"] == "train_step"]
    assert sum(steps[-5:]) / 5 < 0.8 * sum(steps[:5]) / 5, steps
