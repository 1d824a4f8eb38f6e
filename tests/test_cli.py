"""The ``ndpe`` command, run as a user runs it: the installed console scripts and ``python -m`` (subprocesses).

Also: a missing optional dependency (matplotlib, simulated by a stand-in package that fails to import)
gives one line naming the extra and creates nothing; the friendly error of a missing required option;
the sdist (no tests/, which need the checkout) and the wheel built from it (py.typed, LICENSE, scripts).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import pytest

import ndpe

ROOT = Path(__file__).resolve().parents[1]
BIN = Path(sys.executable).parent
NDPE_SCRIPT, VIZ_SCRIPT = BIN / "ndpe", BIN / "ndpe-viz"
needs_scripts = pytest.mark.skipif(not (NDPE_SCRIPT.exists() and VIZ_SCRIPT.exists()),
                                   reason="console scripts not installed: pip install -e .")
try:
    import matplotlib  # noqa: F401
    HAVE_MPL = True
except ImportError:
    HAVE_MPL = False
needs_matplotlib = pytest.mark.skipif(not HAVE_MPL, reason='needs matplotlib: pip install -e ".[viz]"')

# the two ways to run `ndpe`: the installed console script and `python -m ndpe`
NDPE = [pytest.param([str(NDPE_SCRIPT)], id="script", marks=needs_scripts),
        pytest.param([sys.executable, "-m", "ndpe"], id="python-m")]
# the same, the console script of the longer commands in the slow suite only (CI's default run keeps the script's
# quick checks, test_version and test_kinds_lists_every_kind_with_its_dims, and the other forms run the same code)
NDPE_LONG = [pytest.param([str(NDPE_SCRIPT)], id="script", marks=[needs_scripts, pytest.mark.slow]),
             pytest.param([sys.executable, "-m", "ndpe"], id="python-m")]
# every way to run the figures command (the aliases in the slow suite)
VIZ = NDPE_LONG + [pytest.param([str(VIZ_SCRIPT)], id="ndpe-viz", marks=[needs_scripts, pytest.mark.slow]),
                   pytest.param([sys.executable, "-m", "ndpe.viz"], id="python-m-ndpe.viz", marks=pytest.mark.slow)]


def run(cmd: list[str], *args: str, cwd: Path, pythonpath: Path | None = None) -> subprocess.CompletedProcess:
    """``cmd args...`` in ``cwd``, importing this checkout's ndpe (after ``pythonpath``): the installed one can be
    another checkout's (an editable install elsewhere), whose kinds are not this one's."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    env["MPLBACKEND"] = "Agg"
    env["PYTHONPATH"] = os.pathsep.join(str(p) for p in (pythonpath, ROOT) if p is not None)
    return subprocess.run([*cmd, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=300)


def one_line_error(result: subprocess.CompletedProcess, status: int, prefix: str) -> str:
    """The error a user sees: the given non-zero status, one line on stderr starting with ``prefix``, no traceback."""
    assert result.returncode == status, (result.returncode, result.stdout, result.stderr)
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    assert lines[0].startswith(prefix), lines[0]
    return lines[0]


def with_viz_prefix(cmd: list[str]) -> list[str]:
    """``cmd`` plus the ``viz`` subcommand where the command needs one."""
    return cmd + ["viz"] if cmd[-1] in ("ndpe", str(NDPE_SCRIPT)) else cmd


# -- ndpe kinds / options / --version / usage errors -----------------------------------------
@pytest.mark.parametrize("cmd", NDPE)
def test_kinds_lists_every_kind_with_its_dims(cmd, tmp_path):
    result = run(cmd, "kinds", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    rows = dict(line.split(None, 1) for line in result.stdout.strip().splitlines())
    assert rows == {k: "dims " + ", ".join(map(str, d)) for k, d in ndpe.available().items()}


@pytest.mark.parametrize("cmd", NDPE_LONG)
def test_options_lists_a_kinds_options_and_defaults(cmd, tmp_path):
    result = run(cmd, "options", "learned", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.strip().splitlines()
    assert lines[0].startswith("learned (dims 1, 2, 3): ndpe.make(")
    assert "  grid_shape: tuple[int, ...]  (required)" in lines
    assert "  resize: str | None = None" in lines and "  init_std: float = 0.02" in lines
    assert len(lines) == 2 + len(ndpe.options("learned"))
    assert lines[-1] == "call: pe(grid_shape, *, positions=None, num_prefix=0, dtype=None, past=0)  (every kind's)"
    rope = run(cmd, "options", "rope", cwd=tmp_path)
    assert rope.returncode == 0 and "  theta: float | Sequence[float] = 10000.0" in rope.stdout.splitlines()


@pytest.mark.parametrize("cmd", NDPE[:1])
def test_options_of_the_camera_kinds_show_the_cameras_their_call_takes(cmd, tmp_path):
    """gta's call takes extrinsics= (not intrinsics=, which it refuses), prope's both: each listed with its type and
    what the call does with it, as the constructor's options are."""
    for kind, own in (("gta", ["extrinsics"]), ("prope", ["extrinsics", "intrinsics"])):
        result = run(cmd, "options", kind, cwd=tmp_path)
        assert result.returncode == 0, result.stderr
        lines = result.stdout.splitlines()
        call = next(line for line in lines if line.startswith("call: "))
        assert call == f"call: pe(grid_shape, *, {', '.join(f'{n}=None' for n in own)}, positions=None, num_prefix=0, " \
                       "dtype=None, past=0)"
        for name in own:
            assert f"  {name}: Tensor | None = None" in lines
        assert ("  intrinsics: Tensor | None = None" in lines) == (kind == "prope")
        assert "world-to-camera" in lines[-1]


USAGE_ERRORS = [  # args, exit status, start of the line, in the line
    (["options", "lerned"], 2, "ndpe options: error: unknown kind 'lerned'", "expected one of"),
    ([], 2, "ndpe: error:", "required: COMMAND"),
    (["frobnicate"], 2, "ndpe: error:", "invalid choice: 'frobnicate'"),
    (["kinds", "extra"], 2, "ndpe: error:", "unrecognized arguments: extra"),
]


@pytest.mark.parametrize("cmd,args,status,prefix,says",
                         [pytest.param(*NDPE[0].values, *case, marks=needs_scripts, id=f"script-{i}")
                          for i, case in enumerate(USAGE_ERRORS)]
                         + [pytest.param(*NDPE[1].values, *USAGE_ERRORS[0], id="python-m-0")])  # same code
def test_usage_errors_are_one_line(cmd, tmp_path, args, status, prefix, says):
    assert says in one_line_error(run(cmd, *args, cwd=tmp_path), status, prefix)


@pytest.mark.parametrize("cmd", NDPE)
def test_version(cmd, tmp_path):
    result = run(cmd, "--version", cwd=tmp_path)
    assert result.returncode == 0 and result.stdout.strip() == f"ndpe {ndpe.__version__}"


# -- ndpe viz (and its aliases) ------------------------------------------------------------
@needs_matplotlib
@pytest.mark.parametrize("cmd", VIZ)
def test_viz_writes_figures_and_exits_0(cmd, tmp_path):
    # the command: figures in ./figures, their paths on stdout, exit status 0
    result = run(with_viz_prefix(cmd), "--kind", "alibi", "--grid", "8", "8", cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    names = ["alibi_2d_table.png", "alibi_2d_similarity.png", "alibi_2d_offset.png"]
    assert result.stdout.split() == [f"figures/{n}" for n in names]
    assert sorted(p.name for p in (tmp_path / "figures").iterdir()) == sorted(names)
    assert all((tmp_path / "figures" / n).read_bytes().startswith(b"\x89PNG") for n in names)


@needs_matplotlib
@pytest.mark.parametrize("cmd", NDPE_LONG)  # the aliases run the same code (test_viz_writes_figures_and_exits_0)
@pytest.mark.parametrize("args,status,says", [
    (["--kind", "rope", "--grid", "0", "4"], 2, "argument --grid: a size must be a positive int, got '0'"),
    (["--kind", "rope", "--grid", "4", "--option", "tehta=1.0"], 2, "valid options"),
    (["--kind", "ropee", "--grid", "4"], 2, "invalid choice: 'ropee'"),
    (["--kind", "rope", "--grid", "4", "4", "--grow", "8"], 2, "--grow needs one size per axis"),
])
def test_viz_errors_are_one_line_and_create_nothing(cmd, tmp_path, args, status, says):
    result = run(with_viz_prefix(cmd), *args, cwd=tmp_path)
    assert says in one_line_error(result, status, "")
    assert not list(tmp_path.iterdir())


@pytest.fixture
def no_matplotlib(tmp_path) -> Path:
    """A PYTHONPATH entry whose ``matplotlib`` fails to import as an absent one does."""
    fake = tmp_path / "fake_site" / "matplotlib"
    fake.mkdir(parents=True)
    (fake / "__init__.py").write_text(
        "raise ModuleNotFoundError(\"No module named 'matplotlib'\", name='matplotlib')\n")
    return fake.parent


@pytest.mark.parametrize("cmd", VIZ)
def test_viz_without_matplotlib_names_the_extra_and_creates_nothing(cmd, tmp_path, no_matplotlib):
    work = tmp_path / "work"
    work.mkdir()
    result = run(with_viz_prefix(cmd), "--kind", "alibi", "--grid", "8", "8", cwd=work, pythonpath=no_matplotlib)
    line = one_line_error(result, 1, "")
    assert line.endswith('drawing figures needs matplotlib, which is not installed: pip install "ndpe[viz]"')
    assert not list(work.iterdir())  # no empty ./figures
    # --help needs no matplotlib
    assert run(with_viz_prefix(cmd), "--help", cwd=work, pythonpath=no_matplotlib).returncode == 0


def test_draw_without_matplotlib_raises_before_creating_the_folder(tmp_path, monkeypatch):
    from ndpe import viz

    monkeypatch.setitem(sys.modules, "matplotlib", None)  # `import matplotlib` now raises ImportError
    with pytest.raises(ModuleNotFoundError, match=r'pip install "ndpe\[viz\]"') as info:
        viz.draw(ndpe.make(dims=1, kind="rope", dim=16), (8,), out_dir=tmp_path / "figs")
    assert isinstance(info.value, viz.MissingDependencyError)
    assert not (tmp_path / "figs").exists()


# -- the benchmark is no ndpe command ----------------------------------------------------------
@pytest.mark.parametrize("cmd", NDPE_LONG)
def test_the_benchmark_is_run_from_a_checkout_not_by_the_library(cmd, tmp_path):
    # the wheel ships the library alone (see test_wheel_...): `ndpe` never runs a checkout's train/ (ndpe.cli says why)
    assert "invalid choice: 'bench'" in one_line_error(run(cmd, "bench", "--quick", cwd=ROOT), 2, "ndpe: error:")
    assert "python -m train.bench" in run(cmd, "--help", cwd=tmp_path).stdout


# -- friendlier errors of the library ----------------------------------------------------------
@pytest.mark.parametrize("dims,shape", [(1, "(length,)"), (2, "(rows, cols)"), (3, "(frames, rows, cols)")])
def test_make_names_a_missing_grid_shape(dims, shape):
    with pytest.raises(TypeError) as info:
        ndpe.make(dims=dims, kind="learned", dim=64)
    message = str(info.value)
    assert message.startswith(f"learned needs grid_shape={shape}, the table's size per axis: e.g. ndpe.make(")
    assert "\n" not in message and "keyword-only" not in message
    ndpe.make(dims=dims, kind="learned", dim=64, grid_shape=(4,) * dims)  # the suggested call works


# -- packaging ---------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def dists(tmp_path_factory) -> tuple[Path, Path]:
    """The sdist of this checkout, and the wheel built from that sdist (no build isolation: offline)."""
    out = tmp_path_factory.mktemp("dist")
    build = "from setuptools import build_meta as b; import sys; print(b.build_{}(sys.argv[1]))"
    sdist = subprocess.run([sys.executable, "-c", build.format("sdist"), str(out)], cwd=ROOT, capture_output=True,
                           text=True, timeout=300)
    assert sdist.returncode == 0, sdist.stderr
    sdist_path = out / sdist.stdout.strip().splitlines()[-1]
    with tarfile.open(sdist_path) as tar:
        tar.extractall(out / "src", filter="data")
    src = out / "src" / sdist_path.name.removesuffix(".tar.gz")
    wheel = subprocess.run([sys.executable, "-c", build.format("wheel"), str(out)], cwd=src, capture_output=True,
                           text=True, timeout=300)
    assert wheel.returncode == 0, wheel.stderr
    return sdist_path, out / wheel.stdout.strip().splitlines()[-1]


def test_sdist_ships_the_library_and_license_but_no_tests(dists):
    sdist, _ = dists
    with tarfile.open(sdist) as tar:
        names = {n.split("/", 1)[1] for n in tar.getnames() if "/" in n}
    assert {"LICENSE", "README.md", "pyproject.toml", "ndpe/py.typed", "ndpe/cli.py", "ndpe/__main__.py"} <= names
    assert not [n for n in names if n.startswith(("tests", "train", "models"))]  # tests need the checkout


def test_wheel_carries_py_typed_license_metadata_and_scripts(dists):
    _, wheel = dists
    with zipfile.ZipFile(wheel) as whl:
        names = set(whl.namelist())
        info = next(n.split("/")[0] for n in names if n.endswith(".dist-info/METADATA"))
        metadata = whl.read(f"{info}/METADATA").decode()
        scripts = whl.read(f"{info}/entry_points.txt").decode()
    assert {"ndpe/py.typed", "ndpe/cli.py", "ndpe/__main__.py", "ndpe/viz/fields.py", "ndpe/viz/figures.py",
            "ndpe/viz/__main__.py", f"{info}/licenses/LICENSE"} <= names
    assert not [n for n in names if n.startswith(("tests/", "train/", "models/"))]
    assert "License-Expression: Apache-2.0" in metadata and "Classifier: Typing :: Typed" in metadata
    assert 'Requires-Dist: matplotlib>=3.8; extra == "viz"' in metadata
    assert "ndpe = ndpe.cli:main" in scripts and "ndpe-viz = ndpe.cli:viz_alias" in scripts


@pytest.mark.skipif(os.name != "posix", reason="venv layout lib/pythonX.Y/site-packages")
def test_mypy_sees_the_types_of_the_installed_wheel(dists, tmp_path):
    # PEP 561: mypy reads ndpe's annotations from site-packages only when ndpe/py.typed is there
    pytest.importorskip("mypy")
    _, wheel = dists
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=120)
    with zipfile.ZipFile(wheel) as whl:
        whl.extractall(next(venv.glob("lib/python*/site-packages")))
    (tmp_path / "user_code.py").write_text("import ndpe\n\npe = ndpe.make(dims=2, kind='rope', dim=64)\n"
                                           "reveal_type(pe)\nreveal_type(pe((4, 4)))\n")
    result = subprocess.run([sys.executable, "-m", "mypy", "--python-executable", str(venv / "bin" / "python"),
                             "--cache-dir", str(tmp_path / "cache"), "user_code.py"],
                            cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    assert 'Revealed type is "ndpe.base.Encoding"' in result.stdout
    assert 'Revealed type is "ndpe.contract.PosOut"' in result.stdout


def test_license_is_the_apache_2_text():
    text = (ROOT / "LICENSE").read_text()
    assert text.lstrip().startswith("Apache License\n") and "Version 2.0, January 2004" in text
    assert "END OF TERMS AND CONDITIONS" in text and len(text) > 11000


def test_readme_renders_off_the_repository():
    """README.md is the package's long description (PyPI): no link or image may point to a repository-relative path."""
    import re
    from pathlib import Path

    text = (Path(__file__).resolve().parents[1] / "README.md").read_text()
    relative = [target for target in re.findall(r"\]\(([^)\s]+)", text) if not target.startswith(("http://", "https://", "#"))]
    assert not relative, f"repository-relative links in README.md: {relative}"
