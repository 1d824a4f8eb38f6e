"""What ndpe adds to a ViT-S block's forward (2D rope), for two checkouts side by side in one run.

The block: LayerNorm, ``ndpe.Attention(384, heads=6)``, LayerNorm, MLP 384 -> 1536 -> 384, residuals; batch 8,
197 tokens (cls + 14 x 14), float32, CPU, no grad. ``plain`` runs it with no encoding (``pos=None``), ``rope`` with
``pe((14, 14), num_prefix=1)`` encoded every forward (a cache hit) and applied by the attention (``apply_qk``,
``attn_bias``). The overhead per forward is ``rope - plain``: the median over rounds of the two forwards timed back to
back; ``calls`` times ndpe's calls alone on the attention's q and k (``pe(...)``, ``apply_qk``, ``attn_bias``, each
the median of ``--calls`` calls), their sum beside them; ``apply_qk`` on 5 tokens shows a call's fixed cost.

Each checkout runs in its own process (its ``ndpe`` imported from it); every round times every variant of every
checkout, in a shuffled order, both processes pinned to one CPU, so the machine's load falls on all alike. Figures are medians of process CPU time
(a loaded machine still moves them by a few percent: compare within one run).

    git worktree add /tmp/before 87b1142          # or: git archive 87b1142 | tar -x -C /tmp/before
    python benchmarks/bench_overhead.py --before /tmp/before --threads 1 --rounds 40
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DIM, HEADS, GRID, BATCH = 384, 6, (14, 14), 8
VARIANTS = ("plain", "rope", "pe", "apply_qk", "attn_bias", "apply_qk_tiny")


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--before", required=True, help="a checkout of the code to compare against (its root folder)")
    p.add_argument("--after", default=str(ROOT), help="the checkout measured against it (default: this one)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--rounds", type=int, default=40, help="timed rounds (each: every variant of both checkouts)")
    p.add_argument("--calls", type=int, default=20, help="ndpe calls timed per round and variant (median taken)")
    p.add_argument("--cpu", type=int, default=0, help="the CPU both checkouts' processes are pinned to (-1: none)")
    p.add_argument("--json", default="", help="write the medians here")
    p.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    return p


def worker(threads: int, calls: int, cpu: int) -> None:
    """Build the block (seeded: the same weights in both checkouts), then answer each line ``variant`` on stdin
    with the seconds of one forward (``plain``, ``rope``) or the median of ``calls`` ndpe calls."""
    import torch
    from einops import rearrange
    from torch import nn

    import ndpe

    torch.set_num_threads(threads)
    if cpu >= 0 and hasattr(os, "sched_setaffinity"):  # one core for both checkouts: neither gets the idler one
        os.sched_setaffinity(0, {cpu})
    torch.manual_seed(0)

    class Block(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.norm1, self.norm2 = nn.LayerNorm(DIM), nn.LayerNorm(DIM)
            self.attn = ndpe.Attention(DIM, HEADS)
            self.mlp = nn.Sequential(nn.Linear(DIM, 4 * DIM), nn.GELU(), nn.Linear(4 * DIM, DIM))

        def forward(self, x, pos):
            x = x + self.attn(self.norm1(x), pos)
            return x + self.mlp(self.norm2(x))

    block = Block().eval()
    pe = ndpe.make(dims=2, kind="rope", dim=DIM, heads=HEADS)
    x = torch.randn(BATCH, 1 + GRID[0] * GRID[1], DIM)
    q, k = rearrange(torch.randn(BATCH, x.shape[1], 3 * DIM), "b t (three h d) -> three b h t d", three=3, h=HEADS)[:2]
    pos = pe(GRID, num_prefix=1, dtype=x.dtype)
    tiny_q, tiny_k = q[:1, :, :5], k[:1, :, :5]  # 5 tokens: the fixed (Python) cost of a call
    tiny = pe((2, 2), num_prefix=1)
    run = {
        "plain": lambda: block(x, None),
        "rope": lambda: block(x, pe(GRID, num_prefix=1, dtype=x.dtype)),
        "pe": lambda: pe(GRID, num_prefix=1, dtype=x.dtype),
        "apply_qk": lambda: ndpe.apply_qk(q, k, pos),
        "attn_bias": lambda: ndpe.attn_bias(pos, x.dtype, q=q, k=k, causal=False, x=x),
        "apply_qk_tiny": lambda: ndpe.apply_qk(tiny_q, tiny_k, tiny),
    }
    with torch.no_grad():
        for fn in run.values():  # warm up
            fn()
        for line in sys.stdin:
            name = line.strip()
            repeats = 1 if name in ("plain", "rope") else calls
            times = []
            for _ in range(repeats):
                start = time.process_time()
                run[name]()
                times.append(time.process_time() - start)
            print(statistics.median(times), flush=True)


def main(args: argparse.Namespace) -> dict:
    env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
    procs = {}
    for label, root in (("before", args.before), ("after", args.after)):
        command = [sys.executable, __file__, "--worker", "--before", "-", "--threads", str(args.threads), "--calls",
                   str(args.calls), "--cpu", str(args.cpu)]
        procs[label] = subprocess.Popen(command, cwd=root, text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        env={**env, "PYTHONPATH": str(Path(root).resolve())})
    def measure(label: str, variant: str) -> None:
        proc = procs[label]
        assert proc.stdin is not None and proc.stdout is not None
        proc.stdin.write(variant + "\n")
        proc.stdin.flush()
        times[(label, variant)].append(float(proc.stdout.readline()))

    times: dict[tuple[str, str], list[float]] = {(c, v): [] for c in procs for v in VARIANTS}
    for _ in range(args.rounds):
        for label in random.sample(list(procs), len(procs)):  # plain and rope back to back: a paired difference
            for variant in random.sample(["plain", "rope"], 2):
                measure(label, variant)
        for label, variant in random.sample([(c, v) for c in procs for v in VARIANTS[2:]], 2 * len(VARIANTS[2:])):
            measure(label, variant)
    for proc in procs.values():
        assert proc.stdin is not None
        proc.stdin.close()
        proc.wait()
    med = {key: statistics.median(v) * 1e6 for key, v in times.items()}  # microseconds
    rows = {label: {**{v: med[(label, v)] for v in VARIANTS},
                    "overhead": statistics.median(r - p for r, p in zip(times[(label, "rope")],
                                                                        times[(label, "plain")])) * 1e6,
                    "calls": sum(med[(label, v)] for v in ("pe", "apply_qk", "attn_bias"))} for label in procs}
    print(f"ViT-S block, dim {DIM}, {HEADS} heads, {1 + GRID[0] * GRID[1]} tokens, batch {BATCH}, CPU, "
          f"{args.threads} thread(s), {args.rounds} rounds; medians, microseconds")
    print(f"{'':34s}{'before':>12s}{'after':>12s}")
    labels = {"plain": "block, no encoding", "rope": "block, rope 2D", "overhead": "ndpe overhead per forward",
              "pe": "  pe(grid) (cached)", "apply_qk": "  apply_qk(q, k, pos)", "attn_bias": "  attn_bias(pos, q=q, k=k)",
              "calls": "  ndpe calls, sum", "apply_qk_tiny": "apply_qk, 1 x 6 heads x 5 tokens"}
    for key, text in labels.items():
        print(f"{text:34s}{rows['before'][key]:12.1f}{rows['after'][key]:12.1f}")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "microseconds": rows}, indent=2))
    return rows


if __name__ == "__main__":
    parsed = get_args_parser().parse_args()
    if parsed.worker:
        worker(parsed.threads, parsed.calls, parsed.cpu)
    else:
        main(parsed)
