"""The benchmark tab's charts: one matplotlib figure per task of a run, as SVG text the page inlines.

Made in Python when the page is built, from the numbers the tab shows (``explore.json``), so the chart and the
table cannot disagree. SVG with its text as text: sharp at any device pixel ratio and zoom, and the page can hide
a series (its line, error bars and markers are the SVG groups ``<id>-...``, its legend entry ``<id>-legend-...``).

Each label gets its kind's colour (:func:`ndpe.catalog.colour`), and the variants of one kind (``rope (ntk)``,
``rope (yarn)``...) a line style and marker of their own; floors are grey, each with its own dashes, marker and
shade, so four floors are four lines told apart. Test sizes are multiples of the training size, drawn on a log
axis; a metric that is itself a ratio (perplexity) too. Labels sit in a legend under the axes, never on the
curves, so no two overlap whatever the values; the figure is drawn about a phone's width (:data:`WIDTH_IN`), so
at 390 px its text is drawn at its own size, and the page caps it on a desktop.
"""
from __future__ import annotations

import io
import math
from typing import Any

from ..registry import available

RATIO_METRICS = ("ppl",)  # metrics drawn on a log axis: a factor of 2 looks the same at 4 as at 40
VARIANT_STYLES = (("-", "o"), ("--", "v"), (":", "s"), ("-.", "^"), ((0, (3, 1, 1, 1)), "D"), ((0, (5, 2)), "P"))
FLOOR_STYLES = (((0, (4, 3)), "x", "#8c8c8c"), ((0, (1, 2)), "+", "#5f5f5f"), ((0, (7, 2, 1, 2)), "1", "#a6a6a6"),
                ((0, (2, 2)), "|", "#737373"), ((0, (9, 3)), "2", "#999999"))  # dashes, marker, grey: one a floor
OTHER_COLOUR = "#4d4d4d"
WIDTH_IN = 5.0  # inches at 72 points: 360 px wide at scale 1, a phone's content width


def series_ids(task: dict[str, Any]) -> dict[str, str]:
    """Each label of ``task`` -> the id prefix of its SVG groups (``s0``, ``s1``...), in the task's order."""
    return {label: f"s{i}" for i, label in enumerate(task["series"])}


def _styles(task: dict[str, Any]) -> dict[str, dict[str, Any]]:
    from ..catalog import colour

    seen: dict[str, int] = {}
    out: dict[str, dict[str, Any]] = {}
    floors = 0
    for label, ser in task["series"].items():
        if ser["floor"]:
            dashes, floor_marker, grey = FLOOR_STYLES[floors % len(FLOOR_STYLES)]
            floors += 1
            out[label] = {"color": grey, "ls": dashes, "marker": floor_marker, "lw": 1.3}
            continue
        kind = ser["kind"]
        ls, marker = VARIANT_STYLES[seen.get(kind, 0) % len(VARIANT_STYLES)]
        seen[kind] = seen.get(kind, 0) + 1
        out[label] = {"color": colour(kind) if kind in available() else OTHER_COLOUR, "ls": ls, "marker": marker,
                      "lw": 1.8}
    return out


def task_chart(name: str, task: dict[str, Any]) -> str:
    """One task's chart as SVG text: every label's mean with its 95 % interval against the test size (one size:
    a dot per label)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.lines import Line2D

    ids, styles = series_ids(task), _styles(task)
    labels = list(task["series"])
    ratios = [z["ratio"] for z in task["sizes"]]
    shown = [label + ("" if task["series"][label]["counts"] is not False else " ✗") for label in labels]
    with matplotlib.rc_context({"svg.fonttype": "none", "svg.hashsalt": "ndpe-explore", "font.size": 10,
                                "font.family": "sans-serif"}):
        rows = math.ceil(len(labels) / 2)  # the legend's rows under the axes, two entries a row
        fig, ax = plt.subplots(figsize=(WIDTH_IN, 3.3 + 0.19 * rows + (0.9 if len(ratios) == 1 else 0)),
                               layout="constrained")
        for i, label in enumerate(labels):
            ser, st = task["series"][label], styles[label]
            points = [p for p in ser["points"] if p["mean"] is not None]
            if len(ratios) == 1:  # one size: a dot per label, labels down the axis
                xs = [i] * len(points)
            else:
                xs = [p["ratio"] for p in points]
            ys = [p["mean"] for p in points]
            low = [p["mean"] - p["lo"] if p["lo"] is not None else 0.0 for p in points]
            high = [p["hi"] - p["mean"] if p["hi"] is not None else 0.0 for p in points]
            line, = ax.plot(xs, ys, color=st["color"], ls=st["ls"] if len(ratios) > 1 else "none",
                            marker=st["marker"] or "_", lw=st["lw"], ms=5, zorder=3 if not ser["floor"] else 2)
            line.set_gid(f"{ids[label]}-line")
            bars = ax.errorbar(xs, ys, yerr=[low, high], fmt="none", ecolor=st["color"], elinewidth=1, capsize=2.5,
                               zorder=2)
            for j, part in enumerate([*bars.lines[1], *bars.lines[2]]):
                part.set_gid(f"{ids[label]}-err{j}")
        if task["metric"] in RATIO_METRICS:  # plain numbers at 1, 2, 4, 6 x each power of 10 (no 6 x 10^1)
            ax.set_yscale("log")
            ax.yaxis.set_major_locator(matplotlib.ticker.LogLocator(subs=(1.0, 2.0, 4.0, 6.0)))
            ax.yaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            ax.yaxis.set_major_formatter(matplotlib.ticker.FuncFormatter(lambda v, _: f"{v:g}"))
        if len(ratios) == 1:
            ax.set_xticks(range(len(labels)), shown, rotation=35, ha="right", fontsize=8)
            ax.set_xlim(-0.6, len(labels) - 0.4)
            ax.set_xlabel(f"encoding (one test size: {task['sizes'][0]['label']})")
        else:
            ax.set_xscale("log")
            ax.set_xticks(ratios, [z["label"] for z in task["sizes"]])
            ax.xaxis.set_minor_locator(matplotlib.ticker.NullLocator())
            span = math.log(max(ratios) / min(ratios))
            ax.set_xlim(min(ratios) * math.exp(-0.06 * span), max(ratios) * math.exp(0.06 * span))
            ax.set_xlabel("test size (× the training size, log scale)")
        ax.set_ylabel(f"{task['metric']} ({'higher' if task['higher'] else 'lower'} is better"
                      f"{', log scale' if task['metric'] in RATIO_METRICS else ''})")
        ax.grid(True, color="#e6e6e6", lw=0.8)
        ax.set_axisbelow(True)
        handles = [Line2D([], [], color=styles[label]["color"], ls=styles[label]["ls"], lw=styles[label]["lw"],
                          marker=styles[label]["marker"], ms=5) for label in labels]
        legend = fig.legend(handles, shown, loc="outside lower center", ncols=2, fontsize=9, frameon=False)
        for label, handle, text in zip(labels, legend.legend_handles, legend.get_texts()):
            if handle is not None:  # one per entry (a Line2D here): matplotlib types it optional
                handle.set_gid(f"{ids[label]}-legend-handle")
            text.set_gid(f"{ids[label]}-legend-text")
        ax.set_title(name, fontsize=10)
        buffer = io.StringIO()
        fig.savefig(buffer, format="svg", metadata={"Date": None, "Creator": None})
        plt.close(fig)
    svg = buffer.getvalue()
    return svg[svg.index("<svg"):]  # no XML prolog or doctype inside the page


def bench_charts(bench: dict[str, Any]) -> dict[str, Any]:
    """Every task's chart: ``{task: {"svg": text, "ids": {label: id}}}``."""
    return {name: {"svg": task_chart(name, task), "ids": series_ids(task)} for name, task in bench["tasks"].items()}
