"""The corpus benchmark's split of a command's CPU by phase (benchmarks/phases.py) and the line
that says why a member misses its target (benchmarks/bench_corpus.py ``why``).

No timing is asserted: the clock is replaced by a counter the test advances, and the one run of
the real command checks only that its phases are there and add up.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from benchmarks import phases as ph
from benchmarks.bench_corpus import why

ROOT = Path(__file__).resolve().parents[1]


class _Counter:
    """A process_time that returns what the test set."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_clock_counts_each_phase_without_its_nested_calls(monkeypatch: pytest.MonkeyPatch) -> None:
    t = _Counter()
    monkeypatch.setattr(ph.time, "process_time", t)
    clock = ph.Clock()

    def inner() -> None:
        t.now += 2.0  # 2 s inside the nested "read"

    def outer() -> str:
        t.now += 1.0  # 1 s of the outer's own work before the read
        read()
        t.now += 0.5  # and 0.5 s after it
        return "done"

    read = clock.wrap(inner, "read")
    units = clock.wrap(outer, "units")
    assert units() == "done"
    read()  # a read outside any unit: 2 s more of "read"
    # units: 1 + 0.5 = 1.5 s (its 2 s read is the read's); read: 2 + 2 = 4 s
    assert clock.spent == {"units": 1.5, "read": 4.0}


def test_clock_counts_a_call_that_raises(monkeypatch: pytest.MonkeyPatch) -> None:
    t = _Counter()
    monkeypatch.setattr(ph.time, "process_time", t)
    clock = ph.Clock()

    def broken() -> None:
        t.now += 0.25
        raise ValueError("bad trace")

    with pytest.raises(ValueError):
        clock.wrap(broken, "read")()
    assert clock.spent == {"read": 0.25}


def test_phases_add_up_to_the_total() -> None:
    # imports 0.4 + integrity 0.1 + read 0.3 + output 0.05 = 0.85 of 1.0: other = 0.15
    out = ph.phases(0.4, {"integrity": 0.1, "read": 0.3, "output": 0.05}, 1.0)
    assert out["other"] == pytest.approx(0.15)
    assert out["units"] == 0.0 and out["reduce"] == 0.0
    assert sum(out[p] for p in ph.PHASES) == pytest.approx(out["total"])


def test_parse_reads_the_child_line_and_nothing_else() -> None:
    assert ph.parse('warning: x\nPHASES={"read": 0.5}\n') == {"read": 0.5}
    assert ph.parse("traceoverlap: error: x.json: truncated\n") is None


def _phases(**kw: float) -> dict[str, float]:
    out = {p: 0.0 for p in ph.PHASES}
    out.update(kw)
    out["total"] = sum(out[p] for p in ph.PHASES)
    return out


def test_why_names_what_the_imports_leave_and_the_largest_part() -> None:
    # floor 0.5 s, target 1.2x: 0.6 s allowed; imports 0.4 leave 0.2; the work is
    # read 0.3 + units 0.1 + reduce 0.05 = 0.45 s; total 0.85 s, less pandas' 0.2 s import
    # 0.65 / 0.5 = 1.30x; the floor's own work 0.5 - 0.05 = 0.45
    p = _phases(imports=0.4, read=0.3, units=0.1, reduce=0.05)
    text = why(p, 0.5, 1.2, 0.05, 0.2)
    assert text.startswith("imports 0.400 s (pandas 0.200) leave 0.200 of the 0.600 s")
    assert "the work took 0.450 (read 0.300, units 0.100, reduce 0.050)" in text
    assert "the floor's own 0.450" in text
    assert "without pandas' import 1.30x" in text
    assert text.endswith("the largest part: read")


def test_why_says_when_the_fixed_costs_alone_exceed_the_target() -> None:
    # floor 0.04 s, target 3x: 0.12 s allowed; imports 0.4 + integrity check 0.01 exceed it;
    # the floor less its 0.038 s start is 0.002 s: too small to measure
    p = _phases(imports=0.4, integrity=0.01, read=0.01, reduce=0.05)
    text = why(p, 0.04, 3.0, 0.038, 0.2)
    assert text.startswith(
        "imports 0.400 s (pandas 0.200) + the integrity check 0.010 alone exceed the 0.120 s"
    )
    assert "too small to measure" in text
    assert "largest part" not in text


@pytest.mark.timeout(120)
def test_the_child_prints_every_phase_of_a_real_run(tmp_path: Path) -> None:
    trace = ROOT / "fixtures" / "workloads" / "bucketed"
    out = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "phases.py"), "--json", "--"]
        + ["analyze", str(trace), "--format", "json", "-o", str(tmp_path / "a.json"), "-j", "1"],
        capture_output=True,
        text=True,
        timeout=110,
        cwd=tmp_path,
    )
    assert out.returncode == 0, out.stderr
    got = ph.parse(out.stderr)
    assert got is not None
    assert set(got) == {*ph.PHASES, "total"}
    assert all(v >= 0 for v in got.values())
    # a Kineto folder: no integrity check; it was read, analysed, reduced and written
    assert got["integrity"] == 0.0
    assert got["read"] > 0 and got["units"] > 0 and got["reduce"] > 0 and got["output"] > 0
    assert sum(got[p] for p in ph.PHASES) == pytest.approx(got["total"])
    assert (tmp_path / "a.json").stat().st_size > 0
