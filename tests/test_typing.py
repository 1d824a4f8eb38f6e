"""ndpe ships typed (py.typed, PEP 561): mypy passes on ndpe/ and sees what a user's code gets back.

Runs mypy (pinned in the test extra) in a subprocess with the [tool.mypy] config of pyproject.toml. The
tests share one cache directory of their own, made fresh for each session: the first runs cold (about 50 s
of CPU on these 2-core machines, as in any fresh clone), later ones ~1 s. Never the checkout's .mypy_cache:
a cache left there by another mypy process, or being written by one, crashes mypy ("INTERNAL ERROR",
python/mypy#14521, #21136), as it did once in CI. PEP 561 from an installed wheel: tests/test_cli.py.
"""
from __future__ import annotations

import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
pytest.importorskip("mypy", reason="mypy comes with the test extra: pip install -e '.[test]'")
# one worker runs them all: two mypy processes writing the one .mypy_cache at once crash mypy ("INTERNAL ERROR")
pytestmark = pytest.mark.xdist_group("mypy")


@pytest.fixture(scope="module")
def mypy(tmp_path_factory):
    cache = tmp_path_factory.mktemp("mypy_cache")

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "mypy", "--cache-dir", str(cache), "--show-traceback", *args],
                              cwd=ROOT, capture_output=True, text=True, timeout=600)
    return run


def test_mypy_finds_no_errors_in_ndpe(mypy):
    result = mypy("ndpe")
    assert result.returncode == 0, result.stdout + result.stderr
    assert re.search(r"^Success: no issues found in \d+ source files$", result.stdout, re.M), result.stdout


def test_package_is_marked_typed():
    assert (ROOT / "ndpe" / "py.typed").is_file()  # the wheel carrying it: tests/test_cli.py


def test_a_user_snippet_type_checks_and_sees_posout(mypy, tmp_path):
    snippet = tmp_path / "user_code.py"
    snippet.write_text(textwrap.dedent("""\
        import torch
        import ndpe

        pe = ndpe.make(dims=2, kind="rope", dim=384, heads=6)
        reveal_type(pe)
        pos = pe((14, 14), num_prefix=1)
        reveal_type(pos)
        reveal_type(ndpe.make(dims=1, kind="alibi", dim=64, heads=4)((16,)).bias)
        reveal_type(ndpe.Combine(pe, pe)((14, 14)))
        q = k = torch.randn(8, 6, 1 + 196, 64)
        q, k = ndpe.apply_qk(q, k, pos)
        reveal_type(q)
        """))
    result = mypy(str(snippet))
    assert result.returncode == 0, result.stdout + result.stderr
    revealed = re.findall(r'Revealed type is "([^"]+)"', result.stdout)
    assert revealed == ["ndpe.base.Encoding", "ndpe.contract.PosOut", "torch._tensor.Tensor | None",
                        "ndpe.contract.PosOut", "torch._tensor.Tensor"], result.stdout


def test_mypy_catches_misuse_of_the_result(mypy, tmp_path):
    snippet = tmp_path / "wrong.py"
    snippet.write_text("import ndpe\n\nn: int = ndpe.make(dims=1, kind='rope', dim=32)((8,))\n"
                       "ndpe.make(dims=1, kind='rope', dim=32)((8,), num_prefix='1')\n")
    result = mypy(str(snippet))
    assert result.returncode == 1
    assert 'expression has type "PosOut", variable has type "int"' in result.stdout
    assert 'Argument "num_prefix" to "__call__" of "Encoding" has incompatible type "str"' in result.stdout
