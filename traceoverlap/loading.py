"""Reading the rank traces of a run: in parallel processes, and checking which ranks are there.

A rank's Timeline is columnar and small next to its raw trace (a 1 GB Kineto JSON becomes tens of
MB of numpy columns), so each worker process parses one file at a time and sends back only the
Timeline: at most ``jobs`` raw traces are in memory at once, never all of them.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from pathlib import Path

from .errors import TraceFormatError
from .model import Timeline

#: Show a progress bar (stderr, terminals only) when the inputs add up to more than this.
PROGRESS_MIN_BYTES = 256 * 1024 * 1024
#: Without an explicit ``jobs``, parse in parallel only when the inputs add up to more than this.
PARALLEL_MIN_BYTES = 16 * 1024 * 1024


def _read(path: Path) -> Timeline:
    from .readers import read_trace

    return read_trace(path)


def _read_in_worker(path: Path) -> Timeline | tuple[str, str, str]:
    # TraceFormatError's constructor takes (path, reason, hint): it does not survive pickling
    # across the process boundary as is, so it travels as a tuple and is rebuilt in the parent
    try:
        return _read(path)
    except TraceFormatError as exc:
        return (exc.path, exc.reason, exc.hint)


def default_jobs(n_files: int) -> int:
    """min(files, usable cores), at least 1."""
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # pragma: no cover - not on Linux
        cores = os.cpu_count() or 1
    return max(1, min(n_files, cores))


def _total_bytes(files: Sequence[Path]) -> int:
    total = 0
    for f in files:
        try:
            total += f.stat().st_size
        except OSError:
            pass
    return total


def _want_progress(files: Sequence[Path]) -> bool:
    return sys.stderr.isatty() and _total_bytes(files) >= PROGRESS_MIN_BYTES


def read_files(files: Sequence[Path], jobs: int | None = None) -> list[Timeline]:
    """Read every file into a Timeline, in input order, in ``jobs`` processes (1 = in this
    process; default :func:`default_jobs` when the inputs exceed :data:`PARALLEL_MIN_BYTES`, else
    1). The first unreadable file raises its error."""
    n = len(files)
    if jobs is None:
        # starting processes costs more than it saves on small traces
        jobs = default_jobs(n) if _total_bytes(files) >= PARALLEL_MIN_BYTES else 1
    jobs = max(1, min(jobs, n))
    if any(str(f) == "-" for f in files):
        jobs = 1  # standard input belongs to this process: a worker would read nothing
    progress = _want_progress(files)
    if jobs == 1 and not progress:
        return [_read(f) for f in files]
    results: list[Timeline | tuple[str, str, str]] = []
    if jobs == 1:
        it = map(_read_in_worker, files)
        results = _with_progress(it, n, progress)
    else:
        with ProcessPoolExecutor(max_workers=jobs) as pool:
            results = _with_progress(pool.map(_read_in_worker, files), n, progress)
    out: list[Timeline] = []
    for r in results:
        if isinstance(r, tuple):
            raise TraceFormatError(*r)
        out.append(r)
    return out


def _with_progress(
    items: Iterable[Timeline | tuple[str, str, str]], n: int, progress: bool
) -> list[Timeline | tuple[str, str, str]]:
    if not progress:
        return list(items)
    from rich.progress import Progress

    out: list[Timeline | tuple[str, str, str]] = []
    with Progress(transient=True) as bar:
        task = bar.add_task("reading rank traces", total=n)
        for r in items:
            out.append(r)
            bar.advance(task)
    return out


def rank_notes(timeline: Timeline) -> list[str]:
    """Caveats about which ranks the run has: ranks missing from a world the traces declare."""
    present = {t.rank for t in timeline.traces}
    sizes = {t.world_size for t in timeline.traces if t.world_size}
    notes: list[str] = []
    if len(sizes) > 1:
        notes.append(
            f"rank traces disagree on the world size ({sorted(sizes)}): are the traces from one run?"
        )
    if sizes:
        world = max(sizes)
        missing = sorted(set(range(world)) - present)
        if missing and len(present) == 1:
            notes.append(
                f"rank {min(present)} is the only rank given of a world of {world}: per-rank "
                "numbers only, no collectives matched across ranks"
            )
        elif missing:
            shown = ", ".join(str(r) for r in missing[:20]) + (" ..." if len(missing) > 20 else "")
            notes.append(
                f"rank traces missing from the input: rank{'s' if len(missing) > 1 else ''} "
                f"{shown} (world size {world}, {len(present)} rank traces given); the others "
                "are analysed and collectives matched across them"
            )
        extra = sorted(r for r in present if r >= world)
        if extra:
            notes.append(f"rank traces outside the declared world size {world}: ranks {extra}")
    return notes
