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

from train.config import ConfigError, load_config
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

    (tmp_path / "x.yaml").write_text("data: {name: 'tests.test_train:fake', options: {kind: text}}\n"
                                     "model: {name: text}\n")
    args = get_args_parser().parse_args(["--config", "c.yaml", "model.dim=32", "train.steps=2"])
    assert args.config == "c.yaml" and args.overrides == ["model.dim=32", "train.steps=2"]
    result = cli(["--config", str(tmp_path / "x.yaml"), "data.allow_import=true", "model.dim=32", "model.depth=1", "train.steps=2",
                  "train.batch_size=8", f"train.out_dir={tmp_path / 'run'}"])
    assert result["step"] == 2 and set(result["eval"]) == {"loss", "acc", "seq_acc"}
    saved = load_config(tmp_path / "run" / "config.yaml", ["data.allow_import=true"])  # never read from a file
    assert saved.model.num_classes == 10  # resolved from the data


def test_model_must_fit_the_data_domain(tmp_path):
    cfg = fake_config(tmp_path, "image", "model.name=text")
    with pytest.raises(ValueError, match="model 'text' takes text data but dataset .* is 'image'"):
        main(cfg)


# -- the shipped configs on the built-in datasets --------------------------------------------
BUILT_IN = ["image_shapes", "image_shapes_mixed", "audio_tones", "text_copy", "text_reverse", "text_addition", "text_lm",
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


def test_mixed_sizes_train_in_packed_batches(tmp_path, monkeypatch):
    """data.mixed_sizes: each training batch holds several image sizes, packed (forward_packed); eval is plain."""
    import train.main as tm
    from models.vit import ViT

    real, seen = tm.build_data, []
    monkeypatch.setattr(tm, "build_data", lambda cfg, split, **o: _head(real(cfg, split, **o), 64))
    original = ViT.forward_packed
    monkeypatch.setattr(ViT, "forward_packed", lambda self, images: (seen.append({x.shape[-1] for x in images}),
                                                                      original(self, images))[1])
    result = main(built_in_config(tmp_path, "image_shapes_mixed"))
    assert result["step"] == 2 and math.isfinite(result["eval"]["loss"])
    assert len(seen) == 2 and all(len(sizes) > 1 for sizes in seen) and set.union(*seen) <= {32, 48, 64}
    with pytest.raises(ConfigError, match="no forward_packed"):
        main(built_in_config(tmp_path / "t", "text_copy", "data.mixed_sizes=[8,16]"))


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


# -- progress bar, log lines, TensorBoard -------------------------------------------------------
class _TTY:
    """A terminal stand-in: a text buffer that says it is a TTY (so the progress bar is drawn)."""

    def __init__(self):
        import io

        self.buffer = io.StringIO()

    def write(self, text):
        return self.buffer.write(text)

    def flush(self):
        pass

    def isatty(self):
        return True


def _screen_lines(text: str) -> list[str]:
    """What a terminal shows for each finished line of ``text``: ``\\r`` returns to column 0 and overwrites."""
    shown = []
    for raw in text.split("\n")[:-1]:
        row: list[str] = []
        col = 0
        for ch in raw:
            if ch == "\r":
                col = 0
                continue
            row[col:col + 1] = [ch]
            col += 1
        shown.append("".join(row).rstrip())
    return shown


@pytest.fixture
def bars(monkeypatch):
    """Every tqdm the training loop creates, drawn (as on a terminal) into a buffer; the list of them."""
    import io

    import train.engine as engine

    made = []

    class Recorded(engine.tqdm):
        def __init__(self, *args, **kwargs):
            kwargs.update(disable=False, file=io.StringIO())
            super().__init__(*args, **kwargs)
            made.append(self)

    monkeypatch.setattr(engine, "tqdm", Recorded)
    return made


def test_progress_bar_counts_optimizer_steps_of_the_whole_run(tmp_path, bars):
    cfg = fake_config(tmp_path, "image", "train.epochs=2", "train.log_every=0")  # 64 items / 16: 4 steps per epoch
    fit(cfg)
    train_bars = [(b.desc, b.initial, b.n, b.total) for b in bars if b.desc.startswith("epoch")]
    assert train_bars == [("epoch 0", 0, 4, 8), ("epoch 1", 4, 8, 8)]
    assert all(b.unit == "step" for b in bars if b.desc.startswith("epoch"))


def test_progress_bar_of_a_resumed_run_starts_at_the_resumed_step(tmp_path, bars):
    fit(fake_config(tmp_path, "image", "train.epochs=2", "train.stop_after=3", "train.log_every=0"))
    bars.clear()
    result = main(fake_config(tmp_path, "image", "train.epochs=2", "train.log_every=0",
                              f"train.resume={tmp_path / 'checkpoint.pt'}"))
    assert result["step"] == 8
    assert [(b.initial, b.n, b.total) for b in bars if b.desc.startswith("epoch")] == [(3, 4, 8), (4, 8, 8)]


def test_train_one_epoch_bar_total_can_be_the_whole_run(bars):
    from train.engine import train_one_epoch

    class NoSchedule:
        def step_update(self, num_updates):
            pass

    model = torch.nn.Linear(3, 2)
    loader = [(torch.randn(4, 3), torch.randint(2, (4,))) for _ in range(5)]
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    _, step = train_one_epoch(model, loader, opt, NoSchedule(), task="classify", device=torch.device("cpu"),
                              epoch=2, global_step=10, max_steps=13, total_steps=40, amp=False, log_every=0)
    assert step == 13
    assert (bars[-1].initial, bars[-1].n, bars[-1].total) == (10, 13, 40)


def test_log_lines_go_above_the_bar(tmp_path, monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    term = _TTY()
    monkeypatch.setattr("sys.stdout", term)
    monkeypatch.setattr("sys.stderr", term)  # bar and log lines share one terminal
    fit(fake_config(tmp_path, "image", "train.epochs=2"))
    text = term.buffer.getvalue()
    assert "epoch 0:" in text and "/8 [" in text  # the bar was drawn, with the run's 8 steps as total
    shown = _screen_lines(text)
    records = [json.loads(line) for line in shown]  # every finished line is one whole JSON record
    assert [r["phase"] for r in records].count("train_step") == 8
    assert records == [json.loads(l) for l in (tmp_path / "log.jsonl").read_text().splitlines()]


def test_tensorboard_missing_is_one_line(tmp_path, monkeypatch):
    from train.config import ConfigError
    from train.engine import JsonlLogger

    monkeypatch.setitem(__import__("sys").modules, "tensorboard", None)  # import tensorboard -> ImportError
    with pytest.raises(ConfigError, match=r"needs the tensorboard package.*: pip install tensorboard$") as info:
        JsonlLogger(tmp_path / "log.jsonl", tensorboard=True)
    assert "\n" not in str(info.value)


def test_tensorboard_writes_numeric_scalars_per_phase(tmp_path, monkeypatch):
    """The writer path with a stand-in SummaryWriter (tensorboard itself is an optional install)."""
    import sys
    import types

    from train.engine import JsonlLogger

    calls = []

    class FakeWriter:
        def __init__(self, log_dir):
            calls.append(("init", log_dir))

        def add_scalar(self, tag, value, global_step=None):
            calls.append((tag, value, global_step))

        def flush(self):
            calls.append(("flush",))

        def close(self):
            calls.append(("close",))

    monkeypatch.setitem(sys.modules, "tensorboard", types.ModuleType("tensorboard"))
    fake = types.ModuleType("torch.utils.tensorboard")
    fake.SummaryWriter = FakeWriter
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", fake)
    log = JsonlLogger(tmp_path / "log.jsonl", echo=False, tensorboard=True)
    log({"phase": "train_step", "epoch": 0, "step": 5, "loss": 0.5, "lr": 1e-3})
    log({"phase": "epoch", "epoch": 0, "step": 8, "train_loss": 0.4, "eval_acc": 0.9, "note": "x", "ok": True})
    log.close()
    assert calls == [("init", str(tmp_path / "tb")), ("train_step/loss", 0.5, 5), ("train_step/lr", 1e-3, 5),
                     ("epoch/train_loss", 0.4, 8), ("epoch/eval_acc", 0.9, 8), ("flush",), ("close",)]
    assert len((tmp_path / "log.jsonl").read_text().splitlines()) == 2


def test_help_lists_every_config_key_with_type_and_default():
    import dataclasses
    import subprocess
    import sys
    import typing

    from train.config import Config
    from train.main import get_args_parser

    text = get_args_parser().format_help()

    def keys(cls, prefix=""):
        hints = typing.get_type_hints(cls)
        for f in dataclasses.fields(cls):
            if dataclasses.is_dataclass(hints[f.name]):
                yield from keys(hints[f.name], f"{prefix}{f.name}.")
            else:
                yield prefix + f.name, f

    for key, f in keys(Config):
        assert f"  {key}: " in text, key
    assert "optim.lr: float = 0.001" in text and "train.tensorboard: bool = False" in text
    assert "model.dim: int | None = None" in text and "model.pe.kind: str | dict = 'none'" in text  # a kind per axis too
    assert "data.options: dict = {}" in text and "a name from ndpe.available()" in text
    run = subprocess.run([sys.executable, "-m", "train.main", "--help"], capture_output=True, text=True, timeout=120)
    assert run.returncode == 0 and "train.batch_size: int = 32" in run.stdout
