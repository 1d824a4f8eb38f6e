"""Whether a kind interpolates or extrapolates its positions at a test size, measured from what it encodes.

A model trained on one grid meets, at a larger size, positions it never saw. They either lie among the trained ones
(**interpolates**: centred coordinates under a zoom, position interpolation, a resized table) or beyond them
(**extrapolates**: index coordinates on any larger grid). The report says which, per kind and test size
(:func:`regimes`), for the tasks whose grid is 2D or 3D (image, audio, video). It builds each encoding as the
benchmark does (:func:`train.evaluate.pe_config`), asks it for the coordinates it encodes on the training grid and on
the grown one (``Encoding.coords``: the kind's own convention; position interpolation divides them by each axis's
growth, as :func:`train.evaluate.scaled_rope`'s linear scaling does), and compares their ranges axis by axis: a
coordinate more than half a training step beyond the trained range extrapolates. Half a step admits the zoom's new
outermost patch centres (``centered``: 0.9375 against 0.875 on 8 -> 16 patches) and position interpolation's last
index (7.5 against 7); nothing that extrapolates comes that close.

A learned table has no coordinates: resized to the new grid it interpolates (``resize``), else the new positions
look up rows no training position reached. NTK and YaRN keep the coordinates and rescale rotary frequencies instead
(the slowest interpolated, the fastest kept): where the coordinates extrapolate, they say so with that note.

The grid that grows with the task's size: a zoom or canvas image both axes (``image_size``), a pair of digits side by
side its width, a video its frames and a clip its time axis (the first axis of the audio models' ``(time, freq)``
grid). The regime depends only on the coordinates' ranges, so a nominal training grid of :data:`NOMINAL` points per
axis, grown by the size ratio, stands for the task's own.
"""
from __future__ import annotations

import ndpe

from .bench_config import BenchConfig, split_label
from .evaluate import pe_config
from .protocol import Task
from .results import size_label

NOMINAL = 8
GROWS = {"image_size": None, "width": (-1,), "frames": (0,), "duration": (0,)}  # size_key -> axes that grow (None: all)
INTERPOLATES, EXTRAPOLATES = "interpolates", "extrapolates"
FREQUENCIES = {"ntk": "extrapolates (NTK: slow frequencies interpolated)",
               "yarn": "extrapolates (YaRN: slow frequencies interpolated)"}


def grown_grid(task: Task, ratio: float) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(training grid, grid at size ratio)``: :data:`NOMINAL` points per axis, the axes that grow times ``ratio``."""
    if task.size_key not in GROWS:
        raise ValueError(f"{task.name}: no known growing axes for size {task.size_key!r} "
                         f"(expected one of {sorted(GROWS)})")
    axes = GROWS[task.size_key]
    axes = range(task.dims) if axes is None else [a % task.dims for a in axes]
    train = (NOMINAL,) * task.dims
    return train, tuple(round(NOMINAL * ratio) if a in axes else NOMINAL for a in range(task.dims))


def regime(kind: str, task: Task, ratio: float, variant: str = "-", cfg: BenchConfig | None = None) -> str:
    """Whether ``kind`` (a benchmark label: ``"rope@centered"``) with test-time ``variant`` (``"-"``, ``"pi"``,
    ``"ntk"``, ``"yarn"``) interpolates or extrapolates its positions at ``ratio`` times ``task``'s training size.

    >>> from train.protocol import TASKS
    >>> [regime(k, TASKS["image/shapes-zoom"], 2.0) for k in ("rope", "rope@centered", "learned", "none")]
    ['extrapolates', 'interpolates', 'interpolates (table resized)', 'no positions']
    >>> regime("rope", TASKS["image/shapes-zoom"], 2.0, "pi"), regime("rope", TASKS["video/trajectory"], 1.5, "ntk")
    ('interpolates', 'extrapolates (NTK: slow frequencies interpolated)')
    """
    if ratio <= 1.0:
        return "trained"
    base = split_label(kind)[0]
    if base == "none":
        return "no positions"
    cfg = cfg or BenchConfig()
    train, grid = grown_grid(task, ratio)
    spec = pe_config(kind, task, train, grid)
    heads = int(task.model_opts.get("heads", cfg.heads))
    pe = ndpe.make(dims=task.dims, kind=spec["kind"], dim=int(task.model_opts.get("dim", cfg.dim)), heads=heads,
                   **spec["options"])
    if not pe.coordinate_based:
        if getattr(pe, "resize", None):
            return INTERPOLATES + " (table resized)"
        return EXTRAPOLATES + " (untrained rows)"
    seen, new = pe.coords(train).double(), pe.coords(grid).double()
    if variant == "pi":  # position interpolation: positions divided by the growth of each axis
        new = new / new.new_tensor([g / t for g, t in zip(grid, train)])
    elif variant != "-" and variant not in FREQUENCIES:
        raise ValueError(f"unknown test-time variant {variant!r}; expected '-', 'pi' or one of {sorted(FREQUENCIES)}")
    low, high = seen.amin(0), seen.amax(0)
    step = (high - low) / max(NOMINAL - 1, 1)
    beyond = (new.amax(0) - high).clamp(min=0) + (low - new.amin(0)).clamp(min=0)
    if bool((beyond > 0.5 * step + 1e-9).any()):
        return FREQUENCIES.get(variant, EXTRAPOLATES)
    return INTERPOLATES


def regimes(task: Task, labels: list[str], sizes: list[tuple[float, str]]) -> list[str]:
    """Report lines: at each test size beyond the training one (``(size ratio, size label)`` pairs), the kinds that
    interpolate and those that extrapolate; ``labels`` as the report names them (``"rope"``, ``"rope (pi)"``); none
    for a 1D or conv task."""
    if task.conv or task.dims < 2:
        return []
    lines = []
    for ratio, size in sizes:
        if ratio <= 1.0:
            continue
        groups: dict[str, list[str]] = {}
        for label in labels:
            kind, _, variant = label.partition(" (")
            groups.setdefault(regime(kind, task, ratio, variant.rstrip(")") or "-"), []).append(label)
        order = sorted(groups, key=lambda r: (not r.startswith(INTERPOLATES), r))
        lines.append(f"- positions at {size_label(size, ratio)}: "
                     + "; ".join(f"{r}: {', '.join(groups[r])}" for r in order))
    return lines
