"""JSON output: one object with a stable, documented schema (docs/cli.md "JSON schema"; every
column in docs/schema.md).

``schema_version`` changes only when a field changes meaning or disappears; new fields may be
added within a version. Times are integer nanoseconds, ratios floats in 0-1 (speedups >= 1) or
null; never NaN. Encoded with msgspec (a C encoder: large outputs in a fraction of a second).
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import re
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import msgspec
import numpy as np
import pandas as pd

from .._version import __version__
from ..core.fmt import EscapedText
from ..core.schema import (
    BLAME,
    COLLECTIVE_PER_RANK,
    COLLECTIVES,
    LABEL,
    STEP_SKEW,
    STRAGGLERS,
    TABLES,
)
from ..core.vocab import as_label
from ..run.results import STEP_COLUMNS

if TYPE_CHECKING:
    from ..run.matching import Collectives
    from ..run.results import Analysis

SCHEMA_VERSION = 3

#: makes rows from columns (:func:`_rows`: dicts; :func:`_struct_rows`: Structs)
Rows = Callable[[list[str], list[list[Any]]], list[Any]]


def _default(obj: Any) -> Any:
    """numpy / pandas values -> plain JSON values (NaN and NA -> null)."""
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return None if np.isnan(obj) else float(obj)
    if isinstance(obj, np.bool_):
        return bool(obj)
    if isinstance(obj, np.ndarray):
        return obj.tolist()
    if obj is pd.NA or obj is pd.NaT:
        return None
    raise TypeError(f"cannot encode {type(obj).__name__} as JSON")


_ENCODER = msgspec.json.Encoder(enc_hook=_default)


def encode(obj: Any, indent: int = 2) -> EscapedText:
    """JSON text of ``obj`` (dicts, lists, dataclasses, numpy scalars), indented.

    Strings keep their exact text: control characters are escaped (``\\u001b``), DEL and C1
    too (a terminal showing the JSON never sees them raw); a file name that is not UTF-8
    (a surrogate-escaped ``str``) has its undecodable bytes replaced by U+FFFD. The text so
    holds nothing for ``safe_text`` to remove: an :class:`EscapedText`, written as it is."""
    try:
        raw = _ENCODER.encode(obj)
    except UnicodeEncodeError:
        raw = _ENCODER.encode(_valid_text(obj))
    return EscapedText(msgspec.json.format(_escape_c1(raw), indent=indent) + b"\n", "utf-8")


# C1 (U+0080-U+009F) in UTF-8: a lead byte 0xc2 (never a continuation byte) then 0x80-0x9f
_C1 = re.compile(b"\xc2[\x80-\x9f]")


def _escape_c1(raw: bytes) -> bytes:
    """UTF-8 JSON ``raw`` with DEL and the C1 controls (which msgspec writes raw) as ``\\u``
    escapes (the formatter keeps escapes as they are). Done on the compact bytes, before the
    indenting: each is a fast search for one byte when it is absent, and the C1 regex, led by
    its literal byte, skips from one 0xc2 to the next (a 23 MB output with a "µ" on every line:
    ~75 ms; the regex over the same ``str``: ~220 ms, whatever it holds once it is not ASCII)."""
    if b"\x7f" in raw:
        raw = raw.replace(b"\x7f", b"\\u007f")
    if b"\xc2" in raw:
        raw = _C1.sub(lambda m: b"\\u%04x" % m.group()[1], raw)
    return raw


def _valid_text(obj: Any) -> Any:
    """``obj`` with every string made encodable (surrogates -> U+FFFD), dataclasses as dicts,
    Structs as Structs of encodable values."""
    if isinstance(obj, str):
        return obj.encode("utf-8", "surrogateescape").decode("utf-8", "replace")
    if isinstance(obj, dict):
        return {_valid_text(k): _valid_text(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [_valid_text(v) for v in obj]
    if isinstance(obj, msgspec.Struct):  # (a row of _struct_rows: its type, its field names)
        return type(obj)(*(_valid_text(getattr(obj, f)) for f in obj.__struct_fields__))
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return _valid_text(dataclasses.asdict(obj))
    return obj


#: step-label columns: ``string`` in the DataFrames, 4 / "4#2" / "all" in the JSON
_LABELS = frozenset(c.name for t in TABLES for c in t.columns if c.type == LABEL)


def records(df: pd.DataFrame, columns: tuple[str, ...] | list[str]) -> list[dict[str, Any]]:
    """Rows of ``df`` as dicts of plain values (NaN and NA -> None, step labels as labels),
    column by column."""
    cols = [c for c in columns if c in df.columns]
    return _rows(cols, [_plain(df[c], c in _LABELS) for c in cols])


def _rows(cols: list[str], values: list[list[Any]]) -> list[Any]:
    """Dicts, keys ``cols``, of the rows of the columns ``values``."""
    return [dict(zip(cols, row, strict=True)) for row in zip(*values, strict=True)]


def _struct_rows(cols: list[str], values: list[list[Any]]) -> list[Any]:
    """The rows of :func:`_rows` as msgspec Structs whose fields are ``cols``, in order: the
    same JSON object once encoded (``msgspec.to_builtins`` gives the dicts), made ~3x faster
    and encoded faster (their keys encoded once per type)."""
    if len(set(cols)) < len(cols):  # (a dict keeps a repeated key once)
        return _rows(cols, values)
    return list(map(_row_type(tuple(cols)), *values)) if values else []


@functools.lru_cache(maxsize=32)
def _row_type(cols: tuple[str, ...]) -> type[msgspec.Struct]:
    """A Struct type for rows with the fields ``cols`` (any text: stored as ``f0``, ``f1``,
    ..., encoded as ``cols``); not tracked by the garbage collector (a row holds plain values
    and dicts of rows, never itself: no cycle), which also makes it cheaper to create."""
    names = [f"f{i}" for i in range(len(cols))]
    return msgspec.defstruct("Row", names, rename=dict(zip(names, cols, strict=True)), gc=False)


def _plain(col: pd.Series, label: bool = False, negative_null: bool = False) -> list[Any]:
    """``col``'s values as plain Python values: NaN and NA -> None, a step ``label`` column's
    as labels (:func:`~traceoverlap.core.vocab.as_label`), and with ``negative_null`` a
    negative number -> None (the per-rank rows' "no launch record"). The same values as a
    loop over ``col.tolist()`` testing each one, but by dtype: the numpy and pandas columns
    convert in C, and a ``string`` label column calls ``as_label`` once per distinct value."""
    dtype, arr = col.dtype, col.array
    if isinstance(dtype, np.dtype) and dtype.kind in "iub":  # never NaN or NA
        if not negative_null or dtype.kind != "i":
            return col.tolist()  # type: ignore[no-any-return]
        a = col.to_numpy()
        return _with_none(a, a < 0)
    if label:
        if isinstance(dtype, pd.StringDtype) and dtype.na_value is pd.NA:  # labels of distinct
            codes, uniques = pd.factorize(col, use_na_sentinel=True)
            labels = np.empty(len(uniques) + 1, dtype=object)  # code -1 (NA): the last, None
            labels[:-1] = [as_label(x) for x in uniques]
            return labels[codes].tolist()  # type: ignore[no-any-return]
        v = [None if x is pd.NA or x is None else as_label(x) for x in col.tolist()]
    elif isinstance(dtype, np.dtype) and dtype.kind == "f":
        a = col.to_numpy()
        return _with_none(a, np.isnan(a) | (a < 0) if negative_null else np.isnan(a))
    elif isinstance(arr, pd.arrays.IntegerArray | pd.arrays.BooleanArray | pd.arrays.FloatingArray):
        v = arr.to_numpy(dtype=object, na_value=None)
        null = np.zeros(len(v), dtype=bool)
        if isinstance(arr, pd.arrays.FloatingArray):  # a NaN that is not NA
            null = np.isnan(arr.to_numpy(dtype="float64", na_value=0.0))
        if negative_null and not isinstance(arr, pd.arrays.BooleanArray):
            null |= arr.to_numpy(dtype=arr.dtype.numpy_dtype, na_value=0) < 0
        if null.any():
            v[null] = None
        return v.tolist()  # type: ignore[no-any-return]
    elif isinstance(dtype, pd.StringDtype):  # str values, or NA (pd.NA or NaN)
        return col.to_numpy(dtype=object, na_value=None).tolist()  # type: ignore[no-any-return]
    else:
        v = [None if x is pd.NA or (isinstance(x, float) and x != x) else x for x in col.tolist()]
    if negative_null:
        v = [None if isinstance(x, int | float) and x < 0 else x for x in v]
    return v


def _with_none(a: np.ndarray, null: np.ndarray) -> list[Any]:
    """``a.tolist()`` with None where ``null``."""
    if not null.any():
        return a.tolist()  # type: ignore[no-any-return]
    v = a.astype(object)
    v[null] = None
    return v.tolist()  # type: ignore[no-any-return]


def step_records(analysis: Analysis) -> list[dict[str, Any]]:
    """The step rows as plain dicts, fields in :data:`STEP_COLUMNS` order."""
    return records(analysis.steps, STEP_COLUMNS)


def collectives_dict(coll: Collectives, rows: Rows | None = None) -> dict[str, Any]:
    """The document's ``collectives``, ``stragglers`` and ``blame``; ``rows`` makes the
    collectives' rows (those of an instance and those of its ranks) from their columns: dicts
    (:func:`_rows`, the default), or :func:`_struct_rows` (:func:`render`: the same JSON)."""
    return {
        "collectives": _collective_rows(coll, rows or _rows),
        "stragglers": {
            "clock": coll.clock,
            "clock_aligned": coll.aligned,
            "ranks_given": coll.ranks_given,
            "world_size": coll.world_size,
            "partial": coll.partial,
            "matched": coll.n_matched,
            "inconsistent": coll.n_inconsistent,
            "verdict": None
            if coll.verdict is None
            else {
                "rank": coll.verdict.rank,
                "wait_ratio": coll.verdict.wait_ratio,
                "rank_ratio": coll.verdict.rank_ratio,
                "min_ratio": coll.verdict.min_ratio,
                "moving": [{"rank": r, "steps": list(st)} for r, st in coll.verdict.moving],
                "text": coll.verdict.text(),
            },
            "ranks": records(coll.stragglers, STRAGGLERS.names),
            "steps": records(coll.step_skew, STEP_SKEW.names),
        },
        "blame": [{**b, "chain": list(b["chain"])} for b in records(coll.blame, BLAME.names)],
    }


def _collective_rows(coll: Collectives, rows: Rows) -> list[Any]:
    """The ``collectives`` list: an instance's row (``ranks`` as a list) and its ``per_rank``
    rows keyed by rank (``"rank:device"`` for a rank whose rows come from several units),
    column by column: the per-rank rows grouped by a stable sort of their instance, each
    instance's dict built at once (a key seen twice keeps its first place, its last row; when
    every instance has as many rows, all of them in one C loop), and given to the instances by
    position when both list the same instances in the same order (the matcher's output)."""
    pr = coll.per_rank
    group_ids = np.zeros(0, dtype="int64")  # the instances with per-rank rows, sorted
    groups: list[dict[str, Any]] = []  # their per-rank rows
    if len(pr):
        inst = pr["instance"].to_numpy()
        if not (inst[1:] >= inst[:-1]).all():  # (the matcher's rows come sorted)
            order = np.argsort(inst, kind="stable")
            pr, inst = pr.iloc[order], inst[order]
        fields = list(COLLECTIVE_PER_RANK.names)
        # null without a launch record (CPU work, or a kernel whose launch was cut); the
        # nullable text columns (``unmatched_why``) are null already
        no_launch = {c.name for c in COLLECTIVE_PER_RANK.columns if c.nullable}
        made = rows(fields, [_plain(pr[f], f in _LABELS, f in no_launch) for f in fields])
        ranks = _plain(pr["rank"], "rank" in _LABELS)
        several = {r for r, n in _units_per_rank(pr).items() if int(n) > 1}
        names = {r: str(r) for r in set(ranks)}
        if several:
            devices = _plain(pr["device"], "device" in _LABELS)
            keys = [
                f"{r}:{d}" if r in several else names[r]
                for r, d in zip(ranks, devices, strict=True)
            ]
        else:
            keys = [names[r] for r in ranks]
        first = np.ones(len(inst), dtype=bool)  # an instance's first row
        first[1:] = inst[1:] != inst[:-1]
        starts = np.flatnonzero(first)
        group_ids = inst[starts]
        counts = np.diff(starts, append=len(inst))
        m = int(counts[0])
        if (counts == m).all():  # as many rows each (a collective's ranks): in C
            runs = zip(*(zip(keys[j::m], made[j::m], strict=True) for j in range(m)), strict=True)
            groups = list(map(dict, runs))
        else:
            pairs, take = zip(keys, made, strict=True), itertools.islice
            groups = [dict(take(pairs, n)) for n in counts.tolist()]
    inst_df = coll.instances
    cols = [c for c in COLLECTIVES.names if c in inst_df.columns]
    if "ranks" not in cols or "instance" not in cols:  # (what the row-by-row code needed)
        raise KeyError("ranks" if "instance" in cols else "instance")
    # (``ranks``: tuples, never null; a null would fail in list() as it did after records)
    values: list[list[Any]] = [
        [list(x) for x in inst_df[c].tolist()] if c == "ranks" else _plain(inst_df[c], c in _LABELS)
        for c in cols
    ]
    ids = inst_df["instance"].to_numpy()
    if ids.dtype.kind in "iu" and np.array_equal(ids, group_ids):  # (the matcher's, in order)
        per_rank = groups
    else:
        per = dict(zip(group_ids.tolist(), groups, strict=True))
        per_rank = [per.get(int(i)) or {} for i in values[cols.index("instance")]]
    if "per_rank" in cols:
        values[cols.index("per_rank")] = per_rank
    else:
        cols, values = [*cols, "per_rank"], [*values, per_rank]
    return rows(cols, values)


def _units_per_rank(per_rank: pd.DataFrame) -> dict[int, int]:
    """Per rank: how many distinct units (devices, processes) its rows come from, as
    ``per_rank.groupby("rank")["unit"].nunique().to_dict()`` counts them."""
    rank, unit = per_rank["rank"].to_numpy(), per_rank["unit"].to_numpy()
    order = np.lexsort((unit, rank))
    rank, unit = rank[order], unit[order]
    first = np.ones(len(rank), dtype=bool)  # a (rank, unit) pair's first row
    first[1:] = (rank[1:] != rank[:-1]) | (unit[1:] != unit[:-1])
    ranks, counts = np.unique(rank[first], return_counts=True)
    return dict(zip(ranks.tolist(), counts.tolist(), strict=True))


def to_dict(analysis: Analysis, rows: Rows | None = None) -> dict[str, Any]:
    """The JSON document as Python values; ``rows``: see :func:`collectives_dict`."""
    opts = analysis.options
    out: dict[str, Any] = {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "traceoverlap", "version": __version__},
        "traces": [t.to_dict() for t in analysis.traces],
        "options": {
            "step_regex": opts.step_regex,
            "steps": opts.steps.text if opts.steps else None,
            "ranks": list(opts.ranks) if opts.ranks is not None else None,
            "thresholds": dataclasses.asdict(opts.thresholds),
            "comm_patterns": list(opts.comm_patterns),
        },
        "steps": step_records(analysis),
        "summary": {
            "run": analysis.summary.run,
            "ranks": dict(analysis.summary.ranks),
        },
        "findings": [dataclasses.asdict(f) for f in analysis.findings],
        "unassigned_gpu_activities": dict(analysis.unassigned),
        "notes": list(analysis.notes),
    }
    if analysis.collectives is not None:
        out.update(collectives_dict(analysis.collectives, rows))
    return out


def render(analysis: Analysis) -> str:
    return encode(to_dict(analysis, _struct_rows))
