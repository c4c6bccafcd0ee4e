"""Rows joined to other rows by time: correlation ids from flow events, collective args from
the op that launched a kernel. Vectorised per thread (binary searches), never per event."""

from __future__ import annotations

import numpy as np

from ._categories import FLOW_TARGET_CODES, LAUNCH_CODES, MODEL_CODE, codes_in
from ._columns import CollectiveColumns
from ._values import checked_ns


def fill_correlation_from_flows(
    flows: list[tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]],
    cat: np.ndarray,
    corr: np.ndarray,
    pid_raw: np.ndarray,
    tid_raw: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    base_ns: int,
) -> str | None:
    """Fill missing correlation ids (in place) from ac2g / async_cpu_to_gpu flow events.

    A flow's ``s`` end sits on the launch, its ``f`` end on the GPU activity; both carry the same
    ``id``. Each end binds to the X event on the same (pid, tid) that starts at the flow's ts, else
    to the one that encloses it (the latest-starting one). Returns a note, or None if unused.
    """
    if not flows:
        return None
    targets = codes_in(cat, FLOW_TARGET_CODES) & (corr < 0)
    if not targets.any():
        return None
    fid = np.concatenate([f[1] for f in flows])
    fpid = np.concatenate([f[2] for f in flows])
    ftid = np.concatenate([f[3] for f in flows])
    fns, ok = checked_ns(np.concatenate([f[4] for f in flows]), base_ns)
    tidx = np.flatnonzero(targets)
    bound = 0
    for kp, kt in set(zip(fpid[ok].tolist(), ftid[ok].tolist(), strict=True)):
        cand = tidx[(pid_raw[tidx] == kp) & (tid_raw[tidx] == kt)]
        if len(cand) == 0:
            continue
        cand = cand[np.argsort(start[cand], kind="stable")]
        cs = start[cand]
        sel = np.flatnonzero(ok & (fpid == kp) & (ftid == kt))
        pos = np.searchsorted(cs, fns[sel], side="right") - 1
        good = pos >= 0
        posg = np.where(good, pos, 0)
        hit = cand[posg]
        good &= end[hit] >= fns[sel]
        corr[hit[good]] = fid[sel[good]]
        bound += int(good.sum())
    if bound == 0:
        return None
    return f"Correlation ids of {bound} launches/GPU activities were taken from ac2g flow events."


#: How many enclosing ops to step back through when collective ops nest on one thread.
_NEST_DEPTH = 8


def collective_args_from_launching_op(
    cat: np.ndarray,
    pid: np.ndarray,
    tid: np.ndarray,
    start: np.ndarray,
    end: np.ndarray,
    corr: np.ndarray,
    host_pid: int,
    coll: CollectiveColumns,
) -> int:
    """Give kernels without collective metadata that of the ``record_param_comms`` op that
    launched them (in place); returns how many kernels got it.

    ROCm traces name every RCCL kernel ``ncclDevKernel_Generic`` and copy no collective args
    onto it; the launching CPU op carries them (Collective name, In/Out msg nelems, dtype, Group
    size, Process Group Name, Seq). The kernel's launch (same correlation, the host process)
    lies inside that op on the same thread: for each launch, the latest-starting collective op
    on its thread that starts before it is found by binary search and kept if it also ends after
    it; when ops nest, up to :data:`_NEST_DEPTH` enclosing ones are tried.
    """
    kern = np.flatnonzero((cat == MODEL_CODE["kernel"]) & (coll.name == 0) & (corr >= 0))
    ops = np.flatnonzero((cat == MODEL_CODE["cpu_op"]) & (coll.name > 0) & (pid == host_pid))
    if len(kern) == 0 or len(ops) == 0:
        return 0
    kern, launch = _launches(kern, cat, pid, corr, host_pid)
    filled = 0
    for t in np.unique(tid[launch]).tolist():
        on_t = tid[launch] == t
        ops_t = ops[tid[ops] == t]
        if len(ops_t) == 0:
            continue
        found = _enclosing(ops_t, start, end, launch[on_t])
        ok = found >= 0
        coll.copy_rows(kern[on_t][ok], found[ok])
        filled += int(ok.sum())
    return filled


def _launches(
    kern: np.ndarray, cat: np.ndarray, pid: np.ndarray, corr: np.ndarray, host_pid: int
) -> tuple[np.ndarray, np.ndarray]:
    """(kernels, their launches): the kernels of ``kern`` whose launch (a runtime / driver row of
    the host process with the same correlation) is there, and that launch's row for each."""
    launch = np.flatnonzero(codes_in(cat, LAUNCH_CODES) & (corr >= 0) & (pid == host_pid))
    if len(launch) == 0:
        return kern[:0], launch
    order = np.argsort(corr[launch], kind="stable")
    lcorr = corr[launch][order]
    at = np.minimum(np.searchsorted(lcorr, corr[kern]), len(lcorr) - 1)
    has = lcorr[at] == corr[kern]
    return kern[has], launch[order][at[has]]


def _enclosing(ops: np.ndarray, start: np.ndarray, end: np.ndarray, rows: np.ndarray) -> np.ndarray:
    """For each of ``rows``, the latest-starting op of ``ops`` (rows on one thread) that starts
    before it and ends after it, among the :data:`_NEST_DEPTH` latest that start before it; -1
    where there is none."""
    ops = ops[np.argsort(start[ops], kind="stable")]
    ostart, oend = start[ops], end[ops]
    pos = np.searchsorted(ostart, start[rows], side="right") - 1
    found = np.full(len(rows), -1, dtype=np.int64)
    for _ in range(_NEST_DEPTH):
        look = (found < 0) & (pos >= 0)
        if not look.any():
            break
        p = np.where(look, pos, 0)
        inside = look & (oend[p] >= end[rows])
        found[inside] = ops[p[inside]]
        pos = np.where(look & ~inside, pos - 1, -1)
    return found
