"""Teaching figures: what an encoding looks like and how it behaves when the grid grows.

    python -m ndpe.viz --kind sinusoidal --dims 1 --grid 64 --out docs/figures
    python -m ndpe.viz --kind rope --dims 2 --grid 8 8 --grow 16 16 --out docs/figures

Each figure is computed from the encoding's ``PosOut`` alone, so it works for every kind:

- ``table``: the encoding as a matrix, tokens x channels (the classic sinusoidal picture; for
  rotary kinds the cos of the angles, for bias kinds one head's token x token bias);
- ``similarity``: how a query position relates to every other position (1D curve, 2D map, 3D
  middle frame): cosine similarity of additive/concatenated vectors, the rotary score of a
  query and key that hold the same content, or the bias row;
- ``offset``: that relation as a function of the offset from the first position along axis 0;
- ``grow``: the similarity map at the training grid beside a larger grid.

Needs matplotlib (the ``train`` extra).
"""
from __future__ import annotations

import argparse
from pathlib import Path

import torch
from einops import rearrange
from torch import Tensor

from .contract import PosOut
from .registry import available, make


def relation(pos: PosOut, query: int) -> Tensor:
    """How token ``query`` relates to all ``N`` tokens ``(N,)`` under one encoding (no prefix).

    Bias kinds: the bias row (mean over heads). Rotary kinds: ``q_i . k_j`` for content-free
    unit queries and keys (every pair (1, 0)), normalized to 1 at the query, mean over heads.
    Additive/concatenated kinds: cosine similarity of the position vectors.
    """
    if pos.bias is not None:
        bias = pos.bias.float()
        return bias.reshape(-1, *bias.shape[-2:]).mean(0)[query]
    if pos.rot is not None:
        cos, sin = (t.float().reshape(-1, *t.shape[-2:]) for t in pos.rot)  # (H, N, half)
        # (q rotated by a_i) . (k rotated by a_j) with q = k = (1, 0) per pair = cos(a_i - a_j)
        score = cos[:, query : query + 1] * cos + sin[:, query : query + 1] * sin  # (H, N, half)
        return score.mean(dim=(0, 2))
    vec = pos.add if pos.add is not None else pos.cat
    if vec is None:
        raise ValueError("this encoding adds nothing: no relation between positions to show")
    vec = vec.float().reshape(-1, *vec.shape[-2:]).mean(0)  # (N, C)
    return torch.nn.functional.cosine_similarity(vec[query : query + 1], vec, dim=-1)


def table(pos: PosOut) -> Tensor:
    """The encoding as a 2D matrix for a heatmap: (N, C) vectors, rotary cos (N, half), or bias (N, N)."""
    if pos.add is not None:
        return pos.add.float().reshape(-1, *pos.add.shape[-2:])[0]
    if pos.cat is not None:
        return pos.cat.float().reshape(-1, *pos.cat.shape[-2:])[0]
    if pos.rot is not None:
        return pos.rot[0].float().reshape(-1, *pos.rot[0].shape[-2:])[0]
    if pos.bias is not None:
        return pos.bias.float().reshape(-1, *pos.bias.shape[-2:])[0]
    raise ValueError("this encoding adds nothing: no table to show")


def as_image(values: Tensor, grid: tuple[int, ...]) -> Tensor:
    """Row-major ``(N,)`` values as a plottable map: 1D ``(1, n)``, 2D ``(rows, cols)``, 3D the middle frame."""
    grid_values = values.reshape(grid)
    if len(grid) == 1:
        return rearrange(grid_values, "n -> 1 n")
    if len(grid) == 3:
        return grid_values[grid[0] // 2]
    return grid_values


def centre_index(grid: tuple[int, ...]) -> int:
    """Row-major index of the grid's centre token."""
    index = 0
    for n in grid:
        index = index * n + n // 2
    return index


def draw(pe, grid: tuple[int, ...], grow: tuple[int, ...] | None, out_dir: Path, name: str) -> list[Path]:
    """Write the figures for ``pe`` and return their paths."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir.mkdir(parents=True, exist_ok=True)
    pe = pe.eval()
    paths = []
    with torch.no_grad():
        pos = pe(grid)
        q = centre_index(grid)

        fig, ax = plt.subplots(figsize=(6, 4))
        im = ax.imshow(table(pos).T, aspect="auto", cmap="RdBu_r", interpolation="nearest")
        ax.set(xlabel="token (row-major)", ylabel="channel" if pos.bias is None else "key token",
               title=f"{name}: encoding table, grid {grid}")
        fig.colorbar(im, ax=ax)
        paths.append(_save(fig, out_dir / f"{name}_table.png"))

        fig, ax = plt.subplots(figsize=(5, 4))
        rel = relation(pos, q)
        if len(grid) == 1:
            ax.plot(rel.numpy())
            ax.axvline(q, color="gray", ls=":")
            ax.set(xlabel="position", ylabel="relation to query")
        else:
            im = ax.imshow(as_image(rel, grid), cmap="viridis")
            fig.colorbar(im, ax=ax)
        ax.set_title(f"{name}: relation of token {q} to all, grid {grid}")
        paths.append(_save(fig, out_dir / f"{name}_similarity.png"))

        long_grid = (grid[0] * 4,) + tuple(grid[1:])
        rel0 = relation(pe(long_grid), 0)
        stride = int(torch.Size(grid[1:]).numel()) if len(grid) > 1 else 1
        fig, ax = plt.subplots(figsize=(5, 3.5))
        ax.plot(rel0[::stride].numpy(), marker=".")
        ax.axvline(grid[0] - 1, color="gray", ls=":", label="training extent")
        ax.set(xlabel="offset along axis 0", ylabel="relation", title=f"{name}: relation vs offset")
        ax.legend()
        paths.append(_save(fig, out_dir / f"{name}_offset.png"))

        if grow is not None:
            fig, axes = plt.subplots(1, 2, figsize=(9, 4))
            for ax, g in zip(axes, (grid, grow)):
                r = relation(pe(g), centre_index(g))
                if len(g) == 1:
                    ax.plot(r.numpy())
                else:
                    ax.imshow(as_image(r, g), cmap="viridis")
                ax.set_title(f"grid {g}")
            fig.suptitle(f"{name}: the relation map as the grid grows")
            paths.append(_save(fig, out_dir / f"{name}_grow.png"))
    return paths


def _save(fig, path: Path) -> Path:
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    import matplotlib.pyplot as plt

    plt.close(fig)
    return path


def _parse_option(text: str):
    key, _, value = text.partition("=")
    if not _:
        raise argparse.ArgumentTypeError(f"options are key=value, got {text!r}")
    import ast

    try:
        return key, ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return key, value


def main(argv: list[str] | None = None) -> list[Path]:
    parser = argparse.ArgumentParser(prog="ndpe-viz", description=__doc__.split("\n")[0])
    parser.add_argument("--kind", required=True, choices=sorted(available()))
    parser.add_argument("--dims", type=int, default=None, help="positional axes (default: len(--grid))")
    parser.add_argument("--grid", type=int, nargs="+", required=True, help="grid sizes, ij order")
    parser.add_argument("--grow", type=int, nargs="+", default=None, help="a larger grid to compare with")
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--heads", type=int, default=1)
    parser.add_argument("--option", type=_parse_option, action="append", default=[], metavar="KEY=VALUE")
    parser.add_argument("--out", type=Path, default=Path("figures"))
    parser.add_argument("--name", default=None, help="file name prefix (default: kind and dims)")
    args = parser.parse_args(argv)
    grid = tuple(args.grid)
    dims = args.dims or len(grid)
    torch.manual_seed(0)
    pe = make(dims=dims, kind=args.kind, dim=args.dim, heads=args.heads, **dict(args.option))
    paths = draw(pe, grid, tuple(args.grow) if args.grow else None, args.out, args.name or f"{args.kind}_{dims}d")
    for p in paths:
        print(p)
    return paths


if __name__ == "__main__":
    main()
