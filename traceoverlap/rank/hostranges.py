"""What a rank's host was doing: the ranges of its main thread, kept by the map for the blame
chains of the reduce (docs/job-model.md, Blame; :mod:`traceoverlap.run.job`).
"""

from __future__ import annotations

import functools
import re
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core import intervals as iv
from ..core.model import in_categories
from ..core.vocab import STEP_MARKER_PREFIX

I64 = npt.NDArray[np.int64]


#: What a root rank was doing: the ranges of its main thread (docs/job-model.md, Blame).
HOST_RANGE_COLUMNS = ("name", "start_ns", "end_ns")
#: The name of the rows of :func:`host_ranges` that hold the main thread's communication calls
#: (their union): time inside them is waiting, not doing.
COMM_CALLS = "\x00comm"
#: The first character of the names of :func:`kernel_ranges`' rows (GPU kernels, compared across
#: ranks by name and call order within the step, diagnosis.md §14): their time is the device's,
#: so host communication calls are not taken out of it.
KERNEL_MARK = "\x01"
#: Past this many compute kernels a unit's kernels are not kept for the blame (their names
#: would outweigh the rest of the unit's result).
MAX_KERNELS = 1_000_000
#: Names that are not "what the rank was doing": step markers, communication calls.
_NOT_A_CAUSE = re.compile(
    rf"(?i)^({re.escape(STEP_MARKER_PREFIX)}|gloo:|nccl:|c10d::|record_param_comms)"
)


def host_ranges(ev: pd.DataFrame, lo: int, hi: int) -> pd.DataFrame:
    """A unit's main-thread ranges inside [lo, hi) that can name what it was doing
    (:data:`HOST_RANGE_COLUMNS`): every ``record_function`` / NVTX range (annotation) and the
    top-level ``cpu_op`` s (those no other op of the thread encloses), never step markers or
    communication calls. The main thread is the host thread with the most ``cpu_op`` s outside
    gloo's workers. Columnar, a few rows per op at most."""
    cat = ev["category"]
    is_op = in_categories(cat, ("cpu_op",))
    is_ann = in_categories(cat, ("annotation",))
    tid = ev["tid"].to_numpy()
    worker = in_categories(ev["thread_name"], ("pt_gloo_runloop",))
    ops = is_op & ~worker
    if not ops.any():
        return pd.DataFrame(columns=list(HOST_RANGE_COLUMNS))
    t_ids, counts = np.unique(tid[ops], return_counts=True)
    main = int(t_ids[np.argmax(counts)])
    start = ev["start_ns"].to_numpy()
    end = ev["end_ns"].to_numpy()
    on = (tid == main) & (end > lo) & (start < hi)
    op_rows = np.flatnonzero(on & is_op)
    op_start = start[op_rows]
    if not (op_start[1:] > op_start[:-1]).all():  # else already in that order (the usual case)
        op_rows = op_rows[np.lexsort((-end[op_rows], op_start))]
    if op_rows.size:
        reach = np.maximum.accumulate(end[op_rows])
        top = np.ones(op_rows.size, dtype=bool)
        top[1:] = start[op_rows][1:] >= reach[:-1]
        op_rows = op_rows[top]
    rows = np.flatnonzero(on & (is_ann | is_op))
    # the name tests run once per distinct name, not once per row
    labels, code = _name_codes(ev["name"], rows)
    comm_name = np.array([_NOT_A_CAUSE.match(n) is not None for n in labels], dtype=bool)
    step_name = np.array([n.startswith(STEP_MARKER_PREFIX) for n in labels], dtype=bool)
    is_comm = comm_name[code] & ~step_name[code]
    calls = iv.union(start[rows[is_comm]], end[rows[is_comm]])
    chosen = np.zeros(len(tid), dtype=bool)
    chosen[op_rows] = True
    keep = (chosen[rows] | is_ann[rows]) & ~comm_name[code]
    rows, code = rows[keep], code[keep]
    # an object column of the few distinct name objects: a text column would build a string
    # per row (a third of this function's time), and only _Ranges reads it
    names = np.concatenate(
        (labels.astype(object)[code], np.full(calls[0].size, COMM_CALLS, dtype=object))
    )
    return _frame(
        names,
        np.concatenate((start[rows], calls[0])).astype(np.int64, copy=False),
        np.concatenate((end[rows], calls[1])).astype(np.int64, copy=False),
    )


def _name_codes(names: pd.Series, rows: I64) -> tuple[npt.NDArray[np.str_], I64]:
    """(distinct names, the code of each of ``rows``' names): from the categorical's codes when
    it is one (no per-row string), else by sorting the names; names as ``astype(str)`` gives."""
    if isinstance(names.dtype, pd.CategoricalDtype):
        codes = names.cat.codes.to_numpy()[rows]
        if not (codes < 0).any():
            # np.unique(codes, return_inverse=True) without its sort: the codes used, ascending
            used = np.flatnonzero(np.bincount(codes, minlength=len(names.cat.categories)))
            lut = np.zeros(len(names.cat.categories), dtype=np.int64)
            lut[used] = np.arange(used.size, dtype=np.int64)
            labels = np.asarray(names.cat.categories, dtype=object)[used].astype(str)
            return labels, lut[codes]
    text = names.to_numpy()[rows].astype(str)
    labels, code = np.unique(text, return_inverse=True)
    return labels, code.astype(np.int64)


def kernel_ranges(
    ev: pd.DataFrame, kind: npt.NDArray[np.int8], event_window: I64, compute: int
) -> pd.DataFrame:
    """A GPU unit's compute kernels in step windows as blame ranges
    (:data:`HOST_RANGE_COLUMNS`), each named :data:`KERNEL_MARK` + ``name (call k in the step)``
    (``k``: its order among the kernels of that name in its step window), so that the same
    kernel is compared with itself on the peers (diagnosis.md §14). ``compute``: the kind code
    of compute. Empty past :data:`MAX_KERNELS`."""
    rows = np.flatnonzero((kind == compute) & (event_window >= 0))
    if rows.size == 0 or rows.size > MAX_KERNELS:
        return pd.DataFrame(columns=list(HOST_RANGE_COLUMNS))
    start = ev["start_ns"].to_numpy()[rows]
    order = np.lexsort((start, event_window[rows]))
    rows, start = rows[order], start[order].astype(np.int64)
    labels, code = _name_codes(ev["name"], rows)
    win = event_window[rows]
    # per (window, name): the call order, 1-based
    key = win.astype(np.int64) * (labels.size + 1) + code
    by = np.argsort(key, kind="stable")
    k_sorted = key[by]
    first = np.ones(by.size, dtype=bool)
    first[1:] = k_sorted[1:] != k_sorted[:-1]
    run_start = np.maximum.accumulate(np.where(first, np.arange(by.size), 0))
    nth = np.empty(by.size, dtype=np.int64)
    nth[by] = np.arange(by.size) - run_start + 1
    nth_max = int(nth.max()) + 1
    pair, inv = _unique_inverse(code * nth_max + nth, labels.size * nth_max)
    # the strings by concatenation in numpy's object loop: per name its head, per call number
    # its tail (an f-string per pair over Python lists cost ~1.7x this)
    head = np.array([f"{KERNEL_MARK}{t} (call " for t in labels.tolist()], dtype=object)
    tail = np.array([f"{k} in the step)" for k in range(nth_max)], dtype=object)
    names = head[pair // nth_max] + tail[pair % nth_max]
    return _frame(names[inv], start, ev["end_ns"].to_numpy()[rows].astype(np.int64, copy=False))


def _unique_inverse(keys: I64, bound: int) -> tuple[I64, I64]:
    """``np.unique(keys, return_inverse=True)`` for keys in [0, ``bound``): by a table of
    ``bound`` entries when that is not much more than the keys (no sort: ~10x faster on 40 000
    kernels), else by numpy's sort."""
    if bound > 4 * keys.size + 65_536:
        uniq, inv = np.unique(keys, return_inverse=True)
        return uniq, inv.reshape(-1).astype(np.int64, copy=False)
    seen = np.zeros(bound, dtype=bool)
    seen[keys] = True
    uniq = np.flatnonzero(seen)
    at = np.empty(bound, dtype=np.int64)
    at[uniq] = np.arange(uniq.size, dtype=np.int64)
    return uniq.astype(np.int64, copy=False), at[keys]


@functools.cache
def _text_dtype() -> Any:
    """The dtype pandas gives a DataFrame column made of an object array of strings."""
    probe = pd.array(np.array(["a"], dtype=object), dtype=object)
    return pd.DataFrame({"n": probe})["n"].dtype


def _frame(names: npt.NDArray[np.object_], start: I64, end: I64) -> pd.DataFrame:
    """The ranges as :data:`HOST_RANGE_COLUMNS` (``names``: str objects), built as
    ``pd.DataFrame({"name": pd.array(names, dtype=object), ...})`` builds them: pandas 3 infers
    its ``str`` dtype from a non-empty object column of strings (pandas 2: object; object when
    empty). Said directly, and without copying the fresh columns, it costs a fifth."""
    return pd.DataFrame(
        {
            "name": pd.array(names, dtype=_text_dtype() if names.size else object),
            "start_ns": start,
            "end_ns": end,
        },
        columns=list(HOST_RANGE_COLUMNS),
        copy=False,
    )
