"""Every benchmark row traceable: its commit, ndpe version and protocol fingerprint; every invocation recorded."""
from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest

import ndpe
from train import bench, provenance
from train.results import read_rows

from tests.test_bench import TINY, tiny

RECORDS = Path(__file__).resolve().parent.parent / "benchmarks" / "results"


def invocations(run_dir: Path) -> list[dict]:
    """The invocations as the report reads them: each one's start line and end line merged by their id."""
    lines = [json.loads(line) for line in (run_dir / "invocations.jsonl").read_text().splitlines()]
    assert len(lines) == 2 * len({line["id"] for line in lines})  # a start and an end line per invocation
    return provenance.read_invocations(run_dir)


def test_rows_carry_the_code_they_come_from_and_each_invocation_appends_a_line(tmp_path, monkeypatch):
    """A tiny run stamps every row; a resumed run appends a second line; the header lists both invocations."""
    # both start in the same second, as on a fast machine: their ids must still differ
    monkeypatch.setattr(provenance, "utc_now", lambda: "2026-01-01T00:00:00Z")
    run_dir = tmp_path / "quick"
    bench.run(tiny(tmp_path, "kinds=[none]"), "first command")
    commit, dirty = provenance.git_commit()
    expected = {"ndpe_version": ndpe.__version__, "commit": commit, "protocol": provenance.protocol_fingerprint()}
    assert re.fullmatch(r"[0-9a-f]{40}(-dirty)?|unknown", commit) and re.fullmatch(r"[0-9a-f]{12}", expected["protocol"])
    rows = read_rows(run_dir / "results.csv")
    assert rows and all({k: getattr(r, k) for k in expected} == expected for r in rows)
    (first,) = invocations(run_dir)
    assert {k: first[k] for k in expected} == expected and first["dirty"] == dirty
    assert (first["command"], first["status"], first["cells_trained"], first["rows_written"]) == (
        "first command", "finished", 2, len(rows))  # the floor cell and none
    assert first["settings"] == (run_dir / "fingerprint.txt").read_text().strip()
    assert first["machine"]["torch"] and first["machine"]["device"] == "cpu" and first["wall_s"] >= 0
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", first["start"]) and first["start"] <= first["end"]

    report = bench.run(tiny(tmp_path, "kinds=[none,rope]"), "second command")  # resumes: trains rope only
    assert [i["command"] for i in invocations(run_dir)] == ["first command", "second command"]
    second = invocations(run_dir)[1]
    rope = [r for r in read_rows(run_dir / "results.csv") if r.kind == "rope"]
    assert (second["cells_trained"], second["rows_written"]) == (1, len(rope))
    text = report.read_text()
    assert "1. `first command`" in text and "2. `second command`" in text
    assert f"{len(rows)} rows written" in text and f"{len(rope)} rows written" in text
    assert "another protocol fingerprint" not in text and "before provenance" not in text
    assert json.loads((run_dir / "run_info.json").read_text())["command"] == "second command"  # kept as it was


def test_a_dirty_checkout_is_flagged_in_rows_invocations_and_header(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "git_commit", lambda root=provenance.ROOT: ("ab" * 20 + "-dirty", True))
    report = bench.run(tiny(tmp_path, "kinds=[none]"), "test")
    rows = read_rows(tmp_path / "quick" / "results.csv")
    assert {r.commit for r in rows} == {"ab" * 20 + "-dirty"}
    assert invocations(tmp_path / "quick")[0]["dirty"] is True
    assert f"uncommitted changes (commit ...-dirty): {len(rows)} of text/copy" in report.read_text()


def git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True).stdout.strip()


@pytest.mark.skipif(shutil.which("git") is None, reason="needs git")
def test_git_commit_is_dirty_only_for_tracked_changes_to_the_code(tmp_path, monkeypatch):
    repo = tmp_path / "repo"
    (repo / "ndpe").mkdir(parents=True)
    (repo / "ndpe" / "a.py").write_text("x = 1\n")
    (repo / "README.md").write_text("readme\n")
    assert provenance.git_commit(repo) == ("unknown", None)  # not a checkout
    git(repo, "init", "-q")
    assert provenance.git_commit(repo) == ("unknown", None)  # a checkout without a commit
    git(repo, "add", ".")
    git(repo, "commit", "-qm", "first")
    head = git(repo, "rev-parse", "HEAD")
    assert provenance.git_commit(repo) == (head, False)
    (repo / "README.md").write_text("changed\n")  # outside ndpe/, models/, train/, configs/
    (repo / "ndpe" / "new.py").write_text("y = 2\n")  # untracked
    assert provenance.git_commit(repo) == (head, False)
    (repo / "ndpe" / "a.py").write_text("x = 2\n")
    assert provenance.git_commit(repo) == (head + "-dirty", True)
    git(repo, "add", "ndpe/a.py")  # staged counts too
    assert provenance.git_commit(repo) == (head + "-dirty", True)
    monkeypatch.setenv("PATH", str(tmp_path / "no-git-here"))  # git absent: unknown, never a crash
    assert provenance.git_commit(repo) == ("unknown", None)


def test_the_protocol_fingerprint_follows_the_protocol_code_only(tmp_path):
    root = tmp_path / "checkout"
    for name in ("train/data", "models", "ndpe/kinds"):
        (root / name).mkdir(parents=True)
    for name in ("train/protocol.py", "train/floors.py", "train/data/a.py", "models/m.py", "ndpe/kinds/k.py",
                 "train/bench.py"):
        (root / name).write_text(f"# {name}\n")
    first = provenance.protocol_fingerprint(root)
    assert re.fullmatch(r"[0-9a-f]{12}", first)
    (root / "train/bench.py").write_text("# the driver: how to run, not what the numbers mean\n")
    (root / "ndpe/page.js").write_text("// a page asset\n")
    (root / "ndpe/kinds/__pycache__").mkdir()
    (root / "ndpe/kinds/__pycache__/k.py").write_text("cached\n")
    assert provenance.protocol_fingerprint(root) == first
    for name in ("train/protocol.py", "train/floors.py", "train/data/a.py", "models/m.py", "ndpe/kinds/k.py"):
        text = (root / name).read_text()
        (root / name).write_text(text + "changed = True\n")
        assert provenance.protocol_fingerprint(root) != first, f"{name} does not count"
        (root / name).write_text(text)
    (root / "models/m.py").rename(root / "models/n.py")  # a file's path counts, not only its bytes
    assert provenance.protocol_fingerprint(root) != first
    (root / "train/floors.py").unlink()
    with pytest.raises(FileNotFoundError, match="floors.py is missing"):
        provenance.protocol_fingerprint(root)


def test_rows_of_another_protocol_are_flagged_per_task(tmp_path, monkeypatch):
    monkeypatch.setattr(provenance, "protocol_fingerprint", lambda root=provenance.ROOT: "abc123abc123")
    bench.run(tiny(tmp_path, "kinds=[none]"), "old code")
    old = read_rows(tmp_path / "quick" / "results.csv")
    monkeypatch.undo()
    text = bench.run(tiny(tmp_path, "kinds=[none,rope]"), "new code").read_text()
    newest = provenance.protocol_fingerprint()
    assert (f"{len(old)} rows of text/copy come from code with another protocol fingerprint (abc123abc123)** than "
            f"the newest invocation's ({newest})") in text
    assert "protocol abc123abc123" in text and f"protocol {newest}" in text  # each invocation's fingerprint


def test_an_interrupted_run_records_its_invocation(tmp_path, monkeypatch):
    real = bench.run_cell

    def stopped(args):
        if args[1].kind == "rope":
            raise KeyboardInterrupt
        return real(args)

    monkeypatch.setattr(bench, "run_cell", stopped)
    with pytest.raises(KeyboardInterrupt):
        bench.run(tiny(tmp_path), "interrupted")
    rows = read_rows(tmp_path / "quick" / "results.csv")
    (line,) = invocations(tmp_path / "quick")
    assert (line["status"], line["cells_trained"], line["rows_written"]) == ("interrupted", 2, len(rows))


KILLED_RUN = """
import os, signal, sys
from train import bench
from tests.test_bench import tiny
real = bench.run_cell
def killed(args):  # the driver killed outright, as when its session ends: no finally, no end line
    if args[1].kind == "rope":
        os.kill(os.getpid(), signal.SIGKILL)
    return real(args)
bench.run_cell = killed
bench.run(tiny(__import__("pathlib").Path(sys.argv[1])), "killed command")
"""


def test_an_invocation_killed_outright_is_listed_with_its_start(tmp_path):
    root = Path(__file__).resolve().parent.parent
    done = subprocess.run([sys.executable, "-c", KILLED_RUN, str(tmp_path)], cwd=root, capture_output=True, text=True,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == -signal.SIGKILL, done.stderr[-2000:]
    run_dir = tmp_path / "quick"
    (killed,) = provenance.read_invocations(run_dir)
    assert (killed["command"], killed["status"]) == ("killed command", provenance.KILLED) and "end" not in killed
    assert killed["protocol"] == provenance.protocol_fingerprint() and killed["start"]
    rows = read_rows(run_dir / "results.csv")
    assert rows and all(r.kind != "rope" for r in rows)  # what it wrote before the kill stays
    report = bench.run(tiny(tmp_path), "resumed")
    text = report.read_text()
    assert f"1. `killed command`: started {killed['start']}, **{provenance.KILLED}**, ran at most " in text
    assert "2. `resumed`: ended " in text
    assert [i["status"] for i in provenance.read_invocations(run_dir)] == [provenance.KILLED, "finished"]


def test_a_cut_invocation_line_is_skipped_and_the_next_starts_on_its_own_line(tmp_path):
    provenance.append_invocation(tmp_path, {"command": "one", "commit": "unknown"})
    (tmp_path / "invocations.jsonl").open("a").write('{"command": "cut mid-wr')
    provenance.append_invocation(tmp_path, {"command": "three", "commit": "c" * 40})
    back = provenance.read_invocations(tmp_path)
    assert [(i["command"], i["dirty"]) for i in back] == [("one", None), ("three", False)]
    assert provenance.read_invocations(tmp_path / "nowhere") == []


@pytest.mark.parametrize("record,preset", [("standard-v1", ["--config", str(bench.CONFIG_DIR / "standard.yaml")])])
def test_committed_records_without_provenance_load_and_write_a_report(tmp_path, record, preset):
    """A committed results.csv that predates the provenance columns (standard-v1): its rows read as "" and still
    report."""
    run_dir = tmp_path / record
    shutil.copytree(RECORDS / record, run_dir, ignore=shutil.ignore_patterns("*.png", "report.md"))
    rows = read_rows(run_dir / "results.csv")
    assert rows and {(r.ndpe_version, r.commit, r.protocol) for r in rows} == {("", "", "")}
    assert not (run_dir / "invocations.jsonl").exists()
    report = bench.main([*preset, f"out_root={tmp_path}", f"name={record}", "--report-only"])
    text = report.read_text()
    info = json.loads((run_dir / "run_info.json").read_text())
    assert f"- command: `{info['command']}`" in text  # run_info.json, as before invocations were recorded
    assert "rows from before provenance was recorded (no commit or protocol fingerprint): " in text
    assert not (run_dir / "invocations.jsonl").exists(), "--report-only records no invocation"


def test_report_only_without_any_run_is_one_line(tmp_path, capsys):
    with pytest.raises(SystemExit):
        bench.main(["--quick", *TINY, f"out_root={tmp_path}", "--report-only"])
    assert "holds no run" in capsys.readouterr().err


def test_rows_of_a_vouched_fingerprint_count_as_the_newest(tmp_path, monkeypatch):
    """A refactor changes the fingerprint; a bit-identity check recorded in equivalences.jsonl joins the two (also
    through a chain of checks), and rows of any fingerprint it did not vouch for stay flagged."""
    monkeypatch.setattr(provenance, "protocol_fingerprint", lambda root=provenance.ROOT: "aaaaaaaaaaaa")
    bench.run(tiny(tmp_path, "kinds=[none]"), "old code")
    monkeypatch.setattr(provenance, "protocol_fingerprint", lambda root=provenance.ROOT: "bbbbbbbbbbbb")
    bench.run(tiny(tmp_path, "kinds=[none,sinusoidal]"), "refactored code")
    run_dir = tmp_path / "quick"
    rows = read_rows(run_dir / "results.csv")
    n_old = sum(r.protocol == "aaaaaaaaaaaa" for r in rows)
    monkeypatch.undo()
    newest = provenance.protocol_fingerprint()
    provenance.append_equivalence(run_dir, {"old": "aaaaaaaaaaaa", "new": "bbbbbbbbbbbb", "rows": 7,
                                            "old_commit": "c" * 40, "new_commit": "d" * 40,
                                            "command": "check one", "date": "d1"})
    provenance.append_equivalence(run_dir, {"old": "bbbbbbbbbbbb", "new": newest, "rows": 9,
                                            "command": "check two", "date": "d2"})
    text = bench.run(tiny(tmp_path, "kinds=[none,sinusoidal,rope]"), "newest code").read_text()
    assert "another protocol fingerprint" not in text
    assert f"{n_old} rows come from code with protocol fingerprint aaaaaaaaaaaa, vouched identical" in text
    assert "check one" in text and "check two" in text and f"commits {'c' * 12} and {'d' * 12}" in text
    (run_dir / provenance.EQUIVALENCES).write_text("")  # no check: both older fingerprints are flagged again
    text = bench.run(tiny(tmp_path, "kinds=[none,sinusoidal,rope]"), "newest code").read_text()
    assert "(aaaaaaaaaaaa)** than" in text and "(bbbbbbbbbbbb)** than" in text
    with pytest.raises(ValueError, match="'old' and 'new'"):
        provenance.append_equivalence(run_dir, {"old": "aaaaaaaaaaaa"})


def test_a_check_that_skipped_a_task_vouches_for_every_task_but_that_one(tmp_path):
    """A change meant to alter one task (``bit_identity.py --skip``): the old code's rows of the other tasks count
    as the newest's, the skipped task's stay flagged, also through a chain whose earlier link skipped nothing."""
    from train.results import Row

    newest = provenance.protocol_fingerprint()

    def rows(protocol):
        return [Row("text", task, "rope", "-", 0, "8L", "8L", 1.0, "seq_acc", 0.5, True, 1.0, protocol=protocol)
                for task in ("text/copy", "text/reverse")]

    for link in ({"old": "aaaaaaaaaaaa", "new": newest}, {"old": "bbbbbbbbbbbb", "new": "aaaaaaaaaaaa"}):
        provenance.append_equivalence(tmp_path, {**link, "rows": 5, "command": "check", "date": "d",
                                                 **({"skipped": ["text/copy"]} if link["new"] == newest else {})})
    for protocol in ("aaaaaaaaaaaa", "bbbbbbbbbbbb"):
        text = "\n".join(provenance.header_lines(tmp_path, rows(protocol), None, "1 worker"))
        assert f"1 rows come from code with protocol fingerprint {protocol}" in text
        assert "of every task but text/copy identical" in text
        assert f"**1 rows of text/copy come from code with another protocol fingerprint ({protocol})**" in text
        assert "rows of text/reverse come from code with another" not in text
