"""The cells the compare table, Markdown and HTML share: one metric row, one collective row."""

from __future__ import annotations

from traceoverlap.reporters.compare_text import _collective_cells, _metric_cells

MS = 1_000_000


def test_metric_cells_time_and_ratio() -> None:
    # a time: ms with two decimals, signed delta in ms, change = delta / baseline = +25%
    time_row = {
        "metric": "step_ns",
        "baseline": 40 * MS,
        "candidate": 50 * MS,
        "delta": 10 * MS,
        "change_ratio": 0.25,
    }
    assert _metric_cells(time_row) == ("40.00", "50.00", "+10.00", "+25%")
    # a ratio: percent, delta in percentage points (0.56 - 0.91 = -35.0 pp), no relative change
    ratio_row = {
        "metric": "overlap_ratio",
        "baseline": 0.91,
        "candidate": 0.56,
        "delta": -0.35,
        "change_ratio": -0.38,
    }
    assert _metric_cells(ratio_row) == ("91.0%", "56.0%", "-35.0 pp", "-")
    # nothing to compare: every cell is "-"
    missing = {
        "metric": "comm_ns",
        "baseline": None,
        "candidate": None,
        "delta": None,
        "change_ratio": None,
    }
    assert _metric_cells(missing) == ("-", "-", "-", "-")


def test_collective_cells_absent_in_one_run() -> None:
    # only the candidate has it: baseline "absent", delta = 7.7 ms - 0
    row = {
        "baseline_exposed_ns": 0.0,
        "candidate_exposed_ns": 7.7 * MS,
        "delta_ns": 7.7 * MS,
        "baseline_count": 0,
        "candidate_count": 3,
    }
    assert _collective_cells(row) == ("absent", "7.70", "+7.70")
    # both have it and its exposure fell: 1.06 - 1.90 = -0.84 ms
    row = {
        "baseline_exposed_ns": 1.90 * MS,
        "candidate_exposed_ns": 1.06 * MS,
        "delta_ns": -0.84 * MS,
        "baseline_count": 2,
        "candidate_count": 2,
    }
    assert _collective_cells(row) == ("1.90", "1.06", "-0.84")
