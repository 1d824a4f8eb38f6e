"""The cross-domain benchmark: every encoding x every domain, trained at one size, tested beyond it.

    python -m train.bench --quick                       # built-in data, ~10 min on a 2-core CPU
    python -m train.bench --config configs/bench/full.yaml     # one GPU (sized for ~10 min on an H100; untimed)
    python -m train.bench --config configs/bench/real.yaml data_root=/data   # CIFAR-10, Speech Commands
    python -m train.bench --quick name=mine kinds=[rope,alibi] seeds=[0]   # any key=value override
    python -m train.bench --config configs/bench/full.yaml executor=ray ray_address=auto gpus_per_cell=1   # a Ray cluster

What each task tests, its competence bar, floors and the claims checked live in ``train/protocol.py``.
The driver's pieces: the preset (train/bench_config.py), the grid of cells and the search (train/cells.py), the
data (train/bench_data.py) and one cell's training and evaluation (train/evaluate.py).
A *cell* (:class:`CellSpec`) is one run of one (task, kind): a model seed and a data seed. It trains a
reference model (``train.main.fit``), records its training and validation metric in distribution, and
evaluates it at the training size and at every larger test size; rotary encodings are also evaluated
with test-time scaling (position interpolation, NTK, YaRN). A floor cell computes a task's floors for
one data seed. With ``lr_search`` set, every kind first trains once per candidate learning rate
(seed 0, data seed 0, scored on the validation split at the training size) and every run uses the best. Each finished cell's rows
are appended to ``runs/<name>/results.csv`` in one fsynced write, so an interrupted benchmark
resumes where it stopped (finished cells are skipped; a cell cut off midway is redone); a run
directory refuses cells of a task trained under other settings until they are set aside (train/settings.py).
Cells run in a local process pool (``executor=local``) or as tasks on a Ray cluster (``executor=ray``,
see train/executors.py); either way workers return rows and only this driver writes results.csv.
``report.md``, the plots and ``explore.json`` (the numbers of ``ndpe explore --results``, train/explore.py) are
rewritten from the CSV at the end (``--report-only`` redoes them).
Every row carries the ndpe version, the git commit and the protocol fingerprint of the driver's code, and every
invocation appends a line to ``invocations.jsonl`` when it starts and one when it ends (train/provenance.py); the
report's header lists them, one killed before its end line as "no end recorded".
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import signal
import sys
import threading
import time
import uuid
from pathlib import Path

import torch
import yaml

import ndpe

from . import provenance
from .bench_config import CONFIG_DIR, BenchConfig, expand_kinds, kinds_for, load_bench_config
from .bench_data import bench_dataset, data_jobs, fetch_real, run_data_job, test_options
from .cells import CellSpec, cells_for, choices, fingerprint, lr_file_names, runs, search_cells, selected_rows
from .config import ConfigError
from .evaluate import cell_row, cell_grids, data_cell, pe_config, run_cell, scaled_rope, train_config
from .explore import write_bench_data
from .invocation import Dispatch, fmt_time, open_executor, plan, runs_to_train, search
from .protocol import CHANGES_AFTER_RESULTS, TASKS, Task
from .report import write_report
from .results import FLOOR, ResultsError, Row, check_finite, read_rows
from .settings import changed_tasks, check_settings, record_settings, superseded_lines, supersede

# what the benchmark's callers and tests import from train.bench (defined in its pieces)
__all__ = ["CONFIG_DIR", "FLOOR", "TASKS", "BenchConfig", "CellSpec", "ConfigError", "Task", "bench_dataset",
           "cell_grids", "cell_row", "cells_for", "choices", "data_cell", "expand_kinds", "fetch_real", "fingerprint", "header",
           "kinds_for", "load_bench_config", "main", "pe_config", "run", "run_cell", "run_cell_safe", "runs",
           "scaled_rope", "search_cells", "test_options", "train_config"]


def run_cell_safe(args: tuple) -> tuple[list[Row], float, str | None]:
    """:func:`run_cell`, turning a failure into a message so one broken cell does not stop the benchmark."""
    start = time.perf_counter()
    try:
        rows, seconds = run_cell(args)
        check_finite(rows)  # a measurement that is not a number fails its cell (retried on the next run)
        return rows, seconds, None
    except Exception as e:  # reported per cell and in report.md; the cell is retried on the next run
        _, cell, _ = args
        return [], time.perf_counter() - start, f"{cell.describe()}: {type(e).__name__}: {e}"


def run(cfg: BenchConfig, command: str, *, cell_fn=None) -> Path:
    """Train the cells ``cfg`` selects that results.csv lacks (the search first), then write the report.

    ``cell_fn`` replaces :func:`run_cell_safe` as the function run on each cell (tests; it must pickle).
    """
    import importlib.util

    from .executors import INSTALL_HINT

    if cfg.executor == "ray" and importlib.util.find_spec("ray") is None:
        raise SystemExit(f"error: {INSTALL_HINT}")
    run_dir = Path(cfg.out_root) / provenance.check_run_name(cfg.name)
    results = run_dir / "results.csv"
    check_settings(cfg, run_dir)
    device = check_device(cfg, run_dir)
    done = {r.cell for r in read_rows(results)}
    todo = plan(cfg, results)
    if todo.todo:  # before the run directory is written: data that is missing or cannot be fetched leaves nothing
        fetch_real(cfg)
    run_dir.mkdir(parents=True, exist_ok=True)
    record_settings(cfg, run_dir)
    (run_dir / "bench_config.yaml").write_text(yaml.safe_dump(dataclasses.asdict(cfg), sort_keys=False))
    executor, run_dir_w, cfg_w = open_executor(cfg, run_dir, todo.todo)
    workers_text = executor.describe()
    print(f"bench {cfg.name}: {todo.total} cells ({todo.total - todo.todo} already done), {workers_text} -> {run_dir}",
          flush=True)
    started, stamp = provenance.utc_now(), provenance.stamp()  # where every row of this invocation comes from
    dispatch = Dispatch(cfg, cfg_w, run_dir, run_dir_w, executor, cell_fn or run_cell_safe, {**stamp, "device": device},
                        todo.total, todo.todo)
    invocation = {"id": f"{started}-{uuid.uuid4().hex[:8]}", "command": command, "start": started, **stamp,  # its start
                  "settings": fingerprint(cfg), "executor": workers_text, "machine": provenance.machine(cfg.device)}
    # first: a process killed outright (SIGKILL) still leaves this line; the end line (same id) stands for it after
    provenance.append_invocation(run_dir, {**invocation, "status": provenance.STARTED})
    status = "interrupted"
    try:
        data = data_jobs(cfg_w) if todo.todo else []
        print(f"generating {len(data)} built-in datasets (cached in {executor.where_data(run_dir_w / 'data')})",
              flush=True)
        executor.prepare(run_data_job, data)
        print(f"data ready after {fmt_time(time.perf_counter() - dispatch.start)}", flush=True)
        search(cfg, results, dispatch, todo.first, done)
        dispatch(runs_to_train(cfg, run_dir, todo.later, dispatch))
        status = "failed" if dispatch.failures else "finished"
    finally:
        executor.close(done=status != "interrupted")
        provenance.append_invocation(run_dir, {  # also when interrupted: what it wrote stays traceable
            **invocation, "end": provenance.utc_now(), "status": status,
            "wall_s": round(time.perf_counter() - dispatch.start, 1), "cells_trained": len(dispatch.written),
            "rows_written": sum(dispatch.written), "cells_failed": len(dispatch.failures)})
    return finish(cfg, run_dir, command, dispatch, workers_text if todo.todo and cfg.executor == "ray" else None)


def finish(cfg: BenchConfig, run_dir: Path, command: str, dispatch: Dispatch, ray_workers: str | None) -> Path:
    """The report and the explorer's tab from results.csv; the failed cells listed, and exit status 1 if any."""
    wall, failures = time.perf_counter() - dispatch.start, dispatch.failures
    info_path = run_dir / "run_info.json"
    if dispatch.todo or not info_path.exists():  # an invocation that trained nothing keeps the last one's record
        info = {"command": command, "date": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()), "wall_s": round(wall),
                **({"executor": ray_workers} if ray_workers else {})}
        info_path.write_text(json.dumps(info) + "\n")
    head = header(cfg, provenance.read_run_info(run_dir))
    if failures:
        head += "\n- **failed cells** (rerun the same command to retry them):\n" + "\n".join(f"  - {f}" for f in failures)
    report = write_report(run_dir, head, **report_options(cfg))
    write_explorer_tab(run_dir)
    print(f"wrote {run_dir / 'results.csv'} and {report} in {fmt_time(wall)}"
          + (f"; {len(failures)} cell(s) FAILED" if failures else ""), flush=True)
    if failures:
        raise SystemExit(1)
    return report


def report_options(cfg: BenchConfig) -> dict:
    """write_report's options from the preset: its rows, the test items, the search's choices and final budgets."""
    return {"select": lambda rows: selected_rows(cfg, rows), "test_items": cfg.test_items,
            "choose": (lambda rows: choices(cfg, rows)) if cfg.lr_search else None,
            "final_budgets": {t: cfg.steps_for(t) for t in cfg.final_budgets}}


def write_explorer_tab(run_dir: Path) -> None:
    """The explorer's benchmark tab (``ndpe explore --results``), from the rows the report read (none: no tab)."""
    if read_rows(run_dir / "results.csv"):
        write_bench_data(run_dir)


def option_text(opts: dict) -> str:
    """``{"theta": 100.0, "causal": True}`` -> ``causal=True, theta=100.0`` (the report's options column)."""
    return ", ".join(f"{k}={v}" for k, v in sorted(opts.items()))


def header(cfg: BenchConfig, info: dict | None) -> str:
    """The report's first lines: every invocation that wrote the run (invocations.jsonl; else ``info``, from
    run_info.json) and the rows of other code (train/provenance.py), the machine, the protocol and the selection,
    and the options each kind gets on each task with the reason."""
    cpu = platform.processor() or platform.machine()
    gpu = torch.cuda.get_device_name() if cfg.device != "cpu" and torch.cuda.is_available() else "none"
    search = (f"learning rate searched per (task, kind) over {cfg.lr_search}" + (
        f" (per task: {cfg.lr_searches})" if cfg.lr_searches else "") + (
        f" (weight decay per task: {cfg.wd_search})" if cfg.wd_search else "") if cfg.lr_search else
              f"learning rates from {' and '.join(lr_file_names(cfg))}" if cfg.lr_file else f"lr {cfg.lr} (per task: {cfg.lrs or 'none'})")
    run_dir = Path(cfg.out_root) / cfg.name
    lines = [
        f"# ndpe benchmark report: `{cfg.name}`", "",
        *provenance.header_lines(run_dir, selected_rows(cfg, read_rows(run_dir / "results.csv")), info,
                                 f"{cfg.workers} worker process(es)"),
        *superseded_lines(run_dir),
        f"- machine: {platform.system()} {cpu}, {os.cpu_count()} CPU cores, GPU: {gpu}",
        f"- versions: python {platform.python_version()}, torch {torch.__version__}, ndpe {ndpe.__version__}",
        f"- runs per (task, kind): {len(cfg.seeds)} (model seeds {cfg.seeds}, data seeds {cfg.data_seeds} in turn"
        + (f"; the first {cfg.other_runs} for the kinds no claim on the task compares" if cfg.other_runs else "") + "); "
        f"model: dim {cfg.dim}, depth {cfg.depth}, heads {cfg.heads} (per task: {cfg.models or 'none'}; the task's "
        "own options win); batch "
        f"{cfg.batch_size}; {search}; weight decay {cfg.weight_decay}; steps: {cfg.default_steps} (per task: "
        f"{cfg.steps or 'none'}); {cfg.train_items} training items (per task: {cfg.items or 'none'}; fewer where the dataset has fewer: digits 1,077), "
        f"{cfg.test_items} test items per size (fewer where the dataset has fewer)",
        "- protocol (train/protocol.py): each model is trained at the first size and evaluated at every size; "
        "`(pi)`, `(ntk)`, `(yarn)` rows are the same rope model evaluated with test-time scaling; floors are computed "
        "from the data of each data seed (train/floors.py).",
        "- changed after results were seen (train/protocol.py CHANGES_AFTER_RESULTS): "
        + "; ".join(CHANGES_AFTER_RESULTS) + ".", "",
        "## Tasks, bars and the encodings compared", "",
        "| task | protocol | competence bar | order-blind floor | encodings | why these |", "|---|---|---|---|---|---|",
    ]
    for name in cfg.tasks:
        task = TASKS[name]
        opts = {k: v for k, v in task.model_opts.items() if k in ("heads", "patch_size", "tubelet", "pool", "causal")}
        lines.append(f"| {name} | {task.protocol}{f' (model: {opts})' if opts else ''} | {task.bar.text} | "
                     f"{task.order_blind} | {', '.join(kinds_for(cfg, name))} | {cfg.why.get(name, '')} |")
    lines += ["", "## Options per kind and task", "",
              "What a kind gets beyond its defaults, and why: the protocol's choices (train/protocol.py) and what "
              "the kind needs for the task (causal attention, table sizes).", "",
              "| task | kind | options | reason |", "|---|---|---|---|"]
    for name in cfg.tasks:
        task = TASKS[name]
        if task.conv:
            for kind, opts in task.archs.items():
                lines.append(f"| {name} | {kind} | {option_text(opts)} | Liu et al. 2018's networks, the same init rule "
                             "for both |")
            continue
        try:  # the values follow the run's grids, read from its data cache (cheap once the run built it)
            grids, known = cell_grids(cfg, task, Path(cfg.out_root) / cfg.name), True
        except (KeyError, FileNotFoundError):  # a dataset whose extra is not installed, or not downloaded here
            grids, known = ((8,) * task.dims, (16,) * task.dims), False
        for kind in kinds_for(cfg, name):
            base = kind.split("+")[0]
            opts = pe_config(kind, task, *grids)["options"]
            if not opts:
                continue
            reason = task.kind_options[base].reason if base in task.kind_options else "what the kind needs for the task"
            text = option_text(opts) if known else ", ".join(sorted(opts)) + " (values: the task's data is not here)"
            lines.append(f"| {name} | {kind} | {text} | {reason} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> Path:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--quick", action="store_true", help="the CPU preset, configs/bench/quick.yaml")
    parser.add_argument("--config", default=None, help="a preset YAML (configs/bench/*.yaml)")
    parser.add_argument("--report-only", action="store_true", help="rewrite report.md from results.csv")
    parser.add_argument("--supersede", action="append", default=[], metavar="TASK",
                        help="set a task's rows under earlier settings aside (kept in superseded/), then run")
    parser.add_argument("overrides", nargs="*", help="key=value overrides of the preset (e.g. seeds=[0])")
    args = parser.parse_args(argv)
    if args.quick and args.config:
        parser.error("--quick is configs/bench/quick.yaml: give one of --quick and --config")
    path = CONFIG_DIR / "quick.yaml" if args.quick else args.config
    try:
        cfg = load_bench_config(path, args.overrides)
        provenance.check_run_name(cfg.name)
    except (ConfigError, FileNotFoundError) as e:
        parser.error(str(e))
    command = "python -m train.bench " + " ".join(argv if argv is not None else sys.argv[1:])
    on_main = threading.current_thread() is threading.main_thread()  # signal handlers are set there only
    previous = signal.signal(signal.SIGTERM, _terminate) if on_main else None
    try:
        if args.report_only:
            run_dir = Path(cfg.out_root) / cfg.name
            info = provenance.read_run_info(run_dir)
            if info is None and not provenance.read_invocations(run_dir):
                parser.error(f"{run_dir} holds no run (run_info.json, {provenance.INVOCATIONS}): run the benchmark "
                             "first")
            report = write_report(run_dir, header(cfg, info), **report_options(cfg))
            write_explorer_tab(run_dir)
            return report
        for task in args.supersede:
            set_aside(cfg, task)
        return run(cfg, command)
    except (ConfigError, ResultsError, provenance.ProvenanceError, OSError) as e:  # other settings, a damaged file
        print(f"{parser.prog}: error: {' '.join(str(e).split())}", file=sys.stderr, flush=True)
        raise SystemExit(2) from None
    except Terminated:  # run()'s finally wrote the invocation's end line, status "interrupted"
        print(f"{parser.prog}: terminated (SIGTERM); the same command resumes the run", file=sys.stderr, flush=True)
        raise SystemExit(128 + signal.SIGTERM) from None
    finally:
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def check_device(cfg: BenchConfig, run_dir: Path) -> str:
    """Refuse a run directory holding rows of the other device class (before anything is moved or trained); returns
    the device label of this invocation's rows."""
    device = provenance.device_label(cfg.device, cfg.executor, cfg.gpus_per_cell)
    provenance.check_device(read_rows(run_dir / "results.csv"), device, run_dir / "results.csv")
    return device


def set_aside(cfg: BenchConfig, task: str) -> None:
    """``--supersede``: only a task of the preset whose rows were trained under other settings is set aside."""
    run_dir = Path(cfg.out_root) / cfg.name
    check_device(cfg, run_dir)
    if task not in changed_tasks(cfg, run_dir):
        raise ConfigError(f"--supersede {task}: expected a task of the preset whose rows in {run_dir} were trained "
                          "under other settings; its settings are unchanged (or it has no rows), so nothing is set aside")
    print(f"set aside {task}'s rows under earlier settings in {supersede(run_dir, task)}", flush=True)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised in the driver as Ctrl-C's KeyboardInterrupt is: the pool is stopped and the invocation's end
    line written (status ``interrupted``) before the process exits."""


def _terminate(signum, frame):
    raise Terminated()


if __name__ == "__main__":
    main()
