"""Literature claims judged whole: every half of a claim gets its own verdict, and the claim's verdict says which.

A claim (``train/protocol.py``, :class:`~train.protocol.Claim`) has halves:

- **ordered pairs** ``a`` better than ``b`` (every kind of a tier against every kind of later tiers), on the claim's
  measure. A claim about behaviour beyond the training size is judged on the **worsening** (``degradation``: the
  metric at the largest test size minus the same run's at the training size, so a gap already present at the training
  size is not read as generalization), on the runs that pass the task's bar at the training size (each run on its own:
  :func:`competent_runs`); the metric at the largest size is reported beside it as secondary, not judged.
  ``training``: the metric at the training size (claims about in-distribution quality); ``largest``: at the largest
  size. Two kinds are compared *paired* on the runs they share (the same model and data seeds; t test), else Welch.
  Where either kind's runs are bimodal at the compared size (``stats.is_bimodal``: some pass the task's bar, some miss
  it far), a mean is the wrong summary: the pair is judged on **success rates** (runs at the bar, Fisher's exact test).
- **keeps**: a kind said to keep its quality beyond the training size must keep its retention at the largest size
  above 0 (above the task's strongest floor there); an ordering alone is not enough (a kind can beat others that
  collapse harder while collapsing itself).
- **thresholds**: a kind on the good (``meets``) or bad (``misses``) side of a fixed value: a t test of its runs, or
  where they are bimodal about it its success rate against 1/2 (exact binomial test); both sides named: their success
  rates against each other (Fisher exact).

Each half is a test; Holm's correction runs over the halves of one claim. Each states its **detectable effect** (80 %
power at Holm's strictest level, its own test) beside the effect the paper reports (``Claim.paper_effect``, cited). A
half whose kind does not count (misses the task's bar or a floor) or was not run, or a keeps half that the claim
tests on another task (``Claim.keeps_untested``: a regime too small for the paper's mechanism), is *dropped* and
named. Labels: a
half significant for or against the claim ``agrees`` / ``disagrees``; otherwise ``underpowered`` where its detectable
effect is larger than the paper's (the record cannot see the paper's effect), ``inconclusive`` where it could (and
then says when the paper's effect lies above the half's 95 % interval: an effect of the paper's size not seen). The
claim: ``disagrees`` when a half disagrees; ``agrees`` when every half agrees and none was dropped; ``agrees in part``
when every half tested agrees but some were dropped (the headline names them); else ``underpowered`` if a half is,
else ``inconclusive``; ``not tested`` when the protocol differs in a way that changes what is measured (said in the
claim) or the task was not learned; ``not run`` when the run lacks the task or every kind of a tier.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from . import power, stats
from .competence import competence, good, retention
from .papers import NOT_COMPILED
from .protocol import CLAIMS, TASKS, Claim
from .results import FLOOR_PREFIX, kind_of

LOG_METRICS = ("ppl",)  # compared in log space (nats per token): perplexity is heavy-tailed across runs
KEEPS = "keeps its quality"  # in the name of every keeps half (and of a dropped one)


def named_kinds(claim: Claim) -> list[str]:
    """Every kind ``claim`` names: its tiers', then those said to keep their quality, to meet or to miss a threshold."""
    return [k for tier in claim.tiers for k in tier] + claim.keeps + claim.meets + claim.misses


def compared_kinds(task: str) -> set[str]:
    """The kinds the claims on ``task`` compare: a ``not_tested`` claim compares none. A preset with ``other_runs``
    runs these in full (train/cells.py), as the claims' statistics need."""
    return {kind for c in CLAIMS if c.task == task and not c.not_tested for kind in named_kinds(c)}


@dataclass(frozen=True)
class Half:
    """One tested half of a claim, as the verdicts table shows it."""
    name: str  # "a vs b (paired, 10 runs)", "a keeps its quality: ...", a threshold
    estimate: str  # the effect and its 95 % interval (or the success rates)
    p: float  # Holm-adjusted within the claim
    detectable: float  # 80 % power at Holm's strictest level (nan: none at this n)
    paper: float | None  # the paper's effect on the same scale, where the claim cites one
    label: str  # agrees | disagrees | underpowered | inconclusive
    measure: str = ""  # what this half measures ("worsening ×1→×2", "retention at ×8")
    note: str = ""  # an inconclusive half whose interval excludes the paper's effect says so


@dataclass
class Verdict:
    label: str  # agrees | agrees in part | disagrees | underpowered | inconclusive | not tested | not run
    detail: str
    measure: str = ""  # what the tested halves measure, short ("worsening ×1→×2")
    halves: tuple[Half, ...] = ()
    dropped: tuple[str, ...] = ()  # halves left out, each with why


def competent_runs(in_dist_task, label: str, task: str, ratio: float | None, higher: bool) -> set | None:
    """The runs of ``label`` that pass the task's bar at the training size, each on its own (a value bar: the run's
    metric reaches it; a floor bar: the run beats the floor of its own data seed); None where the task has no bar."""
    bar = TASKS[task].bar if task in TASKS else None
    by = in_dist_task.get(kind_of(label), {})
    if bar is None or ratio not in by:
        return None
    runs = by[ratio].runs
    if bar.value is not None:
        return {run for run, v in runs.items() if stats.passes(v, bar.value, higher)}
    floor = in_dist_task.get(FLOOR_PREFIX + (bar.floor or ""), {}).get(ratio)
    seed_floor = {d: v for (_, d), v in floor.runs.items()} if floor is not None else {}
    return {run for run, v in runs.items() if run[1] in seed_floor and good(v - seed_floor[run[1]], higher) > 0}


def measured_values(agg_task, label: str, claim: Claim, first: float | None, last: float, higher: bool,
                    metric: str = "", keep: set | None = None, measure: str | None = None) -> dict[tuple[int, int], float]:
    """Per run (model seed, data seed), what ``claim`` compares, signed so that larger is better: the metric at
    ``last`` (``largest``) or at ``first`` (``training``), or minus its worsening from ``first`` to ``last``
    (``degradation``, paired per run); perplexities as their log. ``keep``: only these runs (those that pass the bar
    at the training size); ``measure`` overrides the claim's."""
    by = agg_task.get(label, {})
    f = math.log if metric in LOG_METRICS else (lambda v: v)
    measure = measure or claim.measure
    kept = (lambda run: True) if keep is None else (lambda run: run in keep)
    if measure in ("largest", "training"):
        at = last if measure == "largest" else first
        return {run: good(f(v), higher) for run, v in by[at].runs.items() if kept(run)} if at in by else {}
    if first not in by or last not in by:
        return {}
    a, b = by[first].runs, by[last].runs
    return {r: good(f(b[r]) - f(a[r]), higher) for r in a if r in b and kept(r)}


@dataclass(frozen=True)
class RateEstimate:
    """Success rates compared by Fisher's exact test (bimodal runs): ``mean`` is rate(a) - rate(b), or rate - 1/2
    for one kind against a coin (``text`` says which)."""

    mean: float
    p_value: float
    text: str
    mde: float
    se: float = math.nan

    def fmt(self, digits: int = 3) -> str:
        return f"{self.text}, difference {self.mean:+.2f}"

    def detectable(self, alpha: float = stats.ALPHA) -> float:
        return self.mde


def compare(a: dict, b: dict) -> tuple[stats.Estimate, str]:
    """``a`` minus ``b``: paired on the runs both have (two or more shared: the same model and data seeds), else
    Welch."""
    x, y = stats.pair_by_run(a, b)
    if len(x) >= 2:
        return stats.paired(x, y), f"paired, {len(x)} runs"
    return stats.welch(list(a.values()), list(b.values())), "Welch"


def compare_rates(a: list[float], b: list[float], bar: float, higher: bool, alpha: float) -> RateEstimate:
    """The runs of ``a`` and ``b`` that pass ``bar`` (values as measured, not signed), by Fisher's exact test."""
    ra, rb = stats.success_rate(a, bar, higher), stats.success_rate(b, bar, higher)
    return RateEstimate(ra.rate - rb.rate, stats.fisher(ra.k, ra.n, rb.k, rb.n), f"{ra.k}/{ra.n} vs {rb.k}/{rb.n} "
                        "runs at the bar (Fisher exact)", rate_detectable(ra, rb, alpha))


def rate_detectable(ra: stats.Rate, rb: stats.Rate, alpha: float) -> float:
    """The smallest difference of success rates Fisher's test detects here: one kind at the lower observed rate, the
    other that much above it."""
    return power.fisher_detectable(ra.n, rb.n, min(ra.rate, rb.rate), alpha)


def bimodal(agg_task, label: str, claim: Claim, first: float | None, last: float, higher: bool) -> bool:
    """Whether ``label``'s runs are bimodal against the task's bar value at a size the claim compares."""
    bar = TASKS[claim.task].bar.value if claim.task in TASKS else None
    by = agg_task.get(label, {})
    sizes = {"largest": [last], "training": [first], "degradation": [first, last]}[claim.measure]
    return bar is not None and any(size in by and stats.is_bimodal(by[size].values, bar, higher) for size in sizes)


def paper_effect(claim: Claim, half: str) -> float | None:
    """The effect the paper reports for one half (``"a vs b ..."``; ``"*"``: every half), or None."""
    pair = " vs ".join(half.split(" (")[0].split(":")[0].split(" vs ")[:2])
    return claim.paper_effect.get(pair, claim.paper_effect.get("*"))


def half_label(sign: int, detectable: float, paper: float | None) -> str:
    """A half's label: significant for or against; else ``underpowered`` where the design cannot detect the paper's
    effect (its detectable effect is larger), else ``inconclusive``."""
    if sign:
        return "agrees" if sign > 0 else "disagrees"
    return "underpowered" if paper is not None and not detectable <= paper else "inconclusive"


def check_claim(claim: Claim, agg, info, in_dist=None) -> Verdict:
    """The verdict of one claim from every half of it (see the module docstring).

    ``in_dist``: task -> the aggregate the competence rules read (``report.in_distribution``; default ``agg``)."""
    if claim.task not in agg:
        return Verdict("not run", "the task is not in this run")
    if claim.not_tested:
        return Verdict("not tested", claim.not_tested)
    agg_task, row = agg[claim.task], info[claim.task]
    higher = row.higher_is_better
    named = named_kinds(claim)
    missing = sorted({k for k in named if k not in agg_task})
    absent_tiers = ["[" + ", ".join(tier) + "]" for tier in claim.tiers if not any(k in agg_task for k in tier)]
    if absent_tiers or (named and len(missing) == len(set(named))):
        return Verdict("not run", f"not in this run: {', '.join(missing)}")
    in_dist_task = (in_dist or agg)[claim.task]
    check = competence(claim.task, in_dist_task, higher)
    if not check.learned:
        return Verdict("not tested", "the task was not learned at this budget (no kind passes its bar)")
    first, last = check.ratio, max(max(by) for by in agg_task.values())
    beyond = claim.measure != "training"  # per run, only runs that pass the bar at the training size

    def why_dropped(kind: str) -> str | None:
        if kind not in agg_task:
            return "not run"
        return None if check.counts(kind) else "does not count: below the bar or a floor"

    def keep(kind: str) -> set | None:
        return competent_runs(in_dist_task, kind, claim.task, first, higher) if beyond else None

    pairs, dropped = [], []
    for i, upper in enumerate(claim.tiers):
        for lower in claim.tiers[i + 1:]:
            for a in upper:
                for b in lower:
                    reasons = [f"{k} {r}" for k in (a, b) if (r := why_dropped(k))]
                    if reasons:
                        dropped.append(f"{a} vs {b} ({'; '.join(reasons)})")
                    else:
                        pairs.append((a, b))
    keeps = [] if claim.keeps_untested else claim.keeps
    n_halves = len(pairs) + len(keeps) + len(claim.meets) + len(claim.misses) + bool(claim.meets and claim.misses)
    level = stats.ALPHA / max(n_halves, 1)  # Holm's strictest step: the detectable effects are stated at it
    tests: list[tuple[str, Any]] = []
    bar = TASKS[claim.task].bar.value if claim.task in TASKS else None
    for a, b in pairs:
        if bar is not None and any(bimodal(agg_task, k, claim, first, last, higher) for k in (a, b)):
            at = first if claim.measure == "training" else last
            kept = {k: keep(k) for k in (a, b)}  # each kind's runs at the bar, computed once
            values = [[v for run, v in agg_task[k][at].runs.items() if kept[k] is None or run in kept[k]]
                      for k in (a, b)]
            est = compare_rates(values[0], values[1], bar, higher, level)
            tests.append((f"{a} vs {b} (success rates at ×{at:g}, bimodal runs)", est))
            continue
        est, how = compare(measured_values(agg_task, a, claim, first, last, higher, row.metric, keep(a)),
                           measured_values(agg_task, b, claim, first, last, higher, row.metric, keep(b)))
        tests.append((f"{a} vs {b} ({how})", est))
    for kind in claim.keeps:
        if claim.keeps_untested:  # tested on another task; not one of this task's halves (nor of its Holm family)
            dropped.append(f"{kind} {KEEPS} ({claim.keeps_untested})")
            continue
        if reason := why_dropped(kind):
            dropped.append(f"{kind} {KEEPS} ({kind} {reason})")
            continue
        est = retention(agg_task, kind, last, check)
        if est is None:
            dropped.append(f"{kind} {KEEPS} (no retention at ×{last:g})")
            continue
        tests.append((f"{kind} {KEEPS}: retention at ×{last:g} above 0", est))
    tests += threshold_halves(claim, agg_task, last, higher, level)
    if not tests:
        return Verdict("not tested", "no half could be tested: " + "; ".join(dropped),
                       short_measure(claim, row.metric, first, last), dropped=tuple(dropped))
    return judge(claim, tests, dropped, row.metric, first, last, level,
                 secondary(claim, agg_task, pairs, first, last, higher, row.metric, keep))


def short_measure(claim: Claim, metric: str, first: float, last: float) -> str:
    """What a claim's halves measure, for the verdicts table: ``worsening ×1→×2``, ``acc at ×1``, ``ppl (log) ...``."""
    log = " (log)" if metric in LOG_METRICS else ""
    return {"degradation": f"worsening{log} ×{first:g}→×{last:g}", "largest": f"{metric}{log} at ×{last:g}",
            "training": f"{metric}{log} at ×{first:g}"}[claim.measure]


def half_measure(claim: Claim, name: str, metric: str, first: float, last: float) -> str:
    """What one half measures: a kind said to keep its quality, its retention; any other, the claim's measure."""
    return f"retention at ×{last:g}" if KEEPS in name else short_measure(claim, metric, first, last)


def threshold_halves(claim: Claim, agg_task, last: float, higher: bool, level: float) -> list[tuple[str, Any]]:
    """A kind on the good (``meets``) or bad (``misses``) side of ``claim.threshold``: a t test of its runs against
    it, or, where its runs are bimodal about it, its success rate against a coin (exact binomial test); with both
    sides named, also their success rates against each other (Fisher exact)."""
    from scipy.stats import binomtest

    bound, tests, rates = claim.threshold, [], {}
    if bound is None:
        return []
    for label, should in [*[(k, True) for k in claim.meets], *[(k, False) for k in claim.misses]]:
        if label not in agg_task or last not in agg_task[label]:
            continue
        values = agg_task[label][last].values
        side = "under" if not higher else "over"
        rate = rates[label] = stats.success_rate(values, bound, higher)
        if stats.is_bimodal(values, bound, higher, margin=abs(bound)):
            p = float(binomtest(rate.k, rate.n, 0.5).pvalue)
            delta = rate.rate - 0.5
            tests.append((f"{label} {side} {bound:.3g} in most runs" if should else f"{label} {side} {bound:.3g} in "
                          "few runs", RateEstimate(delta if should else -delta, p, f"{rate.k}/{rate.n} runs {side} "
                                                   f"{bound:.3g} (exact binomial test against 1/2)",
                                                   power.binomial_detectable(rate.n, level))))
            continue
        est = stats.above(values, bound, higher)
        tests.append((f"{label} {side} {bound:.3g}" if should else f"{label} not {side} {bound:.3g}",
                      est if should else stats.Estimate(-est.mean, est.se, est.df, est.n)))
    for a in claim.meets:
        for b in claim.misses:
            if a in rates and b in rates:
                ra, rb = rates[a], rates[b]
                tests.append((f"{a} vs {b}: runs {'under' if not higher else 'over'} {bound:.3g}", RateEstimate(
                    ra.rate - rb.rate, stats.fisher(ra.k, ra.n, rb.k, rb.n), f"{ra.k}/{ra.n} vs {rb.k}/{rb.n} runs "
                    "(Fisher exact)", rate_detectable(ra, rb, level))))
    return tests


def secondary(claim: Claim, agg_task, pairs, first, last, higher, metric, keep) -> str:
    """For a claim judged on the worsening: the same pairs at the largest size (secondary: it mixes the gap at the
    training size into the comparison), not judged."""
    if claim.measure != "degradation" or not pairs:
        return ""
    parts = []
    for a, b in pairs:
        est, how = compare(*(measured_values(agg_task, k, claim, first, last, higher, metric, keep(k), "largest")
                             for k in (a, b)))
        parts.append(f"{a} vs {b}: {est.fmt()} ({how})")
    log = " (log)" if metric in LOG_METRICS else ""
    return f" Secondary, not judged: {metric}{log} at ×{last:g} on the same runs, " + "; ".join(parts)


def judge(claim: Claim, tests, dropped, metric, first, last, level, second: str) -> Verdict:
    """The claim's verdict from its tested halves (Holm within the claim), each with its detectable effect beside the
    paper's."""
    adjusted = stats.holm([t.p_value for _, t in tests])
    parts, labels, halves = [], [], []
    for (name, est), p in zip(tests, adjusted):
        sign = 0 if not p < stats.ALPHA else (1 if est.mean > 0 else -1)
        mde, paper = est.detectable(alpha=level), paper_effect(claim, name)
        label = half_label(sign, mde, paper)
        labels.append(label)
        seen = label == "inconclusive" and paper is not None and getattr(est, "high", math.inf) < paper
        note = "the paper's effect above its 95 % interval" if seen else ""  # a null the record could have seen
        halves.append(Half(name, est.fmt(), p, mde, paper, label, half_measure(claim, name, metric, first, last), note))
        power = f"detectable {mde:.3g}" if not math.isnan(mde) else "no effect detectable at this n"
        power += f" vs the paper's {paper:.3g}" if paper is not None else ""
        power += f", {note}" if note else ""
        parts.append(f"{name}: {est.fmt()} (Holm p={p:.2g}, {power}, {label})")
    log = " of log ppl (nats per character)" if metric in LOG_METRICS else ""
    what = {"degradation": f"worsening{log} from ×{first:g} to ×{last:g} per run, on the runs that pass the bar at "
                           f"×{first:g}", "largest": f"{metric}{log} at ×{last:g}",
            "training": f"{metric}{log} at the training size (×{first:g})"}[claim.measure]
    paper_text = (f"the paper's effects: {claim.paper_source}" if claim.paper_effect else
                  f"the paper's effect: {NOT_COMPILED.get(claim.source, 'not stated here')}")
    detail = (f"{what}, differences signed so that positive agrees with the claim; detectable effects at 80 % power "
              f"and Holm's strictest level ({level:.2g}); {paper_text}: " + "; ".join(parts))
    if dropped:
        detail += ". Halves dropped: " + "; ".join(dropped)
    detail += "." + second if second else ""
    parts_of = {"measure": short_measure(claim, metric, first, last), "halves": tuple(halves),
                "dropped": tuple(dropped)}
    if "disagrees" in labels:
        return Verdict("disagrees", detail, **parts_of)
    if all(lab == "agrees" for lab in labels):
        return Verdict("agrees in part" if dropped else "agrees", detail, **parts_of)
    if all(getattr(est, "se", None) == 0 and est.mean == 0 for _, est in tests):
        return Verdict("inconclusive", detail + ". Every kind compared scores the same in every run (a floor or a "
                       "ceiling of the metric at this size), so no difference can be measured", **parts_of)
    return Verdict("underpowered" if "underpowered" in labels else "inconclusive", detail, **parts_of)


def claim_line(claim: Claim, agg, info, in_dist=None) -> str:
    verdict = check_claim(claim, agg, info, in_dist)
    head = f"- **{claim.source}**, `{claim.task}` — {claim.text}" + (f" [{claim.note}]" if claim.note else "")
    label = verdict.label
    if label == "agrees in part":  # the headline names what was not tested
        label += " (" + verdict.detail.split("Halves dropped: ")[1].split(". ")[0] + " not tested)"
    return f"{head}: **{label}**. {verdict.detail}."


def zoom_and_canvas(claims: list[Claim], agg, info, in_dist=None) -> list[str]:
    """Each image claim's verdicts side by side on the zoom tasks and the canvas tasks of this run: a claim that holds
    under one growth and fails under the other says so, and neither alone carries a verdict about resolution."""
    image = [c for c in claims if c.task.startswith("image/") and c.task in agg]
    tasks = sorted({c.task for c in image}, key=lambda t: ("zoom" not in t, t))
    if not tasks:
        return []
    lines = ["### Image claims under zoom and under canvas", "",
             "The same claim on every image task of the run: zoom tasks (the same image at a higher resolution, the "
             "papers' protocol) beside canvas tasks (a larger field, positions extrapolated).", "",
             "| claim | " + " | ".join(f"{t} ({'zoom' if 'zoom' in t else 'canvas'})" for t in tasks) + " |",
             "|---|" + "---|" * len(tasks)]
    groups: dict = {}
    for c in image:
        groups.setdefault((c.source, c.text), {})[c.task] = check_claim(c, agg, info, in_dist).label
    for (source, text), by in groups.items():
        lines.append(f"| {source}: {text} | " + " | ".join(by.get(t, "–") for t in tasks) + " |")
    return lines + [""]


__all__ = ["LOG_METRICS", "Half", "RateEstimate", "Verdict", "check_claim", "claim_line", "compare", "competent_runs",
           "measured_values", "zoom_and_canvas"]
