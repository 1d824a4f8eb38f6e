"""Every exercise of the guide has its answer folded under it, and an answer that quotes the committed benchmark
record quotes it right (the other answers' numbers are the guide's doctests)."""
from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GUIDE = (ROOT / "docs" / "guide.md").read_text()
EXERCISE = re.compile(r"^(\*\*\d+\.\*\* |\*Exercise\.\* )", re.M)  # "**2.** ..." under "**Exercises.**", "*Exercise.* ..."


def exercises() -> list[tuple[str, str]]:
    """(the exercise's first line, its text up to the next exercise or heading), in the guide's order."""
    starts = [m.start() for m in EXERCISE.finditer(GUIDE)] + [len(GUIDE)]
    out = []
    for s, next_exercise in zip(starts, starts[1:]):
        heading = re.search(r"\n#{2,4} ", GUIDE[s:])
        end = min(next_exercise, s + heading.start() if heading else len(GUIDE))
        out.append((GUIDE[s:GUIDE.index("\n", s)], GUIDE[s:end]))
    return out


def test_every_exercise_has_its_answer_under_it():
    found = exercises()
    assert len(found) >= 23, f"{len(found)} exercises found: the pattern no longer matches the guide"
    missing = [first for first, text in found if '\n??? note "Answer"\n' not in text]
    assert not missing, f"exercises without an answer folded under them: {missing}"
    unnumbered = re.findall(r"^\d+\. .*", GUIDE[GUIDE.index("## Part I"):GUIDE.index("### Every kind beyond")], re.M)
    assert not unnumbered, f"an exercise as a list item cannot hold its answer: write it as **N.** ({unnumbered[:2]})"


def test_the_copy_answer_quotes_the_committed_quick_record():
    """Q1's first answer: NoPE's exact match on the copy task at the training length in benchmarks/results/quick."""
    copy = json.loads((ROOT / "benchmarks/results/quick/explore.json").read_text())["tasks"]["text/copy"]
    at_l = {k: s["points"][0]["mean"] for k, s in copy["series"].items() if s["points"][0]["ratio"] == 1.0}
    assert f"`none` reaches {at_l['none']:.3f} exact match at L, {0.95 - at_l['none']:.2f} below" in GUIDE
    assert f"`sinusoidal` reaches {at_l['sinusoidal']:.3f}" in GUIDE
