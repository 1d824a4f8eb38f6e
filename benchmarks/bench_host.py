"""Host cost of one RoPE application on q and k: ndpe against HF, timm and rotary-embedding-torch, in one run.

At a tiny shape (batch 1, 2 heads, a 4 x 4 grid, head_dim 64) the kernels do almost no work, so a call's time is
what the host spends dispatching them: the cost that dominates a ViT training step on a GPU (a block's rope there
is ~1 µs of memory traffic). q and k are bfloat16 views of one fused qkv projection (a leaf that needs gradients,
as in a training step under autocast); each library gets its tables as its own module hands them out, once, outside
the timed call:

- ``ndpe eager`` / ``ndpe eager, interleaved``: ``ndpe.apply_qk(q, k, pos)`` with ``pos = pe(grid)`` (float32
  tables, as ``Encoder`` asks them of a cached encoding every forward); the eager kernel.
- ``ndpe triton (interpreter)``: the same call on ``set_rotary_kernel("triton")`` under ``TRITON_INTERPRET=1``: the
  interpreter runs the kernel in Python, so its time is no GPU figure; its op count is the launches a GPU makes.
- ``HF apply_rotary_pos_emb``: Llama's ``apply_rotary_pos_emb(q, k, cos, sin)``, cos / sin ``(B, T, head_dim)`` in
  q's dtype (what HF's rotary module returns).
- ``timm apply_rot_embed_cat``: on q and on k, with ``RotaryEmbeddingCat``'s float32 ``cat(sin, cos)`` table.
- ``rotary-embedding-torch``: ``apply_rotary_emb(freqs, q)`` and on k, with its float32 angle table.
- ``none``: q and k returned as they are: autograd's own backward (the qkv leaf's gradient), subtracted from every
  row's backward count.

``fwd`` is a call under ``no_grad``; ``fwd+bwd`` a call and ``torch.autograd.backward`` of its outputs. Each figure
is the median over ``--rounds`` rounds of the median of ``--calls`` calls; every round runs every method in a
shuffled order (load noise hits all alike). ``ops``: the ATen operators that do work (views and allocations
excluded: ``rope_traffic.OpTraffic``), each a kernel launch on a GPU; Triton launches counted as one each.
``rope-mixed`` rows count ``pe(grid)`` + ``apply_qk`` with learned frequencies: the angles' gradient included;
``timm RotaryEmbeddingMixed`` is the same in timm (``get_embed()`` of a grid given at construction, then
``apply_rot_embed_cat`` on q and on k).

    python benchmarks/bench_host.py --rounds 30 --calls 20 [--json host.json]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import sys
import time
from contextlib import contextmanager, nullcontext
from pathlib import Path

import torch
from einops import rearrange

sys.path.insert(0, str(Path(__file__).resolve().parent))
from rope_traffic import OpTraffic  # noqa: E402  (same folder)

import ndpe  # noqa: E402
from ndpe.functional import rotary_kernel  # noqa: E402

BATCH, HEADS, GRID, HEAD_DIM = 1, 2, (4, 4), 64
LEARNED: list[torch.nn.Module] = []  # the methods' modules with parameters (their gradients reset every step)


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--rounds", type=int, default=30, help="rounds, each timing every method (median over rounds)")
    p.add_argument("--calls", type=int, default=20, help="calls per method and round (their median)")
    p.add_argument("--no-triton", action="store_true", help="leave out the Triton-interpreter row")
    p.add_argument("--json", default="", help="write the rows here")
    return p


@contextmanager
def interpreted():
    """``TRITON_INTERPRET=1`` for the block (ndpe's Triton kernel is decorated once per value of the flag)."""
    old = os.environ.get("TRITON_INTERPRET")
    os.environ["TRITON_INTERPRET"] = "1"
    try:
        yield
    finally:
        if old is None:
            del os.environ["TRITON_INTERPRET"]
        else:
            os.environ["TRITON_INTERPRET"] = old


def methods(no_triton: bool) -> tuple[dict, torch.Tensor]:
    """``name -> (fn(q, k) -> outputs, context)`` and the fused qkv leaf."""
    from timm.layers.pos_embed_sincos import RotaryEmbeddingCat, RotaryEmbeddingMixed, apply_rot_embed_cat
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    dtype, n = torch.bfloat16, GRID[0] * GRID[1]
    qkv = torch.randn(BATCH, n, 3 * HEADS * HEAD_DIM, dtype=dtype, requires_grad=True)
    pe = ndpe.make(dims=2, kind="rope", dim=HEADS * HEAD_DIM, heads=HEADS)
    pe_il = ndpe.make(dims=2, kind="rope", dim=HEADS * HEAD_DIM, heads=HEADS, pairing="interleaved")
    mixed = ndpe.make(dims=2, kind="rope-mixed", dim=HEADS * HEAD_DIM, heads=HEADS)
    pos, pos_il = pe(GRID), pe_il(GRID)  # once a forward in a model, as HF's rotary module and timm's tables
    angle = pos.rot  # HF: cos / sin over the whole head ("half" layout), in q's dtype, per sample
    cos_hf = torch.cat([angle[0][0], angle[0][0]], -1).to(dtype).expand(BATCH, -1, -1)
    sin_hf = torch.cat([angle[1][0], angle[1][0]], -1).to(dtype).expand(BATCH, -1, -1)
    timm_emb = RotaryEmbeddingCat(HEAD_DIM, in_pixels=False).get_embed(list(GRID))  # float32 (N, 2 head_dim)
    timm_mixed = RotaryEmbeddingMixed(HEADS * HEAD_DIM, depth=1, num_heads=HEADS, feat_shape=list(GRID))
    LEARNED[:] = [mixed, timm_mixed]
    nothing = nullcontext
    table = {
        "none": (lambda q, k: (q, k), nothing),
        "ndpe eager": (lambda q, k: ndpe.apply_qk(q, k, pos), lambda: rotary_kernel("eager")),
        "ndpe eager, interleaved": (lambda q, k: ndpe.apply_qk(q, k, pos_il), lambda: rotary_kernel("eager")),
        "HF apply_rotary_pos_emb": (lambda q, k: apply_rotary_pos_emb(q, k, cos_hf, sin_hf), nothing),
        "timm apply_rot_embed_cat": (lambda q, k: (apply_rot_embed_cat(q, timm_emb), apply_rot_embed_cat(k, timm_emb)),
                                     nothing),
        "rope-mixed: pe + apply_qk": (lambda q, k: ndpe.apply_qk(q, k, mixed(GRID)), lambda: rotary_kernel("eager")),
        "timm RotaryEmbeddingMixed": (lambda q, k: timm_mixed_qk(timm_mixed, q, k), nothing),
    }
    try:
        from rotary_embedding_torch import RotaryEmbedding, apply_rotary_emb
        freqs = RotaryEmbedding(HEAD_DIM // 2, freqs_for="pixel", max_freq=GRID[0]).get_axial_freqs(*GRID)
        freqs = freqs.reshape(n, HEAD_DIM)  # float32 angles, interleaved pairs
        table["rotary-embedding-torch"] = (lambda q, k: (apply_rotary_emb(freqs, q), apply_rotary_emb(freqs, k)),
                                           nothing)
    except ImportError:
        pass
    if not no_triton:
        from ndpe.kernels import triton as fused
        if fused.triton is not None:
            @contextmanager
            def triton_kernel():
                with interpreted(), rotary_kernel("triton"):
                    yield
            table["ndpe triton (interpreter)"] = (lambda q, k: ndpe.apply_qk(q, k, pos), triton_kernel)
    return table, qkv


def timm_mixed_qk(rope, q: torch.Tensor, k: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """timm's RoPE-Mixed ViT block: the block's table from the learned frequencies, then q and k rotated by it."""
    from timm.layers.pos_embed_sincos import apply_rot_embed_cat
    emb = rope.get_embed()[0]  # (heads, N, 2 head_dim), float32, interleaved
    return apply_rot_embed_cat(q, emb, half=False), apply_rot_embed_cat(k, emb, half=False)


def zero_grad(qkv: torch.Tensor) -> None:
    """Every gradient dropped, as a training step's ``zero_grad()`` (the next backward accumulates into none)."""
    qkv.grad = None
    for module in LEARNED:
        module.zero_grad(set_to_none=True)


def split(qkv: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    q, k, _ = rearrange(qkv, "b t (three h d) -> three b h t d", three=3, h=HEADS)
    return q, k


def count(fn, qkv: torch.Tensor, context) -> tuple[int, int]:
    """Ops forward (no_grad) and backward (after a forward with gradients); a Triton launch counts one, and what the
    interpreter does inside it (copies between its buffers) none: on a GPU the launch is the kernel."""
    from ndpe.kernels import triton as fused
    active: list[OpTraffic] = []
    launch = fused._launch

    def counted(*a):
        saved = [m.ops for m in active]
        out = launch(*a)
        for m, ops in zip(active, saved):
            m.ops = ops + 1
        return out
    fused._launch = counted
    try:
        with context():
            with torch.no_grad():
                q, k = split(qkv)
                fn(q, k)  # warm: a model's first block prepares the tables, the others reuse them
                with OpTraffic() as fwd:
                    active[:] = [fwd]
                    fn(q, k)
            q, k = split(qkv)
            outs = fn(q, k)
            grads = [torch.ones_like(o) for o in outs]
            zero_grad(qkv)
            with OpTraffic() as bwd:
                active[:] = [bwd]
                torch.autograd.backward(outs, grads)
    finally:
        fused._launch = launch
    zero_grad(qkv)
    return fwd.ops, bwd.ops


def main(args) -> list[dict]:
    torch.set_num_threads(1)
    table, qkv = methods(args.no_triton)
    grads = None

    def fwd(fn):
        with torch.no_grad():
            fn(*split(qkv))

    def fwd_bwd(fn):
        outs = fn(*split(qkv))
        torch.autograd.backward(outs, grads or [torch.ones_like(o) for o in outs])
        zero_grad(qkv)

    times: dict[tuple[str, str], list[float]] = {(m, p): [] for m in table for p in ("fwd", "fwd+bwd")}
    for r in range(args.rounds + 1):  # round 0 warms up
        for name, pass_ in random.sample(list(times), len(times)):
            fn, context = table[name]
            run = fwd if pass_ == "fwd" else fwd_bwd
            calls = max(1, args.calls // 10) if "interpreter" in name else args.calls
            with context():
                samples = []
                for _ in range(calls):
                    start = time.perf_counter()
                    run(fn)
                    samples.append(time.perf_counter() - start)
            if r:
                times[(name, pass_)].append(statistics.median(samples))
    ops = {name: count(fn, qkv, context) for name, (fn, context) in table.items()}
    own = ops["none"][1]
    rows = [{"method": name, "fwd_us": statistics.median(times[(name, "fwd")]) * 1e6,
             "fwd_bwd_us": statistics.median(times[(name, "fwd+bwd")]) * 1e6,
             "ops_fwd": ops[name][0], "ops_bwd": ops[name][1] - own} for name in table]
    print(f"q, k: bfloat16 views of a fused qkv, batch {BATCH}, {HEADS} heads, grid {GRID}, head_dim {HEAD_DIM}; "
          f"CPU, 1 thread; torch {torch.__version__}; medians of {args.rounds} rounds x {args.calls} calls")
    print(f"{'method':34s}{'fwd µs':>10s}{'fwd+bwd µs':>12s}{'ops fwd':>9s}{'ops bwd':>9s}")
    for r in rows:
        print(f"{r['method']:34s}{r['fwd_us']:10.1f}{r['fwd_bwd_us']:12.1f}{r['ops_fwd']:9d}{r['ops_bwd']:9d}")
    print(f"(ops bwd: beyond autograd's own {own}, the 'none' row's backward)")
    if args.json:
        Path(args.json).write_text(json.dumps({"args": vars(args), "torch": torch.__version__, "rows": rows}, indent=1))
    return rows


if __name__ == "__main__":
    main(get_args_parser().parse_args())
