"""compare pairs collectives by position within a step (issue 21): when the runs issue a
different number of a kind per step (per-parameter all-reduces vs buckets), it says so."""

from __future__ import annotations

import re

from conftest import WORKLOAD_FIXTURES

from traceoverlap import analyze
from traceoverlap.comparison import compare


def _pairing(notes: tuple[str, ...]) -> list[str]:
    return [n for n in notes if "pairs the N-th of each step" in n]


def test_per_parameter_vs_bucketed_all_reduces_are_said_to_differ() -> None:
    naive = analyze(WORKLOAD_FIXTURES / "naive")
    bucketed = analyze(WORKLOAD_FIXTURES / "bucketed")
    (note,) = _pairing(compare(naive, bucketed).notes)
    m = re.match(
        r"the runs issue different all_reduce collectives per step \((\d+) vs (\d+)\)", note
    )
    assert m is not None, note
    # naive: one all-reduce per parameter; bucketed: one per 0.1 MiB bucket, so fewer
    assert int(m.group(1)) > int(m.group(2)) >= 1
    # the same run on both sides pairs every collective with itself: no such note
    assert _pairing(compare(naive, naive).notes) == []
