"""results.csv: rows round-trip, cells stay whole across a cut at any byte or a kill, damage is named."""
from __future__ import annotations

import dataclasses

import pytest

from train.results import ResultsError, Row, aggregate, append_rows, read_rows


def row(kind, seed, ratio, value, task="text/copy", variant="-", metric="acc", higher=True, data_seed=0, split="test"):
    return Row(domain=task.split("/")[0], task=task, kind=kind, variant=variant, seed=seed, train_size="L=16",
               test_size=f"L={int(16 * ratio)}", size_ratio=ratio, metric=metric, value=value,
               higher_is_better=higher, train_time_s=0 if kind == "floor" else 1.5, data_seed=data_seed, split=split)


def test_csv_round_trip_and_aggregate_per_run(tmp_path):
    rows = [row("rope", 0, 1.0, 0.9), row("rope", 1, 1.0, 0.7, data_seed=1), row("rope", 0, 2.0, 0.5, variant="yarn"),
            row("floor", 0, 1.0, 0.1, variant="majority"), row("rope", 0, 1.0, 0.99, split="train")]
    append_rows(tmp_path / "r.csv", rows[:2])
    append_rows(tmp_path / "r.csv", rows[2:])
    back = read_rows(tmp_path / "r.csv")
    assert [dataclasses.replace(r, cell_rows=0) for r in back] == rows
    agg = aggregate(back)
    cell = agg["text/copy"]["rope"][1.0]
    assert cell.runs == {(0, 0): 0.9, (1, 1): 0.7}, "runs keyed by (seed, data seed); the train row kept apart"
    assert cell.mean == pytest.approx(0.8) and cell.std == pytest.approx(0.1414, abs=1e-3) and cell.n == 2
    assert aggregate(back, split="train")["text/copy"]["rope"][1.0].values == [0.99]
    assert agg["text/copy"]["floor: majority"][1.0].mean == pytest.approx(0.1)


def test_results_of_the_older_format_read_with_defaults(tmp_path):
    """A results.csv written before data_seed / split / lr existed reads as data seed 0, test split."""
    old = ("domain,task,kind,variant,seed,train_size,test_size,size_ratio,metric,value,higher_is_better,train_time_s,"
           "cell_rows\ntext,text/copy,rope,-,0,8L,8L,1.0,acc,0.5,True,2.0,1\n")
    (tmp_path / "r.csv").write_text(old)
    (r,) = read_rows(tmp_path / "r.csv")
    assert (r.data_seed, r.split, r.lr, r.value) == (0, "test", 0.0, 0.5)


def _two_cells():
    return [row("none", 0, r, 0.5 + r / 10) for r in (1.0, 2.0)] + [row("rope", 0, r, 0.9 - r / 10) for r in (1.0, 2.0)]


def test_results_survive_a_cut_at_every_byte(tmp_path):
    """A results.csv cut anywhere reads back as whole cells only; the next append repairs it."""
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

    path = tmp_path / "results.csv"
    append_rows(path, _two_cells()[:2])

    def killed(src, dst):
        raise KeyboardInterrupt  # the process dies between writing the temporary file and the rename

    monkeypatch.setattr(os, "replace", killed)
    with pytest.raises(KeyboardInterrupt):
        append_rows(path, _two_cells()[2:])
    monkeypatch.undo()
    assert [dataclasses.replace(r, cell_rows=0) for r in read_rows(path)] == _two_cells()[:2]



def test_provenance_columns_round_trip_and_old_rows_keep_empty_ones(tmp_path):
    """An old results.csv (no provenance columns) takes a stamped row: rewritten whole, old rows read back as ""."""
    old = ("domain,task,kind,variant,seed,train_size,test_size,size_ratio,metric,value,higher_is_better,train_time_s,"
           "cell_rows,data_seed,split,lr,weight_decay\ntext,text/copy,rope,-,0,8L,8L,1.0,acc,0.5,True,2.0,1,0,test,0.001,0.05\n")
    path = tmp_path / "r.csv"
    path.write_text(old)
    stamped = dataclasses.replace(row("alibi", 0, 1.0, 0.3), ndpe_version="0.1.0", commit="ab" * 20 + "-dirty",
                                  protocol="0123456789ab", device="cpu")
    append_rows(path, [stamped])
    assert path.read_text().splitlines()[0].endswith(",ndpe_version,commit,protocol,device")
    first, second = read_rows(path)
    assert (first.ndpe_version, first.commit, first.protocol, first.device, first.lr) == ("", "", "", "", 0.001)
    assert dataclasses.replace(second, cell_rows=0) == stamped
