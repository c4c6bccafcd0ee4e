"""Numbers from the JSON: the bounds they are believed within, and their exact conversion.

The fast paths build numpy arrays from homogeneous lists at C speed; odd values (strings, floats,
ints beyond int64, booleans from the lenient decoder) go through the slow per-value path only
when the fast one fails.
"""

from __future__ import annotations

import hashlib
import math
import re
from typing import Any

import numpy as np

#: Largest world size (and rank + 1) believed: anything larger is a damaged field, and building
#: per-rank structures for it downstream would cost memory for nothing.
MAX_WORLD_SIZE = 1 << 20
INT64_MAX = 2**63 - 1
INT64_MIN = -(2**63)
INT32_MAX = 2**31 - 1


def us_to_ns(us: np.ndarray) -> np.ndarray:
    """Float microseconds -> exact integer nanoseconds (int64).

    ``round(us * 1000)`` in float64 is not exact for Kineto's ``ts`` (~4.5e12 us: the product
    ~4.5e15 has an ulp of 0.5-1 ns). Splitting off the integer part first is: ``floor`` and the
    subtraction are exact, the fraction times 1000 is tiny, and the integer part is multiplied in
    int64. The result is the decimal ns value written in the file whenever the parse error of
    ``us`` is below 0.5 ns, i.e. for ``us < 2**43`` (with three decimals) and for any integer
    ``us < 2**53`` (older absolute epoch-microsecond traces). Values must be finite and small
    enough for the result to fit int64: see :func:`checked_ns` for the reader's guarded use.
    """
    us = np.asarray(us, dtype=np.float64)
    if us.ndim != 1 or us.size <= _BLOCK:
        return _us_to_ns(us)
    # a block at a time: a whole column's temporaries would be fresh pages (a page fault per
    # 4 KB); a block's stay in the cache and are reused
    ns = np.empty(us.size, dtype=np.int64)
    for i in range(0, us.size, _BLOCK):
        ns[i : i + _BLOCK] = _us_to_ns(us[i : i + _BLOCK])
    return ns


_BLOCK = 8192


def _us_to_ns(us: np.ndarray) -> np.ndarray:
    ip = np.floor(us)
    frac = us - ip
    ns: np.ndarray = ip.astype(np.int64) * 1000 + np.rint(frac * 1000.0).astype(np.int64)
    return ns


# floor(us) at or above this cannot overflow when multiplied by 1000:
# -(2**63 // 1000) * 1000 = -9223372036854775000 >= -2**63.
_US_FLOOR_MIN = -(2**63 // 1000)


def checked_ns(us: np.ndarray, base: int) -> tuple[np.ndarray, np.ndarray]:
    """(``us_to_ns(us) + base``, ok) with ok False where ``us`` is not finite or the exact result
    would not fit int64; those rows get 0. ``base`` must lie in [0, 2**63 - 1].

    Exact bounds, in integers: with ip = floor(us) and r = rint(frac * 1000) in [0, 1000], the
    result ip * 1000 + r + base fits iff ip >= -(2**63 // 1000) (then ip * 1000 >= -2**63 + 808
    and base >= 0) and ip <= (2**63 - 1 - base - r) // 1000.
    """
    us = np.asarray(us, dtype=np.float64)
    if us.size and _all_fit(float(us.min()), float(us.max()), base):
        ns = us_to_ns(us)  # every row ok: the same arithmetic without the masks
        if base:
            ns += base
        return ns, np.ones(us.size, dtype=bool)
    ok = np.isfinite(us) & (np.abs(us) < 2.0**62)  # |us| >= 2**62 can never fit; astype is safe
    u = np.where(ok, us, 0.0)
    ip = np.floor(u)
    r = np.rint((u - ip) * 1000.0).astype(np.int64)
    ipi = ip.astype(np.int64)
    ok &= (ipi >= _US_FLOOR_MIN) & (ipi <= (np.int64(INT64_MAX - base) - r) // 1000)
    ipi = np.where(ok, ipi, 0)
    ns = ipi * 1000 + np.where(ok, r, 0)
    if base:
        ns = np.where(ok, ns + base, 0)
    return ns, ok


def _all_fit(lo: float, hi: float, base: int) -> bool:
    """Whether every value within [lo, hi] passes :func:`checked_ns`'s bounds (NaN: no): with a
    margin of a few units on floor(us), which is all that float rounding of the bounds can
    move (they are below 2**54)."""
    if not (math.isfinite(lo) and math.isfinite(hi)):
        return False
    return lo >= _US_FLOOR_MIN + 4 and hi <= (INT64_MAX - base - 1000) // 1000 - 4


def to_int(v: Any, default: int) -> int:
    """An int64 from an odd value: an int in range, a finite float (truncated), the first number
    written in a string; else ``default``."""
    if type(v) is int:
        return v if INT64_MIN <= v <= INT64_MAX else default
    if isinstance(v, float) and v == v and abs(v) < 9.2e18:
        return int(v)
    if isinstance(v, str):
        m = re.search(r"-?\d+", v)
        if m:
            return to_int(int(m.group(0)), default)
    return default


def _stable_id(v: Any) -> int:
    """A non-int flow id as an int >= 2**62, the same in every process (Python's hash() of a
    str is salted per process: a Dask worker would give other numbers)."""
    digest = hashlib.blake2b(str(v).encode("utf-8", "surrogatepass"), digest_size=8).digest()
    return int.from_bytes(digest, "little") % 2**61 + 2**62


def id_array(values: list[Any]) -> np.ndarray:
    """Flow ids: ints as they are; other ids (strings...) hashed to a stable int >= 2**62."""
    if all(type(v) is int for v in values):
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    return np.array(
        [v if type(v) is int and 0 <= v < 2**62 else _stable_id(v) for v in values],
        dtype=np.int64,
    )


def int_array(values: list[Any], default: int, loose: bool = False) -> np.ndarray:
    """int64 column; odd values (strings, floats, out of range) through :func:`to_int`.
    ``loose``: values from the lenient decoder, where a JSON ``true`` must not become 1."""
    if not (loose and any(type(v) is not int for v in values)):
        try:
            return np.array(values, dtype=np.int64)
        except (TypeError, ValueError, OverflowError):
            pass
    return np.array([to_int(v, default) for v in values], dtype=np.int64)


def _to_float(v: Any) -> float:
    if isinstance(v, (int, float)) and not isinstance(v, bool):
        try:
            return float(v)
        except OverflowError:  # an int beyond float range
            return math.nan
    if isinstance(v, str):
        try:
            return float(v)
        except ValueError:
            return math.nan
    return math.nan


def float_array(values: list[Any]) -> np.ndarray:
    """float64 column from leniently decoded values: numbers as they are, numeric strings
    parsed, anything else (null, true, text, a list...) NaN."""
    if all(type(v) is float or type(v) is int for v in values):
        try:
            return np.array(values, dtype=np.float64)
        except OverflowError:
            pass
    return np.array([_to_float(v) for v in values], dtype=np.float64)


def int_field(v: Any, lo: int, hi: int) -> int | None:
    """An integer metadata field within [lo, hi] (an int, an integral float or a string of
    digits), else None."""
    if isinstance(v, bool):
        return None
    if isinstance(v, float) and v.is_integer():
        v = int(v)
    elif isinstance(v, str) and v.strip().isdigit():
        v = int(v.strip())
    if type(v) is int and lo <= v <= hi:
        return v
    return None
