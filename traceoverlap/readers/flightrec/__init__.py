"""PyTorch Flight Recorder dumps: a folder of per-rank dumps (pickle or JSON, every schema
version their ``version`` field names) into :class:`~traceoverlap.core.flightrec.FlightRecords`.

- :func:`read_flight_records` reads a set of dumps (files and / or folders): which files and
  ranks (:func:`dump_files`, the rank from the name's trailing number), each dump
  (:func:`read_dump`, one file: the readers' map unit), then the tables in one go
  (:func:`combine`). A caller that maps the files in parallel passes ``map_parts``.
- :func:`is_flight_record` is the cheap sniff (64 bytes) that lets ``analyze`` tell dumps from
  traces; :func:`holds_flight_records` says whether paths hold dumps and no traces.

A pickle is read by an unpickler that admits plain containers and scalars only (:mod:`._load`):
a crafted dump cannot run code. Bad or partial dumps are one-line :class:`TraceFormatError`;
missing ranks, guesses and what the dumps do not record are notes on the records.
"""

from __future__ import annotations

import gc
import itertools
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path

import numpy as np
import pandas as pd

from ...core.errors import TraceFormatError
from ...core.flightrec import ENTRY_COLUMNS, GROUP_COLUMNS, FlightRecords
from ._files import NAMING, DumpFiles, dump_files, is_flight_record, name_rank, ranks_text
from ._load import load_dump
from ._table import KNOWN_VERSION, DumpPart, dump_part

__all__ = [
    "DumpFiles",
    "DumpPart",
    "combine",
    "dump_files",
    "holds_flight_records",
    "is_flight_record",
    "read_dump",
    "read_flight_records",
]


def read_dump(path: str | Path, rank: int | None = None) -> DumpPart:
    """One rank's dump file as column lists (:class:`DumpPart`): the map's unit. ``rank``: the
    file name's trailing number when None (as :func:`dump_files` numbers it)."""
    if rank is None:
        named = name_rank(Path(path).name)
        if named is None:
            raise TraceFormatError(path, "no rank number at the end of the file name", NAMING)
        rank = named[1]
    # the cyclic collector off meanwhile: a ring unpickles into ~10^5 containers, none of them
    # in a cycle, which every collection of the young generation would walk again (2x slower)
    was = gc.isenabled()
    gc.disable()
    try:
        data, written = load_dump(path)
        return dump_part(str(path), rank, data, written)
    finally:
        if was:
            gc.enable()


def read_flight_records(
    paths: str | Path | Sequence[str | Path],
    map_parts: Callable[[Sequence[tuple[int, str]]], Iterable[DumpPart]] | None = None,
) -> FlightRecords:
    """The Flight Recorder records of the dumps in ``paths`` (files and / or folders).

    ``map_parts``: reads the ``(rank, path)`` pairs into :class:`DumpPart` s, in any order; one
    after the other here when None. Through the run's map, for instance::

        read_flight_records(paths, lambda pairs: run_map([Path(p) for _, p in pairs], read_dump))
    """
    found = dump_files(paths)
    if map_parts is None:
        parts: Iterable[DumpPart] = (read_dump(p, r) for r, p in found.files)
    else:
        parts = map_parts(found.files)
    return combine(parts, found.notes)


def holds_flight_records(paths: str | Path | Sequence[str | Path]) -> bool:
    """Whether ``paths`` hold Flight Recorder dumps and no trace of another format: each file
    given, or each file of each folder given, that sniffs as anything sniffs as a dump."""
    from ..formats import SNIFF_BYTES, sniff_bytes

    items = [paths] if isinstance(paths, str | Path) else list(paths)
    files: list[Path] = []
    for item in items:
        p = Path(item)
        if p.is_dir():
            try:
                files.extend(q for q in p.iterdir() if q.is_file())
            except OSError:
                return False
        elif p.is_file():
            files.append(p)
    kinds = set()
    for f in files:
        if is_flight_record(f):  # gzip'd ones too
            kinds.add("dumps")
            continue
        try:
            with open(f, "rb") as fh:
                head = fh.read(SNIFF_BYTES)
        except OSError:
            continue
        fmt = sniff_bytes(head, f.name) if head.strip() else None  # blank: says nothing
        if fmt is not None:
            kinds.add(fmt.kind)
    return kinds == {"dumps"}


# --- the tables, in one go ------------------------------------------------------------------


def _column(values: Sequence[object], dtype: str) -> object:
    if dtype == "int64":
        return np.asarray(values, dtype=np.int64)
    return pd.array(values, dtype=dtype)


def _entry_column(parts: Sequence[DumpPart], name: str, dtype: str) -> object:
    """One entries column over every part: the parts' (values, mask) arrays concatenated for a
    nullable integer column; for the others, the parts' codes mapped onto the distinct values
    of all parts, concatenated, and the values taken once (a ``string`` column's values are
    the same string objects, shared)."""
    cols = [p.entries[name] for p in parts]
    if dtype == "Int64":
        if not cols:
            return pd.array([], dtype="Int64")
        values = np.concatenate([c[0] for c in cols], dtype=np.int64)  # parts hold them narrow
        mask = np.concatenate([c[1] for c in cols])
        return pd.arrays.IntegerArray(values, mask)
    index: dict[object, int] = {}
    codes = []
    for part_codes, cats in cols:
        lut = np.array([index.setdefault(c, len(index)) for c in cats] + [-1], dtype=np.int64)
        codes.append(lut[part_codes])
    allc = np.concatenate(codes) if codes else np.empty(0, dtype=np.int64)
    if dtype == "boolean":
        return pd.arrays.BooleanArray(allc == 1, allc < 0)
    table = np.empty(len(index) + 1, dtype=object)
    table[: len(index)] = list(index)
    table[-1] = None
    return _column(table[allc], dtype)  # type: ignore[arg-type]


def combine(parts: Iterable[DumpPart], notes: Sequence[str] = ()) -> FlightRecords:
    """The records of one job from its ranks' dumps (any order): both tables built once from the
    concatenated column lists, the world and the notes."""
    ps = sorted(parts, key=lambda p: p.rank)
    n_groups = [len(p.groups["pg_id"]) for p in ps]
    entry_cols: dict[str, object] = {
        "rank": np.repeat([p.rank for p in ps], [p.n for p in ps]).astype(np.int64)
    }
    for name, dtype in ENTRY_COLUMNS[1:]:
        entry_cols[name] = _entry_column(ps, name, dtype)
    group_cols: dict[str, object] = {
        "rank": np.repeat([p.rank for p in ps], n_groups).astype(np.int64)
    }
    for name, dtype in GROUP_COLUMNS[1:]:
        chained = itertools.chain.from_iterable(p.groups[name] for p in ps)
        group_cols[name] = _column(list(chained), dtype)
    entries = pd.DataFrame(entry_cols, copy=False)  # the columns are new: no copy
    groups = pd.DataFrame(group_cols)
    ranks = tuple(p.rank for p in ps)
    world, world_notes = _world(groups, ranks)
    return FlightRecords(
        entries=entries,
        groups=groups,
        ranks=ranks,
        world=world,
        files={p.rank: p.path for p in ps},
        versions={p.rank: p.version for p in ps if p.version is not None},
        notes=(*notes, *world_notes, *_fact_notes(ps)),
    )


def _world(
    groups: pd.DataFrame, ranks: tuple[int, ...]
) -> tuple[tuple[int, ...] | None, list[str]]:
    """The world's ranks: the default group's members (its name ``0``, description
    ``default_pg`` or id 0) as the dumps give them, else every group's members; and the
    notes."""
    import json

    notes: list[str] = []
    known = groups[groups["members"].notna()]
    default = known[
        (known["pg_name"] == "0") | (known["pg_desc"] == "default_pg") | (known["pg_id"] == 0)
    ]
    lists = {str(m) for m in default["members"]}
    if not lists and len(known):
        lists = {str(m) for m in known["members"]}
        notes.append(
            "no default process group in the dumps: the world is taken to be every group's "
            "members together"
        )
    elif len(lists) > 1:
        notes.append(
            f"the ranks disagree on the default group's members ({len(lists)} different lists): "
            "the world is taken to be all of them together"
        )
    if not lists:
        if ranks:
            notes.append(
                "the dumps name no group's members (no `pg_config`): ranks that dumped nothing "
                "cannot be told"
            )
        return None, notes
    world = tuple(sorted({r for m in lists for r in json.loads(m)}))
    missing = sorted(set(world) - set(ranks))
    if missing:
        notes.append(
            f"{ranks_text(missing)} of {len(world)} dumped nothing: no file for them was read "
            "(the process may have died before dumping, or its file was not copied); what "
            f"{'they were' if len(missing) > 1 else 'it was'} doing is unknown"
        )
    outside = sorted(set(ranks) - set(world))
    if outside:
        notes.append(
            f"{ranks_text(outside)}: outside the world of {len(world)} the dumps' groups name "
            "(a dump of another job, or misnamed?)"
        )
    return world, notes


def _fact_notes(parts: Sequence[DumpPart]) -> list[str]:
    """What the dumps lacked or what was guessed, one note per kind over the ranks."""
    by: dict[tuple[str, str], list[int]] = {}
    for p in parts:
        for kind, value in p.facts.items():
            by.setdefault((kind, value), []).append(p.rank)
    versions = {p.version for p in parts if p.version is not None}
    notes = []
    if len(versions) > 1:
        notes.append(
            f"the dumps are of {len(versions)} schema versions: {', '.join(sorted(versions))}"
        )
    known = ".".join(map(str, KNOWN_VERSION))
    for (kind, value), rs in sorted(by.items(), key=lambda kv: (kv[0][0], kv[1][0])):
        who = ranks_text(rs)
        text = {
            "no_entries": f"{who} dumped no entries (an empty ring, or dumped without collectives)",
            "no_frames": f"no stack frames in the dumps of {who} (torch writes none into the JSON "
            "dump; its pickle has them): where they were called from is unknown",
            "no_times": f"no start or completion times in the dumps of {who} (gloo records none; "
            "NCCL does): when their collectives ran is unknown",
            "guessed_pg": f"{who}: {value}",
            "legacy_seq": f"{who}: version 1.x dumps, their `seq_id` read as the collective "
            "sequence id",
            "derived_p2p": f"{who}: no `is_p2p` in the dumps, taken from the op's name "
            "(send / recv)",
            "no_version": f"{who}: the dumps carry no `version`: read by the newest field names",
            "newer": f"{who}: version {value} dumps, newer than {known} (the newest this reader "
            "knows): read by the same field names",
            "odd_version": f"{who}: version {value!r} is not major.minor: read by the newest "
            "field names",
            "rank_differs": f"{who}: the dump says rank {value}; the file name's number is used",
            "comm_state": f"{who}: `nccl_comm_state` of {value} communicator(s) left unread",
        }.get(kind)
        if text is not None:
            notes.append(text)
    return notes
