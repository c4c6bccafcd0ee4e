"""Python API dtypes (issue 21): ratios with a zero denominator and unknown ns are null — pandas'
nullable ``Float64`` / ``Int64`` holding <NA> in DataFrames (never NaN, never a -1 or an object
column), None in JSON, an empty cell in CSV."""

from __future__ import annotations

import csv
import io
import json
from pathlib import Path

import pandas as pd
from conftest import WORKLOAD_FIXTURES

from traceoverlap import analyze
from traceoverlap.reporters import csv_report, json_report

RATIOS = ("overlap_ratio", "potential_speedup", "exposed_comm_ratio", "idle_ratio")


def _compute_only(path: Path) -> Path:
    # two side-by-side steps [100, 200) and [200, 300) us, one 40 us op in each, no communication
    ev = [
        {"ph": "X", "cat": "user_annotation", "name": f"ProfilerStep#{i}", "pid": 1, "tid": 1,
         "ts": 100 * i, "dur": 100}
        for i in (1, 2)
    ] + [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 100 * i + 10,
         "dur": 40}
        for i in (1, 2)
    ]  # fmt: skip
    doc = {"distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1}, "traceEvents": ev}
    path.write_text(json.dumps(doc))
    return path


def test_ratio_and_optional_ns_columns_are_nullable(tmp_path: Path) -> None:
    a = analyze(_compute_only(tmp_path / "t.json"))
    s = a.steps
    for c in RATIOS:
        assert s[c].dtype == pd.Float64Dtype(), c
    assert s["iteration_ns"].dtype == pd.Int64Dtype()
    # no communication: overlap_ratio = 0 / 0 is null; exposed 0 / step 100 us = 0.0;
    # idle = (100 - 40) / 100 = 0.6; speedup = step / ideal = 100 / (100 - 0 + 0) = 1.0
    assert s["overlap_ratio"].tolist() == [pd.NA, pd.NA]
    assert s["exposed_comm_ratio"].tolist() == [0.0, 0.0]
    assert s["idle_ratio"].tolist() == [0.6, 0.6]
    assert s["potential_speedup"].tolist() == [1.0, 1.0]
    # iteration: step 1's marker start to step 2's = 100 us; the last step has none (null)
    assert s["iteration_ns"].iloc[0] == 100_000 and s["iteration_ns"].iloc[1] is pd.NA
    # JSON: null; CSV: an empty cell
    rows = json.loads(json_report.render(a))["steps"]
    assert [r["overlap_ratio"] for r in rows] == [None, None]
    assert [r["iteration_ns"] for r in rows] == [100_000, None]
    cells = list(csv.DictReader(io.StringIO(csv_report.render(a))))
    assert [c["overlap_ratio"] for c in cells] == ["", ""]
    assert [c["idle_ratio"] for c in cells] == ["0.6", "0.6"]


def test_queued_ns_is_null_where_no_launch_is_known() -> None:
    # CPU (gloo) ranks launch nothing: queued and behind-comm times are unknown on every row
    pr = analyze(WORKLOAD_FIXTURES / "bucketed").collectives.per_rank
    for c in ("queued_ns", "behind_comm_ns"):
        assert pr[c].dtype == pd.Int64Dtype(), c
        assert len(pr) and pr[c].isna().all(), c


def test_straggler_last_ratio_is_nullable() -> None:
    # two gloo ranks with a planted straggler: each rank's share of collectives it arrived last
    # at is a Float64 in [0, 1] (null only with no collective or unaligned clocks)
    st = analyze(WORKLOAD_FIXTURES / "slow_rank").collectives.stragglers
    assert st["last_ratio"].dtype == pd.Float64Dtype()
    expect = (st["last_count"] / st["instances"]).tolist()
    assert st["last_ratio"].tolist() == expect and sum(expect) == 1.0
