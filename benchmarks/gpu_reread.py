"""A committed GPU check read against the hardware: its numbers as measured, framed by the device's physical peaks.

The first checks timed RoPE against ``q.clone(); k.clone()`` on qkv views (PyTorch's strided copy, called "the floor")
and the training step against ``none``. This reads their JSON files again and prints, per row, the bytes the old check
counted (4 x |q| forward, 8 x |q| forward + backward: read q and k, write two outputs, and back) over its time, as a
fraction of the device's HBM peak (``bench_device.GPUS``); the training step's MFU (the step's forward + backward
FLOPs, ``FlopCounterMode`` on the CPU at batch 1, times the batch, over its time and the dense bf16 peak); and the
bias rows' SDPA time against SDPA without a mask. Forward + backward rows time autograd's own work too (the qkv
gradient's zeros, stack and copy): their real traffic is several times the 8 x |q| counted, so their fractions are
upper bounds of nothing and lower bounds of the bandwidth reached.

    python benchmarks/gpu_reread.py benchmarks/results/gpu/2026-11-27-h200 [--device-name "NVIDIA H200"]
"""
from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_device import peak  # noqa: E402  (same folder)

ROOT = Path(__file__).resolve().parents[1]


def vit_step_flops(batch: int, dim: int = 384, depth: int = 12, heads: int = 6, patch: int = 16, side: int = 14) -> float:
    """Forward + backward FLOPs of the reference ViT (no encoding) at ``batch``: counted at batch 1, times ``batch``."""
    sys.path.insert(0, str(ROOT))
    from torch.utils.flop_counter import FlopCounterMode

    from models.vit import ViT
    model = ViT(num_classes=10, pe={"kind": "none"}, dim=dim, depth=depth, heads=heads, patch_size=patch)
    with FlopCounterMode(display=False) as counter:
        model(torch.randn(1, 3, side * patch, side * patch)).logsumexp(-1).sum().backward()
    return counter.get_total_flops() * batch


def main(argv=None) -> str:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder", type=Path)
    p.add_argument("--device-name", default=None, help="default: env.json's device")
    args = p.parse_args(argv)
    env = json.loads((args.folder / "env.json").read_text())
    name = args.device_name or env["device"]
    hbm, flops_peak = peak(name)
    out = [f"{name}: HBM peak {hbm / 1e12:.2f} TB/s, dense bf16 {flops_peak / 1e12:.0f} TFLOPS (bench_device.GPUS)", ""]
    rope = json.loads((args.folder / "rope.json").read_text())["rows"]
    out += ["| shape | dtype | pass | method | ms | GB counted | TB/s | of HBM peak |", "|---|---|---|---|---|---|---|---|"]
    for r in rope:
        if "gb_s" not in r or r["shape"] not in ("vit-s 14x14", "1d 32k"):
            continue
        size = r["batch"] * r["heads"] * r["head_dim"] * torch.Size(r["grid"]).numel() * (4 if r["dtype"] == "float32" else 2)
        moved = 4 * size * (2 if r["grad"] else 1)
        bw = moved / (r["ms"] / 1e3)
        out.append(f"| {r['shape']} | {r['dtype']} | {'fwd+bwd' if r['grad'] else 'fwd'} | {r['method']} | {r['ms']:.3f} "
                   f"| {moved / 1e9:.3f} | {bw / 1e12:.2f} | {bw / hbm:.2f} |")
    train = json.loads((args.folder / "train.json").read_text())["steps"]
    flops = vit_step_flops(64)
    out += ["", f"ViT-S/16 training step, B = 64: {flops / 1e12:.2f} TFLOP forward + backward, "
                f"{flops / flops_peak * 1e3:.2f} ms at the dense bf16 peak", "",
            "| kind | ms / step | MFU |", "|---|---|---|"]
    out += [f"| {r['kind']} | {r['ms_per_step']:.1f} | {flops / (r['ms_per_step'] / 1e3) / flops_peak:.3f} |" for r in train]
    bias_path = args.folder / "bias_16k_fresh_graphs.json"
    if bias_path.exists():
        bias = json.loads(bias_path.read_text())["rows"]
        out += ["", "| N = 16384 | SDPA no mask ms | SDPA + cached mask ms | x no mask | flex ms | x no mask |",
                "|---|---|---|---|---|---|"]
        for r in bias:
            if r["N"] == 16384 and isinstance(r.get("sdpa ms"), float) and isinstance(r.get("flex ms"), float):
                out.append(f"| {r['kind']} | {r['sdpa ms']:.2f} | {r.get('sdpa+bias ms', float('nan')):.1f} | "
                           f"{r.get('sdpa+bias ms', float('nan')) / r['sdpa ms']:.1f} | {r['flex ms']:.1f} | "
                           f"{r['flex ms'] / r['sdpa ms']:.1f} |")
    text = "\n".join(out)
    print(text)
    return text


if __name__ == "__main__":
    main()
