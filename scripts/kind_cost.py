"""What a new kind costs the test suite: the tests and seconds that three new kind files add to the every-kind test
files, tier by tier, for one or more revisions side by side.

    .venv/bin/python scripts/kind_cost.py [REV ...]    # default: the working tree (".")

Each revision is cloned into a temporary directory (``.``: the working tree, as tests/test_kind_files.py copies it),
the kind files of tests/test_kind_files.py written into its ``ndpe/kinds/`` (the guide's example ``ramp``, 1D; the
smallest bias and rotary kinds, 1-3D), and its every-kind files run on those kinds alone (``-k``), in one process and
one torch thread, once per tier: the quick one (the project's default markers) and ``kinds_full``. Seconds are
pytest's per test (set-up, call, tear-down), summed and divided by the three kinds; tests/test_new_kind.py's tests
of its own kinds, which ``-k ramp`` selects too, are left out.
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))
import test_kind_files as kind_files  # noqa: E402

TIERS = {"quick": [], "kinds_full": ["-m", "kinds_full"]}


def checkout(rev: str, into: Path) -> Path:
    """The revision's files with the three kind files added, committed in a repository of its own."""
    source = ROOT
    if rev != ".":
        source = into / "source"
        subprocess.run(["git", "clone", "-q", "--shared", "--no-checkout", str(ROOT), str(source)], check=True)
        subprocess.run(["git", "-C", str(source), "checkout", "-q", rev], check=True)
    kind_files.ROOT = source  # copy_with_new_kinds copies the files of ROOT
    (into / "repo").mkdir(parents=True)
    return kind_files.copy_with_new_kinds(into / "repo")


def run_tier(repo: Path, markers: list[str], report: Path) -> tuple[Counter, Counter, float]:
    """Tests and seconds by file of the new kinds' every-kind tests in one tier, and the run's wall time."""
    files = kind_files.every_kind_files(repo)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(PYTHONPATH=str(repo), OMP_NUM_THREADS="1")
    start = time.perf_counter()
    subprocess.run([sys.executable, "-m", "pytest", "-q", "-n", "0", "-p", "no:cacheprovider", *markers,
                    "-k", " or ".join(kind_files.KINDS), f"--junitxml={report}", *files],
                   cwd=repo, env=env, capture_output=True, text=True, timeout=3600)
    wall = time.perf_counter() - start
    count, seconds = Counter(), Counter()
    for case in ET.parse(report).iter("testcase"):
        name = case.get("classname", "").rsplit(".", 1)[-1]
        if case.find("skipped") is None and name != "test_new_kind":  # its own kinds (test-ramp-rope) match -k ramp
            count[name] += 1
            seconds[name] += float(case.get("time", 0.0))
    return count, seconds, wall


def main(revs: list[str]) -> None:
    per = len(kind_files.KINDS)
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for i, rev in enumerate(revs):
            repo = checkout(rev, Path(tmp) / f"rev{i}")
            results[rev] = {tier: run_tier(repo, markers, Path(tmp) / f"rev{i}-{tier}.xml")
                            for tier, markers in TIERS.items()}
    print(f"per new kind (mean of {', '.join(kind_files.KINDS)}): tests, seconds; wall: the pytest run of all three")
    print(f"{'':24s}" + "".join(f"{rev[:12] + ' ' + tier:>32s}" for rev in revs for tier in TIERS))
    files = sorted({f for r in results.values() for c, _, _ in r.values() for f in c})
    for name in [*files, "total"]:
        cells = []
        for rev in revs:
            for tier in TIERS:
                count, seconds, wall = results[rev][tier]
                n, s = (sum(count.values()), sum(seconds.values())) if name == "total" else (count[name], seconds[name])
                cells.append(f"{n / per:8.1f} tests {s / per:6.2f} s" + (f" ({wall:4.0f} s)" if name == "total" else " " * 9))
        print(f"{name:24s}" + "".join(f"{c:>32s}" for c in cells))


if __name__ == "__main__":
    main(sys.argv[1:] or ["."])
