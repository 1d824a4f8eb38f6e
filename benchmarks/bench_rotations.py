"""Time and memory of the learned rotations (``string``, ``liere``, ``comrope``, ``rope-learned``), ``vrope``, the camera
kinds (``gta``, ``prope``, their default ring of cameras), the additive and after-softmax kinds (``sinusoidal``,
``learned``, ``tape``, ``spherical-harmonics``, ``abacus``, ``coupling``, ``erpe``) and the learned biases
(``dd-alibi-row``, ``relative-proj``, ``point-transformer``) beside ``rope``: one attention
layer at ViT-S width (dim 384, 6 heads) on 14 x 14 patches, on video (8 x 14 x 14 tubelets; for the camera kinds, 8
views) and on 1D sequences of 196 and 1024 tokens, side by side in the same rounds.

One call = ``pe(grid)`` (LieRE's and ComRoPE's matrix exponentials are built there, once per forward) then one attention
layer: ``apply_tokens`` (the additive kinds' table, added to or concatenated with the tokens ``(B, N, 384)``) +
``apply_qk`` + their ``(B, heads, N, N)`` term (``ndpe.contract.attn_term``, built apart as ``ndpe.Attention`` does) +
``apply_v`` + attention (``ndpe.attention.attend_probs``: fused SDPA, or the explicit softmax for a term after it,
``erpe``) + ``apply_out`` (the camera kinds' frame), forward
only; a term of the token states (``dd-alibi-row``, ``relative-proj``) reads the layer's input ``x``, and a causal-only
kind's term (``dd-alibi-row``) gets the causal mask added. "encoding" times the same call without the attention: what the kind adds to a layer (for ``erpe``, whose term acts
inside the attention, the layer's ratio is its cost). ``abacus`` and ``coupling`` take place ids (additions of 9-digit
numbers, least significant digit first, tiled to the length), ``spherical-harmonics`` its grid of the globe (degree 4,
its features concatenated). Memory: the bytes of the tensors each kind builds, read off them (LieRE's and ComRoPE's
rotations ``R`` and term; rope's cos/sin; the frames; the tables added or concatenated; eRPE's term). A kind that does
not take a grid's dims (``comrope`` AP needs ``dims * block_size`` to divide head_dim 64; ``vrope`` is 3D; the camera
kinds 2D or 3D; ``spherical-harmonics`` 2D; ``tape``, ``erpe``, ``abacus``, ``coupling`` 1D) is left out of that grid.
Run from the repository root:

    python benchmarks/bench_rotations.py --threads 1 --repeats 5 --json rotations.json
    python benchmarks/bench_rotations.py --threads 1 --repeats 9 --kinds rope gta prope \
        --cases "vit-s 14x14" "video 8x14x14"                                   # the camera kinds
    python benchmarks/bench_rotations.py --threads 1 --repeats 9 --kinds rope sinusoidal learned tape \
        spherical-harmonics abacus coupling erpe --cases "vit-s 14x14" "1D 196" "1D 1024"   # additive; erpe
    python benchmarks/bench_rotations.py --threads 1 --repeats 9 --kinds rope rope-learned dd-alibi-row \
        relative-proj point-transformer --cases "vit-s 14x14" "1D 196" "1D 1024" \
        --json benchmarks/results/rotations/rope_learned_and_biases.json        # learned frequencies, biases
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent))
from bench_rope import clock, save_json, time_interleaved  # noqa: E402  (same folder)

import ndpe  # noqa: E402
from ndpe.attention import attend_probs  # noqa: E402
from ndpe.contract import attn_term  # noqa: E402
from ndpe.registry import kind_class  # noqa: E402

CASES = {"vit-s 14x14": ((14, 14), 384, 6), "video 8x14x14": ((8, 14, 14), 384, 6),
         "1D 196": ((196,), 384, 6), "1D 1024": ((1024,), 384, 6)}
KINDS = {"rope": {}, "string (cayley)": {"init_std": 0.1}, "string (circulant)": {"orthogonal": "circulant", "init_std": 0.1},
         "liere (blocks of 8)": {"block_size": 8}, "liere (dense)": {},
         "comrope (ld, blocks of 8)": {"block_size": 8}, "comrope (ap, blocks of 8)": {"variant": "ap", "block_size": 8},
         "vrope": {}, "gta": {}, "prope": {},
         "sinusoidal (add)": {"combine": "add"}, "learned": {}, "tape": {}, "spherical-harmonics": {},
         "abacus": {}, "coupling": {}, "erpe": {}, "rope-learned": {}, "dd-alibi-row": {}, "relative-proj": {},
         "point-transformer": {}, "point-transformer (16 nearest)": {"neighbors": 16}}
ONLY = {"comrope (ap, blocks of 8)": (2,)}  # the grids' dims a kind takes, where its options narrow its kind's own
PLACE_IDS = ("abacus", "coupling")  # kinds called with place ids as positions (see place_ids)


def get_args_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--clock", choices=["wall", "cpu"], default=None)
    p.add_argument("--kinds", nargs="+", default=None,
                   help="rows to time, by name or by kind (liere: both of its rows); rope first, the ratios are to it "
                        "(default: every row)")
    p.add_argument("--cases", nargs="+", default=list(CASES), choices=list(CASES))
    p.add_argument("--json", default=None)
    return p


def selected(kinds: list[str] | None) -> list[str]:
    """The rows of :data:`KINDS` that ``kinds`` names (a row's name or its kind), in their order; all when None."""
    if kinds is None:
        return list(KINDS)
    if kinds[0] != "rope":
        raise SystemExit(f"--kinds must start with rope (the ratios are to it), got {kinds}")
    unknown = [k for k in kinds if not any(k in (name, name.split()[0]) for name in KINDS)]
    if unknown:
        raise SystemExit(f"--kinds: unknown {unknown}; expected names or kinds of {list(KINDS)}")
    return [name for name in KINDS if name in kinds or name.split()[0] in kinds]


def takes(name: str, grid: tuple[int, ...]) -> bool:
    """Whether the row ``name`` runs on ``grid``: its kind supports the grid's dims (and its options do)."""
    dims = len(grid)
    return dims in ndpe.available()[name.split()[0]] and dims in ONLY.get(name, (dims,))


def place_ids(n: int, digits: int = 9) -> torch.Tensor:
    """``(n, 1)`` place ids of additions ``a + b = c`` of ``digits``-digit numbers, least significant digit first
    (``i + 1`` for the digit of ``10**i``, 0 for ``+`` and ``=``), tiled to ``n`` tokens: abacus's and coupling's
    positions."""
    item = [*range(1, digits + 1), 0, *range(1, digits + 1), 0, *range(1, digits + 2), 0]
    return torch.tensor(item * (n // len(item) + 1), dtype=torch.float32)[:n, None]


def built_bytes(pos, pe, grid, x, q, k) -> int:
    """Bytes of what the kind builds for one layer: its PosOut tensors and, for a logits kind, its term."""
    tensors = [t for pair in (pos.rot or ()) for t in (pair if isinstance(pair, tuple) else (pair,))]
    tensors += [t for t in (pos.basis, pos.add, pos.cat, pos.bias, pos.prob_bias) if t is not None]
    tensors += list(pos.frame) if pos.frame is not None else []
    total = sum(t.numel() * t.element_size() for t in tensors)
    if pos.logits is not None:
        from ndpe.kinds.liere import LieRE
        if isinstance(pe, LieRE):
            total += pe._rotations(pe.coords(grid)).numel() * 4
        total += (pos.logits(q, k, x) if pos.logits.uses_states else pos.logits(q, k)).numel() * 4
    return total


def layer(pe, grid, x, q, k, v, attention: bool = True, **call) -> tuple[torch.Tensor, torch.Tensor]:
    """One call: encode, then one attention layer with the encoding (without the attention itself when not
    ``attention``: the encoding's part alone); the tokens with the encoding applied, and the attention's output."""
    with torch.no_grad():
        pos = pe(grid, **call)
        tokens = ndpe.apply_tokens(x, pos)
        rq, rk = ndpe.apply_qk(q, k, pos)
        causal = type(pe).is_causal_only(pe._init_kwargs)
        rv, mask = ndpe.apply_v(v, pos), attn_term(pos, q=rq, k=rk, x=x, causal=causal)  # apart, as ndpe.Attention
        if causal:
            mask = mask + ndpe.causal_mask(q.shape[-2])
        out = attend_probs(rq, rk, rv, pos, attn_mask=mask) if attention else rv
        return tokens, ndpe.apply_out(out, pos)


def main(args) -> dict:
    torch.set_num_threads(args.threads)
    names = selected(args.kinds)
    results: dict = {}
    for case in args.cases:
        grid, dim, heads = CASES[case]
        n = 1
        for s in grid:
            n *= s
        x = torch.randn(args.batch, n, dim)
        q, k, v = (torch.randn(args.batch, heads, n, dim // heads) for _ in range(3))
        steps, sizes = {}, {}
        here = [name for name in names if takes(name, grid)]
        for name in here:
            kind = name.split()[0]
            opts = {**kind_class(kind).task_options(dims=len(grid), causal=False, train_grid=grid, max_grid=grid),
                    **KINDS[name]}
            call = {"positions": place_ids(n)} if kind in PLACE_IDS else {}
            torch.manual_seed(0)
            pe = ndpe.make(dims=len(grid), kind=kind, dim=dim, heads=heads, **opts).eval()
            steps[name] = lambda pe=pe, call=call: layer(pe, grid, x, q, k, v, **call)
            steps[f"{name} [encoding]"] = lambda pe=pe, call=call: layer(pe, grid, x, q, k, v, attention=False, **call)
            with torch.no_grad():
                sizes[name] = built_bytes(pe(grid, **call), pe, grid, x, q, k)
        times = time_interleaved(steps, args.repeats, torch.device("cpu"), clock(args.clock), warmup=1)
        results[case] = {name: {"seconds": times[name], "bytes": sizes[name], "x rope": times[name] / times["rope"],
                                "encoding seconds": times[f"{name} [encoding]"],
                                "encoding x rope": times[f"{name} [encoding]"] / times["rope [encoding]"]}
                         for name in here}
        for name, r in results[case].items():
            print(f"{case:14s} {name:26s} {r['seconds'] * 1e3:9.1f} ms  x{r['x rope']:7.1f}  "
                  f"encoding {r['encoding seconds'] * 1e3:9.2f} ms  x{r['encoding x rope']:7.1f}  "
                  f"{r['bytes'] / 2 ** 20:9.2f} MiB", flush=True)
    save_json(args, results)
    return results


if __name__ == "__main__":
    main(get_args_parser().parse_args())
