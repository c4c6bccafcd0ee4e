"""Write small Nsight Systems-shaped SQLite exports for tests.

Only the subset of the ``nsys export --type=sqlite`` schema that the reader uses, with the real
table and column names (checked against an Nsight Systems 2026.2 export, schema 3.25.0):
StringIds, META_DATA_EXPORT, TARGET_INFO_SESSION_START_TIME, ANALYSIS_DETAILS, PROCESSES,
ThreadNames, CUPTI_ACTIVITY_KIND_KERNEL / _MEMCPY / _MEMSET / _RUNTIME, NVTX_EVENTS.

``globalPid`` / ``globalTid`` are serialised like nsys does: a hardware id above bit 48, the pid
in bits 24-47, the tid in bits 0-23. Correlation ids are counted per process, so two processes
reuse the same ids (as real exports do).
"""

from __future__ import annotations

import sqlite3
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

MS = 1_000_000

_SCHEMA: dict[str, str] = {
    "StringIds": "id INTEGER NOT NULL PRIMARY KEY, value TEXT NOT NULL",
    "META_DATA_EXPORT": "name TEXT NOT NULL, value TEXT",
    "TARGET_INFO_SESSION_START_TIME": (
        "utcEpochNs INTEGER, utcTime TEXT, localTime TEXT, systemClockNs INTEGER"
    ),
    "ANALYSIS_DETAILS": "globalVid INTEGER, duration INTEGER, startTime INTEGER, stopTime INTEGER",
    "PROCESSES": "globalPid INTEGER, pid INTEGER, name TEXT",
    "ThreadNames": "nameId INTEGER NOT NULL, priority INTEGER, globalTid INTEGER",
    "TARGET_INFO_GPU": "id INTEGER, name TEXT, busLocation TEXT, totalMemory INTEGER",
    "TARGET_INFO_CUDA_DEVICE": (
        "gpuId INTEGER, cudaId INTEGER NOT NULL, pid INTEGER NOT NULL, uuid TEXT, "
        "numMultiprocessors INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_KERNEL": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
        "globalPid INTEGER, demangledName INTEGER NOT NULL, shortName INTEGER NOT NULL, "
        "mangledName INTEGER, gridX INTEGER NOT NULL DEFAULT 1, gridY INTEGER NOT NULL DEFAULT 1, "
        "gridZ INTEGER NOT NULL DEFAULT 1, blockX INTEGER NOT NULL DEFAULT 1, "
        "blockY INTEGER NOT NULL DEFAULT 1, blockZ INTEGER NOT NULL DEFAULT 1"
    ),
    "CUPTI_ACTIVITY_KIND_MEMCPY": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
        "globalPid INTEGER, bytes INTEGER NOT NULL, copyKind INTEGER NOT NULL"
    ),
    "CUPTI_ACTIVITY_KIND_MEMSET": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER NOT NULL, streamId INTEGER NOT NULL, correlationId INTEGER, "
        "globalPid INTEGER, value INTEGER NOT NULL, bytes INTEGER NOT NULL"
    ),
    "CUPTI_ACTIVITY_KIND_RUNTIME": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, eventClass INTEGER NOT NULL, "
        "globalTid INTEGER, correlationId INTEGER, nameId INTEGER NOT NULL, "
        "returnValue INTEGER NOT NULL DEFAULT 0"
    ),
    "NVTX_EVENTS": (
        "start INTEGER NOT NULL, end INTEGER, eventType INTEGER NOT NULL, rangeId INTEGER, "
        "category INTEGER, color INTEGER, text TEXT, globalTid INTEGER, endGlobalTid INTEGER, "
        "textId INTEGER, domainId INTEGER"
    ),
}

#: Tables written only when a test adds rows to them (every other test's export stays as it was).
_OPTIONAL_SCHEMA: dict[str, str] = {
    # as Nsight Systems 2026.2 (schema 3.25) writes them
    "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION": (
        "start INTEGER NOT NULL, end INTEGER NOT NULL, deviceId INTEGER NOT NULL, "
        "contextId INTEGER NOT NULL, greenContextId INTEGER, streamId INTEGER NOT NULL, "
        "correlationId INTEGER, globalPid INTEGER, deprecatedSyncType INTEGER, "
        "syncType INTEGER NOT NULL, eventId INTEGER NOT NULL, eventSyncId INTEGER"
    ),
    "CUPTI_ACTIVITY_KIND_CUDA_EVENT": (
        "timestamp INTEGER, deviceId INTEGER NOT NULL, contextId INTEGER NOT NULL, "
        "greenContextId INTEGER, streamId INTEGER NOT NULL, correlationId INTEGER, "
        "globalPid INTEGER, eventId INTEGER NOT NULL, eventSyncId INTEGER"
    ),
}

#: CUPTI synchronization types (ENUM_CUPTI_SYNC_TYPE).
SYNC_EVENT, SYNC_STREAM_WAIT, SYNC_STREAM, SYNC_CONTEXT = 1, 2, 3, 4
#: CUPTI's "no stream" / "no event" (uint32 -1).
NO_ID = 0xFFFFFFFF

#: NVTX event types (ENUM_NSYS_EVENT_TYPE): mark, push/pop range, start/end range, domain create.
NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN = 34, 59, 60, 75


def global_pid(pid: int, hw: int = 1) -> int:
    return (hw << 48) | (pid << 24)


def global_tid(pid: int, tid: int, hw: int = 1) -> int:
    return global_pid(pid, hw) | tid


@dataclass
class NsysExport:
    """Rows of a small export; :meth:`write` turns them into an SQLite file.

    ``session_start_utc_ns``: when set, TARGET_INFO_SESSION_START_TIME says the capture started at
    that unix time, at export timestamp ``system_clock_ns``.
    """

    schema_version: str = "3.25.0"
    session_start_utc_ns: int | None = None
    system_clock_ns: int = 0
    rows: dict[str, list[tuple[object, ...]]] = field(default_factory=dict)
    _strings: dict[str, int] = field(default_factory=dict)
    _corr: dict[int, int] = field(default_factory=dict)

    def _add(self, table: str, row: tuple[object, ...]) -> None:
        self.rows.setdefault(table, []).append(row)

    def string(self, value: str) -> int:
        """Id of ``value`` in StringIds (registered once)."""
        if value not in self._strings:
            self._strings[value] = len(self._strings) + 1
        return self._strings[value]

    def process(self, pid: int, name: str = "python3") -> None:
        self._add("PROCESSES", (global_pid(pid), pid, name))

    def thread(self, pid: int, tid: int, name: str) -> None:
        self._add("ThreadNames", (self.string(name), 20, global_tid(pid, tid)))

    def gpu(self, gpu_id: int, name: str) -> None:
        """A GPU of the machine (TARGET_INFO_GPU)."""
        self._add("TARGET_INFO_GPU", (gpu_id, name, f"0000:{gpu_id:02x}:00.0", 80 << 30))

    def cuda_device(self, pid: int, cuda_id: int, gpu_id: int) -> None:
        """Process ``pid`` sees GPU ``gpu_id`` as CUDA device ``cuda_id`` (TARGET_INFO_CUDA_DEVICE)."""
        self._add("TARGET_INFO_CUDA_DEVICE", (gpu_id, cuda_id, pid, f"GPU-{gpu_id}", 132))

    def next_correlation(self, pid: int) -> int:
        self._corr[pid] = self._corr.get(pid, 100) + 1
        return self._corr[pid]

    def runtime(
        self,
        pid: int,
        start: int,
        end: int,
        name: str = "cudaLaunchKernel_v7000",
        correlation: int | None = None,
        tid: int | None = None,
        event_class: int = 0,
    ) -> None:
        """A CUDA API call (eventClass 0 runtime, 1 driver) on thread ``tid`` (default: main)."""
        self._add(
            "CUPTI_ACTIVITY_KIND_RUNTIME",
            (
                start,
                end,
                event_class,
                global_tid(pid, pid if tid is None else tid),
                correlation,
                self.string(name),
                0,
            ),
        )

    def _launch(
        self, pid: int, launch: int | None, api: str, event_class: int, tid: int | None
    ) -> int:
        corr = self.next_correlation(pid)
        if launch is not None:
            self.runtime(pid, launch, launch + 2_000, api, corr, tid, event_class)
        return corr

    def kernel(
        self,
        pid: int,
        device: int,
        stream: int,
        start: int,
        end: int,
        name: str,
        launch: int | None = None,
        api: str = "cudaLaunchKernel_v7000",
        event_class: int = 0,
        tid: int | None = None,
        demangled: str | None = None,
        grid: tuple[int, int, int] = (1, 1, 1),
        block: tuple[int, int, int] = (1, 1, 1),
    ) -> int:
        """A kernel; ``launch``: host time of its launch call (None: no launch row); ``grid`` /
        ``block``: its launch shape. -> correlation."""
        corr = self._launch(pid, launch, api, event_class, tid)
        self._add(
            "CUPTI_ACTIVITY_KIND_KERNEL",
            (
                start,
                end,
                device,
                1,
                stream,
                corr,
                global_pid(pid),
                self.string(demangled or f"{name}(float*, int)"),
                self.string(name),
                None,
                *grid,
                *block,
            ),
        )
        return corr

    def memcpy(
        self,
        pid: int,
        device: int,
        stream: int,
        start: int,
        end: int,
        launch: int | None = None,
        copy_kind: int = 1,
        nbytes: int = 4096,
    ) -> int:
        corr = self._launch(pid, launch, "cudaMemcpyAsync_v3020", 0, None)
        self._add(
            "CUPTI_ACTIVITY_KIND_MEMCPY",
            (start, end, device, 1, stream, corr, global_pid(pid), nbytes, copy_kind),
        )
        return corr

    def memset(
        self, pid: int, device: int, stream: int, start: int, end: int, launch: int | None = None
    ) -> int:
        corr = self._launch(pid, launch, "cudaMemsetAsync_v3020", 0, None)
        self._add(
            "CUPTI_ACTIVITY_KIND_MEMSET",
            (start, end, device, 1, stream, corr, global_pid(pid), 0, 4096),
        )
        return corr

    def sync(
        self,
        pid: int,
        stream: int,
        start: int,
        end: int,
        sync_type: int,
        correlation: int,
        event: int = NO_ID,
        event_sync: int | None = None,
        device: int = 0,
    ) -> None:
        """A synchronization record (``CUPTI_ACTIVITY_KIND_SYNCHRONIZATION``) of the API call
        ``correlation``; ``device`` 0 by default, as the real FSDP export records every one."""
        self._add(
            "CUPTI_ACTIVITY_KIND_SYNCHRONIZATION",
            (
                start,
                end,
                device,
                1,
                None,
                stream,
                correlation,
                global_pid(pid),
                None,
                sync_type,
                event,
                event_sync,
            ),
        )

    def cuda_event(
        self,
        pid: int,
        device: int,
        stream: int,
        correlation: int,
        event: int,
        event_sync: int | None = None,
    ) -> None:
        """An event record (``CUPTI_ACTIVITY_KIND_CUDA_EVENT``) of the cudaEventRecord call
        ``correlation`` on ``stream``."""
        self._add(
            "CUPTI_ACTIVITY_KIND_CUDA_EVENT",
            (0, device, 1, None, stream, correlation, global_pid(pid), event, event_sync),
        )

    def nvtx(
        self,
        pid: int,
        start: int,
        end: int | None,
        text: str,
        registered: bool = True,
        tid: int | None = None,
        event_type: int = NVTX_PUSH_POP,
        domain: int = 0,
    ) -> None:
        """An NVTX range (or mark, with ``end=None``); registered strings go through textId."""
        gtid = global_tid(pid, pid if tid is None else tid)
        self._add(
            "NVTX_EVENTS",
            (
                start,
                end,
                event_type,
                None,
                None,
                None,
                None if registered else text,
                gtid,
                gtid if event_type == NVTX_START_END else None,
                self.string(text) if registered else None,
                domain,
            ),
        )

    def write(self, path: str | Path, omit: Iterable[str] = ()) -> Path:
        """Write the export to ``path`` (replacing it); tables in ``omit`` are left out."""
        p = Path(path)
        if p.exists():
            p.unlink()
        skip = set(omit)
        meta = [
            ("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"),
            ("EXPORT_SCHEMA_VERSION", self.schema_version),
        ]
        con = sqlite3.connect(p)
        try:
            for table, cols in _SCHEMA.items():
                if table in skip:
                    continue
                con.execute(f"CREATE TABLE {table} ({cols})")
            for table, cols in _OPTIONAL_SCHEMA.items():
                if table in self.rows and table not in skip:
                    con.execute(f"CREATE TABLE {table} ({cols})")
            fixed: dict[str, list[tuple[object, ...]]] = {
                "StringIds": [(i, s) for s, i in self._strings.items()],
                "META_DATA_EXPORT": meta,
            }
            if self.session_start_utc_ns is not None:
                fixed["TARGET_INFO_SESSION_START_TIME"] = [
                    (self.session_start_utc_ns, "", "", self.system_clock_ns)
                ]
                fixed["ANALYSIS_DETAILS"] = [(1 << 48, 10**12, self.system_clock_ns, 10**12)]
            for table, rows in {**self.rows, **fixed}.items():
                if table in skip or not rows:
                    continue
                marks = ",".join("?" for _ in rows[0])
                con.executemany(f"INSERT INTO {table} VALUES ({marks})", rows)
            con.commit()
        finally:
            con.close()
        return p


def write_synthetic(
    path: str | Path,
    kernels: int,
    processes: int = 2,
    kernels_per_step: int = 1000,
    op_ranges: bool = True,
) -> Path:
    """A large export shaped like a real training capture, generated inside SQLite (seconds for
    millions of rows): for benchmarks and scale tests.

    Per process (pid 1000 + p, one GPU each, ``kernels // processes`` kernels): every kernel
    launched by a runtime row 20 µs earlier on the main thread (every 10th kernel an NCCL
    all-reduce on stream 20 launched with the driver API, the rest compute on stream 7, 5 µs
    apart); a ``ProfilerStep#s`` NVTX range per ``kernels_per_step`` launches, a memcpy per 100
    kernels; with ``op_ranges`` one NVTX push/pop range per launch with a unique plain-text
    message, as PyTorch's ``emit_nvtx`` writes them (``aten::op7, seq = 12, op_id = 12``).
    """
    p = Path(path)
    if p.exists():
        p.unlink()
    per = kernels // processes
    con = sqlite3.connect(p)
    try:
        con.execute("PRAGMA journal_mode = OFF")
        con.execute("PRAGMA synchronous = OFF")
        for table, cols in _SCHEMA.items():
            con.execute(f"CREATE TABLE {table} ({cols})")
        names = [f"kernel_{i}" for i in range(300)]
        strings = [
            *names,
            "ncclDevKernel_AllReduce_Sum_f32_RING_LL",
            "cudaLaunchKernel_v7000",
            "cuLaunchKernelEx",
            "python3",
        ]
        con.executemany("INSERT INTO StringIds VALUES (?, ?)", list(enumerate(strings, 1)))
        nccl, launch, launch_ex, thread = 301, 302, 303, 304
        con.executemany(
            "INSERT INTO META_DATA_EXPORT VALUES (?, ?)",
            [("EXPORT_PRODUCT_NAME", "NVIDIA Nsight Systems"), ("EXPORT_SCHEMA_VERSION", "3.25.0")],
        )
        con.execute(
            "INSERT INTO TARGET_INFO_SESSION_START_TIME VALUES (1700000000000000000, '', '', 0)"
        )
        series = (
            f"WITH RECURSIVE r(i) AS (SELECT 0 UNION ALL SELECT i + 1 FROM r WHERE i < {per} - 1)"
        )
        for proc in range(processes):
            pid = 1000 + proc
            gpid, gtid = global_pid(pid), global_tid(pid, pid)
            con.execute("INSERT INTO PROCESSES VALUES (?, ?, 'python3')", (gpid, pid))
            con.execute("INSERT INTO ThreadNames VALUES (?, 20, ?)", (thread, gtid))
            # kernel i: start 1 ms + 5 µs i, 3-3.6 µs long; its launch 20 µs earlier
            k0 = "(1000000 + 5000 * i)"
            con.execute(
                f"INSERT INTO CUPTI_ACTIVITY_KIND_KERNEL {series} SELECT {k0}, "
                f"{k0} + 3000 + 100 * (i % 7), {proc}, 1, CASE WHEN i % 10 = 9 THEN 20 ELSE 7 END, "
                f"101 + i, {gpid}, CASE WHEN i % 10 = 9 THEN {nccl} ELSE 1 + i % 300 END, "
                f"CASE WHEN i % 10 = 9 THEN {nccl} ELSE 1 + i % 300 END, NULL, 1, 1, 1, 1, 1, 1 FROM r"
            )
            con.execute(
                f"INSERT INTO CUPTI_ACTIVITY_KIND_RUNTIME {series} SELECT {k0} - 20000, "
                f"{k0} - 18000, CASE WHEN i % 10 = 9 THEN 1 ELSE 0 END, {gtid}, 101 + i, "
                f"CASE WHEN i % 10 = 9 THEN {launch_ex} ELSE {launch} END, 0 FROM r"
            )
            con.execute(
                f"INSERT INTO CUPTI_ACTIVITY_KIND_MEMCPY {series} SELECT {k0} + 4000, "
                f"{k0} + 4500, {proc}, 1, 9, -1, {gpid}, 4096, 1 FROM r WHERE i % 100 = 50"
            )
            s = kernels_per_step
            con.execute(
                f"INSERT INTO NVTX_EVENTS {series} SELECT {k0} - 21000, "
                f"1000000 + 5000 * (i + {s}) - 21000, {NVTX_PUSH_POP}, NULL, NULL, NULL, "
                f"'ProfilerStep#' || (i / {s}), {gtid}, NULL, NULL, 0 FROM r WHERE i % {s} = 0"
            )
            if op_ranges:
                con.execute(
                    f"INSERT INTO NVTX_EVENTS {series} SELECT {k0} - 20500, {k0} - 17500, "
                    f"{NVTX_PUSH_POP}, NULL, NULL, NULL, "
                    f"printf('aten::op%d, seq = %d, op_id = %d', i % 50, i, i), {gtid}, NULL, "
                    "NULL, 0 FROM r"
                )
        con.commit()
    finally:
        con.close()
    return p


def fake_nsys_export(tmp_path: Path, prepared: Path) -> Path:
    """A folder holding a stand-in `nsys` that "exports" by copying ``prepared`` to its
    ``--output=`` and logs each call's arguments to ``tmp_path / "calls.txt"``. Put the folder
    first on PATH."""
    bindir = tmp_path / "bin"
    bindir.mkdir()
    calls = tmp_path / "calls.txt"
    script = bindir / "nsys"
    script.write_text(
        "#!/bin/sh\n"
        f'echo "$@" >> "{calls}"\n'
        'for a in "$@"; do case "$a" in --output=*) out="${a#--output=}";; esac; done\n'
        f'cp "{prepared}" "$out"\n'
    )
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return bindir


def damage_free_list(path: Path) -> None:
    """Damage ``path`` the way only ``PRAGMA quick_check`` sees: free-list pages (a table
    filled, then emptied) and a header free-list count (bytes 36-39) 3 more than there are."""
    con = sqlite3.connect(path)
    con.execute("CREATE TABLE junk(x)")
    con.executemany("INSERT INTO junk VALUES (?)", [("a" * 500,)] * 50)
    con.commit()
    con.execute("DELETE FROM junk")  # pages go to the free list
    con.commit()
    con.close()
    raw = bytearray(path.read_bytes())
    raw[36:40] = (int.from_bytes(raw[36:40], "big") + 3).to_bytes(4, "big")
    path.write_bytes(raw)


def page_read(path: Path, keep: object, table: str = "t") -> tuple[object, object]:
    """(reader, columns): ``table``'s integer column ``a`` and text column ``s`` read off the
    pages by ``_pages.PageReader`` (range filter ``keep``), in a read transaction of its own, as
    the reader opens an export; the file's memo forgotten first."""
    from traceoverlap.readers.nsys import _memo, _pages

    _memo.forget()
    con = sqlite3.connect(f"file:{path}?mode=ro", uri=True, isolation_level=None)
    try:
        con.execute("BEGIN")
        info = con.execute(f"PRAGMA table_xinfo({table})").fetchall()
        reader = _pages.PageReader(con, path)
        reader.text_keep = keep  # type: ignore[assignment]
        return reader, reader.read(table, info, ["a"], ["s"], None)
    finally:
        con.close()
