"""A run directory's settings per task, and the record of a task's rows set aside when its settings change.

A cell's numbers depend on the preset's global settings and on its own task's entries of the per-task keys
(:data:`PER_TASK`): ``fingerprints.json`` holds one settings hash per task (:func:`task_fingerprint`), so raising
one task's steps (the plateau rule's remedy, train/curves.py) leaves every other task's rows resumable, and the
raised task is refused until its rows under the old settings are set aside. Setting aside never deletes:
:func:`supersede` moves the task's rows and curves into ``superseded/<task>-<hash>/`` inside the run directory
(its own results.csv and curves file, kept in the record; the report's header lists them), and the task is trained
anew under the preset's settings.

    python -m train.bench --config configs/bench/standard.yaml --supersede audio/tones   # then run as before

A run directory written before per-task hashes has only ``fingerprint.txt`` (the whole preset's hash): it is
checked as before, and the first invocation whose preset matches it writes ``fingerprints.json``.
"""
from __future__ import annotations

import json
import os
from pathlib import Path

from .bench_config import BenchConfig
from .cells import fingerprint, settings_fields, settings_hash
from .config import ConfigError
from .curves import CURVES
from .protocol import TASKS
from .results import Row, read_rows, write_rows

FINGERPRINTS = "fingerprints.json"
SUPERSEDED = "superseded"
PER_TASK = ("steps", "items", "lrs", "lr_searches", "wd_search", "models")  # task -> value: one task's entry counts


def task_fingerprint(cfg: BenchConfig, task: str) -> str:
    """The settings hash of one task's cells: the preset's global keys and this task's entries of the per-task ones."""
    fields = settings_fields(cfg)
    for key in PER_TASK:
        fields[key] = getattr(cfg, key).get(task)
    if cfg.lr_file:  # the choices of this task's kinds
        fields["lr_file"] = [(name, v) for name, v in fields["lr_file"] if name.startswith(f"{task}|")]
    return settings_hash(fields)


def stored(run_dir: Path) -> dict[str, str] | None:
    """``fingerprints.json``: task -> settings hash (None when the run directory predates it)."""
    path = Path(run_dir) / FINGERPRINTS
    if not path.exists():
        return None
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError) as e:
        raise ConfigError(f"{path} is damaged ({e}); restore it from the record's history") from None
    if not (isinstance(data, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in data.items())):
        raise ConfigError(f"{path} must map task names to settings hashes; restore it from the record's history")
    return data


def changed_tasks(cfg: BenchConfig, run_dir: Path) -> list[str]:
    """The preset's tasks whose rows in ``run_dir`` were trained under other settings (an empty list: resumable).
    A directory without per-task hashes counts every task with rows as changed when the whole preset's hash differs."""
    with_rows = {r.task for r in read_rows(Path(run_dir) / "results.csv")}
    hashes = stored(run_dir)
    if hashes is None:
        path = Path(run_dir) / "fingerprint.txt"
        same = not path.exists() or path.read_text().strip() == fingerprint(cfg)
        return [] if same else [t for t in cfg.tasks if t in with_rows]
    return [t for t in cfg.tasks if t in with_rows and hashes.get(t) != task_fingerprint(cfg, t)]  # no hash: unknown


def check_settings(cfg: BenchConfig, run_dir: Path) -> None:
    """Refuse to add cells trained under other settings to a task's rows, naming the tasks and the two ways on."""
    changed = changed_tasks(cfg, run_dir)
    if changed:
        raise ConfigError(f"{run_dir} holds results of {', '.join(changed)} trained with other settings (see its "
                          f"bench_config.yaml); set them aside with --supersede {' --supersede '.join(changed)} (kept "
                          f"in {SUPERSEDED}/) to train them anew, or pass name=<new name> to start another run")


def record_settings(cfg: BenchConfig, run_dir: Path) -> None:
    """Write the whole preset's hash (fingerprint.txt) and each of its tasks' (fingerprints.json, others kept). A
    directory that had only the whole hash (checked equal before this) gets every known task's: the whole hash
    covered all of them, whatever the selection."""
    hashes = stored(run_dir)
    tasks = cfg.tasks if hashes is not None else sorted(TASKS)
    hashes = {**(hashes or {}), **{t: task_fingerprint(cfg, t) for t in tasks}}
    _write(Path(run_dir) / FINGERPRINTS, json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    (Path(run_dir) / "fingerprint.txt").write_text(fingerprint(cfg) + "\n")


def supersede(run_dir: Path, task: str) -> Path:
    """Move ``task``'s rows and curves out of the run into ``superseded/<task>-<its hash>/`` (merged with what an
    interrupted earlier call moved there), then forget its hash; returns that folder. Interrupted at any point, the
    rows are in results.csv, in the folder, or in both (a second call finishes the move); never in neither."""
    run_dir = Path(run_dir)
    rows = read_rows(run_dir / "results.csv")
    mine = [r for r in rows if r.task == task]
    if not mine:
        raise ConfigError(f"{run_dir} holds no rows of {task}: nothing to set aside")
    hashes = stored(run_dir) or {}
    tag = hashes.get(task) or (run_dir / "fingerprint.txt").read_text().strip()
    folder = run_dir / SUPERSEDED / f"{task.replace('/', '_')}-{tag}"
    folder.mkdir(parents=True, exist_ok=True)
    kept = read_rows(folder / "results.csv")
    keys = {_measurement(r) for r in kept}
    write_rows(folder / "results.csv", [*kept, *[r for r in mine if _measurement(r) not in keys]])
    curves = run_dir / CURVES / (task.replace("/", "_") + ".jsonl")
    if curves.exists():
        target = folder / CURVES / curves.name
        target.parent.mkdir(exist_ok=True)
        _write(target, (target.read_text() if target.exists() else "") + curves.read_text())
        curves.unlink()
    write_rows(run_dir / "results.csv", [r for r in rows if r.task != task])
    if task in hashes:
        del hashes[task]
        _write(run_dir / FINGERPRINTS, json.dumps(hashes, indent=1, sort_keys=True) + "\n")
    return folder


def superseded_lines(run_dir: Path) -> list[str]:
    """The report's lines for the rows set aside: folder, rows, the tasks they hold."""
    lines = []
    for folder in sorted((Path(run_dir) / SUPERSEDED).glob("*/")):
        rows = read_rows(folder / "results.csv")
        if rows:
            lines.append(f"  - `{SUPERSEDED}/{folder.name}`: {len(rows)} rows of {', '.join(sorted({r.task for r in rows}))} "
                         "set aside when the task's settings changed (train/settings.py)")
    return (["- rows set aside under earlier settings (kept, not reported):", *lines] if lines else [])


def _measurement(r: Row) -> tuple:
    return (r.cell, r.variant, r.split, r.test_size)


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w") as f:
        f.write(text)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)
