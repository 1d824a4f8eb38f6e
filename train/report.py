"""Turn a benchmark's ``results.csv`` into ``report.md`` and plots.

Each row of ``results.csv`` is one measurement: a trained model (domain, task, kind, seed)
evaluated at one test size under one test-time variant. The report aggregates over seeds
(mean +- std), one table per task, plots metric vs test size, and checks the trends the
literature reports against the measured numbers.
"""
from __future__ import annotations

import csv
import math
import statistics
from collections import defaultdict
from dataclasses import dataclass, fields
from pathlib import Path


@dataclass
class Row:
    """One line of results.csv."""

    domain: str
    task: str
    kind: str  # encoding as trained, e.g. "rope", "rope+cape", "conv+coord"
    variant: str  # test-time variant, e.g. "-" or "yarn"
    seed: int
    train_size: str
    test_size: str
    size_ratio: float  # test size / train size along the grown axis
    metric: str
    value: float
    higher_is_better: bool
    train_time_s: float

    @property
    def label(self) -> str:
        return self.kind if self.variant == "-" else f"{self.kind} ({self.variant})"


FIELDS = [f.name for f in fields(Row)]


def append_rows(path: Path, rows: list[Row]) -> None:
    """Append rows to a CSV (header written when new); flushed and fsynced so an interrupt loses nothing."""
    import os

    new = not path.exists()
    with open(path, "a", newline="") as f:
        writer = csv.DictWriter(f, FIELDS)
        if new:
            writer.writeheader()
        for r in rows:
            writer.writerow({k: getattr(r, k) for k in FIELDS})
        f.flush()
        os.fsync(f.fileno())


def read_rows(path: Path) -> list[Row]:
    if not path.exists():
        return []
    out = []
    with open(path, newline="") as f:
        for d in csv.DictReader(f):
            out.append(Row(domain=d["domain"], task=d["task"], kind=d["kind"], variant=d["variant"],
                           seed=int(d["seed"]), train_size=d["train_size"], test_size=d["test_size"],
                           size_ratio=float(d["size_ratio"]), metric=d["metric"], value=float(d["value"]),
                           higher_is_better=d["higher_is_better"] == "True", train_time_s=float(d["train_time_s"])))
    return out


@dataclass
class Cell:
    """Seeds aggregated: one (task, label, test size)."""

    mean: float
    std: float
    n: int

    def fmt(self, digits: int = 3) -> str:
        if math.isnan(self.mean):
            return "n/a"
        return f"{self.mean:.{digits}g} ± {self.std:.2g}" if self.n > 1 else f"{self.mean:.{digits}g}"


def aggregate(rows: list[Row]) -> dict[str, dict[str, dict[float, Cell]]]:
    """task -> label -> size_ratio -> Cell (mean, std over seeds)."""
    groups: dict = defaultdict(lambda: defaultdict(lambda: defaultdict(list)))
    for r in rows:
        groups[r.task][r.label][r.size_ratio].append(r.value)
    out: dict = {}
    for task, by_label in groups.items():
        out[task] = {}
        for label, by_size in by_label.items():
            out[task][label] = {
                s: Cell(statistics.fmean(v), statistics.stdev(v) if len(v) > 1 else 0.0, len(v))
                for s, v in sorted(by_size.items())
            }
    return out


def task_info(rows: list[Row]) -> dict[str, Row]:
    """One representative row per task (for its domain, metric, direction and sizes)."""
    info = {}
    for r in rows:
        info.setdefault(r.task, r)
    return info


def sizes_of(rows: list[Row], task: str) -> list[tuple[float, str]]:
    return sorted({(r.size_ratio, r.test_size) for r in rows if r.task == task})


def within_noise(a: Cell, b: Cell) -> bool:
    """Two cells differ by less than two standard errors of their difference (or only one seed each)."""
    if a.n < 2 or b.n < 2:
        return True
    se = math.sqrt(a.std ** 2 / a.n + b.std ** 2 / b.n)
    return abs(a.mean - b.mean) <= 2 * se


def ranking(agg_task: dict[str, dict[float, Cell]], ratio: float, higher: bool) -> list[tuple[str, Cell]]:
    cells = [(label, by[ratio]) for label, by in agg_task.items() if ratio in by]
    return sorted(cells, key=lambda lc: -lc[1].mean if higher else lc[1].mean)


def markdown_table(task: str, agg_task, sizes: list[tuple[float, str]], higher: bool, times: dict[str, float]) -> str:
    head = ["encoding"] + [f"{name} (×{ratio:g})" for ratio, name in sizes] + ["train s/run"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    top = {ratio: ranking(agg_task, ratio, higher)[0] for ratio, _ in sizes if ranking(agg_task, ratio, higher)}
    for label, by_size in ranking_order(agg_task, sizes, higher):
        cells = []
        for ratio, _ in sizes:
            cell = by_size.get(ratio)
            if cell is None:
                cells.append("–")
                continue
            text = cell.fmt()
            best_label, best = top[ratio]
            if label == best_label:
                text = f"**{text}**"
            elif within_noise(cell, best):
                text = f"{text} ~"
            cells.append(text)
        lines.append(f"| {label} | " + " | ".join(cells) + f" | {times.get(label.split(' (')[0], float('nan')):.1f} |")
    return "\n".join(lines)


def ranking_order(agg_task, sizes, higher):
    """Rows sorted by the metric at the largest test size."""
    last = sizes[-1][0]
    return sorted(agg_task.items(), key=lambda kv: (kv[1].get(last, Cell(float("nan"), 0, 0)).mean * (-1 if higher else 1))
                  if not math.isnan(kv[1].get(last, Cell(float("nan"), 0, 0)).mean) else math.inf)


def plot_task(task: str, agg_task, sizes, metric: str, out: Path) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(7, 4.2))
    colors, markers = plt.cm.tab20.colors, "osD^vP*Xhp<>"
    for i, (label, by_size) in enumerate(sorted(agg_task.items())):
        xs = [r for r, _ in sizes if r in by_size]
        ys = [by_size[r].mean for r in xs]
        es = [by_size[r].std for r in xs]
        style = "--" if "(" in label else "-"
        ax.errorbar(xs, ys, yerr=es, marker=markers[i % len(markers)], color=colors[i % len(colors)], ls=style,
                    capsize=2, label=label)
    ax.set(xlabel="test size / train size", ylabel=metric, title=task)
    ax.set_xticks([r for r, _ in sizes], [f"{n}\n×{r:g}" for r, n in sizes])
    if metric == "perplexity":
        ax.set_yscale("log")
    ax.legend(fontsize=7, ncol=2, loc="center left", bbox_to_anchor=(1.01, 0.5))
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)
    return out


# --- literature trends, checked against the measurements --------------------------------------

@dataclass
class Claim:
    """A trend a paper reports: ``better`` beats ``worse`` on ``task`` at the largest test size."""

    source: str
    text: str
    task: str
    better: list[str]
    worse: list[str]


CLAIMS = [
    Claim("Heo et al. 2024", "RoPE-Mixed ≥ RoPE-Axial > learned/sinusoidal when images grow",
          "image/shapes", ["rope-mixed", "rope"], ["learned", "sinusoidal"]),
    Claim("Press et al. 2022", "ALiBi and T5-style biases hold perplexity beyond the training length; sinusoidal "
          "and plain RoPE degrade", "text/stdlib_lm", ["alibi", "relative"], ["sinusoidal", "rope"]),
    Claim("Kazemnejad et al. 2023", "NoPE/T5/ALiBi length-generalize better than APE/RoPE on copy/reverse-style "
          "tasks", "text/copy", ["none", "relative", "alibi"], ["sinusoidal", "learned", "rope"]),
    Claim("Kazemnejad et al. 2023", "NoPE/T5/ALiBi length-generalize better than APE/RoPE on copy/reverse-style "
          "tasks", "text/reverse", ["none", "relative", "alibi"], ["sinusoidal", "learned", "rope"]),
    Claim("Liu et al. 2018", "CoordConv solves the coordinate task including the held-out quadrant where plain conv "
          "fails", "coord/quadrant", ["conv+coord"], ["conv"]),
]


def check_claim(claim: Claim, agg, info) -> str:
    if claim.task not in agg:
        return f"- **{claim.source}** — {claim.text}: not measured in this run (task `{claim.task}` not selected)."
    agg_task = agg[claim.task]
    row = info[claim.task]
    last = max(max(by) for by in agg_task.values())
    higher = row.higher_is_better

    def val(label):
        return agg_task.get(label, {}).get(last)

    better = {k: val(k) for k in claim.better if val(k) is not None}
    worse = {k: val(k) for k in claim.worse if val(k) is not None}
    if not better or not worse:
        return f"- **{claim.source}** — {claim.text}: kinds missing from this run."
    sign = 1 if higher else -1
    wins, ties, losses = [], [], []
    for b, cb in better.items():
        for w, cw in worse.items():
            pair = f"{b} {cb.fmt()} vs {w} {cw.fmt()}"
            if within_noise(cb, cw):
                ties.append(pair)
            elif sign * (cb.mean - cw.mean) > 0:
                wins.append(pair)
            else:
                losses.append(pair)
    total = len(wins) + len(ties) + len(losses)
    if len(wins) == total:
        verdict = "agrees"
    elif not wins and not losses:
        verdict = "inconclusive (all differences within noise)"
    elif len(losses) > len(wins):
        verdict = "disagrees"
    else:
        verdict = "partly agrees"
    detail = "; ".join(
        [f"agree: {', '.join(wins)}" if wins else "", f"within noise: {', '.join(ties)}" if ties else "",
         f"disagree: {', '.join(losses)}" if losses else ""])
    first = min(min(by) for by in agg_task.values())
    at_train = ", ".join(f"{k} {agg_task[k][first].mean:.3g}" for k in [*better, *worse] if first in agg_task[k])
    context = f" In distribution (×{first:g}): {at_train}." if last != first else ""
    return (f"- **{claim.source}** — {claim.text}. Measured at ×{last:g} ({row.metric}): **{verdict}**. "
            f"{detail.strip('; ').replace(';  ;', ';')}.{context}")


def summary_table(agg, info) -> str:
    """One row per encoding, one column per task: the metric at the training size → at the largest size."""
    tasks = sorted(agg)
    labels = sorted({label for t in tasks for label in agg[t]}, key=lambda l: (l.startswith("conv"), "(" in l, l))
    head = ["encoding"] + [f"{t} ({info[t].metric}{'↑' if info[t].higher_is_better else '↓'})" for t in tasks]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for label in labels:
        cells = []
        for t in tasks:
            by = agg[t].get(label)
            if not by:
                cells.append("")
                continue
            first, last = min(by), max(by)
            a = f"{by[first].mean:.3g}" if first == 1.0 else "–"
            cells.append(a if last == first else f"{a} → {by[last].mean:.3g}")
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def write_report(run_dir: Path, header: str, select=None) -> Path:
    """Write report.md and plots for ``run_dir/results.csv`` (``select`` filters its rows); returns the path."""
    rows = read_rows(run_dir / "results.csv")
    if select is not None:
        rows = select(rows)
    agg, info = aggregate(rows), task_info(rows)
    times: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.variant == "-" and r.size_ratio == 1.0:
            times[r.task][r.kind].append(r.train_time_s)
    parts = [header, "", "## Summary", "",
             "Mean over seeds at the training size → at the largest test size (× in the column tables below).", "",
             summary_table(agg, info), "", "## Per task", "", "Cells: mean ± std over seeds. **Bold**: best at that size; `~`: within noise of the best "
             "(difference under two standard errors). Sizes are test size / train size.", ""]
    for task in sorted(agg):
        row = info[task]
        sizes = sizes_of(rows, task)
        arrow = "higher is better" if row.higher_is_better else "lower is better"
        plot = plot_task(task, agg[task], sizes, row.metric, run_dir / f"{task.replace('/', '_')}.png")
        mean_times = {k: statistics.fmean(v) for k, v in times[task].items()}
        parts += [f"### {task} — {row.metric} ({arrow}), trained at {row.train_size}", "",
                  markdown_table(task, agg[task], sizes, row.higher_is_better, mean_times), "",
                  f"![{task}]({plot.name})", ""]
    parts += ["## Does it reproduce the literature?", ""]
    parts += [check_claim(c, agg, info) for c in CLAIMS]
    out = run_dir / "report.md"
    out.write_text("\n".join(parts) + "\n")
    return out
