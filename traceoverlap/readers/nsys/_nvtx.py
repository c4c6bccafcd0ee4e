"""NVTX ranges (filtered by name as they are decoded) and the ``rank N`` texts."""

from __future__ import annotations

import ctypes
import re
from typing import cast

import numpy as np
import numpy.typing as npt
import pandas as pd

from ._activity import Activity
from ._columns import INT, OTHER, REFUSED, Columns
from ._memo import recall, remembered
from ._rows import CAT_CODE, NvtxRows, Rows, isin_ids, pid_of
from ._schema import NVTX, RangeFilter

I64 = npt.NDArray[np.int64]
Obj = npt.NDArray[np.object_]

# NVTX event types (ENUM_NSYS_EVENT_TYPE) used when the export does not carry the enum table;
# the same numbers in the 2022.4 and 2026.2 schemas.
_NVTX_RANGE_TYPES_DEFAULT = (59, 60)
_NVTX_RANGE_TYPE_NAMES = ("NvtxPushPopRange", "NvtxStartEndRange")
_NVTX_MARK_TYPES_DEFAULT = (34,)
_NVTX_MARK_TYPE_NAMES = ("NvtxMark",)

#: Distinct names from which :func:`_verdicts` asks the substring prefilter first (as
#: ``_pages._PREFILTER_TEXTS``).
_PREFILTER_NAMES = 512

#: Strings joined at a time by :func:`_containing`.
_JOIN_BLOCK = 1 << 16

_RANK_TEXT = re.compile(r"^\s*\[?\s*rank\s*[:=#_ ]?\s*(\d+)\s*\]?\s*$", re.IGNORECASE)


def _ending_threads(cols: Columns, gtid: I64, is_range: npt.NDArray[np.bool_]) -> I64:
    """A start/end range that another thread of its process ended belongs to that thread: a
    collective marked from issue to completion ends on the worker thread that did the work."""
    if "endGlobalTid" not in cols.ints:
        return gtid
    end_tid = cols.ints["endGlobalTid"]
    moved = (
        is_range
        & (cols.kinds["endGlobalTid"] == INT)
        & (end_tid != gtid)
        & (pid_of(end_tid) == pid_of(gtid))
    )
    return np.where(moved, end_tid, gtid)


def _containing(values: Obj, needles: tuple[str, ...]) -> npt.NDArray[np.intp]:
    """Indices of the strings that contain one of ``needles`` (none of which holds a NUL): C
    substring searches over blocks of strings joined by NULs, instead of a Python test each."""
    found: list[npt.NDArray[np.intp]] = []
    for a in range(0, len(values), _JOIN_BLOCK):
        texts = values[a : a + _JOIN_BLOCK].tolist()
        # where each string's NUL separator is (the last one's: the end of the joined text)
        ends = np.cumsum(np.fromiter(map(len, texts), np.int64, len(texts)) + 1) - 1
        joined = "\x00".join(texts)
        hits: list[int] = []
        for needle in needles:
            k = joined.find(needle)
            while k >= 0:
                hits.append(k)
                k = joined.find(needle, k + 1)
        if hits:
            found.append(a + np.unique(np.searchsorted(ends, np.array(hits, dtype=np.int64))))
    return np.concatenate(found) if found else np.zeros(0, dtype=np.intp)


def _rank_numbers(values: Obj) -> I64:
    """Per string: N when it reads ``rank N``, else -1 (the pattern only where "rank" appears)."""
    out = np.full(len(values), -1, dtype=np.int64)
    if len(values) == 0:
        return out
    for i in _containing(values, ("ank", "ANK")).tolist():
        m = _RANK_TEXT.match(values[i])
        if m is not None:
            out[i] = int(m.group(1))
    return out


def _verdicts(test: RangeFilter, uniques: Obj) -> npt.NDArray[np.bool_]:
    """``t != REFUSED and test(t)`` for each of ``uniques`` (distinct names), asked only of the
    names a ``test.candidates`` prefilter (:class:`traceoverlap.rank.namefilter.NameTest`)
    finds can match, when there are many."""
    texts = uniques.tolist()
    out = np.asarray(uniques != REFUSED, dtype=bool).reshape(len(texts))
    find = getattr(test, "candidates", None)
    if find is not None and len(texts) >= _PREFILTER_NAMES:
        ends = np.cumsum(np.fromiter(map(len, texts), np.int64, len(texts)) + 1) - 1
        cand = find("\x00".join(texts) + "\x00", ends)
        if cand is not None:
            out &= cand
    idx = np.flatnonzero(out)
    out[idx] = np.fromiter((test(texts[i]) for i in idx.tolist()), bool, idx.size)
    return out


def _addresses(values: Obj) -> npt.NDArray[np.intp]:
    """The objects of ``values`` (a contiguous object array) by address: a read-only view of its
    pointers, valid while ``values`` is."""
    buf = (ctypes.c_ssize_t * values.size).from_address(values.ctypes.data)
    return np.frombuffer(memoryview(buf).cast("B"), dtype=np.intp)


def _factorize_texts(texts: Obj) -> tuple[I64, Obj]:
    """``pd.factorize`` of the inline texts (None -> -1), the texts the range filter refused
    (:data:`REFUSED`, most of an ``emit_nvtx`` capture's) given one code after the others' without
    hashing them: a hash table sized for every row was the read's largest temporary.

    The rows' objects are factorized first, by address (the page decoder's rows of one text
    mostly share one str): the texts of the distinct objects, each taken at its first row, are
    then factorized by value, in that order, which is the order of the texts' first rows. Same
    codes and uniques as on the rows themselves, with a string hash and compare per distinct
    object instead of per row."""
    texts = np.ascontiguousarray(texts)
    if texts.size == 0:
        return _factorize_distinct(texts)
    per_row = _factorize_addresses(_addresses(texts))
    codes, uniques = _factorize_distinct(texts[_first_rows(per_row)])
    return codes[per_row], uniques


#: Rows whose objects :func:`_factorize_addresses` counts first, and the count from which the
#: rows are taken to be mostly distinct objects: more rows than a training step's distinct
#: names (the FSDP export's first 4 096 and 8 192 rows are 98 % distinct, its first 16 384 56 %:
#: its 200 000 rows hold 9 400 texts), three quarters of them (an emit_nvtx capture's: all).
_SAMPLE_ROWS = 16384
_MOSTLY_DISTINCT = 12288
#: The hash table :func:`_factorize_addresses` starts with when the objects repeat.
_REPEATS_HINT = 1 << 16


def _factorize_addresses(addr: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """``pd.factorize(addr)[0]``. pandas sizes its hash table for every row; where the rows
    share a few thousand objects (a read's texts), a table that starts smaller and grows is
    several times faster (0.025 -> 0.003 s on the FSDP export's 200 000 rows of 9 400 texts; a
    fresh table of every row's size is also ~1 500 pages to fault in: 10 -> 4 ms in a read),
    and slower where nearly every row is its own object (an ``emit_nvtx`` capture's unique
    texts): those keep pandas' size, told by the first rows. The codes do not depend on it."""
    hint = None
    if addr.size > _REPEATS_HINT:
        sample = addr[:_SAMPLE_ROWS]
        if len(pd.unique(sample)) < _MOSTLY_DISTINCT:
            hint = _REPEATS_HINT
    codes: npt.NDArray[np.intp] = pd.factorize(addr, size_hint=hint)[0]
    return codes


def _first_rows(codes: npt.NDArray[np.intp]) -> npt.NDArray[np.intp]:
    """The first row of each code of ``pd.factorize``'s ``codes`` (numbered in the order of
    their first rows), in code order: the rows whose code is above every earlier row's (what
    ``~pd.Series(values).duplicated()`` selects, without hashing the values again)."""
    if codes.size == 0:
        return np.zeros(0, dtype=np.intp)
    new = np.empty(codes.size, dtype=bool)
    new[0] = True
    np.greater(codes[1:], np.maximum.accumulate(codes[:-1]), out=new[1:])
    return np.flatnonzero(new)


def _factorize_distinct(texts: Obj) -> tuple[I64, Obj]:
    """:func:`_factorize_texts` on the rows themselves."""
    refused = texts == REFUSED
    if not refused.any():
        codes, found = pd.factorize(texts)
        return codes.astype(np.int64, copy=False), np.asarray(found, dtype=object)
    codes = np.full(texts.size, -1, dtype=np.int64)
    rest = np.flatnonzero(~refused)
    part, found = pd.factorize(texts[rest])
    codes[rest] = part
    codes[refused] = len(found)
    uniques = np.empty(len(found) + 1, dtype=object)
    uniques[: len(found)] = np.asarray(found, dtype=object)
    uniques[-1] = REFUSED
    return codes, uniques


class NvtxReader(Activity):
    def nvtx_text_keep(self) -> RangeFilter | None:
        """The inline NVTX texts worth decoding: the ranges ``keep_range`` wants, and the texts
        :func:`_rank_numbers` looks at for ``rank N`` (those with "ank" or "ANK")."""
        wanted = self.keep_range
        if wanted is None:
            return None
        including = getattr(wanted, "including", None)  # a namefilter.NameTest
        if including is not None:
            return cast(RangeFilter, including("ank", "ANK"))
        return lambda t: "ank" in t or "ANK" in t or wanted(t)

    def read_nvtx(self) -> NvtxRows:
        """Every NVTX range of every process (placed later), and the ``rank N`` texts."""
        empty = NvtxRows(Rows.empty(), np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64))
        nv = self.table(NVTX)
        if nv is None or not self.usable(nv, ("start", "end")):
            return empty
        int_cols = ["start", "end", "eventType", "globalTid", "endGlobalTid", "textId"]
        if self.keep_range is not None and recall(self.file, ("no step marker", nv)):
            # another process of this file kept no step marker: read every text at once, and
            # keep them all if this process's filtered read would have found none either
            cols = self.scan(nv, int_cols, ["text"])
            if cols.n == 0:
                return empty
            text = cols.texts.pop("text", None)
            none, factorized = self.filtered_keeps_no_marker(nv, cols, text)
            if none:
                self.keep_range = None
                rows = self.nvtx_rows(nv, cols, text, empty, factorized)
                assert rows is not None
                return rows
            del cols, text, factorized  # it would: the filtered read, as below
        cols = self.scan(nv, int_cols, ["text"], self.nvtx_text_keep())
        if cols.n == 0:
            return empty
        notes_before = len(self.notes)
        # the texts are handed over (no reference kept here): freed once factorized
        rows = self.nvtx_rows(nv, cols, cols.texts.pop("text", None), empty)
        if rows is None:
            # no range kept is a step marker: the caller would read the file again with every
            # range (rank/unit.py: map_file), so they are all kept now, as that read keeps them
            # (its notes, not this pass's); only the texts are scanned again
            del self.notes[notes_before:]
            self.keep_range = None
            remembered(self.file, ("no step marker", nv), lambda: True)
            again = self.scan(nv, [], ["text"])
            cols.bad_utf8 = again.bad_utf8
            rows = self.nvtx_rows(nv, cols, again.texts.pop("text", None), empty)
            assert rows is not None
        return rows

    def filtered_keeps_no_marker(
        self, nv: str, cols: Columns, text: Obj | None
    ) -> tuple[bool, tuple[I64, Obj] | None]:
        """Whether :meth:`nvtx_rows` would return None (no range kept is a step marker) on the
        same rows read with :meth:`nvtx_text_keep`, from their unfiltered texts ``text``: the
        same steps, without their notes. A text that filter refuses is refused by the range
        filter too (the filter keeps a superset of its names), so each range is kept here as
        :meth:`filter_ranges` keeps it there. With the answer, the factorized texts of the rows
        :meth:`nvtx_rows` factorizes (for it to use), when there are any."""
        if getattr(self.keep_range, "step_marker", None) is None:
            return False, None
        notes_before = len(self.notes)
        try:
            start_ok = cols.kinds["start"] == INT
            is_range, is_mark = self.nvtx_types(cols, nv)
            is_range &= self.valid_ranges(cols, nv, is_range)
            if self.thread_ids(cols, nv, self.gpu_pids) is None:
                return False, None  # nvtx_rows returns no rows, not None
            text_id = self.int_column(cols, nv, "textId", -1)
            # the rows and codes of nvtx_rows
            cand = np.flatnonzero((is_mark | is_range) & start_ok)
            text_code = np.full(is_range.size, -1, dtype=np.int64)
            uniques = np.zeros(0, dtype=object)
            factorized = None
            if text is not None and cand.size:
                factorized = _factorize_texts(text[cand])
                text_code[cand], uniques = factorized
            text_code, uniques = self.filter_ranges(is_range, text_code, uniques, text_id)
            return self.no_step_marker(is_range, text_code, uniques, text_id), factorized
        finally:
            del self.notes[notes_before:]

    def nvtx_rows(
        self,
        nv: str,
        cols: Columns,
        text: Obj | None,
        empty: NvtxRows,
        factorized: tuple[I64, Obj] | None = None,
    ) -> NvtxRows | None:
        """The ranges and ``rank N`` texts of the NVTX table's integer columns ``cols`` and its
        ``text`` column; None when the ranges were filtered and none kept is a step marker
        (:meth:`no_step_marker`). A second call on the same ``cols`` reads the same ranges (what
        :meth:`int_column` rewrites in place, it rewrites the same way again). ``factorized``:
        the factorized texts of its marks and ranges, when already found
        (:meth:`filtered_keeps_no_marker`)."""
        start, end = cols.ints["start"], cols.ints["end"]
        start_ok = cols.kinds["start"] == INT
        is_range, is_mark = self.nvtx_types(cols, nv)
        self.note_unfinished(cols, nv, is_range & ~is_mark & start_ok)
        is_range &= self.valid_ranges(cols, nv, is_range)
        gtid = self.thread_ids(cols, nv, self.gpu_pids)
        if gtid is None:
            return empty
        gtid = _ending_threads(cols, gtid, is_range)
        text_id = self.int_column(cols, nv, "textId", -1)
        if cols.bad_utf8:
            self.notes.append(
                f"{cols.bad_utf8} NVTX texts are not valid UTF-8: shown with replacement "
                "characters."
            )
        del cols
        # inline texts are factorized once, for the names and for the rank texts
        cand = np.flatnonzero((is_mark | is_range) & start_ok)
        text_code = np.full(is_range.size, -1, dtype=np.int64)
        uniques = np.zeros(0, dtype=object)
        if text is not None and cand.size:
            text_code[cand], uniques = factorized or _factorize_texts(text[cand])
        del text, factorized
        rank_pid, rank_value = self.rank_texts(cand, text_code, uniques, text_id, gtid)
        del cand
        if self.keep_range is not None:
            text_code, uniques = self.filter_ranges(is_range, text_code, uniques, text_id)
            if self.no_step_marker(is_range, text_code, uniques, text_id):
                return None
        # NVTX names: COALESCE(text, StringIds.value)
        keep = np.flatnonzero(is_range)
        names = self.names.add_string_ids(self.strings, text_id[keep], "")
        kept_code = text_code[keep]
        inline = np.flatnonzero(kept_code >= 0)
        if inline.size:
            names[inline] = self.names.add_codes(kept_code[inline], uniques, unique=True)
        del text_code
        n = keep.size
        ranges = self._host_block(
            start[keep],
            end[keep],
            gtid[keep],
            np.broadcast_to(np.int64(-1), (n,)),  # one value viewed n times, as _host_block's
            np.broadcast_to(np.int32(CAT_CODE["annotation"]), (n,)),
            names,
        )
        return NvtxRows(ranges, rank_pid, rank_value)

    def no_step_marker(
        self, is_range: npt.NDArray[np.bool_], text_code: I64, uniques: Obj, text_id: I64
    ) -> bool:
        """True when ``keep_range`` has a ``step_marker`` test (see
        :func:`traceoverlap.rank.unit.range_filter`) and no range kept is named as a step marker:
        a read whose ranges were filtered and whose units find no step marker is read again with
        every range, so this read can keep them all at once. False when the read would fail
        anyway (a CPU capture with no range kept: the error that read gives)."""
        marker = getattr(self.keep_range, "step_marker", None)
        if marker is None:
            return False
        keep = np.flatnonzero(is_range)
        if keep.size == 0 and self.process is None and not self.gpu_pids:
            return False
        code = text_code[keep]
        inline = np.unique(code[code >= 0])
        if any(marker(str(t)) for t in uniques[inline].tolist()):
            return False
        ids = np.unique(text_id[keep][code < 0])
        return not any(marker(str(t)) for t in self.strings.lookup(ids, "").tolist())

    def filter_ranges(
        self,
        is_range: npt.NDArray[np.bool_],
        text_code: I64,
        uniques: Obj,
        text_id: I64,
    ) -> tuple[I64, Obj]:
        """Clear ``is_range`` (in place) for the ranges whose name ``keep_range`` refuses, each
        distinct name tested once, and count them in a note; the inline texts come back compacted
        to the ones still in use, so the refused ones are freed."""
        assert self.keep_range is not None
        test = self.keep_range
        per_text = _verdicts(test, uniques)
        inline = text_code >= 0
        keep = np.where(inline, np.r_[per_text, False][text_code], False)
        pooled = is_range & ~inline
        if pooled.any():
            ids, inverse = np.unique(text_id[pooled], return_inverse=True)
            names = self.strings.lookup(ids)
            per_id = np.fromiter((test(str(t)) for t in names.tolist()), bool, ids.size)
            keep[pooled] = per_id[inverse]
        dropped = int(np.count_nonzero(is_range & ~keep))
        is_range &= keep
        if dropped:
            self.notes.append(
                f"{dropped} NVTX ranges were not read: their names match no step, phase, "
                "communication or wait pattern (the analysis uses no other range)."
            )
        used = np.flatnonzero(
            per_text
            & np.bincount(text_code[is_range & inline], minlength=len(uniques)).astype(bool)
        )
        remap = np.full(len(uniques) + 1, -1, dtype=np.int64)
        remap[used] = np.arange(used.size)
        return remap[text_code], uniques[used]

    def nvtx_types(
        self, cols: Columns, nv: str
    ) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_]]:
        """Which rows are ranges and which are marks; without the eventType column (or its value)
        every row with an end is a range, and rows without one are marks."""
        has_end = cols.kinds["end"] == INT
        if "eventType" not in cols.ints:
            self.notes.append(
                f"Table {nv} has no eventType column: every row with an end was read as a range."
            )
            return np.ones(cols.n, dtype=bool), ~has_end
        etype = cols.ints["eventType"]
        etype_ok = cols.kinds["eventType"] == INT
        range_types = self.enum_ids(
            "ENUM_NSYS_EVENT_TYPE", _NVTX_RANGE_TYPE_NAMES, _NVTX_RANGE_TYPES_DEFAULT
        )
        mark_types = self.enum_ids(
            "ENUM_NSYS_EVENT_TYPE", _NVTX_MARK_TYPE_NAMES, _NVTX_MARK_TYPES_DEFAULT
        )
        untyped = int(np.count_nonzero(~etype_ok))
        if untyped:
            self.notes.append(
                f"{untyped} {nv} rows have no integer eventType: those with an end were read "
                "as ranges."
            )
        return (
            np.where(etype_ok, isin_ids(etype, range_types), True),
            np.where(etype_ok, isin_ids(etype, mark_types), ~has_end),
        )

    def note_unfinished(self, cols: Columns, nv: str, is_range: npt.NDArray[np.bool_]) -> None:
        """Count, in a note, the ranges never closed (``end`` NULL: a push without a pop, or a
        capture stopped inside the range): they are dropped like those with ``end = -1``."""
        from ._columns import NULL

        open_ = np.flatnonzero(is_range & (cols.kinds["end"] == NULL))
        if not open_.size:
            return
        some = open_[:50]
        text = cols.texts.get("text")
        named = [] if text is None else [str(t) for t in text[some] if t is not None]
        if "textId" in cols.ints:
            pos, hit = self.strings.find(cols.ints["textId"][some])
            named += [str(v) for v in self.strings.values[pos[hit]]]
        shown = f" ({', '.join(sorted(set(named))[:3])})" if named else ""
        self.notes.append(
            f"Dropped {open_.size} NVTX ranges of {nv} that were never closed{shown}: no end (a "
            "push without a pop, or the capture stopped inside them)."
        )

    def valid_ranges(
        self, cols: Columns, nv: str, is_range: npt.NDArray[np.bool_]
    ) -> npt.NDArray[np.bool_]:
        """Ranges with integer, non-negative, ordered times; the others are counted in notes
        (ranges without an end are unfinished: not ranges, and not counted)."""
        start, end = cols.ints["start"], cols.ints["end"]
        start_ok = cols.kinds["start"] == INT
        has_end = cols.kinds["end"] == INT
        bad_time = int(np.count_nonzero(is_range & has_end & ~start_ok))
        end_bad = int(np.count_nonzero(is_range & start_ok & (cols.kinds["end"] == OTHER)))
        if bad_time + end_bad:
            self.notes.append(
                f"Dropped {bad_time + end_bad} NVTX ranges of {nv} whose start or end is not an "
                "integer (text, real or blob)."
            )
        ok = has_end & start_ok
        negative = is_range & ok & ((start < 0) | (end < start))
        if negative.any():
            self.notes.append(
                f"Dropped {int(np.count_nonzero(negative))} NVTX ranges with negative timestamps "
                "(before the capture start) or an end before their start."
            )
        return np.asarray(ok & ~negative, dtype=bool)

    def rank_texts(
        self, rows: npt.NDArray[np.intp], text_code: I64, uniques: Obj, text_id: I64, gtid: I64
    ) -> tuple[I64, I64]:
        """(pid, N) of the NVTX ``rows`` (marks and ranges) whose text says ``rank N``: inline
        texts by their factorized codes, registered ones through StringIds. The rows are looked
        at only when some text says so."""
        per_text = np.r_[_rank_numbers(uniques), -1]  # code -1 (no inline text) picks the -1
        pool_rank = _rank_numbers(self.strings.values)
        inline_any, pool_any = bool((per_text >= 0).any()), bool((pool_rank >= 0).any())
        if not (inline_any or pool_any):
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        code = text_code[rows]
        rank = per_text[code] if inline_any else np.full(code.size, -1, dtype=np.int64)
        if pool_any:
            pos, hit = self.strings.find(text_id[rows])
            rank = np.where((code < 0) & hit, pool_rank[pos], rank)
        found = rank >= 0
        return pid_of(gtid[rows[found]]), rank[found]
