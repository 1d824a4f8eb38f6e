"""``ndpe explore``: the page's numbers are ndpe's, the page is one self-contained file, the benchmark tab agrees
with the report. The same page in a real browser: tests/test_explore_browser.py."""
from __future__ import annotations

import math
import re
from pathlib import Path

import pytest
import torch

import ndpe
from ndpe.cli import main
from ndpe.explore import SIZE_BUDGET, render, write_page
from ndpe.explore import data as D
from ndpe.viz.fields import content_of, relation

from conftest import page_data

pytestmark = pytest.mark.xdist_group("explore")  # one worker builds the page once
ROOT = Path(__file__).resolve().parent.parent
QUICK = ROOT / "benchmarks" / "results" / "quick"  # the committed quick run


@pytest.fixture(scope="module")
def small(explorer_page):
    """The page's data (the whole page, every kind, with the quick run's benchmark tab: tests/conftest.py)."""
    return page_data(explorer_page.read_text())


def test_pack_round_trip():
    v = torch.tensor([0.25, -1.0, math.nan, -math.inf, 0.0])
    packed = D.pack(v)
    back = D.unpack(packed)
    assert torch.isnan(back[2]) and torch.isnan(back[3])
    keep = torch.tensor([0, 1, 4])
    assert packed["scale"] == 1.25 / 254
    assert torch.allclose(back[keep], v[keep], atol=packed["scale"] / 2 + 1e-7)
    assert D.unpack(D.pack(torch.full((3,), 7.5))).tolist() == [7.5] * 3  # one value: kept exactly


def test_a_map_far_from_zero_keeps_its_levels():
    """CPB's 1D relation (its bias, about +8.2 .. +8.4 at initialization) keeps every distinct value of every query's
    row: packed over its own range, not over 0 .. its largest value (which left 2-4 levels of 24)."""
    grid = D.COMPARE_GRIDS[1]
    rows, _ = D.relation_rows(D.build("cpb", 1, **D.kind_options("cpb", 1, grid)), grid)
    assert float(rows.min()) > 1  # the case: values far from 0 relative to their spread
    packed = D.pack(rows)
    back = D.unpack(packed).view_as(rows)
    assert back[0].unique().numel() == rows[0].unique().numel() == 24  # the page's first query: every value
    for q in range(len(rows)):  # every query: values a packing step apart (1/254 of the map's range) stay apart
        gaps = rows[q].double().sort().values.diff()
        assert back[q].unique().numel() >= 1 + int((gaps > packed["scale"]).sum()), q


def test_every_map_of_the_page_keeps_the_levels_a_colour_shows(small):
    """No packed map of the page merges values a reader could tell apart: its step is at most 1/254 of its range,
    finer than the 128 colours of each half of a diverging map."""
    def packed(node):
        if isinstance(node, dict):
            if "b64" in node:
                yield node
            for v in node.values():
                yield from packed(v)
        elif isinstance(node, list):
            for v in node:
                yield from packed(v)
    maps = [p for key in ("growth", "compare", "axes", "spec", "bias") for p in packed(small[key])]
    assert len(maps) > 100
    for p in maps:
        v = D.unpack(p)
        finite = v[v.isfinite()]
        if finite.numel():
            assert p["scale"] <= (float(finite.max() - finite.min())) / 254 + 1e-9 or float(finite.max() - finite.min()) == 0


@pytest.mark.parametrize("kind,dims", [("rope", 2), ("learned", 2), ("alibi", 2), ("liere", 2), ("cope", 1),
                                       ("sinusoidal", 3)])
def test_compare_maps_are_ndpe_relations(small, kind, dims):
    """Every cell of the click-a-query view is ndpe.viz.relation of the kind built as the page says."""
    entry = small["compare"]["maps"][f"{kind}/{dims}"]
    grid = D.COMPARE_GRIDS[dims]
    pe = D.build(kind, dims, **D.kind_options(kind, dims, grid))
    assert entry["made"] == D.made(kind, dims, **D.kind_options(kind, dims, grid))
    rows = D.unpack(entry["rows"]).reshape(math.prod(grid), math.prod(grid))
    pos, content = pe(grid), content_of(pe, grid)
    for q in (0, math.prod(grid) // 2, math.prod(grid) - 1):
        want = relation(pos, q, content=content)
        finite = want.isfinite()
        assert torch.equal(finite, rows[q].isfinite())
        assert torch.allclose(rows[q][finite], want[finite], atol=entry["rows"]["scale"] / 2 + 1e-6)


def test_growth_rows_follow_the_setting(small):
    """A grown map is the relation on the grown grid of the query at the same content point; rope's scaling changes
    it; the seen-offset outline covers the whole grid at growth 1 and less beyond."""
    s = small["growth"]["settings"]
    plain, pi = s["rope|index|none|2|zoom"], s["rope|index|pi|2|zoom"]
    assert plain["grid"] == [16, 16] and plain["queries"][0] == 8 * 16 + 8  # centre of the same picture
    assert s["rope|index|none|2|canvas"]["queries"][0] == 4 * 16 + 4  # same patch, more picture around it
    pe = D.build("rope", 2, theta=100.0, coords="index")
    want = relation(pe((16, 16)), plain["queries"][0])
    assert torch.allclose(D.unpack(plain["rows"])[:256], want, atol=plain["rows"]["scale"] / 2 + 1e-6)
    assert not torch.allclose(D.unpack(pi["rows"]), D.unpack(plain["rows"]))
    assert set(s["rope|index|none|1|zoom"]["seen"][0]["offset"]) == {"1"}
    assert "0" in plain["seen"][0]["offset"] and "1" in plain["seen"][0]["offset"]
    assert "error" in s["rope|pixel|ntk|2|zoom"]  # ndpe's own refusal, shown on the page
    assert "liere|centered|none|2|zoom" in s and "none|-|none|2|zoom" not in s


def test_seen_masks():
    c = D.seen_masks((16, 16), 0, "index")
    assert int(c["offset"].sum()) == 8 * 8 and int(c["coord"].sum()) == 8 * 8  # corner query: offsets 0..7
    p = D.seen_masks((16, 16), 0, "pixel")  # pixel coordinates span [-1, 1] at every size: all seen
    assert bool(p["coord"].all()) and int(p["offset"].sum()) == 256


def test_dials_are_rope_angles(small):
    """Each pair's angle step is ndpe's frequency (inv_freq), PI divides it by the scale, angles seen grow with
    the length."""
    d = small["dials"]["settings"]
    pe = ndpe.make(dims=1, kind="rope", dim=D.DIAL_HEAD_DIM, theta=100.0)
    w = pe.axis_inv_freqs(torch.zeros(1, 1))[0].double()
    plain, pi = d["100|none|2"], d["100|pi|2"]
    assert torch.allclose(torch.tensor(plain["step"], dtype=torch.float64), w, rtol=1e-5)
    assert torch.allclose(torch.tensor(pi["step"], dtype=torch.float64), w / 2, rtol=1e-5)
    assert torch.allclose(torch.tensor(plain["train"]), torch.tensor(plain["step"]) * (D.DIAL_LENGTH - 1))
    assert torch.allclose(torch.tensor(plain["test"]), torch.tensor(plain["step"]) * (2 * D.DIAL_LENGTH - 1))
    assert "error" in d["100|yarn|1"]


def test_axes_terms_mean_is_the_relation(small):
    for alpha in ("0", "45"):
        a = small["axes"]["settings"][alpha]
        row, col, total = (D.unpack(a[k]) for k in ("row", "col", "total"))
        assert torch.allclose((row + col) / 2, total, atol=0.02)
    axial = small["axes"]["settings"]["0"]
    grid = small["axes"]["grid"]
    row = D.unpack(axial["row"]).reshape(grid)
    assert torch.allclose(row, row[:, :1].expand_as(row), atol=0.01)  # axial: the row term ignores columns


def test_spectrogram_axes():
    """A relative time axis gives the same relation around the query on a longer clip; an absolute frequency axis
    changes under a pitch shift where a relative one does not."""
    t, f = D.SPEC_GRID
    rel = D._spec_rows("rope", "rope", t, f, [5 * f + 2, 5 * f + 4])
    same = rel[1].reshape(t, f)[:, 2:] - rel[0].reshape(t, f)[:, :f - 2]
    assert same.abs().max() < 1e-5
    ab = D._spec_rows("rope", "learned", t, f, [5 * f + 2, 5 * f + 4])
    assert (ab[1].reshape(t, f)[:, 2:] - ab[0].reshape(t, f)[:, :f - 2]).abs().max() > 1e-2
    # sinusoids are absolute values, yet their similarity depends on the offset alone: blind to the shift too
    sin = D._spec_rows("rope", "sinusoidal", t, f, [5 * f + 2, 5 * f + 4])
    assert (sin[1].reshape(t, f)[:, 2:] - sin[0].reshape(t, f)[:, :f - 2]).abs().max() < 1e-5


def test_bias_heads_share_alibi_slopes(small):
    b = small["bias"]["settings"]["alibi (euclidean)"]
    assert b["slopes"] == pytest.approx(ndpe.make(dims=2, kind="alibi", dim=D.DIM, heads=D.BIAS_HEADS).slopes.tolist())
    heads = D.unpack(b["heads"]).reshape(D.BIAS_HEADS, -1)
    assert heads[:, small["bias"]["query"]].abs().max() == 0  # no penalty at the query
    assert (heads.min(1).values.diff() > 0).all()  # narrower heads first: one shared scale shows it


def test_bench_tab_agrees_with_the_report(small):
    """The benchmark tab's means and verdicts are the report's (report.md of the same results.csv)."""
    from train.report import check_claim, in_distribution, task_info
    from train.results import aggregate, read_rows
    from train.protocol import CLAIMS

    rows = read_rows(QUICK / "results.csv")
    agg, info = aggregate(rows), task_info(rows)
    bench = small["bench"]
    assert bench["run"] == "quick" and set(bench["tasks"]) == set(agg)
    task = bench["tasks"]["image/shapes-zoom"]
    rope = {p["ratio"]: p for p in task["series"]["rope"]["points"]}
    assert rope[2.0]["mean"] == pytest.approx(agg["image/shapes-zoom"]["rope"][2.0].mean)
    assert rope[2.0]["lo"] <= rope[2.0]["mean"] <= rope[2.0]["hi"] <= 1.0
    claims = [c for c in CLAIMS if c.task == "image/shapes-zoom"]
    assert [v["verdict"] for v in task["verdicts"]] == [check_claim(c, agg, info, in_distribution(rows)).label
                                                       for c in claims]
    report = (QUICK / "report.md").read_text()
    for v in task["verdicts"]:
        assert f"**{v['verdict']}**" in report
    assert task["series"]["none"]["counts"] is False and task["series"]["floor: chance"]["floor"]


def test_page_is_self_contained(tmp_path, small):
    """One file, nothing fetched: no external script, style, image or font; under the size budget; it names the
    ndpe version that made it."""
    html = render(small)
    assert not re.search(r"""(src|href)\s*=\s*["']?(https?:)?//""", html)
    assert "<link" not in html and "@import" not in html and "url(http" not in html
    assert "fetch(" not in html and "XMLHttpRequest" not in html
    data = page_data(html)
    assert data["meta"]["ndpe"] == ndpe.__version__ and data["compare"] == small["compare"]
    assert len(html.encode()) < SIZE_BUDGET


def test_cli_writes_the_full_page(explorer_page):
    """`ndpe explore --out DIR` (the fixture runs it) writes DIR/index.html with every registered kind selectable,
    under the budget."""
    path = explorer_page
    data = page_data(path.read_text())
    assert set(data["kinds"]) == set(ndpe.available()) and data["bench"]["run"] == "quick"
    for kind, dims in ndpe.available().items():
        for d in dims:
            assert f"{kind}/{d}" in data["compare"]["maps"]
    assert path.stat().st_size < SIZE_BUDGET


def test_cli_errors_are_one_line(tmp_path, capsys, monkeypatch):
    assert main(["explore", "--out", str(tmp_path), "--results", str(tmp_path / "nowhere")]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("ndpe explore: error: no results.csv in") and "\n" not in err
    assert main(["explore", "--out", str(tmp_path), "--kinds", "ropee"]) == 1
    assert "unknown kinds ['ropee']" in capsys.readouterr().err
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "matplotlib" else real(name, *a))
    assert main(["explore", "--out", str(tmp_path)]) == 1
    err = capsys.readouterr().err.strip()
    assert "pip install 'ndpe[viz]'" in err and "\n" not in err
    assert not (tmp_path / "index.html").exists()


def test_write_page_refuses_over_budget(tmp_path, monkeypatch, small):
    import ndpe.explore as explore

    monkeypatch.setattr(explore, "build_data", lambda *a, **k: small)
    monkeypatch.setattr(explore, "SIZE_BUDGET", 1000)
    with pytest.raises(ValueError, match="over its budget of 1000"):
        write_page(tmp_path)
    assert not (tmp_path / "index.html").exists()


@pytest.mark.parametrize("run", ["quick", "standard-v1", "standard"])
def test_committed_runs_carry_the_tab_of_their_results(run):
    """The explore.json committed beside a run's results.csv is train/explore.py's reading of that file."""
    import hashlib
    import json

    from train.explore import BENCH_FILE, bench_data

    folder = ROOT / "benchmarks" / "results" / run
    saved = json.loads((folder / BENCH_FILE).read_text())
    assert saved.pop("results_sha256") == hashlib.sha256((folder / "results.csv").read_bytes()).hexdigest()
    assert saved == json.loads(json.dumps(bench_data(folder), allow_nan=False))


def test_results_without_their_tab_or_with_a_stale_one_are_one_line(tmp_path, capsys):
    """``--results`` needs the run's explore.json, made from its results.csv as it is now; each refusal says how
    to write it."""
    import shutil

    from train.explore import write_bench_data

    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(QUICK / "results.csv", run / "results.csv")
    assert main(["explore", "--out", str(tmp_path), "--results", str(run)]) == 1
    err = capsys.readouterr().err.strip()
    assert "has no explore.json" in err and f"python -m train.explore {run}" in err and "\n" not in err
    write_bench_data(run)
    with open(run / "results.csv", "a") as f:  # rows added after the tab was written
        f.write((QUICK / "results.csv").read_text().splitlines()[-1] + "\n")
    assert main(["explore", "--out", str(tmp_path), "--results", str(run)]) == 1
    err = capsys.readouterr().err.strip()
    assert "was not made from this results.csv" in err and "\n" not in err
    assert not (tmp_path / "index.html").exists()


def test_cli_shows_progress_while_it_builds(tmp_path, capsys):
    """`ndpe explore` prints a line to stderr as each view's numbers start and end (the full page takes a minute)."""
    assert main(["explore", "--out", str(tmp_path), "--kinds", "rope"]) == 0
    captured = capsys.readouterr()
    lines = captured.err.strip().splitlines()
    assert captured.out.strip() == str(tmp_path / "index.html")
    assert len(lines) == 2 * 7 and all(line.startswith("ndpe explore: [") for line in lines)
    assert lines[0] == "ndpe explore: [1/7] toy scene ..."
    assert re.fullmatch(r"ndpe explore: \[7/7\] bias heads: [\d.]+ s", lines[-1])


def test_charts_put_ratios_on_log_axes_and_tell_variants_apart():
    """Perplexity (a ratio) on a log axis with plain tick numbers; test sizes (multiples) on a log axis; each
    rope variant its own line style and marker."""
    import json

    from ndpe.explore.charts import _styles, task_chart

    bench = json.loads((ROOT / "benchmarks" / "results" / "standard-v1" / "explore.json").read_text())
    task = bench["tasks"]["text/stdlib_lm"]
    svg = task_chart("text/stdlib_lm", task)
    texts = re.findall(r"<text[^>]*>([^<]*)</text>", svg)
    assert "ppl (lower is better, log scale)" in texts and "test size (× the training size, log scale)" in texts
    assert {"4", "6", "10", "20", "40"} <= set(texts) and not any("10^" in t or "times" in t for t in texts)
    assert [z["label"] for z in task["sizes"]] == [t for t in texts if t in {z["label"] for z in task["sizes"]}]
    styles = _styles(task)
    ropes = [label for label, ser in task["series"].items() if ser["kind"] == "rope"]
    assert len(ropes) >= 4 and len({(str(styles[r]["ls"]), styles[r]["marker"]) for r in ropes}) == len(ropes)


def test_each_floor_of_a_chart_is_a_line_of_its_own():
    """The floors of every task of the standard record (up to 5, as audio/tones) differ in dashes or marker, and
    none is drawn as a kind's line (every floor was one identical grey dash)."""
    import json

    from ndpe.explore.charts import _styles

    bench = json.loads((ROOT / "benchmarks" / "results" / "standard" / "explore.json").read_text())
    most = 0
    for name, task in bench["tasks"].items():
        styles = _styles(task)
        floors = [styles[label] for label, ser in task["series"].items() if ser["floor"]]
        most = max(most, len(floors))
        assert len({(str(s["ls"]), s["marker"]) for s in floors}) == len(floors), name
        kinds = {(str(s["ls"]), s["marker"], s["color"]) for label, s in styles.items() if not task["series"][label]["floor"]}
        assert not kinds & {(str(s["ls"]), s["marker"], s["color"]) for s in floors}, name
    assert most >= 4
