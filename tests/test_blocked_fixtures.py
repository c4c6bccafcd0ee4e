"""diagnosis.md §8 on real gloo runs (fixtures/workloads, recorded on CPU): blocked, not late."""

from __future__ import annotations

from pathlib import Path

from traceoverlap import analyze, load
from traceoverlap.core import intervals as iv

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"


def _causes(name: str) -> dict[str, int]:
    st = analyze(FIXTURES / name).steps
    return {c: int(st[f"exposed_{c}_ns"].sum()) for c in ("dependency", "host")}


def test_ddp_finalize_is_blocked_not_host():
    # DDP on gloo: after the last bucket's all-reduce the reducer's finalize (copy_bucket_to_grad)
    # starts right after it ends: the main thread was blocked on it. Before §8 these ns read
    # "host not ready" (about 4 ms over the 6 steps); now they are dependency and host is small.
    c = _causes("ddp")
    assert c["dependency"] > 5 * c["host"], c


def test_planted_host_delay_stays_host():
    # host_delay: every rank sleeps on the host after launching the all-reduces and before it
    # waits: the next op starts long after the communication ends, so it is late, not blocked:
    # the communication that runs during the sleeps (`host_delay` ranges) is exposed and host.
    # (The dependency part is not bounded by the plant: the bucket launches `c10d::allreduce_`
    # sit inside backward's autograd ops and take ms on a loaded host; the comm running while
    # the thread is in them is exposed, the thread blocked in a communication call.)
    c = _causes("host_delay")
    in_sleep = 0
    tl = load(FIXTURES / "host_delay")
    for rank in (0, 1):
        ev = tl.events[tl.events["rank"] == rank]
        name = ev["name"].astype(str)
        sleep = iv.union(ev["start_ns"][name == "host_delay"], ev["end_ns"][name == "host_delay"])
        gloo = name.str.startswith("gloo:")
        comm = iv.union(ev["start_ns"][gloo], ev["end_ns"][gloo])
        in_sleep += iv.measure(*iv.intersect(comm, sleep))
    assert in_sleep > 0
    assert c["host"] >= in_sleep, (c, in_sleep)
