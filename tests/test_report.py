"""The report: competence bars, floors per data seed, retention, claims with Holm-corrected tests, plots, files."""
from __future__ import annotations

import re

import pytest

from train.plots import task_figure
from train.protocol import CLAIMS, TASKS, Claim
from train.report import check_claim, competence, halves_table, retention, task_info, write_report
from train.results import Cell, Row, aggregate, append_rows


def row(kind, seed, ratio, value, task="text/copy", variant="-", metric="seq_acc", higher=True, data_seed=None):
    return Row(domain=task.split("/")[0], task=task, kind=kind, variant=variant, seed=seed, train_size="8L",
               test_size=f"{int(8 * ratio)}L", size_ratio=ratio, metric=metric, value=value, higher_is_better=higher,
               train_time_s=0 if kind == "floor" else 1.5, data_seed=seed % 2 if data_seed is None else data_seed)


def runs(values: dict, task="text/copy", ratios=(1.0,), n=5, spread=0.01, **kw) -> list[Row]:
    """Rows for kinds (values: a number, or one per ratio) and ``"floor: name"`` floors (one per data seed)."""
    out = []
    for label, v in values.items():
        per_ratio = v if isinstance(v, (list, tuple)) else [v] * len(ratios)
        if label.startswith("floor: "):
            out += [row("floor", d, r, x, task=task, variant=label[7:], data_seed=d, **kw)
                    for d in (0, 1) for r, x in zip(ratios, per_ratio)]
            continue
        out += [row(label, s, r, x + spread * (s - 2), task=task, **kw) for s in range(n) for r, x in zip(ratios, per_ratio)]
    return out


def verdict(claim, rows):
    return check_claim(claim, aggregate(rows), task_info(rows))


def test_competence_bar_floors_and_position():
    """copy: bar 0.95 seq_acc; a kind counts iff it passes the bar and beats every floor of its data seed;
    it uses position iff it also beats the order-blind floor and NoPE."""
    rows = runs({"rope": 0.99, "alibi": 0.9, "none": 0.97, "sinusoidal": 0.999, "floor: order-blind": 0.2,
                 "floor: chance": 0.0})
    check = competence("text/copy", aggregate(rows)["text/copy"], higher=True)
    assert check.learned and check.best == "sinusoidal"
    assert {k for k, s in check.kinds.items() if s.counts} == {"rope", "none", "sinusoidal"}
    assert not check.kinds["alibi"].bar and check.kinds["alibi"].floors
    assert check.kinds["sinusoidal"].order and check.kinds["rope"].order and check.kinds["none"].order is None
    low = runs({"rope": 0.9, "none": 0.5, "floor: chance": 0.0})
    assert not competence("text/copy", aggregate(low)["text/copy"], higher=True).learned


def test_floor_bar_is_tested_against_each_runs_data_seed():
    """audio/tones: beat the order-blind ceiling. Data seed 1's ceiling is higher: a kind that beats seed 0's
    mean but not each run's own floor does not pass."""
    rows = [row("floor", d, 1.0, f, task="audio/tones", variant="order-blind", metric="acc", data_seed=d)
            for d, f in ((0, 0.60), (1, 0.74))]
    rows += [row("rope", s, 1.0, 0.72 + 0.001 * s, task="audio/tones", metric="acc") for s in range(6)]
    rows += [row("sinusoidal", s, 1.0, 0.85 + 0.001 * s, task="audio/tones", metric="acc") for s in range(6)]
    check = competence("audio/tones", aggregate(rows)["audio/tones"], higher=True)
    assert not check.kinds["rope"].bar, "below its own data's ceiling on data seed 1"
    assert check.kinds["sinusoidal"].counts


def test_retention_per_run():
    rows = runs({"rope": [0.96, 0.6], "floor: order-blind": [0.2, 0.2]}, ratios=(1.0, 2.0), spread=0.0)
    agg = aggregate(rows)["text/copy"]
    est = retention(agg, "rope", 2.0, competence("text/copy", agg, higher=True))
    assert est.mean == pytest.approx((0.6 - 0.2) / (0.96 - 0.2))


@pytest.mark.parametrize("a,b,label", [(0.99, 0.96, "agrees"), (0.96, 0.99, "disagrees"), (0.975, 0.975, "inconclusive")])
def test_claim_verdicts(a, b, label):
    claim = Claim("Someone 2020", "a beats b", "text/copy", [["rope"], ["sinusoidal"]])
    rows = runs({"rope": [0.99, a], "sinusoidal": [0.99, b], "floor: chance": [0.0, 0.0]}, ratios=(1.0, 2.0),
                spread=0.002)
    noise = [0.004, -0.004, 0.006, -0.006, 0.0]  # the kinds differ from run to run, not in step
    rows = [row(r.kind, r.seed, 2.0, r.value + noise[r.seed]) if r.kind == "sinusoidal" and r.size_ratio == 2.0 else r
            for r in rows]
    v = verdict(claim, rows)
    assert v.label == label
    if label == "inconclusive":
        assert "detectable 0.0" in v.detail and "the paper's effect: not stated here" in v.detail


def test_holm_correction_across_the_claims_pairs():
    """Two pairs each significant alone (p ~ 0.03) are not both significant after Holm: inconclusive."""
    claim = Claim("Someone 2020", "a beats b and c", "text/copy", [["rope"], ["sinusoidal", "learned"]])
    base = {"rope": [0.99, 0.895], "floor: chance": [0.0, 0.0]}
    noisy = [0.02, -0.02, 0.03, -0.03, 0.0]
    rows = runs(base, ratios=(1.0, 2.0), spread=0.0)
    rows = [r if r.kind != "rope" or r.size_ratio == 1.0 else row("rope", r.seed, 2.0, 0.895 + noisy[r.seed]) for r in rows]
    for kind in ("sinusoidal", "learned"):
        rows += [row(kind, s, 1.0, 0.99) for s in range(5)] + [row(kind, s, 2.0, 0.86) for s in range(5)]
    from train import stats
    single = stats.paired([0.895 + x for x in noisy], [0.86] * 5).p_value  # the same runs: paired
    assert single < 0.05 < 2 * single, "each pair alone passes, not after doubling"
    assert verdict(claim, rows).label == "inconclusive"


def test_degradation_is_paired_per_run():
    """Models whose level varies from run to run but that each degrade by the same amount: the paired worsening
    separates them where an unpaired comparison of the two sizes would not."""
    claim = Claim("Press et al. 2022", "a holds, b degrades", "text/stdlib_lm", [["alibi"], ["rope"]],
                  measure="degradation")
    levels = [8.0, 9.5, 8.7, 10.2, 9.1]
    rows = [row("floor", d, r, 11.0, task="text/stdlib_lm", variant="trigram", metric="ppl", higher=False, data_seed=d)
            for d in (0, 1) for r in (1.0, 8.0)]
    for kind, worse in (("alibi", 0.1), ("rope", 0.5)):
        rows += [row(kind, s, 1.0, levels[s] - 2, task="text/stdlib_lm", metric="ppl", higher=False) for s in range(5)]
        rows += [row(kind, s, 8.0, levels[s] - 2 + worse + 0.01 * s, task="text/stdlib_lm", metric="ppl", higher=False)
                 for s in range(5)]
    assert verdict(claim, rows).label == "agrees"


def test_not_tested_when_not_learned_or_protocol_differs():
    claim = Claim("Someone 2020", "a beats b", "text/copy", [["rope"], ["sinusoidal"]])
    rows = runs({"rope": 0.5, "sinusoidal": 0.4, "floor: chance": 0.0})
    assert verdict(claim, rows).label == "not tested" and "not learned at this budget" in verdict(claim, rows).detail
    differs = Claim("Someone 2020", "a beats b", "text/copy", [["rope"], ["sinusoidal"]], not_tested="blockwise")
    ok = runs({"rope": 0.99, "sinusoidal": 0.98, "floor: chance": 0.0})
    assert verdict(differs, ok).label == "not tested" and verdict(differs, ok).detail == "blockwise"
    one_side = runs({"rope": 0.99, "sinusoidal": 0.5, "floor: chance": 0.0})
    v = verdict(claim, one_side)
    assert v.label == "not tested" and "sinusoidal" in v.detail, "a tier with no kind that counts"


@pytest.mark.parametrize("good,bad,label", [(0.01, 0.5, "agrees"), (0.2, 0.5, "disagrees"), (0.03, 0.5, "inconclusive"),
                                            (0.01, 0.02, "disagrees")])
def test_threshold_claims(good, bad, label):
    claim = next(c for c in CLAIMS if c.task == "coord/quadrant")
    rows = runs({"conv+coord": good, "conv": bad, "floor: mean-predictor": 0.9}, task="coord/quadrant",
                metric="coord_err", higher=False, spread=0.002)
    rows = [r.__class__(**{**r.__dict__, "test_size": "quadrant", "train_size": "quadrant"}) for r in rows]
    assert verdict(claim, rows).label == label


def test_protocol_claims_name_their_papers_protocols():
    by = {(c.source, c.task): c for c in CLAIMS}
    assert by[("Heo et al. 2024", "image/shapes-zoom")].tiers[0] == ["rope-mixed"], "RoPE-Mixed > RoPE-Axial checked"
    assert TASKS["image/shapes-zoom"].kind_options["rope"].options((8, 8), (16, 16)) == {"theta": 100.0}
    assert TASKS["text/stdlib_lm"].kind_options["fire"].options((64,), (512,))["init_L"] < 64
    assert TASKS["text/copy"].kind_options["cope"].options((16,), (32,))["max_pos"] >= 32
    assert by[("Golovneva et al. 2024", "text/copy")].not_tested and by[("Sun et al. 2023", "text/stdlib_lm")].not_tested
    assert TASKS["text/copy"].metric == "seq_acc" and TASKS["text/stdlib_lm"].bar.floor == "trigram"
    canvas = by[("Heo et al. 2024", "image/shapes")]  # not the paper's protocol: judged and reported beside zoom
    assert not canvas.not_tested and "beside the zoom verdict" in canvas.note
    assert by[("Heo et al. 2024, centred coordinates", "image/shapes-zoom")].tiers[1] == ["rope@centered"]
    assert TASKS["text/stdlib_lm"].kind_options["relative"].options((64,), (512,)) == {"max_distance": 64,
                                                                                       "num_buckets": 32}
    assert by[("Press et al. 2022", "text/stdlib_lm")].keeps == ["alibi", "relative"]
    video = [c for c in CLAIMS if c.source == "Wei et al. 2025"]
    assert {c.task for c in video} == {"video/trajectory-long"} and {c.measure for c in video} == {"degradation"}
    assert by[("Heo et al. 2024", "image/shapes-zoom")].tiers[2] == ["learned"], "the paper's APE: interpolated"
    beyond = [c for c in CLAIMS if not c.not_tested and c.measure != "training" and c.tiers]
    assert all(c.measure == "degradation" for c in beyond), "generalization judged on the worsening"
    assert by[("Schenck et al. 2025", "image/digits-zoom")].measure == "training"


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


def test_many_encodings_are_drawn_in_panels_by_how_they_act():
    import matplotlib.pyplot as plt
    from matplotlib.colors import to_hex

    from ndpe import catalog
    from train.plots import BASELINE, FAINT, GROUPS, ONE_PANEL_MAX, group_of

    kinds = ["none", "learned", "sinusoidal", "rope", "xpos", "alibi", "relative", "fire", "cpb"]
    assert len(kinds) > ONE_PANEL_MAX
    rows = runs({**{k: 0.5 for k in kinds}, "floor: chance": 0.1}, ratios=(1.0, 2.0), n=2)
    rows += [row("rope", s, 2.0, 0.4, variant="yarn") for s in range(2)]
    fig = task_figure("t", aggregate(rows)["text/copy"], [(1.0, "16L"), (2.0, "32L")], "acc")
    panels = [ax for ax in fig.axes if ax.get_visible() and ax.axison]
    assert [ax.get_title() for ax in panels] == [g for g in GROUPS if any(group_of(k) == g for k in kinds[1:])]
    for ax in panels:
        legend = [t.get_text() for t in ax.get_legend().get_texts()]
        group = [k for k in [*kinds[1:], "rope (yarn)"] if group_of(k) == ax.get_title()]
        assert [x for x in legend if not x.startswith("floor")] == [BASELINE, *sorted(group)]  # the group, in colour
        for label, colour in legend_colours(ax).items():
            if not label.startswith("floor"):
                assert colour == catalog.colour(label.split(" (")[0]), label  # each kind its catalog colour
        faint = [ln for ln in ax.lines if to_hex(ln.get_color()) == FAINT["color"]]
        assert len(faint) == len(kinds) + 1 - 1 - len(group)  # every other encoding, faint, as context
    assert panels[0].get_shared_y_axes().joined(panels[0], panels[-1])  # one y scale: panels compare
    plt.close(fig)


def legend_colours(ax) -> dict:
    """Label -> "#rrggbb" of each entry of ``ax``'s legend."""
    from matplotlib.colors import to_hex

    handles, labels = ax.get_legend_handles_labels()
    lines = [h.lines[0] if hasattr(h, "lines") else h for h in handles]
    return {label: to_hex(ln.get_color() if hasattr(ln, "get_color") else ln.get_edgecolor())
            for ln, label in zip(lines, labels)}


def styles(fig):
    handles, labels = fig.axes[0].get_legend_handles_labels()
    out = {}
    for h, label in zip(handles, labels):
        line = h.lines[0] if hasattr(h, "lines") else h
        out[label] = (str(line.get_color() if hasattr(line, "get_color") else line.get_edgecolor()),
                      str(line.get_linestyle()))
    return out


@pytest.mark.parametrize("metric,scale", [("ppl", "log"), ("acc", "linear")])
def test_log_scale_for_perplexity(metric, scale):
    import matplotlib.pyplot as plt

    fig = task_figure("t", aggregate(runs({"rope": 5.0}))["text/copy"], [(1.0, "64C")], metric)
    assert fig.axes[0].get_yscale() == scale
    plt.close(fig)


@pytest.mark.parametrize("metric,values,low,high", [("acc", [0.9, 1.0, 0.95], 0.826, 1.0),
                                                    ("coord_err", [0.0, 0.1, 0.05], 0.0, 0.174)])
def test_error_bars_are_t_intervals_clipped_to_the_metric_range(metric, values, low, high):
    import matplotlib.pyplot as plt

    agg_task = {"rope": {1.0: Cell({(s, 0): v for s, v in enumerate(values)})}}
    fig = task_figure("t", agg_task, [(1.0, "16L")], metric)
    (segment,) = fig.axes[0].containers[0].lines[2][0].get_segments()
    assert sorted(y for _, y in segment) == pytest.approx([low, high], abs=1e-3)
    plt.close(fig)


def test_write_report(tmp_path):
    rows = runs({"none": [0.97, 0.5, 0.3], "rope": [0.99, 0.3, 0.1], "alibi": [0.99, 0.5, 0.4],
                 "floor: chance": [0.0] * 3, "floor: order-blind": [0.1] * 3}, ratios=(1.0, 1.5, 2.0))
    append_rows(tmp_path / "results.csv", rows)
    text = write_report(tmp_path, "# test run").read_text()
    assert "### text/copy" in text and "| floor: order-blind |" in text and "retention ×2" in text
    assert "**learned at this budget**" in text and "kinds that count: alibi, none, rope" in text
    assert (tmp_path / "text_copy.png").stat().st_size > 1000
    assert "Kazemnejad et al. 2023" in text and "Golovneva et al. 2024" in text
    per_task = text.split("### text/copy")[1]  # the task's table (the summary's rows are one cell a task)
    rope = next(line for line in per_task.splitlines() if line.startswith("| rope |")).split(" | ")
    assert "↓" not in rope[1] and rope[2].endswith("↓") and rope[3].endswith("↓")  # under NoPE beyond ×1 only
    for kind in ("none", "alibi"):  # NoPE itself; a kind tied with NoPE at ×1.5 and above it at ×2
        assert "↓" not in next(line for line in per_task.splitlines() if line.startswith(f"| {kind} "))


def test_coord_tables_give_the_runs_under_one_pixel(tmp_path):
    """coord/quadrant's bar has no value per run (below the mean predictor); its table gives the runs at Liu et al.'s
    one-pixel threshold (the claim's), as the bimodal runs call for: 3 of 5 under it, none of plain conv's."""
    values = {"conv+coord": [0.01, 0.02, 0.03, 0.3, 0.4], "conv": [0.2, 0.21, 0.22, 0.23, 0.24]}
    rows = [row(kind, s, 1.0, v, task="coord/quadrant", metric="coord_err", higher=False)
            for kind, vs in values.items() for s, v in enumerate(vs)]
    rows += [row("floor", d, 1.0, 0.65, task="coord/quadrant", variant="mean-predictor", metric="coord_err",
                 higher=False, data_seed=d) for d in (0, 1)]
    append_rows(tmp_path / "results.csv", rows)
    table = write_report(tmp_path, "# t").read_text().split("### coord/quadrant")[1]
    assert "runs at the claim's 0.0317 ×1 |" in table
    line = {r.split(" | ")[0].strip("| ✗"): r for r in table.splitlines() if r.startswith("| conv")}
    assert "| 3/5 [" in line["conv+coord"] and "| 0/5 [" in line["conv"]


def test_a_claim_whose_tier_has_no_counting_kind_is_not_tested():
    """Heo's tiers [[rope-mixed], [rope], [learned, sinusoidal]]: if rope-mixed does not count, "rope > learned"
    alone must not make "RoPE-Mixed > RoPE-Axial" agree."""
    claim = Claim("Someone 2020", "a > b > c", "text/copy", [["alibi"], ["rope"], ["sinusoidal"]])
    rows = runs({"alibi": [0.5, 0.5], "rope": [0.99, 0.9], "sinusoidal": [0.99, 0.2], "floor: chance": [0.0, 0.0]},
                ratios=(1.0, 2.0))
    v = verdict(claim, rows)
    assert v.label == "agrees in part" and "Halves dropped: alibi vs rope (alibi does not count" in v.detail
    from train.claims import claim_line
    from train.report import task_info as info_of
    assert "**agrees in part (alibi vs rope (alibi does not count" in claim_line(claim, aggregate(rows), info_of(rows))


def lm_rows(at8: dict, at1: float) -> list:
    """5 runs per kind on the LM at 1x (about ``at1``) and 8x (``at8[kind]``, rope's runs spread), trigram floors."""
    rows = [row("floor", d, r, 6.5, task="text/stdlib_lm", variant="trigram", metric="ppl", higher=False, data_seed=d)
            for d in (0, 1) for r in (1.0, 8.0)]
    for kind, value in at8.items():
        rows += [row(kind, s, 1.0, at1 + 0.01 * s, task="text/stdlib_lm", metric="ppl", higher=False) for s in range(5)]
        rows += [row(kind, s, 8.0, value + 0.3 * s * (kind == "rope"), task="text/stdlib_lm", metric="ppl",
                     higher=False) for s in range(5)]
    return rows


def test_a_kind_said_to_keep_its_quality_must_keep_it_not_only_beat_others():
    """Press et al.'s T5 bias: better than RoPE at 8x (RoPE collapses harder) yet far below its floor there. The
    ordering half agrees, the keeps half disagrees: the claim disagrees."""
    claim = Claim("Press et al. 2022", "a keeps quality where b degrades", "text/stdlib_lm", [["relative"], ["rope"]],
                  measure="degradation", keeps=["relative"])
    v = verdict(claim, lm_rows({"relative": 20.0, "rope": 60.0}, at1=4.0))
    assert v.label == "disagrees" and "relative vs rope (paired, 5 runs)" in v.detail and "(Holm p=" in v.detail
    assert "relative keeps its quality: retention at ×8 above 0" in v.detail and "disagrees)" in v.detail


def test_a_keeps_half_tested_on_another_task_is_dropped_and_named_not_left_out():
    """FIRE at a 64-character context: its ordering half agrees, its keeps half is judged on the 256-character LM
    (``keeps_untested``). The claim agrees only in part, names the half, and the untested half joins no Holm family:
    the ordering half's p and detectable effect are those of the claim without it."""
    rows = lm_rows({"fire": 9.0, "rope": 45.0}, at1=3.6)
    kw = {"measure": "degradation", "keeps": ["fire"]}
    elsewhere = verdict(Claim("Li et al. 2024", "f", "text/stdlib_lm", [["fire"], ["rope"]], **kw,
                              keeps_untested="not at this scale: judged on text/stdlib_lm-256"), rows)
    assert elsewhere.label == "agrees in part"
    assert elsewhere.dropped == ("fire keeps its quality (not at this scale: judged on text/stdlib_lm-256)",)
    alone = verdict(Claim("Li et al. 2024", "f", "text/stdlib_lm", [["fire"], ["rope"]], measure="degradation"), rows)
    assert alone.label == "agrees" and [h.name for h in elsewhere.halves] == [h.name for h in alone.halves]
    assert [(h.p, h.detectable) for h in elsewhere.halves] == [(h.p, h.detectable) for h in alone.halves]
    here = verdict(Claim("Li et al. 2024", "f", "text/stdlib_lm", [["fire"], ["rope"]], **kw), rows)
    assert len(here.halves) == 2 and "fire keeps its quality: retention at ×8 above 0" in here.halves[1].name


def test_kinds_configured_but_not_run_are_not_run():
    claim = Claim("Someone 2020", "a beats b", "text/copy", [["rope"], ["cope"]])
    rows = runs({"rope": 0.99, "floor: chance": 0.0})
    v = verdict(claim, rows)
    assert v.label == "not run" and "cope" in v.detail


def test_a_training_size_claim_compares_at_the_training_size():
    claim = Claim("Someone 2020", "a beats b in distribution", "text/copy", [["rope"], ["sinusoidal"]], measure="training")
    rows = runs({"rope": [0.99, 0.1], "sinusoidal": [0.96, 0.9], "floor: chance": [0.0, 0.0]}, ratios=(1.0, 2.0))
    assert verdict(claim, rows).label == "agrees"  # at x2 it would disagree


def test_retention_only_for_kinds_that_count():
    rows = runs({"rope": [0.99, 0.6], "none": [0.3, 0.3], "floor: order-blind": [0.2, 0.2]}, ratios=(1.0, 2.0))
    agg = aggregate(rows)["text/copy"]
    check = competence("text/copy", agg, higher=True)
    assert retention(agg, "none", 2.0, check) is None and retention(agg, "rope", 2.0, check) is not None


def test_competence_on_the_validation_split_where_the_test_split_is_held_out():
    """coord/quadrant: the bar is judged on the training quadrants (val); the held-out quadrant is the claim."""
    from train.report import in_distribution

    def coord(kind, seed, value, split, variant="-"):
        r = row(kind, seed, 1.0, value, task="coord/quadrant", metric="coord_err", higher=False, variant=variant)
        return r.__class__(**{**r.__dict__, "split": split, "test_size": "quadrant", "train_size": "quadrant"})

    rows = [coord("floor", d, 0.9, split, "mean-predictor") for d in (0, 1) for split in ("test", "val")]
    rows += [coord("conv+coord", s, 0.001, "val") for s in range(5)] + [coord("conv+coord", s, 1.2, "test") for s in range(5)]
    in_dist = in_distribution(rows)
    assert competence("coord/quadrant", in_dist["coord/quadrant"], higher=False).learned, "fits its training data"
    assert not competence("coord/quadrant", aggregate(rows)["coord/quadrant"], higher=False).learned
    claim = next(c for c in CLAIMS if c.task == "coord/quadrant")
    assert check_claim(claim, aggregate(rows), task_info(rows), in_dist).label == "disagrees"


def test_identical_scores_say_so_instead_of_a_detectable_effect():
    claim = Claim("Someone 2020", "a beats b", "text/copy", [["rope"], ["sinusoidal"]])
    rows = runs({"rope": [0.99, 0.0], "sinusoidal": [0.99, 0.0], "floor: chance": [0.0, 0.0]}, ratios=(1.0, 2.0),
                spread=0.0)
    v = verdict(claim, rows)
    assert v.label == "inconclusive" and "scores the same in every run" in v.detail


def test_grid_edge_is_flagged_only_when_it_wins():
    from train.report import on_edge

    vals = {(0.001, 0.05): 0.9, (0.002, 0.05): 0.95, (0.004, 0.05): 0.97}
    assert on_edge(vals, (0.004, 0.05), higher=True) and not on_edge(vals, (0.002, 0.05), higher=True)
    tied = {(0.001, 0.05): 1.0, (0.002, 0.05): 1.0, (0.004, 0.05): 1.0}
    assert not on_edge(tied, (0.001, 0.05), higher=True), "a tie at the edge says nothing about the grid"
    assert on_edge({(0.001, 0.0): 5.0, (0.002, 0.0): 6.0}, (0.001, 0.0), higher=False)


def test_two_decimals_never_print_a_negative_zero():
    from train.report import two

    assert (two(-0.0001), two(-0.004), two(-0.5), two(0.456)) == ("0.00", "0.00", "-0.50", "0.46")


def test_image_claims_are_shown_under_zoom_and_canvas_side_by_side():
    from train.claims import zoom_and_canvas

    claims = [Claim("Someone 2020", "a beats b", task, [["rope"], ["sinusoidal"]])
              for task in ("image/shapes-zoom", "image/shapes")]
    rows = []
    for task, b in (("image/shapes-zoom", 0.5), ("image/shapes", 0.99)):
        rows += runs({"rope": [0.99, 0.95], "sinusoidal": [0.99, b], "floor: chance": [0.25, 0.25]}, task=task,
                     ratios=(1.0, 2.0), metric="acc")
    noise = [0.004, -0.004, 0.006, -0.006, 0.0]
    rows = [row(r.kind, r.seed, 2.0, r.value + noise[r.seed], task=r.task, metric="acc")
            if r.kind == "sinusoidal" and r.size_ratio == 2.0 else r for r in rows]
    lines = zoom_and_canvas(claims, aggregate(rows), task_info(rows))
    assert "| claim | image/shapes-zoom (zoom) | image/shapes (canvas) |" in lines
    assert "| Someone 2020: a beats b | agrees | disagrees |" in lines


def test_bimodal_runs_are_compared_by_success_rates_and_shown_as_a_success_rate(tmp_path):
    """copy at 2L: relative succeeds in some runs and fails in others (bimodal); the pair is judged on the runs at
    the bar (5 of 8 against 0 of 8: Fisher's exact p = 0.026), and the table shows runs at the bar with an exact
    interval."""
    claim = Claim("Someone 2020", "a beats b", "text/copy", [["relative"], ["rope"]])
    at2 = {"relative": [0.97, 0.2, 0.96, 0.25, 0.98, 0.97, 0.3, 0.99], "rope": [0.1, 0.12, 0.05, 0.2, 0.08, 0.1, 0.11, 0.09]}
    rows = [row("floor", d, r, 0.0, variant="chance", data_seed=d) for d in (0, 1) for r in (1.0, 2.0)]
    for kind, values in at2.items():
        rows += [row(kind, s, 1.0, 0.99) for s in range(8)] + [row(kind, s, 2.0, v) for s, v in enumerate(values)]
    v = verdict(claim, rows)
    assert "relative vs rope (success rates at ×2, bimodal runs): 5/8 vs 0/8 runs at the bar (Fisher exact)" in v.detail
    assert v.label == "agrees" and "Holm p=0.026" in v.detail
    unimodal = [r if r.kind != "relative" or r.size_ratio != 2.0 else row("relative", r.seed, 2.0, 0.96 + 0.001 * r.seed)
                for r in rows]
    assert "relative vs rope (paired, 8 runs)" in verdict(claim, unimodal).detail
    append_rows(tmp_path / "results.csv", rows)
    text = write_report(tmp_path, "# test").read_text()
    assert "runs at the bar ×1 → ×2" in text
    assert "| relative | " in text and "8/8 [0.63, 1.00] → 5/8 [0.24, 0.91]" in text


def test_the_search_winners_are_compared_with_the_reported_runs(tmp_path):
    """Winners above the reported mean in every (task, kind): the sign test says so (a best-of-N would show it)."""
    from train.results import SEARCH

    rows = [row("floor", d, 1.0, 0.0, variant="chance", data_seed=d) for d in (0, 1)]
    for kind in ("rope", "alibi", "none", "learned", "relative", "sinusoidal"):
        rows += [row(kind, s, 1.0, 0.96) for s in range(3)]
        search = row(kind, 1000, 1.0, 0.99, variant=SEARCH)
        rows.append(search.__class__(**{**search.__dict__, "split": "val", "lr": 0.002}))
    rows = [r.__class__(**{**r.__dict__, "lr": 0.002}) if r.kind != "floor" else r for r in rows]
    append_rows(tmp_path / "results.csv", rows)
    text = write_report(tmp_path, "# test").read_text()
    assert "in 6 of 6 (task, kind) pairs (ties left out) the search's winning run scores above" in text
    assert "sign test p = 0.031" in text


def test_runs_above_the_order_blind_ceiling_by_an_exact_binomial_test(tmp_path):
    """video: the bar is the order-blind ceiling (no per-run value); a run succeeds when its accuracy on the test
    set's items beats the ceiling of its own data seed by a one-sided exact binomial test (5 %)."""
    task, acc = "video/trajectory", {"metric": "acc"}
    rows = [row("floor", d, r, f, task=task, variant="order-blind", data_seed=d, **acc)
            for d, f in ((0, 0.5), (1, 0.7)) for r in (1.0, 2.0)]
    # seed: (data seed, accuracy at x1, at x2); 0.52 on 512 items is chance (p = 0.19), 0.65 beats 0.5, not 0.7
    runs = {0: (0, 1.0, 0.6), 1: (1, 1.0, 0.65), 2: (0, 0.52, 0.52), 3: (1, 0.9, 0.9), 4: (0, 0.65, 0.5)}
    rows += [row("rope", s, r, v, task=task, data_seed=d, **acc) for s, (d, *vs) in runs.items()
             for r, v in zip((1.0, 2.0), vs)]
    append_rows(tmp_path / "results.csv", rows)
    text = write_report(tmp_path, "# t", test_items=512).read_text()
    assert "runs above the ceiling ×1 → ×2" in text and "on the 512 items of a test set" in text
    line = [x for x in text.splitlines() if x.startswith("| rope |")][-1]  # the task's table (after the summary)
    assert "| 4/5 [0.28, 0.99] → 2/5 [0.05, 0.85] |" in line
    assert "runs above the ceiling" not in write_report(tmp_path, "# t").read_text()  # items unknown: not said


def test_above_rate_refuses_what_is_not_an_accuracy():
    from train.stats import above_rate

    with pytest.raises(ValueError, match="an accuracy and a rate in \\[0, 1\\]"):
        above_rate(1.5, 0.5, 512)


def worsening_rows(gap_at_1: float, gap_at_2: float, fail_run: bool = False):
    """rope and sinusoidal on copy over 6 runs at ×1 and ×2, rope ahead by ``gap_at_1`` and ``gap_at_2``."""
    noise = [0.004, -0.004, 0.006, -0.006, 0.0, 0.002]
    rows = [row("floor", d, r, 0.0, variant="chance", data_seed=d) for d in (0, 1) for r in (1.0, 2.0)]
    for s in range(6):
        rows += [row("sinusoidal", s, 1.0, 0.97 + noise[s]), row("sinusoidal", s, 2.0, 0.5 + noise[5 - s])]
        at1 = 0.9 if fail_run and s == 5 else 0.97 + gap_at_1 + noise[(s + 2) % 6] / 2  # 0.9: under the bar, not far
        rows += [row("rope", s, 1.0, at1), row("rope", s, 2.0, 0.5 + gap_at_2 + noise[s] / 2)]
    return rows


def test_a_gap_already_there_at_the_training_size_is_not_generalization():
    """rope leads by 0.02 at ×1 and by the same 0.02 at ×2: at the largest size it 'wins', but its worsening is the
    same as sinusoidal's: inconclusive on the primary measure, the gap at ×2 shown as secondary, not judged."""
    claim = Claim("Someone 2020", "a beats b", "text/copy", [["rope"], ["sinusoidal"]], measure="degradation")
    v = verdict(claim, worsening_rows(0.02, 0.02))
    assert v.label == "inconclusive" and "Secondary, not judged: seq_acc at ×2" in v.detail
    assert verdict(Claim("Someone 2020", "a beats b", "text/copy", [["rope"], ["sinusoidal"]]),
                   worsening_rows(0.02, 0.02)).label == "agrees"  # the old measure read the gap as the claim
    assert verdict(claim, worsening_rows(0.0, 0.1)).label == "agrees"


def test_runs_below_the_bar_at_the_training_size_are_left_out_of_the_worsening():
    """One rope run misses the bar at ×1 (0.9 < 0.95; rope's mean still passes): its smaller worsening would favour
    rope; only the 5 runs at the bar are paired."""
    claim = Claim("Someone 2020", "a beats b", "text/copy", [["rope"], ["sinusoidal"]], measure="degradation")
    v = verdict(claim, worsening_rows(0.0, 0.0, fail_run=True))
    assert "rope vs sinusoidal (paired, 5 runs)" in v.detail


@pytest.mark.parametrize("paper,label", [(0.001, "underpowered"), (0.5, "inconclusive"), (None, "inconclusive")])
def test_a_half_that_cannot_see_the_papers_effect_is_underpowered(paper, label):
    claim = Claim("Someone 2020", "a beats b", "text/copy", [["rope"], ["sinusoidal"]], measure="degradation",
                  paper_effect={} if paper is None else {"rope vs sinusoidal": paper}, paper_source="Table 1")
    v = verdict(claim, worsening_rows(0.0, 0.0))
    assert v.label == label
    assert ("the paper's effect: not stated here" in v.detail) is (paper is None)
    # no worsening difference, measured tightly: an effect of the paper's 0.5 would have been seen
    assert ("the paper's effect above its 95 % interval" in v.detail) is (paper == 0.5)


def test_coordconv_on_the_held_out_quadrant_is_judged_on_success_rates():
    """7 of 10 CoordConv runs under one pixel, the others far over (bimodal); plain conv 0 of 10: the comparative
    half is Fisher's exact test (p = 0.0031 two-sided), CoordConv's own half its rate against a coin."""
    claim = next(c for c in CLAIMS if c.task == "coord/quadrant")
    coord = [0.01] * 7 + [0.4, 0.5, 0.45]
    rows = [row("floor", d, 1.0, 0.5, task="coord/quadrant", variant="mean-predictor", metric="coord_err", higher=False,
                data_seed=d) for d in (0, 1)]
    rows += [row("conv+coord", s, 1.0, v, task="coord/quadrant", metric="coord_err", higher=False)
             for s, v in enumerate(coord)]
    rows += [row("conv", s, 1.0, 0.3 + 0.01 * s, task="coord/quadrant", metric="coord_err", higher=False)
             for s in range(10)]
    v = verdict(claim, rows)
    assert "conv+coord vs conv: runs under 0.0317: 7/10 vs 0/10 runs (Fisher exact)" in v.detail
    assert "7/10 runs under 0.0317 (exact binomial test against 1/2)" in v.detail


def test_the_halves_table_shows_each_half_as_the_claim_line_judges_it():
    """Two tested halves with different labels (rope vs sinusoidal inconclusive, its interval excluding the paper's
    0.5; rope keeping its quality agrees): each row holds what the claim line says of that half, Holm's p and label
    included; a half whose kind misses the bar (alibi under copy's 0.95) and a claim not run say why."""
    claim = Claim("Someone 2020", "a beats b", "text/copy", [["rope"], ["sinusoidal", "alibi"]], keeps=["rope"],
                  measure="degradation", paper_effect={"rope vs sinusoidal": 0.5}, paper_source="Table 1")
    absent = Claim("Nobody | 2021", "c beats d", "text/copy", [["cope"], ["rope"]])  # a | in a cell is escaped
    rows = worsening_rows(0.0, 0.0) + [row("alibi", s, r, 0.6) for s in range(6) for r in (1.0, 2.0)]
    agg, info = aggregate(rows), task_info(rows)
    v = check_claim(claim, agg, info)
    table = halves_table([claim, absent], agg, info)
    said = (r": (?P<est>[^(]+) \(Holm p=(?P<p>[^,]+), detectable (?P<mde>[^ ,]+)(?: vs the paper's (?P<paper>[^ ,]+))?"
            r"(?:, (?P<note>the paper's effect above its 95 % interval))?, (?P<label>\w+)\)")
    names = ["rope vs sinusoidal (paired, 6 runs)", "rope keeps its quality: retention at ×2 above 0"]
    halves = {name: re.search(re.escape(name) + said, v.detail) for name in names}  # what the claim line says
    assert {m["label"] for m in halves.values()} == {"inconclusive", "agrees"} and len(v.halves) == 2
    for name, m in halves.items():
        measure = "retention at ×2" if "keeps" in name else "worsening ×1→×2"
        label = m["label"] + (f" ({m['note']})" if m["note"] else "")
        assert (f"| Someone 2020 | text/copy | {measure} | {name} | {m['est']} | {m['p']} | {m['mde']} | "
                f"{m['paper'] or '–'} | {label} |") in table
    assert halves["rope vs sinusoidal (paired, 6 runs)"]["note"]
    assert ("| Someone 2020 | text/copy | worsening ×1→×2 | rope vs alibi (alibi does not count: below the bar or a "
            "floor) | – | – | – | – | not tested |") in table
    assert "| Nobody \\| 2021 | text/copy | – | not in this run: cope | – | – | – | – | not run |" in table


def test_claims_without_a_compiled_paper_effect_say_so():
    """Every claim source listed as not compiled names a claim that has no paper effect (one compiled later must
    leave the list), and its claim line says why instead of "not stated"."""
    from train.papers import NOT_COMPILED
    from train.protocol import CLAIMS

    by_source = {c.source: c for c in CLAIMS}
    assert set(NOT_COMPILED) <= set(by_source)
    assert all(not c.paper_effect for c in CLAIMS if c.source in NOT_COMPILED)
    claim = Claim("Schenck et al. 2025", "string beats rope", "text/copy", [["rope"], ["sinusoidal"]],
                  measure="training")
    v = verdict(claim, runs({"rope": 0.99, "sinusoidal": 0.96, "floor: chance": 0.0}))
    assert "the paper's effect: not compiled here" in v.detail
