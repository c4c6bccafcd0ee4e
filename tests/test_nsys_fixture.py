"""The committed real Nsight Systems export (fixtures/nsys, nsys 2022.4, 2 gloo ranks on CPU):
every per-step number equals an independent derivation from the file with plain sqlite3."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from conftest import FIXTURES
from reference_algebra import length, overlap, union

from traceoverlap import analyze
from traceoverlap.readers.nsys import read_nsys

EXPORT = FIXTURES / "nsys" / "bucketed_cpu_2rank.sqlite"
PHASES = ("forward", "backward", "optimizer")


def _ranges(con: sqlite3.Connection) -> dict[int, list[tuple[str, int, int]]]:
    """pid -> (text, start, end) of every NVTX range, texts resolved through StringIds."""
    rows = con.execute(
        "SELECT (n.globalTid >> 24) & 16777215, COALESCE(n.text, s.value), n.start, n.end "
        "FROM NVTX_EVENTS n LEFT JOIN StringIds s ON s.id = n.textId "
        "WHERE n.eventType IN (59, 60) AND n.end IS NOT NULL"
    ).fetchall()
    out: dict[int, list[tuple[str, int, int]]] = {}
    for pid, text, s, e in rows:
        out.setdefault(pid, []).append((text, s, e))
    return out


def _clip(iv: list[tuple[int, int]], lo: int, hi: int) -> list[tuple[int, int]]:
    return [(max(s, lo), min(e, hi)) for s, e in iv if min(e, hi) > max(s, lo)]


def test_reads_as_two_cpu_ranks_with_phases_on_their_main_thread() -> None:
    tl = read_nsys(EXPORT)
    con = sqlite3.connect(f"file:{EXPORT}?mode=ro", uri=True)
    ended_on: dict[int, list[int]] = {}
    for pid, tid in con.execute(
        "SELECT (globalTid >> 24) & 16777215, COALESCE(endGlobalTid, globalTid) & 16777215 "
        "FROM NVTX_EVENTS WHERE eventType = 60"
    ):
        ended_on.setdefault(pid, []).append(tid)
    con.close()
    assert [(t.rank, t.device_kind, t.rank_source, t.backend) for t in tl.traces] == [
        (0, "cpu", "nvtx", "gloo"),
        (1, "cpu", "nvtx", "gloo"),
    ]
    assert {t.format_version for t in tl.traces} == {"3.0.0"}  # Nsight Systems 2022.4
    assert {t.clock for t in tl.traces} == {"unix"}
    ev = tl.events
    assert set(ev["category"].astype(str)) == {"annotation"}
    for t in tl.traces:
        mine = ev[ev["rank"] == t.rank]
        assert set(mine["pid"]) == {t.pid}
        names = mine["name"].astype(str)
        # steps and phases on the rank's main thread (tid == pid), named by ThreadNames
        main = mine[~names.str.startswith("gloo:")]
        assert set(main["tid"]) == {t.pid}
        assert set(main["lane"].astype(str)) == {f"thread {t.pid} (python)"}
        assert {"forward", "backward", "grad_sync", "optimizer"} <= set(main["name"].astype(str))
        assert {"ProfilerStep#2", "ProfilerStep#3"} <= set(main["name"].astype(str))
        # each collective opened on the main thread and ended by gloo's worker when done is on
        # that worker's lane; one that had finished before its callback was attached ended on
        # the main thread (endGlobalTid NULL) and stays there
        comm = mine[names.str.startswith("gloo:")]
        assert len(comm) == 16 and set(comm["name"].astype(str)) == {"gloo:all_reduce"}
        assert sorted(comm["tid"].tolist()) == sorted(ended_on[t.pid])
        on_worker = comm[comm["tid"] != t.pid]
        assert len(on_worker) > 0
        assert set(on_worker["thread_name"].astype(str)) == {"pt_gloo_runloop"}


def test_every_step_number_equals_an_independent_derivation() -> None:
    res = analyze(EXPORT)
    con = sqlite3.connect(f"file:{EXPORT}?mode=ro", uri=True)
    (utc,) = con.execute("SELECT utcEpochNs FROM TARGET_INFO_SESSION_START_TIME").fetchone()
    ranges = _ranges(con)
    marks = dict(
        con.execute(
            "SELECT (n.globalTid >> 24) & 16777215, CAST(substr(s.value, 6) AS INTEGER) "
            "FROM NVTX_EVENTS n JOIN StringIds s ON s.id = n.textId "
            "WHERE n.eventType = 34 AND s.value LIKE 'rank %'"
        ).fetchall()
    )
    con.close()
    rank_of = {rank: pid for pid, rank in marks.items()}
    assert sorted(rank_of) == [0, 1]
    steps = res.steps
    assert steps[["rank", "step"]].values.tolist() == [[0, "2"], [0, "3"], [1, "2"], [1, "3"]]
    for r in steps.itertuples():
        mine = ranges[rank_of[r.rank]]
        (lo, hi) = next((s, e) for t, s, e in mine if t == f"ProfilerStep#{r.step}")
        # a CPU step's window is its marker; compute = the marked phases, comm = the collectives
        # in flight (issue to completion), both clipped to the window
        compute = union(_clip([(s, e) for t, s, e in mine if t in PHASES], lo, hi))
        comm = union(_clip([(s, e) for t, s, e in mine if t == "gloo:all_reduce"], lo, hi))
        assert (r.start_ns, r.end_ns, r.step_ns) == (utc + lo, utc + hi, hi - lo)
        assert (r.compute_ns, r.comm_ns) == (length(compute), length(comm))
        assert r.overlap_ns == overlap(compute, comm)
        assert r.exposed_comm_ns == length(comm) - overlap(compute, comm)
        assert r.idle_ns == (hi - lo) - length(union(compute + comm))
        assert r.comm_ns > 0 and r.compute_ns > 0


def test_collectives_match_across_the_two_processes() -> None:
    res = analyze(EXPORT)
    coll = res.collectives
    assert coll is not None
    inst = coll.instances
    # 8 buckets per step, 2 steps: 16 all-reduces on each rank, matched by order
    assert len(inst) == 16 and inst["matched"].all()
    assert set(inst["name"]) == {"all_reduce"}
    assert all(tuple(r) == (0, 1) for r in inst["ranks"])
    assert coll.clock == "unix"  # both processes on the session's unix clock


def test_it_is_small() -> None:
    assert Path(EXPORT).stat().st_size < 1_000_000
