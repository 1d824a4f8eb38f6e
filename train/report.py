"""Turn a benchmark's ``results.csv`` into ``report.md`` and plots, by the rules of ``train/protocol.py``.

Each run (model seed x data seed) is one sample; every number is a mean over runs with its 95 % t
interval (``train/stats.py``). The report decides, per task, whether it was learned at this budget
(its best kinds pass the competence bar), which kinds count (pass the bar and beat every floor of
their data) and which use position (also beat the order-blind floor and NoPE); it gives retention
beyond the training size and checks each literature claim with Holm-corrected tests.
"""
from __future__ import annotations

import math
import statistics
from collections import defaultdict
from pathlib import Path

from . import stats
from .claims import (LOG_METRICS, Verdict, check_claim, claim_line, measured_values,  # noqa: F401
                     zoom_and_canvas)
from .claims_table import halves_table
from .curves import BUDGET_SHARE, task_budget
from .competence import (NOPE, Competence, KindStatus, beats, beats_welch, competence, good,  # noqa: F401 (re-exported)
                         in_distribution, margins, passes_bar, retention, strongest_floor, train_ratio,
                         with_floor)
from .protocol import CLAIMS, TASKS
from .regime import regimes
from .results import FLOOR_PREFIX, SEARCH, SEARCH_LOSS, Cell, Row, aggregate, is_floor, kind_of, read_rows, size_label, split_floors

def task_info(rows: list[Row]) -> dict[str, Row]:
    """One representative row per task (for its domain, metric, direction and sizes)."""
    info: dict[str, Row] = {}
    for r in rows:  # an encoding's row where there is one (a search's loss row is not in the task's metric)
        if r.split == SEARCH_LOSS:
            continue
        if r.task not in info or (info[r.task].kind == "floor" and r.kind != "floor"):
            info[r.task] = r
    return info


def sizes_of(rows: list[Row], task: str) -> list[tuple[float, str]]:
    """The (size_ratio, test_size) pairs of a task's test rows, smallest first."""
    return sorted({(r.size_ratio, r.test_size) for r in rows if r.task == task and r.split == "test"})


def two(x: float) -> str:
    """Two decimals, without a negative zero (-0.0001 -> 0.00)."""
    return f"{round(x, 2) + 0.0:.2f}"


# --- tables -----------------------------------------------------------------------------------------

METRIC_RANGES = {"acc": (0.0, 1.0), "seq_acc": (0.0, 1.0), "ppl": (1.0, math.inf), "coord_err": (0.0, math.inf)}


def cell_text(cell: Cell, metric: str = "", digits: int = 3) -> str:
    """Mean and 95 % t interval over runs, the interval clipped to the metric's range (the mean alone for one run)."""
    est = stats.t_interval(cell.values)
    if math.isnan(est.half_width):
        return f"{est.mean:.{digits}g}"
    lo, hi = METRIC_RANGES.get(metric, (-math.inf, math.inf))
    return f"{est.mean:.{digits}g} [{max(est.low, lo):.{digits}g}, {min(est.high, hi):.{digits}g}]"


def ranking_order(agg_task, sizes, higher):
    """Rows sorted by the metric at the largest test size (rows without it last)."""
    last = sizes[-1][0]

    def key(item):
        cell = item[1].get(last)
        if cell is None or math.isnan(cell.mean):
            return math.inf
        return -good(cell.mean, higher)

    return sorted(agg_task.items(), key=key)


def ceiling_rate(cell: Cell, floor: Cell | None, test_items: int) -> stats.Rate | None:
    """The runs of ``cell`` whose accuracy is above the order-blind ceiling of their own data seed (``floor``) by a
    one-sided exact binomial test on ``test_items`` items, with the exact 95 % interval; None without the floor."""
    if floor is None:
        return None
    runs = with_floor(cell, floor)
    return stats.rate_of(sum(stats.above_rate(v, f, test_items) for v, f in runs), len(runs))


def markdown_table(agg_task, sizes: list[tuple[float, str]], check: Competence, times: dict[str, float],
                   metric: str = "", test_items: int | None = None) -> str:
    """Encodings ranked at the largest size (mean [95 % CI]; `✗` marks kinds that do not count, `↓` a mean below
    NoPE's at that size), retention at the largest size, the success rate, training time; then the floors (mean over
    data seeds).

    The success rate: the runs at the bar's value; for an accuracy whose bar is the order-blind ceiling, the runs
    above that ceiling by an exact binomial test on the ``test_items`` items of a test set (where known); for a task
    whose bar has no value per run but whose claim sets a threshold (coord: one pixel), the runs at that threshold."""
    last = sizes[-1][0]
    head = ["encoding"] + [size_label(name, ratio) for ratio, name in sizes]
    if len(sizes) > 1:
        head.append(f"retention ×{last:g}")
    task = TASKS.get(check.task)
    bar = task.bar.value if task else None
    ceiling = task.bar.floor if task and bar is None and task.metric == "acc" and test_items else None
    ends = (sizes[0][0], last) if len(sizes) > 1 else (last,)  # the success rate's sizes
    at = " → ".join(f"×{r:g}" for r in ends)
    if bar is None and not ceiling:  # a claim's threshold instead (coord: Liu et al.'s one pixel)
        thresholds = {c.threshold for c in CLAIMS if c.task == check.task and c.threshold is not None}
        assert len(thresholds) <= 1, f"{check.task}: claims with different thresholds {thresholds}: one column each"
        bar = thresholds.pop() if thresholds else None
        if bar is not None:
            head.append(f"runs at the claim's {bar:.3g} {at}")
    elif bar is not None:  # the success rate: runs at the bar's value, exact binomial interval (bimodal outcomes)
        head.append(f"runs at the bar {at}")
    elif ceiling:
        head.append(f"runs above the ceiling {at}")
    head.append("train s/run")
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    encodings, floors = split_floors(agg_task)
    nope = encodings.get(NOPE, {})

    def under_nope(label: str, ratio: float) -> str:  # NoPE: the reference a kind using position must stay above
        if label == NOPE or ratio not in nope or ratio not in encodings[label]:
            return ""
        ours, ref = encodings[label][ratio].mean, nope[ratio].mean
        return " ↓" if good(ours, check.higher) < good(ref, check.higher) else ""

    for label, by_size in ranking_order(encodings, sizes, check.higher):
        mark = "" if check.counts(label) else " ✗"
        cells = [cell_text(by_size[ratio], metric) + under_nope(label, ratio) if ratio in by_size else "–"
                 for ratio, _ in sizes]
        if len(sizes) > 1:
            est = retention(agg_task, label, last, check)
            cells.append("–" if est is None else two(est.mean) if math.isnan(est.half_width) else
                         f"{two(est.mean)} [{two(est.low)}, {two(est.high)}]")
        if bar is not None:
            cells.append(" → ".join(rate_text(stats.success_rate(by_size[r].values, bar, check.higher))
                                    if r in by_size else "–" for r in ends))
        elif ceiling:
            rates = [ceiling_rate(by_size[r], floors.get(ceiling, {}).get(r), test_items) if r in by_size else None
                     for r in ends]
            cells.append(" → ".join("–" if rate is None else rate_text(rate) for rate in rates))
        lines.append(f"| {label}{mark} | " + " | ".join(cells) + f" | {times.get(kind_of(label), float('nan')):.1f} |")
    for name, by_size in sorted(floors.items()):
        cells = [f"{by_size[ratio].mean:.3g}" if ratio in by_size else "–" for ratio, _ in sizes]
        extra = (" | –" if len(sizes) > 1 else "") + (" | –" if bar is not None or ceiling else "")
        lines.append(f"| {FLOOR_PREFIX}{name} | " + " | ".join(cells) + extra + " | – |")
    return "\n".join(lines)


def rate_text(rate: stats.Rate) -> str:
    """``"7/10 [0.35, 0.93]"``: runs at the bar of all runs, with the exact (Clopper-Pearson) 95 % interval."""
    return f"{rate.k}/{rate.n} [{two(rate.low)}, {two(rate.high)}]"


def competence_lines(task: str, check: Competence, metric: str, train_agg: dict) -> list[str]:
    """The competence paragraph of one task: bar, floors, verdict, which kinds count and use position."""
    bar = TASKS[task].bar.text if task in TASKS else "none"
    blind = TASKS[task].order_blind if task in TASKS else ""
    floors = ", ".join(f"{n} {c.mean:.3g}" for n, c in sorted(check.floors.items())) or "none measured"
    best = check.best
    head = f"- bar: {bar}; floors in distribution: {floors}; order-blind: {blind or 'not stated'}"
    if not check.kinds:  # floors only: the runs are not trained yet (a search held back, or still under way)
        return [head, "- **no runs trained yet** (no verdict): only the floors and the learning-rate search are in the record"]
    state = "**learned at this budget**" if check.learned else "**not learned at this budget** (no verdict)"
    lines = [head, f"- {state}; best kind: {best} {cell_text(check.kinds[best].cell, metric) if best else ''}"]
    counting = [k for k, s in check.kinds.items() if s.counts]
    lines.append(f"- kinds that count: {', '.join(counting) or 'none'}; that do not: "
                 + (", ".join(f"{k} ({'bar' if not s.bar else 'floor'})" for k, s in check.kinds.items()
                              if not s.counts) or "none"))
    uses = [k for k, s in check.kinds.items() if s.order]
    if any(s.order is not None for s in check.kinds.values()):
        lines.append(f"- kinds that use position (beat the order-blind floor and NoPE): {', '.join(uses) or 'none'}")
    if train_agg:
        parts = [f"{k} {by[min(by)].mean:.3g}" for k, by in sorted(train_agg.items()) if not is_floor(k)]
        lines.append(f"- training {metric} (last epoch, mean over runs): " + ", ".join(parts))
    return lines


def summary_table(agg, info, checks) -> str:
    """One row per encoding, one column per task: the metric at the training size → at the largest size."""
    tasks = sorted(agg)
    labels = sorted({label for t in tasks for label in agg[t] if not is_floor(label)},
                    key=lambda l: (l.startswith("conv"), "(" in l, l))
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
            mark = "" if checks[t].counts(label) else " ✗"
            cells.append((a if last == first else f"{a} → {by[last].mean:.3g}") + mark)
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    lines.append("| *learned at this budget* | " + " | ".join("yes" if checks[t].learned else "**no**" for t in tasks)
                 + " |")
    return "\n".join(lines)


# --- the report -------------------------------------------------------------------------------------

def train_times(rows: list[Row]) -> dict[str, dict[str, float]]:
    """task -> kind -> mean training seconds per run (floors excluded)."""
    times: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
    for r in rows:
        if r.kind != "floor" and r.variant == "-" and r.size_ratio == 1.0 and r.split == "test":
            times[r.task][r.kind].append(r.train_time_s)
    return {t: {k: statistics.fmean(v) for k, v in by.items()} for t, by in times.items()}


def lr_section(rows: list[Row]) -> list[str]:
    """The learning-rate search: per task and kind, the validation metric per (lr, weight decay) candidate and
    the values its runs trained with (read from the runs' rows)."""
    search = [r for r in rows if r.variant == SEARCH and r.split != SEARCH_LOSS]
    if not search:
        return []
    values: dict = defaultdict(lambda: defaultdict(list))
    for r in search:
        values[(r.task, r.kind)][(r.lr, r.weight_decay)].append(r.value)
    by = {key: {p: statistics.median(v) for p, v in points.items()} for key, points in values.items()}
    runs = max(len(v) for points in values.values() for v in points.values())
    used = trained_settings(rows)
    higher = {r.task: r.higher_is_better for r in search}
    lines = ["## Learning-rate search", "",
             "Every kind gets the same search: each candidate (peak learning rate, weight decay) trains "
             + ("one run on a model seed that is never reported (the first data seed)" if runs == 1 else
                f"{runs} runs on model seeds and data seeds that are never reported, and is scored by their median")
             + ", on the validation split drawn as the "
             "bar's test split at the training size (copy: exact match at exactly L); the best (ties: the lower "
             "validation loss where the search recorded it, then the smaller learning rate) is used for every run. Where the best is the grid's smallest or largest learning rate, "
             "the grid is extended past it (x2 or /2) until the choice is interior. ⚑: the choice is still an edge "
             "of its grid and strictly better than its neighbour: the extension reached the end of the searched "
             "range (or its rounds), so the grid may not bracket the optimum.", "",
             "| task | kind | validation metric per (lr, wd) | runs trained with |", "|---|---|---|---|"]
    for (task, kind), vals in sorted(by.items()):
        chosen = sorted(used.get((task, kind), set()))
        edge = any(on_edge(vals, point, higher[task]) for point in chosen)
        lines.append(f"| {task} | {kind} | " + ", ".join(f"({lr:g}, {wd:g}): {v:.3g}" for (lr, wd), v in sorted(vals.items()))
                     + " | " + (", ".join(f"({lr:g}, {wd:g})" for lr, wd in chosen) or "–") + (" ⚑" if edge else "") + " |")
    return lines + ["", selection_bias(rows, by, used, higher), ""]


def selection_bias(rows: list[Row], by: dict, used: dict, higher: dict) -> str:
    """The reviewer's check of the search: does the search's winning run score above the mean of the reported runs
    at the training size (the same distribution: the search scores the validation split drawn as the test split)?
    A search whose winner is also a reported run makes the reported mean a best-of-N; a sign test over the (task,
    kind) pairs says whether winners sit above the runs they chose for."""
    above = below = 0
    reported = defaultdict(list)
    for r in rows:
        if r.variant == "-" and r.split == "test" and r.size_ratio == 1.0 and r.kind != "floor":
            reported[(r.task, r.kind)].append(r.value)
    for key, vals in by.items():
        chosen = [vals[p] for p in used.get(key, ()) if p in vals]
        if not chosen or not reported.get(key):
            continue
        diff = good(chosen[0] - statistics.fmean(reported[key]), higher[key[0]])
        above, below = above + (diff > 0), below + (diff < 0)
    if not above + below:
        return "Selection bias: no (task, kind) has both a search winner and reported runs."
    from scipy.stats import binomtest

    p = binomtest(above, above + below, 0.5).pvalue
    return (f"Selection bias: in {above} of {above + below} (task, kind) pairs (ties left out) the search's winning "
            f"run scores above the mean of the reported runs at the training size (sign test p = {p:.2g}); the "
            "reported runs never include a search run (their model seeds differ).")


def on_edge(vals: dict, point: tuple[float, float], higher: bool) -> bool:
    """Whether ``point`` (lr, wd) is at an end of its weight decay's lr grid and beats the next lr there."""
    lrs = sorted(lr for lr, wd in vals if wd == point[1])
    if point not in vals or len(lrs) < 2 or point[0] not in (lrs[0], lrs[-1]):
        return False
    neighbour = (lrs[1] if point[0] == lrs[0] else lrs[-2], point[1])
    return good(vals[point], higher) > good(vals[neighbour], higher)


def budget_section(run_dir: Path, rows: list[Row], search_chosen: dict | None = None,
                   final: dict[str, int] | None = None) -> list[str]:
    """Each task's budget by the plateau rule (train/curves.py), from the curves the record commits: where the median
    kind stopped rising on the search's curves at the chosen rates (the rule, checked before the runs were trained;
    ``search_chosen``: (task, kind) -> (lr, weight decay), the search's choices, so that a task held back by the rule
    is listed too) and on the reported runs' curves (the same reading of the runs themselves). ``final``: task ->
    steps of the preset's ``final_budgets`` (doubled once), marked where the curves are at those steps."""
    def by_task(settings) -> dict:
        out: dict = defaultdict(dict)
        for (task, kind), point in settings:
            out[task][kind] = point
        return out

    # one setting per kind in a consistent record (else the header says so)
    trained = by_task((key, max(used)) for key, used in trained_settings(rows).items())
    searched = by_task((search_chosen or {}).items())
    lines = []
    for task in sorted(t for t in {*trained, *searched} if t in TASKS):
        spec = TASKS[task]
        found = [task_budget(run_dir, rows, task, chosen, search=search, higher=spec.higher_is_better,
                             metric=spec.metric, split=spec.competence_split)
                 for search, chosen in ((True, searched.get(task) or trained.get(task, {})),
                                        (False, trained.get(task, {})))]
        if found[0] is None and found[1] is None:
            continue
        text = [f"{f[1]:g} of {f[2]} ({'enough' if f[0] else '**still improving**'})" if f else "–" for f in found]
        at_final = any(f and f[2] == (final or {}).get(task) for f in found)
        lines.append(f"| {task}{' (doubled once: final)' if at_final else ''} | {text[0]} | {text[1]} |")
    if not lines:
        return []
    return ["## Budgets (the plateau rule)", "",
            f"The step after which the median kind's validation curve (per evaluation, the median over kinds of each "
            f"kind's median over its runs) never improves by more than the rule's tolerance (0.01 accuracy; 1 % of "
            f"the mean predictor's error; 1 % of a perplexity); a budget is enough when that step is within "
            f"{BUDGET_SHARE * 100:g} % of the steps. The rule reads the search's curves at the chosen rates before the runs "
            f"are trained; the reported runs' curves are the same reading of the record (`curves/<task>.jsonl`). A "
            f"short budget is doubled once, and not again (`doubled once: final`); a task still short there trains "
            f"there, its verdicts about models still improving.", "",
            "| task | search runs at the chosen rates (the rule) | reported runs |", "|---|---|---|", *lines, ""]


def trained_settings(rows: list[Row]) -> dict[tuple[str, str], set[tuple[float, float]]]:
    """(task, kind) -> the (lr, weight decay) its reported runs trained with (search rows and floors left out)."""
    used: dict = defaultdict(set)
    for r in rows:
        if r.variant != SEARCH and r.kind != "floor":
            used[(r.task, r.kind)].add((r.lr, r.weight_decay))
    return used


def mixed_settings(rows: list[Row]) -> list[str]:
    """(task, kind) whose runs trained with more than one (lr, weight decay): a run directory that mixed settings."""
    return [f"{t} {k}: {sorted(v)}" for (t, k), v in sorted(trained_settings(rows).items()) if len(v) > 1]


def write_report(run_dir: Path, header: str, select=None, test_items: int | None = None, choose=None,
                 final_budgets: dict[str, int] | None = None) -> Path:
    """Write report.md and plots for ``run_dir/results.csv`` (``select`` filters its rows); returns the path.
    ``test_items``: the items of a built-in test set, for the success rate of tasks whose bar is the order-blind
    ceiling (:func:`markdown_table`); ``choose`` (rows -> the search's choices) and ``final_budgets``: for the
    budgets table (:func:`budget_section`)."""
    from .plots import plot_task

    rows = read_rows(run_dir / "results.csv")
    if select is not None:
        rows = select(rows)
    agg, info, times = aggregate(rows), task_info(rows), train_times(rows)
    train_agg, in_dist = aggregate(rows, split="train"), in_distribution(rows)
    checks = {t: competence(t, in_dist[t], info[t].higher_is_better) for t in agg}
    mixed = mixed_settings(rows)
    if mixed:
        header += "\n- **runs of one kind trained with different settings** (not comparable): " + "; ".join(mixed)
    parts = [header, "", "## Summary", "",
             "Mean over runs at the training size → at the largest test size; ✗: the kind does not count (misses the "
             "task's bar or a floor of its data), so it takes no part in any claim.", "",
             summary_table(agg, info, checks), "", "## Per task", "",
             "Cells: mean over runs [95 % t interval]; ↓: below NoPE's mean at that size (NoPE, no positions, is "
             "the reference a kind that uses position must stay above). Retention: (m(×k) − f(×k)) / (m(×1) − f(×1)) per run, f the "
             "strongest floor at that size (1: kept everything above the floor; 0: down to it). Runs at the bar: "
             "the runs whose metric reaches the task's bar value at the training and the largest size, k/n with the "
             "exact binomial 95 % interval (the summary that fits outcomes split between success and failure); "
             "where the bar has no value per run but a claim sets a threshold (coord: one pixel), the runs at that "
             "threshold instead. "
             + (f"Runs above the ceiling (an accuracy whose bar is the order-blind ceiling, which has no value per run): "
                f"the runs above the ceiling of their data seed by a one-sided exact binomial test at 5 % on the "
                f"{test_items} items of a test set, k/n with the same interval (added after the video runs were seen, "
                f"to give RoPE's success rate there; it decides no verdict). " if test_items else "")
             + "`floor:` rows come from the data (mean over data seeds); the plots draw them as dashed grey steps.", ""]
    for task in sorted(agg):
        row = info[task]
        sizes = sizes_of(rows, task)
        arrow = "higher is better" if row.higher_is_better else "lower is better"
        plot = plot_task(task, agg[task], sizes, row.metric, run_dir / f"{task.replace('/', '_')}.png",
                         higher=row.higher_is_better)
        labels = sorted(label for label in agg[task] if not is_floor(label))
        ns = {label: max((c.n for c in agg[task][label].values()), default=0) for label in labels}
        n = max(ns.values(), default=0)
        fewer = ", ".join(f"{label} {k}" for label, k in ns.items() if k < n)  # kinds no claim compares (other_runs)
        parts += [f"### {task} — {row.metric} ({arrow}), trained at {row.train_size}, {n} runs"
                  + (f" (fewer: {fewer})" if fewer else ""), "",
                  *competence_lines(task, checks[task], row.metric, train_agg.get(task, {})),
                  *(regimes(TASKS[task], labels, sizes) if task in TASKS else []), "",
                  markdown_table(agg[task], sizes, checks[task], times.get(task, {}), row.metric, test_items), "",
                  f"![{task}]({plot.name})", ""]
    parts += lr_section(rows)
    parts += budget_section(run_dir, rows, choose(rows) if choose else None, final_budgets)
    parts += ["## Does it reproduce the literature?", "",
              "Each claim is judged whole (train/claims.py): each half (an ordered pair of kinds, a kind said to keep "
              "its quality beyond the training size, a threshold) is a test on per-run values (a worsening is paired "
              "per run first; two kinds measured on the same runs are compared paired, else by Welch), "
              "Holm-corrected within the claim; only kinds that count take part, and a half left out is named.", ""]
    parts += [claim_line(c, agg, info, in_dist) for c in CLAIMS if c.task in agg]
    parts += ["", *halves_table(CLAIMS, agg, info, in_dist), *zoom_and_canvas(CLAIMS, agg, info, in_dist)]
    out = run_dir / "report.md"
    out.write_text("\n".join(parts) + "\n")
    return out
