"""Which rank each process (and GPU) is, and the TraceInfo of each rank."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ...core.model import TraceInfo
from .._bytes import rank_from_filename
from ._metadata import Metadata
from ._rows import NvtxRows, Rows
from ._schema import int_or_none, quote


class Ranks(Metadata):
    def assign_ranks(
        self, gpu: Rows, nvtx: NvtxRows
    ) -> tuple[list[tuple[int, int]], list[int], str, int | None]:
        """(pid, device) groups ordered by device then pid, their ranks, and where ranks came from."""
        keys = np.unique((gpu.device.astype(np.int64) << 32) | gpu.pid).tolist()
        groups = [(k & 0xFFFFFFFF, k >> 32) for k in keys]
        return self._ranks(groups, nvtx)

    def assign_cpu_ranks(
        self, nvtx: NvtxRows
    ) -> tuple[list[tuple[int, int]], list[int], str, int | None]:
        """One group per process that recorded NVTX ranges, ordered by pid (device -1)."""
        pids = np.unique(nvtx.ranges.pid).tolist()
        return self._ranks([(p, -1) for p in pids], nvtx)

    def _ranks(
        self, groups: list[tuple[int, int]], nvtx: NvtxRows | Callable[[], NvtxRows]
    ) -> tuple[list[tuple[int, int]], list[int], str, int | None]:
        """``nvtx``: the rows whose ``rank N`` texts may say the ranks, or what reads them (only
        when the launch environment does not say them)."""
        pids = sorted({p for p, _ in groups})
        one_group_each = len(pids) == len(groups)
        env_ranks, world = self.ranks_from_environment(pids)
        if one_group_each and env_ranks is not None:
            return groups, [env_ranks[p] for p, _ in groups], "environment", world
        nvtx_ranks = None
        if one_group_each:
            nvtx_ranks = self.ranks_from_nvtx(pids, nvtx() if callable(nvtx) else nvtx)
        if nvtx_ranks is not None:
            return groups, [nvtx_ranks[p] for p, _ in groups], "nvtx", None
        named = rank_from_filename(self.path)
        if named is not None and len(groups) == 1:
            # one export per rank, named after it (rank3.sqlite): common with torchrun + nsys
            return groups, [named], "filename", None
        return groups, list(range(len(groups))), "process-order", None

    def ranks_from_environment(self, pids: list[int]) -> tuple[dict[int, int] | None, int | None]:
        """Rank per process from the launch environment, when the export has it: ``MPI_RANKS``
        (globalTid -> MPI rank, written when nsys traces MPI), else a ``RANK`` variable in an
        environment table keyed by process."""
        mpi = self.ranks_from_mpi(pids)
        if mpi is not None:
            return mpi, None
        for t in self.tables:
            if "ENV" not in t.upper():
                continue
            cols = self.columns(t)
            key = next((c for c in ("pid", "globalPid", "processId") if c in cols), None)
            if key is None or not {"name", "value"} <= set(cols):
                continue
            found, world = self.ranks_from_env_table(t, key)
            if all(p in found for p in pids) and len({found[p] for p in pids}) == len(pids):
                return {p: found[p] for p in pids}, world
        return None, None

    def ranks_from_mpi(self, pids: list[int]) -> dict[int, int] | None:
        mpi = self.table("MPI_RANKS")
        if mpi is None or not self.has(mpi, "globalTid", "rank"):
            return None
        by_pid: dict[int, set[int]] = {}
        for g, rank in self.rows(f"SELECT DISTINCT globalTid, rank FROM {quote(mpi)}"):
            if int_or_none(g) is not None and int_or_none(rank) is not None:
                by_pid.setdefault((int(g) >> 24) & 0xFFFFFF, set()).add(int(rank))
        one = {p: next(iter(r)) for p, r in by_pid.items() if len(r) == 1}
        if all(p in one for p in pids) and len({one[p] for p in pids}) == len(pids):
            return {p: one[p] for p in pids}
        return None

    def ranks_from_env_table(self, table: str, key: str) -> tuple[dict[int, int], int | None]:
        """pid -> RANK (processes with one value), and the one WORLD_SIZE when there is one."""
        found_rows = self.rows(
            f"SELECT {quote(key)}, name, value FROM {quote(table)} WHERE name IN ('RANK', 'WORLD_SIZE')"
        )
        ranks: dict[int, set[int]] = {}
        worlds: set[int] = set()
        for k, name, value in found_rows:
            k_int = int_or_none(k)
            try:
                v = int(str(value).strip())
            except (TypeError, ValueError):
                continue
            if k_int is None:
                continue
            pid = k_int if key != "globalPid" else (k_int >> 24) & 0xFFFFFF
            if name == "RANK":
                ranks.setdefault(pid, set()).add(v)
            else:
                worlds.add(v)
        found = {p: next(iter(r)) for p, r in ranks.items() if len(r) == 1}
        return found, (worlds.pop() if len(worlds) == 1 else None)

    @staticmethod
    def ranks_from_nvtx(pids: list[int], nvtx: NvtxRows) -> dict[int, int] | None:
        """One ``rank N`` NVTX text (mark or range) per process, when the program emitted one."""
        ranks: dict[int, set[int]] = {}
        for p, r in set(zip(nvtx.rank_pid.tolist(), nvtx.rank_value.tolist(), strict=True)):
            ranks.setdefault(p, set()).add(r)
        found = {p: next(iter(r)) for p, r in ranks.items() if len(r) == 1}
        if all(p in found for p in pids) and len({found[p] for p in pids}) == len(pids):
            return {p: found[p] for p in pids}
        return None

    # -- per-rank descriptions --------------------------------------------------------------

    def trace_infos(
        self,
        groups: list[tuple[int, int]],
        ranks: list[int],
        rank_source: str,
        world_size: int | None,
        version: str | None,
        clock: str,
        device_kind: str,
    ) -> tuple[TraceInfo, ...]:
        gpu_names = self.gpu_names() if device_kind == "gpu" else {}
        procs = self.process_names()
        host = self.hostname()
        infos = []
        for (pid, device), rank in zip(groups, ranks, strict=True):
            notes = list(dict.fromkeys(self.notes))
            proc = f"process {pid}" + (f" ({procs[pid]})" if pid in procs else "")
            if rank_source == "filename":
                notes.append(
                    f"The rank ({rank}) was taken from the file name: the export does not record it."
                )
            if rank_source == "process-order":
                where = f"on GPU {device}" if device_kind == "gpu" else "with NVTX ranges"
                order = "GPU, then pid" if device_kind == "gpu" else "pid"
                notes.append(
                    f"{proc[0].upper()}{proc[1:]} {where} was numbered rank {rank}: the export "
                    f"does not record ranks, so processes are numbered by {order}."
                )
            name = gpu_names.get((pid, device), gpu_names.get((-1, -1)))
            infos.append(
                TraceInfo(
                    path=str(self.path),
                    format="nsys",
                    rank=rank,
                    world_size=world_size,
                    rank_source=rank_source,
                    device_kind=device_kind,
                    devices=(name,) if name else (),
                    format_version=version,
                    clock=clock,
                    pid=pid,
                    device=device if device_kind == "gpu" else None,
                    notes=tuple(notes),
                    host=host,
                    host_comm_seen=False,  # gloo's work is invisible to nsys (see the package)
                    pytorch_capture=False,  # any program: PyTorch only by its names
                    ranges_filtered=self.keep_range is not None,
                    multiprocess_capture=True,
                )
            )
        return tuple(sorted(infos, key=lambda t: t.rank))
