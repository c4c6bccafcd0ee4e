"""Which files are the dumps of one job, and which rank each is.

PyTorch names a rank's dump ``<prefix><rank>`` (``TORCH_FR_DUMP_TEMP_FILE``, default
``/tmp/nccl_trace_rank_``; ``fr_0``, ``fr_1`` ...) and the version 2.10 dump carries no rank
field: the rank is the file name's trailing number, before any suffix (``fr_0.json``,
``nccl_trace_rank_3.pkl``). A folder is listed (not recursively); its dumps are the files whose
first bytes are a dump's (:func:`~traceoverlap.readers.formats.flightrec_head`), and, once the
prefix is guessed, the files named ``<prefix><rank>`` that are not (an empty or truncated dump:
reading it says what is wrong). Dumps named with another prefix are left out with a note (the
most common prefix is the job's; a tie is an error). A rank's pickle and JSON dump side by side
(``fr_0`` and ``fr_0.json``, both of torch's writers) are one dump: the pickle is read (it
carries the stack frames), with a note.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from ...core.errors import TraceFormatError, UsageError
from .._bytes import inflated_head
from ..formats import SNIFF_BYTES, flightrec_head

__all__ = ["DumpFiles", "dump_files", "is_flight_record", "name_rank", "ranks_text"]

_NAME = re.compile(r"\A(?P<prefix>.*?)(?P<rank>\d+)(?P<suffix>(?:\.[^.\d][^.]*)*)\Z", re.DOTALL)
#: Suffixes a dump that does not sniff as one may have and still be read as the job's (its read
#: then says what is wrong with it).
_DUMP_SUFFIXES = ("", ".json", ".pkl", ".pickle", ".pt", ".bin", ".gz", ".json.gz", ".pkl.gz")
NAMING = (
    "name each rank's dump <prefix><rank>, as PyTorch does (fr_0, fr_1, ... or fr_0.json, "
    "fr_1.json ...)"
)


def name_rank(name: str) -> tuple[str, int, str] | None:
    """``(prefix, rank, suffix)`` of a dump's file name, None without a trailing number."""
    m = _NAME.match(name)
    if m is None:
        return None
    return m.group("prefix"), int(m.group("rank")), m.group("suffix")


def _head(path: Path) -> bytes:
    """A file's first bytes, inflated when gzip (dumps copied off a cluster often are)."""
    return inflated_head(path, SNIFF_BYTES)


def is_flight_record(path: str | Path) -> bool:
    """Whether ``path`` is a file whose first bytes start a Flight Recorder dump (pickle or
    JSON): cheap, reads 64 bytes."""
    p = Path(path)
    return p.is_file() and flightrec_head(_head(p))


def ranks_text(ranks: Sequence[int]) -> str:
    """``rank 3`` / ``ranks 0, 2-5, 9``: consecutive ranks as a span."""
    rs = sorted(set(ranks))
    spans: list[str] = []
    i = 0
    while i < len(rs):
        j = i
        while j + 1 < len(rs) and rs[j + 1] == rs[j] + 1:
            j += 1
        spans.append(str(rs[i]) if j == i else f"{rs[i]}-{rs[j]}" if j > i + 1 else
                     f"{rs[i]}, {rs[j]}")  # fmt: skip
        i = j + 1
    return ("rank " if len(rs) == 1 else "ranks ") + ", ".join(spans)


def _names(paths: Sequence[Path], limit: int = 3) -> str:
    shown = ", ".join(p.name for p in paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")


@dataclass(frozen=True)
class DumpFiles:
    """The dumps to read: (rank, path) by rank, and what was left out or guessed."""

    files: tuple[tuple[int, str], ...]
    notes: tuple[str, ...]


def _folder(folder: Path, notes: list[str]) -> list[tuple[int, Path]]:
    try:
        listed = sorted(q for q in folder.iterdir() if q.is_file())
    except OSError as exc:
        raise TraceFormatError(
            folder, f"cannot list the folder: {exc.strerror or exc}", "check the path"
        ) from None
    dumps = [q for q in listed if flightrec_head(_head(q))]
    if not dumps:
        raise TraceFormatError(
            folder,
            "folder holds no Flight Recorder dumps",
            f"expected one file per rank, pickle or JSON; {NAMING}",
        )
    named = {q: name_rank(q.name) for q in dumps}
    unnumbered = [q for q, n in named.items() if n is None]
    prefixes = Counter(n[0] for n in named.values() if n is not None)
    if not prefixes:
        raise TraceFormatError(
            unnumbered[0], "no rank number at the end of the dump's file name", NAMING
        )
    (best, count), *rest = prefixes.most_common() + [("", 0)]
    if rest and rest[0][1] == count:
        raise TraceFormatError(
            folder,
            f"two sets of dumps: {count} named {best}<rank> and {count} named "
            f"{rest[0][0]}<rank>, and no way to tell which is the job's",
            f"pass the files of one set ({folder}/{best}*)",
        )
    chosen: list[tuple[int, Path]] = []
    other: list[Path] = []
    for q in listed:
        n = name_rank(q.name)
        if n is not None and n[0] == best and (q in named or n[2].lower() in _DUMP_SUFFIXES):
            chosen.append((n[1], q))
        elif q in named:
            other.append(q)
    if other:
        notes.append(
            f"{folder}: read the {len(chosen)} dumps named {best}<rank>; left out "
            f"{len(other)} other Flight Recorder dump(s) ({_names(other)}): pass them "
            "explicitly to read them"
        )
    return chosen


def _written(path: Path) -> str:
    head = _head(path).lstrip()
    return "pickle" if head[:1] == b"\x80" else "json" if head[:1] in (b"{", b"[") else "?"


def _file_rank(p: Path) -> int:
    """The rank of a dump given by name; a file without a rank number in its name is refused
    (one that is no dump at all, a trace given to hang, is told so, not how to name dumps)."""
    n = name_rank(p.name)
    if n is not None:
        return n[1]
    if p.is_file() and not flightrec_head(_head(p)):
        raise TraceFormatError(
            p,
            "not a PyTorch Flight Recorder dump",
            "give the ranks' dumps, see docs/hang.md; a profiler trace is read by "
            "`traceoverlap analyze`",
        )
    raise TraceFormatError(p, "no rank number at the end of the file name", NAMING)


def dump_files(paths: str | Path | Sequence[str | Path]) -> DumpFiles:
    """The dumps of ``paths`` (files and folders) and their ranks; raises
    :class:`TraceFormatError` for a dump without a rank number in its name or two dumps of one
    rank."""
    items = [paths] if isinstance(paths, str | Path) else list(paths)
    if not items:
        raise UsageError("no input: give the folder of Flight Recorder dumps, or its files")
    notes: list[str] = []
    found: list[tuple[int, Path]] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            found.extend(_folder(p, notes))
        elif p.exists():
            found.append((_file_rank(p), p))
        else:
            raise TraceFormatError(p, "no such file or folder", "check the path")
    by_rank: dict[int, list[Path]] = {}
    for rank, p in found:
        if p not in by_rank.setdefault(rank, []):
            by_rank[rank].append(p)
    files: list[tuple[int, str]] = []
    twins: list[int] = []
    for rank in sorted(by_rank):
        ps = by_rank[rank]
        if len(ps) == 2 and sorted(_written(q) for q in ps) == ["json", "pickle"]:
            ps = [q for q in ps if _written(q) == "pickle"]
            twins.append(rank)
        if len(ps) > 1:
            raise TraceFormatError(
                ps[1],
                f"a second dump for rank {rank} (also {ps[0]})",
                "give each rank's dump once (one folder per job)",
            )
        files.append((rank, str(ps[0])))
    if twins:
        notes.append(
            f"{ranks_text(twins)}: a pickle and a JSON dump each; read the pickles (they carry "
            "the stack frames), not the JSON copies"
        )
    return DumpFiles(tuple(files), tuple(notes))
