"""Nested CPU step markers (issue 21): each activity falls in every window around it. Compute is
measured on the unit's sets clipped to each window (cpuwindows.py, never paired with windows);
communication is kept per window (collective pieces, causes), so past a budget of
(communication, step) pairs the file is refused with one line instead of exhausting memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from traceoverlap import AnalyzeOptions, analyze
from traceoverlap.core.errors import TraceFormatError
from traceoverlap.rank import unit as rankmap


def _cpu_trace(
    path: Path, nested: bool, markers: int = 50, ops: int = 40, op: str = "aten::mm"
) -> Path:
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
        ev.append({"ph": "X", "cat": "cpu_op", "name": op, "pid": 1, "tid": 2, "ts": ts, "dur": 5})
    doc = {"distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1}, "traceEvents": ev}
    path.write_text(json.dumps(doc))
    return path


def test_deeply_nested_communication_is_refused_with_one_line(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 50 nested markers around 40 gloo collectives, [100 + 20 k, 105 + 20 k) us, no compute:
    # per step, 40 activities + 40 exposed stretches (nothing hides them) + 40 calls (the gloo
    # ops are calls too) = 120 communication items, so 50 x 120 = 6,000 (communication, step)
    # pairs, 50 per item (> 16); with the budget lowered to 1000 pairs the file is refused
    monkeypatch.setattr(rankmap, "MAX_WINDOW_PAIRS", 1000)
    p = _cpu_trace(tmp_path / "nest.json", nested=True, op="gloo:all_reduce")
    with pytest.raises(TraceFormatError) as err:
        analyze(p)
    msg = str(err.value)
    assert msg.startswith(f"{p}: step markers nest or overlap: 50 steps hold 6,000")
    assert "for 120 communication activities, exposed stretches and calls, 50 steps each" in msg
    assert "\n" not in msg
    # selecting 3 steps: 3 x 120 = 360 pairs, analysed
    a = analyze(p, AnalyzeOptions(steps="3-5"))
    assert sorted(str(x) for x in a.steps["step"].tolist()) == ["3", "4", "5"]


def test_deeply_nested_compute_is_not_paired(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the same 50 nested markers around 40 compute ops pass even a budget of 10 pairs: compute
    # is measured on the unit's sets. Marker i = [i, 1000 - i) us holds every op [100 + 20 k,
    # 105 + 20 k): compute 40 x 5 us = 200 us in each; step 1000 - 2 i us
    monkeypatch.setattr(rankmap, "MAX_WINDOW_PAIRS", 10)
    a = analyze(_cpu_trace(tmp_path / "nest.json", nested=True))
    s = a.steps.set_index("step")
    assert len(s) == 50
    assert s.loc["7", "step_ns"] == 986_000 and s.loc["7", "compute_ns"] == 200_000
    assert (s["compute_ns"] == 200_000).all()


def test_side_by_side_markers_pass_the_budget(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 50 side-by-side markers, op k inside marker k: 40 pairs, 1 per activity (< 16), so even
    # over a budget of 10 pairs nothing is refused; every marker range is a CPU step (50)
    monkeypatch.setattr(rankmap, "MAX_WINDOW_PAIRS", 10)
    a = analyze(_cpu_trace(tmp_path / "flat.json", nested=False))
    assert len(a.steps) == 50
