"""diagnosis.md §8 on real gloo runs (fixtures/workloads, recorded on CPU): blocked, not late."""

from __future__ import annotations

from pathlib import Path

import numpy as np

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
    # waits: the next host event starts long after the communication ends (55-65 ms here, far
    # past the 1 ms floor of §8), so it is late, not blocked: the communication that runs during
    # the sleeps (`host_delay` ranges) is exposed, and each of its ns is waiting (a peer's
    # all-reduce had not started yet: the ranks' sleeps do not line up) or host, never
    # dependency or tail. Once this compared the run's whole host total with the in-sleep comm;
    # since §11 the launches' and waits' own time outside the sleeps reads blocked (dependency),
    # so the check is per ns, on the spans of each cause.
    a = analyze(FIXTURES / "host_delay")
    tl = load(FIXTURES / "host_delay")
    by_cause = {c: 0 for c in ("wait", "tail", "dependency", "host")}
    in_sleep = 0
    for rank in (0, 1):
        ev = tl.events[tl.events["rank"] == rank]
        name = ev["name"].astype(str)
        sleep = iv.union(ev["start_ns"][name == "host_delay"], ev["end_ns"][name == "host_delay"])
        gloo = name.str.startswith("gloo:")
        comm = iv.union(ev["start_ns"][gloo], ev["end_ns"][gloo])
        in_sleep += iv.measure(*iv.intersect(comm, sleep))
        mine = a.windows.loc[a.windows["rank"] == rank, "window"].to_numpy()
        for cause, (g, s, e) in (a.exposed_spans or {}).items():
            m = np.isin(g, mine)
            by_cause[cause] += iv.measure(*iv.intersect(iv.union(s[m], e[m]), sleep))
    assert in_sleep > 0
    # nothing computes during the sleeps: all the comm there is exposed, waiting or host
    assert by_cause["wait"] + by_cause["host"] == in_sleep, (by_cause, in_sleep)
    assert by_cause["dependency"] == by_cause["tail"] == 0, by_cause
    assert by_cause["host"] > 0, by_cause
