"""Table-driven fuzz of the edges: options in the dtype they are used in, the Hugging Face glue, finished runs,
configs checked at load, archives refused in the first pass and bounded YAML.

Each row asserts one exact category: a one-line error whose words are given, or a result checked against an
oracle (the formula, Hugging Face's own rope functions, the bytes of a finished run).
"""
from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
from types import SimpleNamespace

import pytest
import torch

import ndpe
from ndpe.kinds.rope import RoPE
from ndpe.kinds.xpos import GAMMA

# -- 1. xPos: refused exactly where its scale would overflow the output dtype -----------------------------------
# (id, scale_base, center, n, past, dtype): refused exactly where the naive scale zeta_0 ** ((p - center) / scale_base)
# or its inverse is not representable in dtype
XPOS = [
    ("sb8-700-centred", 8.0, None, 700, 0, torch.float32),
    ("sb8-1200-centred", 8.0, None, 1200, 0, torch.float32),
    ("sb8-700-center0", 8.0, 0, 700, 0, torch.float32),
    ("sb8-560-center0", 8.0, 0, 560, 0, torch.float32),
    ("sb512-40000-center0", 512.0, 0, 40000, 0, torch.float32),
    ("sb512-36000-center0", 512.0, 0, 36000, 0, torch.float32),
    ("sb512-6000-fp16-centred", 512.0, None, 6000, 0, torch.float16),
    ("sb512-10000-fp16-centred", 512.0, None, 10000, 0, torch.float16),
    ("sb512-5000-fp16-center0", 512.0, 0, 5000, 0, torch.float16),
    ("sb512-40000-bf16-center0", 512.0, 0, 40000, 0, torch.bfloat16),
    ("sb512-60000-fp64-center0", 512.0, 0, 60000, 0, torch.float64),
    ("sb1e-30-16", 1e-30, None, 16, 0, torch.float32),
    ("sb1e-30-1-token", 1e-30, None, 1, 0, torch.float32),
    ("decode-past-40000", 512.0, 0, 1, 40000, torch.float32),
    ("decode-past-30000", 512.0, 0, 1, 30000, torch.float32),
    ("decode-fp16-past-4600", 512.0, 0, 2, 4600, torch.float16),
    ("center-far-right", 8.0, 5000, 100, 0, torch.float32),
]


@pytest.mark.parametrize("scale_base, center, n, past, dtype", [r[1:] for r in XPOS], ids=[r[0] for r in XPOS])
def test_xpos_refuses_exactly_where_the_scale_overflows(scale_base, center, n, past, dtype):
    pe = ndpe.make(dims=1, kind="xpos", dim=32, heads=2, scale_base=scale_base, center=center)
    p = torch.arange(past + n, dtype=torch.float64)  # every position encoded (the keys, when decoding)
    c = n // 2 if center is None else center
    s = torch.tensor(GAMMA / (1 + GAMMA), dtype=torch.float64) ** ((p - c) / scale_base)  # zeta_0 ** power, naive
    representable = all(bool(torch.isfinite(t.float().to(dtype)).all()) for t in (s, 1 / s))  # via float32, as ndpe
    if not representable:
        bound = dtype if dtype in (torch.float16, torch.bfloat16) else torch.float32
        with pytest.raises(ValueError, match=rf"xpos scale overflows {bound}: positions .* use a larger scale_base"):
            pe((n,), past=past, dtype=dtype)
        return
    out = pe((n,), past=past, dtype=dtype)
    for t in (*out.rot, *out.rot_k):
        assert t.dtype == dtype and bool(torch.isfinite(t).all())


# -- 2. options in the dtype they are used in; integer maps; pictures of inf ------------------------------------
F32_OPTIONS = [
    ("fire-init_c-1e39", "fire", {"init_c": 1e39}, r"init_c must be representable in torch\.float32 .* inf there"),
    ("fire-init_L-1e39", "fire", {"init_L": 1e39}, r"init_L must be representable in torch\.float32"),
    ("fire-init_c-1e-50", "fire", {"init_c": 1e-50}, r"init_c must be representable .* 0\.0 there"),
    ("fire-init_L-1e-46", "fire", {"init_L": 1e-46}, r"init_L must be representable .* 0\.0 there"),
    ("fire-init_c-inf", "fire", {"init_c": float("inf")}, r"init_c must be finite"),
    ("fire-init_c-nan", "fire", {"init_c": float("nan")}, r"init_c must be finite"),
    ("fire-init_c-negative", "fire", {"init_c": -1.0}, r"init_c must be > 0"),
    ("fourier-sigma-1e39", "fourier", {"sigma": 1e39}, r"sigma must be representable in torch\.float32"),
    ("fourier-sigma-1e-60", "fourier", {"sigma": 1e-60}, r"sigma must be representable"),
]


@pytest.mark.parametrize("kind, options, match", [r[1:] for r in F32_OPTIONS], ids=[r[0] for r in F32_OPTIONS])
def test_options_checked_in_float32(kind, options, match):
    with pytest.raises(ValueError, match=match):
        ndpe.make(dims=1, kind=kind, dim=16, heads=2, **options)


@pytest.mark.parametrize("kind, options", [("fire", {"init_c": 3e38}), ("fire", {"init_L": 1e-30}),
                                           ("fourier", {"sigma": 1e-30})], ids=["c-3e38", "L-1e-30", "sigma-1e-30"])
def test_options_at_the_float32_edge_are_kept_exactly(kind, options):
    pe = ndpe.make(dims=1, kind=kind, dim=16, heads=2, **options)
    (name, value), = options.items()
    if name == "init_c":
        assert float(pe.c.detach()) == pytest.approx(value, rel=1e-6)
    elif name == "init_L":
        assert float(pe.threshold.detach()) == pytest.approx(value, rel=1e-6)
    else:
        assert pe.sigma == value and bool(torch.isfinite(pe.B).all()) and bool((pe.B != 0).all())


@pytest.mark.parametrize("dtype", [torch.int64, torch.int32, torch.uint8, torch.bool])
def test_add_coords_refuses_integer_maps(dtype):
    with pytest.raises(ValueError, match=rf"AddCoords input must have a floating dtype, got {dtype}"):
        ndpe.AddCoords(2)(torch.zeros(1, 3, 4, 5, dtype=dtype))


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64])
def test_add_coords_on_float_maps_matches_linspace(dtype):
    out = ndpe.AddCoords(2)(torch.zeros(2, 3, 4, 5, dtype=dtype))
    assert out.dtype == dtype and out.shape == (2, 5, 4, 5)
    rows, cols = torch.linspace(-1, 1, 4, dtype=torch.float64), torch.linspace(-1, 1, 5, dtype=torch.float64)
    torch.testing.assert_close(out[0, 3].double(), rows[:, None].expand(4, 5).to(dtype).double())
    torch.testing.assert_close(out[0, 4].double(), cols[None, :].expand(4, 5).to(dtype).double())


class InfRope(RoPE):
    """A rope whose table holds one inf (a stand-in for any option out of its working range)."""

    def encode(self, positions, grid_shape, key_positions=None):
        out = super().encode(positions, grid_shape)
        out.rot[0][..., -1, 0] = float("inf")
        return out


def test_viz_draw_refuses_an_inf_picture_and_writes_nothing(tmp_path):
    pytest.importorskip("matplotlib")
    from ndpe.viz import draw
    from ndpe.viz.figures import NonFinite

    pe = InfRope(dims=1, dim=16, heads=1)
    with pytest.raises(NonFinite, match=r"rope_1d: the encoding's rot has inf or NaN values on grid \(8,\)"):
        draw(pe, (8,), (16,), tmp_path / "figs")
    assert not (tmp_path / "figs").exists()


def test_viz_command_fails_on_a_nan_option(tmp_path):
    pytest.importorskip("matplotlib")
    proc = subprocess.run([sys.executable, "-m", "ndpe", "viz", "--kind", "xpos", "--grid", "16", "--option",
                           "scale_base=1e-30", "--out", str(tmp_path / "figs")], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 1 and "Traceback" not in proc.stderr
    assert [line for line in proc.stderr.splitlines() if line] == [proc.stderr.strip()]
    assert "xpos scale overflows torch.float32" in proc.stderr and not (tmp_path / "figs").exists()


# -- 3. Hugging Face glue: the fallbacks Hugging Face applies, and every error names its key ---------------------
transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig  # noqa: E402
from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS  # noqa: E402

transformers.logging.set_verbosity_error()
BASE = dict(hidden_size=128, num_attention_heads=2, num_key_value_heads=2, head_dim=64, max_position_embeddings=4096)
# configs as attribute bags (older or hand-built configs); Hugging Face's LlamaConfig of the same fields is the oracle
HF_FALLBACKS = [
    ("empty-parameters-theta-attr", dict(rope_parameters={}, rope_theta=5e5)),
    ("no-parameters-theta-attr", dict(rope_theta=5e5)),
    ("none-parameters-theta-attr", dict(rope_parameters=None, rope_theta=1e6)),
    ("rope-scaling-old-name", dict(rope_scaling={"type": "linear", "factor": 2.0}, rope_theta=1e6)),
    ("yarn-without-original", dict(rope_parameters={"rope_type": "yarn", "factor": 4.0})),
    ("llama3-without-original", dict(rope_parameters={"rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0,
                                                      "high_freq_factor": 4.0})),
    ("partial-factor-attr", dict(rope_parameters={"rope_type": "default"}, partial_rotary_factor=0.5)),
    ("theta-inside-wins", dict(rope_parameters={"rope_type": "default", "rope_theta": 2e4}, rope_theta=5e5)),
    ("dynamic", dict(rope_parameters={"rope_type": "dynamic", "factor": 2.0}, rope_theta=1e4)),
]


def _hf_inv_freq(cfg) -> torch.Tensor:
    p = cfg.rope_parameters
    if p["rope_type"] == "default":
        dim = int(cfg.head_dim * p.get("partial_rotary_factor", 1.0))
        return 1.0 / p["rope_theta"] ** (torch.arange(0, dim, 2, dtype=torch.float64) / dim)
    return ROPE_INIT_FUNCTIONS[p["rope_type"]](cfg, "cpu")[0].double()


@pytest.mark.parametrize("fields", [r[1] for r in HF_FALLBACKS], ids=[r[0] for r in HF_FALLBACKS])
def test_from_hf_rope_falls_back_as_hugging_face(fields):
    bag = SimpleNamespace(**BASE, **{k: (dict(v) if isinstance(v, dict) else v) for k, v in fields.items()})
    pe = ndpe.from_hf_rope(bag)
    hf = LlamaConfig(**BASE, **{k: (dict(v) if isinstance(v, dict) else v) for k, v in fields.items()})
    torch.testing.assert_close(pe.inv_freq, _hf_inv_freq(hf), rtol=2e-6, atol=0)


def test_original_length_attribute_wins_as_in_hugging_face():
    # standardize_rope_params: a config attribute original_max_position_embeddings (Phi-3) replaces the parameter's
    bag = SimpleNamespace(**BASE, original_max_position_embeddings=1024,
                          rope_parameters={"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 2048})
    assert ndpe.from_hf_rope(bag).train_shape == (1024.0,)
    bag = SimpleNamespace(**BASE, rope_parameters={"rope_type": "longrope", "short_factor": [1.0] * 32,
                                                   "long_factor": [2.0] * 32, "original_max_position_embeddings": 1024})
    assert ndpe.from_hf_rope(bag).rope_scaling.scale == (4.0,)  # factor = max / original, as HF


HF_ERRORS = [
    ("mrope-float-section", dict(rope_parameters={"rope_type": "default", "mrope_section": [2.5, 6, 6]}),
     r"rope_parameters\['mrope_section'\] must be a list of ints .* got \[2\.5, 6, 6\]"),
    ("mrope-bool-section", dict(rope_parameters={"mrope_section": [True, 6, 6]}), r"rope_parameters\['mrope_section'\]"),
    ("mrope-string-section", dict(rope_parameters={"mrope_section": "16,24,24"}), r"rope_parameters\['mrope_section'\]"),
    ("linear-without-factor", dict(rope_parameters={"rope_type": "linear"}),
     r"rope_type 'linear' needs rope_parameters\['factor'\]"),
    ("llama3-without-low", dict(rope_parameters={"rope_type": "llama3", "factor": 8.0, "high_freq_factor": 4.0}),
     r"rope_type 'llama3' needs rope_parameters\['low_freq_factor'\]"),
    ("longrope-without-long", dict(rope_parameters={"rope_type": "longrope", "short_factor": [1.0] * 32}),
     r"rope_type 'longrope' needs rope_parameters\['long_factor'\]"),
    ("factor-string", dict(rope_parameters={"rope_type": "linear", "factor": "2"}),
     r"rope_parameters\['factor'\] must be a number, got '2'"),
    ("theta-string", dict(rope_parameters={"rope_theta": "1e4"}), r"rope_parameters\['rope_theta'\] must be a number"),
    ("beta-string", dict(rope_parameters={"rope_type": "yarn", "factor": 2.0, "beta_fast": "32"}),
     r"rope_parameters\['beta_fast'\] must be a number"),
    ("unknown-type", dict(rope_parameters={"rope_type": "su"}), r"rope_parameters\['rope_type'\] 'su' has no ndpe"),
    ("type-not-string", dict(rope_parameters={"rope_type": 3}), r"rope_parameters\['rope_type'\] 3 has no ndpe"),
    ("parameters-not-dict", dict(rope_parameters=[1, 2]), r"config\.rope_parameters must be a dict"),
    ("per-layer-type-mixed-with-flat", dict(rope_parameters={"full_attention": {"rope_type": "default"},
                                                            "rope_theta": 1e4}),
     r"rope_parameters mixes per-layer-type dicts \['full_attention'\] with flat keys \['rope_theta'\]"),
    ("partial-above-one", dict(rope_parameters={"partial_rotary_factor": 1.5}),
     r"rope_parameters\['partial_rotary_factor'\] must be in \(0, 1\]"),
    ("no-head-dim", dict(head_dim=None, hidden_size=None), r"the config needs head_dim, or hidden_size and"),
    ("dynamic-without-length", dict(max_position_embeddings=None, rope_parameters={"rope_type": "dynamic", "factor": 2.0}),
     r"rope_type 'dynamic' needs config\.max_position_embeddings"),
]


@pytest.mark.parametrize("fields, match", [r[1:] for r in HF_ERRORS], ids=[r[0] for r in HF_ERRORS])
def test_from_hf_rope_errors_name_the_key(fields, match):
    with pytest.raises((ValueError, TypeError), match=match) as err:
        ndpe.from_hf_rope(SimpleNamespace(**{**BASE, **fields}))
    assert "\n" not in str(err.value)


# -- 4. finished runs are never overwritten; configs are checked at load (exit status 2) ------------------------
from tests.test_fuzz_config import FAKE, assert_one_error_line, config_file, run_cli  # noqa: E402
from train.bench import main as bench_main  # noqa: E402
from train.config import ConfigError, load_config  # noqa: E402
from train.main import cli  # noqa: E402
from train.main import main as train_main  # noqa: E402

RUN = [*FAKE, "data.options.kind=image", "model.name=vit", "train.steps=2", "train.log_every=1"]


def _files(folder) -> dict[str, bytes]:
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


@pytest.fixture
def finished(tmp_path):
    """A finished two-step run in ``tmp_path/run`` and its files' bytes."""
    train_main(load_config(None, [*RUN, f"train.out_dir={tmp_path / 'run'}"]))
    return tmp_path / "run", _files(tmp_path / "run")


# (id, extra overrides of a second run into the same out_dir, expected message or None: it runs)
SECOND_RUN = [
    ("same-config", [], r"train\.out_dir='.*run' already holds a run \(checkpoint\.pt, log\.jsonl\): continue it"),
    ("other-width", ["model.dim=32"], r"already holds a run"),
    ("other-seed", ["train.seed=3"], r"already holds a run"),
    ("more-steps", ["train.steps=4"], r"already holds a run .* train\.overwrite=true"),
]


@pytest.mark.parametrize("extra, match", [r[1:] for r in SECOND_RUN], ids=[r[0] for r in SECOND_RUN])
def test_second_run_into_a_finished_out_dir_is_refused_and_the_first_kept(finished, capsys, extra, match):
    run, before = finished
    code, err = run_cli(cli, [*RUN, f"train.out_dir={run}", *extra], capsys)
    assert code == 2
    assert_one_error_line(code, err, match)
    assert _files(run) == before  # the first run's checkpoint, log and config, byte for byte


def test_overwrite_starts_afresh_with_a_fresh_log(finished, monkeypatch):
    import json

    import train.main as tm

    run, before = finished

    def killed(*args, **kwargs):
        raise RuntimeError("killed")

    with monkeypatch.context() as m:  # killed before its first checkpoint: nothing of the replaced run is left to mix in
        m.setattr(tm, "train_one_epoch", killed)
        with pytest.raises(RuntimeError, match="killed"):
            train_main(load_config(None, [*RUN, f"train.out_dir={run}", "train.overwrite=true"]))
    assert not (run / "checkpoint.pt").exists() and not (run / "log.jsonl").exists()
    train_main(load_config(None, [*RUN, f"train.out_dir={run}", "train.overwrite=true", "model.dim=32"]))
    records = [json.loads(line) for line in (run / "log.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records if r.get("phase") == "epoch"] == [2]  # one run's records, not two
    assert (run / "checkpoint.pt").read_bytes() != before["checkpoint.pt"]
    assert load_config(run / "config.yaml", ["data.allow_import=true"]).model.dim == 32


def test_resume_continues_a_finished_out_dir(finished):
    run, _ = finished
    out = train_main(load_config(None, [*RUN, f"train.out_dir={run}", "train.steps=3",
                                        f"train.resume={run / 'checkpoint.pt'}"]))
    assert out["step"] == 3


@pytest.mark.parametrize("extra, match", [
    (["train.steps=1"], r"is at step 2, past this run's 1 steps: resume with train\.steps >= 2"),
    (["train.steps=4", "train.overwrite=true"], r"continues a run and train\.overwrite=true replaces it"),
])
def test_resume_past_the_target_or_with_overwrite_is_refused_and_the_run_kept(finished, capsys, extra, match):
    run, before = finished
    code, err = run_cli(cli, [*RUN, f"train.out_dir={run}", f"train.resume={run / 'checkpoint.pt'}", *extra], capsys)
    assert code == 2
    assert_one_error_line(code, err, match)
    assert _files(run) == before


@pytest.mark.parametrize("leftover", ["log.jsonl", "checkpoint.pt"])
def test_any_run_file_marks_the_out_dir_occupied(tmp_path, capsys, leftover):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / leftover).write_bytes(b"x")
    code, err = run_cli(cli, [*RUN, f"train.out_dir={tmp_path / 'run'}"], capsys)
    assert_one_error_line(code, err, rf"already holds a run \({leftover}\)")
    assert (tmp_path / "run" / leftover).read_bytes() == b"x"


def test_an_empty_or_unrelated_out_dir_is_used(tmp_path):
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "notes.txt").write_text("mine")
    assert train_main(load_config(None, [*RUN, f"train.out_dir={tmp_path / 'run'}"]))["step"] == 2
    assert (tmp_path / "run" / "notes.txt").read_text() == "mine"


# config values that used to load and then fail inside train.main: now refused at load, exit status 2, one line
AT_LOAD = [
    ("pe-kind-bogus", ["model.pe.kind=bogus"], r"unknown model\.pe\.kind 'bogus'; expected one of \["),
    ("pe-kind-case", ["model.pe.kind=RoPE"], r"unknown model\.pe\.kind 'RoPE'"),
    ("pe-option-typo", ["model.pe.kind=rope", "model.pe.options.thetaa=100"],
     r"model\.pe\.options: rope has no option\(s\) \['thetaa'\]"),
    ("pe-augment-bogus", ["model.pe.kind=rope", "model.pe.augment=flip"], r"model\.pe\.augment must be null or one of"),
    ("opt-typo", ["optim.opt=sgdx"], r"unknown optim\.opt 'sgdx'"),
    ("opt-lookahead-typo", ["optim.opt=lookahead_adamx"], r"unknown optim\.opt 'lookahead_adamx'"),
    ("train-split", ["data.train_split=foo"], r"data\.train_split must be one of \['train', 'val', 'test'\]"),
    ("eval-split", ["data.eval_split=validation"], r"data\.eval_split must be one of"),
    ("pool", ["model.pool=max"], r"model\.pool must be cls or mean, got 'max'"),
    ("dataset-option-typo", ["data.name=shapes", "data.options.imagesize=8"], r"unknown data\.options \['imagesize'\]"),
    ("pe-option-value", [*FAKE, "data.options.kind=image", "model.pe.kind=rope", "model.pe.options.theta=0.5"],
     r"model: theta must be > 1\.0"),
    ("pe-option-type", [*FAKE, "data.options.kind=image", "model.pe.kind=alibi", "model.pe.options.distance=chebyshev"],
     r"model: distance must be one of \('euclidean', 'manhattan'\), got 'chebyshev'"),
    ("dataset-option-value", ["data.name=shapes", "data.options.image_size=-3"], r"data: "),
    ("file-allow-import", "data: {name: 'tests.test_train:fake', allow_import: true}\n",
     r"data\.allow_import is not read from a config file .* on the command line"),
    ("yaml-huge-int", "train: {seed: " + "9" * 100_000 + "}\n", r"an integer of 100000 characters at line 1; at most 64"),
    ("yaml-65-digit-int", "train: {seed: " + "1" * 65 + "}\n", r"an integer of 65 characters"),
    ("yaml-flat-list", "data: {options: {x: [" + ", ".join(["1"] * 20_000) + "]}}\n", r"has more than 10000 nodes"),
    ("yaml-deep-map", "data: {options: {x: " + "{a: " * 5000 + "1" + "}" * 5000 + "}}\n", r"nests too deeply|nodes"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv, match", [r[1:] for r in AT_LOAD], ids=[r[0] for r in AT_LOAD])
def test_train_config_values_refused_with_status_2(tmp_path, capsys, monkeypatch, argv, match):
    monkeypatch.delenv("NDPE_ALLOW_DATA_IMPORT", raising=False)
    argv = config_file(tmp_path, argv) if isinstance(argv, str) else argv
    code, err = run_cli(cli, [*argv, f"train.out_dir={tmp_path / 'run'}"], capsys)
    assert code == 2
    assert_one_error_line(code, err, match)
    assert not (tmp_path / "run" / "checkpoint.pt").exists()


def test_allow_import_false_in_a_file_and_true_on_the_command_line(tmp_path, monkeypatch):
    monkeypatch.delenv("NDPE_ALLOW_DATA_IMPORT", raising=False)
    (tmp_path / "c.yaml").write_text("data: {name: 'tests.test_train:fake', allow_import: false}\n")
    assert load_config(tmp_path / "c.yaml", ["data.allow_import=true"]).data.allow_import is True
    with pytest.raises(ConfigError, match="imports the module"):
        load_config(tmp_path / "c.yaml")


def test_composing_stops_at_the_node_limit(monkeypatch):
    from train import config

    composed = []
    original = config.BoundedLoader.compose_node

    def counting(self, parent, index):
        composed.append(1)
        return original(self, parent, index)

    monkeypatch.setattr(config.BoundedLoader, "compose_node", counting)
    with pytest.raises(ConfigError, match="more than 10000 nodes"):
        config.load_yaml_text("[" + ", ".join(["1"] * 200_000) + "]")
    assert len(composed) == config.MAX_YAML_NODES + 1  # not 200,001: nothing composed past the limit


def test_64_digit_integer_is_read():
    from train.config import load_yaml_text

    assert load_yaml_text("x: " + "1" * 64) == {"x": int("1" * 64)}


BENCH_AT_LOAD = [
    ("dim-zero", ["dim=0"], r"config key dim must be an int >= 1, got 0"),
    ("depth-zero", ["depth=0"], r"config key depth must be an int >= 1"),
    ("heads-not-dividing", ["heads=5"], r"dim=48 is not divisible by heads=5"),
    ("model-heads-not-dividing", ["models={text/copy: {dim: 50}}"], r"models\['text/copy'\]: dim=50 is not"),
    ("train-items-negative", ["train_items=-1"], r"config key train_items must be an int >= 0, got -1"),
    ("train-items-zero-built-in", ["train_items=0"], r"must be >= 1 for the built-in tasks"),
    ("test-items-zero-built-in", ["test_items=0"], r"must be >= 1 for the built-in tasks"),
    ("steps-zero", ["default_steps=0"], r"config key default_steps must be an int >= 1"),
    ("batch-zero", ["batch_size=0"], r"config key batch_size must be an int >= 1"),
    ("lr-zero", ["lr=0"], r"config key lr must be a finite number > 0"),
    ("lr-nan", ["lr=.nan"], r"config key lr must be a finite number > 0"),
    ("wd-negative", ["weight_decay=-0.1"], r"config key weight_decay must be a finite number >= 0"),
    ("warmup-negative", ["warmup_steps=-1"], r"config key warmup_steps must be >= 0"),
    ("device-tpu", ["device=tpu"], r"config key device must be cpu, cuda, cuda:N or auto"),
    ("kind-augment-typo", ["kinds=[rope+foo]"], r"unknown kind 'rope\+foo'; .* augmentation \+cape or \+random"),
    ("kind-double-plus", ["kinds=[rope+cape+cape]"], r"unknown kind 'rope\+cape\+cape'"),
    ("task-kind-augment-typo", ["task_kinds={image/shapes: [sinusoidal+jitter]}"], r"unknown kind 'sinusoidal\+jitter'"),
]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("argv, match", [r[1:] for r in BENCH_AT_LOAD], ids=[r[0] for r in BENCH_AT_LOAD])
def test_bench_values_refused_at_load(tmp_path, capsys, argv, match):
    code, err = run_cli(bench_main, ["--quick", *argv, f"out_root={tmp_path / 'runs'}"], capsys)
    assert code == 2
    assert_one_error_line(code, err, match)
    assert not (tmp_path / "runs").exists()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("junk", [b"\xff\xfe\x00b\x00a\x00d", b"domain,task\n\x80\x81\x82\n"], ids=["utf16", "latin"])
def test_undecodable_results_csv_is_a_named_error(tmp_path, capsys, junk):
    run = tmp_path / "runs" / "tiny"
    run.mkdir(parents=True)
    (run / "results.csv").write_bytes(junk)
    argv = ["--quick", "name=tiny", "tasks=[text/copy]", "kinds=[none]", "seeds=[0]", "workers=1",
            f"out_root={tmp_path / 'runs'}"]
    code, err = run_cli(bench_main, argv, capsys)
    assert code == 2
    assert_one_error_line(code, err, r"results\.csv is not a results CSV \(byte \d+ is not UTF-8 text\); move the file")
    assert (run / "results.csv").read_bytes() == junk


# -- 5. extraction refuses in its first pass: nothing is written on refusal ------------------------------------
from train.data.download import MAX_DEPTH, safe_extract  # noqa: E402


def _tar(path, members) -> str:
    """A .tar.gz of ``members`` ``(name, "file" | "dir")`` in order (files hold b"x")."""
    with tarfile.open(path, "w:gz") as tar:
        for name, kind in members:
            info = tarfile.TarInfo(name)
            if kind == "dir":
                info.type = tarfile.DIRTYPE
                tar.addfile(info)
            else:
                info.size = 1
                tar.addfile(info, io.BytesIO(b"x"))
    return str(path)


GOOD = [("data", "dir"), ("data/a.txt", "file"), ("data/b/c.txt", "file")]  # written first if the check came late
EXTRACT = [
    ("file-then-folder", [("data/x", "file"), ("data/x/y", "file")], r"'data/x' is a file earlier in the archive"),
    ("file-then-dir-member", [("data/x", "file"), ("data/x", "dir")], r"a folder where the archive has a file"),
    ("dir-then-file", [("data/d", "dir"), ("data/d", "file")], r"a file where the archive has a folder"),
    ("implicit-dir-then-file", [("data/e/f", "file"), ("data/e", "file")], r"a file where the archive has a folder"),
    ("same-file-twice", [("data/a.txt", "file")], r"a second member with this path"),
    ("name-256-bytes", [("data/" + "n" * 256, "file")], r"a name of 256 bytes \(at most 255"),
    ("name-128-two-byte-chars", [("data/" + "é" * 128, "file")], r"a name of 256 bytes"),
    ("nesting-2000", [("/".join(["d"] * 2000) + "/f", "file")], rf"2001 folders deep \(at most {MAX_DEPTH}\)"),
    ("nesting-65", [("/".join(["d"] * 65) + "/f", "file")], r"66 folders deep"),
    ("path-4040-bytes", [("/".join(["p" * 200] * 20) + "/" + "q" * 20, "file")], r"a path of 4040 bytes \(at most 4000\)"),
]


@pytest.mark.parametrize("bad, match", [r[1:] for r in EXTRACT], ids=[r[0] for r in EXTRACT])
def test_extraction_refuses_before_writing_anything(tmp_path, bad, match):
    archive = _tar(tmp_path / "a.tar.gz", GOOD + bad)
    with pytest.raises(ValueError, match=match):
        safe_extract(archive, tmp_path / "out")
    assert not (tmp_path / "out").exists()  # not even the target folder


def test_extraction_refuses_a_file_already_in_the_target(tmp_path):
    (tmp_path / "out" / "data").mkdir(parents=True)
    (tmp_path / "out" / "data" / "b").mkdir()
    (tmp_path / "out" / "data" / "b" / "c.txt").write_text("mine")
    with pytest.raises(ValueError, match=r"c\.txt already exists \(extract into a fresh folder\)"):
        safe_extract(_tar(tmp_path / "a.tar.gz", GOOD), tmp_path / "out")
    assert sorted(os.listdir(tmp_path / "out" / "data")) == ["b"]  # a.txt, before it in the archive, not written
    assert (tmp_path / "out" / "data" / "b" / "c.txt").read_text() == "mine"


def test_repeated_folders_and_implicit_parents_extract(tmp_path):
    members = GOOD + [("data", "dir"), ("data/b", "dir"), ("data/deep/er/f.txt", "file"), ("./data/g.txt", "file"),
                      ("/".join(["d"] * MAX_DEPTH), "file")]
    safe_extract(_tar(tmp_path / "a.tar.gz", members), tmp_path / "out")
    assert (tmp_path / "out" / "data" / "deep" / "er" / "f.txt").read_bytes() == b"x"
    assert (tmp_path / "out" / "data" / "g.txt").read_bytes() == b"x"
