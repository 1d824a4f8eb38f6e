"""Where each benchmark number comes from: the code's commit, the ndpe version, the protocol fingerprint.

**Rows.** The driver (train/bench.py) stamps every row its cells return, before it writes them to results.csv
(workers may run on other machines; the driver's checkout is the one recorded), with :func:`stamp`:

- ``ndpe_version``: ``ndpe.__version__``;
- ``commit``: the 40-hex git HEAD of the checkout, with ``-dirty`` appended when tracked files under
  :data:`WATCHED` (ndpe/, models/, train/, configs/) differ from HEAD, staged or not; ``unknown`` when git is
  missing or the code is not in a git checkout;
- ``protocol``: :func:`protocol_fingerprint`, a hash of the code that says what the numbers mean.

- ``device``: where the cells ran, ``cpu`` or the GPU's name (:func:`device_label`); a run directory holds the rows
  of one device class only, CPU or GPU (:func:`check_device`).

Rows written before these columns existed hold "" in each ("from before provenance was recorded").

**Invocations.** Every ``python -m train.bench`` run appends one JSON object per line to
``<run dir>/invocations.jsonl`` when it ends (finished, failed or interrupted by an exception, Ctrl-C or
SIGTERM, which the driver raises as Ctrl-C: it is written from a ``finally``), in one ``write`` to a file opened
for appending, then flushed and fsynced. A
process killed outright loses only its own line; a line cut mid-write is skipped when read, and the next
append starts on a new line. ``--report-only`` appends nothing: it rewrites only report.md and the plots,
which it derives from results.csv and this file. The keys of a line:

``command``, ``start``, ``end`` (ISO 8601 UTC), ``wall_s``, ``status`` (finished | failed | interrupted),
``commit`` (as in the rows), ``dirty`` (true, false, or null when unknown), ``ndpe_version``, ``protocol``,
``settings`` (the settings fingerprint of fingerprint.txt), ``cells_trained``, ``rows_written``,
``cells_failed``, ``executor``, ``machine`` (``platform``, ``cpu``, ``cpu_count``, ``python``, ``torch``,
``device``, ``gpu``).

The report's header lists every invocation (:func:`header_lines`) and counts, per task, the rows whose
protocol fingerprint differs from the newest invocation's and the rows from before provenance was recorded.

**Equivalences.** A change to ndpe/ or models/ that computes the same numbers (a refactor) still changes the
fingerprint. ``benchmarks/bit_identity.py --vouch RUN_DIR`` runs a sample of cells of every task with the old and
the new checkout and, only when every row is identical, appends ``{"old", "new", "rows", "command", "date"}`` to
``<run dir>/equivalences.jsonl`` (:func:`append_equivalence`). The header then counts rows of a vouched
fingerprint as the newest's and says which check vouched for them; rows of any other fingerprint stay flagged.
"""
from __future__ import annotations

import hashlib
import json
import os
import platform
import subprocess
import time
from collections import Counter
from datetime import datetime
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent  # the checkout: ndpe/, models/, train/, configs/
WATCHED = ("ndpe", "models", "train", "configs")  # a tracked change here marks the commit "-dirty"
# what the numbers mean, whatever the preset selects: the tasks, bars and claims, the floors, the data and the models
PROTOCOL_SOURCES = ("train/protocol.py", "train/floors.py", "train/data", "models", "ndpe")
UNKNOWN = "unknown"
INVOCATIONS = "invocations.jsonl"
EQUIVALENCES = "equivalences.jsonl"
# the types of an invocation line's keys (:func:`read_invocations` refuses a line holding another)
TYPES = {"command": str, "id": str, "start": str, "end": str, "status": str, "commit": str, "ndpe_version": str,
         "protocol": str, "settings": str, "executor": str, "wall_s": (int, float), "cells_trained": int,
         "rows_written": int, "cells_failed": int, "machine": dict, "dirty": (bool, type(None))}


class ProvenanceError(ValueError):
    """A provenance file (invocations.jsonl, equivalences.jsonl) that cannot be read, or a line of it whose keys hold
    values of the wrong type (an edit: the driver writes none)."""


def check_run_name(name) -> str:
    """A run's name is one folder under the output root (``out_root/<name>``): a plain name as ``ndpe viz --name``
    takes (no ``/``, ``\\`` or NUL), and not empty, ``.`` or ``..``, so the run directory never leaves the root;
    else :class:`~train.config_yaml.ConfigError`."""
    from ndpe.viz.figures import check_prefix

    from .config_yaml import ConfigError

    try:
        check_prefix(name)
        if name in ("", ".", ".."):
            raise ValueError
    except ValueError:
        raise ConfigError(f"name={name!r} must be a run name, one folder under out_root (e.g. quick or mine): no "
                          "'/', '\\' or NUL, and not '.' or '..' (set out_root= to write elsewhere)") from None
    return name


def read_run_info(run_dir: Path) -> dict | None:
    """``run_dir/run_info.json`` (the last invocation that trained: its command, date and wall time); None without
    it. A damaged one is a :class:`ProvenanceError` naming it."""
    path = Path(run_dir) / "run_info.json"
    if not path.exists():
        return None
    try:
        info = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(info, dict) or not isinstance(info.get("command"), str):
            raise ValueError("not an object with a command")
        return info
    except (OSError, ValueError) as e:
        raise ProvenanceError(f"{path} is damaged ({' '.join(str(e).split())}); move it away (the benchmark "
                              "rewrites it on its next run that trains)") from None


def protocol_fingerprint(root: Path = ROOT) -> str:
    """A 12-hex hash of the source text (``*.py``) of :data:`PROTOCOL_SOURCES`: each file's path relative to
    ``root`` and its bytes, in sorted path order. The explorer's page assets do not change a number and are left
    out. A missing source is an error naming it."""
    files = []
    for name in PROTOCOL_SOURCES:
        path = root / name
        if path.is_file():
            files.append(path)
        elif path.is_dir():
            files += [p for p in path.rglob("*.py") if "__pycache__" not in p.parts]
        else:
            raise FileNotFoundError(f"protocol source {path} is missing: the protocol fingerprint needs it")
    digest = hashlib.sha256()
    for path in sorted(files, key=lambda p: p.relative_to(root).as_posix()):
        data = path.read_bytes()
        digest.update(f"{path.relative_to(root).as_posix()}\0{len(data)}\0".encode())
        digest.update(data)
    return digest.hexdigest()[:12]


def _git(root: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(root), *args], capture_output=True, text=True, timeout=60, check=True)
    return done.stdout


def git_commit(root: Path = ROOT) -> tuple[str, bool | None]:
    """``(commit, dirty)``: HEAD's 40 hex digits (``-dirty`` appended when tracked files under :data:`WATCHED`
    differ from HEAD) and whether they do; ``("unknown", None)`` without git or outside a git checkout."""
    try:
        head = _git(root, "rev-parse", "--verify", "HEAD").strip()
        changed = _git(root, "status", "--porcelain", "--untracked-files=no", "--", *WATCHED).strip()
    except (OSError, subprocess.SubprocessError):  # no git, not a checkout, no commit yet, git hanging
        return UNKNOWN, None
    if len(head) != 40 or any(c not in "0123456789abcdef" for c in head):
        return UNKNOWN, None
    return (head + "-dirty" if changed else head), bool(changed)


def stamp() -> dict[str, str]:
    """The provenance columns of the rows this invocation writes (computed once per invocation)."""
    import ndpe

    return {"ndpe_version": ndpe.__version__, "commit": git_commit()[0], "protocol": protocol_fingerprint()}


def device_label(device: str, executor: str = "local", gpus_per_cell: float = 0) -> str:
    """A row's ``device``: ``cpu``, or the GPU its cells run on. Local cells run on this machine: the name of the GPU
    a ``device`` setting (cpu | cuda | cuda:N | auto) picks; Ray's cells run on the cluster, on a GPU when they ask
    for one (``gpus_per_cell``): ``cuda (ray)``."""
    if executor == "ray":
        return "cuda (ray)" if device != "cpu" and gpus_per_cell else "cpu"
    import torch

    if device == "cpu" or not torch.cuda.is_available():
        return "cpu"
    index = int(device.split(":")[1]) if device.startswith("cuda:") else torch.cuda.current_device()
    return torch.cuda.get_device_name(index)


def check_device(rows, label: str, path) -> None:
    """Refuse to add rows of ``label`` to a results.csv holding rows of the other class (CPU against GPU): a GPU
    record never takes CPU rows, nor the other way round (GPU models may differ across device loans). Rows from before
    the column existed (``""``) are not checked."""
    other = sorted({r.device for r in rows if r.device and (r.device == "cpu") != (label == "cpu")})
    if other:
        from .config import ConfigError

        raise ConfigError(f"{path} holds rows run on {', '.join(other)}; this invocation runs on {label}: a record "
                          "holds CPU rows or GPU rows, not both (pass name=<new name> to start another run)")


def utc_now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


def machine(device: str) -> dict:
    """The driver's machine: platform, CPU, core count, python and torch versions, the device asked for and its GPU."""
    import torch

    cuda = device != "cpu" and torch.cuda.is_available()
    return {"platform": platform.platform(), "cpu": platform.processor() or platform.machine(),
            "cpu_count": os.cpu_count(), "python": platform.python_version(), "torch": torch.__version__,
            "device": ("cuda" if device == "auto" else device) if cuda else "cpu",
            "gpu": torch.cuda.get_device_name() if cuda else "none"}


def append_invocation(run_dir: Path, record: dict) -> None:
    """Append ``record`` as one line of ``run_dir/invocations.jsonl``: one write, flushed and fsynced. Its
    ``dirty`` key is set from its ``commit``."""
    if "commit" in record:
        commit = record["commit"]
        record = {**record, "dirty": None if commit == UNKNOWN else commit.endswith("-dirty")}
    _append_line(Path(run_dir) / INVOCATIONS, record)


def _append_line(path: Path, record: dict) -> None:
    """``record`` as one JSON line at the end of ``path``: one write, flushed and fsynced, on a line of its own."""
    line = json.dumps(record, sort_keys=True) + "\n"
    with open(path, "ab") as f:
        if f.tell() and not _ends_with_newline(path):  # a line cut by a kill: start on a new line
            line = "\n" + line
        f.write(line.encode())
        f.flush()
        os.fsync(f.fileno())


def _read_lines(path: Path) -> list[dict]:
    """The JSON objects of ``path``'s lines, in order ([] without the file); damaged lines are skipped."""
    if not path.exists():
        return []
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except OSError as e:  # a folder, no permission
        raise ProvenanceError(f"{path} cannot be read ({e.strerror or e}); move it away") from None
    out = []
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue  # a line cut by a kill
        if isinstance(record, dict):
            out.append(record)
    return out


def append_equivalence(run_dir: Path, record: dict) -> None:
    """Record that fingerprints ``record["old"]`` and ``record["new"]`` computed identical rows (see the module)."""
    if not (isinstance(record.get("old"), str) and isinstance(record.get("new"), str)):
        raise ValueError(f"an equivalence needs the fingerprints 'old' and 'new' as strings, got {record!r}")
    _append_line(run_dir / EQUIVALENCES, record)


def equivalent_to(run_dir: Path, fingerprint: str) -> dict[str, dict]:
    """The fingerprints vouched identical to ``fingerprint`` (directly or through a chain of checks), each with the
    record of the check that joined it; its ``skipped``: the tasks a check of the chain left out (a change meant
    to alter their numbers), whose rows it does not vouch for."""
    records = [r for r in _read_lines(run_dir / EQUIVALENCES) if "old" in r and "new" in r]
    found: dict[str, dict] = {}
    frontier: list[tuple[str, frozenset]] = [(fingerprint, frozenset())]
    while frontier:
        current, skipped = frontier.pop()
        for r in records:
            for a, b in ((r["old"], r["new"]), (r["new"], r["old"])):
                if a == current and b != fingerprint and b not in found:
                    chain = skipped | frozenset(r.get("skipped", ()))
                    found[b] = {**r, "skipped": sorted(chain)}
                    frontier.append((b, chain))
    return found


def vouched_for(row, vouched: dict[str, dict]) -> bool:
    """Whether a check in ``vouched`` (:func:`equivalent_to`) covers ``row``: its fingerprint, not a skipped task."""
    check = vouched.get(row.protocol)
    return check is not None and row.task not in check["skipped"]


def _ends_with_newline(path: Path) -> bool:
    with open(path, "rb") as f:
        f.seek(-1, os.SEEK_END)
        return f.read(1) == b"\n"


STARTED = "started"
KILLED = "no end recorded (killed, or still running)"


def read_invocations(run_dir: Path) -> list[dict]:
    """The invocations of ``run_dir``, oldest first ([] without invocations.jsonl); damaged lines are skipped.

    An invocation writes a line when it starts and one when it ends (finished, failed or interrupted), with the same
    ``id``: the end line stands for it. A start line without its end is an invocation killed outright (its process
    got no chance to write): it is listed with status :data:`KILLED`, its cells and rows uncounted."""
    records = [r for r in _read_lines(Path(run_dir) / INVOCATIONS) if "command" in r]
    for r in records:
        wrong = {k: type(r[k]).__name__ for k, kind in TYPES.items() if k in r and (
            not isinstance(r[k], kind) or (kind is int and isinstance(r[k], bool)))}
        if wrong:
            raise ProvenanceError(f"{Path(run_dir) / INVOCATIONS}: the line of invocation {r.get('id', '?')!r} holds "
                                  f"{', '.join(f'{k} as {t}' for k, t in wrong.items())} (the driver writes "
                                  f"{', '.join(f'{k}: {_type_name(TYPES[k])}' for k in wrong)}); fix or remove it")
    ended = {r["id"] for r in records if "id" in r and r.get("status") != STARTED}
    return [{**r, "status": KILLED} if r.get("status") == STARTED else r for r in records
            if not (r.get("status") == STARTED and r.get("id") in ended)]


def _type_name(kind) -> str:
    return " or ".join(t.__name__ for t in kind) if isinstance(kind, tuple) else kind.__name__


def _commits(check: dict) -> str:
    """", commits A and B" of an equivalence record that names them ("" for one that does not)."""
    old, new = check.get("old_commit"), check.get("new_commit")
    return f", commits {old[:12]} and {new[:12]}" if old and new else ""


def _minutes(seconds: float) -> str:
    m, s = divmod(int(seconds), 60)
    return f"{m}:{s:02d}"


def _bound(inv: dict, later: dict | None) -> str:
    """", ran at most M:SS (to the next invocation's start)" for a killed invocation followed by another."""
    if later is None:
        return ""
    try:
        seconds = (datetime.fromisoformat(later["start"]) - datetime.fromisoformat(inv["start"])).total_seconds()
    except (TypeError, KeyError, ValueError):  # a start missing or not an ISO time (a hand-edited line)
        return ""
    return f", ran at most {_minutes(seconds)} (to the next invocation's start)" if seconds >= 0 else ""


def invocation_line(i: int, inv: dict, later: dict | None = None) -> str:
    """One invocation as a list item of the report's header; ``later``: the next invocation (bounds a killed one)."""
    m = inv.get("machine", {})
    commit = inv.get("commit", UNKNOWN)
    short = commit if commit == UNKNOWN else commit[:12] + ("-dirty" if commit.endswith("-dirty") else "")
    status = "" if inv.get("status") == "finished" else f", **{inv.get('status', '?')}**"
    code = f"commit {short}, ndpe {inv.get('ndpe_version', '?')}, protocol {inv.get('protocol', '?')}"
    where = (f"({m.get('platform', '?')}, {m.get('cpu_count', '?')} CPUs, torch {m.get('torch', '?')}, "
             f"device {m.get('device', '?')})")
    if inv.get("status") == KILLED:  # no end, wall time or counts: what it wrote is told by its rows' provenance
        return (f"  {i}. `{inv['command']}`: started {inv.get('start', '?')}, **{KILLED}**{_bound(inv, later)}, "
                f"{code} {where}")
    return (f"  {i}. `{inv['command']}`: ended {inv.get('end', '?')}, wall time {_minutes(inv.get('wall_s', 0))}, "
            f"{code}; {inv.get('cells_trained', 0)} cells trained, {inv.get('rows_written', 0)} rows written"
            f"{status} {where}")


def header_lines(run_dir: Path, rows: list, info: dict | None, workers: str) -> list[str]:
    """The header's account of what wrote ``rows`` (the report's rows): every invocation of invocations.jsonl
    (else the last one's run_info.json, ``info``), then the rows whose protocol fingerprint differs from the
    newest invocation's (the current code's without invocations) and the rows without provenance, per task."""
    invocations = read_invocations(run_dir)
    if invocations:
        lines = [f"- invocations that wrote to this run directory ({INVOCATIONS}, oldest first):",
                 *(invocation_line(i, inv, later) for i, (inv, later)
                   in enumerate(zip(invocations, [*invocations[1:], None]), start=1))]
        newest = invocations[-1].get("protocol", "")
    else:
        lines = [f"- command: `{info['command']}`" if info else "- command: not recorded",
                 *([f"- finished: {info['date']}; wall time of that invocation: {_minutes(info['wall_s'])} "
                    f"({info.get('executor', workers)})"] if info else [])]
        newest = protocol_fingerprint()
    vouched = equivalent_to(run_dir, newest)
    for protocol, check in sorted(vouched.items()):
        n = sum(r.protocol == protocol and vouched_for(r, vouched) for r in rows)
        but = f" but {', '.join(check['skipped'])}" if check["skipped"] else ""
        if n:
            lines.append(f"- {n} rows come from code with protocol fingerprint {protocol}, vouched identical to the "
                         f"newest's ({newest}): {check.get('rows', '?')} rows of a sample of cells of every task{but} "
                         f"identical, old against new code{_commits(check)} ({EQUIVALENCES}: "
                         f"`{check.get('command', '?')}`, "
                         f"{check.get('date', '?')})")
    other: Counter = Counter((r.task, r.protocol) for r in rows
                             if r.protocol not in ("", newest) and not vouched_for(r, vouched))
    for (task, protocol), n in sorted(other.items()):
        lines.append(f"- **{n} rows of {task} come from code with another protocol fingerprint ({protocol})** than "
                     f"the newest invocation's ({newest}): train/protocol.py, train/floors.py, train/data/, models/ "
                     "or ndpe/ changed between them")
    old = Counter(r.task for r in rows if not r.protocol)
    if old:
        lines.append("- rows from before provenance was recorded (no commit or protocol fingerprint): "
                     + ", ".join(f"{n} of {task}" for task, n in sorted(old.items())))
    dirty = Counter(r.task for r in rows if r.commit.endswith("-dirty"))
    if dirty:
        lines.append("- rows from a checkout with uncommitted changes (commit ...-dirty): "
                     + ", ".join(f"{n} of {task}" for task, n in sorted(dirty.items())))
    return lines
