"""String columns built as categorical codes, and the export's ``StringIds`` table."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import pandas as pd

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
Obj = npt.NDArray[np.object_]


def fast_categorical(codes: npt.NDArray[np.integer], categories: pd.Index) -> pd.Categorical:
    """``pd.Categorical.from_codes`` for categories unique by construction: pandas' own check
    hashes every category again (1.7 s for the 1.6 M distinct NVTX texts of a 540 MB export)."""
    fast = getattr(pd.CategoricalDtype, "_from_fastpath", None)
    if fast is None:  # pragma: no cover - a pandas without the fast path
        return pd.Categorical.from_codes(codes, categories=categories)
    return pd.Categorical.from_codes(codes, dtype=fast(categories, False), validate=False)


def category_index(values: Obj) -> pd.Index:
    """Categories with the dtype :func:`traceoverlap.core.model.make_events` gives (str on pandas 3),
    so that timelines of every reader concatenate."""
    return pd.Index(values if len(values) else np.zeros(0, dtype=object))


class Strings:
    """Categorical codes for one string column built from several sources.

    Each ``add_*`` call returns global int32 codes for its rows; :meth:`categorical` turns any
    selection of such codes into a ``pd.Categorical`` with unique categories. Hash-based
    (``pd.factorize``) or binary-search lookups only: never a sort of the rows.
    """

    def __init__(self) -> None:
        self._cats: list[Obj] = []
        self._unique: list[bool] = []
        self._n = 0
        self._pool_offset: int | None = None
        self._consts: dict[str, int] = {}

    def _block(self, categories: Obj, unique: bool = False) -> int:
        off = self._n
        self._cats.append(categories)
        self._unique.append(unique)
        self._n += len(categories)
        return off

    def const(self, value: str) -> int:
        if value not in self._consts:
            cats = np.empty(1, dtype=object)
            cats[0] = value
            self._consts[value] = self._block(cats, unique=True)
        return self._consts[value]

    def add_const(self, value: str, n: int) -> I32:
        return np.full(n, self.const(value), dtype=np.int32)

    def add_codes(
        self, codes: npt.NDArray[np.integer], categories: Obj, unique: bool = False
    ) -> I32:
        """Rows whose string is ``categories[codes]`` (``unique``: no category repeats)."""
        return (codes + self._block(categories, unique)).astype(np.int32)

    def add_values(self, values: Obj) -> I32:
        codes, uniques = pd.factorize(values)
        return self.add_codes(codes, np.asarray(uniques, dtype=object), unique=True)

    def add_string_ids(self, pool: StringIds, ids: I64, missing: str) -> I32:
        """Rows named by StringIds ids; ids absent from the table get ``missing``."""
        if self._pool_offset is None:
            self._pool_offset = self._block(pool.values)
        out = np.full(ids.size, self.const(missing), dtype=np.int32)
        pos, hit = pool.find(ids)
        out[hit] = pos[hit] + self._pool_offset
        return out

    def categorical(self, codes: I32) -> pd.Categorical:
        """The strings of ``codes``, as a categorical of the categories in use.

        The largest block known to be unique (the NVTX texts of an ``emit_nvtx`` capture: one
        per range) is not hashed again, only looked up among the other blocks' strings."""
        used = np.bincount(codes, minlength=self._n).astype(bool)
        offsets = np.cumsum([0] + [len(c) for c in self._cats]).astype(np.int64)
        sizes = [len(c) if u else -1 for c, u in zip(self._cats, self._unique, strict=True)]
        big = int(np.argmax(sizes)) if sizes and max(sizes) > 0 else -1
        rest = [b for b in range(len(self._cats)) if b != big]
        lut = np.full(self._n, -1, dtype=np.int32)
        categories = np.zeros(0, dtype=object)
        if rest:
            pos = np.concatenate([np.arange(offsets[b], offsets[b + 1]) for b in rest])
            vals = np.concatenate([self._cats[b] for b in rest])
            in_use = used[pos]
            remap, uniques = pd.factorize(vals[in_use])
            lut[pos[in_use]] = remap
            categories = np.asarray(uniques, dtype=object)
        if big >= 0:
            pos = np.arange(offsets[big], offsets[big + 1])
            in_use = used[pos]
            vals = self._cats[big][in_use]
            known = (
                pd.Index(categories).get_indexer(vals)
                if categories.size
                else np.full(vals.size, -1, dtype=np.int64)
            )
            new = known < 0
            lut[pos[in_use]] = np.where(new, np.cumsum(new) - 1 + categories.size, known)
            categories = np.concatenate([categories, vals[new]])
        return fast_categorical(lut[codes], category_index(categories))


class StringIds:
    """The export's ``StringIds`` table, as arrays sorted by id for vectorised lookups."""

    def __init__(self, ids: I64, values: Obj) -> None:
        order = np.argsort(ids, kind="stable")
        self.ids: I64 = ids[order]
        self.values: Obj = values[order]
        #: the ids are consecutive (an export numbers its strings 0..n-1): an id's position is
        #: its distance from the first, no search
        self.dense = bool(self.ids.size) and int(self.ids[-1] - self.ids[0]) == self.ids.size - 1

    def find(self, ids: I64) -> tuple[I64, npt.NDArray[np.bool_]]:
        """Position of each id in the table, and whether it is there (a position in the table,
        of no meaning, where it is not)."""
        if self.ids.size == 0 or ids.size == 0:
            return np.zeros(ids.size, dtype=np.int64), np.zeros(ids.size, dtype=bool)
        if self.dense:
            pos = ids - self.ids[0]
            hit = (pos >= 0) & (pos < self.ids.size)
            pos[~hit] = 0
            return pos, hit
        pos = np.minimum(np.searchsorted(self.ids, ids), self.ids.size - 1)
        return pos, self.ids[pos] == ids

    def lookup(self, ids: I64, missing: str = "") -> Obj:
        """Strings for ``ids`` (a few ids: thread names, ...)."""
        out = np.empty(ids.size, dtype=object)
        out[:] = missing
        pos, hit = self.find(ids)
        out[hit] = self.values[pos[hit]]
        return out
