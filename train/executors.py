"""Where the benchmark's cells run: a local process pool (``executor=local``) or Ray tasks (``executor=ray``).

Both executors take the same jobs and give back each job's result as it finishes (in finishing
order); the driver (``train.bench.run``) is the only process that writes ``results.csv``.

``RayExecutor`` runs each cell as one Ray task on an existing cluster (``ray_address``: ``auto``,
``ray://host:10001``, ...) or on a local Ray instance it starts itself (``ray_address`` null,
``workers`` CPUs); when the caller has already called ``ray.init`` (a notebook, a test), that
connection is used as it is and left open. A task asks for 1 CPU and ``gpus_per_cell`` GPUs; a task whose worker dies (a
killed process, a lost node) is retried by Ray up to ``MAX_RETRIES`` times, and a cell still lost
after that is reported as failed (the next run of the same command trains it again). The code of
``train``, ``models`` and ``ndpe`` travels with the job (Ray ``py_modules``, set when this module calls
``ray.init``), so every node runs the driver's code; the nodes need the dependencies only
(``pip install -e ".[train,cluster]"``). A caller's own ``ray.init`` must make them importable itself
(a local instance started from the repository root does: Ray puts the driver's directory on its workers' path).

No shared filesystem is needed: the built-in datasets are a pure function of their options, so each
machine builds its own cache in ``<run dir>/data`` (the data jobs run once on every node that has
CPUs; a node that joins later builds what its cells need on first use), cells write their logs under
``<run dir>/cells`` on the machine that ran them, and rows come back to the driver as task results.
Real datasets (``data_root``) must exist at that path on every worker.
"""
from __future__ import annotations

import multiprocessing as mp
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator

MAX_RETRIES = 3  # Ray retries of a task whose worker died (not of a Python exception: cells catch those)
INSTALL_HINT = 'executor=ray needs Ray, an optional extra: pip install -e ".[cluster]"'


class ExecutorError(RuntimeError):
    """An executor cannot start (Ray missing, no cluster at the address); a one-line message."""


class LocalExecutor:
    """``workers`` spawned processes (``workers=1``: in the driver's process, no pool)."""

    def __init__(self, workers: int, jobs: int | None = None):
        self.workers = workers
        processes = max(1, min(workers, jobs if jobs is not None else workers))  # no idle processes
        self.pool = mp.get_context("spawn").Pool(processes) if processes > 1 else None

    def describe(self) -> str:
        return f"{self.workers} worker(s)"

    def where_data(self, data_dir: Path) -> str:
        return str(data_dir)

    def prepare(self, fn: Callable, jobs: list) -> None:
        """Run the data jobs (each dataset once)."""
        list(self.pool.imap_unordered(fn, jobs) if self.pool else map(fn, jobs))

    def map_unordered(self, fn: Callable, jobs: list, lost: Callable[[Any, BaseException], Any]) -> Iterator:
        """``fn(job)`` for every job, yielded as they finish (``lost`` is unused: a dead pool process stops the run)."""
        return self.pool.imap_unordered(fn, jobs) if self.pool else map(fn, jobs)

    def close(self, done: bool = False) -> None:
        """``done``: every job came back, so the processes exit on their own (their finalizers run: a terminated
        process leaves the semaphores it made to the resource tracker's "leaked" warning); else stop them now."""
        if self.pool is not None:
            if done:
                self.pool.close()
            else:
                self.pool.terminate()
            self.pool.join()


def _call(fn: Callable, job: Any, threads: int) -> Any:
    """The body of a Ray task: ``fn(job)`` with ``threads`` torch threads (1 per CPU the task holds)."""
    import torch

    torch.set_num_threads(threads)
    return fn(job)


def code_modules() -> list[str]:
    """The package folders shipped to Ray workers (``py_modules``): the driver's train, models and ndpe."""
    import models
    import ndpe

    import train

    return [str(Path(m.__file__).resolve().parent) for m in (train, models, ndpe)]


class RayExecutor:
    """Each job a Ray task (1 CPU, ``gpus_per_cell`` GPUs, retried when its worker dies)."""

    def __init__(self, address: str | None, gpus_per_cell: float = 0.0, local_cpus: int = 2,
                 max_retries: int = MAX_RETRIES):
        try:
            import ray
        except ImportError:
            raise ExecutorError(INSTALL_HINT) from None
        self.ray = ray
        self.gpus = float(gpus_per_cell)
        self.max_retries = max_retries
        self.owns = not ray.is_initialized()  # an instance the caller started is left running
        if self.owns:  # the job's code travels with it (Ray uploads local folders only at ray.init)
            kwargs: dict = {"address": address, "log_to_driver": False,  # cells log to their console.log
                            "runtime_env": {"py_modules": code_modules()}}
            if address is None:
                kwargs.update(num_cpus=local_cpus, include_dashboard=False)
            try:
                ray.init(**kwargs)
            except ConnectionError as e:
                raise ExecutorError(f"no Ray cluster at ray_address={address!r}: {e}".splitlines()[0]) from None
        # CUDA_VISIBLE_DEVICES: a task that asks for no GPU sees none (Ray would leave it every GPU of the node);
        # a task's runtime_env adds to the job's (py_modules stay)
        self.runtime_env = {} if self.gpus > 0 else {"env_vars": {"CUDA_VISIBLE_DEVICES": ""}}
        self.task = ray.remote(_call)
        self.pending: dict = {}

    def describe(self) -> str:
        res = self.ray.cluster_resources()
        nodes = [n for n in self.ray.nodes() if n.get("Alive")]
        gpus = f", {self.gpus:g} GPU(s) per cell" if self.gpus else ""
        return f"Ray cluster: {len(nodes)} node(s), {res.get('CPU', 0):g} CPUs, {res.get('GPU', 0):g} GPUs{gpus}"

    def where_data(self, data_dir: Path) -> str:
        return f"{data_dir} on each of {len(self._cpu_nodes())} node(s)"

    def _cpu_nodes(self) -> list[str]:
        return [n["NodeID"] for n in self.ray.nodes() if n.get("Alive") and n.get("Resources", {}).get("CPU", 0) > 0]

    def _options(self, **extra):
        return self.task.options(num_cpus=1, max_retries=self.max_retries, retry_exceptions=False,
                                 runtime_env=self.runtime_env, **extra)

    def prepare(self, fn: Callable, jobs: list) -> None:
        """Run the data jobs once on every node with CPUs, so each machine has its own cache before the cells start."""
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        refs = [self._options(num_gpus=0, scheduling_strategy=NodeAffinitySchedulingStrategy(node, soft=True))
                .remote(fn, job, 1) for node in self._cpu_nodes() for job in jobs]
        self.pending = dict.fromkeys(refs)
        self.ray.get(refs)
        self.pending = {}

    def map_unordered(self, fn: Callable, jobs: Iterable, lost: Callable[[Any, BaseException], Any]) -> Iterator:
        """``fn(job)`` for every job as a Ray task, yielded as they finish; a task Ray gave up on yields ``lost(job, error)``.

        Jobs are submitted in order; Ray starts them as CPUs / GPUs free up, roughly in that order.
        """
        options = self._options(num_gpus=self.gpus)
        self.pending = {options.remote(fn, job, 1): job for job in jobs}
        while self.pending:
            (ref,), _ = self.ray.wait(list(self.pending), num_returns=1)
            job = self.pending.pop(ref)
            try:
                result = self.ray.get(ref)
            except self.ray.exceptions.RayError as e:  # worker died MAX_RETRIES + 1 times, node lost, ...
                result = lost(job, e)
            yield result

    def close(self, done: bool = False) -> None:
        for ref in self.pending:  # an interrupted run: stop its cells (they are redone on the next run)
            try:
                self.ray.cancel(ref, force=True)
            except Exception:  # noqa: BLE001 (already finished or gone)
                pass
        self.pending = {}
        if self.owns:
            self.ray.shutdown()


def make_executor(kind: str, *, workers: int, jobs: int | None = None, ray_address: str | None = None,
                  gpus_per_cell: float = 0.0):
    """The executor ``kind`` (``local`` or ``ray``) of a benchmark run (``jobs``: how many cells it will get)."""
    if kind == "local":
        return LocalExecutor(workers, jobs)
    if kind == "ray":
        return RayExecutor(ray_address, gpus_per_cell, local_cpus=workers)
    raise ExecutorError(f"unknown executor {kind!r}; expected local or ray")
