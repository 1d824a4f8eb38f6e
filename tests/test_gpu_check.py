"""The GPU check's CPU dry run (``scripts/gpu_check.sh --device cpu --smoke``: every step at tiny sizes) and the
memory-traffic proxy's counters (benchmarks/rope_traffic.py) against sizes worked out by hand."""
from __future__ import annotations

import json
import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import torch

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
import gpu_record  # noqa: E402
import rope_traffic  # noqa: E402

import ndpe  # noqa: E402


def test_smoke_run_writes_every_step(tmp_path):
    env = {**os.environ, "OUT": str(tmp_path / "out"), "PYTHON": sys.executable, "OMP_NUM_THREADS": "1"}
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", "--device", "cpu", "--smoke"], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    out = tmp_path / "out"
    files = sorted(p.name for p in out.iterdir() if p.name != "gpu-v3")  # the GPU record's run directory apart
    assert all(p.is_file() for p in out.iterdir() if p.name != "gpu-v3") and len(files) <= 8  # flat, at most 8 files
    assert set(files) == {"env.json", "tests.xml", "rope.json", "bias.json", "train.json", "cells.csv", "summary.md",
                          "log.txt"}
    info = json.loads((out / "env.json").read_text())
    assert {"device", "torch", "triton", "python", "commit", "date"} <= set(info) and info["smoke"]
    assert info["commit"] != "unknown"
    assert {s: v["status"] for s, v in info["steps"].items()} == dict.fromkeys(
        ["env", "tests", "rope", "bias", "train", "cells", "record"], "ok")
    record = info["steps"]["record"]["result"]  # the GPU record's path: its run directory kept in the output
    assert record["exit"] == 0 and record["rows"] > 0 and (out / "gpu-v3" / "results.csv").exists()
    # the loan's pace, the GPU record's measure: every cell of the tiny preset trained, none left
    assert record["cells_trained"] > 0 and record["cells_per_minute"] > 0 and record["steps_per_minute"] > 0
    assert (record["cells_left"], record["steps_left"], record["loans_left"]) == (0, 0, 0)
    assert f"{record['cells_trained']} cells in" in (out / "summary.md").read_text()
    suite = ET.parse(out / "tests.xml").getroot()
    assert int((suite if suite.tag == "testsuite" else suite.find("testsuite")).get("tests")) >= 13  # the CUDA tests
    rope = json.loads((out / "rope.json").read_text())["rows"]
    assert {r["pass"] for r in rope} == {"fwd", "fwd+bwd"}
    assert {"contiguous copy", "strided clone (q, k)", "eager"} <= {r["method"] for r in rope}
    assert all(r["of_copy"] > 0 and r["MB"] > 0 and r["host_ms"] > 0 for r in rope)
    copy = next(r for r in rope if r["method"] == "contiguous copy")
    assert copy["x_qk_bytes"] == 2.0  # reads q and k's bytes once, writes them once
    bias = json.loads((out / "bias.json").read_text())["rows"]
    assert {r["kind"] for r in bias} == {"alibi", "relative", "fire", "cpb"}
    train = json.loads((out / "train.json").read_text())
    assert [r["kind"] for r in train["steps"]] == ["none", "rope", "alibi", "rope-mixed"]  # auto kernel only
    assert train["resume"]["exact"]  # on the CPU a resumed run is bit for bit the uninterrupted one
    summary = (out / "summary.md").read_text()
    for heading in ("RoPE on q and k", "flex attention vs SDPA", "training step", "Benchmark cells"):
        assert heading in summary
    assert "| image/shapes-zoom | rope |" in summary


def test_the_record_counts_the_loans_left_in_training_steps(tmp_path):
    """A loan that trained 4 cells, 200 of 1,000 steps (cells differ in steps), in 2 minutes leaves 800: four more
    loans (counted in cells, two). One killed before its end line, or one that refused to start, says so instead of
    reading an earlier invocation's."""
    start = {"id": "b", "status": "started"}
    end = {"id": "b", "status": "interrupted", "wall_s": 120.0, "cells_trained": 4, "executor": "16 worker(s)"}
    (tmp_path / "invocations.jsonl").write_text("\n".join(json.dumps(x) for x in ({**end, "id": "a"}, start, end)))
    pace = gpu_record.pace(tmp_path, (10, 1000, ["earlier"]), (6, 800))
    assert pace == {"cells_trained": 4, "minutes": 2.0, "executor": "16 worker(s)", "cells_per_minute": 2.0,
                    "steps_per_minute": 100, "cells_left": 6, "steps_left": 800, "loans_left": 4}
    (tmp_path / "invocations.jsonl").write_text("\n".join(json.dumps(x) for x in ({**end, "id": "a"}, start)))
    assert "killed" in gpu_record.pace(tmp_path, (10, 1000, ["earlier"]), (10, 1000))["pace"]
    assert "no invocation ran" in gpu_record.pace(tmp_path, (10, 1000, ["earlier", "start"]), (10, 1000))["pace"]


def test_smoke_refuses_cuda_without_a_gpu(tmp_path):
    if torch.cuda.is_available():
        pytest.skip("a GPU is here")
    proc = subprocess.run([sys.executable, "benchmarks/gpu_check.py", "--out", str(tmp_path), "--device", "cuda"],
                          cwd=ROOT, capture_output=True, text=True)
    assert proc.returncode == 2 and "no CUDA device here" in proc.stderr.strip().splitlines()[-1]


def test_op_traffic_counts_each_operand_once():
    a, b = torch.randn(4, 8), torch.randn(8)
    for fn, read, written in [
        (lambda: a.clone(), 32, 32),
        (lambda: a + b.expand(4, 8), 32 + 8, 32),       # a broadcast operand counts its distinct elements
        (lambda: a.clone().mul_(2.0), 32 + 32, 32 + 32),  # in place: read and written
        (lambda: torch.mul(a, 2.0, out=torch.empty(4, 8)), 32, 32),  # out=: written only; empty is free
        (lambda: torch.empty(4, 8).copy_(a), 32, 32),   # copy_: its target is written, not read
        (lambda: a[:, :4].T, 0, 0),                     # views move nothing
    ]:
        counter = rope_traffic.OpTraffic()
        with counter:
            fn()
        assert (counter.read, counter.written) == (4 * read, 4 * written)


def test_floor_and_triton_distinct_bytes_are_what_they_must_touch():
    pytest.importorskip("triton")

    class Args:
        batch, heads, head_dim = 2, 2, 16
    q, k, pos = rope_traffic.inputs((3, 4), Args, torch.float32)
    size = q.numel() * 4
    floor = rope_traffic.count_kernel("floor", q, k, pos)
    assert floor["read"] + floor["written"] == 4 * size
    triton = rope_traffic.count_kernel("triton", q, k, pos)
    table = 2 * pos.rot[0].numel() * 4  # cos and sin, read once per head in issue, once in distinct bytes
    assert triton["unique"] == 4 * size + table
    assert triton["read"] == 2 * size + Args.batch * Args.heads * table and triton["written"] == 2 * size
    eager = rope_traffic.count_kernel("eager", q, k, pos)
    assert eager["read"] + eager["written"] > 2 * floor["read"]  # several passes over q and k
    with ndpe.functional.rotary_kernel("eager"):  # the counter does not change the result
        with rope_traffic.OpTraffic():
            got = ndpe.apply_qk(q, k, pos)
        torch.testing.assert_close(got[0], ndpe.apply_qk(q, k, pos)[0])
