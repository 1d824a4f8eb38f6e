"""A task of a record run again from nothing, checked against the record: the same numbers, and the time it took
against what ``record_cost.py`` priced it at.

    python -m train.bench --config configs/bench/standard.yaml out_root=/tmp/rerun name=lm "tasks=[text/stdlib_lm]"
    python benchmarks/rerun_check.py --record benchmarks/results/standard --rerun /tmp/rerun/lm

Rows: every row of the rerun is matched with the record's by its cell and measurement (``bit_identity.KEY``) and
compared on every column but the timing and the provenance ones (``bit_identity.IGNORED``); the record's rows of the
rerun's tasks that the rerun lacks are counted too. Time: the rerun's finished invocations (invocations.jsonl), the
training time of its cells over its workers (so the overhead of evaluation, data, floors and start-up), and the
record's price for the same preset and tasks (``record_cost.estimate``: the record's median cell times, its
extension points apart). Exit status 0 when every row is identical and none is missing, 1 otherwise.
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))  # bit_identity, record_cost beside this file
import bit_identity  # noqa: E402
import record_cost  # noqa: E402

from train.bench import load_bench_config  # noqa: E402
from train.config import ConfigError  # noqa: E402
from train.provenance import ProvenanceError, read_invocations  # noqa: E402
from train.results import FLOOR, ResultsError, read_rows  # noqa: E402


def compare(record: Path, rerun: Path) -> tuple[int, int, list[str], set[str]]:
    """(rows compared, identical, what differs or is missing, the rerun's tasks)."""
    new = bit_identity.read(rerun / "results.csv")
    tasks = {key[0] for key in new}
    compared, same, problems = bit_identity.compare(bit_identity.read(record / "results.csv", tasks), new)
    return compared, same, [p.replace("only in old", "only in the record").replace("only in new", "only in the rerun")
                            .replace("(old)", "(record)").replace("(new)", "(rerun)") for p in problems], tasks


def timing(record: Path, rerun: Path) -> dict[str, float]:
    """The rerun's wall time and its cells' training time over its workers (hours), and the record's price for the
    rerun's preset: training hours and the record's extension points."""
    cfg = load_bench_config(rerun / "bench_config.yaml", [])
    wall = sum(i.get("wall_s", 0.0) for i in read_invocations(rerun) if i.get("status") == "finished")
    cells: dict = {}
    for r in read_rows(rerun / "results.csv"):
        if r.kind != FLOOR and r.train_time_s:
            cells[r.cell] = r.train_time_s  # one time per cell (its rows repeat it)
    tasks, _ = record_cost.estimate(cfg, read_rows(record / "results.csv"), {})
    per_hour = 3600.0 * cfg.workers
    return {"wall_h": wall / 3600.0, "train_h": sum(cells.values()) / per_hour, "cells": len(cells),
            "priced_h": sum(t["run_s"] + t["search_s"] for t in tasks) / per_hour,
            "priced_extension_h": sum(t["extension_s"] for t in tasks) / per_hour}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--record", required=True, type=Path, help="the record's run directory")
    parser.add_argument("--rerun", required=True, type=Path, help="the rerun's run directory")
    args = parser.parse_args(argv)
    for d in (args.record, args.rerun):
        if not (d / "results.csv").is_file():
            parser.error(f"expected a run directory holding results.csv, got {d}")
    if not (args.rerun / "bench_config.yaml").is_file():
        parser.error(f"expected the rerun's bench_config.yaml in {args.rerun} (train.bench writes it)")
    try:
        compared, same, problems, tasks = compare(args.record, args.rerun)
        t = timing(args.record, args.rerun)
    except (ConfigError, ResultsError, ProvenanceError, UnicodeDecodeError, OSError) as e:  # a damaged file
        parser.exit(2, f"{parser.prog}: error: {' '.join(str(e).split())}\n")
    for line in problems:
        print(line)
    print(f"{', '.join(sorted(tasks))}: {compared} rows compared, {same} identical, {len(problems)} difference(s) or "
          f"missing row(s) (ignored columns: {', '.join(bit_identity.IGNORED)})")
    overhead = (f"overhead {t['wall_h'] / t['train_h'] - 1:.1%}" if t["wall_h"] and t["train_h"] else
                "no finished invocation yet" if not t["wall_h"] else "no cell trained")
    print(f"rerun: {t['wall_h']:.2f} h wall over its finished invocations; its {t['cells']} cells trained "
          f"{t['train_h']:.2f} h over its workers ({overhead}); the record priced it at "
          f"{t['priced_h']:.2f} h + {t['priced_extension_h']:.2f} h of extension points")
    return 0 if compared and same == compared and not problems else 1


if __name__ == "__main__":
    raise SystemExit(main())
