"""Small tables: string ids, schema version, clock, thread, process and GPU names."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from ._columns import INT
from ._schema import Schema, int_or_none, quote
from ._strings import StringIds

I64 = npt.NDArray[np.int64]
Obj = npt.NDArray[np.object_]

#: A text column's NULL, compared with every value at once.
_NULL = np.array(None, dtype=object)


class Metadata(Schema):
    def read_string_ids(self, table: str) -> StringIds:
        if not self.has(table, "id", "value"):
            self.notes.append(f"Table {table} lacks id/value columns: names were not resolved.")
            return StringIds(np.zeros(0, dtype=np.int64), np.zeros(0, dtype=object))
        cols = self.scan(table, ["id"], ["value"])
        ok = cols.kinds["id"] == INT
        values = cols.texts["value"]
        if not ok.all():
            self.notes.append(
                f"{int(np.count_nonzero(~ok))} {table} rows have no integer id and were ignored."
            )
        values = values[ok]
        values[np.equal(values, _NULL)] = ""  # NULL (the decoders give str or None)
        if cols.bad_utf8:
            self.notes.append(
                f"{cols.bad_utf8} {table} strings are not valid UTF-8: shown with replacement "
                "characters."
            )
        return StringIds(cols.ints["id"][ok], values)

    def format_version(self) -> str | None:
        # META_DATA_EXPORT since schema 3.x of 2023; EXPORT_META_DATA in 2022.4 (schema 3.0)
        for name in ("META_DATA_EXPORT", "EXPORT_META_DATA"):
            meta = self.table(name)
            if meta is not None and self.has(meta, "name", "value"):
                row = self.rows(
                    f"SELECT value FROM {quote(meta)} WHERE name = 'EXPORT_SCHEMA_VERSION' LIMIT 1"
                )
                if row and row[0][0] is not None:
                    return str(row[0][0])
                return None
        self.notes.append("The export has no META_DATA_EXPORT table: schema version unknown.")
        return None

    def hostname(self) -> str | None:
        """The machine the capture ran on (``TARGET_INFO_SYSTEM_ENV``'s ``Hostname``), when the
        export says: ranks of one export on one host share its CPU cores (docs/whatif.md)."""
        env = self.table("TARGET_INFO_SYSTEM_ENV")
        if env is None or not self.has(env, "name", "value"):
            return None
        row = self.rows(f"SELECT value FROM {quote(env)} WHERE name = 'Hostname' LIMIT 1")
        value = row[0][0] if row else None
        return value if isinstance(value, str) and value else None

    def clock_offset(self) -> tuple[int, str]:
        """Nanoseconds to add to export timestamps to get unix-epoch time, and the clock name.

        ``utcEpochNs`` is the UTC time at the session start. Since schema 3.x of 2023 the export
        also has ``systemClockNs``, its own timestamp of that instant (timestamps are on the
        system clock): ``unix = t - systemClockNs + utcEpochNs``. Without it (2022.4) timestamps
        count from the session start: ``unix = t + utcEpochNs``.
        """
        sess = self.table("TARGET_INFO_SESSION_START_TIME")
        utc: int | None = None
        base = 0
        if sess is not None and self.has(sess, "utcEpochNs"):
            has_sys = self.has(sess, "systemClockNs")
            sel = "utcEpochNs, " + ("systemClockNs" if has_sys else "NULL")
            found = self.rows(f"SELECT {sel} FROM {quote(sess)} LIMIT 1")
            if found:
                utc = int_or_none(found[0][0])
                sysclk = int_or_none(found[0][1])
                if found[0][0] is not None and utc is None:
                    self.notes.append(
                        f"{sess}.utcEpochNs is not an integer ({found[0][0]!r}): times are "
                        "relative to the capture."
                    )
                if has_sys and found[0][1] is not None and sysclk is None:
                    self.notes.append(
                        f"{sess}.systemClockNs is not an integer ({found[0][1]!r}): times are "
                        "relative to the capture."
                    )
                    utc = None
                base = sysclk or 0
        if utc is not None and utc <= 0:
            # an export of a session whose start was not recorded writes 0: not 1 January 1970
            self.notes.append(
                f"{sess}.utcEpochNs is {utc}, not a real start time: times are relative to the "
                "capture."
            )
            return 0, "relative"
        if utc is None:
            self.notes.append(
                "The export does not record when the capture started "
                "(TARGET_INFO_SESSION_START_TIME): times are relative to the capture."
            )
            return 0, "relative"
        return utc - base, "unix"

    def thread_name_table(self, gtids: I64) -> Obj:
        """Name of each thread in ``gtids`` (globalTid values), ``""`` when unnamed."""
        out = np.empty(gtids.size, dtype=object)
        out[:] = ""
        if gtids.size == 0:
            return out
        if self._thread_names is None:
            gt: list[int] = []
            ids: list[int] = []
            t = self.table("ThreadNames")
            if t is not None and self.has(t, "nameId", "globalTid"):
                unnamed = 0
                for g, i in self.rows(f"SELECT globalTid, nameId FROM {quote(t)}"):
                    if int_or_none(g) is None or int_or_none(i) is None:
                        unnamed += 1
                        continue
                    gt.append(g)
                    ids.append(i)
                if unnamed:
                    self.notes.append(
                        f"{unnamed} {t} rows have no integer thread id or name id: those threads "
                        "are shown unnamed."
                    )
            g_arr = np.array(gt, dtype=np.int64)
            i_arr = np.array(ids, dtype=np.int64)
            # a thread renamed later has several rows: the last one recorded wins
            order = np.argsort(g_arr, kind="stable")
            g_arr, i_arr = g_arr[order], i_arr[order]
            last = np.r_[g_arr[1:] != g_arr[:-1], True] if g_arr.size else np.zeros(0, dtype=bool)
            self._thread_names = (g_arr[last], i_arr[last])
        g_sorted, name_id = self._thread_names
        if g_sorted.size == 0:
            return out
        pos = np.minimum(np.searchsorted(g_sorted, gtids), g_sorted.size - 1)
        hit = g_sorted[pos] == gtids
        out[hit] = self.strings.lookup(name_id[pos[hit]])
        return out

    def process_names(self) -> dict[int, str]:
        t = self.table("PROCESSES")
        if t is None or not self.has(t, "pid", "name"):
            return {}
        out = {}
        for p, n in self.rows(f"SELECT pid, name FROM {quote(t)}"):
            if int_or_none(p) is not None and n is not None:
                out[int(p)] = str(n)
        return out

    def gpu_names(self) -> dict[tuple[int, int], str]:
        """(pid, CUDA device ordinal) -> GPU name, when the export describes its GPUs.

        ``TARGET_INFO_CUDA_DEVICE`` maps each process's CUDA ordinal (``cudaId``, what kernels
        carry as ``deviceId``) to a GPU (``gpuId``): under ``CUDA_VISIBLE_DEVICES`` two processes'
        device 0 can be different GPUs. ``TARGET_INFO_GPU`` names the GPUs (``id``, ``name``).
        """
        gpu = self.table("TARGET_INFO_GPU")
        if gpu is None or not self.has(gpu, "id", "name"):
            return {}
        names = {
            int(i): str(n)
            for i, n in self.rows(f"SELECT id, name FROM {quote(gpu)}")
            if int_or_none(i) is not None and n
        }
        out: dict[tuple[int, int], str] = {}
        cuda = self.table("TARGET_INFO_CUDA_DEVICE")
        if cuda is not None and self.has(cuda, "gpuId", "cudaId", "pid"):
            for pid, cuda_id, gpu_id in self.rows(f"SELECT pid, cudaId, gpuId FROM {quote(cuda)}"):
                if (
                    None not in (int_or_none(pid), int_or_none(cuda_id), int_or_none(gpu_id))
                    and gpu_id in names
                ):
                    out[(int(pid), int(cuda_id))] = names[int(gpu_id)]
        if not out and len(set(names.values())) == 1:
            # one GPU model in the machine: every device is that model
            only = next(iter(names.values()))
            out = {(-1, -1): only}
        return out
