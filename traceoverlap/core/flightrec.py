"""The Flight Recorder records: what every reader of PyTorch's Flight Recorder dumps produces and
the hang analysis (``run/hang.py``) reads.

A Flight Recorder dump is one rank's ring buffer of its last collectives and point-to-point ops
(``torch._C._distributed_c10d._dump_fr_trace()``, a pickle, or ``_dump_fr_trace_json``, JSON),
with ``pg_config`` (per process group: name, description, ranks) and ``pg_status`` (per group:
last enqueued / started / completed collective sequence id). :class:`FlightRecords` holds a set
of such dumps as two columnar tables; no per-entry Python objects downstream.

``entries``: one row per (rank, entry), in the dump's order within a rank. Columns (nullable
dtypes; null where the dump does not say, never 0 or -1 standing in for "unknown"):

======================  ========  =============================================================
column                  dtype     meaning
======================  ========  =============================================================
rank                    int64     the rank that dumped it
record_id               Int64     the entry's id in that rank's ring buffer
pg_id                   Int64     process group id (``pg_id``)
pg_name                 string    process group name (``process_group[0]``; ``"0"`` default)
pg_desc                 string    process group description (``process_group[1]``)
collective_seq_id       Int64     per-group sequence id of collectives (0 for p2p entries)
p2p_seq_id              Int64     per-group sequence id of point-to-point ops
op_id                   Int64     per-group op id
is_p2p                  boolean   a send/recv entry
op                      string    ``profiling_name``, e.g. ``gloo:all_reduce``, ``nccl:send 0->1``
state                   string    ``scheduled`` / ``started`` / ``completed``
retired                 boolean   retired from the ring (completed and seen done)
input_sizes             string    JSON text of the input shapes (``[[1000]]``)
output_sizes            string    JSON text of the output shapes
input_dtypes            string    JSON text of the input dtypes (``["Float"]``)
output_dtypes           string    JSON text of the output dtypes
numel_in                Int64     elements over all inputs (null when no sizes recorded)
time_created_ns         Int64     when the entry was enqueued (unix ns)
time_started_ns         Int64     ``time_discovered_started_ns``; null when absent or 0
time_completed_ns       Int64     ``time_discovered_completed_ns``; null when absent or 0
timeout_ms              Int64     the op's timeout
thread_id               string    the enqueuing thread
thread_name             string    its name
frame                   string    the innermost user frame ``file:line in name`` (torch's own
                                  frames skipped), null when no frames were recorded
stack                   string    every recorded frame, innermost first, one per line
duration_ns             Int64     ``duration_ms`` (the collective's GPU time, NCCL with
                                  ``TORCH_NCCL_ENABLE_TIMING``) in ns; null when not recorded
======================  ========  =============================================================

``groups``: one row per (rank, process group) the rank's dump names. Columns: ``rank`` int64,
``pg_id`` Int64, ``pg_name`` string, ``pg_desc`` string, ``members`` string (JSON list of the
group's global ranks, null when the dump does not say), ``size`` Int64, ``last_enqueued`` Int64,
``last_started`` Int64, ``last_completed`` Int64 (from ``pg_status``; null when absent or -1).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

ENTRY_COLUMNS: tuple[tuple[str, str], ...] = (
    ("rank", "int64"),
    ("record_id", "Int64"),
    ("pg_id", "Int64"),
    ("pg_name", "string"),
    ("pg_desc", "string"),
    ("collective_seq_id", "Int64"),
    ("p2p_seq_id", "Int64"),
    ("op_id", "Int64"),
    ("is_p2p", "boolean"),
    ("op", "string"),
    ("state", "string"),
    ("retired", "boolean"),
    ("input_sizes", "string"),
    ("output_sizes", "string"),
    ("input_dtypes", "string"),
    ("output_dtypes", "string"),
    ("numel_in", "Int64"),
    ("time_created_ns", "Int64"),
    ("time_started_ns", "Int64"),
    ("time_completed_ns", "Int64"),
    ("timeout_ms", "Int64"),
    ("thread_id", "string"),
    ("thread_name", "string"),
    ("frame", "string"),
    ("stack", "string"),
    ("duration_ns", "Int64"),
)

GROUP_COLUMNS: tuple[tuple[str, str], ...] = (
    ("rank", "int64"),
    ("pg_id", "Int64"),
    ("pg_name", "string"),
    ("pg_desc", "string"),
    ("members", "string"),
    ("size", "Int64"),
    ("last_enqueued", "Int64"),
    ("last_started", "Int64"),
    ("last_completed", "Int64"),
)


@dataclass(frozen=True)
class FlightRecords:
    """A set of per-rank Flight Recorder dumps (one job), read."""

    #: one row per (rank, entry): :data:`ENTRY_COLUMNS`
    entries: pd.DataFrame
    #: one row per (rank, process group): :data:`GROUP_COLUMNS`
    groups: pd.DataFrame
    #: the ranks whose dumps were read, ascending
    ranks: tuple[int, ...]
    #: the world's ranks when the dumps say (the default group's members), else None
    world: tuple[int, ...] | None
    #: rank -> the file it was read from
    files: dict[int, str] = field(default_factory=dict)
    #: rank -> the dump's ``version`` field (torch 2.13 writes ``"2.10"``)
    versions: dict[int, str] = field(default_factory=dict)
    #: what was dropped, guessed or missing (missing ranks, entries without a group, ...)
    notes: tuple[str, ...] = ()

    @property
    def missing_ranks(self) -> tuple[int, ...]:
        """Ranks of the world with no dump read (empty when the world is unknown)."""
        if self.world is None:
            return ()
        have = set(self.ranks)
        return tuple(r for r in self.world if r not in have)
