"""The ``shape`` column: one code per distinct kernel launch shape (grid, block).

Both readers call :func:`shape_codes` on the same six numbers (Kineto: ``args.grid`` and
``args.block``; Nsight Systems: ``gridX..gridZ``, ``blockX..blockZ``), so a kernel has the same
code whichever format it was read from, in every file and rank: the code is a fixed function of
the six numbers (a 31-bit hash, splitmix64 over them), not a number given in order of
appearance. Two distinct shapes share a code with a chance of about 2**-31 per pair, and a code
only matters between kernels of the same name (the overlap tax, docs/whatif.md §4).
A row whose grid or block is missing, or has a dimension below 1, has no shape: -1.

CPU ops (Kineto, profiles with ``record_shapes=True``) get the code of their ``Input Dims``
text with the white space removed (:func:`input_dims_codes`: CRC-32, 31 bits), so the same
operator on tensors of the same sizes has the same code in every step and layer; an op that
has no ``Input Dims`` of its own (an autograd engine wrapper such as
``autograd::engine::evaluate_function: AddmmBackward0``) takes the code of the first op nested
in it (:func:`inherit_nested`), the node the wrapper runs.
"""

from __future__ import annotations

import functools
import zlib
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

I32 = npt.NDArray[np.int32]

_GOLDEN = np.uint64(0x9E3779B97F4A7C15)
_M1 = np.uint64(0xBF58476D1CE4E5B9)
_M2 = np.uint64(0x94D049BB133111EB)


def _mix(z: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64's finaliser (wrapping uint64 arithmetic)."""
    z = (z ^ (z >> np.uint64(30))) * _M1
    z = (z ^ (z >> np.uint64(27))) * _M2
    return z ^ (z >> np.uint64(31))


def shape_codes(dims: npt.NDArray[np.int64]) -> I32:
    """Per row of ``dims`` (n x 6: grid x, y, z, block x, y, z): its shape code, in
    [0, 2**31), or -1 where a dimension is below 1 (unknown)."""
    dims = np.asarray(dims, dtype=np.int64).reshape(-1, 6)
    return column_shape_codes([dims[:, j] for j in range(6)])


def column_shape_codes(columns: Sequence[npt.NDArray[np.int64]]) -> I32:
    """:func:`shape_codes` of the six dimensions given as six columns (grid x, y, z, block x,
    y, z), hashed one column at a time: no n x 6 copy of a large table."""
    if len(columns) != 6:
        raise ValueError(f"shape codes need 6 dimension columns, got {len(columns)}")
    n = len(columns[0])
    h = np.zeros(n, dtype=np.uint64)
    known = np.ones(n, dtype=bool)
    for col in columns:
        h = _mix(h + _GOLDEN + np.asarray(col, dtype=np.int64).astype(np.uint64))
        known &= np.asarray(col) >= 1
    code = (h >> np.uint64(33)).astype(np.int32)
    code[~known] = -1
    return code


_SPACE = b" \t\r\n"


def input_dims_codes(texts: list[bytes]) -> I32:
    """Per JSON text of an ``Input Dims`` value: its code in [0, 2**31) (CRC-32 of the text
    without white space, computed once per distinct text), -1 for an empty text (absent)."""
    import pandas as pd

    n = len(texts)
    if n == 0:
        return np.zeros(0, dtype=np.int32)
    codes, uniques = pd.factorize(np.array(texts, dtype=object))
    per = np.array([input_dims_code(bytes(u)) for u in uniques], dtype=np.int64)
    out: I32 = per[np.asarray(codes)].astype(np.int32)
    return out


def input_dims_code(text: bytes) -> int:
    """The code of one ``Input Dims`` text (:func:`input_dims_codes`): the same shapes recur
    in every step, chunk and rank, so a short text is hashed once (a long one, rare, each
    time: the cache stays small)."""
    return _short_code(text) if len(text) <= 512 else _code(text)


def _code(text: bytes) -> int:
    return zlib.crc32(text.translate(None, _SPACE)) >> 1 if len(text) else -1


_short_code = functools.lru_cache(maxsize=4096)(_code)


def inherit_nested(
    shape: I32,
    is_op: npt.NDArray[np.bool_],
    lane: npt.NDArray[np.int64],
    start: npt.NDArray[np.int64],
    end: npt.NDArray[np.int64],
) -> I32:
    """``shape`` with each op that has none (-1) given the shape of the first op nested in it on
    its lane (the next op in (lane, start, longest first) order, starting before it ends)."""
    out = shape.copy()
    rows = np.flatnonzero(is_op)
    if rows.size < 2:
        return out
    order = rows[np.lexsort((-(end[rows] - start[rows]), start[rows], lane[rows]))]
    cur, nxt = order[:-1], order[1:]
    child = (lane[nxt] == lane[cur]) & (start[nxt] < end[cur]) & (end[nxt] <= end[cur])
    take = child & (shape[cur] < 0) & (shape[nxt] >= 0)
    out[cur[take]] = shape[nxt[take]]
    return out
