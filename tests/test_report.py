"""The benchmark report: aggregation over seeds, noise rule, floors, literature verdicts, plots, files written."""
from __future__ import annotations

import math

import dataclasses

import pytest

from train.plots import task_figure
from train.report import CLAIMS, Cell, Claim, Row, aggregate, append_rows, check_claim, floor_check, read_rows, \
    size_label, task_info, within_noise, write_report


def row(kind, seed, ratio, value, task="text/copy", variant="-", metric="accuracy", higher=True):
    return Row(domain=task.split("/")[0], task=task, kind=kind, variant=variant, seed=seed, train_size="L=16",
               test_size=f"L={int(16 * ratio)}", size_ratio=ratio, metric=metric, value=value,
               higher_is_better=higher, train_time_s=0 if kind == "floor" else 1.5)


def runs(values: dict[str, float], task="text/copy", ratios=(1.0,), seeds=3, spread=0.01, **kw) -> list[Row]:
    """Rows for kinds (and ``"floor: name"`` floors, one seed each) with small seed-to-seed spread."""
    out = []
    for label, v in values.items():
        kind, variant = ("floor", label[len("floor: "):]) if label.startswith("floor: ") else (label, "-")
        for s in range(1 if kind == "floor" else seeds):
            out += [row(kind, s, r, v + spread * s, task=task, variant=variant, **kw) for r in ratios]
    return out


def test_csv_round_trip_and_aggregate(tmp_path):
    rows = [row("rope", 0, 1.0, 0.9), row("rope", 1, 1.0, 0.7), row("rope", 0, 2.0, 0.5, variant="yarn"),
            row("floor", 0, 1.0, 0.1, variant="majority")]
    append_rows(tmp_path / "r.csv", rows[:2])
    append_rows(tmp_path / "r.csv", rows[2:])
    back = read_rows(tmp_path / "r.csv")
    assert [dataclasses.replace(r, cell_rows=0) for r in back] == rows and {r.cell_rows for r in back} == {1}
    agg = aggregate(back)
    cell = agg["text/copy"]["rope"][1.0]
    assert cell.mean == pytest.approx(0.8) and cell.std == pytest.approx(0.1414, abs=1e-3) and cell.n == 2
    assert agg["text/copy"]["rope (yarn)"][2.0].n == 1
    assert agg["text/copy"]["floor: majority"][1.0].mean == pytest.approx(0.1)


def test_within_noise():
    assert within_noise(Cell(0.80, 0.01, 3), Cell(0.81, 0.01, 3))
    assert not within_noise(Cell(0.50, 0.01, 3), Cell(0.90, 0.01, 3))
    assert within_noise(Cell(0.5, 0.0, 1), Cell(0.9, 0.0, 1)), "one seed can never separate kinds"


@pytest.mark.parametrize("test_size,ratio,label", [
    ("48px", 1.5, "48 px (×1.5)"), ("2s", 2.0, "2 s (×2)"), ("64L", 4.0, "64 L (×4)"), ("512C", 8.0, "512 ch (×8)"),
    ("12frames", 1.5, "12 frames (×1.5)"), ("quadrant", 1.0, "quadrant"),
])
def test_size_labels(test_size, ratio, label):
    assert size_label(test_size, ratio) == label


@pytest.mark.parametrize("good,bad,verdict", [
    (0.9, 0.1, "agrees"), (0.1, 0.9, "disagrees"), (0.5, 0.5, "inconclusive"),
])
def test_claim_verdicts(good, bad, verdict):
    claim = Claim("Someone 2020", "a beats b", "text/copy", ["a"], ["b"])
    rows = runs({"a": good, "b": bad})
    text = check_claim(claim, aggregate(rows), task_info(rows))
    assert f"**{verdict}" in text


def test_claims_follow_the_papers_protocols():
    later_sources = ("Sun et al. 2023", "Li et al. 2024", "Golovneva et al. 2024")
    by_task = {c.task: c for c in CLAIMS if c.source not in later_sources}
    for task in ("text/copy", "text/reverse", "text/addition"):
        assert by_task[task].better == ["none", "relative"] and by_task[task].middle == ["alibi"]
    assert by_task["text/stdlib_lm"].measure == "degradation"
    later = {c.source: c for c in CLAIMS}
    assert later["Sun et al. 2023"].better == ["xpos"] and later["Li et al. 2024"].measure == "degradation"
    assert later["Golovneva et al. 2024"].task == "text/copy" and "selective copy" in later["Golovneva et al. 2024"].note
    assert not by_task["image/shapes-zoom"].note and "not the paper's protocol" in by_task["image/shapes"].note
    assert by_task["coord/uniform"].threshold == pytest.approx(2 / 63) and by_task["coord/quadrant"].misses == ["conv"]
    rows = runs({"a": 0.9})
    assert "not measured" in check_claim(by_task["text/reverse"], aggregate(rows), task_info(rows))


def test_floor_rows_in_tables(tmp_path):
    rows = runs({"none": 0.6, "rope": 0.4, "floor: majority": 0.9, "floor: chance": 0.1}, ratios=(1.0, 2.0))
    append_rows(tmp_path / "results.csv", rows)
    text = write_report(tmp_path, "# test run").read_text()
    table = text.split("### text/copy")[1].split("![")[0]
    lines = [line for line in table.splitlines() if line.startswith("| ")]
    assert [line.split(" | ")[0] for line in lines[1:]] == ["| none", "| rope", "| floor: chance", "| floor: majority"]
    assert "**0.61 ± 0.01**" in lines[1], "the best encoding is bold even when a floor is higher"
    assert "**" not in lines[4] and "~" not in lines[4] and lines[4].endswith("| – |")
    assert "3 seeds" in table.splitlines()[0]
    assert "| *floor to beat* | majority 0.9 |" in text, "summary: the highest floor for higher-is-better"


def test_learned_rule():
    rows = runs({"clear": 0.5, "close": 0.295, "below": 0.2, "floor: chance": 0.1, "floor: majority": 0.3},
                ratios=(1.0, 2.0), spread=0.01)
    rows += [row("single", 0, 1.0, 0.9)] + [row("late", s, 2.0, 0.9) for s in range(3)]
    check = floor_check(aggregate(rows)["text/copy"], higher=True)
    assert check.floor[0] == "majority"
    assert list(check.learned) == ["clear"]
    assert list(check.not_learned) == ["below", "close"], "0.305 ± 0.01 (se 0.0058) is above 0.3 but not by 2 se"
    assert list(check.not_shown) == ["single"]
    lower = runs({"a": 1.0, "floor: unigram": 3.0, "floor: bigram": 2.0}, metric="ppl", higher=False)
    assert floor_check(aggregate(lower)["text/copy"], higher=False).floor[0] == "bigram"


def test_learned_section_in_report(tmp_path):
    append_rows(tmp_path / "results.csv", runs({"none": 0.6, "rope": 0.2, "floor: majority": 0.3}))
    text = write_report(tmp_path, "# test run").read_text()
    section = text.split("## Which kinds learned each task")[1].split("## Per task")[0]
    assert "strongest floor majority 0.3; above it: none; not above it: rope 0.21 ± 0.01." in section


def test_kind_below_the_floor_left_out_of_verdict():
    claim = next(c for c in CLAIMS if c.task == "text/copy")
    rows = runs({"none": 0.9, "relative": 0.9, "alibi": 0.7, "learned": 0.5, "sinusoidal": 0.5, "rope": 0.95,
                 "floor: majority": 0.3}, ratios=(1.0, 4.0))
    rows = [r if not (r.kind == "rope" and r.size_ratio == 1.0) else row("rope", r.seed, 1.0, 0.1) for r in rows]
    text = check_claim(claim, aggregate(rows), task_info(rows))
    assert "left out (did not beat the floor in distribution): rope" in text.lower()
    assert "vs rope" not in text and "**agrees**" in text


def test_not_testable_when_a_side_has_no_learned_kind():
    claim = Claim("Someone 2020", "a beats b and c", "text/copy", ["a"], ["b", "c"])
    rows = runs({"a": 0.9, "b": 0.1, "c": 0.15, "floor: chance": 0.2})
    text = check_claim(claim, aggregate(rows), task_info(rows))
    assert "**not testable: too few kinds left to compare (a → a; b/c → none)" in text
    assert "left out (did not beat the floor in distribution): b, c" in text
    assert "agrees" not in text and "disagrees" not in text
    mixed = Claim("Someone 2020", "a beats b and c; a under 0.5", "text/copy", ["a"], ["b", "c"], threshold=0.5,
                  meets=["a"])
    text = check_claim(mixed, aggregate(rows), task_info(rows))
    assert "**agrees**" in text and "Comparison not testable: too few kinds left" in text


@pytest.mark.parametrize("good,bad,verdict", [
    (0.01, 0.5, "agrees"), (0.2, 0.5, "partly agrees"), (0.2, 0.01, "disagrees"), (0.03, 0.03, "inconclusive"),
])
def test_threshold_claims(good, bad, verdict):
    claim = Claim("Liu et al. 2018", "near-perfect", "coord/quadrant", [], [], threshold=2 / 63,
                  meets=["conv+coord"], misses=["conv"])
    rows = runs({"conv+coord": good, "conv": bad, "floor: mean-predictor": 0.4}, task="coord/quadrant",
                metric="coord_err", higher=False, spread=0.002)
    text = check_claim(claim, aggregate(rows), task_info(rows))
    assert f"**{verdict}" in text
    assert "conv " in text, "a kind below the floor still takes part in an absolute threshold"


@pytest.mark.parametrize("metric,higher,first,last,floor", [
    ("ppl", False, {"a": 14.0, "b": 10.0}, {"a": 14.5, "b": 13.0}, 20.0),  # b is lower at ×8 but degrades more
    ("acc", True, {"a": 0.5, "b": 0.95}, {"a": 0.48, "b": 0.6}, 0.1),  # b is higher at ×8 but degrades more
])
def test_degradation_claims(metric, higher, first, last, floor):
    claim = Claim("Press et al. 2022", "a holds, b degrades", "text/lm", ["a"], ["b"], measure="degradation")
    kw = dict(task="text/lm", metric=metric, higher=higher)
    rows = runs({**first, "floor: f": floor}, **kw) + runs(last, ratios=(8.0,), **kw)
    text = check_claim(claim, aggregate(rows), task_info(rows))
    assert f"worsening of {metric} from ×1 to ×8" in text and "**agrees**" in text


def styles(fig) -> dict[str, tuple]:
    """legend label -> (colour, line style) of a task figure's series."""
    import matplotlib.colors as mcolors

    out = {}
    for handle, label in zip(*fig.axes[0].get_legend_handles_labels()):
        line = handle.lines[0] if hasattr(handle, "lines") else handle
        colour = line.get_color() if hasattr(line, "get_color") else line.get_edgecolor()
        out[label] = (mcolors.to_hex(colour), line.get_linestyle())
    return out


def test_fixed_colours_across_plots():
    import matplotlib.pyplot as plt

    first = runs({"alibi": 0.5, "rope": 0.6, "floor: chance": 0.1}, ratios=(1.0, 2.0))
    second = runs({"none": 0.5, "learned": 0.4, "rope": 0.7, "sinusoidal": 0.3}, ratios=(1.0, 2.0))
    second += [row("rope", s, 2.0, 0.5, variant="pi") for s in range(2)]
    figs = [task_figure("t", aggregate(rs)["text/copy"], [(1.0, "16L"), (2.0, "32L")], "acc") for rs in (first, second)]
    a, b = (styles(f) for f in figs)
    assert a["rope"][0] == b["rope"][0] == b["rope (pi)"][0] and a["rope"][1] != b["rope (pi)"][1]
    assert len({colour for colour, _ in b.values()}) == 4, "distinct colours for distinct kinds"
    assert a["floor: chance"][1] not in ("-", "solid"), "floors are dashed"
    for fig in figs:
        plt.close(fig)


@pytest.mark.parametrize("metric,scale", [("ppl", "log"), ("acc", "linear")])
def test_log_scale_for_perplexity(metric, scale):
    import matplotlib.pyplot as plt

    fig = task_figure("t", aggregate(runs({"rope": 5.0}))["text/copy"], [(1.0, "64C")], metric)
    assert fig.axes[0].get_yscale() == scale
    plt.close(fig)


@pytest.mark.parametrize("metric,mean,low,high", [("acc", 0.95, 0.75, 1.0), ("coord_err", 0.05, 0.0, 0.25),
                                                  ("ppl", 1.1, 1.0, 1.3)])
def test_error_bars_clipped_to_the_metric_range(metric, mean, low, high):
    import matplotlib.pyplot as plt

    agg_task = {"rope": {1.0: Cell(mean, 0.2, 3)}}
    fig = task_figure("t", agg_task, [(1.0, "16L")], metric)
    (segment,) = fig.axes[0].containers[0].lines[2][0].get_segments()
    assert sorted(y for _, y in segment) == pytest.approx([low, high])
    plt.close(fig)


def test_write_report(tmp_path):
    rows = [row(k, s, r, v - 0.1 * r + 0.01 * s) for s in range(2) for r in (1.0, 2.0, 4.0)
            for k, v in (("none", 0.9), ("rope", 0.8))]
    rows += [row("floor", 0, r, 0.1, variant="chance") for r in (1.0, 2.0, 4.0)]
    append_rows(tmp_path / "results.csv", rows)
    report = write_report(tmp_path, "# test run")
    text = report.read_text()
    assert "### text/copy" in text and "| none |" in text and "**" in text and "| floor: chance |" in text
    assert (tmp_path / "text_copy.png").stat().st_size > 1000
    assert "Kazemnejad" in text and "## Which kinds learned each task" in text
    table = text.split("### text/copy")[1]
    assert not math.isnan(float(table.split("| none |")[1].split("\n")[0].split("|")[-2])), "training time column"


def test_one_seed_kind_left_out_as_not_shown():
    claim = Claim("Someone 2020", "a and x beat b", "text/copy", ["a", "x"], ["b"])
    rows = runs({"a": 0.9, "b": 0.5, "floor: chance": 0.1}) + runs({"x": 0.9}, seeds=1)
    text = check_claim(claim, aggregate(rows), task_info(rows))
    assert "left out (one seed, cannot show it beat the floor): x" in text.lower() and "x 0.9 vs" not in text


def _two_cells():
    return [row("none", 0, r, 0.5 + r / 10) for r in (1.0, 2.0)] + [row("rope", 0, r, 0.9 - r / 10) for r in (1.0, 2.0)]


def test_results_survive_a_cut_at_every_byte(tmp_path):
    """A results.csv cut anywhere reads back as whole cells only; the next append repairs it."""
    from train.report import read_rows

    path = tmp_path / "results.csv"
    rows = _two_cells()
    append_rows(path, rows[:2])
    append_rows(path, rows[2:])
    data = path.read_bytes()
    cells = {("none", 2), ("rope", 2)}
    for cut in range(len(data) + 1):
        path.write_bytes(data[:cut])
        back = read_rows(path)
        for kind in {r.kind for r in back}:
            assert (kind, len([r for r in back if r.kind == kind])) in cells, f"cut at {cut}: partial cell {kind}"
        assert [dataclasses.replace(r, cell_rows=0) for r in back] == [r for r in rows if r.kind in {b.kind for b in back}]
        append_rows(path, [row("alibi", 0, 1.0, 0.3)])  # header and rows rewritten whole
        again = read_rows(path)
        assert again[-1].kind == "alibi" and again[:-1] == back and again[-1].cell_rows == 1
    assert [r.kind for r in read_rows(path)] == ["none"] * 2 + ["rope"] * 2 + ["alibi"]


def test_results_damaged_before_the_last_line_name_the_file(tmp_path):
    from train.report import ResultsError, read_rows

    path = tmp_path / "results.csv"
    append_rows(path, _two_cells())
    lines = path.read_text().splitlines()
    lines[2] = lines[2][:5]
    path.write_text("\n".join(lines) + "\n")
    with pytest.raises(ResultsError, match=r"results.csv: line 3 is damaged"):
        read_rows(path)
    path.write_text("domain,task\n" + "\n".join(lines[1:]) + "\n")
    with pytest.raises(ResultsError, match="line 1 is not the results header"):
        read_rows(path)


def test_a_kill_during_append_leaves_the_old_file(tmp_path, monkeypatch):
    import os

    from train.report import read_rows

    path = tmp_path / "results.csv"
    append_rows(path, _two_cells()[:2])

    def killed(src, dst):
        raise KeyboardInterrupt  # the process dies between writing the temporary file and the rename

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        append_rows(path, _two_cells()[2:])
    monkeypatch.undo()
    assert [dataclasses.replace(r, cell_rows=0) for r in read_rows(path)] == _two_cells()[:2]


def test_the_lm_is_held_to_its_reference_floor():
    """text/stdlib_lm: learned = beats the bigram floor; the stronger trigram floor is reported beside it."""
    from train.report import learned_section

    def lm(kind, seed, value, variant="-"):
        return row(kind, seed, 1.0, value, task="text/stdlib_lm", variant=variant, metric="ppl", higher=False)

    rows = [lm("floor", 0, 12.0, "bigram"), lm("floor", 0, 7.0, "trigram")]
    rows += [lm("alibi", s, 9.0 + 0.01 * s) for s in range(3)] + [lm("none", s, 12.5 + 0.01 * s) for s in range(3)]
    text = "\n".join(learned_section(aggregate(rows), task_info(rows)))
    assert "reference floor bigram 12; above it: alibi; not above it: none 12.5" in text
    assert "above the strongest floor (trigram 7) too: no kind" in text
