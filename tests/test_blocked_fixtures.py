"""diagnosis.md §8 on real gloo runs (fixtures/workloads, recorded on CPU): blocked, not late."""

from __future__ import annotations

from pathlib import Path

from traceoverlap import analyze

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
    # host stays the larger cause.
    c = _causes("host_delay")
    assert c["host"] > c["dependency"], c
