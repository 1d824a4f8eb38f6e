"""A kind is one file in ``ndpe/kinds/``, and a new one cannot break the suite.

Three kind files are written into ``ndpe/kinds/`` of a copy of the repository: the guide's example (an additive kind,
docs/guide.md "Adding a kind", taken from the guide itself so the guide stays true) and the smallest bias and rotary
kinds, which declare nothing beyond ``encode`` (so they refuse ``past=`` in one line, and their outputs of explicit
positions are checked finite after the fact). docs/reference.md's kinds table is regenerated with ``ndpe kinds --markdown``,
as the guide says to after adding a kind. Then, in the copy, ``ndpe kinds`` lists them, the whole suite collects, and
every test file that runs every registered kind (the contract, finiteness, decoding, flex, memory, the models, ...)
passes on them; the slow test runs the suite CI runs there.
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("ramp", "plain-bias", "plain-rope")
BIAS_KIND = '''"""``plain-bias``: the smallest bias kind; it declares nothing beyond ``encode``."""
from ndpe.base import Encoding
from ndpe.contract import PosOut
from ndpe.registry import register


@register("plain-bias")
class PlainBias(Encoding):
    """Subtracts the L1 distance of two tokens' positions from their attention logit."""

    def encode(self, positions, grid_shape):  # positions (..., N, dims) -> bias (..., 1, N, N)
        distance = (positions[..., :, None, :] - positions[..., None, :, :]).abs().sum(-1)
        return PosOut(bias=-distance[..., None, :, :])
'''
ROTARY_KIND = '''"""``plain-rope``: the smallest rotary kind; it declares nothing beyond ``encode``."""
import torch

from ndpe.base import Encoding
from ndpe.contract import PosOut
from ndpe.registry import register


@register("plain-rope")
class PlainRope(Encoding):
    """Rotates q and k by the sum of a token's coordinates times a frequency per channel pair."""

    def encode(self, positions, grid_shape):  # positions (..., N, dims) -> cos, sin (..., N, head_dim // 2)
        half = self.head_dim // 2
        angle = positions.sum(-1, keepdim=True) * 100.0 ** (-torch.arange(half, device=positions.device) / half)
        return PosOut(rot=(angle.cos(), angle.sin()))
'''


def every_kind_files(root: Path) -> list[str]:
    """The test files that run every registered kind (they read ``KIND_DIMS`` or ``ndpe.available()``), this one
    left out."""
    return sorted(f"tests/{p.name}" for p in (root / "tests").glob("test_*.py") if p.name != Path(__file__).name
                  and any(word in p.read_text() for word in ("KIND_DIMS", "ndpe.available()")))


def guide_kind() -> str:
    """The kind's file in the guide's "Adding a kind" example: its lines from the first import to the end of the
    class, without the prompts, registered as ``"ramp"`` (the guide registers ``"ramp-example"`` and removes it)."""
    text = (ROOT / "docs" / "guide.md").read_text()
    section = text[text.index("### Adding a kind"):]
    block = section[section.index("```python\n") + len("```python\n"):].splitlines()
    lines = block[:block.index(">>> import ndpe")]
    assert lines and all(line[:4] in (">>> ", "... ") for line in lines), lines
    return "\n".join(line[4:] for line in lines).replace('"ramp-example"', '"ramp"') + "\n"


def run(args: list[str], cwd: Path, timeout: float) -> subprocess.CompletedProcess:
    """``python args...`` in the copy ``cwd``, importing its ndpe (no pytest variables of this run leak in)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=str(cwd), OMP_NUM_THREADS="1")
    return subprocess.run([sys.executable, *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)


def copy_with_new_kinds(dest: Path) -> Path:
    """The repository's files (tracked and untracked, less git's ignored ones: no .venv, runs or caches) copied to
    ``dest``, the two kind files written into its ``ndpe/kinds/``, its docs/reference.md kinds table regenerated, and the
    whole committed in a repository of its own (runs record their commit)."""
    if shutil.which("git") is None or not (ROOT / ".git").exists():
        pytest.skip("needs git to list the repository's files")
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
                            capture_output=True, text=True, check=True, timeout=60).stdout.split("\0")
    for name in filter(None, listed):
        if (ROOT / name).is_file():  # a tracked file deleted in the working tree is left out
            (dest / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, dest / name)
    (dest / "ndpe" / "kinds" / "ramp.py").write_text(guide_kind())
    (dest / "ndpe" / "kinds" / "plain_bias.py").write_text(BIAS_KIND)
    (dest / "ndpe" / "kinds" / "plain_rope.py").write_text(ROTARY_KIND)
    markdown = run(["-m", "ndpe", "kinds", "--markdown"], dest, timeout=300)
    assert markdown.returncode == 0, markdown.stderr
    readme = (dest / "docs" / "reference.md").read_text()
    start = readme.index("| kind | dims | acts by | what it is |")
    (dest / "docs" / "reference.md").write_text(readme[:start] + markdown.stdout.strip() + readme[readme.index("\n\n", start):])
    git = ["git", "-C", str(dest), "-c", "user.name=ndpe", "-c", "user.email=ndpe@localhost"]
    for args in (["init", "-q"], ["add", "-A"], ["commit", "-q", "-m", "three new kinds"]):  # a run records its commit
        subprocess.run([*git, *args], capture_output=True, check=True, timeout=120)
    return dest


@pytest.fixture(scope="module")
def copy(tmp_path_factory) -> Path:
    return copy_with_new_kinds(tmp_path_factory.mktemp("repo"))


def test_the_guide_example_is_a_kind_file():
    source = guide_kind()
    assert source.startswith("import torch.nn.functional as F\n") and '@register("ramp", dims=(1,))' in source
    assert "import ndpe\n" not in source  # in ndpe/kinds/, `import ndpe` is an import cycle (tests/test_imports.py)


def test_new_kind_files_are_listed_collected_and_keep_the_contract(copy):
    table = (copy / "docs" / "reference.md").read_text().splitlines()  # `ndpe kinds --markdown` in the copy
    assert "| `ramp` | 1 | add | Adds the token's index, scaled, to channel 0: the smallest absolute encoding. |" in table
    assert "| `plain-bias` | 1 2 3 | bias | Subtracts the L1 distance of two tokens' positions from their attention " \
           "logit. |" in table
    assert "| `plain-rope` | 1 2 3 | rotate q, k | Rotates q and k by the sum of a token's coordinates times a " \
           "frequency per channel pair. |" in table
    # every file that runs every registered kind collects with them and passes on them (finiteness included)
    files = every_kind_files(copy)
    assert {"tests/test_contract.py", "tests/test_finite.py", "tests/test_packed.py", "tests/test_models.py"} <= {*files}
    ran = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", "-k", " or ".join(KINDS), *files], copy,
              timeout=900)  # -m: the kinds_full tier's checks too (tests/conftest.py), as CI runs them
    summary = ran.stdout.splitlines()[-1] if ran.stdout else ""
    assert ran.returncode == 0 and " passed" in summary and "error" not in summary, ran.stdout[-3000:]


@pytest.mark.slow
@pytest.mark.timeout(3600)
def test_the_default_suite_passes_with_new_kind_files(tmp_path):
    """The suite CI runs (``scripts/test.sh -m "not slow"``: the quick and kinds_full tiers) in the copy (less this
    file, which would copy it)."""
    repo = copy_with_new_kinds(tmp_path / "repo")
    ran = run(["-m", "pytest", "-q", "-p", "no:cacheprovider", "-m", "not slow", "-n", "2", "--dist", "loadgroup",
               "--ignore", "tests/test_kind_files.py"], repo, timeout=3300)
    assert ran.returncode == 0, ran.stdout[-5000:]
