"""The trace's top-level fields (rank, world size, devices, base time, schema version) and the
:class:`~traceoverlap.core.model.TraceInfo` of a rank.

A field that is present but unusable is ignored with a note saying what was expected; the rank
then comes from the file name, else is assumed 0, and the first note says which.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np

from ...core.model import TraceInfo
from .._bytes import rank_from_filename
from ._categories import GPU_ACTIVITY_CODES, codes_in
from ._decode import META_FIELDS, Head, any_or_none
from ._values import INT32_MAX, INT64_MAX, MAX_WORLD_SIZE, int_field

#: A metadata value present but not decodable.
UNREADABLE = object()


class Meta:
    """The top-level metadata, decoded: None when absent, :data:`UNREADABLE` when present but
    not decodable (its raw bytes must not outlive the input buffer)."""

    def __init__(self, head: Head) -> None:
        values: dict[str, Any] = {}
        for name in META_FIELDS:
            raw = getattr(head, name)
            values[name] = any_or_none(raw, UNREADABLE) if len(raw) else None
            setattr(head, name, msgspec.Raw(b""))
        self.schemaVersion: Any = values["schemaVersion"]
        self.deviceProperties: Any = values["deviceProperties"]
        self.distributedInfo: Any = values["distributedInfo"]
        self.baseTimeNanoseconds: Any = values["baseTimeNanoseconds"]
        self.host_name: Any = values["host_name"]


def _short(v: Any) -> str:
    """A value as a note quotes it."""
    if v is UNREADABLE:
        return "(unreadable: a number beyond float range?)"
    r = repr(v)
    return r if len(r) <= 40 else r[:37] + "..."


def base_ns(head: Meta, notes: list[str]) -> tuple[int, bool]:
    """(baseTimeNanoseconds, whether it is usable). Absent or 0: (0, False), silently (the
    timestamps may be absolute); present but not an integer in [1, 2**63 - 1]: (0, False) and a
    note, since the clock can then not be trusted to be unix time."""
    v = head.baseTimeNanoseconds
    if v is None:
        return 0, False
    base = int_field(v, 0, INT64_MAX) if not isinstance(v, str) else None
    if base is None:
        notes.append(
            f"baseTimeNanoseconds {_short(v)} is not a usable time (an integer number of ns "
            "since 1970 is expected): times are relative to the trace's own clock, not unix "
            "time, and cannot be aligned with other ranks"
        )
        return 0, False
    return base, base > 0


def trace_info(
    p: str,
    head: Meta,
    cat: np.ndarray,
    device: np.ndarray,
    host_pid: int,
    clock: str,
    notes: list[str],
    gloo_threads: tuple[int, ...] = (),
) -> TraceInfo:
    """The rank's :class:`TraceInfo`; ``notes`` gets what the metadata needed saying (how the rank
    was found comes first)."""
    rank, world, backend = _distributed_info(head.distributedInfo, notes)
    source = "distributedInfo"
    if rank is None:
        rank, source = _rank_without_distributed_info(p, notes)
    gpu_rows = codes_in(cat, GPU_ACTIVITY_CODES)
    device_kind = "gpu" if gpu_rows.any() else "cpu"
    used = sorted(set(np.unique(device[gpu_rows]).tolist())) if gpu_rows.any() else []
    names = _device_names(head.deviceProperties)
    devices = tuple(names.get(d, f"device {d}") for d in used)
    version = head.schemaVersion
    return TraceInfo(
        path=p,
        format="kineto",
        rank=rank,
        world_size=world,
        backend=backend,
        rank_source=source,
        device_kind=device_kind,
        devices=devices,
        device_ids=tuple(used),
        format_version=None if version is None else str(version),
        clock=clock,
        pid=host_pid,
        device=used[0] if used else None,
        notes=tuple(notes),
        process_groups=_process_groups(head.distributedInfo),
        gloo_threads=gloo_threads,
        host=head.host_name if isinstance(head.host_name, str) and head.host_name else None,
    )


def _process_groups(dist: Any) -> tuple[tuple[str, tuple[int, ...]], ...]:
    """``distributedInfo.pg_config`` as ``(pg_name, ranks)`` in the listed (creation) order;
    entries that are not usable are skipped (the groups are then only partly known)."""
    if not isinstance(dist, dict) or not isinstance(dist.get("pg_config"), list):
        return ()
    out: list[tuple[str, tuple[int, ...]]] = []
    for g in dist["pg_config"]:
        if not isinstance(g, dict) or g.get("pg_name") is None:
            continue
        ranks = g.get("ranks")
        if not isinstance(ranks, list):
            continue
        rs = [int_field(r, 0, MAX_WORLD_SIZE - 1) for r in ranks]
        if any(r is None for r in rs):
            continue
        out.append((str(g["pg_name"]), tuple(int(r) for r in rs if r is not None)))
    return tuple(out)


def _distributed_info(dist: Any, notes: list[str]) -> tuple[int | None, int | None, str | None]:
    """(rank, world size, backend) from ``distributedInfo``; a value that is not usable is
    ignored, with a note."""
    if dist is None:
        return None, None, None
    if not isinstance(dist, dict):
        notes.append(f"distributedInfo {_short(dist)} is not an object; ignored")
        return None, None, None
    rank = _distributed_int(dist, "rank", "rank", 0, MAX_WORLD_SIZE - 1, notes)
    world = _distributed_int(dist, "world_size", "world size", 1, MAX_WORLD_SIZE, notes)
    b = dist.get("backend")
    return rank, world, (str(b) if b is not None else None)


def _distributed_int(
    dist: dict[str, Any], key: str, what: str, lo: int, hi: int, notes: list[str]
) -> int | None:
    v = dist.get(key)
    if v is None:
        return None
    out = int_field(v, lo, hi)
    if out is None:
        notes.append(
            f"distributedInfo.{key} {_short(v)} is not a usable {what} (an integer from {lo} "
            f"to {hi} is expected); ignored"
        )
    return out


def _rank_without_distributed_info(p: str, notes: list[str]) -> tuple[int, str]:
    """(rank, rank source) from the file name, else 0; said in the first note."""
    rank = rank_from_filename(p)
    if rank is not None and rank < MAX_WORLD_SIZE:
        notes.insert(0, f"Rank {rank} taken from the file name (the trace has no distributedInfo).")
        return rank, "filename"
    notes.insert(
        0, "The trace and its file name say no rank: assumed rank 0 (name files rank<N>.json)."
    )
    return 0, "default"


def _device_names(props: Any) -> dict[int, str]:
    """device id -> ``name (memory GB)`` from ``deviceProperties`` (an entry without ``id`` is
    the device of its position in the list, as in traces written before Kineto added it)."""
    out: dict[int, str] = {}
    if not isinstance(props, list):
        return out
    for i, d in enumerate(props):
        if not isinstance(d, dict):
            continue
        did = int_field(d.get("id", i), 0, INT32_MAX)
        if did is None or did in out:
            continue
        name = str(d.get("name", f"device {did}"))
        mem = d.get("totalGlobalMem")
        if isinstance(mem, (int, float)) and not isinstance(mem, bool) and 0 < mem < 1e18:
            name += f" ({mem / 1e9:.1f} GB)"
        out[did] = name
    return out
