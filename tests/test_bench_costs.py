"""The cost benchmarks run on the kinds they time (``benchmarks/bench_bias.py``, ``benchmarks/bench_rotations.py``), at
the smallest sizes and one repeat: every row gets its columns, and a selection that cannot give a ratio is refused."""
from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import bench_bias  # noqa: E402
import bench_rotations  # noqa: E402


def test_bias_bench_times_erpe_through_its_explicit_softmax_beside_sdpa():
    run = lambda *argv: bench_bias.main(bench_bias.get_args_parser().parse_args(  # noqa: E731
        ["--sizes", "16", "--repeats", "1", "--threads", "1", "--clock", "cpu", *argv]))
    (erpe,) = run("--kinds", "erpe")  # flex on: refused without compiling
    assert erpe["N"] == 16 and erpe["bias MB"] == 6 * 16 * 16 * 4 / 2**20  # a series of 16 tokens, its (heads, N, N)
    for column in ("build ms", "fwd ms", "sdpa ms", "sdpa+bias ms", "attend ms"):
        assert erpe[column] > 0, column
    assert erpe["flex ms"].startswith("refused") and "sdpa+build ms" not in erpe
    (alibi,) = run("--kinds", "alibi", "--no-flex")
    assert "attend ms" not in alibi and alibi["sdpa+build ms"] > 0


def test_bias_bench_takes_a_series_of_any_length_for_erpe_only():
    args = bench_bias.get_args_parser().parse_args(["--sizes", "10"])
    assert bench_bias.grid_of("erpe", 10) == (10,)
    with pytest.raises(SystemExit, match="square"):
        bench_bias.bench("alibi", 10, args)


def test_rotations_bench_times_the_additive_kinds_and_their_encoding_alone():
    argv = ["--repeats", "1", "--kinds", "rope", "tape", "abacus", "coupling", "erpe", "spherical-harmonics",
            "--cases", "1D 196"]
    rows = bench_rotations.main(bench_rotations.get_args_parser().parse_args(argv))["1D 196"]
    assert list(rows) == ["rope", "tape", "abacus", "coupling", "erpe"]  # spherical-harmonics is 2D: left out
    assert rows["rope"]["x rope"] == rows["rope"]["encoding x rope"] == 1.0
    for name, row in rows.items():
        assert 0 < row["encoding seconds"] and row["bytes"] > 0, name
    assert rows["erpe"]["bytes"] == 6 * 196 * 196 * 4  # its (heads, N, N) term


def test_rotations_bench_selects_rows_by_kind_and_refuses_what_gives_no_ratio():
    assert bench_rotations.selected(["rope", "liere", "gta"]) == ["rope", "liere (blocks of 8)", "liere (dense)", "gta"]
    with pytest.raises(SystemExit, match="start with rope"):
        bench_rotations.selected(["gta", "rope"])
    with pytest.raises(SystemExit, match="unknown"):
        bench_rotations.selected(["rope", "ropee"])


def test_place_ids_are_those_of_additions_least_significant_digit_first():
    ids = bench_rotations.place_ids(40, digits=2)[:, 0].tolist()
    assert ids[:11] == [1, 2, 0, 1, 2, 0, 1, 2, 3, 0, 1]  # 2 digits + 2 digits = 3 digits, then the next item
    assert len(ids) == 40


def test_the_timed_layer_applies_each_kind_where_it_acts():
    import torch

    import ndpe

    x, (q, k, v) = torch.randn(1, 12, 16), torch.randn(3, 1, 2, 12, 8)
    pe = ndpe.make(dims=1, kind="erpe", dim=16, heads=2, length=12)
    _, plain = bench_rotations.layer(pe, (12,), x, q, k, v)
    with torch.no_grad():
        pe.table.fill_(0.25)
    _, lifted = bench_rotations.layer(pe, (12,), x, q, k, v)
    torch.testing.assert_close(lifted - plain, 0.25 * v.sum(-2, keepdim=True).expand_as(v))  # after the softmax
    tape = ndpe.make(dims=1, kind="tape", dim=16)
    tokens, _ = bench_rotations.layer(tape, (12,), x, q, k, v, attention=False)
    torch.testing.assert_close(tokens, x + tape((12,)).add)


def test_the_timed_layer_hands_state_terms_the_tokens_and_causal_ones_the_mask():
    """dd-alibi-row (causal-only) and relative-proj read the layer's input x: each timed layer equals attention with
    the term built from x (and the causal mask for the causal-only kind)."""
    import torch
    import torch.nn.functional as F

    import ndpe

    x, (q, k, v) = torch.randn(1, 12, 16), torch.randn(3, 1, 2, 12, 8)
    for kind, causal in (("dd-alibi-row", True), ("relative-proj", False)):
        pe = ndpe.make(dims=1, kind=kind, dim=16, heads=2).eval()
        _, out = bench_rotations.layer(pe, (12,), x, q, k, v)
        with torch.no_grad():
            mask = pe((12,)).logits(q, k, x) + (ndpe.causal_mask(12) if causal else 0.0)
        torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, attn_mask=mask))
