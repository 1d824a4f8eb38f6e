"""Config: strict YAML loading, typed overrides, and the shipped configs all load and build."""
from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from models import build_model
from train.config import Config, ConfigError, load_config, save_config, to_dict

CONFIGS = sorted(Path(__file__).parent.parent.glob("configs/*.yaml"))


@pytest.mark.parametrize("yaml_text, match", [
    ("model: {dimm: 3}", r"unknown config key model\.dimm; expected one of \['name', 'num_classes'"),
    ("optimizer: {lr: 1}", r"unknown config key optimizer"),
    ("model: {pe: {kind: rope, opts: {}}}", r"unknown config key model\.pe\.opts"),
    ("model: {dim: 32.5}", r"model\.dim expects int \| None, got 32\.5 \(float\)"),
    ("train: {amp: 1}", r"train\.amp expects bool, got 1 \(int\)"),
    ("train: {epochs: true}", r"train\.epochs expects int, got True \(bool\)"),
    ("model: {channels: [8, x]}", r"model\.channels expects list\[int\] \| None"),
    ("data: {options: [1, 2]}", r"data\.options expects dict"),
    ("train: 3", r"train must be a mapping"),
])
def test_bad_yaml_names_the_key_and_the_type(tmp_path, yaml_text, match):
    path = tmp_path / "c.yaml"
    path.write_text(yaml_text)
    with pytest.raises(ConfigError, match=match):
        load_config(path)


@pytest.mark.parametrize("override, key, value", [
    ("optim.lr=3e-4", ("optim", "lr"), 3e-4),  # YAML 1.1 reads 3e-4 as a string: typed by the field
    ("optim.lr=1", ("optim", "lr"), 1.0),
    ("model.dim=64", ("model", "dim"), 64),
    ("train.amp=false", ("train", "amp"), False),
    ("optim.clip_grad=none", ("optim", "clip_grad"), None),
    ("train.resume=runs/a/checkpoint.pt", ("train", "resume"), "runs/a/checkpoint.pt"),
    ("model.patch_size=[4,8]", ("model", "patch_size"), [4, 8]),
    ("model.patch_size=4", ("model", "patch_size"), 4),
    ("train.out_dir=123", ("train", "out_dir"), "123"),  # a str field keeps digits as text
])
def test_overrides_are_typed_by_the_field(override, key, value):
    cfg = load_config(None, [override])
    got = getattr(getattr(cfg, key[0]), key[1])
    assert got == value and type(got) is type(value)


def test_overrides_reach_into_option_dicts():
    cfg = load_config(None, ["model.pe.kind=learned", "model.pe.options.grid_shape=[8, 8]",
                             "model.pe.options.resize=bicubic", "data.options.image_size=48"])
    assert cfg.model.pe.options == {"grid_shape": [8, 8], "resize": "bicubic"}
    assert cfg.data.options == {"image_size": 48}


@pytest.mark.parametrize("override, match", [
    ("model.dmi=3", r"unknown config key model\.dmi"),
    ("model.dim=abc", r"model\.dim expects int \| None, got 'abc'"),
    ("train.amp=maybe", r"train\.amp expects bool"),
    ("optim.lr=fast", r"optim\.lr expects float"),
    ("model.dim", r"must look like key\.sub=value"),
])
def test_bad_overrides(override, match):
    with pytest.raises(ConfigError, match=match):
        load_config(None, [override])


def test_resolved_config_round_trips(tmp_path):
    cfg = load_config(None, ["model.name=text", "model.causal=true", "model.pe.kind=rope", "optim.lr=2e-4"])
    save_config(cfg, tmp_path / "config.yaml")
    assert load_config(tmp_path / "config.yaml") == cfg
    assert yaml.safe_load((tmp_path / "config.yaml").read_text()) == to_dict(cfg)


@pytest.mark.parametrize("path", CONFIGS, ids=[p.stem for p in CONFIGS])
def test_shipped_configs_load_and_build(path):
    cfg = load_config(path)
    assert isinstance(cfg, Config)
    cfg.model.num_classes = 16 if cfg.model.name == "text" else 3  # main() takes these from the dataset
    cfg.model.vocab_size = 16 if cfg.model.name == "text" else None
    build_model(cfg.model)


def test_tensorboard_flag_loads_and_defaults_off():
    assert load_config(None).train.tensorboard is False
    assert load_config(None, ["train.tensorboard=true"]).train.tensorboard is True
    with pytest.raises(ConfigError, match=r"train\.tensorboard expects bool"):
        load_config(None, ["train.tensorboard=1"])


def test_config_reference_walks_every_dataclass_field():
    from train.config import config_help, config_reference

    rows = {key: (tp, default, comment) for key, tp, default, comment in config_reference()}
    assert rows["train.steps"][:2] == ("int", "0") and rows["train.steps"][2].startswith("> 0: total optimizer")
    assert rows["model.pe.options"] == ("dict", "{}", "the kind's keyword options (ndpe.options(kind))")
    assert rows["optim.clip_grad"][:2] == ("float | None", "1.0")
    assert len(rows) == len(config_help().splitlines()) - 1 - 3  # a title, one blank line between sections


def causal_only_kinds() -> list[tuple[str, dict]]:
    """Every kind with the options that make it causal-only, as its class declares them (not a list kept here)."""
    import ndpe
    from ndpe.registry import kind_class

    cases = []
    for kind in sorted(ndpe.available()):
        cls = kind_class(kind)
        opts = {cls.causal_only_option: True} if cls.causal_only_option else {}
        if 1 in cls.supported_dims and cls.is_causal_only(opts):
            cases.append((kind, opts))
    return cases


@pytest.mark.parametrize("kind, options", causal_only_kinds())
def test_a_causal_only_kind_in_bidirectional_attention_is_refused_at_config_time(kind, options):
    """dd-alibi (causal by default), transformer-xl causal=True, cope: refused by the config, before data or model."""
    cfg = ["model.name=text", f"model.pe.kind={kind}", *[f"model.pe.options.{k}={v}" for k, v in options.items()]]
    for causal in ([], ["model.causal=false"]):
        with pytest.raises(ConfigError, match="defined for causal attention only.*model.causal=true"):
            load_config("configs/text_copy.yaml", [*cfg, *causal])
    assert load_config("configs/text_copy.yaml", [*cfg, "model.causal=true"]).model.pe.kind == kind
    with pytest.raises(ConfigError, match="causal attention only.*model.name=text"):
        load_config(None, [f"model.pe.kind={kind}", *cfg[2:]])  # a ViT attends both ways


def test_causal_only_kinds_are_derived_from_the_declarations():
    assert {k for k, _ in causal_only_kinds()} >= {"cope", "dd-alibi", "transformer-xl"}
    assert load_config("configs/text_copy.yaml", ["model.pe.kind=dd-alibi", "model.pe.options.causal=false"])


def test_is_causal_only_matches_the_term_each_kind_returns():
    """What a class declares (``is_causal_only(options)``) is what its encoding's logits term says, for every kind
    built with its example options and with its causal form."""
    import ndpe
    from ndpe.registry import kind_class

    for kind in sorted(ndpe.available()):
        cls = kind_class(kind)
        if 1 not in cls.supported_dims:
            continue
        forms = [cls.example_options(1), {**cls.example_options(1), **cls.task_options(dims=1, causal=True,
                                                                                       train_grid=(4,), max_grid=(8,))}]
        for opts in forms:
            pe = ndpe.make(dims=1, kind=kind, dim=16, heads=2, **opts)
            logits = pe((4,)).logits
            assert cls.is_causal_only(opts) == (logits is not None and logits.causal_only), (kind, opts)


@pytest.mark.parametrize("overrides, match", [
    (["train.steps=100000000000000000000000000"], r"train\.steps must be <= 1,000,000,000"),
    (["train.epochs=10000000000"], r"train\.epochs must be <= 1,000,000"),
    (["optim.warmup_steps=10000000000"], r"optim\.warmup_steps must be <= 1,000,000,000"),
    (["train.batch_size=1000000000000"], r"train\.batch_size must be <= 1,048,576"),
    (["model.dim=10000000000"], r"model\.dim must be <= 65,536"),
    (["model.depth=1000000000"], r"model\.depth must be <= 4,096"),
    (["model.vocab_size=10000000000"], r"model\.vocab_size must be <= 16,777,216"),
    (["model.dim=4096", "model.depth=64"], r"~48 GiB of float32 weights, over the 16 GiB"),
    (["model.dim=65536"], r"~768 GiB of float32 weights"),  # under the dim bound, over the weights
])
def test_absurd_steps_and_sizes_are_refused_in_one_line(overrides, match):
    with pytest.raises(ConfigError, match=match) as refused:
        load_config(None, overrides)
    assert "\n" not in str(refused.value)


def test_largest_bounded_values_still_load():
    cfg = load_config(None, ["train.steps=1000000000", "model.dim=1024", "model.depth=48", "train.batch_size=4096"])
    assert cfg.train.steps == 10 ** 9


@pytest.mark.parametrize("text", ["model: null\n", "model:\n", "train: ~\n", "model: {pe: null}\n"])
def test_a_null_section_is_refused_not_read_as_the_defaults(tmp_path, text):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=r"config section \w+(\.pe)? is null; expected a mapping"):
        load_config(path)
    with pytest.raises(ConfigError, match=r"config section model is null"):
        load_config(None, ["model="])
