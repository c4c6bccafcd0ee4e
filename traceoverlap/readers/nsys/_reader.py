"""The reader: every table read once, rows placed on their ranks, the Timeline built."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace

import numpy as np
import numpy.typing as npt
import pandas as pd

from ...core.errors import TraceFormatError
from ...core.model import CATEGORIES, Timeline, make_events
from ._export import EXPORT_HINT
from ._heap import release_freed
from ._process import ProcessPart
from ._ranks import Ranks
from ._rows import Rows, shared_if_constant
from ._schema import NVTX, STRINGS
from ._strings import category_index, fast_categorical
from ._sync import SyncReader, Waits, wait_columns

I32 = npt.NDArray[np.int32]

# Communication ranges a CPU program marks (the reference workloads' gloo:<collective>).
_GLOO_RANGE = re.compile(r"^gloo:")


def _ranks_running(
    rank: npt.NDArray[np.integer],
    category: pd.Categorical,
    names: pd.Categorical,
    wanted: str,
    pattern: re.Pattern[str],
) -> set[int]:
    """Ranks (per row: ``rank``) with rows of category ``wanted`` whose name matches
    ``pattern``; each name those rows use is tested once."""
    cats = category.categories.tolist()  # a few (a pd.Index lookup builds its hash engine)
    if wanted not in cats:
        return set()
    rows = np.flatnonzero(category.codes == cats.index(wanted))
    codes = names.codes[rows].astype(np.int64)
    used = np.flatnonzero(np.bincount(codes + 1, minlength=len(names.categories) + 1)[1:])
    if used.size == 0:
        return set()
    values = names.categories.to_numpy(dtype=object)[used]
    match = np.zeros(len(names.categories) + 1, dtype=bool)  # the last: code -1, no name
    match[used] = [pattern.search(str(n)) is not None for n in values.tolist()]
    hit = rows[match[codes]]
    if hit.size and rank.strides == (0,):  # one rank (shared_if_constant): no sort
        return {int(rank[0])}
    return {int(r) for r in np.unique(rank[hit]).tolist()}


_NCCL = re.compile(r"nccl", re.IGNORECASE)


def _used_categories(codes: I32) -> pd.Categorical:
    """The source categories of rows with :data:`CATEGORIES` codes, as
    ``Categorical.from_codes(...).remove_unused_categories()`` gives them, without the sort of
    every row that pandas' version does (three int64 temporaries of the whole table)."""
    if codes.size == 0:  # pandas' own, for its empty categories' dtype
        full = category_index(np.array(CATEGORIES, dtype=object))
        return pd.Categorical.from_codes(codes, categories=full).remove_unused_categories()
    used = np.bincount(codes, minlength=len(CATEGORIES)).astype(bool)
    remap = (np.cumsum(used) - 1).astype(np.int8)
    cats = np.array(CATEGORIES, dtype=object)[used]
    return fast_categorical(remap[codes], category_index(cats))


def _host_ranks(hosts: list[Rows], by_pid: dict[int, list[int]]) -> tuple[list[Rows], list[I32]]:
    """Each block of host rows without the rows of processes outside ``by_pid`` (pid -> its
    ranks), and the first rank of each row's process."""
    pids = np.array(sorted(by_pid), dtype=np.int64)
    lead = next((h.pid for h in hosts if h.pid.size), None)
    one = int(lead[0]) if lead is not None and pids.size else None
    if one is not None and all(bool((h.pid == one).all()) for h in hosts):
        # one process's host rows (a one-process read): no search per row
        if one not in by_pid:
            hosts = [h.take(np.zeros(0, dtype=np.intp)) for h in hosts]
        return hosts, [np.full(len(h), by_pid.get(one, [0])[0], dtype=np.int32) for h in hosts]
    first = np.array([by_pid[int(p)][0] for p in pids], dtype=np.int32)
    kept, ranks = [], []
    for h in hosts:
        pos = np.minimum(np.searchsorted(pids, h.pid), max(pids.size - 1, 0))
        mine = pids[pos] == h.pid
        if not mine.all():
            h = h.take(np.flatnonzero(mine))
            pos = pos[mine]
        del mine
        kept.append(h)
        ranks.append(first[pos])
        del pos
    return kept, ranks


class Reader(ProcessPart, Ranks, SyncReader):
    # -- top level --------------------------------------------------------------------------

    def read(self) -> Timeline:
        strings = self.table(STRINGS)
        is_nsys = (
            strings is not None
            or self.table("META_DATA_EXPORT") is not None
            or self.table("EXPORT_META_DATA") is not None
            or any(t.upper().startswith("CUPTI_ACTIVITY_KIND_") for t in self.tables)
            or self.table(NVTX) is not None
        )
        if not is_nsys:
            raise TraceFormatError(
                self.path,
                "an SQLite file but not an Nsight Systems export "
                "(no StringIds, META_DATA_EXPORT or CUPTI_ACTIVITY_KIND_* tables)",
                EXPORT_HINT,
            )
        if strings is not None:
            self.strings = self.read_string_ids(strings)
        version = self.format_version()
        offset, clock = self.clock_offset()

        gpu = self.read_gpu()
        release_freed()  # each table's scan temporaries (see ._heap)
        self.gpu_pids = [int(p) for p in np.unique(gpu.pid).tolist()]
        nvtx = self.read_nvtx()
        release_freed()
        if self.process is not None:  # one process of a GPU capture: ranks from the whole file
            everyone = self.all_groups()
            if self.check is not None and everyone and self.process == min(everyone)[0]:
                self.check()
            # every process's rank texts: one scan of the file, when the environment (MPI
            # ranks, a RANK variable per process) does not say the ranks
            groups, ranks, rank_source, world_size = self._ranks(everyone, self.all_rank_texts)
            # the CUDA calls, then the ranges: concatenated once, with the GPU rows, by place
            host = [self.read_runtime(sorted({p for p, _ in groups})), nvtx.ranges]
            device_kind = "gpu"
        elif len(gpu):
            groups, ranks, rank_source, world_size = self.assign_ranks(gpu, nvtx)
            host = [self.read_runtime(sorted({p for p, _ in groups})), nvtx.ranges]
            device_kind = "gpu"
        else:
            if len(nvtx.ranges) == 0:
                raise TraceFormatError(
                    self.path,
                    "the export has no GPU activity and no NVTX ranges: nothing to analyze",
                    "trace CUDA (`nsys profile -t cuda,nvtx`), or on CPU runs mark steps and "
                    "phases with NVTX ranges (`nsys profile -t nvtx`)",
                )
            groups, ranks, rank_source, world_size = self.assign_cpu_ranks(nvtx)
            host = [nvtx.ranges]
            device_kind = "cpu"
            self.notes.append(
                "CPU capture (no CUDA activity in the export): each process's NVTX ranges are its "
                "timeline (if the program did use a GPU, trace it: `nsys profile -t cuda,nvtx`)."
            )
        del nvtx
        syncs: Rows | None = None
        waits: Waits | None = None
        if device_kind == "gpu":
            syncs, waits = self.read_syncs(gpu, groups)
        rows, rank = self.place(gpu, host, groups, ranks, syncs)
        del host, gpu
        release_freed()
        # the rank as the event table holds it (one value viewed n times when constant)
        rank_col = shared_if_constant(rows.group_by(rank))
        del rank

        category = _used_categories(rows.pop("category"))
        if offset:
            rows.start += offset
            rows.end += offset
        n = len(rows)
        sparse = wait_columns(waits, rows.pid, rows.correlation, category)
        name = self.names.categorical(rows.pop("name"))
        events = make_events(
            n,
            {
                # columns with one value (the rank and pid of a one-process export, the
                # collective fields nsys never has) are one value viewed n times, not n copies
                "rank": rank_col,
                "pid": shared_if_constant(rows.pop("pid")),
                "device": rows.device,
                "stream": rows.stream,
                "tid": rows.tid,
                "lane": self.lanes.categorical(rows.pop("lane")),
                "thread_name": self.thread_names.categorical(rows.pop("thread_name")),
                "category": category,
                "name": name,
                "start_ns": rows.start,
                "end_ns": rows.end,
                "correlation": rows.correlation,
                "coll_bytes": np.broadcast_to(np.int64(-1), (n,)),
                "seq": np.broadcast_to(np.int64(-1), (n,)),
                "group_size": np.broadcast_to(np.int32(-1), (n,)),
                "shape": shared_if_constant(rows.shape, np.int32),
                **sparse,
            },
        )
        traces = self.trace_infos(
            groups, ranks, rank_source, world_size, version, clock, device_kind
        )
        if self.process is not None:
            traces = tuple(t for t in traces if t.pid == self.process)
        if device_kind == "gpu":
            nccl = _ranks_running(rank_col, category, name, "kernel", _NCCL)
            traces = tuple(replace(t, backend="nccl") if t.rank in nccl else t for t in traces)
        else:
            gloo = _ranks_running(rank_col, category, name, "annotation", _GLOO_RANGE)
            traces = tuple(replace(t, backend="gloo") if t.rank in gloo else t for t in traces)
        return Timeline(events, traces)

    def place(
        self,
        gpu: Rows,
        host: Rows | Sequence[Rows],
        groups: list[tuple[int, int]],
        ranks: list[int],
        syncs: Rows | None = None,
    ) -> tuple[Rows, I32]:
        """All rows with their rank: GPU rows (and ``syncs``, placed on groups by
        :meth:`read_syncs`) by (pid, device); host rows by pid, copied to every rank of a process
        that drives several GPUs; host rows of processes outside the groups go. ``host``: the
        host rows, or their blocks (CUDA calls, NVTX ranges), in order: the same rows as their
        concatenation, concatenated once here with the others instead of twice."""
        hosts = [host] if isinstance(host, Rows) else list(host)
        keys = np.array([(p << 32) | (d & 0xFFFFFFFF) for p, d in groups], dtype=np.int64)
        order = np.argsort(keys)

        def rank_of(rows: Rows) -> I32:
            gkey = (rows.pid << 32) | (rows.device.astype(np.int64) & 0xFFFFFFFF)
            if gkey.size == 0:
                return np.zeros(0, dtype=np.int32)
            return np.asarray(ranks, dtype=np.int32)[order][np.searchsorted(keys[order], gkey)]

        gpu_rank = rank_of(gpu)

        by_pid: dict[int, list[int]] = {}
        for (pid, _), r in zip(groups, ranks, strict=True):
            by_pid.setdefault(pid, []).append(r)
        hosts, host_ranks = _host_ranks(hosts, by_pid)
        blocks, rank_parts = [gpu, *hosts], [gpu_rank, *host_ranks]
        del host_ranks
        if syncs is not None and len(syncs):
            blocks.append(syncs)
            rank_parts.append(rank_of(syncs))
        for pid, rs in by_pid.items():
            if len(rs) > 1:
                idx = [np.flatnonzero(h.pid == pid) for h in hosts]
                for r in rs[1:]:
                    for h, i in zip(hosts, idx, strict=True):
                        blocks.append(h.take(i))
                        rank_parts.append(np.full(i.size, r, dtype=np.int32))
        return Rows.concat(blocks, trim=True), np.concatenate(rank_parts)
