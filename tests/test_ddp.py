"""DistributedDataParallel on CPU (gloo): two processes agree, and match one process with the same global batch.

With ``DistributedSampler`` rank ``r`` takes items ``r::2`` of the epoch's permutation, so two ranks
with batch 8 see exactly the 16 items one process with batch 16 sees at each step; averaged gradients
then give the same weights up to float summation order.
"""
from __future__ import annotations

import os
import socket
import subprocess
import sys

import pytest
import torch
import torch.multiprocessing as mp

from test_train import fake_config
from train import dist
from train.checkpoint import load_checkpoint
from train.main import fit

RUN = ["model.pe.kind=rope", "train.steps=6", "train.epochs=1"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker(rank: int, world: int, port: int, out_dir: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank), WORLD_SIZE=str(world),
                      LOCAL_RANK=str(rank))
    torch.set_num_threads(1)
    try:
        model, result = fit(fake_config(out_dir, "image", *RUN, "train.batch_size=8"))
        torch.save({"model": model.state_dict(), "eval": result["eval"]}, os.path.join(out_dir, f"rank{rank}.pt"))
    finally:
        dist.cleanup()


def test_two_ranks_end_identical_and_match_one_process(tmp_path):
    mp.spawn(_worker, args=(2, free_port(), str(tmp_path / "ddp")), nprocs=2, join=True)
    ranks = [torch.load(tmp_path / "ddp" / f"rank{r}.pt", weights_only=True) for r in range(2)]
    for name, a in ranks[0]["model"].items():
        assert torch.equal(a, ranks[1]["model"][name]), name
    assert ranks[0]["eval"] == ranks[1]["eval"]
    assert sorted(p.name for p in (tmp_path / "ddp").iterdir()) == [
        "checkpoint.pt", "config.yaml", "log.jsonl", "rank0.pt", "rank1.pt"]
    assert len(load_checkpoint(tmp_path / "ddp" / "checkpoint.pt")["rng"]) == 2  # every rank's RNG state

    single, result = fit(fake_config(tmp_path / "one", "image", *RUN, "train.batch_size=16"))
    for name, a in single.state_dict().items():
        torch.testing.assert_close(ranks[0]["model"][name], a, atol=1e-5, rtol=1e-4, msg=name)
    assert ranks[0]["eval"] == pytest.approx(result["eval"], rel=1e-4)


@pytest.mark.slow
def test_torchrun_cli(tmp_path):
    """The documented command line: ``torchrun --nproc_per_node=2 -m train.main ...``."""
    cfg = [o for o in ["data.name=tests.test_train:fake", "data.allow_import=true", "data.options.kind=image", "model.name=vit",
                       "model.patch_size=4", "model.dim=32", "model.depth=1", "model.heads=4",
                       "train.batch_size=8", f"train.out_dir={tmp_path}", *RUN]]
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_port", str(free_port()),
           "-m", "train.main", *cfg]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.getcwd()}
    subprocess.run(cmd, check=True, env=env, timeout=300, capture_output=True)
    assert load_checkpoint(tmp_path / "checkpoint.pt")["global_step"] == 6
