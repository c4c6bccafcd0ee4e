"""What a column scan gives back (:class:`Columns`), and what the decoders share."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
I8 = npt.NDArray[np.int8]
Obj = npt.NDArray[np.object_]


#: What a text that ``read_columns``' ``text_keep`` refused reads as (a NUL cannot start a text
#: SQLite's text decoding gives here: NUL-separated decoding splits there).
REFUSED = "\x00refused"

#: Per-row kind of an integer column's value.
INT, NULL, OTHER = 0, 1, 2


@dataclass
class Columns:
    """Some columns of one table, one entry per row in rowid order.

    ``ints[c]`` holds the integer values of column ``c`` (0 where the value is not an integer) and
    ``kinds[c]`` says per row whether it was an integer (:data:`INT`), NULL (:data:`NULL`) or
    anything else (:data:`OTHER`: a real, text or blob). ``texts[c]`` holds ``str`` or ``None``
    (NULL); blobs are decoded as UTF-8 text. ``bad_utf8`` counts texts that were not valid UTF-8
    (decoded with U+FFFD replacement characters). ``via`` says how they were read.
    """

    n: int
    ints: dict[str, I64] = field(default_factory=dict)
    kinds: dict[str, I8] = field(default_factory=dict)
    texts: dict[str, Obj] = field(default_factory=dict)
    bad_utf8: int = 0
    via: str = "pages"


#: An SQL condition on a table's columns and its parameters (``("x = ?", (3,))``).
Where = tuple[str, Sequence[Any]]


class Unsupported(Exception):
    """The file (or this table) is not one the page decoder handles: read through SQLite."""


def _q(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def pid_sql(column: str) -> str:
    """SQL for the pid of a ``globalPid`` / ``globalTid`` column as :func:`._rows.pid_of` takes
    it, 0 where the value is not an integer (what the reader reads it as)."""
    c = _q(column)
    return f"(CASE WHEN typeof({c}) = 'integer' THEN ({c} >> 24) & 16777215 ELSE 0 END)"


def rowid_alias(info: list[tuple[Any, ...]]) -> str | None:
    """The column that is the table's ``INTEGER PRIMARY KEY`` (stored as the rowid), if any."""
    pks = [r for r in info if r[5]]
    if len(pks) == 1 and str(pks[0][2]).strip().upper() == "INTEGER":
        return str(pks[0][1])
    return None
