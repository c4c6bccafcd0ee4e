"""GPU activities (kernels, memcpy, memset) and CUDA API calls (launches), as host/GPU rows."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pandas as pd

from ...core.errors import TraceFormatError
from .._shape import column_shape_codes
from ._columns import Columns
from ._export import EXPORT_HINT
from ._metadata import Metadata
from ._rows import CAT_CODE, Rows, isin_ids, pid_of, select, tid_of
from ._schema import KERNEL, MEMCPY, MEMSET, RUNTIME, STRINGS, int_or_none, quote

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]

# Labels of CUPTI memcpy kinds, used when the export has no ENUM_CUDA_MEMCPY_OPER table.
_MEMCPY_LABELS = {
    1: "Host-to-Device",
    2: "Device-to-Host",
    8: "Device-to-Device",
    9: "Host-to-Host",
    10: "Peer-to-Peer",
}


#: The launch shape columns (grid, block) of each GPU table that has them, read when present.
_DIMS = {"kernel": ["gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ"]}


class Activity(Metadata):
    # -- GPU activity -----------------------------------------------------------------------

    def read_gpu(self) -> Rows:
        blocks: list[Rows] = []
        dropped = 0
        for table_name, category in ((KERNEL, "kernel"), (MEMCPY, "memcpy"), (MEMSET, "memset")):
            t = self.table(table_name)
            if t is None:
                continue
            self.require(t, ("start", "end", "deviceId", "streamId"))
            name_col: str | None = None
            if category == "kernel":
                # shortName is what classification matches (demangled names carry templates)
                name_col = next(
                    (
                        c
                        for c in ("shortName", "demangledName", "mangledName")
                        if c in self.columns(t)
                    ),
                    None,
                )
                if name_col is None:
                    self.require(t, ("shortName",))
            elif category == "memcpy":
                name_col = "copyKind"
            wanted = ["start", "end", "deviceId", "streamId", "correlationId", "globalPid"]
            dims = _DIMS.get(category, [])
            cols = self.scan(t, wanted + dims + ([name_col] if name_col else []))
            if cols.n == 0:
                continue
            ok = self.valid_times(cols, t, "GPU activities")
            start, end = cols.ints["start"], cols.ints["end"]
            n_valid = int(np.count_nonzero(ok))
            ok &= (start >= 0) & (end >= start)
            dropped += n_valid - int(np.count_nonzero(ok))
            if "globalPid" in cols.ints:
                gpid = self.int_column(cols, t, "globalPid", 0)
            else:
                gpid = np.full(cols.n, self.sole_host_global_pid(t), dtype=np.int64)
            keep = None if ok.all() else np.flatnonzero(ok)

            start, end = select(start, keep), select(end, keep)
            dev = select(self.int_column(cols, t, "deviceId", -1), keep)
            stream = select(self.int_column(cols, t, "streamId", -1), keep)
            corr = select(self.int_column(cols, t, "correlationId", -1), keep)
            gpid = select(gpid, keep)
            name_id = select(self.int_column(cols, t, name_col, -1), keep) if name_col else None
            n = start.size
            shape = self.launch_shapes(cols, t, dims, keep)
            del cols
            if category == "kernel":
                assert name_id is not None
                if self.table(STRINGS) is None:
                    raise TraceFormatError(
                        self.path,
                        "the export has no StringIds table, so kernel and range names cannot be "
                        "resolved",
                        EXPORT_HINT,
                    )
                names = self.names.add_string_ids(self.strings, name_id, "<unnamed kernel>")
            elif category == "memcpy":
                assert name_id is not None
                labels = self.memcpy_labels()
                codes, kinds = pd.factorize(name_id)
                cats = np.empty(len(kinds), dtype=object)
                cats[:] = [f"Memcpy {labels.get(int(k), f'kind {int(k)}')}" for k in kinds]
                names = self.names.add_codes(codes, cats)
            else:
                names = self.names.add_const("Memset", n)
            codes, streams = pd.factorize(stream)
            lane_names = np.empty(len(streams), dtype=object)
            lane_names[:] = [f"stream {int(s)}" for s in streams]
            blocks.append(
                Rows(
                    start=start,
                    end=end,
                    pid=pid_of(gpid),
                    device=dev.astype(np.int32),
                    stream=stream,
                    tid=np.full(n, -1, dtype=np.int64),
                    correlation=corr,
                    category=np.full(n, CAT_CODE[category], dtype=np.int32),
                    name=names,
                    lane=self.lanes.add_codes(codes, lane_names),
                    thread_name=self.thread_names.add_const("", n),
                    shape=shape,
                )
            )
        if dropped:
            self.notes.append(
                f"Dropped {dropped} GPU activities with negative timestamps "
                "(before the capture start) or an end before their start."
            )
        return Rows.concat(blocks)

    def launch_shapes(
        self, cols: Columns, table: str, dims: list[str], keep: npt.NDArray[np.intp] | None
    ) -> I32:
        """The launch shape code of each kept row (:mod:`.._shape`) from the ``dims`` columns
        (grid x, y, z, block x, y, z), -1 everywhere without them; a column the table lacks,
        or a value that is not an integer, reads as -1: no shape."""
        n = cols.n if keep is None else keep.size
        if not dims:
            return np.full(n, -1, dtype=np.int32)
        return column_shape_codes([select(self.int_column(cols, table, d, -1), keep) for d in dims])

    def sole_host_global_pid(self, table: str) -> int:
        """For a GPU table without globalPid: the one process that made CUDA calls, if only one."""
        rt = self.table(RUNTIME)
        pids: set[int] = set()
        if rt is not None and "globalTid" in self.columns(rt):
            for (g,) in self.rows(
                f'SELECT DISTINCT "globalTid" >> 24 FROM {quote(rt)} '
                "WHERE typeof(\"globalTid\") = 'integer' LIMIT 2"
            ):
                if int_or_none(g) is not None:
                    pids.add(int(g) & 0xFFFFFF)
        if len(pids) == 1:
            return next(iter(pids)) << 24
        self.notes.append(f"Table {table} has no globalPid: its GPU work was given pid 0.")
        return 0

    def memcpy_labels(self) -> dict[int, str]:
        t = self.table("ENUM_CUDA_MEMCPY_OPER")
        if t is None or not self.has(t, "id", "label"):
            return dict(_MEMCPY_LABELS)
        out = {}
        for i, lab in self.rows(f"SELECT id, label FROM {quote(t)}"):
            if int_or_none(i) is not None and lab is not None:
                out[int(i)] = str(lab)
        return out or dict(_MEMCPY_LABELS)

    # -- host rows: CUDA API calls and NVTX ranges ------------------------------------------

    def thread_ids(self, cols: Columns, table: str, gpu_pids: Sequence[int]) -> I64 | None:
        """A host table's globalTid per row; without the column, the rows belong to the only GPU
        process when there is one (a minimal export), else the table cannot be placed (None)."""
        if "globalTid" in cols.ints:
            return self.int_column(cols, table, "globalTid", 0)
        if len(gpu_pids) == 1:
            self.notes.append(
                f"Table {table} has no globalTid: its rows were given to process {gpu_pids[0]}, "
                "the only one with GPU work."
            )
            return np.full(cols.n, int(gpu_pids[0]) << 24, dtype=np.int64)
        self.notes.append(
            f"Table {table} has no globalTid and the export holds "
            + ("several GPU processes" if gpu_pids else "no GPU process")
            + ": it was not read."
        )
        return None

    def read_runtime(self, gpu_pids: Sequence[int]) -> Rows:
        rt = self.table(RUNTIME)
        if rt is None or not self.usable(rt, ("start", "end", "correlationId")):
            return Rows.empty()
        cols = self.scan(rt, ["start", "end", "globalTid", "correlationId", "eventClass", "nameId"])
        gtid = self.thread_ids(cols, rt, gpu_pids)
        if gtid is None or cols.n == 0:
            return Rows.empty()
        ok = self.valid_times(cols, rt, "CUDA API calls")
        start, end = cols.ints["start"], cols.ints["end"]
        n_int = int(np.count_nonzero(ok))
        ok &= (start >= 0) & (end >= start)
        dropped = n_int - int(np.count_nonzero(ok))
        keep = None if ok.all() else np.flatnonzero(ok)  # all valid: no copies
        del ok
        corr = select(self.int_column(cols, rt, "correlationId", -1), keep)
        cls = select(self.int_column(cols, rt, "eventClass", 0), keep)
        name_id = select(self.int_column(cols, rt, "nameId", -1), keep)
        start, end, gtid = select(start, keep), select(end, keep), select(gtid, keep)
        del cols
        if dropped:
            self.notes.append(
                f"Dropped {dropped} CUDA API calls with negative timestamps "
                "(before the capture start) or an end before their start."
            )
        # every API row is kept (launches are found by correlation, never by API name)
        driver = self.enum_ids("ENUM_NSYS_EVENT_CLASS", ("TRACE_PROCESS_EVENT_CUDA_DRIVER",), (1,))
        category = np.where(
            isin_ids(cls, driver), np.int32(CAT_CODE["driver"]), np.int32(CAT_CODE["runtime"])
        )
        del cls
        names = self.names.add_string_ids(self.strings, name_id, "<CUDA API>")
        del name_id
        return self._host_block(start, end, gtid, corr, category, names)

    def _host_block(
        self, start: I64, end: I64, gtid: I64, corr: I64, category: I32, names: I32
    ) -> Rows:
        """Host rows; lane ``"thread {tid} ({name})"`` and thread_name from ThreadNames."""
        n = start.size
        codes, threads = pd.factorize(gtid)
        codes = codes.astype(np.int32)
        threads = np.asarray(threads, dtype=np.int64)
        thread_names = self.thread_name_table(threads)
        lanes = np.empty(threads.size, dtype=object)
        lanes[:] = [
            f"thread {int(g) & 0xFFFFFF}" + (f" ({name})" if name else "")
            for g, name in zip(threads, thread_names, strict=True)
        ]
        # the columns with one value are that value viewed n times (read-only: the read's last
        # concatenation copies them, as it copies every column)
        return Rows(
            start=start,
            end=end,
            pid=pid_of(gtid),
            device=np.broadcast_to(np.int32(-1), (n,)),
            stream=np.broadcast_to(np.int64(-1), (n,)),
            tid=tid_of(gtid),
            correlation=corr,
            category=category,
            name=names,
            lane=self.lanes.add_codes(codes, lanes),
            thread_name=self.thread_names.add_codes(codes, thread_names),
            shape=np.broadcast_to(np.int32(-1), (n,)),
        )
