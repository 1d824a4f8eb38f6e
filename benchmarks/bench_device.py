"""RoPE on a GPU against the hardware's limits: device, kernel and host time, bytes moved, fraction of the HBM peak.

Every figure is read against the device's physical peak (:data:`GPUS`, from the vendors' datasheets) and beside a
measured contiguous copy (``y.copy_(x)``, the bandwidth a kernel can reach), not against the strided clone of q and
k (``q.clone(); k.clone()`` of qkv views, PyTorch's strided copy, which the first H200 check called the floor and
which reached 0.34 of that GPU's peak). Per method and shape:

- ``device ms``: CUDA events around each call (median): what the GPU spends, launches included;
- ``kernel ms``: the kernels' own time from ``torch.profiler`` (sum per call): the device time without the gaps;
- ``host ms``: the CPU time to issue one call (no synchronization): at ViT sizes the step's real cost;
- ``MB``: the bytes the call really moves, forward (and backward with ``--grad``, autograd's own ops included):
  every ATen op's operands (``rope_traffic.OpTraffic``), plus each Triton launch's loads and stores;
- ``of peak``: ``MB / kernel time`` over the HBM peak; ``of copy``: over the contiguous copy's measured bandwidth.

    python benchmarks/bench_device.py --json device.json                  # on a CUDA machine
    python benchmarks/bench_device.py --device cpu --shapes tiny --repeats 2   # the dry run
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rope_traffic import OpTraffic  # noqa: E402  (same folder)

import ndpe  # noqa: E402
from ndpe.functional import rotary_kernel  # noqa: E402
from ndpe.kernels import triton as fused  # noqa: E402

# name fragment -> (HBM TB/s, dense bf16 TFLOPS), the first match in order; sources: the vendors' datasheets
GPUS = [
    ("H200", 4.8, 989.0),            # NVIDIA H200 datasheet (SXM): 4.8 TB/s HBM3e, BF16 1,979 TFLOPS with sparsity
    ("H100 NVL", 3.9, 835.0),        # NVIDIA H100 datasheet, NVL: 3.9 TB/s, BF16 1,671 TFLOPS with sparsity
    ("H100 PCIe", 2.0, 756.0),       # NVIDIA H100 datasheet, PCIe: 2.0 TB/s, BF16 1,513 TFLOPS with sparsity
    ("H100", 3.35, 989.0),           # NVIDIA H100 datasheet, SXM: 3.35 TB/s, BF16 1,979 TFLOPS with sparsity
    ("B200", 8.0, 2250.0),           # NVIDIA HGX B200 datasheet: 8 TB/s per GPU, BF16 4.5 PFLOPS with sparsity
    ("A100-SXM4-40GB", 1.555, 312.0),  # NVIDIA A100 datasheet: 40 GB SXM 1,555 GB/s; BF16 312 TFLOPS dense
    ("A100 80GB PCIe", 1.935, 312.0),  # NVIDIA A100 datasheet: 80 GB PCIe 1,935 GB/s
    ("A100", 2.039, 312.0),          # NVIDIA A100 datasheet: 80 GB SXM 2,039 GB/s
    ("L40S", 0.864, 362.0),          # NVIDIA L40S datasheet: 864 GB/s, BF16 733 TFLOPS with sparsity
    ("L4", 0.3, 121.0),              # NVIDIA L4 datasheet: 300 GB/s, BF16 242 TFLOPS with sparsity
    ("A10", 0.6, 125.0),             # NVIDIA A10 datasheet: 600 GB/s, BF16 250 TFLOPS with sparsity
]
SHAPES = {"vit-s B=64": (64, 6, (14, 14), 64), "1d 32k": (8, 6, (32768,), 64), "tiny": (2, 2, (4, 4), 16)}


def peak(name: str) -> tuple[float | None, float | None]:
    """(HBM bytes/s, dense bf16 FLOP/s) of a device named ``name`` (``torch.cuda.get_device_name()``), else Nones."""
    for fragment, tb_s, tflops in GPUS:
        if fragment in name:
            return tb_s * 1e12, tflops * 1e12
    return None, None


def device_time(fn, repeats: int, device: torch.device) -> float:
    """Median seconds of ``fn()`` on the device: CUDA events around each call (wall time on CPU)."""
    fn()
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            end.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def host_time(fn, repeats: int, device: torch.device) -> float:
    """Median seconds the CPU takes to issue ``fn()`` (the device left to run behind it)."""
    times = []
    for _ in range(repeats):
        if device.type == "cuda":
            torch.cuda.synchronize()
        t0 = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t0)
    if device.type == "cuda":
        torch.cuda.synchronize()
    return statistics.median(times)


def kernel_time(fn, calls: int, device: torch.device) -> float | None:
    """Seconds of device kernels per call, from ``torch.profiler`` (None off CUDA)."""
    if device.type != "cuda":
        return None
    from torch.profiler import ProfilerActivity, profile
    fn()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
    total = sum(e.self_device_time_total for e in prof.key_averages() if e.device_type.name == "CUDA")
    return total / 1e6 / calls


def bytes_moved(fn) -> int:
    """Bytes ``fn()`` reads and writes: its ATen ops (OpTraffic) and its Triton launches' loads and stores."""
    launches = []
    launch = fused._launch

    def counted(x, k, cos, sin, *rest):
        tensors = 1 if k is None else 2
        launches.append(2 * tensors * x.numel() * x.element_size() + 2 * cos.numel() * cos.element_size())
        return launch(x, k, cos, sin, *rest)
    fused._launch = counted
    try:
        with OpTraffic() as ops:
            fn()
    finally:
        fused._launch = launch
    return ops.read + ops.written + sum(launches)


def methods(shape: str, dtype, device, grad: bool) -> tuple[dict, int]:
    """``name -> fn()`` for one shape, and the bytes of q and k."""
    from ndpe.kernels.qkv import qk_views, rotary_qkv_

    batch, heads, grid, head_dim = SHAPES[shape]
    pe = ndpe.make(dims=len(grid), kind="rope", dim=heads * head_dim, heads=heads).to(device)
    pos = pe(grid)
    n = pos.num_tokens
    qkv = torch.randn(batch, n, 3, heads, head_dim, device=device, dtype=dtype, requires_grad=grad)
    flat = torch.empty(2 * batch * n * heads * head_dim, device=device, dtype=dtype)
    copy_out = torch.empty_like(flat)
    grads = [torch.randn(batch, heads, n, head_dim, device=device, dtype=dtype) for _ in range(2)]

    def kernel(name):
        def run():
            with rotary_kernel(name):
                q, k = ndpe.apply_qk(*qk_views(qkv), pos)
            if grad:
                torch.autograd.backward([q, k], grads)
                qkv.grad = None
        return run

    def in_place():
        out = rotary_qkv_(qkv * 1 if grad else qkv, *pos.rot)  # a leaf cannot change in place: its product does
        if grad:
            torch.autograd.backward([*qk_views(out)], grads)
            qkv.grad = None

    def strided_clone():
        q, k = qk_views(qkv)
        if grad:
            torch.autograd.backward([q.clone(), k.clone()], grads)
            qkv.grad = None
        else:
            q.clone(), k.clone()
    table = {"contiguous copy": lambda: copy_out.copy_(flat), "strided clone (q, k)": strided_clone,
             "eager": kernel("eager")}
    if fused.available(qkv):  # CUDA (on CPU: under TRITON_INTERPRET=1, the dry run)
        table.update({"triton": kernel("triton"), "triton qkv in place": in_place})
    if device.type == "cuda":
        table["compile"] = kernel("compile")
    return table, 2 * batch * n * heads * head_dim * qkv.element_size()


def main(argv=None) -> list[dict]:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float16", "float32"])
    p.add_argument("--shapes", nargs="+", default=["vit-s B=64", "1d 32k"], choices=list(SHAPES))
    p.add_argument("--repeats", type=int, default=20)
    p.add_argument("--json", default="", help="rows written here after every shape and pass")
    args = p.parse_args(argv)
    device, dtype = torch.device(args.device), getattr(torch, args.dtype)
    name = torch.cuda.get_device_name() if device.type == "cuda" else "cpu"
    hbm, _ = peak(name)
    rows = []
    for shape in args.shapes:
        for grad in (False, True):
            with torch.set_grad_enabled(grad):
                table, qk_bytes = methods(shape, dtype, device, grad)
                copy_bw = None
                for method, fn in table.items():
                    t_dev = device_time(fn, args.repeats, device)
                    t_kernel = kernel_time(fn, 5, device)
                    moved = bytes_moved(fn) if method != "contiguous copy" else 2 * qk_bytes
                    bw = moved / (t_kernel or t_dev)
                    copy_bw = bw if method == "contiguous copy" else copy_bw
                    rows.append({"device": name, "shape": shape, "dtype": args.dtype, "pass": "fwd+bwd" if grad else "fwd",
                                 "method": method, "device_ms": t_dev * 1e3,
                                 "kernel_ms": None if t_kernel is None else t_kernel * 1e3,
                                 "host_ms": host_time(fn, args.repeats, device) * 1e3, "MB": moved / 1e6,
                                 "x_qk_bytes": moved / qk_bytes, "TB_s": bw / 1e12,
                                 "of_peak": None if hbm is None else bw / hbm, "of_copy": bw / copy_bw})
                    r = rows[-1]
                    print(f"{shape:11s} {r['pass']:8s} {method:22s} device {r['device_ms']:8.3f} ms  kernel "
                          f"{r['kernel_ms'] or 0:8.3f} ms  host {r['host_ms']:7.3f} ms  {r['MB']:9.1f} MB "
                          f"({r['x_qk_bytes']:4.1f}x |q,k|)  {r['TB_s']:6.3f} TB/s  of peak "
                          f"{r['of_peak'] if r['of_peak'] is None else round(r['of_peak'], 3)}  of copy "
                          f"{r['of_copy']:.2f}", flush=True)
            if args.json:  # kept after every shape and pass: a cut run keeps what it measured
                Path(args.json).write_text(json.dumps({"device": name, "hbm_bytes_s": hbm, "rows": rows}, indent=1))
            if device.type == "cuda":
                torch.cuda.empty_cache()
    return rows


if __name__ == "__main__":
    main()
