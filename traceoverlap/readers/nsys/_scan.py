"""Reading columns of a table: from the file's pages (:mod:`._pages`) when they can be trusted,
else through SQLite's own ``SELECT`` (slow, always right)."""

from __future__ import annotations

import sqlite3
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from ._columns import INT, NULL, OTHER, REFUSED, Columns, Unsupported, Where, _q, rowid_alias
from ._pages import PageReader

Obj = npt.NDArray[np.object_]


_SQL_CHUNK_ROWS = 1 << 16


def read_columns(
    con: sqlite3.Connection,
    path: Path,
    table: str,
    int_cols: Sequence[str] = (),
    text_cols: Sequence[str] = (),
    text_keep: Callable[[str], bool] | None = None,
    where: Where | None = None,
) -> Columns:
    """Read ``int_cols`` and ``text_cols`` of ``table`` (names as the table declares them).

    ``where``: only the rows this SQL condition (and its parameters) selects, in rowid order:
    SQLite finds them (one C-level scan of the columns the condition names), the pages decode
    only them. None reads every row.

    ``text_keep``: texts it refuses read as :data:`REFUSED` (one shared object), decided a block
    of rows at a time, so that a column of a million texts the caller does not want is never
    held in memory as a million strings.

    ``con`` must be a read-only connection to ``path`` inside a read transaction. A column the
    table declares as ``INTEGER PRIMARY KEY`` reads as the rowid it aliases.
    """
    info = con.execute(f"PRAGMA table_xinfo({_q(table)})").fetchall()
    try:
        reader = PageReader(con, path)
        reader.text_keep = text_keep
        return reader.read(table, info, list(int_cols), list(text_cols), where)
    except Unsupported:
        out = _read_via_sql(con, table, info, list(int_cols), list(text_cols), where)
        if text_keep is not None:
            for arr in out.texts.values():
                _refuse(arr, text_keep)
        return out


def _refuse(texts: Obj, keep: Callable[[str], bool]) -> None:
    """Replace (in place) the texts ``keep`` refuses by :data:`REFUSED`; None stays None."""
    ok = np.fromiter((t is None or keep(t) for t in texts.tolist()), bool, texts.size)
    texts[~ok] = REFUSED


# ---------------------------------------------------------------------------------------------
# through SQLite (the fallback)


def _read_via_sql(
    con: sqlite3.Connection,
    table: str,
    info: list[tuple[Any, ...]],
    int_cols: list[str],
    text_cols: list[str],
    where: Where | None = None,
) -> Columns:
    """The same :class:`Columns` from ``SELECT``: a Python tuple per row (slow, always right)."""
    alias = rowid_alias(info)
    wanted = int_cols + text_cols
    sel = ", ".join("rowid" if c == alias else _q(c) for c in wanted) or "rowid"
    ints: list[list[Any]] = [[] for _ in int_cols]
    texts: list[list[Any]] = [[] for _ in text_cols]
    old = con.text_factory
    con.text_factory = bytes  # an invalid UTF-8 text must not abort the read
    n = 0
    try:
        cond, params = where if where is not None else ("1", ())
        cur = con.execute(f"SELECT {sel} FROM {_q(table)} WHERE {cond}", tuple(params))
        while True:
            rows = cur.fetchmany(_SQL_CHUNK_ROWS)
            if not rows:
                break
            n += len(rows)
            for j in range(len(int_cols)):
                ints[j].extend(r[j] for r in rows)
            for j in range(len(text_cols)):
                texts[j].extend(r[len(int_cols) + j] for r in rows)
    finally:
        con.text_factory = old
    out = Columns(n=n, via="sql")
    for name, vals in zip(int_cols, ints, strict=True):
        kind = np.array(
            [INT if type(v) is int else NULL if v is None else OTHER for v in vals], dtype=np.int8
        )
        values = np.zeros(n, dtype=np.int64)
        if n:
            ok = kind == INT
            values[ok] = np.array([v for v in vals if type(v) is int], dtype=object).astype(
                np.int64
            )
        out.ints[name] = values
        out.kinds[name] = kind
    for name, vals in zip(text_cols, texts, strict=True):
        arr = np.empty(n, dtype=object)
        bad = 0
        for i, v in enumerate(vals):
            if v is None:
                continue
            if isinstance(v, bytes):
                try:
                    arr[i] = v.decode("utf-8")
                except UnicodeDecodeError:
                    arr[i] = v.decode("utf-8", "replace")
                    bad += 1
            else:
                arr[i] = str(v)
        out.texts[name] = arr
        out.bad_utf8 += bad
    return out
