"""Multi-process helpers for ``torchrun`` (DistributedDataParallel; gloo on CPU, nccl on CUDA)."""
from __future__ import annotations

import os

import torch
import torch.distributed as dist


def init_distributed(device: torch.device) -> tuple[int, int]:
    """Join the process group ``torchrun`` describes in the environment; returns ``(rank, world_size)``.

    Without ``WORLD_SIZE`` in the environment (a plain ``python`` run) nothing happens and ``(0, 1)``.
    """
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world == 1 or (dist.is_available() and dist.is_initialized()):
        return get_rank(), get_world_size()
    backend = "nccl" if device.type == "cuda" else "gloo"
    if device.type == "cuda":
        torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", "0")))
    dist.init_process_group(backend)
    return dist.get_rank(), dist.get_world_size()


def get_rank() -> int:
    return dist.get_rank() if dist.is_available() and dist.is_initialized() else 0


def get_world_size() -> int:
    return dist.get_world_size() if dist.is_available() and dist.is_initialized() else 1


def is_main() -> bool:
    """True on the process that writes logs and checkpoints (rank 0)."""
    return get_rank() == 0


def all_reduce_sum(values: dict[str, float], device: torch.device) -> dict[str, float]:
    """Sum a dict of numbers over all processes (identity in a single process)."""
    if get_world_size() == 1 or not values:
        return values
    keys = sorted(values)
    t = torch.tensor([float(values[k]) for k in keys], dtype=torch.float64, device=device)
    dist.all_reduce(t)
    return dict(zip(keys, t.tolist()))


def any_rank(flag: bool, device: torch.device) -> bool:
    """True on every process when ``flag`` is true on any (a decision all ranks act on together, e.g. a checkpoint)."""
    return bool(all_reduce_sum({"flag": float(flag)}, device)["flag"])


def all_gather_object(obj):
    """``[obj of rank 0, obj of rank 1, ...]`` (``[obj]`` in a single process)."""
    if get_world_size() == 1:
        return [obj]
    out = [None] * get_world_size()
    dist.all_gather_object(out, obj)
    return out


def barrier() -> None:
    if get_world_size() > 1:
        dist.barrier()


def cleanup() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
