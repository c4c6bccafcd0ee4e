"""diagnosis.md §9: bytes, algbw / busbw with NCCL's factors, and the bytes-vs-duration check.
Hand-built instance tables; every number derived in the comments."""

from __future__ import annotations

import pandas as pd
import pytest

from traceoverlap.core.vocab import PURPOSES
from traceoverlap.run.bandwidth import add_bandwidth, bus_factor, family_bandwidth
from traceoverlap.run.findings import advice

MB = 1_000_000
MS = 1_000_000


def _inst(rows: list[tuple[str, str, int, int]], n_ranks: int = 1) -> pd.DataFrame:
    """rows: (name, family, bytes, transfer_ns)."""
    return pd.DataFrame(
        {
            "instance": range(len(rows)),
            "name": [r[0] for r in rows],
            "family": [r[1] for r in rows],
            "bytes": [r[2] for r in rows],
            "transfer_ns": [r[3] for r in rows],
            "n_ranks": n_ranks,
            "matched": n_ranks > 1,
        }
    )


@pytest.mark.parametrize(
    ("name", "n", "factor"),
    [
        ("allreduce", 8, 2 * 7 / 8),
        ("all_gather", 4, 3 / 4),
        ("reduce_scatter", 2, 1 / 2),
        ("all_to_all", 8, 7 / 8),
        ("broadcast", 8, 1.0),
        ("SendRecv", 2, 1.0),
        ("barrier", 8, None),
        ("allreduce", None, None),
    ],
)
def test_nccl_bus_factors(name, n, factor):
    assert bus_factor(name, n) == factor


def test_algbw_and_busbw():
    # MI300X all-reduce from the issue: 17.6 MB in 8.9 ms on 8 ranks: algbw = 17.6e6 / 8.9e6 ns
    # = 1.978 GB/s (1 byte/ns = 1 GB/s), busbw = algbw x 2 x 7 / 8 = 3.461 GB/s. Unmatched (one
    # rank given): n is the world size 8. Unknown bytes (-1): both null.
    df = add_bandwidth(
        _inst(
            [("allreduce", "AllReduce", 17_600_000, 8_900_000), ("allreduce", "AllReduce", -1, 5)]
        ),
        world_size=8,
    )
    assert df["group_ranks"].tolist() == [8, 8]
    assert df["algbw_gbps"][0] == pytest.approx(17.6 / 8.9)
    assert df["busbw_gbps"][0] == pytest.approx(17.6 / 8.9 * 1.75)
    assert df["algbw_gbps"][1] is None and df["busbw_gbps"][1] is None


def test_same_time_for_6x_the_bytes_is_latency():
    # the 300-rank gloo job: 1.3 MB and 8.3 MB all-reduces, each 173 ms. Four of each: the small
    # quarter is the 1.3 MB ones, the large the 8.3 MB ones: bytes ratio 8.3 / 1.3 = 6.4 >= 4,
    # time ratio 1.0 < 1.5 -> latency (or waiting), never "move fewer bytes".
    rows = [("allreduce", "AllReduce", 1_300_000, 173 * MS)] * 4
    rows += [("allreduce", "AllReduce", 8_300_000, 173 * MS)] * 4
    bw = family_bandwidth(add_bandwidth(_inst(rows, 300), 300))["AllReduce"]
    assert bw.verdict == "latency" and "6.4x the bytes" in bw.text()
    text = advice("transfer-bound", "AllReduce", "gradient-allreduce", bandwidth=bw.verdict)
    assert "coalesce small collectives" in text and "missing ranks" in text
    assert "fewer bytes" not in text and "faster interconnect" not in text


def test_time_growing_with_bytes_near_the_best_is_bandwidth():
    # 1 MB in 1 ms and 8 MB in 8 ms (four of each), 2 ranks: bytes ratio 8, time ratio 8:
    # 8 - 1 >= 0.5 x (8 - 1); busbw of the large = 8e6 / 8e6 x 2 x 1/2 = 1 GB/s = the best (1)
    # -> bandwidth: only then may the advice ask to move fewer bytes / a faster interconnect.
    rows = [("allreduce", "AllReduce", 1 * MB, 1 * MS)] * 4
    rows += [("allreduce", "AllReduce", 8 * MB, 8 * MS)] * 4
    bw = family_bandwidth(add_bandwidth(_inst(rows, 2), 2))["AllReduce"]
    assert bw.verdict == "bandwidth"
    assert bw.large_busbw_gbps == pytest.approx(1.0) and bw.best_busbw_gbps == pytest.approx(1.0)
    assert "faster interconnect" in advice("transfer-bound", "AllReduce", bandwidth=bw.verdict)


def test_one_message_size_cannot_tell():
    # eight 4 MB all-reduces: no size spread -> unknown; the advice moves no bytes and says how
    # to find out
    bw = family_bandwidth(add_bandwidth(_inst([("allreduce", "AllReduce", 4 * MB, MS)] * 8, 2), 2))
    assert bw["AllReduce"].verdict == "unknown"
    text = advice("transfer-bound", "AllReduce", bandwidth="unknown")
    assert "PowerSGD" not in text and "nccl-tests" in text


@pytest.mark.parametrize("purpose", list(PURPOSES))
@pytest.mark.parametrize(
    "family", ["AllReduce", "AllGather/ReduceScatter", "AllToAll", "SendRecv", "Other"]
)
def test_no_bytes_advice_without_bandwidth_evidence(purpose, family):
    for bw in (None, "unknown", "latency"):
        text = advice("transfer-bound", family, purpose, bandwidth=bw).lower()
        assert "powersgd" not in text and "faster interconnect" not in text
        assert "fewer bytes (" not in text and "bf16/fp16" not in text


@pytest.mark.parametrize("cause", ["host", "idle-bound", "tail", "dependency", "transfer-bound"])
def test_cpu_runs_get_no_cuda_advice(cause):
    for purpose in PURPOSES:
        text = advice(cause, "AllReduce", purpose, cpu=True).lower()
        assert "cuda" not in text and "pin_memory" not in text
