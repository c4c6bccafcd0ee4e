"""Nested CPU step markers (issue 21): each activity falls in every window around it, so the
per-window algebra costs activities x markers; past a budget the file is refused with one line
(16M pairs took 3.6 GB and 46 s) instead of exhausting memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traceoverlap import AnalyzeOptions, analyze, rankmap
from traceoverlap.errors import TraceFormatError


def _cpu_trace(path: Path, nested: bool, markers: int = 50, ops: int = 40) -> Path:
    ev = []
    for i in range(markers):
        # nested: marker i = [i, 1000 - i) us, all around the ops in [100, 900) us;
        # side by side: marker i = [20 i, 20 i + 20) us
        ts, dur = (i, 1000 - 2 * i) if nested else (20 * i, 20)
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{i}",
                "pid": 1,
                "tid": 1,
                "ts": ts,
                "dur": dur,
            }
        )
    for k in range(ops):
        ts = 100 + 20 * k if nested else 20 * k + 1
        ev.append(
            {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": ts, "dur": 5}
        )
    doc = {"distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1}, "traceEvents": ev}
    path.write_text(json.dumps(doc))
    return path


def test_deeply_nested_markers_are_refused_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 50 nested markers around 40 ops: 50 x 40 = 2000 (activity, step) pairs, 50 per activity
    # (> 16); with the budget lowered to 1000 pairs the file is refused
    monkeypatch.setattr(rankmap, "MAX_WINDOW_PAIRS", 1000)
    p = _cpu_trace(tmp_path / "nest.json", nested=True)
    with pytest.raises(TraceFormatError) as err:
        analyze(p)
    msg = str(err.value)
    assert msg.startswith(f"{p}: step markers nest or overlap: 50 steps hold 2,000")
    assert "40 activities, 50 steps per activity" in msg and "\n" not in msg
    # selecting 3 steps: 3 x 40 = 120 pairs, analysed
    a = analyze(p, AnalyzeOptions(steps="3-5"))
    assert sorted(str(x) for x in a.steps["step"].tolist()) == ["3", "4", "5"]


def test_side_by_side_markers_pass_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 50 side-by-side markers, op k inside marker k: 40 pairs, 1 per activity (< 16), so even
    # over a budget of 10 pairs nothing is refused; every marker range is a CPU step (50)
    monkeypatch.setattr(rankmap, "MAX_WINDOW_PAIRS", 10)
    a = analyze(_cpu_trace(tmp_path / "flat.json", nested=False))
    assert len(a.steps) == 50
