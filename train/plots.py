"""Plots of the benchmark report: one figure per task, metric against test size.

Every kind keeps one colour and marker in every figure (:func:`kind_style`: the library's kinds declare theirs,
``ndpe.catalog``); a test-time variant ("rope (yarn)") takes its kind's colour with its own line style; floors are
dashed grey steps. A task with more than :data:`ONE_PANEL_MAX` encodings is drawn as small multiples, one panel per
way of acting (:func:`group_of`: absolute, rotary, bias, logits), on one shared y axis: each panel draws its group in
colour over every other encoding in faint grey, and the NoPE baseline (``none``) and the floors in every panel.
"""
from __future__ import annotations

import functools
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
    base, _, coords = kind.partition("@")  # "rope@centered": rope's colour, dotted (another coordinate convention)
    colour, marker = kind_style(base)
    linestyle = (0, (1, 1)) if coords else "-"
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


ONE_PANEL_MAX = 8  # encodings one panel shows legibly; more are split into panels by group
BASELINE = "none"  # drawn in every panel: what a model without positions reaches
# panels of a crowded figure: title -> how its kinds act (ndpe.catalog.acts_by); a kind in none of them is "other"
GROUPS = {"absolute (add, concat, tokens)": ("add", "concat", "transforms tokens"),
          "rotary (rotate q, k)": ("rotate q, k", "rotate q, k apart"),
          "bias (added to the logits)": ("bias",), "logits from q, k": ("logits from q, k",)}
OTHER_GROUP = "other"
FAINT = {"color": "#bdbdbd", "linewidth": 0.8, "alpha": 0.6, "zorder": 1}  # the other panels' encodings, as context


@functools.lru_cache(maxsize=None)
def group_of(label: str) -> str:
    """The panel (:data:`GROUPS`) of an encoding's label: how its kind acts, read from ``ndpe.catalog``; a benchmark
    name "kind+augment" goes with its kind; anything else (the conv nets) is :data:`OTHER_GROUP`."""
    kind = kind_of(label).partition("@")[0].split("+")[0]
    if kind not in available():
        return OTHER_GROUP
    acts = set(catalog.acts_by(kind).split(" + "))
    return next((title for title, ways in GROUPS.items() if acts & set(ways)), OTHER_GROUP)


def _draw_encoding(ax, label: str, by_size, sizes, metric: str, faint: bool = False) -> None:
    """One encoding's means against the test size: with its 95 % t intervals in its style, or a faint grey line."""
    xs = [r for r, _ in sizes if r in by_size]
    cells = [by_size[r] for r in xs]
    if faint:
        ax.plot(xs, [c.mean for c in cells], **FAINT)
        return
    ax.errorbar(xs, [c.mean for c in cells], yerr=clipped_errors(cells, metric), capsize=2, markersize=5,
                linewidth=1.4, label=label, zorder=3, **series_style(label))


def _draw_floors(ax, floors, sizes) -> None:
    for name, by_size in sorted(floors.items()):
        xs = [r for r, _ in sizes if r in by_size]
        ax.stairs([by_size[r].mean for r in xs], step_edges(xs), baseline=None, linewidth=1.3,
                  label=FLOOR_PREFIX + name, zorder=2, **floor_style(name))


def _format_axis(ax, sizes, metric: str) -> None:
    """Test sizes on a log x axis, labelled; log y for perplexity; a light grid."""
    from matplotlib.ticker import FuncFormatter, NullLocator

    ratios = [r for r, _ in sizes]
    ax.set_xscale("log")
    ax.set_xticks(ratios, [size_label(name, r) for r, name in sizes], fontsize=8)
    ax.xaxis.set_minor_locator(NullLocator())
    if metric in ("ppl", "perplexity"):
        ax.set_yscale("log")
        plain = FuncFormatter(lambda v, _: f"{v:g}")
        ax.yaxis.set_major_formatter(plain)
        ax.yaxis.set_minor_formatter(plain)
    ax.grid(alpha=0.25)


def _legend(ax, floors: bool = True, **kwargs) -> None:
    """The legend of ``ax``: encodings first, then the floors (left out with ``floors=False``)."""
    handles, labels = ax.get_legend_handles_labels()
    shown = [i for i in range(len(labels)) if floors or not is_floor(labels[i])]
    order = sorted(shown, key=lambda i: is_floor(labels[i]))
    ax.legend([handles[i] for i in order], [labels[i] for i in order], fontsize=8, **kwargs)


def task_figure(task: str, agg_task, sizes, metric: str, higher: bool | None = None):
    """The figure of one task: each encoding (mean and 95 % t interval over runs, clipped to the metric's range) and each
    floor (dashed grey steps) against the test size on a log axis; log y for perplexity. More than
    :data:`ONE_PANEL_MAX` encodings: one panel per group (:func:`group_of`) sharing the y axis."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    encodings, floors = split_floors(agg_task)
    direction = "" if higher is None else f" ({'higher' if higher else 'lower'} is better)"
    title = f"{task} — {metric}{direction}"
    if len(encodings) <= ONE_PANEL_MAX:
        fig, ax = plt.subplots(figsize=(9, 4.8))
        for label, by_size in sorted(encodings.items()):
            _draw_encoding(ax, label, by_size, sizes, metric)
        _draw_floors(ax, floors, sizes)
        _format_axis(ax, sizes, metric)
        ax.set(xlabel="test size (× training size)", ylabel=metric, title=title)
        _legend(ax, ncol=1 if len(encodings) + len(floors) <= 12 else 2, loc="center left", bbox_to_anchor=(1.01, 0.5))
        fig.tight_layout()
        return fig
    groups: dict[str, list[str]] = {}
    for label in sorted(encodings):
        if label != BASELINE:
            groups.setdefault(group_of(label), []).append(label)
    order = [g for g in (*GROUPS, OTHER_GROUP) if g in groups]
    cols = min(len(order), 2)
    rows = math.ceil(len(order) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(6.2 * cols + 1.6, 3.9 * rows + 0.7), sharey=True, squeeze=False,
                             layout="constrained")
    for i, (ax, group) in enumerate(zip(axes.flat, order)):
        for label, by_size in sorted(encodings.items()):  # the others first, faint, under the group's
            if label not in groups[group] and label != BASELINE:
                _draw_encoding(ax, label, by_size, sizes, metric, faint=True)
        for label in ([BASELINE] if BASELINE in encodings else []) + groups[group]:
            _draw_encoding(ax, label, encodings[label], sizes, metric)
        _draw_floors(ax, floors, sizes)
        _format_axis(ax, sizes, metric)
        ax.set_title(group, fontsize=10)
        ax.set_xlabel("test size (× training size)", fontsize=9)
        ax.set_ylabel(metric)
        ax.tick_params(which="both", labelleft=True)  # shared y: still labelled in every panel
        _legend(ax, floors=i == 0, loc="best", framealpha=0.85)  # the floors, the same in every panel, named once
    for ax in list(axes.flat)[len(order):]:
        ax.axis("off")
    fig.suptitle(f"{title}; each panel: one group in colour, the other encodings faint grey", fontsize=11)
    return fig


def plot_task(task: str, agg_task, sizes, metric: str, out: Path, higher: bool | None = None) -> Path:
    """Save ``task_figure`` to ``out``; returns ``out``."""
    import matplotlib.pyplot as plt

    fig = task_figure(task, agg_task, sizes, metric, higher)
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out
