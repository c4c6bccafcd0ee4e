"""Applying the classification rules (:mod:`traceoverlap.core.rules`, the data) to a unit: each
event's kind (compute, comm, memory or none), as the metrics contract says (docs/metrics.md
"Activities and kinds"). Patterns are evaluated once per distinct name (the name column is
categorical), never per event.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core.model import GPU_ACTIVITY_CATEGORIES, Kind, Timeline, in_categories, per_category
from ..core.options import compile_regex
from ..core.rules import Rules
from ..core.vocab import KINDS
from .steps import cat_codes

#: leading global flags, as in ``(?i)nccl``: scoped to the whole pattern when patterns are joined
_GLOBAL_FLAGS = re.compile(r"^\(\?([aiLmsu]+)\)")
#: what a joined pattern would change the meaning of: numbered or named back-references and
#: conditionals (group numbers shift), verbose mode (a comment would swallow the closing paren)
_NOT_JOINABLE = re.compile(r"\\[1-9]|\(\?P=|\(\?\(|\(\?[aiLmsu]*x")
#: per pattern list: each name's answer, shared by every unit of the process (the ranks of a run
#: name the same kernels); it stops growing at a bound (an export of unique range names)
_MEMO: dict[tuple[str, ...], dict[str, bool]] = {}
_MEMO_NAMES = 200_000


def name_matcher(patterns: Sequence[str]) -> Callable[[str], bool]:
    """``name -> does any pattern match it (re.search)?`` One search of one joined pattern
    (``(?:p1)|(?:p2)...``, a leading ``(?i)`` scoped to its own part) where joining keeps the
    meaning, else one search per pattern; answers are remembered per name."""
    key = tuple(patterns)
    rxs = [compile_regex(p, "rules") for p in key]  # validates each, with its own error
    memo = _MEMO.get(key)
    if memo is None:
        memo = _MEMO[key] = {}
    search: Callable[[str], bool]
    joined = None
    if len(key) > 1 and not any(_NOT_JOINABLE.search(p) for p in key):
        parts = []
        for p in key:
            m = _GLOBAL_FLAGS.match(p)
            parts.append(f"(?{m.group(1)}:{p[m.end() :]})" if m else f"(?:{p})")
        try:
            joined = re.compile("|".join(parts))
        except (re.error, RecursionError, OverflowError):
            joined = None
    if joined is not None:
        js = joined.search

        def search(s: str) -> bool:
            return js(s) is not None

    else:

        def search(s: str) -> bool:
            return any(rx.search(s) is not None for rx in rxs)

    def match(name: str) -> bool:
        hit = memo.get(name)
        if hit is None:
            hit = search(name)
            if len(memo) < _MEMO_NAMES:
                memo[name] = hit
        return hit

    return match


def name_mask(
    names: pd.Series, patterns: Sequence[str], rows: npt.NDArray[np.bool_] | None = None
) -> npt.NDArray[np.bool_]:
    """Per row of a categorical column: does any pattern match? Each distinct name used by the
    selected ``rows`` is tested once (all rows when None); rows outside the selection read False."""
    if not patterns:
        return np.zeros(len(names), dtype=bool)
    per_name = per_category(names, name_matcher(patterns), rows, dtype=bool)
    codes = cat_codes(names)
    if rows is None:
        return np.asarray(per_name[codes], dtype=bool)
    # only the selected rows look their name up (a kernel mask selects a tenth of the table)
    idx = np.flatnonzero(rows)
    out = np.zeros(len(names), dtype=bool)
    out[idx] = per_name[codes[idx]]
    return out


def kinds(unit: Timeline, rules: Rules | None = None) -> npt.NDArray[np.int8]:
    """The :class:`~traceoverlap.core.model.Kind` code of every event of ONE unit (no table copy)."""
    rules = rules or Rules()
    ev = unit.events
    n = len(ev)
    kind = np.full(n, Kind.NONE, dtype=np.int8)
    if n == 0:
        return kind
    cat = ev["category"]
    is_kernel = in_categories(cat, ("kernel",))
    is_gpu = in_categories(cat, GPU_ACTIVITY_CATEGORIES)
    if is_gpu.any():
        comm = name_mask(ev["name"], rules.gpu_comm + rules.extra_comm, is_kernel)
        mem = name_mask(ev["name"], rules.gpu_memory, is_kernel)
        kind[is_kernel] = Kind.COMPUTE
        kind[is_kernel & mem] = Kind.MEMORY
        kind[is_kernel & comm] = Kind.COMM
        kind[is_gpu & ~is_kernel] = Kind.MEMORY
        return kind
    is_op = in_categories(cat, ("cpu_op",))
    host = in_categories(cat, ("cpu_op", "annotation"))
    comm = name_mask(ev["name"], rules.cpu_comm + rules.extra_comm, host)
    excluded = name_mask(ev["name"], rules.cpu_compute_exclude + rules.extra_comm, is_op)
    comm_thread = name_mask(ev["thread_name"], rules.cpu_comm_threads, is_op)
    kind[is_op & ~excluded & ~comm_thread] = Kind.COMPUTE
    if not is_op.any() and rules.cpu_compute_ranges:
        # no host ops at all (NVTX ranges only: a CPU run under Nsight Systems): the phases the
        # program marks are its compute
        ann = in_categories(cat, ("annotation",))
        kind[name_mask(ev["name"], rules.cpu_compute_ranges, ann)] = Kind.COMPUTE
    kind[host & comm] = Kind.COMM
    return kind


def unseen_comm_note(unit: Timeline, kind: npt.NDArray[np.int8]) -> str | None:
    """For a CPU unit with no communication activity from a capture that does not see host-side
    communication (Nsight Systems does not see gloo's work): zero communication there means "not
    visible", not "none"."""
    info = unit.traces[0]
    if info.host_comm_seen or info.device_kind != "cpu" or (kind == Kind.COMM).any():
        return None
    return (
        "this capture has no communication activity the tool can see (CPU run under nsys: "
        "without the PyTorch profiler there are no gloo:* work items, and the program marked no "
        "collective as an NVTX range named gloo:<collective>, as the reference workloads do); "
        "its communication numbers are not measured, not zero"
    )


def comm_call_mask(unit: Timeline, rules: Rules | None = None) -> npt.NDArray[np.bool_]:
    """CPU units: host events on compute threads during which the thread was blocked in a
    communication call (diagnosis.md §3, the CPU form of ``dependency``)."""
    rules = rules or Rules()
    ev = unit.events
    cat = ev["category"]
    host = in_categories(cat, ("cpu_op", "annotation"))
    calls = name_mask(ev["name"], rules.cpu_comm_calls, host)
    comm_thread = name_mask(ev["thread_name"], rules.cpu_comm_threads, calls)
    return np.asarray(calls & ~comm_thread, dtype=bool)


def classify(timeline: Timeline, rules: Rules | None = None) -> Timeline:
    """A Timeline whose events carry a ``kind`` column (compute / comm / memory / none), each
    rank classified by its own rules (GPU rules when it has GPU activity). For the Python API
    (:func:`traceoverlap.load`); the analysis itself keeps kinds as an array per unit."""
    ev = timeline.events
    kind = np.full(len(ev), Kind.NONE, dtype=np.int8)
    ranks = np.unique(ev["rank"].to_numpy())
    if ranks.size == 1:
        kind[:] = kinds(timeline, rules)
    else:
        rank = ev["rank"].to_numpy()
        for r in ranks.tolist():
            rows = np.flatnonzero(rank == r)
            kind[rows] = kinds(Timeline(ev.iloc[rows], timeline.traces), rules)
    out = ev.assign(kind=pd.Categorical.from_codes(kind, list(KINDS)))
    return Timeline(out, timeline.traces)
