"""Table-driven fuzz of the command lines: every bad config, override or preset ends in one clear error line.

``python -m train.main`` (``train.main.cli``) and ``python -m train.bench`` (``train.bench.main``) are called
in-process with the bad input; each must exit non-zero (SystemExit) with exactly one ``error:`` line on
stderr and no traceback. Two cases also run as real subprocesses.
"""
from __future__ import annotations

import inspect
import subprocess
import sys

import pytest

import train.bench
from train.bench import main as bench_main
from train.config import ConfigError, load_config, load_yaml, validate
from train.main import cli

BOMB = "a: &a [x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{c}: &{c} [*{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}, *{p}]\n" for p, c in zip("abcdefgh", "bcdefghi"))
FAKE = ["data.name=tests.test_train:fake", "data.allow_import=true", "model.patch_size=4", "model.dim=16",
        "model.depth=1", "model.heads=2", "train.batch_size=16"]

# (id, YAML file text or None, argv after --config, expected message)
TRAIN_CASES = [
    ("unknown-key", None, ["model.dimm=3"], r"unknown config key model\.dimm"),
    ("unknown-section", None, ["optimizer.lr=1"], r"unknown config key optimizer"),
    ("wrong-type-int", None, ["model.dim=abc"], r"model\.dim expects int \| None"),
    ("wrong-type-bool", None, ["train.amp=maybe"], r"train\.amp expects bool"),
    ("not-key-value", None, ["model.dim"], r"must look like key\.sub=value"),
    ("eval-every-zero", None, ["train.eval_every=0"], r"train\.eval_every must be >= 1, got 0"),
    ("save-every-zero", None, ["train.save_every=0"], r"train\.save_every must be >= 1, got 0"),
    ("batch-size-zero", None, ["train.batch_size=0"], r"train\.batch_size must be >= 1"),
    ("negative-steps", None, ["train.steps=-5"], r"train\.steps must be >= 0"),
    ("huge-seed", None, [f"train.seed={10 ** 23}"], r"train\.seed must be in \[0, 2\*\*63\)"),
    ("negative-seed", None, ["train.seed=-1"], r"train\.seed must be in \[0, 2\*\*63\)"),
    ("negative-data-seed", None, ["data.seed=-3"], r"data\.seed must be in \[0, 2\*\*63\)"),
    ("nan-lr", None, ["optim.lr=.nan"], r"optim\.lr must be a finite number"),
    ("negative-lr", None, ["optim.lr=-1e-3"], r"optim\.lr must be >= 0"),
    ("drop-one", None, ["model.drop=1.0"], r"model\.drop must be in \[0, 1\)"),
    ("zero-heads", None, ["model.heads=0"], r"model\.heads must be >= 1"),
    ("bad-loss", None, ["train.loss=huber"], r"train\.loss must be 'mse' or 'l1'"),
    ("bad-device", None, ["train.device=gpu7"], r"train\.device must be auto, cpu, cuda"),
    ("unknown-model", None, ["model.name=resnet"], r"unknown model\.name 'resnet'; expected one of \["),
    ("import-without-opt-in", None, ["data.name=os:system"], r"imports the module 'os': set data\.allow_import=true"),
    ("import-half-name", None, ["data.name=:factory"], r"must be a dataset name or 'package\.module:factory'"),
    ("import-missing-module", None, ["data.name=no_such_mod:f", "data.allow_import=true"], r"cannot import it"),
    ("unknown-dataset", None, ["data.name=imagenet"], r"unknown dataset data\.name='imagenet'"),
    ("unknown-data-option", None, ["data.name=shapes", "data.options.colour=red"], r"unknown data\.options \['colour'\]"),
    ("override-alias-bomb", None, ["data.options.x=" + "{" + BOMB.replace("\n", ", ").rstrip(", ") + "}"],
     r"expands to more than"),
    ("override-recursive-alias", None, ["data.options.x=&a [*a]"], r"recursive alias"),
    ("batch-exceeds-data", None, [*FAKE, "train.batch_size=1000"], r"train\.batch_size=1000 .* exceeds the 64"),
    ("model-domain", None, [*FAKE, "model.name=text"], r"model 'text' takes text data but dataset"),
    ("resume-missing", None, [*FAKE, "train.resume=/nonexistent/checkpoint.pt"], r"no checkpoint at"),
    ("yaml-syntax", "model: {dim: [1, 2\n", [], r"is not valid YAML"),
    ("yaml-tab", "model:\n\tdim: 3\n", [], r"is not valid YAML"),
    ("yaml-alias-bomb", BOMB, [], r"expands to more than 10000 nodes"),
    ("yaml-python-tag", "model: !!python/object/apply:os.system [echo hi]\n", [], r"is not valid YAML"),
    ("yaml-not-mapping", "- 1\n- 2\n", [], r"config must be a mapping"),
    ("yaml-section-scalar", "train: 3\n", [], r"train must be a mapping"),
    ("yaml-two-documents", "model: {}\n---\ntrain: {}\n", [], r"is not valid YAML"),
    ("yaml-import-no-opt-in", "data: {name: 'tests.test_train:fake'}\n", [], r"imports the module 'tests\.test_train'"),
    ("yaml-not-utf8", b"model: {name: \xff\xfe}\n", [], r"is not UTF-8 text"),
    ("yaml-too-large", "# " + "x" * (1 << 20) + "\n", [], r"at most 1048576 are read"),
    ("config-missing", "MISSING", [], r"config file .* does not exist"),
]


def run_cli(fn, argv, capsys) -> tuple[int, str]:
    with pytest.raises(SystemExit) as e:
        fn(argv)
    err = capsys.readouterr().err
    return e.value.code, err


def assert_one_error_line(code, err, match):
    import re

    assert code not in (0, None), err
    assert "Traceback" not in err, err
    lines = [line for line in err.splitlines() if "error:" in line]
    assert len(lines) == 1, err
    assert re.search(match, lines[0]), lines[0]


def config_file(tmp_path, text):
    if text is None:
        return []
    path = tmp_path / "bad.yaml"
    if text != "MISSING":
        path.write_bytes(text if isinstance(text, bytes) else text.encode())
    return ["--config", str(path)]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("text, argv, match", [c[1:] for c in TRAIN_CASES], ids=[c[0] for c in TRAIN_CASES])
def test_train_cli_refuses(tmp_path, capsys, monkeypatch, text, argv, match):
    monkeypatch.delenv("NDPE_ALLOW_DATA_IMPORT", raising=False)
    argv = [*config_file(tmp_path, text), *argv, f"train.out_dir={tmp_path / 'run'}"]
    assert_one_error_line(*run_cli(cli, argv, capsys), match)


def test_train_cli_bad_flag(capsys):
    assert_one_error_line(*run_cli(cli, ["--bogus"], capsys), r"unrecognized arguments: --bogus")


def test_warmup_longer_than_steps_is_allowed_but_warns(tmp_path):
    cfg = load_config(None, [*FAKE, "train.steps=1", "optim.warmup_steps=5", f"train.out_dir={tmp_path}"])
    with pytest.warns(UserWarning, match=r"optim\.warmup_steps=5 exceeds train\.steps=1"):
        validate(cfg)
    from train.main import main

    with pytest.warns(UserWarning, match="warmup"):
        assert main(cfg)["step"] == 1


def test_environment_variable_opts_in(monkeypatch):
    cfg = load_config(None, ["data.name=tests.test_train:fake", "data.allow_import=true"])
    cfg.data.allow_import = False
    monkeypatch.setenv("NDPE_ALLOW_DATA_IMPORT", "1")
    validate(cfg)
    monkeypatch.setenv("NDPE_ALLOW_DATA_IMPORT", "0")
    with pytest.raises(ConfigError, match="allow_import"):
        validate(cfg)
    with pytest.raises(ConfigError, match="allow_import"):  # no factory is trusted by name (the benchmark passes its own)
        validate(load_config(None, ["data.name=train.bench:bench_dataset"]))


# -- the benchmark's command line --------------------------------------------------------------
BENCH_YAML_GUARDED = "load_yaml" in inspect.getsource(train.bench.load_bench_config)
needs_bench_load_yaml = pytest.mark.xfail(not BENCH_YAML_GUARDED, strict=True, raises=Exception,
                                          reason="train.bench.load_bench_config must read presets with "
                                                 "train.config.load_yaml")

BENCH_CASES = [pytest.param(*c[1:], id=c[0]) if type(c) is tuple else c for c in [
    ("unknown-key", None, ["colour=red"], r"unknown config key colour"),
    ("wrong-type", None, ["seeds=abc"], r"seeds expects list\[int\]"),
    ("unknown-task", None, ["tasks=[image/nope]"], r"unknown task\(s\) \['image/nope'\]"),
    ("unknown-kind", None, ["kinds=[rotary]"], r"unknown kind 'rotary'"),
    ("bad-variant", None, ["rope_variants=[xpos]"], r"unknown rope_variants \['xpos'\]"),
    ("override-bomb", None, ["why={" + BOMB.replace("\n", ", ").rstrip(", ") + "}"], r"expands to more than"),
    ("quick-and-config", "name: x\n", ["--quick"], r"give one of --quick and --config"),
    ("preset-unknown-key", "dims: 3\n", [], r"unknown config key dims"),
    ("preset-missing", "MISSING", [], r"does not exist|No such file"),
    pytest.param("tasks: [a\n", [], r"is not valid YAML", marks=needs_bench_load_yaml, id="preset-yaml-syntax"),
    pytest.param(BOMB, [], r"expands to more than", id="preset-alias-bomb", marks=pytest.mark.skipif(
        not BENCH_YAML_GUARDED, reason="unguarded yaml.safe_load in train.bench would exhaust memory")),
]]


@pytest.mark.timeout(60)
@pytest.mark.parametrize("text, argv, match", BENCH_CASES)
def test_bench_cli_refuses(tmp_path, capsys, text, argv, match):
    argv = [*config_file(tmp_path, text), *argv, f"out_root={tmp_path / 'runs'}"]
    assert_one_error_line(*run_cli(bench_main, argv, capsys), match)
    assert not (tmp_path / "runs").exists()  # refused before anything was written


def test_load_yaml_reads_the_shipped_presets_as_safe_load_does():
    import yaml
    from pathlib import Path

    for path in sorted(Path("configs").glob("**/*.yaml")):
        assert load_yaml(path) == yaml.safe_load(path.read_text()), path


@pytest.mark.parametrize("module, argv, match", [
    ("train.main", ["model.name=resnet"], r"^train\.main: error: unknown model\.name 'resnet'"),
    ("train.bench", ["--quick", "colour=red"], r"error: unknown config key colour"),
])
def test_real_command_lines(tmp_path, module, argv, match):
    proc = subprocess.run([sys.executable, "-m", module, *argv, f"out_root={tmp_path}" if module == "train.bench"
                           else f"train.out_dir={tmp_path}"], capture_output=True, text=True, timeout=120)
    assert_one_error_line(proc.returncode, proc.stderr, match)
