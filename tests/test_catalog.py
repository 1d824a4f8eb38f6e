"""What the project reads from each kind's class: docs/reference.md's kinds table, colours and markers, the benchmark's
options for every kind on every task (``Encoding.task_options``) and ``kinds: all``."""
from __future__ import annotations

from pathlib import Path

import pytest
import torch

import ndpe
from ndpe import catalog
from train import bench
from train.data.text import AdditionTask
from train.protocol import addition_digits

ROOT = Path(__file__).resolve().parents[1]
HEADER = "| kind | dims | acts by | what it is |"


def test_the_readme_kinds_table_is_ndpe_kinds_markdown(capsys):
    from ndpe.cli import main

    assert main(["kinds", "--markdown"]) == 0
    generated = capsys.readouterr().out.strip()
    readme = (ROOT / "docs" / "reference.md").read_text()
    start = readme.index(HEADER)
    table = readme[start:readme.index("\n\n", start)]
    assert table == generated, "docs/reference.md's kinds table is stale: replace it with the output of `ndpe kinds --markdown`"
    assert generated.count("\n| `") == len(ndpe.available())


@pytest.mark.parametrize("kind,acts", [("none", "—"), ("sinusoidal", "add"), ("coord", "concat"),
                                       ("rope", "rotate q, k"), ("xpos", "rotate q, k apart"), ("alibi", "bias"),
                                       ("cope", "logits from q, k"), ("complex", "transforms tokens")])
def test_how_a_kind_acts_is_read_off_its_output(kind, acts):
    assert catalog.acts_by(kind) == acts


def test_every_kind_declares_a_colour_and_marker_of_its_own():
    styles = [(catalog.colour(k), catalog.marker(k)) for k in ndpe.available()]
    assert len(set(styles)) == len(styles)
    assert len({c for c, _ in styles}) == len(styles)  # colours alone tell the library's kinds apart
    assert (catalog.colour("none"), catalog.colour("rope")) == ("#000000", "#d62728")


def test_a_colour_that_is_no_hex_triplet_is_refused():
    with pytest.raises(ValueError, match="'#rrggbb'"):
        catalog._rgb("red")


TASKS = [name for name, task in bench.TASKS.items() if not task.conv]
EVERY = bench.load_bench_config(None, ["kinds=all"])


@pytest.mark.parametrize("task_name", TASKS)
@pytest.mark.parametrize("kind", sorted(ndpe.available()))
def test_every_kind_builds_from_its_options_for_every_task(kind, task_name):
    """pe_config's options (the kind's task_options) build the encoding, which encodes the training and the
    largest grid; a kind that does not apply to the task (dims, causal only) is not in ``kinds: all``'s list."""
    task = bench.TASKS[task_name]
    if kind not in bench.kinds_for(EVERY, task_name):
        cls = ndpe.registry.kind_class(kind)
        assert task.dims not in cls.supported_dims or (cls.causal_only and not task.model_opts.get("causal"))
        return
    train_grid, max_grid = (4,) * task.dims, (8,) * task.dims
    config = bench.pe_config(kind, task, train_grid, max_grid)
    assert config["kind"] == kind and config["augment"] is None
    torch.manual_seed(0)
    heads = task.model_opts.get("heads", EVERY.heads)
    pe = ndpe.make(dims=task.dims, kind=kind, dim=EVERY.dim, heads=heads, **config["options"]).eval()
    for grid in (train_grid, max_grid):
        if task.data.get("place"):  # the model hands the encoding each token's place id, as the data gives them
            place = AdditionTask("test", length=addition_digits(grid), causal=True, place=True, size=1)[0][0][:, 1:]
            try:
                out = pe(positions=place.float())
            except ValueError as err:  # kinds that count the tokens in order (cope, dd-alibi) refuse place ids
                assert "must increase along the sequence" in str(err) and "\n" not in str(err)
                continue
        else:
            out = pe(grid)
        assert out.num_prefix == 0


def test_pe_config_passes_what_the_kind_says():
    copy, image = bench.TASKS["text/copy"], bench.TASKS["image/shapes-zoom"]
    assert bench.pe_config("learned", copy, (9,), (33,))["options"] == {"grid_shape": [33], "resize": None,
                                                                        "init_std": 1.0}
    assert bench.pe_config("learned", image, (8, 8), (16, 16))["options"] == {"grid_shape": [8, 8],
                                                                              "resize": "bicubic", "init_std": 1.0}
    assert bench.pe_config("relative", copy, (9,))["options"] == {"mode": "t5", "bidirectional": False}
    assert bench.pe_config("relative", image, (8, 8))["options"] == {}
    assert bench.pe_config("sinusoidal+cape", image, (8, 8)) == {"kind": "sinusoidal", "options": {},
                                                                 "augment": "cape"}
    with pytest.raises(ValueError, match="learned sizes its table by the task's grids"):
        bench.pe_config("learned", image, None)


def test_kinds_all_is_every_kind_and_keeps_augmented_names():
    cfg = bench.load_bench_config(bench.CONFIG_DIR / "full.yaml", [])
    assert cfg.kinds == ["all", "rope+cape", "sinusoidal+cape", "rope+nope3"]
    assert bench.expand_kinds(cfg.kinds) == [*ndpe.available(), "rope+cape", "sinusoidal+cape", "rope+nope3"]
    assert bench.expand_kinds(["rope", "all"]) == ["rope", *(k for k in ndpe.available() if k != "rope")]
    one_d = {k for k, dims in ndpe.available().items() if 1 in dims}  # all but rope-mixed
    assert set(bench.kinds_for(cfg, "text/copy")) == {*one_d, "rope+cape", "sinusoidal+cape", "rope+nope3"}
    assert "rope+nope3" not in bench.kinds_for(cfg, "image/shapes")  # a text-model option
    assert "cope" not in bench.kinds_for(cfg, "image/shapes") and "xpos" not in bench.kinds_for(cfg, "image/shapes")
    assert bench.BenchConfig().kinds == "all"
    per_task = bench.load_bench_config(None, ["kinds=[rope]", "task_kinds={text/copy: all}"])
    assert bench.kinds_for(per_task, "text/copy") == bench.kinds_for(EVERY, "text/copy")


@pytest.mark.parametrize("override,message", [("kinds=every", "kinds must be a list of kinds or 'all'"),
                                              ("kinds=[al]", "unknown kind 'al'; expected 'all' or a name")])
def test_kinds_refuses_other_words(override, message):
    with pytest.raises(bench.ConfigError, match=message):
        bench.load_bench_config(None, [override])
