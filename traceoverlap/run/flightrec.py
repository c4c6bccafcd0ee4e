"""Reading a job's Flight Recorder dumps with the run's map: one file per rank read in
``jobs`` processes (or on Dask), the way the trace analysis maps its rank files
(:func:`traceoverlap.run.parallel.run_map`); the tables built once, in this process.

A worker sends back one rank's dump as a compact part (:class:`~traceoverlap.readers.flightrec.
DumpPart`: a few narrow integer arrays, ~50 bytes an entry), never its raw plain data, so the
parent holds the parts and the final tables only (docs/hang.md "Scale").
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path

from ..core.errors import TraceFormatError
from ..core.flightrec import FlightRecords
from ..readers.flightrec import DumpPart, read_dump, read_flight_records
from ..readers.paths import Unit
from .parallel import run_map

__all__ = ["read_dumps"]


def read_dumps(
    paths: str | Path | Sequence[str | Path],
    *,
    jobs: int | None = None,
    scheduler: str | None = None,
) -> FlightRecords:
    """The Flight Recorder records of the dumps in ``paths`` (files and / or folders), each file
    read by :func:`~traceoverlap.readers.flightrec.read_dump` through :func:`run_map`: ``jobs``
    and ``scheduler`` mean what they mean for ``analyze`` (default: one process for under
    16 MB of dumps, else min(files, cores)). Notes the map made (fewer processes than asked)
    are added to the records' notes."""
    notes: list[str] = []

    def parts(pairs: Sequence[tuple[int, str]]) -> Iterable[DumpPart]:
        found = run_map(
            [Path(p) for _, p in pairs], _read, jobs=jobs, scheduler=scheduler, notes=notes
        )
        return _raised(found)

    records = read_flight_records(paths, map_parts=parts)
    if notes:
        records = dataclasses.replace(records, notes=(*records.notes, *notes))
    return records


@dataclasses.dataclass(frozen=True)
class _Failed:
    """A dump the worker could not read: the error's fields (an exception built with more than
    its message does not cross back from a worker process)."""

    kind: type[TraceFormatError]
    path: str
    reason: str
    hint: str


def _read(unit: Unit) -> DumpPart | _Failed:
    """The map's task: one dump file (a path; the map's units here are never process parts)."""
    try:
        return read_dump(str(unit))
    except TraceFormatError as exc:
        return _Failed(type(exc), exc.path, exc.reason, exc.hint)


def _raised(found: Iterable[object]) -> Iterator[DumpPart]:
    """The parts, a dump that failed raised here as the one-line error it was."""
    for p in found:
        if isinstance(p, _Failed):
            raise p.kind(p.path, p.reason, p.hint)
        if isinstance(p, DumpPart):
            yield p
