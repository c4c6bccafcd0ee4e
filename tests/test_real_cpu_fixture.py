"""Real CPU (gloo) traces from the workloads: metrics derived independently here.

The derivation follows metrics.md for CPU timelines with the standard library only: Decimal-exact
timestamps; comm = `gloo:*` events; compute = `cpu_op` events not on a `pt_gloo_runloop` thread and
not `c10d::*` / `record_param_comms` / `nccl:*` / `gloo:*`; everything clipped to the
`ProfilerStep#N` range, which is the step window.
"""

import gzip
import json
import re
from decimal import Decimal
from pathlib import Path

import pytest

from traceoverlap import analyze

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"
EXCLUDED = re.compile(r"^(c10d::|record_param_comms$|nccl:|gloo:)")


def _union(iv):
    out = []
    for s, e in sorted(iv):
        if out and s <= out[-1][1]:
            out[-1][1] = max(out[-1][1], e)
        else:
            out.append([s, e])
    return out


def _length(iv):
    return sum(e - s for s, e in iv)


def _overlap(a, b):
    return sum(max(0, min(e1, e2) - max(s1, s2)) for s1, e1 in a for s2, e2 in b)


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

    out = {}
    for st in (e for e in ev if e["name"].startswith("ProfilerStep#")):
        s0, e0 = span(st)
        comp, comm = [], []
        for e in ev:
            s, t = span(e)
            s, t = max(s, s0), min(t, e0)
            if s >= t:
                continue
            if e["name"].startswith("gloo:"):
                comm.append((s, t))
            elif (
                e.get("cat") == "cpu_op"
                and "pt_gloo_runloop" not in threads.get((e["pid"], e["tid"]), "")
                and not EXCLUDED.search(e["name"])
            ):
                comp.append((s, t))
        c, m = _union(comp), _union(comm)
        ov = _overlap(c, m)
        out[int(st["name"].split("#")[1])] = {
            "step_ns": e0 - s0,
            "compute_ns": _length(c),
            "comm_ns": _length(m),
            "overlap_ns": ov,
            "exposed_comm_ns": _length(m) - ov,
            "idle_ns": (e0 - s0) - _length(_union(comp + comm)),
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
    for t in res.timeline.traces:
        assert (t.backend, t.world_size, t.device_kind, t.rank_source) == (
            "gloo",
            2,
            "cpu",
            "distributedInfo",
        )
