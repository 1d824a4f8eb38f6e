"""Every Python block of the README runs as written (each in a fresh interpreter on this checkout)."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCKS = re.findall(r"```python\n(.*?)```", (ROOT / "README.md").read_text(), re.S)


def test_the_readme_has_code_to_run():
    assert len(BLOCKS) >= 4, "the README shows a model, the drop-ins, the other domains and a change of size"


@pytest.mark.parametrize("i", range(len(BLOCKS)))
def test_readme_block_runs(i):
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", BLOCKS[i]], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, f"README block {i} failed:\n{BLOCKS[i]}\n{done.stderr[-2000:]}"
