"""Bit identity of the benchmark's rows: the same small sample of cells run by two checkouts, results.csv compared.

    OMP_NUM_THREADS=1 python benchmarks/bit_identity.py --old /tmp/old-checkout --new . --out /tmp/bit_identity

Each checkout runs ``python -m train.bench --config configs/bench/standard.yaml`` with the same overrides (its own
code, its own ``out_root`` and data cache, one worker): every task of the preset with the kinds of :data:`KINDS`
(rope wherever the task has it, so its test-time scalings are compared too; the coord tasks' two conv nets), one
model seed and one data seed, a one-point learning-rate search (a search cell per (task, kind)), few steps and small
datasets (the coord tasks search their two weight decays). Then the two results.csv are read as text and every row
is matched by its cell and measurement (task, kind, variant, seed, data seed, split, sizes, lr, weight decay); each
column but the timing and the provenance ones (:data:`IGNORED`) must be equal to the letter, so a value equal in its
17 significant digits is the same float.
MNIST tasks need ``NDPE_MNIST_FILES`` (a folder of the four official files) in the environment.
Exit status 0 when every row is identical and both sides have the same rows, 1 otherwise.

``--vouch RUN_DIR`` (a record's run directory): when every row is identical, the two checkouts' protocol
fingerprints are recorded as equivalent in ``RUN_DIR/equivalences.jsonl`` (train/provenance.py), so the report
counts the record's rows written by the old code as the new code's and names this check; nothing is recorded
when a row differs.

``--skip TASK`` (repeatable) leaves a task out of the sample: a change meant to alter that task's numbers (its
protocol) and no other's. The equivalence records it as ``skipped``, and the report keeps that task's rows of the
old code flagged; ``--vouch`` refuses while the run directory still holds them (move them out first).
"""
from __future__ import annotations

import argparse
import csv
import io
import os
import subprocess
import sys
import time
from pathlib import Path

import yaml  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # train.provenance of this checkout
from train import provenance  # noqa: E402
from train.results import MEASUREMENT  # noqa: E402

PRESET = Path(__file__).resolve().parents[1] / "configs" / "bench" / "standard.yaml"

# the kinds run per task (standard.yaml's task_kinds replaced): rope where the task has it, beside one other kind;
# relative on the LM too, whose options there (T5's buckets from the context) are the LM's own
KINDS = {"image/shapes-zoom": ["rope", "learned"], "image/digits-zoom": ["rope@centered"],
         "image/mnist-zoom": ["rope"], "image/mnist-pair": ["rope-mixed"], "audio/tones": ["rope", "sinusoidal"],
         "text/copy": ["rope", "alibi"], "text/reverse": ["relative"],
         "text/stdlib_lm": ["rope", "rope+nope3", "relative"],
         "video/trajectory": ["rope", "vrope"], "video/trajectory-long": ["videorope"]}
# keys a checkout's preset may set that the sample replaces as a whole (a key newer than some checkouts, so it is
# reset only where the checkout's preset has it): the LM's own grid gives way to the sample's one-point search
RESET = {"lr_searches": "{}"}
# when, where and by which code, not what was measured
IGNORED = ("train_time_s", "ndpe_version", "commit", "protocol", "device")
KEY = MEASUREMENT  # what identifies a row: its cell and measurement (train/results.py)


def overrides(out_root: Path, steps: int, items: int, test_items: int, skip: tuple[str, ...] = ()) -> list[str]:
    kinds = {t: k for t, k in KINDS.items() if t not in skip}
    task_kinds = "{" + ", ".join(f"{t}: [{', '.join(k)}]" for t, k in kinds.items()) + "}"
    tasks = [t for t in yaml.safe_load(PRESET.read_text())["tasks"] if t not in skip]  # the coord tasks too
    return [f"out_root={out_root}", "name=bit_identity", *([f"tasks=[{', '.join(tasks)}]"] if skip else []),
            f"task_kinds={task_kinds}",
            "seeds=[0]", "data_seeds=[0]", "workers=1", "steps={}", f"default_steps={steps}", "items={}",
            f"train_items={items}", f"test_items={test_items}", "lr_search=[0.002]", "lr_extend=0",
            "curve_points=0"]  # a few steps are no budget for the plateau rule (curves train the same: tested)


def resets(preset: dict) -> list[str]:
    """The overrides that reset :data:`RESET`'s keys where a checkout's preset (its standard.yaml) sets them."""
    return [f"{key}={value}" for key, value in RESET.items() if key in preset]


def run_checkout(checkout: Path, out_root: Path, args: argparse.Namespace) -> Path:
    """Run the sample with ``checkout``'s own code (its root first on the path); returns its results.csv."""
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
           "NDPE_DATA": str(args.out / "data")}  # the data folder (MNIST, staged from NDPE_MNIST_FILES) of both runs
    code = "import ndpe, train.bench; print(ndpe.__file__, train.bench.__file__)"
    where = subprocess.run([sys.executable, "-c", code], cwd=checkout, env=env, capture_output=True, text=True,
                           check=True).stdout.split()
    if not all(Path(p).resolve().is_relative_to(checkout.resolve()) for p in where):
        raise SystemExit(f"error: {checkout} does not import its own code ({where}): another ndpe is first on the path")
    preset = yaml.safe_load((checkout / "configs" / "bench" / "standard.yaml").read_text())
    command = [sys.executable, "-m", "train.bench", "--config", "configs/bench/standard.yaml",
               *overrides(out_root, args.steps, args.items, args.test_items, tuple(args.skip)),
               *resets(preset)]
    print(f"{checkout}: {' '.join(command[1:])}", flush=True)
    start = time.perf_counter()
    with open(out_root.with_suffix(".log"), "w") as log:
        subprocess.run(command, cwd=checkout, env=env, stdout=log, stderr=subprocess.STDOUT, check=True)
    print(f"{checkout}: done in {time.perf_counter() - start:.0f} s", flush=True)
    return out_root / "bit_identity" / "results.csv"


def read(path: Path, tasks: set[str] | None = None) -> dict[tuple, dict[str, str]]:
    """The rows of a results.csv (of ``tasks`` only, when given), keyed by :data:`KEY`. A file that is not UTF-8
    text, lacks the key's columns, ends inside a row (no newline at its end) or holds a row of another width or two
    rows of one key is refused in one line (``SystemExit``): a row cut inside the ignored columns compares equal."""
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as e:
        raise SystemExit(f"error: {path}: byte {e.start} is not UTF-8 text; expected a results.csv") from None
    except OSError as e:
        raise SystemExit(f"error: {path} cannot be read ({e.strerror or e}); expected a results.csv") from None
    reader = csv.reader(io.StringIO(text, newline=""))
    header = next(reader, [])
    if missing := [k for k in KEY if k not in header]:
        raise SystemExit(f"error: {path}: line 1 is not a results header (it lacks {', '.join(missing)})")
    if not text.endswith("\n"):
        raise SystemExit(f"error: {path}: the last row is cut (no newline at its end); rerun its cell or drop it")
    rows = []
    for values in reader:
        if len(values) != len(header):
            raise SystemExit(f"error: {path}: line {reader.line_num} has {len(values)} fields, expected "
                             f"{len(header)} (a cut or damaged row)")
        row = dict(zip(header, values))
        if tasks is None or row["task"] in tasks:
            rows.append(row)
    keyed = {tuple(r[k] for k in KEY): r for r in rows}
    if len(keyed) != len(rows):
        raise SystemExit(f"error: {path} holds two rows with the same key {KEY}")
    return keyed


def compare(old: dict[tuple, dict[str, str]], new: dict[tuple, dict[str, str]]) -> tuple[int, int, list[str]]:
    """(rows compared, rows identical, what differs) on every column but :data:`IGNORED`."""
    problems = [f"only in old: {k}" for k in sorted(set(old) - set(new))]
    problems += [f"only in new: {k}" for k in sorted(set(new) - set(old))]
    same = 0
    for key in sorted(set(old) & set(new)):
        columns = sorted((set(old[key]) | set(new[key])) - set(IGNORED))
        differ = [c for c in columns if old[key].get(c) != new[key].get(c)]
        same += not differ
        problems += [f"{key}: {c} {old[key].get(c)!r} (old) != {new[key].get(c)!r} (new)" for c in differ]
    return len(set(old) & set(new)), same, problems


def skipped_rows_left(run_dir: Path, skip: list[str], old_fingerprint: str) -> dict[str, int]:
    """Rows of the skipped tasks that ``run_dir`` holds from the old code: {task: count}."""
    with open(run_dir / "results.csv", newline="") as f:
        rows = [r for r in csv.DictReader(f) if r["task"] in skip and r.get("protocol") == old_fingerprint]
    return {t: n for t in skip if (n := sum(r["task"] == t for r in rows))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--old", type=Path, required=True, help="the checkout of the old code")
    parser.add_argument("--new", type=Path, required=True, help="the checkout of the new code")
    parser.add_argument("--out", type=Path, required=True, help="a folder for both runs (old/, new/, data/)")
    parser.add_argument("--steps", type=int, default=12, help="optimizer steps of every cell")
    parser.add_argument("--items", type=int, default=128, help="training items of every built-in dataset")
    parser.add_argument("--test-items", type=int, default=32, help="items of every val / test split")
    parser.add_argument("--vouch", type=Path, metavar="RUN_DIR",
                        help="on identity, record the two protocol fingerprints as equivalent in RUN_DIR")
    parser.add_argument("--skip", action="append", default=[], metavar="TASK",
                        help="a task the change alters by design: left out of the sample (repeatable)")
    args = parser.parse_args(argv)
    if unknown := sorted(set(args.skip) - set(KINDS)):
        parser.error(f"--skip takes tasks of the sample {sorted(KINDS)}, got {unknown}")
    if args.vouch is not None and not (args.vouch / "results.csv").is_file():
        parser.error(f"--vouch expects a run directory holding results.csv, got {args.vouch}")
    if args.vouch is not None and args.skip and (left := skipped_rows_left(
            args.vouch, args.skip, provenance.protocol_fingerprint(args.old.resolve()))):
        parser.error(f"--vouch with --skip: {args.vouch} still holds the old code's rows of the skipped tasks {left}; "
                     "move them out of its results.csv first (the check does not vouch for them)")
    if "NDPE_MNIST_FILES" not in os.environ:
        parser.error("the MNIST tasks need NDPE_MNIST_FILES=<folder of the four official files>")
    args.out.mkdir(parents=True, exist_ok=True)
    paths = {side: run_checkout(checkout.resolve(), (args.out / side).resolve(), args)
             for side, checkout in (("old", args.old), ("new", args.new))}
    compared, same, problems = compare(read(paths["old"]), read(paths["new"]))
    for line in problems:
        print(line)
    print(f"{compared} rows compared, {same} identical, {len(problems)} difference(s) "
          f"(ignored columns: {', '.join(IGNORED)})")
    identical = bool(compared) and same == compared and not problems
    if identical and args.vouch is not None:
        fingerprints = {side: provenance.protocol_fingerprint(checkout.resolve())
                        for side, checkout in (("old", args.old), ("new", args.new))}
        command = " ".join(["python benchmarks/bit_identity.py", *(argv if argv is not None else sys.argv[1:])])
        commits = {f"{side}_commit": provenance.git_commit(checkout.resolve())[0]
                   for side, checkout in (("old", args.old), ("new", args.new))}
        provenance.append_equivalence(args.vouch, {**fingerprints, **commits, "rows": compared, "command": command,
                                                   "date": provenance.utc_now(),
                                                   **({"skipped": sorted(args.skip)} if args.skip else {})})
        print(f"recorded in {args.vouch / provenance.EQUIVALENCES}: {fingerprints['old']} = {fingerprints['new']}")
    return 0 if identical else 1


if __name__ == "__main__":
    raise SystemExit(main())
