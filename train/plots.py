"""Plots of the benchmark report: one figure per task, metric against test size.

Every kind keeps one colour and marker in every figure (:func:`kind_style`: the library's kinds declare theirs,
``ndpe.catalog``); a test-time variant ("rope (yarn)") takes its kind's colour with its own line style; floors are
dashed grey steps.
"""
from __future__ import annotations

import math
import zlib
from pathlib import Path

from ndpe import catalog
from ndpe.registry import available

from .results import FLOOR_PREFIX, Cell, is_floor, kind_of, size_label, split_floors
from .stats import t_interval

# (colour, marker) of the benchmark's own names (augmented kinds, the conv nets); a library kind takes its own
BENCH_STYLES = {"rope+cape": ("#e377c2", "v"), "sinusoidal+cape": ("#b8860b", "<"), "conv": ("#393b79", "s"),
                "conv+coord": ("#637939", "o")}
EXTRA_COLOURS = ["#843c39", "#7b4173", "#3182bd", "#31a354", "#e6550d", "#756bb1", "#636363"]
VARIANT_STYLES = {"pi": ("--", "v"), "ntk": (":", "^"), "yarn": ("-.", "s")}  # variant -> (line style, marker)
FLOOR_STYLES = [("#4d4d4d", (0, (5, 2))), ("#7a7a7a", (0, (2, 2))), ("#a0a0a0", (0, (6, 2, 1, 2))),
                ("#5f5f5f", (0, (1, 1))), ("#8c8c8c", (0, (8, 3)))]
FLOOR_ORDER = ["chance", "majority", "most-common-symbol", "order-blind", "unigram", "bigram", "trigram", "mean-predictor"]


def stable_index(name: str, n: int) -> int:
    """A position in 0..n-1 that depends only on ``name`` (same in every process, unlike ``hash``)."""
    return zlib.crc32(name.encode()) % n


def kind_style(kind: str) -> tuple[str, str]:
    """``(colour, marker)`` of a benchmark kind name: the benchmark's own (:data:`BENCH_STYLES`), a library kind's
    (``ndpe.catalog``: declared by the kind or derived from its name), else a stable extra colour."""
    if kind in BENCH_STYLES:
        return BENCH_STYLES[kind]
    if kind in available():
        return catalog.colour(kind), catalog.marker(kind)
    return EXTRA_COLOURS[stable_index(kind, len(EXTRA_COLOURS))], "o"


def series_style(label: str) -> dict:
    """Matplotlib keywords (color, marker, linestyle) for an encoding's label, the same in every figure."""
    kind = kind_of(label)
    colour, marker = kind_style(kind)
    linestyle = "-"
    if label != kind:
        variant = label[len(kind) + 2:-1]
        linestyle, marker = VARIANT_STYLES.get(variant, ((0, (3, 1, 1, 1, 1, 1)), "d"))
    return {"color": colour, "marker": marker, "linestyle": linestyle}


def floor_style(name: str) -> dict:
    """Matplotlib keywords (grey colour, dashes) for a floor, the same in every figure."""
    i = FLOOR_ORDER.index(name) if name in FLOOR_ORDER else stable_index(name, len(FLOOR_STYLES))
    colour, dashes = FLOOR_STYLES[i % len(FLOOR_STYLES)]
    return {"color": colour, "linestyle": dashes}


def metric_range(metric: str) -> tuple[float, float]:
    """The values a metric can take: accuracies in [0, 1], perplexity >= 1, errors and losses >= 0."""
    if metric in ("acc", "accuracy", "seq_acc") or metric.endswith("_acc"):
        return 0.0, 1.0
    if metric in ("ppl", "perplexity"):
        return 1.0, math.inf
    if "err" in metric or "loss" in metric:
        return 0.0, math.inf
    return -math.inf, math.inf


def clipped_errors(cells: list[Cell], metric: str) -> list[list[float]]:
    """Asymmetric error bars (the 95 % t interval over runs; none for one run) that stay inside the metric's
    range: [[below...], [above...]]."""
    lo, hi = metric_range(metric)
    half = [t_interval(c.values).half_width if c.n > 1 else 0.0 for c in cells]
    below = [max(0.0, min(h, c.mean - lo)) for h, c in zip(half, cells)]
    above = [max(0.0, min(h, hi - c.mean)) for h, c in zip(half, cells)]
    return [below, above]


def step_edges(xs: list[float]) -> list[float]:
    """Edges of one step per x on a log axis: geometric midpoints, half a step past each end."""
    if len(xs) == 1:
        return [xs[0] / 1.25, xs[0] * 1.25]
    mids = [math.sqrt(a * b) for a, b in zip(xs, xs[1:])]
    return [xs[0] ** 2 / mids[0], *mids, xs[-1] ** 2 / mids[-1]]


def task_figure(task: str, agg_task, sizes, metric: str, higher: bool | None = None):
    """The figure of one task: each encoding (mean and 95 % t interval over runs, clipped to the metric's range) and each
    floor (dashed grey steps) against the test size on a log axis; log y for perplexity."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import FuncFormatter, NullLocator

    fig, ax = plt.subplots(figsize=(9, 4.8))
    encodings, floors = split_floors(agg_task)
    for label, by_size in sorted(encodings.items()):
        xs = [r for r, _ in sizes if r in by_size]
        cells = [by_size[r] for r in xs]
        ax.errorbar(xs, [c.mean for c in cells], yerr=clipped_errors(cells, metric), capsize=2, markersize=5,
                    linewidth=1.4, label=label, **series_style(label))
    for name, by_size in sorted(floors.items()):
        xs = [r for r, _ in sizes if r in by_size]
        ax.stairs([by_size[r].mean for r in xs], step_edges(xs), baseline=None, linewidth=1.3,
                  label=FLOOR_PREFIX + name, **floor_style(name))
    ratios = [r for r, _ in sizes]
    ax.set_xscale("log")
    ax.set_xticks(ratios, [size_label(name, r) for r, name in sizes], fontsize=8)
    ax.xaxis.set_minor_locator(NullLocator())
    if metric in ("ppl", "perplexity"):
        ax.set_yscale("log")
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)
    direction = "" if higher is None else f" ({'higher' if higher else 'lower'} is better)"
    ax.set(xlabel="test size (× training size)", ylabel=metric, title=f"{task} — {metric}{direction}")
    ax.grid(alpha=0.25)
    handles, labels = ax.get_legend_handles_labels()
    order = sorted(range(len(labels)), key=lambda i: is_floor(labels[i]))  # encodings first, then floors
    ax.legend([handles[i] for i in order], [labels[i] for i in order], fontsize=8,
              ncol=1 if len(labels) <= 12 else 2, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    return fig


def plot_task(task: str, agg_task, sizes, metric: str, out: Path, higher: bool | None = None) -> Path:
    """Save ``task_figure`` to ``out``; returns ``out``."""
    import matplotlib.pyplot as plt

    fig = task_figure(task, agg_task, sizes, metric, higher)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
