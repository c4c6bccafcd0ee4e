"""Running the per-rank map over an analysis's units (:func:`run_map`): here, in processes, or on
Dask. Which files and units there are is :mod:`traceoverlap.readers.paths`'s.

Running the map (:func:`traceoverlap.rank.unit.map_file`) over the files:
  - in this process (``jobs=1``, the default for small inputs);
  - in ``jobs`` local processes (default ``min(files, cores)`` once the inputs pass
    :data:`PARALLEL_MIN_BYTES`), each sending back only its file's compact results, so at most
    ``jobs`` raw traces are in memory at once;
  - on a Dask cluster (``scheduler="tcp://host:8786"``, or ``"local"`` for a LocalCluster on this
    machine): the workers read the rank files themselves (a shared filesystem), and only the
    compact per-rank results travel. Needs the ``[dask]`` extra.
The map reports its progress (:mod:`traceoverlap.core.progress`: units done of the total) when
there are :data:`PROGRESS_MIN_UNITS` units or :data:`PROGRESS_MIN_BYTES` of input; the CLI shows
it on stderr when stderr is a terminal.

Nothing here waits forever or floods stderr when the machine says no (issues 35 and 41): the
process limits are checked before any worker starts (too few open files for ``jobs`` processes:
fewer processes, with a note; too few for a local Dask cluster, or too little address space: one
error line), a local cluster gets :data:`DASK_START_S` to start, and the Dask map gives up, in one
line, once no worker has been alive for :data:`DASK_NO_WORKERS_S`.
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..core import progress as _progress
from ..core._collector import resume
from ..core._lazyre import lazy_compile
from ..core.errors import TraceFormatError, UsageError
from ..core.fmt import size as fmt_size
from ..readers.paths import ProcessPart, Unit, total_bytes

#: Report the map's progress from this many units, or this much input (a 64-rank folder of
#: small files, or one large file, takes tens of seconds).
PROGRESS_MIN_UNITS = 8
PROGRESS_MIN_BYTES = 64 * 1024 * 1024
#: Without an explicit ``jobs``, map files in parallel only when they add up to more than this.
PARALLEL_MIN_BYTES = 16 * 1024 * 1024

#: Open files the map's process pool needs besides those already open: its queues and wake-up
#: pipes, then per worker process (its sentinel and start-up pipe, with room to spare).
POOL_FDS, POOL_FDS_PER_JOB = 8, 3
#: Open files a local Dask cluster needs in this process (scheduler, client, nanny and worker
#: connections): measured, 2 workers hang at 40 and start at 48; twice that, to be safe.
DASK_FDS, DASK_FDS_PER_WORKER = 64, 24
#: The address space (``ulimit -v``) each process of a local Dask cluster needs: measured, 2
#: workers failed to start at 500 MB and 4 at 800 MB ("can't start new thread", "Nanny failed
#: to start"), 1 GB started every time.
DASK_MIN_ADDRESS_SPACE = 1536 * 1024 * 1024
#: Seconds a local Dask cluster (scheduler and workers) may take to start.
DASK_START_S = 60.0
#: Seconds the Dask map waits with no worker alive (every one died, or none joined) before it
#: fails; how often it looks.
DASK_NO_WORKERS_S = 30.0
DASK_POLL_S = 1.0


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
    notes: list[str] | None = None,
) -> Iterator[object]:
    """``task(str(file))`` (or ``task(part)``) for every unit, results in input order, in this
    process, in local processes, or on a Dask cluster (see the module docstring). Where the
    process limits allow fewer processes than ``jobs``, a note saying so is appended to
    ``notes``."""
    resume()  # the modules are loaded; workers must not inherit a paused collector
    n = len(files)
    names = [str(f) for f in files]
    units: list[Unit] = [f if isinstance(f, ProcessPart) else str(f) for f in files]
    size = total_bytes([Path(p) for p in dict.fromkeys(names)])
    progress = n >= PROGRESS_MIN_UNITS or size >= PROGRESS_MIN_BYTES
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
    if jobs > 1:
        jobs = _jobs_the_files_limit_allows(jobs, notes)
    if jobs == 1:
        yield from _with_progress(map(task, units), n, progress)
        return
    yield from _with_progress(_process_map(units, task, jobs), n, progress)


def open_files_limit(need: int) -> int | None:
    """The open-files soft limit (``ulimit -n``), first raised toward ``need`` where the hard
    limit allows; None when unlimited."""
    import resource

    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft == resource.RLIM_INFINITY:
        return None
    if soft < need and (hard == resource.RLIM_INFINITY or hard > soft):
        want = need if hard == resource.RLIM_INFINITY else min(need, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
            soft = want
        except (ValueError, OSError):  # pragma: no cover - a platform that refuses
            pass
    return int(soft)


def _open_fds() -> int:
    """Files this process has open now (Linux: /proc/self/fd; elsewhere a guess)."""
    try:
        return len(os.listdir("/proc/self/fd")) - 1  # less the listing's own
    except OSError:  # pragma: no cover - not Linux, or no descriptor left to list with
        return 8


def _jobs_the_files_limit_allows(jobs: int, notes: list[str] | None) -> int:
    """``jobs``, or fewer (at least 1) when the open-files limit leaves too few descriptors for
    that many worker processes; a note says so. (A pool started without them died with a
    76-line 'Too many open files' traceback, issue 41.)"""
    in_use = _open_fds()
    limit = open_files_limit(in_use + POOL_FDS + POOL_FDS_PER_JOB * jobs)
    if limit is None:
        return jobs
    fit = max(1, (limit - in_use - POOL_FDS) // POOL_FDS_PER_JOB)
    if fit >= jobs:
        return jobs
    if notes is not None:
        notes.append(
            f"read the inputs {'one at a time' if fit == 1 else f'{fit} at a time'}, not "
            f"{jobs} at a time: the open-files limit (ulimit -n {limit}) leaves too few for "
            f"{jobs} worker processes"
        )
    return fit


def _check_local_cluster_limits(workers: int) -> None:
    """Refuse, in one line, a local Dask cluster the process limits cannot hold: with too few
    open files its scheduler spun in its accept loop printing tracebacks without end, with too
    little address space it died in tracebacks (issue 41)."""
    import resource

    need = DASK_FDS + DASK_FDS_PER_WORKER * workers
    limit = open_files_limit(need)
    if limit is not None and limit < need:
        raise UsageError(
            f"a local Dask cluster of {workers} worker{'s' if workers != 1 else ''} needs about "
            f"{need} open files, and the limit is {limit}: raise it (ulimit -n {need}), or "
            "analyse without the Dask scheduler"
        )
    soft, _ = resource.getrlimit(resource.RLIMIT_AS)
    if soft != resource.RLIM_INFINITY and soft < DASK_MIN_ADDRESS_SPACE:
        raise UsageError(
            f"the address-space limit (ulimit -v {soft // 1024}) is below "
            f"the {fmt_size(DASK_MIN_ADDRESS_SPACE)} each process of a local Dask cluster needs: "
            "raise it, or analyse without the Dask scheduler"
        )


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
    # (and the event loop's: a scheduler out of open files once logged a traceback per accept,
    # without end: asyncio's and tornado's loggers stay quiet too)
    quiet = [
        logging.getLogger(n)
        for n in [*QUIET_LOGGERS, *logging.root.manager.loggerDict]
        if n in QUIET_LOGGERS or n.startswith(tuple(f"{q}." for q in QUIET_LOGGERS))
    ]
    levels = [q.level for q in quiet]  # distributed.client has its own level and handler
    for q in quiet:
        q.setLevel(logging.CRITICAL + 1)  # not even CRITICAL: "Failed to deserialize" was one
    # worker processes a local cluster starts, or restarts after one died, configure their
    # logging from Dask's config when they import distributed: the environment reaches them
    # (silence_logs did not always: a restarted worker once printed an INFO line)
    env_before = os.environ.get(DASK_LOG_ENV)
    os.environ[DASK_LOG_ENV] = "critical"
    failed = True
    try:
        yield from _dask_run(names, task, scheduler, jobs, Client, LocalCluster)
        failed = False
    finally:
        if env_before is None:
            os.environ.pop(DASK_LOG_ENV, None)
        else:
            os.environ[DASK_LOG_ENV] = env_before
        # after a failure the loggers stay quiet: distributed reaps the processes of a cluster
        # that failed to start at exit, and logged each one on stderr under the one error line
        if not failed:
            for q, level in zip(quiet, levels, strict=True):
                q.setLevel(level)


#: The loggers silenced while the Dask map runs (and their children).
QUIET_LOGGERS = ("distributed", "asyncio", "tornado")

#: Dask's config key ``logging.distributed`` as an environment variable (read at import).
DASK_LOG_ENV = "DASK_LOGGING__DISTRIBUTED"


_SCHEDULER_ADDRESS = lazy_compile(r"^(tcp|tls|ucx|ws|wss)://[^/\s:]+:\d{1,5}/?$")


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
    if scheduler == "local":
        cluster, client = _start_local_cluster(
            jobs or default_jobs(len(names)), Client, LocalCluster
        )
    else:
        try:
            client = Client(scheduler, timeout="15s")
        except (OSError, ValueError) as exc:
            raise UsageError(
                f"Dask scheduler {scheduler}: cannot connect to the Dask cluster ({exc})"
            ) from None
    try:
        futures = client.map(task, names, pure=False)
        # results in input order; each is a small per-rank summary
        for name, fut in zip(names, futures, strict=True):
            yield _dask_result(str(name), fut, client, scheduler)
            fut.release()  # type: ignore[no-untyped-call]
    finally:
        client.close()  # type: ignore[no-untyped-call]
        if cluster is not None:
            cluster.close()


def _start_local_cluster(
    workers: int,
    Client: Any,  # noqa: N803
    LocalCluster: Any,  # noqa: N803
) -> tuple[Any, Any]:
    """A local cluster of ``workers`` processes and its client, started within
    :data:`DASK_START_S` or refused in one line (a failure to start is one line too)."""
    _check_local_cluster_limits(workers)
    box: dict[str, Any] = {}

    def start() -> None:
        try:
            box["cluster"] = LocalCluster(
                n_workers=workers,
                threads_per_worker=1,
                processes=True,
                dashboard_address=None,
                silence_logs=logging.CRITICAL,
            )
            box["client"] = Client(box["cluster"], timeout=f"{DASK_START_S}s")
        except BaseException as exc:  # noqa: BLE001 - reported below, in one line
            box["error"] = exc

    # started in a thread, so that a cluster that never comes up (a worker that cannot connect)
    # cannot hold the run: past the deadline the thread is left behind, a daemon
    try:
        starter = threading.Thread(target=start, name="traceoverlap-dask-start", daemon=True)
        starter.start()
    except RuntimeError as exc:  # "can't start new thread"
        box["error"] = exc
    else:
        starter.join(DASK_START_S)
        if starter.is_alive():
            raise UsageError(
                f"the local Dask cluster did not start within "
                f"{DASK_START_S:g} s (a loaded machine, or process limits too tight): analyse "
                "without the Dask scheduler"
            )
    if "error" in box:
        if "cluster" in box:
            try:
                box["cluster"].close()
            except Exception:  # noqa: BLE001 - already failing; the first error is the news
                pass
        error = box["error"]
        first = (str(error).strip().splitlines() or [type(error).__name__])[0][:200]
        raise UsageError(
            f"the local Dask cluster failed to start ({first}): analyse without the Dask "
            "scheduler, or check the process limits (ulimit -a)"
        )
    return box["cluster"], box["client"]


def _dask_workers(client: Any) -> int:
    """How many workers the scheduler knows now (0 when it cannot be asked)."""
    try:
        return len(client.nthreads())
    except Exception:  # noqa: BLE001 - a scheduler that cannot answer has no worker for us
        return 0


def _dask_result(name: str, fut: Any, client: Any, scheduler: str) -> object:
    """``fut``'s result; an error, never a wait without end, once no worker has been alive for
    :data:`DASK_NO_WORKERS_S` (every worker died and none came back: the map once waited 12
    minutes for a result with no worker process left, issue 35)."""
    from concurrent.futures import CancelledError

    from distributed import KilledWorker

    where = "the local Dask cluster" if scheduler == "local" else f"the Dask cluster at {scheduler}"
    alone_since: float | None = None
    while True:
        try:
            return fut.result(timeout=DASK_POLL_S)
        except KilledWorker:
            raise TraceFormatError(
                name,
                "the Dask workers reading it died each time it was tried (most likely killed "
                "for lack of memory)",
                "give the workers more memory (dask worker --memory-limit, or fewer workers per "
                "machine), or analyse this file alone on a machine with more",
            ) from None
        except CancelledError:
            raise TraceFormatError(
                name,
                f"{where} dropped it before it was read (its scheduler restarted or went away)",
                "check the scheduler, or analyse without the Dask scheduler",
            ) from None
        except TimeoutError:
            if fut.done():  # the task's own TimeoutError, or a result just in
                return fut.result()
        if _dask_workers(client):
            alone_since = None
            continue
        now = time.monotonic()
        if alone_since is None:
            alone_since = now
        elif now - alone_since >= DASK_NO_WORKERS_S:
            raise TraceFormatError(
                name,
                f"no Dask worker has been alive for {DASK_NO_WORKERS_S:g} s to read it (every "
                f"worker of {where} died, or none joined)",
                "give the workers more memory, or start workers, or analyse without the Dask "
                "scheduler",
            )


def _with_progress(items: Iterable[object], n: int, progress: bool) -> Iterator[object]:
    if not progress:
        yield from items
        return
    with _progress.steps("reading rank traces", n) as done:
        for r in items:
            done()
            yield r
