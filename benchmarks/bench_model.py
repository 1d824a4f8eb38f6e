"""Training-step time of a small reference ViT (``models.vit.ViT``) with rope or alibi vs no encoding.

One step = forward, cross-entropy, backward, AdamW step (``--amp``: under bf16 autocast on CUDA, as
``train.engine`` trains), in the forms users run it (``--forms``): eager, ``torch.compile(model)``, compiled with
CUDA graphs (``mode="reduce-overhead"``) or max-autotune without them; every row's overhead is against ``none`` in
the same form. ``--busy``: the GPU-busy time per step (kernels' summed time, ``torch.profiler``) and the MFU (the
step's forward + backward FLOPs, ``FlopCounterMode``, over the step time and the device's dense bf16 peak,
``bench_device.GPUS``). The models of one grid are timed in the same rounds, in a shuffled order per
round, and the median is reported with the overhead of each encoding over ``none`` and the loss of the
last step. Goal: <= 5% on CPU. Run from the repository root:

    python benchmarks/bench_model.py --threads 1 --repeats 7 --json model.json
    python benchmarks/bench_model.py --device cuda --amp --kinds none rope alibi rope-mixed --grids 14 --dim 384 \
        --depth 12 --heads 6 --patch 16 --batch 64      # ViT-S/16 at 224 px
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # reference models live in a checkout
from bench_rope import clock, time_interleaved  # noqa: E402  (same folder)
from models.vit import ViT  # noqa: E402
from train.engine import autocast  # noqa: E402
from ndpe.functional import set_rotary_kernel  # noqa: E402

ROTARY_KERNELS = ("auto", "eager", "compile", "triton")  # ndpe.functional.set_rotary_kernel
FORMS = {"eager": None, "compile": {}, "graphs": {"mode": "reduce-overhead"},
         "autotune": {"mode": "max-autotune-no-cudagraphs"}}  # torch.compile(model, **options)


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=7, help="timed rounds (median reported)")
    p.add_argument("--grids", type=int, nargs="+", default=[14, 32], help="patch grid side (square)")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--dim", type=int, default=192)
    p.add_argument("--depth", type=int, default=4)
    p.add_argument("--heads", type=int, default=3)
    p.add_argument("--patch", type=int, default=4)
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--clock", choices=["wall", "cpu"], default=None,
                   help="default: cpu time on CPU with 1 thread (shared machine), wall time otherwise")
    p.add_argument("--rope-kernels", nargs="+", default=["auto", "compile"], choices=ROTARY_KERNELS,
                   help="time rope with each rotary kernel (set_rotary_kernel); the first is the plain 'rope' row")
    p.add_argument("--kinds", nargs="+", default=["none", "rope", "alibi"],
                   help="encodings to time ('none' first: the overheads are against it)")
    p.add_argument("--amp", action="store_true", help="bf16 autocast (CUDA only, as train.engine.autocast)")
    p.add_argument("--forms", nargs="+", default=["eager"], choices=list(FORMS),
                   help="eager, torch.compile(model) ('compile'), and compiled with CUDA graphs ('graphs': mode "
                        "'reduce-overhead'); each row of every form")
    p.add_argument("--busy", action="store_true", help="also the GPU-busy time per step (torch.profiler) and MFU")
    p.add_argument("--json", default=None)
    return p


def train_step(model: ViT, opt: torch.optim.Optimizer, images: torch.Tensor, labels: torch.Tensor,
               amp: bool = False) -> torch.Tensor:
    with autocast(images.device, amp):
        loss = F.cross_entropy(model(images), labels)
    opt.zero_grad(set_to_none=True)
    loss.backward()
    opt.step()
    return loss.detach()


def row_names(args) -> list[str]:
    """Each of ``--kinds`` in order; rope with the first rotary kernel, then ``rope [kernel]`` for the others."""
    if args.kinds[0] != "none":
        raise SystemExit(f"--kinds must start with none (the overheads are against it), got {args.kinds}")
    names = []
    for kind in args.kinds:
        names += [kind, *(f"rope [{k}]" for k in args.rope_kernels[1:])] if kind == "rope" else [kind]
    return [n if form == "eager" else f"{n} ({form})" for form in args.forms for n in names]


def bench_grid(side: int, args, device: torch.device) -> dict[str, float]:
    """Median seconds per training step for each row of :func:`row_names` at a ``side x side`` patch grid."""
    images = torch.randn(args.batch, 3, side * args.patch, side * args.patch, device=device)
    labels = torch.randint(0, 10, (args.batch,), device=device)
    steps, losses = {}, {}
    for name in row_names(args):
        kind = name.split()[0]
        form = name[name.index("(") + 1:-1] if name.endswith(")") else "eager"
        kernel = name[len("rope ["):name.index("]")] if name.startswith("rope [") else args.rope_kernels[0]
        torch.manual_seed(0)  # same weights everywhere but the encoding
        model = ViT(num_classes=10, pe={"kind": kind}, dim=args.dim, depth=args.depth, heads=args.heads,
                    patch_size=args.patch).to(device).train()
        opt = torch.optim.AdamW(model.parameters(), lr=1e-4)
        run = model if form == "eager" else torch.compile(model, **FORMS[form])

        def step(model=run, opt=opt, kernel=kernel, name=name, graphs=form == "graphs"):
            set_rotary_kernel(kernel)  # rows run in shuffled order: each sets its own
            if graphs:
                torch.compiler.cudagraph_mark_step_begin()
            losses[name] = train_step(model, opt, images, labels, args.amp).clone()
        steps[name] = step
    times = time_interleaved(steps, args.repeats, device, clock(args.clock), warmup=3)
    extra = {name: busy(fn, device) for name, fn in steps.items()} if args.busy else {}
    return times, {name: loss.item() for name, loss in losses.items()}, extra


def busy(step, device: torch.device, steps: int = 3) -> float | None:
    """Seconds per step the GPU runs kernels (``torch.profiler``: their summed time; None off CUDA)."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(steps):
            step()
        torch.cuda.synchronize()
    return sum(e.self_device_time_total for e in prof.key_averages() if e.device_type.name == "CUDA") / 1e6 / steps


def step_flops(side: int, args, device: torch.device) -> float:
    """FLOPs of one training step's forward and backward (``FlopCounterMode``; the model without encoding)."""
    from torch.utils.flop_counter import FlopCounterMode
    model = ViT(num_classes=10, pe={"kind": "none"}, dim=args.dim, depth=args.depth, heads=args.heads,
                patch_size=args.patch).to(device)
    images = torch.randn(args.batch, 3, side * args.patch, side * args.patch, device=device)
    with FlopCounterMode(display=False) as counter:
        with autocast(device, args.amp):
            loss = model(images).float().logsumexp(-1).sum()
        loss.backward()
    return float(counter.get_total_flops())


def main(args) -> list[dict]:
    device = torch.device(args.device)
    torch.set_num_threads(args.threads)
    if args.clock is None:
        args.clock = "cpu" if device.type == "cpu" and args.threads == 1 else "wall"
    print(f"torch {torch.__version__}, device {device}, threads {torch.get_num_threads()}, repeats {args.repeats}, {args.clock} clock; "
          f"ViT dim={args.dim} depth={args.depth} heads={args.heads} patch={args.patch} batch={args.batch}, cls token, AdamW; "
          f"rope rows: rotary kernel {args.rope_kernels[0]!r}, then {args.rope_kernels[1:]}")
    from bench_device import peak
    flops_peak = peak(torch.cuda.get_device_name())[1] if device.type == "cuda" else None
    rows = []
    for side in args.grids:
        t, loss, gpu = bench_grid(side, args, device)
        flops = step_flops(side, args, device) if args.busy else None
        print(f"\ngrid {side}x{side} ({side * side} patches + cls)" + (f", {flops / 1e12:.2f} TFLOP a step" if flops else ""))
        for name in row_names(args):
            base = "none" + (name[name.index(" ("):] if name.endswith(")") else "")
            overhead = (t[name] / t[base] - 1) * 100  # against none in the same form
            row = {"grid": [side, side], "kind": name, "ms_per_step": t[name] * 1e3, "overhead_pct": overhead,
                   "loss": loss[name], "amp": args.amp}
            if gpu.get(name) is not None:
                row.update(gpu_busy_ms=gpu[name] * 1e3, busy_fraction=gpu[name] / t[name])
            if flops and flops_peak:
                row["mfu"] = flops / t[name] / flops_peak
            print(f"  {name:28s} {t[name] * 1e3:9.1f} ms/step  {overhead:+6.1f}% vs {base:16s} loss {loss[name]:.4f}"
                  + (f"  GPU busy {row['gpu_busy_ms']:.1f} ms" if "gpu_busy_ms" in row else "")
                  + (f"  MFU {row['mfu']:.3f}" if "mfu" in row else ""))
            rows.append(row)
    if args.json:
        meta = {"torch": torch.__version__, "device": str(device), "threads": torch.get_num_threads(),
                "date": time.strftime("%Y-%m-%d %H:%M"), **{k: v for k, v in vars(args).items() if k != "json"}}
        with open(args.json, "w") as f:
            json.dump({"meta": meta, "rows": rows}, f, indent=1)
    return rows


if __name__ == "__main__":
    main(get_args_parser().parse_args())
