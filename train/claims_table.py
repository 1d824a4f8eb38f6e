"""The report's "Every half at a glance": every half of every claim on one row, from the verdicts' own halves
(train/claims.py): what it measures, the effect and its 95 % interval, Holm's p, the detectable effect beside the
paper's, the label; a half left out, and a claim not tested or not run, say why."""
from __future__ import annotations

import math

from .claims import KEEPS, check_claim
from .protocol import Claim

HEAD = ["### Every half at a glance", "",
        "Effects signed so that positive agrees with the claim; detectable: the smallest effect the record sees at 80 % "
        "power and Holm's strictest level within the claim (its own test); paper: the effect the paper reports on the "
        "same scale, where the claim cites one (the claim's line above cites the table).", "",
        "| claim | task | measure | half | effect [95 %] | Holm p | detectable | paper | label |",
        "|---|---|---|---|---|---|---|---|---|"]


def cell(text: str) -> str:
    """A table cell: a ``|`` inside it would end the cell."""
    return str(text).replace("|", "\\|")


def row(*cells) -> str:
    return "| " + " | ".join(cell(c) for c in cells) + " |"


def halves_table(claims: list[Claim], agg, info, in_dist=None) -> list[str]:
    lines = list(HEAD)
    for c in claims:
        if c.task not in agg:
            continue
        v = check_claim(c, agg, info, in_dist)
        for h in v.halves:
            mde = f"{h.detectable:.3g}" if not math.isnan(h.detectable) else "–"
            paper = f"{h.paper:.3g}" if h.paper is not None else "–"
            label = f"{h.label} ({h.note})" if h.note else h.label
            lines.append(row(c.source, c.task, h.measure, h.name, h.estimate, f"{h.p:.2g}", mde, paper, label))
        for why in v.dropped:
            measure = f"retention at ×{max(max(by) for by in agg[c.task].values()):g}" if KEEPS in why else v.measure
            lines.append(row(c.source, c.task, measure, why, "–", "–", "–", "–", "not tested"))
        if not v.halves and not v.dropped:
            lines.append(row(c.source, c.task, "–", v.detail, "–", "–", "–", "–", v.label))
    return lines + [""]


__all__ = ["halves_table"]
