"""Everything ndpe should measure on a GPU, in one call: ``bash scripts/gpu_check.sh`` (this file does the work).

Steps, in order (a step that fails is recorded and the next one runs; a step that would start after ``--budget``
seconds is skipped and says so; every step's file is written as soon as it has a row, and ``env.json`` and
``summary.md`` after every step, so a run cut at any point keeps what it measured):

1. ``env``      the GPU's name, torch / triton / Python versions, date, the commit (``NDPE_COMMIT`` or git).
2. ``tests``    the tests that need CUDA (``pytest -m cuda``, the kernels' 1-ulp checks among them): their counts.
3. ``rope``     ``benchmarks/bench_device.py``: a contiguous copy and the strided clone of q and k beside ndpe's
                eager, Triton, in-place packed-qkv and compiled RoPE at the ViT-S/16 B = 64 shape and at 1D 32k,
                forward and forward + backward: device (CUDA events), kernel (profiler) and host time, the bytes each
                really moves, as fractions of the HBM peak (``bench_device.GPUS``) and of the copy; then
                ``benchmarks/kernel_ulps.py``: every kernel's error against a float64 reference, in ulps.
4. ``bias``     ``benchmarks/bench_bias.py``: SDPA with no mask, with the heads-first mask and with the same mask
                heads-last; ndpe's flex against flex with no score_mod and with a minimal one (alibi, relative at
                N = 16k; fire, cpb at 4k): time and peak memory.
5. ``train``    a training step of the reference ViT-S/16 at B = 64 (``benchmarks/bench_model.py``, bf16 autocast):
                none, rope (auto and triton kernels), alibi and rope-mixed eager, then none and rope with
                ``torch.compile(model)`` and with CUDA graphs (``reduce-overhead``): ms per step, GPU-busy time and
                MFU; the loss finite; a short run stopped, checkpointed and resumed against the same run uninterrupted.
6. ``cells``    cells of the standard preset's image tasks on the device (bf16 autocast), with their time, started
                while time is left (the hook for the GPU benchmark record's cells).

Files under ``--out`` (flat, at most 8): ``env.json`` (with each step's status and wall time), ``tests.xml``,
``rope.json``, ``bias.json``, ``train.json``, ``cells.csv``, ``summary.md``, ``log.txt`` (written by the shell
script). ``--device cpu --smoke`` runs every step at tiny sizes (the test suite runs it: tests/test_gpu_check.py).

    python benchmarks/gpu_check.py --out $OUT                      # on the GPU machine (scripts/gpu_check.sh)
    python benchmarks/gpu_check.py --device cpu --smoke --out /tmp/check
"""
from __future__ import annotations

import argparse
import csv
import json
import math
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "benchmarks")]

import bench_bias  # noqa: E402  (same folder)
import bench_device  # noqa: E402
import bench_model  # noqa: E402
import gpu_record  # noqa: E402
import kernel_ulps  # noqa: E402

FILES = ("env.json", "tests.xml", "rope.json", "bias.json", "train.json", "cells.csv", "summary.md", "log.txt")
STEPS = ("env", "tests", "rope", "bias", "train", "cells", "record")


def sizes(args) -> dict:
    """What each step runs: the GPU sizes, or tiny ones for ``--smoke``."""
    if args.smoke:
        return dict(rope_args=["--shapes", "tiny", "--repeats", "2"],
                    bias_args=["--sizes", "16", "--repeats", "1", "--no-flex", "--heads", "2", "--head-dim", "8"],
                    bias_small=[], vit=["--grids", "4", "--dim", "32", "--depth", "1", "--heads", "2", "--patch", "4",
                                        "--batch", "2", "--repeats", "1", "--rope-kernels", "auto"],
                    compiled=None, resume_steps=4, cells=[("image/shapes-zoom", "rope")],
                    cell_overrides=["default_steps=2", "steps={}", "items={}", "train_items=64", "test_items=16"])
    vit = ["--grids", "14", "--dim", "384", "--depth", "12", "--heads", "6", "--patch", "16", "--batch", "64",
           "--repeats", "10", "--busy"]
    return dict(rope_args=["--shapes", "vit-s B=64", "1d 32k", "--repeats", "20"],
                bias_args=["--sizes", "16384", "--repeats", "5", "--no-eager-flex"], bias_small=["fire", "cpb"],
                vit=vit + ["--rope-kernels", "auto", "triton"],
                compiled=vit + ["--rope-kernels", "auto", "--kinds", "none", "rope", "--forms", "compile", "graphs"],
                resume_steps=20, cells=[(t, k) for t in ("image/shapes-zoom", "image/digits-zoom") for k in ("none", "rope")],
                cell_overrides=[])


def commit() -> str:
    """``NDPE_COMMIT`` (set by whoever sent the tree), else git's HEAD with a dirty flag, else ``unknown``."""
    if os.environ.get("NDPE_COMMIT"):
        return os.environ["NDPE_COMMIT"]
    try:
        head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT,
                               capture_output=True, text=True).stdout.strip()
        return head.stdout.strip() + ("-dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return "unknown"


def step_env(args, out: Path) -> dict:
    try:
        import triton
        triton_version = triton.__version__
    except ImportError:
        triton_version = None
    cuda = torch.cuda.is_available() and args.device == "cuda"
    return {"device": torch.cuda.get_device_name() if cuda else platform.processor() or platform.machine(),
            "device_type": args.device, "cuda": torch.version.cuda, "torch": torch.__version__,
            "triton": triton_version, "python": platform.python_version(), "commit": commit(),
            "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "smoke": args.smoke,
            "memory_gib": round(torch.cuda.get_device_properties(0).total_memory / 2**30, 1) if cuda else None}


def step_tests(args, out: Path) -> dict:
    """``pytest -m cuda`` (the project's addopts replaced: the GPU machine may lack the test extra's plugins)."""
    files = sorted(str(f.relative_to(ROOT)) for f in (ROOT / "tests").glob("test_*.py") if "mark.cuda" in f.read_text())
    cmd = [sys.executable, "-m", "pytest", "-q", "-m", "cuda", "-o", "addopts=", "-p", "no:cacheprovider",
           f"--junitxml={out / 'tests.xml'}", *files]  # only the files that hold them: others may need other extras
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    import xml.etree.ElementTree as ET

    suite = ET.parse(out / "tests.xml").getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    counts = {k: int(suite.get(k, 0)) for k in ("tests", "failures", "errors", "skipped")}
    counts["passed"] = counts["tests"] - counts["failures"] - counts["errors"] - counts["skipped"]
    return {**counts, "returncode": proc.returncode, "tail": proc.stdout[-1500:]}


def step_rope(args, out: Path, plan: dict) -> dict:
    path = out / "rope.json"
    rows = bench_device.main(["--device", args.device, "--json", str(path), *plan["rope_args"]])
    ulps = []
    if args.device == "cuda":  # the CPU's interpreter runs are tests/test_kernel_ulps.py
        ulps = kernel_ulps.main(["--device", "cuda"])
    path.write_text(json.dumps({**json.loads(path.read_text()), "ulps": ulps}, indent=1))
    return {"rows": len(rows), "worst_ulps": max((max(r["fwd_ulps"], r["bwd_ulps"]) for r in ulps), default=None)}


def step_bias(args, out: Path, plan: dict) -> dict:
    dtype = "bfloat16" if args.device == "cuda" else "float32"
    common = ["--device", args.device, "--dtype", dtype]
    rows = bench_bias.main(bench_bias.get_args_parser().parse_args(
        common + ["--kinds", "alibi", "relative", *([] if plan["bias_small"] else ["fire", "cpb"]),
                  "--json", str(out / "bias.json"), *plan["bias_args"]]))
    if plan["bias_small"]:  # fire and cpb at 4k: their MLP over every pair is the cost, not the size
        small = [a if a != "16384" else "4096" for a in plan["bias_args"]]
        rows += bench_bias.main(bench_bias.get_args_parser().parse_args(common + ["--kinds", *plan["bias_small"], *small]))
        (out / "bias.json").write_text(json.dumps({**json.loads((out / "bias.json").read_text()), "rows": rows}, indent=1))
    return {"rows": len(rows), "errors": sum("error" in r for r in rows)}


def step_train(args, out: Path, plan: dict) -> dict:
    argv = ["--device", args.device, "--kinds", "none", "rope", "alibi", "rope-mixed", "--amp", *plan["vit"]]
    rows = bench_model.main(bench_model.get_args_parser().parse_args(argv))
    result = {"steps": rows}
    (out / "train.json").write_text(json.dumps(result, indent=1))  # kept before the compiled forms' compiles
    if plan["compiled"]:
        compiled = ["--device", args.device, "--amp", *plan["compiled"]]
        rows += bench_model.main(bench_model.get_args_parser().parse_args(compiled))
        (out / "train.json").write_text(json.dumps(result, indent=1))
    resume = exact_resume(args, out, plan["resume_steps"])
    result["resume"] = resume
    (out / "train.json").write_text(json.dumps(result, indent=1))
    finite = all(math.isfinite(r["loss"]) for r in rows)
    if not finite:
        raise RuntimeError(f"a training step's loss is not finite: {[(r['kind'], r['loss']) for r in rows]}")
    return {"loss_finite": finite, "resume_exact": resume["exact"], "resume_max_diff": resume["max_diff"]}


def exact_resume(args, out: Path, steps: int) -> dict:
    """A short run of the shapes task (``train.main``, bf16 autocast on CUDA) stopped halfway, checkpointed and
    resumed, against the same run uninterrupted: every weight compared."""
    import tempfile

    from train.config import load_config
    from train.main import fit

    with tempfile.TemporaryDirectory() as tmp:
        def run(name, *extra):
            cfg = load_config(ROOT / "configs" / "image_shapes.yaml", [
                f"train.out_dir={Path(tmp) / name}", f"train.device={args.device}", f"train.steps={steps}",
                "train.batch_size=16", "model.dim=64", "model.depth=2", "optim.warmup_steps=2", "train.log_every=1",
                "data.options.size=512", *extra])
            return fit(cfg)
        full, _ = run("full")
        run("split", f"train.stop_after={steps // 2}")
        resumed, _ = run("split", f"train.resume={Path(tmp) / 'split' / 'checkpoint.pt'}")
        diffs = {n: (a.float() - b.float()).abs().max().item()
                 for (n, a), b in zip(full.state_dict().items(), resumed.state_dict().values()) if a.numel()}
    worst = max(diffs, key=diffs.get)
    return {"steps": steps, "exact": max(diffs.values()) == 0.0, "max_diff": diffs[worst], "worst": worst}


def step_cells(args, out: Path, plan: dict) -> dict:
    """Cells of the standard preset run through the benchmark's own cell function, on the device, each started while
    ``args.deadline`` (the run's budget) is ahead: the hook where the GPU benchmark record's cells take the time left."""
    import tempfile

    from train import bench

    rows, failures, skipped = [], [], 0
    with tempfile.TemporaryDirectory() as tmp:
        cfg = bench.load_bench_config(bench.CONFIG_DIR / "standard.yaml", [
            f"out_root={tmp}", f"device={args.device}", "lr_search=[]", *plan["cell_overrides"]])
        for task, kind in plan["cells"]:
            if time.perf_counter() > args.deadline:
                skipped += 1
                continue
            cell = bench.CellSpec(task, kind, seed=100, data_seed=0, lr=cfg.lr, weight_decay=cfg.weight_decay)
            start = time.perf_counter()
            cell_rows, _, error = bench.run_cell_safe((cfg, cell, tmp))
            seconds = time.perf_counter() - start
            if error:
                failures.append(error)
            for r in cell_rows:
                rows.append({**r.__dict__, "cell_s": round(seconds, 2)})
            print(f"cell {task} {kind}: {seconds:.1f} s" + (f" FAILED {error}" if error else ""), flush=True)
    with open(out / "cells.csv", "w", newline="") as f:
        if rows:
            writer = csv.DictWriter(f, fieldnames=list(rows[0]))
            writer.writeheader()
            writer.writerows(rows)
    if failures:
        raise RuntimeError("; ".join(failures))
    return {"cells": len(plan["cells"]) - skipped, "skipped_out_of_time": skipped, "rows": len(rows)}


def summary(env: dict, status: dict, out: Path) -> str:
    """``summary.md``: the measured tables, read back from the step files."""
    lines = [f"# GPU check: {env.get('device')}", "",
             f"torch {env.get('torch')}, triton {env.get('triton')}, CUDA {env.get('cuda')}, Python "
             f"{env.get('python')}; commit {env.get('commit')}; {env.get('date')}" + (" (smoke)" if env.get('smoke') else ""),
             "", "| step | status | wall s |", "|---|---|---|"]
    lines += [f"| {s} | {v['status']} | {v.get('seconds', '')} |" for s, v in status.items()]
    if "tests" in status and status["tests"]["status"] == "ok":
        t = status["tests"]["result"]
        lines += ["", f"CUDA tests: {t['passed']} passed, {t['failures'] + t['errors']} failed, {t['skipped']} skipped."]
    if (out / "rope.json").exists():
        rope = json.loads((out / "rope.json").read_text())
        hbm = rope.get("hbm_bytes_s")
        lines += ["", f"## RoPE on q and k against the device ({rope.get('device')}, HBM peak "
                      f"{'unknown' if hbm is None else f'{hbm / 1e12:.2f} TB/s'})", "",
                  "bandwidth = bytes really moved / kernel time; 'of copy': over the measured contiguous copy's.", "",
                  "| shape | pass | method | device ms | kernel ms | host ms | MB moved | x \\|q,k\\| | TB/s | of peak "
                  "| of copy |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        fmt = lambda v: "" if v is None else f"{v:.3g}"  # noqa: E731
        for r in rope["rows"]:
            lines.append(f"| {r['shape']} | {r['pass']} | {r['method']} | " + " | ".join(fmt(r[c]) for c in (
                "device_ms", "kernel_ms", "host_ms", "MB", "x_qk_bytes", "TB_s", "of_peak", "of_copy")) + " |")
        if rope.get("ulps"):
            lines += ["", "Worst error against a float64 reference (ulps of the output dtype, q and k, fwd / bwd): "
                      + "; ".join(f"{k} {d} {max(r['fwd_ulps'] for r in rope['ulps'] if (r['kernel'], r['dtype']) == (k, d)):.2f}"
                                  f" / {max(r['bwd_ulps'] for r in rope['ulps'] if (r['kernel'], r['dtype']) == (k, d)):.2f}"
                                  for k, d in dict.fromkeys((r["kernel"], r["dtype"]) for r in rope["ulps"]))]
    if (out / "bias.json").exists():
        lines += ["", "## Bias kinds: flex attention vs SDPA with a materialized bias", "",
                  "| kind | N | sdpa ms | sdpa+bias ms | sdpa+heads-last ms | sdpa+build ms | flex ms | flex plain ms "
                  "| flex minimal ms | sdpa+build peak MiB | flex peak MiB |", "|---|---|---|---|---|---|---|---|---|---|---|"]
        fmt = lambda v: f"{v:.3g}" if isinstance(v, float) else str(v if v is not None else "")  # noqa: E731
        for r in json.loads((out / "bias.json").read_text())["rows"]:
            lines.append(f"| {r['kind']} | {r['N']} | " + " | ".join(fmt(r.get(c)) for c in (
                "sdpa ms", "sdpa+bias ms", "sdpa+heads-last ms", "sdpa+build ms", "flex ms", "flex plain ms",
                "flex minimal ms", "sdpa+build peak MiB", "flex peak MiB"))
                + (f" {r['error'][:60]}" if "error" in r else "") + " |")
    if (out / "train.json").exists():
        t = json.loads((out / "train.json").read_text())
        lines += ["", "## A training step of the reference ViT-S", "",
                  "| kind (form) | ms / step | overhead vs none (same form) | GPU busy ms | MFU | loss |",
                  "|---|---|---|---|---|---|"]
        lines += [f"| {r['kind']} | {r['ms_per_step']:.1f} | {r['overhead_pct']:+.1f} % | "
                  f"{r.get('gpu_busy_ms', float('nan')):.1f} | {r.get('mfu', float('nan')):.3f} | {r['loss']:.4f} |"
                  for r in t["steps"]]
        res = t.get("resume")
        if res:
            lines += ["", f"Stopped at {res['steps'] // 2} of {res['steps']} steps and resumed: "
                          f"{'exact' if res['exact'] else 'not exact'} (largest weight difference {res['max_diff']:.3g}, "
                          f"{res['worst']})."]
    record = status.get("record", {}).get("result") or {}
    if "cells_per_minute" in record:
        lines += ["", "## The GPU record (configs/bench/gpu.yaml)", "",
                  f"{record['cells_trained']} cells in {record['minutes']} min: {record['cells_per_minute']} cells "
                  f"and {record['steps_per_minute']} training steps a minute ({record['executor']}); "
                  f"{record['cells_left']} cells ({record['steps_left']} steps) left: about {record['loans_left']} "
                  f"more loans like this one."]
    if (out / "cells.csv").exists() and (out / "cells.csv").stat().st_size:
        with open(out / "cells.csv") as f:
            cells = list(csv.DictReader(f))
        seen = {}
        for r in cells:
            seen.setdefault((r["task"], r["kind"]), r["cell_s"])
        lines += ["", "## Benchmark cells on the device", "", "| task | kind | s per cell |", "|---|---|---|"]
        lines += [f"| {t} | {k} | {s} |" for (t, k), s in seen.items()]
    return "\n".join(lines) + "\n"


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=os.environ.get("OUT") or "runs/gpu_check", help="folder for the files (flat)")
    p.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu", choices=["cuda", "cpu"])
    p.add_argument("--smoke", action="store_true", help="every step at tiny sizes (the CPU dry run)")
    p.add_argument("--budget", type=float, default=480.0,
                   help="seconds; a step that would start later is skipped, and cells stop starting (9 minutes in all)")
    p.add_argument("--steps", nargs="+", default=list(STEPS), choices=STEPS)
    args = p.parse_args(argv)
    if args.device == "cuda" and not torch.cuda.is_available():
        p.error("--device cuda: no CUDA device here (use --device cpu --smoke for the dry run)")
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    plan, start, status = sizes(args), time.perf_counter(), {}
    args.deadline = start + args.budget
    env = step_env(args, out)
    for name in args.steps:
        if name == "env":
            status[name] = {"status": "ok", "seconds": 0.0}
            continue
        elapsed = time.perf_counter() - start
        if elapsed > args.budget:
            status[name] = {"status": f"skipped: out of time ({elapsed:.0f} s > {args.budget:.0f} s)"}
            continue
        print(f"\n== {name} ({elapsed:.0f} s so far)", flush=True)
        t0 = time.perf_counter()
        try:
            fn = {"tests": step_tests, "rope": step_rope, "bias": step_bias, "train": step_train,
                  "cells": step_cells, "record": gpu_record.step_record}[name]
            result = fn(args, out) if name == "tests" else fn(args, out, plan)
            status[name] = {"status": "ok", "result": result}
        except Exception as err:  # recorded; the next step runs
            traceback.print_exc()
            status[name] = {"status": f"failed: {type(err).__name__}: {' '.join(str(err).split())[:300]}"}
        status[name]["seconds"] = round(time.perf_counter() - t0, 1)
        (out / "env.json").write_text(json.dumps({**env, "steps": status}, indent=1))  # kept at every step
        (out / "summary.md").write_text(summary(env, status, out))
    env["wall_s"] = round(time.perf_counter() - start, 1)
    (out / "env.json").write_text(json.dumps({**env, "steps": status}, indent=1))
    (out / "summary.md").write_text(summary(env, status, out))
    print(f"\nwrote {sorted(f.name for f in out.iterdir())} in {env['wall_s']:.0f} s")
    return 0 if all(v["status"] == "ok" for v in status.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
