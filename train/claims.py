"""Literature claims judged whole: every half of a claim gets its own verdict, and the claim's verdict says which.

A claim (``train/protocol.py``, :class:`~train.protocol.Claim`) has halves:

- **ordered pairs** ``a`` better than ``b`` (every kind of a tier against every kind of later tiers), on the claim's
  measure: the metric at the largest test size (``largest``), its worsening from the training size (``degradation``,
  paired per run) or the metric at the training size (``training``: claims about in-distribution quality). Two kinds
  measured on the same runs (same model seeds and data seeds) are compared *paired* per run (t test); otherwise
  Welch. Where either kind's runs are bimodal at the compared size (``stats.is_bimodal``: some pass the task's bar,
  some miss it far), a mean is the wrong summary: the pair takes a rank test instead (Wilcoxon signed-rank when
  paired, Mann-Whitney otherwise) with the Hodges-Lehmann shift as its effect.
- **keeps**: a kind said to keep its quality beyond the training size must keep its retention at the largest size
  above 0 (above the task's strongest floor there); an ordering alone is not enough (a kind can beat others that
  collapse harder while collapsing itself).
- **thresholds**: a kind on the good (``meets``) or bad (``misses``) side of a fixed value.

Each half is a test; Holm's correction runs over the halves of one claim. A half whose kind does not count (misses
the task's bar or a floor) or was not run is *dropped* and named. The claim's verdict: ``disagrees`` when a half is
significant against it; ``agrees`` when every half is significant for it and none was dropped; ``agrees in part``
when every half tested agrees but some were dropped (the headline names them); ``inconclusive`` otherwise;
``not tested`` when the protocol differs in a way that changes what is measured (said in the claim) or the task was
not learned; ``not run`` when the run lacks the task or every kind of a tier.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

from . import stats
from .competence import competence, good, retention
from .protocol import CLAIMS, TASKS, Claim

LOG_METRICS = ("ppl",)  # compared in log space (nats per token): perplexity is heavy-tailed across runs


def named_kinds(claim: Claim) -> list[str]:
    """Every kind ``claim`` names: its tiers', then those said to keep their quality, to meet or to miss a threshold."""
    return [k for tier in claim.tiers for k in tier] + claim.keeps + claim.meets + claim.misses


def compared_kinds(task: str) -> set[str]:
    """The kinds the claims on ``task`` compare: a ``not_tested`` claim compares none. A preset with ``other_runs``
    runs these in full (train/cells.py), as the claims' statistics need."""
    return {kind for c in CLAIMS if c.task == task and not c.not_tested for kind in named_kinds(c)}


@dataclass
class Verdict:
    label: str  # agrees | agrees in part | disagrees | inconclusive | not tested | not run
    detail: str


def measured_values(agg_task, label: str, claim: Claim, first: float | None, last: float, higher: bool,
                    metric: str = "") -> dict[tuple[int, int], float]:
    """Per run (model seed, data seed), what ``claim`` compares, signed so that larger is better: the metric at
    ``last`` (``largest``) or at ``first`` (``training``), or minus its worsening from ``first`` to ``last``
    (``degradation``, paired per run); perplexities as their log."""
    by = agg_task.get(label, {})
    f = math.log if metric in LOG_METRICS else (lambda v: v)
    if claim.measure in ("largest", "training"):
        at = last if claim.measure == "largest" else first
        return {run: good(f(v), higher) for run, v in by[at].runs.items()} if at in by else {}
    if first not in by or last not in by:
        return {}
    a, b = by[first].runs, by[last].runs
    return {r: good(f(b[r]) - f(a[r]), higher) for r in a if r in b}


@dataclass(frozen=True)
class RankEstimate:
    """A rank test read as an estimate (the interface :func:`check_claim` reads): the Hodges-Lehmann shift."""

    mean: float
    p_value: float
    se: float = math.nan

    def fmt(self, digits: int = 3) -> str:
        return f"{self.mean:.{digits}g} (Hodges-Lehmann shift)"

    def detectable(self, alpha: float = stats.ALPHA) -> float:
        return math.nan


def compare(a: dict, b: dict, rank: bool = False) -> tuple[stats.Estimate | RankEstimate, str]:
    """``a`` minus ``b``: paired per run when both were measured on the same runs (two or more), else Welch; with
    ``rank`` (bimodal runs), the Wilcoxon signed-rank or Mann-Whitney test instead of the t test."""
    paired = len(a) >= 2 and set(a) == set(b)
    if rank:
        if paired:
            test = stats.wilcoxon_paired(*stats.pair_by_run(a, b))
        else:
            test = stats.mann_whitney(list(a.values()), list(b.values()))
        return RankEstimate(test.shift, test.p_value), "Wilcoxon signed-rank" if paired else "Mann-Whitney"
    if paired:
        runs = sorted(a)
        return stats.paired([a[r] for r in runs], [b[r] for r in runs]), "paired"
    return stats.welch(list(a.values()), list(b.values())), "Welch"


def bimodal(agg_task, label: str, claim: Claim, first: float | None, last: float, higher: bool) -> bool:
    """Whether ``label``'s runs are bimodal against the task's bar value at a size the claim compares."""
    bar = TASKS[claim.task].bar.value if claim.task in TASKS else None
    by = agg_task.get(label, {})
    sizes = {"largest": [last], "training": [first], "degradation": [first, last]}[claim.measure]
    return bar is not None and any(size in by and stats.is_bimodal(by[size].values, bar, higher) for size in sizes)


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
    check = competence(claim.task, (in_dist or agg)[claim.task], higher)
    if not check.learned:
        return Verdict("not tested", "the task was not learned at this budget (no kind passes its bar)")
    first, last = check.ratio, max(max(by) for by in agg_task.values())

    def why_dropped(kind: str) -> str | None:
        if kind not in agg_task:
            return "not run"
        return None if check.counts(kind) else "does not count: below the bar or a floor"

    tests: list[tuple[str, stats.Estimate]] = []
    dropped: list[str] = []
    for i, upper in enumerate(claim.tiers):
        for lower in claim.tiers[i + 1:]:
            for a in upper:
                for b in lower:
                    reasons = [f"{k} {r}" for k in (a, b) if (r := why_dropped(k))]
                    if reasons:
                        dropped.append(f"{a} vs {b} ({'; '.join(reasons)})")
                        continue
                    rank = any(bimodal(agg_task, k, claim, first, last, higher) for k in (a, b))
                    est, how = compare(measured_values(agg_task, a, claim, first, last, higher, row.metric),
                                       measured_values(agg_task, b, claim, first, last, higher, row.metric), rank)
                    tests.append((f"{a} vs {b} ({how})", est))
    for kind in claim.keeps:
        if reason := why_dropped(kind):
            dropped.append(f"{kind} keeps its quality ({kind} {reason})")
            continue
        est = retention(agg_task, kind, last, check)
        if est is None:
            dropped.append(f"{kind} keeps its quality (no retention at ×{last:g})")
            continue
        tests.append((f"{kind} keeps its quality: retention at ×{last:g} above 0", est))
    bound = claim.threshold
    for label, should in [*[(k, True) for k in claim.meets], *[(k, False) for k in claim.misses]]:
        if label in agg_task and last in agg_task[label] and bound is not None:
            est = stats.above(agg_task[label][last].values, bound, higher)
            side = "under" if not higher else "over"
            tests.append((f"{label} {side} {bound:.3g}" if should else f"{label} not {side} {bound:.3g}",
                          est if should else stats.Estimate(-est.mean, est.se, est.df, est.n)))
    if not tests:
        return Verdict("not tested", "no half could be tested: " + "; ".join(dropped))
    adjusted = stats.holm([t.p_value for _, t in tests])
    parts, signs = [], []
    for (name, est), p in zip(tests, adjusted):
        sign = 0 if not p < stats.ALPHA else (1 if est.mean > 0 else -1)
        signs.append(sign)
        mark = {1: "agrees", -1: "disagrees", 0: "inconclusive"}[sign]
        parts.append(f"{name}: {est.fmt()} (Holm p={p:.2g}, {mark})")
    log = " of log ppl (nats per character)" if row.metric in LOG_METRICS else ""
    what = {"degradation": f"worsening{log} from ×{first:g} to ×{last:g}", "largest": f"{row.metric}{log} at ×{last:g}",
            "training": f"{row.metric}{log} at the training size (×{first:g})"}[claim.measure]
    detail = f"{what}, differences signed so that positive agrees with the claim: " + "; ".join(parts)
    if dropped:
        detail += ". Halves dropped: " + "; ".join(dropped)
    if -1 in signs:
        return Verdict("disagrees", detail)
    if all(s == 1 for s in signs):
        return Verdict("agrees in part" if dropped else "agrees", detail)
    if all(est.se == 0 and est.mean == 0 for _, est in tests):
        return Verdict("inconclusive", detail + ". Every kind compared scores the same in every run (a floor or a "
                       "ceiling of the metric at this size), so no difference can be measured")
    level = stats.ALPHA / len(tests)  # Holm's strictest step
    detectable = [d for _, est in tests if not math.isnan(d := est.detectable(alpha=level))]
    smallest = max(detectable) if detectable else math.nan
    return Verdict("inconclusive", detail + f". The design detects differences of about {smallest:.3g} "
                   f"(80 % power at Holm's strictest level, {level:.2g}, per half)")


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


__all__ = ["LOG_METRICS", "Verdict", "check_claim", "claim_line", "compare", "measured_values", "zoom_and_canvas"]
