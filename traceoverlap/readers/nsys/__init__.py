"""Nsight Systems reader: ``nsys export --type=sqlite`` files (and ``.nsys-rep`` through ``nsys``).

What it reads (tables and columns are discovered from ``sqlite_master`` / ``PRAGMA table_info``,
never assumed, and a table may be a view, read through SQLite; exports of Nsight Systems 2022.4
(schema 3.0) to 2026.2 (schema 3.25) are read):

- ``CUPTI_ACTIVITY_KIND_KERNEL`` -> category ``kernel``, name = ``shortName`` (what classification
  matches on); ``CUPTI_ACTIVITY_KIND_MEMCPY`` / ``MEMSET`` -> ``memcpy`` / ``memset``. GPU rows get
  ``pid`` from ``globalPid``, ``device`` = ``deviceId``, ``stream`` = ``streamId``, lane
  ``"stream {streamId}"``.
- ``CUPTI_ACTIVITY_KIND_RUNTIME`` -> ``runtime`` (eventClass 0) or ``driver`` (eventClass 1), with
  ``correlation`` = ``correlationId``: every row, whatever the API name (NCCL launches with
  ``cuLaunchKernelEx``), because correlation ids, not names, tie launches to GPU work.
- ``NVTX_EVENTS`` push/pop and start/end ranges with an end -> ``annotation`` on the thread that
  started them (a start/end range that another thread of the same process ended: on that thread,
  ``endGlobalTid``), name = ``COALESCE(text, StringIds.value)``: step markers
  (``ProfilerStep#N``), phases (``forward``, ``backward``, ``grad_sync``, ``optimizer``) and any
  other range.
- ``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION`` -> ``sync`` rows named as Kineto names its
  ``cuda_sync`` rows (``Event Sync``, ``Stream Wait Event``, ``Stream Sync``, ``Context Sync``),
  on their stream, with their call's ``correlation``; a stream wait's event is resolved through
  ``CUPTI_ACTIVITY_KIND_CUDA_EVENT`` (when nsys recorded event records) to the event columns
  ``wait_stream`` / ``wait_corr`` (:mod:`._sync`).
- Host rows get ``pid``/``tid`` from ``globalTid`` (bits 24-47 / 0-23), thread names from
  ``ThreadNames``.

GPU captures: GPU work is grouped by (pid, device) and each group is a rank; host rows of a process
belong to every rank of that process. CPU captures (no CUDA activity at all, e.g. gloo ranks traced
with ``nsys profile -t nvtx``): every process that recorded NVTX ranges is a rank
(``device_kind="cpu"``), and its NVTX ranges are its whole timeline. Ranks come from the export
when it records them (``MPI_RANKS``, a ``RANK`` environment variable per process, or one
``rank N`` NVTX text per process), else from the file name for a one-process export
(``rank3.sqlite``), else from ordering the groups by device then pid
(``rank_source="process-order"``, said in the notes).

Communication on a CPU capture: Nsight Systems does not see gloo's work, and without the PyTorch
profiler there are no ``gloo:*`` events. What the tool can see is what the program marks: the
reference workloads open an NVTX start/end range named ``gloo:<collective>`` when they issue a
collective and close it when the collective completes (the completion callback of its future, on
gloo's ``pt_gloo_runloop`` thread, whose lane the range is then drawn on, as Kineto draws gloo's
work items), so communication means *the collective in flight*, from issue to completion, which
includes time queued behind earlier collectives. Such ranges are classified like gloo's own work items
(:mod:`traceoverlap.rank.classify`); a CPU capture without any says so in its notes instead of
reporting zero communication.

Times are integer nanoseconds as the export stores them, shifted to unix-epoch nanoseconds when
``TARGET_INFO_SESSION_START_TIME`` says when the capture started (``TraceInfo.clock == "unix"``):
``unix = t - systemClockNs + utcEpochNs`` (schema 3.25: timestamps on the system clock); exports
without ``systemClockNs`` (schema 3.0, Nsight Systems 2022.4) count from the session start, so
``unix = t + utcEpochNs`` (checked against the wall clock of a traced process).

Robustness: rows whose start or end is not an integer (text, real, blob, NULL) or is negative
(before the capture start) are dropped with a counted note; metadata with unexpected types is
ignored with a note; optional data (NVTX ``eventType``, thread names, ``StringIds``) degrades with
a note; texts that are not UTF-8 are decoded with replacement characters. The file is opened
read-only with SQLite's locking (a WAL's committed rows count; a file being written is a clear
error), inside one read transaction.

Speed: the big tables are decoded straight from the file's pages into numpy columns
(:mod:`._pages`, through :mod:`._scan`; its hot loops in C, ``_npage.c``, built at install where
a compiler is, with the numpy decoder as the fallback and the definition, ``TRACEOVERLAP_NPAGE=0``
to force it), then names become categorical codes with hash lookups;
no per-row Python object except one ``str`` per NVTX text, and with ``keep_range`` (what
``analyze`` passes) not even that for the ranges it refuses: they are tested a block of texts at
a time as they are decoded and never held. Rows come out grouped by rank, so units are slices of
the table.

Memory: the map's pages are handed back as they are decoded; columns with one value are one
value viewed n times. ``process=pid`` reads one process of a GPU capture (:mod:`._process`): the
per-rank map reads a large multi-process export one process at a time, so its peak follows the
largest process. ``benchmarks/bench_nsys.py`` and docs/performance.md have the figures.

The modules, in the order a read goes through them:

- :mod:`._export`: an ``.nsys-rep`` exported to SQLite by ``nsys export`` (the one runner, also
  used by ``traceoverlap profile --nsys``), and the cache of exports;
- :mod:`._open`: the file check, the read-only connection and its read transaction, errors;
- :mod:`._schema`: tables and columns discovered, the reader's shared state, column scans;
- :mod:`._metadata`: string ids, schema version, clock, thread / process / GPU names;
- :mod:`._activity`: GPU activities and CUDA API calls; :mod:`._nvtx`: NVTX ranges, ``rank N``;
- :mod:`._sync`: synchronization records and the event records stream waits wait on;
- :mod:`._ranks`: the rank of each process (and GPU), the TraceInfo of each rank;
- :mod:`._process`: reading one process of a multi-process export (the per-rank map's unit);
- :mod:`._reader`: the tables read in order, rows placed on their ranks, the Timeline;
- :mod:`._rows` and :mod:`._strings`: numpy row blocks and categorical string codes.
"""

from __future__ import annotations

import os
from pathlib import Path

from ...core.errors import TraceFormatError
from ...core.model import Timeline
from ._export import exported
from ._open import SQLITE_MAGIC, read_export
from ._process import processes_of
from ._schema import RangeFilter

__all__ = ["read_nsys", "read_nsys_rep", "nsys_processes", "SQLITE_MAGIC", "RangeFilter"]


def read_nsys(
    path: str | os.PathLike[str],
    keep_range: RangeFilter | None = None,
    process: int | None = None,
) -> Timeline:
    """Read an Nsight Systems SQLite export into a :class:`Timeline` (one rank per (pid, GPU), or
    per process on a CPU capture).

    All times are integer nanoseconds (unix epoch when the export records the session start).
    ``keep_range``: only the NVTX ranges whose name it accepts are kept (the analysis passes the
    step, phase and communication patterns: an ``emit_nvtx`` capture's million unique op ranges
    are never read into the Timeline); the others are counted in a note. None keeps every range.
    ``process``: only the ranks of that process (pid) of a GPU capture, numbered as in the whole
    file, reading only that process's rows (:func:`nsys_processes` lists them; the per-rank map
    reads a large multi-process export one process at a time).
    Raises :class:`TraceFormatError` for anything that is not a usable nsys export.
    """
    return read_export(Path(path), Path(path), keep_range, process)


def nsys_processes(path: str | os.PathLike[str]) -> list[int]:
    """The processes (pids) of a GPU capture that :func:`read_nsys` can read one at a time, when
    it has several; [] for one process, a CPU capture, or an export it cannot split (the whole
    read then says what is wrong, if anything)."""
    return processes_of(Path(path))


def read_nsys_rep(path: str | os.PathLike[str], keep_range: RangeFilter | None = None) -> Timeline:
    """Read an ``.nsys-rep`` report by exporting it to SQLite with ``nsys`` (which must be on PATH).

    The export is cached next to the report (``report.sqlite``) when that folder is writable (and
    reused while it is ours, whole, and records the report's current size and SHA-256), else in
    the per-user cache
    ``$XDG_CACHE_HOME/traceoverlap/nsys`` (mode 0700) under the report's content hash; with a
    cached export ``nsys`` is not needed.
    """
    p = Path(path)
    if not p.is_file():
        raise TraceFormatError(p, "no such file", "check the path")
    return read_export(exported(p), p, keep_range)
