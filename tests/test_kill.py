"""Kills at random moments lose nothing (slow: ``bash scripts/test.sh -m slow``).

A training run (``python -m train.main``, of the reference ViT and of a timm ViT made positional by
``ndpe.timm.use``) and the quick benchmark (``python -m train.bench --quick``) are SIGKILLed a few times at
random moments, then resumed / rerun: the checkpoint loads, the resumed run ends with the same weights and
metrics as an uninterrupted one, log.jsonl holds each step and epoch once, results.csv reads back with whole
cells only, and no temp file is left behind.
"""
from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from train.checkpoint import load_checkpoint
from train.report import read_rows

pytestmark = pytest.mark.slow
ROOT = Path(__file__).resolve().parent.parent
KILLS = 3
ENV = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": str(ROOT), "CI": "1"}

TRAIN = ["data.name=tests.test_train:fake", "data.allow_import=true", "data.options.kind=image", "model.name=vit",
         "model.patch_size=4", "model.dim=16", "model.depth=1", "model.heads=2", "model.drop=0.1",
         "model.pe.kind=rope", "train.batch_size=16", "train.epochs=8", "train.save_every=1", "train.log_every=1",
         "optim.warmup_steps=2", "train.device=cpu"]
# the drop-in path: the same run on a timm ViT made positional by ndpe.timm.use
TRAIN_TIMM = [a for a in TRAIN if a != "model.name=vit"] + ["model.name=timm", "model.timm_name=vit_tiny_patch16_224"]
BENCH = ["--quick", "tasks=[text/copy]", "task_kinds={}", "kinds=[none]", "seeds=[0,1]", "default_steps=30",
         "steps={}", "train_items=64", "test_items=8", "batch_size=8", "dim=16", "heads=2", "depth=1",
         "rope_variants=[]", "workers=1", "lr_file=null"]


def start(module: str, *args: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", module, *args], cwd=ROOT, env=ENV, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)


def run_to_end(module: str, *args: str) -> float:
    """Run the command to its end; returns its wall time (the window the kills are drawn from)."""
    t0 = time.monotonic()
    proc = start(module, *args)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err
    return time.monotonic() - t0


def written_at(path: Path | None) -> float | None:
    return path.stat().st_mtime_ns if path is not None and path.exists() else None


def kill_at_random(module: str, args, rng: random.Random, window: tuple[float, float], after: Path | None = None,
                   sig: int = signal.SIGKILL) -> bool:
    """Start the command, send it ``sig`` after a random delay (counted from the moment it has written ``after``
    anew, when given: a kill that lands after a checkpoint of its own); False when it finished first."""
    proc = start(module, *args)
    before = written_at(after)
    while after is not None and written_at(after) == before and proc.poll() is None:
        time.sleep(0.01)
    deadline = time.monotonic() + rng.uniform(*window)
    while time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.01)
    if proc.poll() is not None:
        assert proc.returncode == 0, proc.stderr.read()
        return False
    proc.send_signal(sig)
    proc.wait(timeout=60)
    return True


def epoch_records(run: Path) -> list[dict]:
    return [r for r in map(json.loads, (run / "log.jsonl").read_text().splitlines()) if r["phase"] == "epoch"]


def no_temp_files(root: Path) -> list[Path]:
    return [p for p in root.rglob("*.tmp")]


@pytest.mark.parametrize("train", [TRAIN, TRAIN_TIMM], ids=["vit", "timm"])
def test_killed_training_resumes_to_the_same_result(tmp_path, train):
    rng = random.Random(int(os.environ.get("KILL_SEED", "0")))
    ref = tmp_path / "ref"
    wall = run_to_end("train.main", *train, f"train.out_dir={ref}")
    run = tmp_path / "killed"
    ckpt = run / "checkpoint.pt"
    epoch_s = max(r["train_time"] for r in epoch_records(ref))  # one epoch's training, checkpoint apart
    kills = []
    for i in range(KILLS):
        resume = [f"train.resume={ckpt}"] if ckpt.exists() else []
        # the first kill at any moment (a fresh start, or mid-way); the others within an epoch of a checkpoint their
        # own run wrote (while it trains the next epoch or writes its checkpoint), so that a resumed run is killed and
        # resumed again: within two epochs, a run resumed two epochs before its end often finished first
        window, wait = ((0.3 * wall, 0.7 * wall), None) if i == 0 else ((0.0, epoch_s), ckpt)
        kills.append(kill_at_random("train.main", [*train, f"train.out_dir={run}", *resume], rng, window, after=wait))
        if ckpt.exists():
            load_checkpoint(ckpt)  # whatever moment the kill hit, the checkpoint on disk is whole
    assert sum(kills[1:]) >= 1  # at least one kill after a checkpoint of its own run
    resume = [f"train.resume={ckpt}"] if ckpt.exists() else []
    run_to_end("train.main", *train, f"train.out_dir={run}", *resume)

    got, want = load_checkpoint(ckpt), load_checkpoint(ref / "checkpoint.pt")
    assert got["global_step"] == want["global_step"]
    for name, tensor in want["model"].items():
        assert torch.equal(got["model"][name], tensor), name
    epochs, ref_epochs = epoch_records(run), epoch_records(ref)
    assert [r["epoch"] for r in epochs] == [r["epoch"] for r in ref_epochs] == list(range(8))  # each epoch once
    strip = lambda r: {k: v for k, v in r.items() if k.startswith("eval_")}  # noqa: E731
    assert strip(epochs[-1]) == strip(ref_epochs[-1]) and strip(ref_epochs[-1])
    steps = [json.loads(line)["step"] for line in (run / "log.jsonl").read_text().splitlines()
             if json.loads(line)["phase"] == "train_step"]
    assert steps == list(range(1, want["global_step"] + 1))
    assert no_temp_files(tmp_path) == []


def test_killed_benchmark_reruns_to_whole_results(tmp_path):
    rng = random.Random(int(os.environ.get("KILL_SEED", "0")))
    wall = run_to_end("train.bench", *BENCH, f"out_root={tmp_path / 'ref'}")
    out = tmp_path / "killed"
    kills = 0
    for _ in range(KILLS):
        kills += kill_at_random("train.bench", [*BENCH, f"out_root={out}"], rng, (0.5 * wall, 0.85 * wall))
        results = out / "quick" / "results.csv"
        rows = read_rows(results)  # whole cells only, whatever the moment of the kill
        assert all(r.task == "text/copy" for r in rows)
    assert kills >= 1
    run_to_end("train.bench", *BENCH, f"out_root={out}")
    key = lambda r: (r.task, r.kind, r.variant, r.seed, r.test_size, r.value)  # noqa: E731
    got = sorted(map(key, read_rows(out / "quick" / "results.csv")))
    want = sorted(map(key, read_rows(tmp_path / "ref" / "quick" / "results.csv")))
    assert got == want and got
    assert (out / "quick" / "report.md").is_file()
    for ckpt in (out / "quick").rglob("checkpoint.pt"):
        load_checkpoint(ckpt)


def test_sigterm_ends_the_benchmark_as_ctrl_c_does(tmp_path):
    """SIGTERM (a scheduler's stop, ``kill``) on ``python -m train.bench``: the pool stops, the invocation's end line
    is written with status ``interrupted`` (as for Ctrl-C), the exit status is 128 + 15, and the rerun finishes."""
    out = tmp_path / "out"
    rng = random.Random(0)
    assert kill_at_random("train.bench", [*BENCH, f"out_root={out}"], rng, (0.5, 1.0),
                          after=out / "quick" / "invocations.jsonl", sig=signal.SIGTERM)
    lines = [json.loads(line) for line in (out / "quick" / "invocations.jsonl").read_text().splitlines()]
    assert [r["status"] for r in lines] == ["started", "interrupted"] and lines[0]["id"] == lines[1]["id"]
    run_to_end("train.bench", *BENCH, f"out_root={out}")
    assert json.loads((out / "quick" / "invocations.jsonl").read_text().splitlines()[-1])["status"] == "finished"
