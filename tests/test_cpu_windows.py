"""CPU units' windows without an (activity, window) table (issue 21, cpuwindows.py): nested CPU
step markers cost O(n log n), and give exactly what the per-window algebra gives."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from conftest import examples
from hypothesis import HealthCheck, given, settings
from timeline_gen import scenarios

from traceoverlap import analyze
from traceoverlap.core.intervals import grouped_union
from traceoverlap.core.model import split_units
from traceoverlap.core.options import AnalysisOptions
from traceoverlap.core.rules import Rules
from traceoverlap.rank.causes import local_causes
from traceoverlap.rank.classify import comm_call_mask, kinds
from traceoverlap.rank.cpuwindows import (
    call_comm,
    comm_rows_in_windows,
    cpu_windows,
    unit_sets,
)
from traceoverlap.rank.hostwait import call_parts, host_starts, lane_codes, split_compute
from traceoverlap.rank.instances import unit_instances
from traceoverlap.rank.metrics import (
    ActivityRows,
    Kind,
    activity_rows,
    step_parts,
    step_sets,
)
from traceoverlap.rank.steps import assign_steps
from traceoverlap.rank.unit import p2p_rows


def _cat(a: ActivityRows, b: ActivityRows) -> ActivityRows:
    f = ("group", "kind", "start_ns", "end_ns", "event_row")
    return ActivityRows(*(np.concatenate((getattr(a, x), getattr(b, x))) for x in f))


def _same_sets(a: tuple[np.ndarray, ...], b: tuple[np.ndarray, ...]) -> bool:
    return all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


@settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@given(
    scenarios({"cpu", "multi_rank", "nested_markers", "dup_steps", "custom_regex", "blocked_calls"})
)
def test_cpu_windows_equal_the_per_window_algebra(sc) -> None:  # noqa: ANN001
    # the per-window algebra (an activity clipped into every window it meets) is the reference
    rules = Rules()
    options = AnalysisOptions(step_regex=sc.step_regex) if sc.step_regex else AnalysisOptions()
    for unit in split_units(sc.timeline()):
        kind = kinds(unit, rules)
        steps = assign_steps(unit, kind, options)
        if steps.gpu or len(steps) == 0:
            continue
        n = len(steps)
        ev = unit.events
        start, end = ev["start_ns"].to_numpy(), ev["end_ns"].to_numpy()
        cp = call_parts(unit, kind, rules)
        lanes, by_lane = lane_codes(unit), cp.merged()
        mask = comm_call_mask(unit, rules)
        cc = call_comm(cp, start.astype(np.int64), end.astype(np.int64), kind, p2p_rows(unit, kind))
        acts = split_compute(activity_rows(start, end, kind, steps), lanes, by_lane)
        # M: the activities and every call piece; the rows the causes and instances read: the
        # activities and the call pieces that belong to an instance
        sets = step_sets(_cat(acts, comm_rows_in_windows(cc, steps)), n)
        acts = _cat(acts, comm_rows_in_windows(cc.attributed(), steps))
        want = step_parts(sets, steps, None)
        cr = activity_rows(start, end, np.where(mask, Kind.COMPUTE, Kind.NONE), steps)
        lc_ = comm_rows_in_windows(type(cc)(by_lane[1], by_lane[2], by_lane[0], by_lane[0]), steps)
        calls = grouped_union(
            np.concatenate((cr.group, lc_.group)),
            np.concatenate((cr.start_ns, lc_.start_ns)),
            np.concatenate((cr.end_ns, lc_.end_ns)),
            n,
        )
        got = cpu_windows(
            unit_sets(start, end, kind, lanes, by_lane, mask, cc), start, end, kind, steps
        )
        for k, v in want.items():
            assert np.array_equal(got.parts[k], v), k
        assert _same_sets(got.exposed, sets.exposed)
        assert _same_sets(got.calls, calls)
        hs = host_starts(unit, kind)
        lc_want = local_causes(sets.exposed, acts, steps, calls, hs)
        lc_got = local_causes(got.exposed, got.acts, steps, got.calls, hs)
        for cause in ("tail", "dependency", "host"):
            assert _same_sets(getattr(lc_got, cause), getattr(lc_want, cause)), cause
        i_want = unit_instances(unit, kind, steps, acts, steps.launch_row)
        i_got = unit_instances(unit, kind, steps, got.acts, steps.launch_row)
        assert i_got[0].equals(i_want[0])
        assert _same_sets(i_got[1], i_want[1]) and np.array_equal(i_got[2], i_want[2])


def _nested(path: Path, markers: int, ops: int) -> Path:
    ev = []
    for i in range(markers):
        # marker i = [i, 2 M + 10 N - i) us: every marker holds every op
        ev.append(
            {
                "ph": "X",
                "cat": "user_annotation",
                "name": f"ProfilerStep#{i}",
                "pid": 1,
                "tid": 1,
                "ts": i,
                "dur": 2 * markers + 10 * ops - 2 * i,
            }
        )
    for k in range(ops):
        # op k = [M + 10 k, M + 10 k + 5) us
        ev.append(
            {
                "ph": "X",
                "cat": "cpu_op",
                "name": "aten::mm",
                "pid": 1,
                "tid": 2,
                "ts": markers + 10 * k,
                "dur": 5,
            }
        )
    doc = {"distributedInfo": {"backend": "gloo", "rank": 0, "world_size": 1}, "traceEvents": ev}
    path.write_text(json.dumps(doc))
    return path


def test_thousands_of_nested_cpu_markers_are_analysed(tmp_path: Path) -> None:
    # 2,000 nested markers around 2,000 ops: 4M (op, step) pairs, once refused; every step
    # holds every op. Step i = [i, 2*2000 + 10*2000 - i) us = 24,000 - 2 i us long; compute =
    # 2,000 ops x 5 us = 10,000 us in every step; idle = step - compute
    a = analyze(_nested(tmp_path / "nest.json", 2000, 2000))
    s = a.steps.set_index("step")
    assert len(s) == 2000
    for i in (0, 1, 999, 1999):
        assert s.loc[str(i), "step_ns"] == (24_000 - 2 * i) * 1000
        assert s.loc[str(i), "compute_ns"] == 10_000_000
        assert s.loc[str(i), "idle_ns"] == (24_000 - 2 * i - 10_000) * 1000
        # no communication; idle (> 14,000 us of 24,000) is over 10 % of the step
        assert s.loc[str(i), "comm_ns"] == 0 and s.loc[str(i), "bottleneck"] == "idle-bound"
