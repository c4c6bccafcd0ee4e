"""One GPU activity with a glitched clock (issue 21): a kernel at time 0 in a trace whose clock
counts from boot (51 days) used to make a 51-day step with no note; it is dropped, with one."""

from __future__ import annotations

import json
from pathlib import Path

from test_cli_analyze import write_trace

from traceoverlap import analyze
from traceoverlap.readers import read_trace

DAYS_51_US = 51 * 86400 * 10**6


def _glitched(tmp_path: Path) -> Path:
    p = write_trace(tmp_path / "t.json")
    doc = json.loads(p.read_text())
    for e in doc["traceEvents"]:
        e["ts"] += DAYS_51_US  # the machine was up 51 days: every timestamp is that far out
    launch = {"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 1}
    doc["traceEvents"] += [
        {**launch, "ts": DAYS_51_US + 3, "dur": 1, "args": {"correlation": 3}},
        # ... and one kernel was recorded at 0
        {
            "ph": "X",
            "cat": "kernel",
            "name": "sm80_gemm",
            "pid": 0,
            "tid": 7,
            "ts": 0,
            "dur": 100,
            "args": {"correlation": 3, "stream": 7, "device": 0},
        },
    ]
    p.write_text(json.dumps(doc))
    return p


def test_kernel_at_time_zero_is_dropped_with_a_note(tmp_path: Path) -> None:
    p = _glitched(tmp_path)
    tl = read_trace(p)
    assert int((tl.events["category"] == "kernel").sum()) == 2  # the glitched one is gone
    (note,) = [n for n in tl.traces[0].notes if "clock glitch" in n]
    # margin: max(1 hour, host span of ~11 ms) = 1 hour
    assert note.startswith("Dropped 1 GPU activity timed more than 3600.000 s outside the host")
    # the step is what write_trace's docstring derives: [0, 11) ms -> 11 ms, not 51 days
    a = analyze(p)
    assert a.steps["step_ns"].tolist() == [11_000_000]


def test_nothing_dropped_without_a_glitch(tmp_path: Path) -> None:
    tl = read_trace(write_trace(tmp_path / "t.json"))
    assert not [n for t in tl.traces for n in t.notes if "clock glitch" in n]
    assert int((tl.events["category"] == "kernel").sum()) == 2
