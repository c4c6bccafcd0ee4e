"""A block of events as numpy columns (string columns as codes), and the id helpers."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ...core.model import CATEGORIES
from ._heap import LARGE_ROWS, release_freed

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]


CAT_CODE = {c: i for i, c in enumerate(CATEGORIES)}


def select(values: I64, keep: npt.NDArray[np.intp] | None) -> I64:
    return values if keep is None else values[keep]


def shared_if_constant(values: npt.NDArray[np.integer], dtype: type = np.int64) -> I64:
    """``values`` as ``dtype``, or when every value is the same, that value viewed
    ``values.size`` times (a read-only array of stride 0: no memory per row; the event table
    never writes its columns)."""
    if values.size and bool((values == values[0]).all()):
        return np.broadcast_to(values[:1].astype(dtype), values.shape)
    return values.astype(dtype, copy=False)


#: Ids up to which :func:`isin_ids` compares one by one (np.isin builds a lookup table: ~2 ms
#: on 200 000 rows, a comparison ~0.05 ms).
_FEW_IDS = 8


def isin_ids(values: npt.NDArray[np.integer], ids: Sequence[int]) -> npt.NDArray[np.bool_]:
    """``np.isin(values, ids)`` of an integer column and a few ids (an enum's): one comparison
    per id."""
    if len(ids) > _FEW_IDS:
        return np.isin(values, ids)
    out = np.zeros(values.shape, dtype=bool)
    for i in ids:
        out |= values == i
    return out


def pid_of(global_id: I64) -> I64:
    return (global_id >> 24) & 0xFFFFFF


def tid_of(global_id: I64) -> I64:
    return global_id & 0xFFFFFF


@dataclass
class Rows:
    """A block of events as numpy columns; string columns hold :class:`Strings` codes."""

    start: I64
    end: I64
    pid: I64
    device: I32
    stream: I64
    tid: I64
    correlation: I64
    category: I32
    name: I32
    lane: I32
    thread_name: I32
    #: kernels' launch shape code (:mod:`.._shape`), -1: none
    shape: I32

    def pop(self, column: str) -> I32:
        """Column ``column``, left empty here (its memory goes with its last user)."""
        values: I32 = getattr(self, column)
        setattr(self, column, values[:0].copy())
        return values

    def take(self, idx: npt.NDArray[np.intp]) -> Rows:
        return Rows(**{k: v[idx] for k, v in self.__dict__.items()})

    @staticmethod
    def concat(blocks: Sequence[Rows], trim: bool = False) -> Rows:
        """Stack blocks column by column, emptying the blocks' columns as it goes, so that the
        peak holds one extra column rather than a second copy of everything. ``trim``: hand
        each column's freed blocks back to the system before the next (see :mod:`._heap`; the
        read's last and largest concatenation: pages handed back cost a fault when reused)."""
        if len(blocks) == 1:
            return blocks[0]
        if not blocks:
            return Rows.empty()
        out: dict[str, npt.NDArray[Any]] = {}
        large = trim and sum(len(b) for b in blocks) >= LARGE_ROWS
        for k in Rows.__annotations__:
            out[k] = np.concatenate([getattr(b, k) for b in blocks])
            for b in blocks:
                setattr(b, k, np.empty(0, dtype=getattr(b, k).dtype))  # a [:0] view would pin it
            if large:  # the blocks' columns, just freed, make room for the next column
                release_freed()
        return Rows(**out)

    def group_by(self, rank: I32) -> I32:
        """Reorder the rows (in place, one column at a time) so that each rank's rows are
        contiguous, keeping their order within a rank (a stable sort): then
        :func:`traceoverlap.core.model.split_units` cuts units as views instead of copies."""
        if rank.size < 2 or bool((rank[1:] >= rank[:-1]).all()):
            return rank
        order = np.argsort(rank, kind="stable")
        for k in Rows.__annotations__:
            setattr(self, k, getattr(self, k)[order])
        return rank[order]

    @staticmethod
    def empty() -> Rows:
        z, z32 = np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int32)
        return Rows(z, z, z, z32, z, z, z, z32, z32, z32, z32, z32)

    def __len__(self) -> int:
        return int(self.start.size)


@dataclass
class NvtxRows:
    """NVTX rows read once: the ranges (as host rows) and, per row of the table that names a
    rank (``rank N``), that rank and its process."""

    ranges: Rows
    rank_pid: I64
    rank_value: I64
