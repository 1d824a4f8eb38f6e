"""scripts/setup.sh: which extra it installs and when it skips (a stub .venv records the pip calls, so nothing is
installed): the benchmark's set-up (train) is satisfied by the test suite's (test, which includes train), not the
other way round, and a changed pyproject.toml installs again."""
from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def checkout(tmp_path):
    (tmp_path / "scripts").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", tmp_path / "scripts" / "setup.sh")
    for name in ("pyproject.toml", "constraints.txt"):
        shutil.copy(ROOT / name, tmp_path / name)
    stub = tmp_path / ".venv" / "bin" / "python"
    stub.parent.mkdir(parents=True)
    stub.write_text('#!/usr/bin/env bash\necho "$@" >> "$(dirname "$0")/../calls"\n')
    stub.chmod(0o755)
    return tmp_path


def setup(checkout: Path, *args: str) -> tuple[int, list[str], str]:
    calls = checkout / ".venv" / "calls"
    calls.unlink(missing_ok=True)
    proc = subprocess.run(["bash", "scripts/setup.sh", *args], cwd=checkout, capture_output=True, text=True,
                          timeout=60)
    installs = [c for c in calls.read_text().splitlines() if "pip install" in c] if calls.exists() else []
    return proc.returncode, installs, proc.stderr


def digest(checkout: Path) -> str:
    return hashlib.sha256((checkout / "pyproject.toml").read_bytes() + (checkout / "constraints.txt").read_bytes()).hexdigest()


def test_each_extra_installs_once_and_test_covers_train(checkout):
    rc, installs, _ = setup(checkout, "train")
    assert rc == 0 and len(installs) == 1 and installs[0].endswith("-e .[train]")
    assert (checkout / ".venv" / ".ndpe-setup").read_text().split() == [digest(checkout), "train"]
    assert setup(checkout, "train")[:2] == (0, [])  # done: skipped
    rc, installs, _ = setup(checkout)  # the default, test, is not covered by train
    assert rc == 0 and len(installs) == 1 and installs[0].endswith("-e .[test]")
    assert setup(checkout)[:2] == (0, []) and setup(checkout, "train")[:2] == (0, [])  # test includes train


def test_a_changed_pyproject_installs_again(checkout):
    assert len(setup(checkout, "test")[1]) == 1
    with open(checkout / "pyproject.toml", "a") as f:
        f.write("\n# changed\n")
    assert len(setup(checkout, "train")[1]) == 1


def test_an_unknown_extra_is_refused(checkout):
    rc, installs, err = setup(checkout, "viz")
    assert rc == 2 and installs == [] and "takes train or test" in err


def test_a_stamp_from_before_extras_counts_as_test(checkout):
    (checkout / ".venv" / ".ndpe-setup").write_text(digest(checkout) + "\n")  # the earlier set-up always installed test
    assert setup(checkout, "train")[:2] == (0, []) and setup(checkout)[:2] == (0, [])
