"""One rank's Flight Recorder dump (plain data, :mod:`._load`) into compact columns: what the
set of dumps is built from in one go (:func:`traceoverlap.readers.flightrec.combine`).

Schema versions (the dump's ``version``; PyTorch bumps the minor when adding fields, the major
when changing them): every field is read by its name when it is there and is null when not.
What changed across versions, and how it is read:

- ``seq_id`` (1.x) became ``collective_seq_id`` + ``p2p_seq_id`` + ``op_id`` (2.0): a 1.x
  ``seq_id`` is read as the collective sequence id;
- ``is_p2p``, ``input_dtypes`` / ``output_dtypes``, ``timeout_ms``, ``pg_status``, ``thread_id`` /
  ``thread_name`` came later (2.x): absent, they are null (``is_p2p`` is then taken from the op's
  name, ``send`` / ``recv``, and a note says so);
- ``nccl_version`` (to 2.7) became ``comm_lib_version``; ``nccl_comm_state`` (NCCL's own
  per-communicator dump) is checked to be a mapping and otherwise left unread (a note counts it);
- the pickle writes an absent time as None, the JSON as 0: both are null here; ``pg_status``
  values are integers in the pickle and strings in the JSON: both are integers here.

``pg_config`` is keyed by the group's name, the entries by ``pg_id`` and ``(name, desc)``; gloo
(torch 2.13) records the default group's config under the name ``""``: a config is matched to the
entries' group by name, then by description, then, when exactly one config and one group are left
unmatched, to each other (a note says so).
"""

from __future__ import annotations

import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from operator import itemgetter
from typing import Any

import numpy as np

from ...core.errors import TraceFormatError

__all__ = ["DumpPart", "dump_part", "ENTRY_FIELDS", "GROUP_FIELDS"]

#: The entries' columns a part holds (all of ENTRY_COLUMNS but ``rank``, which is one number).
ENTRY_FIELDS = (
    "record_id", "pg_id", "pg_name", "pg_desc", "collective_seq_id", "p2p_seq_id", "op_id",
    "is_p2p", "op", "state", "retired", "input_sizes", "output_sizes", "input_dtypes",
    "output_dtypes", "numel_in", "time_created_ns", "time_started_ns", "time_completed_ns",
    "timeout_ms", "thread_id", "thread_name", "frame", "stack", "duration_ns",
)  # fmt: skip
GROUP_FIELDS = (
    "pg_id", "pg_name", "pg_desc", "members", "size", "last_enqueued", "last_started",
    "last_completed",
)  # fmt: skip

#: The newest schema version this reader was written against (torch 2.13 writes it).
KNOWN_VERSION = (2, 10)
_I64 = 1 << 63
_HINT = "the dump is damaged, or was not written by torch.distributed's Flight Recorder"


@dataclass
class DumpPart:
    """One rank's dump as compact columns (picklable: a unit of the readers' map, sent back
    from a worker process in a few arrays)."""

    rank: int
    path: str
    #: ``"pickle"`` or ``"json"``
    written: str
    version: str | None
    n: int
    #: column -> its values: an ``Int64`` column as (int64 values, null mask) arrays, any other
    #: as (int32 codes, the distinct values) with code -1 for null (the ring repeats a few ops,
    #: groups, shapes and stacks; a ``boolean`` column's distinct values are ``[False, True]``)
    entries: dict[str, Any]
    groups: dict[str, list[Any]]
    #: what this dump lacked or what was guessed in it, by kind (combined into notes over ranks)
    facts: dict[str, str] = field(default_factory=dict)


def _kind(v: object) -> str:
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "a boolean"
    if isinstance(v, int):
        return "an integer"
    if isinstance(v, float):
        return "a number"
    if isinstance(v, str):
        return "a string"
    if isinstance(v, list | tuple):
        return "a list"
    if isinstance(v, dict):
        return "a mapping"
    return type(v).__name__


class _Bad(Exception):
    """A field of the wrong type: which (``key``), in which entry (``index``), what it should be."""

    def __init__(self, key: str, value: object, want: str, index: int = 0) -> None:
        super().__init__(key, value, want)
        self.key, self.value, self.want, self.index = key, value, want, index


def _i(v: Any, key: str) -> int | None:  # noqa: ANN401
    if v is None or (type(v) is int and -_I64 <= v < _I64):
        return v
    raise _Bad(key, v, "an integer")


def _i_str(v: Any, key: str) -> int | None:  # noqa: ANN401
    """An integer, also written as a string (the JSON's ``pg_status``)."""
    if isinstance(v, str):
        try:
            v = int(v.strip())
        except ValueError:
            raise _Bad(key, v, "an integer") from None
    return _i(v, key)


def _sizes(v: Any, key: str) -> tuple[str | None, int | None]:  # noqa: ANN401
    """JSON text of a list of shapes, and the elements over all of them."""
    if v is None:
        return None, None
    if not isinstance(v, list | tuple):
        raise _Bad(key, v, "a list of shapes")
    numel = 0
    for shape in v:
        if not isinstance(shape, list | tuple) or not all(
            type(d) is int and 0 <= d < _I64 for d in shape
        ):
            raise _Bad(key, v, "a list of shapes (lists of sizes)")
        numel += math.prod(shape)
    return json.dumps(v, separators=(",", ":")), (numel if numel < _I64 else None)


def _strings(v: Any, key: str) -> tuple[str | None, None]:  # noqa: ANN401
    if v is None:
        return None, None
    if not isinstance(v, list | tuple) or not all(type(x) is str for x in v):
        raise _Bad(key, v, "a list of strings")
    return json.dumps(v, separators=(",", ":")), None


# --- columns: each read over the whole ring at once -------------------------------------------
#
# A ring holds thousands of entries and repeats a few values in most fields (one op, one group,
# one state, one stack per call site), so a part holds each entries column compactly: an integer
# column as (int64 values, null mask) arrays, every other as (int32 codes, the distinct values),
# code -1 for null. Types are checked on the distinct values, or on the set of the values' types:
# no Python step per entry and field beyond fetching it.

_NONE = type(None)


def _first_bad(values: Sequence[Any], ok: Any) -> int:  # noqa: ANN401
    return next(i for i, v in enumerate(values) if not ok(v))


def _code(keys: Sequence[Any]) -> tuple[np.ndarray, list[Any]]:  # noqa: ANN401
    """Codes of ``keys`` into its distinct values in first-seen order (None: -1). Raises
    TypeError for an unhashable key."""
    n = len(keys)
    if n == 0:
        return np.empty(0, dtype=np.int32), []
    first = keys[0]
    if keys.count(first) == n:  # one value all along (identity first: C speed)
        if first is None:
            return np.full(n, -1, dtype=np.int32), []
        hash(first)
        return np.zeros(n, dtype=np.int32), [first]
    index = dict.fromkeys(keys)  # the distinct keys, first seen first (C speed)
    cats = [k for k in index if k is not None]
    lut = {k: i for i, k in enumerate(cats)}
    lut[None] = -1
    return np.fromiter(map(lut.__getitem__, keys), dtype=np.int32, count=n), cats


def _of(values: Sequence[Any], key: str, kind: type, want: str) -> tuple[np.ndarray, list[Any]]:  # noqa: ANN401
    """A string (or other ``kind``) column, coded; each distinct value checked."""
    try:
        codes, cats = _code(values)
    except TypeError:  # an unhashable value: not a ``kind``
        cats = None
    if cats is None or not all(type(c) is kind for c in cats):
        i = _first_bad(values, lambda v: v is None or type(v) is kind)
        raise _Bad(key, values[i], want, i)
    return codes, cats


def _flags(values: Sequence[Any], key: str) -> np.ndarray:  # noqa: ANN401
    """A boolean column as codes into (False, True), -1 for null."""
    if not set(map(type, values)) <= {bool, _NONE}:  # True == 1: check types, not values
        i = _first_bad(values, lambda v: v is None or type(v) is bool)
        raise _Bad(key, values[i], "true or false", i)
    codes, cats = _code(values)
    lut = np.array([int(c) for c in cats] + [-1], dtype=np.int32)
    return np.asarray(lut[codes], dtype=np.int32)


def _ints(
    values: Sequence[Any], key: str, zero_null: bool = False
) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN401, E501
    """An integer column (each an integer in int64, not a boolean, or null) as (values, null
    mask); ``zero_null``: 0 is null too (the JSON's "not recorded", the pickle writing None)."""
    n = len(values)
    types = set(map(type, values))
    try:
        if types <= {int}:
            data = np.array(values, dtype=np.int64).reshape(n)
            mask = np.zeros(n, dtype=bool)
        elif types == {_NONE}:
            data, mask = np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)
        elif types == {int, _NONE}:
            mask = np.fromiter((v is None for v in values), dtype=bool, count=n)
            data = np.array([0 if v is None else v for v in values], dtype=np.int64)
        else:
            data = None
    except OverflowError:
        data = None
    if data is None:
        i = _first_bad(values, lambda v: v is None or (type(v) is int and -_I64 <= v < _I64))
        raise _Bad(key, values[i], "an integer", i)
    if zero_null:
        mask |= data == 0
        data[mask] = 0
    return data, mask


def _durations(values: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN401
    n = len(values)
    if set(map(type, values)) <= {_NONE}:
        return np.zeros(n, dtype=np.int64), np.ones(n, dtype=bool)
    out: list[int | None] = []
    for i, d in enumerate(values):
        if d is None:
            out.append(None)
        elif type(d) in (int, float) and math.isfinite(d) and 0 <= d < 1e12:
            out.append(round(d * 1_000_000))
        else:
            raise _Bad("duration_ms", d, "a duration in milliseconds", i)
    mask = np.fromiter((v is None for v in out), dtype=bool, count=n)
    return np.array([0 if v is None else v for v in out], dtype=np.int64), mask


def _distinct(
    values: Sequence[Any],
    convert: Any,  # noqa: ANN401
    by: str = "repr",
) -> tuple[np.ndarray, list[Any]]:
    """Codes of ``values`` into their distinct values, and ``convert(value, index)`` of each
    distinct one (at its first index; None stays None): a dump repeats a few shapes, dtypes,
    groups and stacks over its whole ring. Distinct by identity (Python's pickler shares equal
    objects), else, when most are distinct objects (torch's pickler writes a list per entry),
    by ``by``: ``"tuple"`` (the items' equality: lists of strings, each shared), ``"ids"`` (the
    items' identity: a stack's frames, each shared), ``"shapes"`` (list equality, when every
    value is a list of lists of integers) or ``"repr"`` (equal for equal plain lists of numbers
    and strings; what any of them falls back to)."""
    n = len(values)
    ids = np.fromiter(map(id, values), dtype=np.uint64, count=n)
    uniq, first, inverse = np.unique(ids, return_index=True, return_inverse=True)
    if len(uniq) * 4 <= n:
        codes, firsts = inverse.reshape(n).astype(np.int32), first.tolist()
    else:
        keyed: np.ndarray | None = None
        types = set(map(type, values))
        if by == "tuple" and types <= {list, tuple}:  # list or tuple: converted alike
            try:
                keyed, _ = _code(list(map(tuple, values)))
            except TypeError:  # an unhashable item: not what the column holds, told below
                keyed = None
        elif (by == "ids" and types <= {list, tuple}) or (
            by == "shapes" and types <= {list, tuple} and _plain_shapes(values)
        ):
            codes, firsts = _by_item_ids(values)
            return codes, [convert(values[i], i) for i in firsts]
        elif by == "ids" and types <= {list, tuple, _NONE}:
            keyed, _ = _code([None if v is None else tuple(map(id, v)) for v in values])
        if keyed is None:
            keyed, _ = _code(list(map(repr, values)))  # None: repr 'None', its own value
        codes = keyed
        firsts = np.unique(codes, return_index=True)[1].tolist()
        if firsts and codes[firsts[0]] < 0:  # code -1 (None) sorts first
            firsts = firsts[1:]
    out = []
    for i in firsts:
        v = values[i]
        out.append(None if v is None else convert(v, i))
    return codes, out


def _plain_shapes(values: Sequence[Any]) -> bool:  # noqa: ANN401
    """Whether every value is a list of lists of integers (not booleans, which equal 1 and 0):
    then list equality is value equality, and equal shapes can be found by it."""
    shapes = list(itertools.chain.from_iterable(values))
    if not set(map(type, shapes)) <= {list, tuple}:
        return False
    return set(map(type, itertools.chain.from_iterable(shapes))) <= {int}


def _by_item_ids(values: Sequence[Any]) -> tuple[np.ndarray, list[int]]:  # noqa: ANN401
    """Codes of lists by their items (a ring's stacks: a list of its own per entry, its frames
    shared), and the first index of each code. A ring has a few distinct stacks: each is
    peeled off with one pass of list equality (C, items compared by identity first); what is
    left after :data:`_PEEL` of them, by the tuple of its items' ids."""
    n = len(values)
    codes = np.full(n, -1, dtype=np.int32)
    left = np.arange(n)
    firsts: list[int] = []
    while len(left) and len(firsts) < _PEEL:
        i = int(left[0])
        d = values[i]
        if len(left) == n:
            same = np.array([v == d for v in values], dtype=bool)
        else:
            same = np.array([values[j] == d for j in left.tolist()], dtype=bool)
        codes[left[same]] = len(firsts)
        firsts.append(i)
        left = left[~same]
    if len(left):
        rest = left.tolist()
        more, cats = _code([tuple(map(id, values[j])) for j in rest])
        codes[left] = more + len(firsts)
        at = dict(zip(reversed(more.tolist()), reversed(rest), strict=True))
        firsts += [at[k] for k in range(len(cats))]
    return codes, firsts


#: Distinct stacks :func:`_by_item_ids` peels off one pass each before keying the rest.
_PEEL = 8


def _recode(codes: np.ndarray, cats: list[Any]) -> tuple[np.ndarray, list[Any]]:  # noqa: ANN401
    """``codes`` into ``cats`` again, with equal categories merged and None as -1."""
    inner, distinct = _code(cats)
    return np.append(inner, np.int32(-1))[codes], distinct


def _texts(
    values: Sequence[Any],
    key: str,
    convert: Any,  # noqa: ANN401
    by: str = "repr",
) -> tuple[tuple[np.ndarray, list[Any]], list[Any]]:
    """JSON text of each value (``convert``, once per distinct value: by identity first, the
    pickle sharing equal objects, else by ``repr``, equal for equal plain lists), coded, and
    ``convert``'s number per category."""

    def one(v: Any, i: int) -> tuple[Any, Any]:  # noqa: ANN401
        try:
            return convert(v, key)  # type: ignore[no-any-return]
        except _Bad as bad:
            bad.index = i
            raise

    codes, pairs = _distinct(values, one, by)
    texts = [None if p is None else p[0] for p in pairs]
    number = {p[0]: p[1] for p in pairs if p is not None}
    inner, distinct = _code(texts)
    return (np.append(inner, np.int32(-1))[codes], distinct), [*map(number.get, distinct), None]


def _per_code(codes: np.ndarray, numbers: list[Any]) -> tuple[np.ndarray, np.ndarray]:  # noqa: ANN401
    """An integer column from a number per category (``numbers[-1]``: null, for code -1)."""
    mask = np.array([v is None for v in numbers], dtype=bool)
    data = np.array([0 if v is None else v for v in numbers], dtype=np.int64)
    return data[codes], mask[codes]


def _is_torch(filename: str) -> bool:
    f = filename.replace("\\", "/")
    return "/torch/" in f or f.startswith("torch/")


_FRAME = "a list of frames (filename, line, name)"


class _Frames:
    """``frames`` lists into (innermost user frame, stack) text; the pickle shares one dict per
    distinct frame between entries, so each frame, and each stack of them, is formatted once."""

    def __init__(self) -> None:
        self.text: dict[int, tuple[str, bool]] = {}
        self.stacks: dict[tuple[int, ...], tuple[str, str]] = {}
        self.keep: list[object] = []  # the dicts whose ids are cached stay alive meanwhile

    def one(self, f: Any) -> tuple[str, bool]:  # noqa: ANN401
        got = self.text.get(id(f))
        if got is not None:
            return got
        if not isinstance(f, dict):
            raise _Bad("frames", f, _FRAME)
        name, filename, line = f.get("name"), f.get("filename"), f.get("line")
        if not isinstance(name, str | None) or not isinstance(filename, str | None):
            raise _Bad("frames", f, _FRAME)
        if line is not None and type(line) is not int:
            raise _Bad("frames", f, _FRAME)
        where = f"{filename or '?'}:{line}" if line is not None else (filename or "?")
        text = f"{where} in {name}" if name else where
        user = bool(filename) and str(filename).endswith(".py") and not _is_torch(str(filename))
        self.text[id(f)] = (text, user)
        self.keep.append(f)
        return text, user

    def __call__(self, frames: Any, index: int = 0) -> tuple[str, str] | None:  # noqa: ANN401
        if not isinstance(frames, list | tuple):
            raise _Bad("frames", frames, _FRAME, index)
        if not frames:
            return None
        key = tuple(map(id, frames))
        got = self.stacks.get(key)
        if got is None:
            try:
                lines = [self.one(f) for f in frames]
            except _Bad as bad:
                bad.index = index
                raise
            first = next((t for t, user in lines if user), lines[0][0])
            got = self.stacks[key] = (first, "\n".join(t for t, _ in lines))
            self.keep.append(frames)
        return got

    def columns(
        self,
        values: Sequence[Any],  # noqa: ANN401
    ) -> tuple[tuple[np.ndarray, list[Any]], tuple[np.ndarray, list[Any]]]:
        """The ``frame`` and ``stack`` columns, coded."""
        codes, got = _distinct(values, self, by="ids")
        frame = _recode(codes, [None if g is None else g[0] for g in got])
        stack = _recode(codes, [None if g is None else g[1] for g in got])
        return frame, stack


def _op_is_p2p(op: str | None) -> bool | None:
    if op is None:
        return None
    kind = op.partition(":")[2].split(" ")[0] if ":" in op else op.split(" ")[0]
    return kind in ("send", "recv")


def _groups_of(
    values: Sequence[Any],
) -> tuple[tuple[np.ndarray, list[Any]], tuple[np.ndarray, list[Any]]]:  # noqa: ANN401, E501
    """``process_group`` into the ``pg_name`` and ``pg_desc`` columns, coded."""

    def pair(pg: Any, i: int) -> tuple[Any, Any]:  # noqa: ANN401
        if type(pg) in (tuple, list) and len(pg) == 2 and all(type(x) is str for x in pg):
            return pg[0], pg[1]
        if type(pg) is str:
            return pg, None
        raise _Bad("process_group", pg, "a (name, description) pair", i)

    codes, pairs = _distinct(values, pair, by="tuple")
    names = _recode(codes, [None if p is None else p[0] for p in pairs])
    descs = _recode(codes, [None if p is None else p[1] for p in pairs])
    return names, descs


def _entries(shown: str, raw: Any, facts: dict[str, str]) -> tuple[dict[str, Any], int]:  # noqa: ANN401
    """The entries' columns, each read over the whole list at once and checked for its type."""
    if not isinstance(raw, list | tuple):
        raise TraceFormatError(shown, f"`entries` is {_kind(raw)}, not a list", _HINT)
    try:
        return _columns(raw, facts), len(raw)
    except _Bad as bad:
        where = f"entry {bad.index}" + (f" `{bad.key}`" if bad.key else "")
        raise TraceFormatError(
            shown, f"{where} is {_kind(bad.value)} ({_short(bad.value)}), not {bad.want}", _HINT
        ) from None


def _fields(raw: Sequence[dict[str, Any]]) -> dict[str, Sequence[Any]]:
    """The entries' fields as columns: every key any entry has -> its values (None where an
    entry lacks it). Entries with one set of keys (a ring written by one torch) are transposed
    in C (``itemgetter``, ``zip``)."""
    n = len(raw)
    if n == 0:
        return {}
    keys = list(raw[0])
    if keys and len(set(map(len, raw))) == 1:  # same size and each has the first's keys: same
        try:
            rows = list(map(itemgetter(*keys), raw))
        except KeyError:
            pass
        else:
            if len(keys) == 1:
                return {keys[0]: rows}
            return dict(zip(keys, zip(*rows, strict=True), strict=True))
    every = dict.fromkeys(k for e in raw for k in e)
    return {k: [e.get(k) for e in raw] for k in every}


def _columns(raw: list[Any] | tuple[Any, ...], facts: dict[str, str]) -> dict[str, Any]:  # noqa: ANN401
    if not set(map(type, raw)) <= {dict}:
        i = _first_bad(list(raw), lambda e: type(e) is dict)
        raise _Bad("", raw[i], "a mapping of fields", i)
    fields = _fields(raw)
    nones = (None,) * len(raw)

    def col(key: str) -> Sequence[Any]:
        return fields.get(key, nones)

    cols: dict[str, Any] = {}
    for key in ("record_id", "pg_id", "p2p_seq_id", "op_id", "timeout_ms"):
        cols[key] = _ints(col(key), key)
    cols["pg_name"], cols["pg_desc"] = _groups_of(col("process_group"))
    if "seq_id" in fields and any("collective_seq_id" not in e and "seq_id" in e for e in raw):
        facts["legacy_seq"] = "1"  # 1.x: one sequence id
        seq = [e.get("collective_seq_id", e.get("seq_id")) for e in raw]
        cols["collective_seq_id"] = _ints(seq, "seq_id")
    else:
        cols["collective_seq_id"] = _ints(col("collective_seq_id"), "collective_seq_id")
    cols["op"] = _of(col("profiling_name"), "profiling_name", str, "a string")
    flags = _flags(col("is_p2p"), "is_p2p")
    if (flags < 0).any():
        op_codes, op_cats = cols["op"]
        by_op = [_op_is_p2p(op) for op in op_cats]
        derived = np.array([-1 if f is None else int(f) for f in by_op] + [-1], dtype=np.int32)
        flags = np.where(flags < 0, derived[op_codes], flags)
        if (flags >= 0).any():
            facts["derived_p2p"] = "1"
    cols["is_p2p"] = (flags, [False, True])
    cols["state"] = _of(col("state"), "state", str, "a string")
    cols["retired"] = (_flags(col("retired"), "retired"), [False, True])
    sizes, numel = _texts(col("input_sizes"), "input_sizes", _sizes, "shapes")
    cols["input_sizes"], cols["numel_in"] = sizes, _per_code(sizes[0], numel)
    cols["output_sizes"] = _texts(col("output_sizes"), "output_sizes", _sizes, "shapes")[0]
    cols["input_dtypes"] = _texts(col("input_dtypes"), "input_dtypes", _strings, "tuple")[0]
    cols["output_dtypes"] = _texts(col("output_dtypes"), "output_dtypes", _strings, "tuple")[0]
    cols["time_created_ns"] = _ints(col("time_created_ns"), "time_created_ns", zero_null=True)
    cols["time_started_ns"] = _ints(
        col("time_discovered_started_ns"), "time_discovered_started_ns", zero_null=True
    )
    cols["time_completed_ns"] = _ints(
        col("time_discovered_completed_ns"), "time_discovered_completed_ns", zero_null=True
    )
    tids = col("thread_id")
    if not set(map(type, tids)) <= {int, str, _NONE}:  # True == 1: check types, not values
        i = _first_bad(tids, lambda v: v is None or type(v) in (int, str))
        raise _Bad("thread_id", tids[i], "a string", i)
    tid_codes, tid_cats = _code(tids)
    cols["thread_id"] = _recode(tid_codes, [str(t) for t in tid_cats])
    cols["thread_name"] = _of(col("thread_name"), "thread_name", str, "a string")
    cols["frame"], cols["stack"] = _Frames().columns(col("frames"))
    cols["duration_ns"] = _durations(col("duration_ms"))
    if raw and not cols["stack"][1]:
        facts["no_frames"] = "1"
    if raw and cols["time_started_ns"][1].all() and cols["time_completed_ns"][1].all():
        facts["no_times"] = "1"
    return {k: (_narrow(cols[k][0]), cols[k][1]) for k in ENTRY_FIELDS}


def _narrow(a: np.ndarray) -> np.ndarray:
    """``a`` in the smallest integer type that holds it (what a part sends back from a worker:
    a ring's record ids, sequence ids and codes fit in 8 or 16 bits); the combined column is
    int64 again."""
    if not len(a):
        return a
    lo, hi = int(a.min()), int(a.max())
    for t in (np.int8, np.int16, np.int32):
        info = np.iinfo(t)
        if info.min <= lo and hi <= info.max:
            return a.astype(t)
    return a


def _short(v: object) -> str:
    text = repr(v)
    return text if len(text) <= 40 else text[:37] + "..."


def _members(shown: str, key: str, ranks: Any) -> list[int]:  # noqa: ANN401
    value = ranks
    if isinstance(ranks, str):
        try:
            value = json.loads(ranks)
        except ValueError:
            value = None
    if (
        not isinstance(value, list)
        or not set(map(type, value)) <= {int}
        or (value and min(value) < 0)
    ):
        raise TraceFormatError(
            shown,
            f"`pg_config` of group {key!r}: `ranks` is {_kind(ranks)} ({_short(ranks)}), "
            "not a list of ranks",
            _HINT,
        )
    return value


def _config(shown: str, raw: Any) -> list[tuple[str, str | None, str | None, list[int] | None]]:  # noqa: ANN401, E501
    """``pg_config`` as (key, name, desc, members)."""
    if raw is None:
        return []
    if not isinstance(raw, dict):
        raise TraceFormatError(shown, f"`pg_config` is {_kind(raw)}, not a mapping", _HINT)
    out = []
    for key, cfg in raw.items():
        if not isinstance(cfg, dict):
            raise TraceFormatError(
                shown, f"`pg_config` of group {key!r} is {_kind(cfg)}, not a mapping", _HINT
            )
        name, desc = cfg.get("name", key), cfg.get("desc")
        if not isinstance(name, str | None) or not isinstance(desc, str | None):
            raise TraceFormatError(
                shown, f"`pg_config` of group {key!r}: name or desc is not a string", _HINT
            )
        ranks = cfg.get("ranks")
        out.append((str(key), name, desc, None if ranks is None else _members(shown, key, ranks)))
    return out


_STATUS = ("last_enqueued_collective", "last_started_collective", "last_completed_collective")


def _status(shown: str, raw: Any) -> dict[int, tuple[int | None, ...]]:  # noqa: ANN401
    """``pg_status`` as pg_id -> (last enqueued, started, completed); -1 (none yet) is null."""
    if raw is None:
        return {}
    if not isinstance(raw, dict):
        raise TraceFormatError(shown, f"`pg_status` is {_kind(raw)}, not a mapping", _HINT)
    out: dict[int, tuple[int | None, ...]] = {}
    for key, st in raw.items():
        try:
            pg = _i_str(key, "pg_status")
            if pg is None or not isinstance(st, dict):
                raise _Bad("pg_status", st, "a mapping of the last sequence ids")
            values = tuple(_i_str(st.get(k), k) for k in _STATUS)
        except _Bad as bad:
            raise TraceFormatError(
                shown,
                f"`pg_status` of group {key!r}: `{bad.key}` is {_kind(bad.value)} "
                f"({_short(bad.value)}), not {bad.want}",
                _HINT,
            ) from None
        out[pg] = tuple(None if v is not None and v < 0 else v for v in values)
    return out


_Config = tuple[str, str | None, str | None, list[int] | None]
_Named = dict[int, tuple[str | None, str | None]]


def _pick(named: _Named, matched: dict[int, list[int] | None], cfg: _Config) -> int | None:
    """The group (pg_id) a config names: by name (or, for a group no entry names, by id), then by
    a description only one group has."""
    key, name, desc, _ = cfg
    by_name = [p for p, (n, _) in named.items() if n is not None and n in (key, name)]
    if not by_name:  # a group no entry names (pg_status only): NCCL names groups by id
        by_name = [p for p, (n, _) in named.items() if n is None and str(p) in (key, name)]
    if len(by_name) > 1:
        by_name = [p for p in by_name if named[p][1] == desc] or by_name[:1]
    by_desc = [p for p, (_, d) in named.items() if desc and d == desc and p not in matched]
    pick = by_name[0] if by_name else (by_desc[0] if len(by_desc) == 1 else None)
    return None if pick in matched else pick


def _match(
    named: _Named, configs: list[_Config], facts: dict[str, str]
) -> tuple[dict[int, list[int] | None], list[_Config]]:
    """Each config's group (pg_id -> members), and the configs matched to none."""
    matched: dict[int, list[int] | None] = {}
    left = []
    for cfg in configs:
        pick = _pick(named, matched, cfg)
        if pick is None:
            left.append(cfg)
            continue
        matched[pick] = cfg[3]
        if named[pick] == (None, None):
            named[pick] = (cfg[1], cfg[2])
    alone = [p for p in named if p not in matched]
    if len(left) == 1 and len(alone) == 1:
        key, name, desc, members = left.pop()
        pid = alone[0]
        matched[pid] = members
        shown_name = named[pid][0] if named[pid][0] is not None else str(pid)
        facts["guessed_pg"] = (
            f"pg_config's group {key!r} taken to be group {shown_name} "
            f"({named[pid][1] or desc or 'no description'}), the only one left"
            + (" (gloo names the default group's config '')" if key == "" else "")
        )
        if named[pid] == (None, None):  # gloo's nameless config: the group's name is its id
            named[pid] = (name or str(pid), desc)
    return matched, left


def _groups(
    shown: str, dump: dict[str, Any], cols: dict[str, Any], facts: dict[str, str]
) -> dict[str, list[Any]]:
    """One row per process group the dump names (entries, ``pg_config``, ``pg_status``)."""
    named: _Named = {}  # pg_id -> (name, desc), in the entries' order
    (pids, nulls), (ncodes, ncats), (dcodes, dcats) = (
        cols["pg_id"],
        cols["pg_name"],
        cols["pg_desc"],
    )
    seen = zip(pids.tolist(), nulls.tolist(), ncodes.tolist(), dcodes.tolist(), strict=True)
    for pid, null, nc, dc in dict.fromkeys(seen):  # the distinct ones, in the entries' order
        if not null and pid not in named:
            named[pid] = (ncats[nc] if nc >= 0 else None, dcats[dc] if dc >= 0 else None)
    status = _status(shown, dump.get("pg_status"))
    for pid in status:
        named.setdefault(pid, (None, None))
    matched, left = _match(named, _config(shown, dump.get("pg_config")), facts)
    out: dict[str, list[Any]] = {k: [] for k in GROUP_FIELDS}
    rows: list[tuple[int | None, str | None, str | None, list[int] | None]] = [
        (pid, name, desc, matched.get(pid)) for pid, (name, desc) in named.items()
    ]
    rows += [(None, name, desc, members) for _, name, desc, members in left]
    for pid, name, desc, members in rows:
        st = status.get(pid, (None, None, None)) if pid is not None else (None, None, None)
        text = None if members is None else json.dumps(members, separators=(",", ":"))
        size = None if members is None else len(members)
        for k, v in zip(GROUP_FIELDS, (pid, name, desc, text, size, *st), strict=True):
            out[k].append(v)
    return out


def _version(shown: str, v: Any, facts: dict[str, str]) -> str | None:  # noqa: ANN401
    if v is None:
        facts["no_version"] = "1"
        return None
    if not isinstance(v, str | int | float) or isinstance(v, bool):
        raise TraceFormatError(shown, f"`version` is {_kind(v)}, not a version string", _HINT)
    text = str(v)
    major, _, minor = text.partition(".")
    if major.isdigit() and (minor.isdigit() or not minor):
        if (int(major), int(minor or 0)) > KNOWN_VERSION:
            facts["newer"] = text
    else:
        facts["odd_version"] = text
    return text


def dump_part(shown: str, rank: int, dump: Any, written: str) -> DumpPart:  # noqa: ANN401
    """One rank's dump (plain data) as column lists; raises :class:`TraceFormatError` for what is
    not a Flight Recorder dump or holds fields of the wrong types."""
    if not isinstance(dump, dict):
        raise TraceFormatError(
            shown,
            f"a {'pickle' if written == 'pickle' else 'JSON'} of {_kind(dump)}, not a Flight "
            "Recorder dump (a mapping with `entries`)",
            "pass the files torch.distributed's Flight Recorder wrote",
        )
    facts: dict[str, str] = {}
    keys = {"version", "pg_config", "pg_status", "comm_lib_version", "nccl_version"}
    if "entries" not in dump:
        if not keys & dump.keys() or "version" not in dump:
            raise TraceFormatError(
                shown,
                "no `entries` (nor the `version` that marks a Flight Recorder dump)",
                "pass the files torch.distributed's Flight Recorder wrote",
            )
        facts["no_entries"] = "1"  # torch leaves the key out of the JSON when the ring is empty
    version = _version(shown, dump.get("version"), facts)
    own = dump.get("rank")
    if own is not None and type(own) is int and own != rank:
        facts["rank_differs"] = str(own)
    state = dump.get("nccl_comm_state")
    if state is not None:
        if not isinstance(state, dict):
            raise TraceFormatError(
                shown, f"`nccl_comm_state` is {_kind(state)}, not a mapping", _HINT
            )
        if state:
            facts["comm_state"] = str(len(state))
    lib = dump.get("comm_lib_version", dump.get("nccl_version"))
    if lib is not None and not isinstance(lib, str):
        raise TraceFormatError(shown, f"`comm_lib_version` is {_kind(lib)}, not a string", _HINT)
    cols, n = _entries(shown, dump.get("entries", []), facts)
    groups = _groups(shown, dump, cols, facts)
    return DumpPart(rank, shown, written, version, n, cols, groups, facts)
