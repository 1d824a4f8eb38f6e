"""The benchmark report: aggregation over seeds, noise rule, literature verdicts, files written."""
from __future__ import annotations

import pytest

from train.report import CLAIMS, Cell, Row, aggregate, append_rows, check_claim, read_rows, task_info, within_noise, \
    write_report


def row(kind, seed, ratio, value, task="text/copy", variant="-", metric="accuracy", higher=True):
    return Row(domain=task.split("/")[0], task=task, kind=kind, variant=variant, seed=seed, train_size="L=16",
               test_size=f"L={int(16 * ratio)}", size_ratio=ratio, metric=metric, value=value,
               higher_is_better=higher, train_time_s=1.5)


def test_csv_round_trip_and_aggregate(tmp_path):
    rows = [row("rope", 0, 1.0, 0.9), row("rope", 1, 1.0, 0.7), row("rope", 0, 2.0, 0.5, variant="yarn")]
    append_rows(tmp_path / "r.csv", rows[:2])
    append_rows(tmp_path / "r.csv", rows[2:])
    back = read_rows(tmp_path / "r.csv")
    assert back == rows
    agg = aggregate(back)
    cell = agg["text/copy"]["rope"][1.0]
    assert cell.mean == pytest.approx(0.8) and cell.std == pytest.approx(0.1414, abs=1e-3) and cell.n == 2
    assert agg["text/copy"]["rope (yarn)"][2.0].n == 1


def test_within_noise():
    assert within_noise(Cell(0.80, 0.01, 3), Cell(0.81, 0.01, 3))
    assert not within_noise(Cell(0.50, 0.01, 3), Cell(0.90, 0.01, 3))
    assert within_noise(Cell(0.5, 0.0, 1), Cell(0.9, 0.0, 1)), "one seed can never separate kinds"


@pytest.mark.parametrize("good,bad,verdict", [
    (0.9, 0.1, "agrees"), (0.1, 0.9, "disagrees"), (0.5, 0.5, "inconclusive"),
])
def test_claim_verdicts(good, bad, verdict):
    claim = next(c for c in CLAIMS if c.task == "coord/quadrant")
    rows = [row(k, s, 1.0, v + 0.01 * s, task="coord/quadrant") for s in range(3)
            for k, v in (("conv+coord", good), ("conv", bad))]
    text = check_claim(claim, aggregate(rows), task_info(rows))
    assert verdict in text


def test_write_report(tmp_path):
    rows = [row(k, s, r, v - 0.1 * r + 0.01 * s) for s in range(2) for r in (1.0, 2.0, 4.0)
            for k, v in (("none", 0.9), ("rope", 0.8))]
    append_rows(tmp_path / "results.csv", rows)
    report = write_report(tmp_path, "# test run")
    text = report.read_text()
    assert "### text/copy" in text and "| none |" in text and "**" in text
    assert (tmp_path / "text_copy.png").stat().st_size > 1000
    assert "Kazemnejad" in text
