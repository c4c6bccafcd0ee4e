"""Inputs of an analysis: which files to read, and the map's units. Running the map over them
is :mod:`traceoverlap.run.parallel`'s.

Files: each file as given; a folder's trace files (sorted, not recursive: the names end with a
suffix of :data:`.formats.FORMATS`; ``x.nsys-rep`` next to its own export ``x.sqlite`` is read
once). Files in a folder that are not traces (a stray ``config.json``, this tool's own ``-o
result.json``) are skipped with a note.

Units of the map (:func:`map_units`): one per file, except a file of a format that cuts a large
file into processes (:attr:`.formats.Format.processes`: a Nsight Systems export of several GPU
processes, from :data:`.formats.NSYS_SPLIT_MIN_BYTES` on), which is one unit per process
(:class:`ProcessPart`): each reads only its process's rows, so memory follows the largest process,
not the file, and the processes of one export run in parallel like rank files.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ..core.errors import TraceFormatError, UsageError
from . import formats, sniff_format
from ._bytes import STDIN, inflated_head, label

#: File names a folder's trace files end with (every format's suffixes).
TRACE_SUFFIXES = formats.trace_suffixes()


def _is_trace_name(p: Path) -> bool:
    name = p.name.lower()
    return any(name.endswith(s) for s in TRACE_SUFFIXES)


@dataclass(frozen=True)
class Inputs:
    """The inputs of one analysis, resolved once (:func:`resolve_inputs`) and passed on: the
    folders are listed, the files checked and the repeats refused a single time."""

    #: the files to read: each file as given, each folder's trace files (sorted)
    files: tuple[Path, ...]
    #: every entry of the folders given, as listed (``str``): a file found there rather than
    #: named by the user is skipped with a note when it is not a trace
    listed: frozenset[str]

    @property
    def names(self) -> list[str]:
        """The files as messages name them."""
        return [str(f) for f in self.files]


def resolve_inputs(paths: str | Path | Sequence[str | Path]) -> Inputs:
    """The :class:`Inputs` of ``paths``: each file as given; each folder's trace files (sorted,
    not recursive), listed once."""
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    if not items:
        raise UsageError("no input: give a trace file, several files, or a folder of rank traces")
    out: list[Path] = []
    listed: set[str] = set()
    for item in items:
        p = Path(item)
        _check_path(p)
        if p.is_dir():
            entries = list(p.iterdir())
            listed.update(str(q) for q in entries)
            found = _read_once(sorted(q for q in entries if q.is_file() and _is_trace_name(q)))
            if not found or all(_is_dump(q) for q in found):
                if any(_is_dump(q) for q in entries):
                    raise TraceFormatError(
                        p,
                        "folder holds PyTorch Flight Recorder dumps, not traces",
                        f"run `traceoverlap hang {p}` on them",
                    )
                raise TraceFormatError(
                    p, "folder holds no trace files", f"expected {', '.join(TRACE_SUFFIXES)} files"
                )
            out.extend(found)
        elif p.exists() or str(item) == "-":
            out.append(p)
        else:
            raise TraceFormatError(p, "no such file or folder", "check the path")
    _refuse_repeats(out)
    return Inputs(tuple(out), frozenset(listed))


def expand_paths(paths: str | Path | Sequence[str | Path]) -> list[Path]:
    """Files to read: each file as given; each folder's trace files (sorted, not recursive)."""
    return list(resolve_inputs(paths).files)


def _is_dump(q: Path) -> bool:
    """Whether ``q`` is a file whose first (inflated) bytes are a Flight Recorder dump's."""
    return q.is_file() and formats.flightrec_head(inflated_head(q, formats.SNIFF_BYTES))


def _read_once(found: list[Path]) -> list[Path]:
    """A folder's trace files without those whose export is beside them
    (:attr:`.formats.Format.read_instead`: ``x.nsys-rep`` beside ``x.sqlite``): one is read."""
    names = {q.name for q in found}
    instead = [(s, f.read_instead) for f in formats.FORMATS if f.read_instead for s in f.suffixes]
    return [
        q
        for q in found
        if not any(q.name.endswith(s) and q.name[: -len(s)] + e in names for s, e in instead)
    ]


def _refuse_repeats(files: list[Path]) -> None:
    """The same file named twice (or named and found in a folder, or through a link) would be
    counted as two ranks: one clear error."""
    seen: dict[tuple[int, int], Path] = {}
    for f in files:
        if str(f) == "-":
            continue
        try:
            st = os.stat(f)
        except OSError:
            continue
        key = (st.st_dev, st.st_ino)
        if key in seen:
            raise UsageError(
                f"{f}: the same file as {seen[key]}, given twice; give each rank file once"
            )
        seen[key] = f


def _check_path(p: Path) -> None:
    """A path the system cannot even look up (a name over 255 bytes, a path over 4096, a
    loop of links) is one clear error, not an OSError from ``is_dir``."""
    try:
        os.stat(p)
    except (FileNotFoundError, NotADirectoryError, ValueError):
        return  # said below ("no such file or folder"), or standard input
    except OSError as exc:
        raise TraceFormatError(
            p, f"cannot look the path up ({exc.strerror or exc})", "check the path"
        ) from None


def made_by_this_run(path: str) -> bool:
    """Whether ``path`` is an empty file this run created or writes to: standard output or error
    redirected into the folder being analysed (``analyze . -f json > out.json``), or an empty
    file created after this process started."""
    try:
        st = os.stat(path)
    except OSError:
        return False
    if st.st_size or not stat.S_ISREG(st.st_mode):
        return False
    for fd in (1, 2):
        try:
            out = os.fstat(fd)
        except OSError:
            continue
        if (out.st_dev, out.st_ino) == (st.st_dev, st.st_ino):
            return True
    try:
        started = os.stat(f"/proc/{os.getpid()}").st_ctime
    except OSError:
        return False
    return st.st_ctime >= started - 1.0  # the shell opens a redirect just before exec


def total_bytes(files: Sequence[Path]) -> int:
    total = 0
    for f in files:
        try:
            st = f.stat()
        except OSError:
            continue
        if stat.S_ISREG(st.st_mode):
            total += st.st_size
    return total


@dataclass(frozen=True)
class ProcessPart:
    """One process (``pid``) of a multi-process Nsight Systems export: a unit of the map."""

    path: str
    pid: int

    def __str__(self) -> str:
        return self.path


#: A unit of the map: a file (its path) or one process of an export.
Unit = str | ProcessPart


def map_units(files: Sequence[Path]) -> list[Path | ProcessPart]:
    """The map's units: each file, or each process of a file that its format cuts into processes
    (:func:`_split`)."""
    out: list[Path | ProcessPart] = []
    for f in files:
        pids = _split(f)
        out.extend([ProcessPart(str(f), p) for p in pids] if pids else [f])
    return out


def part_of(path: str, pid: int | None) -> Unit:
    """The unit that holds process ``pid`` of the file ``path`` (as :func:`map_units` cuts it)."""
    if pid is not None and pid in _split(Path(path)):
        return ProcessPart(path, pid)
    return path


def _split(f: Path) -> list[int]:
    """The processes of ``f`` read one at a time, each a unit of the map: a regular file whose
    name and content are of a format that cuts files into processes
    (:attr:`.formats.Format.processes`), of at least its ``split_min_bytes``; else []."""
    name = f.name.lower()
    cut = [x for x in formats.FORMATS if x.processes is not None and name.endswith(x.suffixes)]
    if str(f) == STDIN or not cut:
        return []
    try:
        st = f.stat()
    except OSError:
        return []
    cut = [x for x in cut if stat.S_ISREG(st.st_mode) and st.st_size >= x.split_min_bytes]
    if not cut:
        return []
    try:
        found = sniff_format(f)
    except TraceFormatError:
        return []  # the read says what is wrong
    from ._sigbus import guard  # a split may read the file's pages through a memory map

    with guard(label(f)):
        return next((x.split(f) for x in cut if x.name == found), [])
