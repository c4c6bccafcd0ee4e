"""Inputs of an analysis: which files to read, and running the per-rank map over them.

Files: each file as given; a folder's trace files (sorted, not recursive; ``x.nsys-rep`` next to
its own export ``x.sqlite`` is read once). Files in a folder that are not traces (a stray
``config.json``, this tool's own ``-o result.json``) are skipped with a note.

Running the map (:func:`traceoverlap.rank.unit.map_file`) over the files:
  - in this process (``jobs=1``, the default for small inputs);
  - in ``jobs`` local processes (default ``min(files, cores)`` once the inputs pass
    :data:`PARALLEL_MIN_BYTES`), each sending back only its file's compact results, so at most
    ``jobs`` raw traces are in memory at once;
  - on a Dask cluster (``scheduler="tcp://host:8786"``, or ``"local"`` for a LocalCluster on this
    machine): the workers read the rank files themselves (a shared filesystem), and only the
    compact per-rank results travel. Needs the ``[dask]`` extra.
A progress bar goes to stderr on a terminal for inputs over :data:`PROGRESS_MIN_BYTES`.

Units of the map (:func:`map_units`): one per file, except a Nsight Systems export of several GPU
processes of at least :data:`NSYS_SPLIT_MIN_BYTES`, which is one unit per process
(:class:`ProcessPart`): each reads only its process's rows, so memory follows the largest process,
not the file, and the processes of one export run in parallel like rank files.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..core._collector import resume
from ..core.errors import TraceFormatError, UsageError
from ..core.fmt import size as fmt_size
from ..readers.paths import ProcessPart, Unit, total_bytes

#: Show a progress bar (stderr, terminals only) when the inputs add up to more than this.
PROGRESS_MIN_BYTES = 256 * 1024 * 1024
#: Without an explicit ``jobs``, map files in parallel only when they add up to more than this.
PARALLEL_MIN_BYTES = 16 * 1024 * 1024


def default_jobs(n_files: int) -> int:
    """min(files, usable cores), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(n_files, cores))


def run_map(
    files: Sequence[Path | ProcessPart],
    task: Callable[[Unit], object],
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
) -> Iterator[object]:
    """``task(str(file))`` (or ``task(part)``) for every unit, results in input order, in this
    process, in local processes, or on a Dask cluster (see the module docstring)."""
    resume()  # the modules are loaded; workers must not inherit a paused collector
    n = len(files)
    names = [str(f) for f in files]
    units: list[Unit] = [f if isinstance(f, ProcessPart) else str(f) for f in files]
    size = total_bytes([Path(p) for p in dict.fromkeys(names)])
    progress = sys.stderr.isatty() and size >= PROGRESS_MIN_BYTES
    if "-" in names:
        # standard input belongs to this process: a worker would read nothing
        if scheduler:
            raise UsageError(
                "standard input (-) can only be read here, not on a Dask cluster: save it to a "
                "file the workers can read, or analyse it without a scheduler"
            )
        jobs = 1
    if scheduler:
        yield from _with_progress(_dask_map(units, task, scheduler, jobs), n, progress)
        return
    if jobs is None:
        jobs = default_jobs(n) if size >= PARALLEL_MIN_BYTES else 1
    jobs = max(1, min(jobs, n))
    if jobs == 1:
        yield from _with_progress(map(task, units), n, progress)
        return
    yield from _with_progress(_process_map(units, task, jobs), n, progress)


def _process_map(names: list[Unit], task: Callable[[Unit], object], jobs: int) -> Iterator[object]:
    """``task`` over ``names`` in ``jobs`` processes, in order. When a worker dies (killed for
    memory, a crash in native code) the files not finished yet are read again one at a time, each
    in a fresh process: the one whose worker dies alone is named (with the memory it reached),
    and a file that only failed beside others gets its result after all."""
    # imported here: multiprocessing costs ~10 ms to import, and one file needs no pool
    from concurrent.futures.process import BrokenProcessPool, ProcessPoolExecutor

    done = 0
    try:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            for res in pool.map(task, names):
                yield res
                done += 1
    except BrokenProcessPool:
        pass
    for name in names[done:]:
        try:
            with ProcessPoolExecutor(max_workers=1) as pool:
                res = pool.submit(task, name).result()
        except BrokenProcessPool:
            raise worker_died(str(name)) from None
        yield res


def worker_died(name: str, detail: str = "") -> TraceFormatError:
    """The error for a file whose worker process died while reading it."""
    import resource

    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss * 1024  # Linux: KiB
    try:
        size = f"the file is {fmt_size(os.stat(name).st_size)}; "
    except OSError:
        size = ""
    return TraceFormatError(
        name,
        f"the worker process reading it died{detail} (most likely killed for lack of memory: "
        f"{size}the largest worker reached {fmt_size(peak)})",
        "free memory or use a machine with more, and analyse this file alone (with --rank, "
        "or by naming the other files)",
    )


def _dask_map(
    names: list[Unit], task: Callable[[Unit], object], scheduler: str, jobs: int | None
) -> Iterator[object]:
    try:
        from dask.distributed import Client, LocalCluster
    except ImportError:
        raise UsageError(
            "the Dask scheduler needs Dask: pip install 'traceoverlap[dask]' (dask.distributed)"
        ) from None
    _check_scheduler(scheduler)
    # the scheduler's and client's own logging (heartbeats, "Couldn't gather keys", workers
    # marked failed) stays off stderr: what matters comes back as one line
    quiet = [
        logging.getLogger(n)
        for n in ["distributed", *logging.root.manager.loggerDict]
        if n == "distributed" or n.startswith("distributed.")
    ]
    levels = [q.level for q in quiet]  # distributed.client has its own level and handler
    for q in quiet:
        q.setLevel(logging.CRITICAL)
    # worker processes a local cluster starts, or restarts after one died, configure their
    # logging from Dask's config when they import distributed: the environment reaches them
    # (silence_logs did not always: a restarted worker once printed an INFO line)
    env_before = os.environ.get(DASK_LOG_ENV)
    os.environ[DASK_LOG_ENV] = "critical"
    try:
        yield from _dask_run(names, task, scheduler, jobs, Client, LocalCluster)
    finally:
        for q, level in zip(quiet, levels, strict=True):
            q.setLevel(level)
        if env_before is None:
            os.environ.pop(DASK_LOG_ENV, None)
        else:
            os.environ[DASK_LOG_ENV] = env_before


#: Dask's config key ``logging.distributed`` as an environment variable (read at import).
DASK_LOG_ENV = "DASK_LOGGING__DISTRIBUTED"


_SCHEDULER_ADDRESS = re.compile(r"^(tcp|tls|ucx|ws|wss)://[^/\s:]+:\d{1,5}/?$")


def _check_scheduler(scheduler: str) -> None:
    if scheduler != "local" and not _SCHEDULER_ADDRESS.match(scheduler):
        raise UsageError(
            f"--scheduler {scheduler[:200]!r}: expected 'local' or a Dask scheduler address "
            "with its port, such as tcp://head:8786"
        )


def _dask_run(
    names: list[Unit],
    task: Callable[[Unit], object],
    scheduler: str,
    jobs: int | None,
    Client: Any,  # noqa: N803 - the classes, imported by the caller
    LocalCluster: Any,  # noqa: N803
) -> Iterator[object]:
    cluster = None
    try:
        if scheduler == "local":
            cluster = LocalCluster(  # type: ignore[no-untyped-call]
                n_workers=jobs or default_jobs(len(names)),
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.CRITICAL,
            )
            client = Client(cluster)
        else:
            client = Client(scheduler, timeout="15s")
    except (OSError, ValueError) as exc:
        raise UsageError(
            f"Dask scheduler {scheduler}: cannot connect to the Dask cluster ({exc})"
        ) from None
    try:
        futures = client.map(task, names, pure=False)
        # results in input order; each is a small per-rank summary
        for name, fut in zip(names, futures, strict=True):
            yield _dask_result(str(name), fut)
            fut.release()  # type: ignore[no-untyped-call]
    finally:
        client.close()  # type: ignore[no-untyped-call]
        if cluster is not None:
            cluster.close()


def _dask_result(name: str, fut: Any) -> object:
    from distributed import KilledWorker

    try:
        return fut.result()
    except KilledWorker:
        raise TraceFormatError(
            name,
            "the Dask workers reading it died each time it was tried (most likely killed for "
            "lack of memory)",
            "give the workers more memory (dask worker --memory-limit, or fewer workers per "
            "machine), or analyse this file alone on a machine with more",
        ) from None


def _with_progress(items: Iterable[object], n: int, progress: bool) -> Iterator[object]:
    if not progress:
        yield from items
        return
    from rich.progress import Progress

    with Progress(transient=True, console=None) as bar:
        task = bar.add_task("analysing rank traces", total=n)
        for r in items:
            yield r
            bar.advance(task)
