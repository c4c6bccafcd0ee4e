"""Real CPU (gloo) traces from the workloads: metrics derived independently here.

The derivation follows metrics.md for CPU timelines with the standard library only: Decimal-exact
timestamps; comm = `gloo:*` events; compute = `cpu_op` events not on a `pt_gloo_runloop` thread and
not `c10d::*` / `record_param_comms` / `nccl:*` / `gloo:*`, minus, per thread, the thread's
communication calls (those excluded cpu_ops, and the blocked waits: from the last event boundary
before a `gloo:*` end, an event's end where none starts, to the next boundary, when that follows
within 1 % of the communication's duration, or within 1 ms when the stretch opened at a
communication call's return, `c10d::*` ... or a `*wait*` range, and then from there); comm also covers those calls
(diagnosis.md §11: blocked in a call is communication); everything clipped to the
`ProfilerStep#N` range, which is the step window.
"""

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest
from reference_algebra import length, union
from reference_algebra import overlap as ab_overlap

from traceoverlap import analyze

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"
EXCLUDED = re.compile(r"^(c10d::|record_param_comms$|nccl:|gloo:)")
CALLS = re.compile(r"^(c10d::|record_param_comms$|nccl:|gloo:)|(?i:wait)")


def derive(path):
    doc = json.loads(gzip.open(path).read(), parse_float=Decimal)
    base = int(doc.get("baseTimeNanoseconds", 0))
    threads = {
        (e["pid"], e["tid"]): e["args"]["name"]
        for e in doc["traceEvents"]
        if e.get("ph") == "M" and e.get("name") == "thread_name"
    }
    ev = [e for e in doc["traceEvents"] if e.get("ph") == "X"]

    def span(e):
        s = int(Decimal(e["ts"]) * 1000) + base
        return s, s + int(Decimal(e["dur"]) * 1000)

    host = [e for e in ev if e.get("cat") in ("cpu_op", "user_annotation")]
    gloo = [span(e) for e in ev if e["name"].startswith("gloo:")]

    def is_compute(e):
        return (
            e.get("cat") == "cpu_op"
            and "pt_gloo_runloop" not in threads.get((e["pid"], e["tid"]), "")
            and not EXCLUDED.search(e["name"])
        )

    # per compute thread: its communication calls
    calls = {}
    for key in {(e["pid"], e["tid"]) for e in ev if is_compute(e)}:
        mine = [span(e) for e in host if (e["pid"], e["tid"]) == key]
        cl = [
            span(e)
            for e in host
            if (e["pid"], e["tid"]) == key
            and e.get("cat") == "cpu_op"
            and EXCLUDED.search(e["name"])
        ]
        bounds = sorted({b for s, t in mine for b in (s, t)})
        ends, starts = {t for _, t in mine}, {s for s, _ in mine}
        call_ends = {
            span(e)[1] for e in host if (e["pid"], e["tid"]) == key and CALLS.search(e["name"])
        }
        for cs, ce in gloo:
            before = [b for b in bounds if b < ce]
            after = [b for b in bounds if b >= ce]
            if not before or not after:
                continue
            prev, nxt = before[-1], after[0]
            gap = nxt - ce
            # opened at a communication call's return: blocked since, and the 1 ms floor applies
            after_call = prev in call_ends
            floor = gap <= 1_000_000 and after_call
            if prev in ends and prev not in starts and (gap * 100 <= ce - cs or floor):
                cl.append((prev if after_call else max(prev, cs), nxt))
        calls[key] = union(cl)

    def minus(a, b):
        out = []
        for s, t in a:
            for bs, bt in b:
                if bt <= s or bs >= t:
                    continue
                if bs > s:
                    out.append((s, bs))
                s = max(s, bt)
            if s < t:
                out.append((s, t))
        return out

    out = {}
    for st in (e for e in ev if e["name"].startswith("ProfilerStep#")):
        s0, e0 = span(st)
        comp, comm = [], []
        per_thread = {}
        for e in ev:
            s, t = span(e)
            s, t = max(s, s0), min(t, e0)
            if s >= t:
                continue
            if e["name"].startswith("gloo:"):
                comm.append((s, t))
            elif is_compute(e):
                per_thread.setdefault((e["pid"], e["tid"]), []).append((s, t))
        for key, ops in per_thread.items():
            comp += minus(union(ops), calls[key])
        for cl in calls.values():  # time in a call is communication, gloo event or not
            comm += [(max(s, s0), min(t, e0)) for s, t in cl if max(s, s0) < min(t, e0)]
        c, m = union(comp), union(comm)
        ov = ab_overlap(c, m)
        out[st["name"].split("#")[1]] = {  # the step label, as the string step column holds it
            "step_ns": e0 - s0,
            "compute_ns": length(c),
            "comm_ns": length(m),
            "overlap_ns": ov,
            "exposed_comm_ns": length(m) - ov,
            "idle_ns": (e0 - s0) - length(union(comp + comm)),
        }
    return out


@pytest.mark.parametrize("strategy", ["naive", "bucketed"])
def test_cpu_fixture_matches_independent_derivation(strategy):
    folder = FIXTURES / strategy
    if not folder.exists():
        pytest.skip(f"fixtures not generated ({folder})")
    res = analyze(folder)
    assert sorted(res.steps["rank"].unique().tolist()) == [0, 1]
    for rank in (0, 1):
        want = derive(folder / f"rank{rank}.json.gz")
        rows = res.steps[res.steps["rank"] == rank]
        assert sorted(rows["step"].tolist()) == sorted(want)
        for row in rows.itertuples(index=False):
            got = {k: getattr(row, k) for k in want[row.step]}
            assert got == want[row.step], (strategy, rank, row.step)
    for t in res.traces:
        assert (t.backend, t.world_size, t.device_kind, t.rank_source) == (
            "gloo",
            2,
            "cpu",
            "distributedInfo",
        )
