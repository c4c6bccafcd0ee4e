"""The merged run on one clock, as Trace Event Format JSON that ui.perfetto.dev opens.

``traceoverlap export PATH -o run.json``: one process per rank (``pid`` = rank), its host
threads and GPU streams as tracks, every activity a complete event (``"X"``), and analysis
tracks on top of each rank:

- ``steps``: the step windows the analysis used;
- ``exposed communication``: the exposed spans of every step by cause (wait / tail /
  dependency / host, docs/diagnosis.md §3), one slice name per cause;
- ``collectives``: each collective instance on this rank (matched across ranks or not), named
  ``<collective> #<instance>`` with its group, sequence number and last arrival;
- ``waits``: the wait part of each matched instance (``[start, start + wait_ns)``), with a flow
  arrow (``"s"`` -> ``"f"``) to the instance on the rank that arrived last.

Times: each rank's clock offset (:attr:`Collectives.offsets_ns`, estimated from collective end
times, docs/diagnosis.md §5) is removed, so one instant is one ``ts`` on every rank; ``ts`` and
``dur`` are microseconds (Trace Event Format) since ``otherData.ts_origin_ns`` (the run's clock,
unix ns on unix clocks: :func:`ts_origin`), with ns kept in the fraction.

Written with msgspec's encoder, one rank file at a time and in chunks of
:data:`CHUNK_EVENTS` events: the whole run is never one list in memory (peak: one rank file's
events, as for the analysis). Not a reporter: it reads the traces again (the analysis keeps no
events), so it lives beside :mod:`traceoverlap.run.analysis`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

import msgspec
import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core.errors import UsageError
from ..core.model import Timeline, split_units
from ..core.rules import Rules
from ..core.schema import (
    BOTTLENECK,
    EXPOSED_COMM_NS,
    EXPOSED_NS,
    REASON,
    STEP_NS,
    WAIT_NS,
    WAITED_FOR_RANK,
)
from ..core.vocab import KINDS, Cause
from ..rank.classify import kinds
from ..run.results import Analysis
from .json_report import _escape_c1

if TYPE_CHECKING:
    from ..run.matching import Collectives

I64 = npt.NDArray[np.int64]

#: Seconds before the first step start that ``ts`` 0 lies (see :func:`ts_origin`).
ORIGIN_MARGIN_S = 100
#: Events encoded per chunk (bounds the Python objects alive at once).
CHUNK_EVENTS = 50_000
#: Analysis tracks of every rank, top to bottom, and their track ids (``tid``).
ANALYSIS_TRACKS = ("steps", "exposed communication", "collectives", "waits")
_TID = {"steps": 1, "exposed communication": 2, "collectives": 10, "waits": 30}
#: A rank's collectives (and their waits) that overlap in time go to further tracks
#: (``collectives (2)``...): the slices of one track must nest. At most this many.
SUB_TRACKS = 20
#: Activity tracks start here (analysis tracks sort above them).
FIRST_LANE_TID = 10_000
#: Track ids of the analysis tracks of the k-th unit of a rank (a process that drove several
#: GPUs is one unit per GPU) start at k times this.
TRACK_BLOCK = 50
#: Slice names of the exposed spans per cause.
CAUSE_SLICE = {
    Cause.WAIT: "exposed: waiting for another rank",
    Cause.TAIL: "exposed: tail (nothing left to overlap)",
    Cause.DEPENDENCY: "exposed: dependency (compute waits for it)",
    Cause.HOST: "exposed: host (GPU idle, launch late)",
}
#: Chrome trace colour names per cause (honoured by chrome://tracing; Perfetto colours by name).
CAUSE_COLOUR = {
    Cause.WAIT: "terrible",
    Cause.TAIL: "bad",
    Cause.DEPENDENCY: "yellow",
    Cause.HOST: "grey",
}


class _X(msgspec.Struct, omit_defaults=True):
    name: str
    cat: str
    ph: str
    ts: float
    dur: float
    pid: int
    tid: int
    args: dict[str, Any] | None = None
    cname: str | None = None


class _Flow(msgspec.Struct, omit_defaults=True):
    name: str
    cat: str
    ph: str
    id: int
    ts: float
    pid: int
    tid: int
    bp: str | None = None


class _Meta(msgspec.Struct):
    name: str
    ph: str
    pid: int
    tid: int
    args: dict[str, Any]


@dataclass
class ExportStats:
    """What was written: events per rank (``pid``), flows, and the offsets applied per rank."""

    events: dict[int, int] = field(default_factory=dict)
    flows: int = 0
    offsets_ns: dict[int, int] = field(default_factory=dict)


def us(ns: npt.ArrayLike) -> npt.NDArray[np.float64]:
    """Integer ns (relative to :func:`ts_origin`) -> float µs."""
    return np.asarray(ns, dtype=np.int64).astype(np.float64) / 1000.0


def ts_origin(analysis: Analysis) -> int:
    """The aligned ns written as ``ts`` 0: the earliest step start, in whole seconds, less
    :data:`ORIGIN_MARGIN_S` (events of the capture before the first step stay positive).

    ``ts`` is a float of µs: on unix-epoch times (1.8e15 µs) a float's step is 0.25 µs, so the
    times are written relative to this origin (float steps far below 1 ns)."""
    win = analysis.windows
    coll = analysis.collectives
    clock = coll.offsets_ns if coll is not None and coll.offsets_ns else ()
    if win is None or win.empty:
        return 0
    unit = win["unit"].to_numpy(np.int64)
    off = np.array([int(clock[u]) if u < len(clock) else 0 for u in unit.tolist()], np.int64)
    first = int((win["start_ns"].to_numpy(np.int64) - off).min())
    return (first // 1_000_000_000 - ORIGIN_MARGIN_S) * 1_000_000_000


class _Writer:
    """``{"traceEvents": [`` ... ``]}``, chunks of encoded events comma-joined in between.
    Strings escaped as in ``analyze``'s JSON: msgspec escapes C0, DEL and C1 are escaped here
    (the trace may go to a terminal: ``-o -``)."""

    def __init__(self, out: IO[bytes]) -> None:
        self.out = out
        self.enc = msgspec.json.Encoder()
        self.buf = bytearray()
        self.first = True
        out.write(b'{"traceEvents":[\n')

    def write(self, events: Sequence[msgspec.Struct]) -> int:
        for i in range(0, len(events), CHUNK_EVENTS):
            chunk = events[i : i + CHUNK_EVENTS]
            self.enc.encode_into(chunk, self.buf)
            if not self.first:
                self.out.write(b",\n")
            body: bytes | memoryview = memoryview(self.buf)[1:-1]  # the list's [ ] dropped
            if b"\x7f" in self.buf or b"\xc2" in self.buf:  # a name may hold DEL or C1
                body = _escape_c1(bytes(body))
            self.out.write(body)
            self.first = False
        return len(events)

    def close(self, other: dict[str, Any]) -> None:
        self.out.write(b'\n],"otherData":')
        self.out.write(_escape_c1(self.enc.encode(other)))
        self.out.write(b"}\n")


def write_trace(
    analysis: Analysis,
    out: IO[bytes],
    rules: Rules | None = None,
    source: Timeline | None = None,
) -> ExportStats:
    """Write ``analysis``' run to ``out``, reading its rank files again, one at a time
    (``source``: the Timeline the analysis was made from, when it was made from one)."""
    rules = (rules or Rules()).with_comm_patterns(analysis.options.comm_patterns)
    coll = analysis.collectives
    clock = coll.offsets_ns if coll is not None and coll.offsets_ns else ()
    origin = ts_origin(analysis)
    # what is taken off each unit's times: its clock offset, then the run's ts origin
    offsets = [
        origin + (int(clock[i]) if i < len(clock) else 0) for i in range(len(analysis.traces))
    ]
    stats = ExportStats()
    slot = _slots(analysis)
    rows = _instance_rows(analysis, slot)
    w = _Writer(out)
    unit_of = {(t.path, t.pid, t.device): i for i, t in enumerate(analysis.traces)}
    done_host: set[tuple[str, int | None]] = set()
    for timeline in _timelines(analysis, source):
        for unit in split_units(timeline):
            t = unit.traces[0]
            i = unit_of.get((t.path, t.pid, t.device))
            if i is None:  # a rank left out (--rank)
                continue
            off = offsets[i]
            rank = analysis.traces[i].rank
            stats.offsets_ns[rank] = off - origin
            host_key = (t.path, t.pid)
            mine = rows[rows["unit"].to_numpy() == i] if len(rows) else rows
            n = w.write(list(_rank_meta(analysis, i, slot, mine)))
            n += w.write(list(_analysis_events(analysis, i, off, slot[i], mine)))
            for part in _activity_events(unit, rank, off, rules, host_key not in done_host):
                n += w.write(part)
            done_host.add(host_key)
            stats.events[rank] = stats.events.get(rank, 0) + n
        del timeline
    flows = _flows(rows, offsets, len(analysis.traces))
    stats.flows = w.write(flows) // 2
    w.close(
        {
            "generator": "traceoverlap export",
            "clock": None if coll is None else coll.clock,
            "offsets_ns": {str(k): v for k, v in stats.offsets_ns.items()},
            "ts_origin_ns": origin,
        }
    )
    return stats


def _timelines(analysis: Analysis, source: Timeline | None) -> Iterator[Timeline]:
    """``source``, or each rank file of the analysis read again (one in memory at a time)."""
    from ..readers import read_trace

    if source is not None:
        yield source
        return
    for path in dict.fromkeys(t.path for t in analysis.traces):
        if not Path(path).is_file():
            raise UsageError(
                f"{path}: the export reads each rank file again, and standard input can be read "
                "only once: save it to a file and pass the file"
            )
        yield read_trace(Path(path))


def _slots(analysis: Analysis) -> list[int]:
    """Per unit: its index among the units of its rank (0 unless a process drove several GPUs)."""
    seen: dict[int, int] = {}
    out = []
    for t in analysis.traces:
        out.append(seen.get(t.rank, 0))
        seen[t.rank] = out[-1] + 1
    return out


def _rank_meta(
    analysis: Analysis, i: int, slot: Sequence[int], rows: pd.DataFrame
) -> Iterator[_Meta]:
    t = analysis.traces[i]
    several = sum(1 for u in analysis.traces if u.rank == t.rank) > 1
    if slot[i] == 0:
        label = f"rank {t.rank}" + ("" if t.device is None or several else f" (GPU {t.device})")
        yield _Meta("process_name", "M", t.rank, 0, {"name": label})
        yield _Meta("process_sort_index", "M", t.rank, 0, {"sort_index": t.rank})
    block = TRACK_BLOCK * slot[i]
    gpu = f" (GPU {t.device})" if several else ""
    tracks = {_TID[name] + block: name for name in ANALYSIS_TRACKS}
    for col, name in (("coll_tid", "collectives"), ("wait_tid", "waits")):
        used = rows[col].to_numpy(np.int64) if len(rows) else np.zeros(0, np.int64)
        for tid in np.unique(used[used > 0]).tolist():
            k = tid - _TID[name] - block
            tracks[tid] = name if k == 0 else f"{name} ({k + 1})"
    for tid, name in sorted(tracks.items()):
        yield _Meta("thread_name", "M", t.rank, tid, {"name": f"analysis: {name}{gpu}"})
        yield _Meta("thread_sort_index", "M", t.rank, tid, {"sort_index": tid - FIRST_LANE_TID})


def _analysis_events(
    analysis: Analysis, i: int, off: int, slot: int, rows: pd.DataFrame
) -> Iterator[_X]:
    """Steps, exposed spans by cause, collective instances and their waits of unit ``i``."""
    rank = analysis.traces[i].rank
    win = analysis.windows
    if win is not None:
        # the windows frame and the step table have one row per shown window, in one order
        pos = np.flatnonzero(win["unit"].to_numpy() == i)
        mine = win.iloc[pos]
        s = mine["start_ns"].to_numpy(np.int64) - off
        e = mine["end_ns"].to_numpy(np.int64) - off
        for k, label in enumerate(mine["step"].tolist()):
            row = analysis.steps.iloc[int(pos[k])]
            yield _X(
                f"step {label}",
                "traceoverlap",
                "X",
                float(us(s[k])),
                float(us(e[k] - s[k])),
                rank,
                _TID["steps"] + TRACK_BLOCK * slot,
                {
                    STEP_NS.name: int(row[STEP_NS.name]),
                    EXPOSED_COMM_NS.name: int(row[EXPOSED_COMM_NS.name]),
                    BOTTLENECK.name: str(row[BOTTLENECK.name]),
                    REASON.name: str(row[REASON.name]),
                },
            )
        tid = _TID["exposed communication"] + TRACK_BLOCK * slot
        yield from _exposed_events(analysis, mine["window"].to_numpy(np.int64), rank, off, tid)
    yield from _collective_events(rows, rank, off)


def _exposed_events(
    analysis: Analysis, windows: I64, rank: int, off: int, tid: int
) -> Iterator[_X]:
    spans = analysis.exposed_spans or {}
    for cause, (g, s, e) in spans.items():
        m = np.isin(g, windows)
        for a, b in zip((s[m] - off).tolist(), (e[m] - off).tolist(), strict=True):
            yield _X(
                CAUSE_SLICE.get(cause, f"exposed: {cause}"),
                "traceoverlap",
                "X",
                float(us(a)),
                float(us(b - a)),
                rank,
                tid,
                {"cause": cause, EXPOSED_NS.name: b - a},
                CAUSE_COLOUR.get(cause),
            )


def pack(start: I64, end: I64) -> I64:
    """Per span: the lowest sub-track (0, 1...) on which it overlaps no span placed before it,
    spans placed in start order (greedy interval colouring: as few sub-tracks as possible)."""
    out = np.zeros(start.size, np.int64)
    track_end: list[int] = []
    for i in np.lexsort((end, start)).tolist():
        s, e = int(start[i]), int(end[i])
        k = next((k for k, te in enumerate(track_end) if te <= s), len(track_end))
        if k == len(track_end):
            track_end.append(e)
        else:
            track_end[k] = e
        out[i] = k
    return out


def _instance_rows(analysis: Analysis, slot: Sequence[int]) -> pd.DataFrame:
    """Per (instance, unit): the per-rank row with its instance's group, seq and last rank,
    and the tracks of its slice (``coll_tid``) and of its wait part (``wait_tid``, 0: none)."""
    coll = analysis.collectives
    if coll is None or coll.per_rank.empty:
        return pd.DataFrame(columns=["unit", "coll_tid", "wait_tid"])
    inst = coll.instances.set_index("instance")
    pr = coll.per_rank.reset_index(drop=True)
    start = pr["start_ns"].to_numpy(np.int64)
    end = pr["end_ns"].to_numpy(np.int64)
    wait = pr[WAIT_NS.name].to_numpy(np.int64)
    waiting = (wait > 0) & pr["matched"].to_numpy(bool)
    coll_k = np.zeros(len(pr), np.int64)
    wait_k = np.full(len(pr), -1, np.int64)
    for idx in pr.groupby("unit", sort=True).indices.values():
        coll_k[idx] = pack(start[idx], end[idx])
        w = idx[waiting[idx]]
        wait_k[w] = pack(start[w], start[w] + wait[w])
    cap = SUB_TRACKS - 1
    block = TRACK_BLOCK * np.asarray(slot, np.int64)[pr["unit"].to_numpy(np.int64)]
    last_rank = inst["last_rank"].reindex(pr["instance"]).to_numpy()
    return pr.assign(
        process_group=inst["process_group"].reindex(pr["instance"]).to_numpy(),
        seq=inst["seq"].reindex(pr["instance"]).to_numpy(),
        last_rank=last_rank,
        transfer_ns=inst["transfer_ns"].reindex(pr["instance"]).to_numpy(),
        blame=_blame_lines(coll, pr, last_rank),
        coll_tid=block + _TID["collectives"] + np.minimum(coll_k, cap),
        wait_tid=np.where(waiting, block + _TID["waits"] + np.minimum(wait_k, cap), 0),
    )


def _blame_lines(coll: Collectives, pr: pd.DataFrame, last_rank: Any) -> list[str | None]:
    """Per row of ``pr``: the job model's blame sentence of its (step, rank, rank waited for),
    None when there is none (docs/job-model.md)."""
    from ..run.job import blame_line

    blame = coll.blame
    if blame.empty:
        return [None] * len(pr)
    lines = {
        (int(b["window"]), int(b["rank"]), int(b[WAITED_FOR_RANK.name])): blame_line(b)
        for b in blame.to_dict("records")
    }
    target = pr[WAITED_FOR_RANK.name] if WAITED_FOR_RANK.name in pr else pd.Series(last_rank)
    return [
        None if pd.isna(t) else lines.get((int(w), int(r), int(t)))
        for w, r, t in zip(pr["window"], pr["rank"], target, strict=True)
    ]


def _collective_events(rows: pd.DataFrame, rank: int, off: int) -> Iterator[_X]:
    for r in rows.itertuples(index=False):
        start, end, wait = int(r.start_ns) - off, int(r.end_ns) - off, int(r.wait_ns)
        last = None if pd.isna(r.last_rank) else int(r.last_rank)
        args = {
            "instance": int(r.instance),
            "group": None if pd.isna(r.process_group) else str(r.process_group),
            "seq": None if pd.isna(r.seq) else int(r.seq),
            "matched": bool(r.matched),
            "step": str(r.step),
            "last_arrival_rank": last,
            WAIT_NS.name: wait,
            "transfer_ns": int(r.transfer_ns) if bool(r.matched) else None,
            EXPOSED_NS.name: int(r.exposed_ns),
        }
        yield _X(
            f"{r.name} #{int(r.instance)}",
            "traceoverlap",
            "X",
            float(us(start)),
            float(us(end - start)),
            rank,
            int(r.coll_tid),
            args,
        )
        if int(r.wait_tid):
            who = "?" if last is None else str(last)
            yield _X(
                f"wait for rank {who}",
                "traceoverlap",
                "X",
                float(us(start)),
                float(us(wait)),
                rank,
                int(r.wait_tid),
                {
                    "instance": int(r.instance),
                    WAIT_NS.name: wait,
                    "last_arrival_rank": last,
                    "blame": r.blame,
                },
                "terrible",
            )


def _flows(all_rows: pd.DataFrame, offsets: Sequence[int], n_units: int) -> list[_Flow]:
    """Per wait on a rank that was not the last to arrive: an arrow from the middle of its
    wait slice to the middle of the instance on the last rank (``bp: e``: bound to the slice
    that encloses it)."""
    out: list[_Flow] = []
    if all_rows.empty:
        return out
    rows = all_rows[(all_rows["wait_tid"] > 0).to_numpy() & all_rows["last_rank"].notna()]
    rows = rows[rows["last_rank"].astype(np.int64) != rows["rank"]]
    if rows.empty:
        return out
    target = all_rows.drop_duplicates(["instance", "rank"]).set_index(["instance", "rank"])

    def off(u: int) -> int:
        return int(offsets[u]) if u < len(offsets) else 0

    for r in rows.itertuples(index=False):
        last = int(r.last_rank)
        if (int(r.instance), last) not in target.index:
            continue
        t = target.loc[(int(r.instance), last)]
        fid = int(r.instance) * n_units + int(r.unit)
        s_ns = int(r.start_ns) - off(int(r.unit)) + int(r.wait_ns) // 2
        tu = int(t["unit"])
        f_ns = (int(t["start_ns"]) + int(t["end_ns"])) // 2 - off(tu)
        name = f"waits for rank {last}"
        out.append(_Flow(name, "wait", "s", fid, float(us(s_ns)), int(r.rank), int(r.wait_tid)))
        out.append(_Flow(name, "wait", "f", fid, float(us(f_ns)), last, int(t["coll_tid"]), "e"))
    return out


def _lane_tids(unit: Timeline, own_host: bool) -> tuple[I64, I64, npt.NDArray[np.bool_]]:
    """Per event: its track id; the rows to write (host rows once per process: a process that
    drove several GPUs is one unit per GPU, each with all its host events); per event, GPU?"""
    ev = unit.events
    dev = unit.traces[0].device
    gpu = (ev["device"].to_numpy() >= 0) & (ev["stream"].to_numpy() >= 0)
    codes = ev["lane"].cat.codes.to_numpy().astype(np.int64)
    dev_tid = 0 if dev is None else 100_000 * (dev + 1)
    tid = FIRST_LANE_TID + codes + np.where(gpu & (codes >= 0), dev_tid, 0)
    rows = np.flatnonzero(gpu | own_host)
    return tid, rows, gpu


def _activity_events(
    unit: Timeline, rank: int, off: int, rules: Rules, own_host: bool
) -> Iterator[list[_X | _Meta]]:
    """The unit's events as complete events on their lanes, in chunks, after the lanes' names."""
    ev = unit.events
    tids, rows, gpu = _lane_tids(unit, own_host)
    kind = kinds(unit, rules)
    lanes = np.asarray(ev["lane"].cat.categories, dtype=object)
    codes = ev["lane"].cat.codes.to_numpy().astype(np.int64)
    used, first = np.unique(tids[rows], return_index=True)
    dev = unit.traces[0].device
    meta: list[_X | _Meta] = []
    for tid, row in zip(used.tolist(), rows[first].tolist(), strict=True):
        c = int(codes[row])
        name = str(lanes[c]) if c >= 0 else "(no lane)"
        if dev is not None and gpu[row]:
            name = f"GPU {dev} {name}"
        meta.append(_Meta("thread_name", "M", rank, tid, {"name": name}))
        meta.append(_Meta("thread_sort_index", "M", rank, tid, {"sort_index": tid}))
    yield meta
    names = ev["name"].cat.categories.to_numpy(dtype=object)
    cats = ev["category"].cat.categories.to_numpy(dtype=object)
    name_codes = ev["name"].cat.codes.to_numpy()
    cat_codes = ev["category"].cat.codes.to_numpy()
    kind_name = np.array([*KINDS], dtype=object)
    start = ev["start_ns"].to_numpy(np.int64) - off
    dur = ev["end_ns"].to_numpy(np.int64) - ev["start_ns"].to_numpy(np.int64)
    for lo in range(0, rows.size, CHUNK_EVENTS):
        r = rows[lo : lo + CHUNK_EVENTS]
        ts, du = us(start[r]).tolist(), us(dur[r]).tolist()
        tid = tids[r].tolist()
        nm = names[name_codes[r]].tolist()
        ct = [
            f"{a}:{b}" if b != "none" else str(a)
            for a, b in zip(cats[cat_codes[r]].tolist(), kind_name[kind[r]].tolist(), strict=True)
        ]
        yield [
            _X(n, c, "X", a, d, rank, k) for n, c, a, d, k in zip(nm, ct, ts, du, tid, strict=True)
        ]
