"""compare: baseline vs candidate medians, step_speedup, bottleneck change, collectives."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from traceoverlap import analyze
from traceoverlap.cli import main
from traceoverlap.core.model import Timeline, TraceInfo, make_events
from traceoverlap.reporters.compare_text import headline, main_change_text
from traceoverlap.run.compare import compare

MS = 1_000_000
WORKLOADS = Path(__file__).resolve().parents[1] / "fixtures" / "workloads"


def _run(step_end: int, compute: tuple[int, int], comm: tuple[int, int]) -> Timeline:
    """One CPU rank, one ProfilerStep#1 [0, step_end) ms, one compute op, one gloo all-reduce."""
    ev = make_events(
        3,
        {
            "category": ["annotation", "cpu_op", "annotation"],
            "name": ["ProfilerStep#1", "aten::mm", "gloo:all_reduce"],
            "tid": [1, 1, 2],
            "thread_name": ["python", "python", "pt_gloo_runloop"],
            "start_ns": np.array([0, compute[0], comm[0]]) * MS,
            "end_ns": np.array([step_end, compute[1], comm[1]]) * MS,
        },
    )
    return Timeline(ev, (TraceInfo(path="r0.json", format="kineto", rank=0, clock="unix"),))


def test_hand_built_compare() -> None:
    """Derivation (ms):
    baseline: step [0,100), compute [0,60), all-reduce [60,100): comm 40, overlap 0, exposed 40
      (40% of the step, comm <= compute) -> exposed-communication
    candidate: step [0,64), compute [0,60), all-reduce [24,64): comm 40, overlap [24,60) 36,
      exposed 4; the device computed for all but 4 ms (6.25% < 10%) -> compute-bound
    step_speedup = 100 / 64 = 1.5625; exposed comm 40 -> 4 (delta -36, -90%) is the largest move
    among compute / comm / exposed / idle; overlap ratio 0 -> 36/40 = 0.9
    collective "all_reduce #1": exposed 40 -> 4, delta -36
    """
    base = analyze(_run(100, (0, 60), (60, 100)))
    cand = analyze(_run(64, (0, 60), (24, 64)))
    c = compare(base, cand)
    assert c.step_speedup == pytest.approx(100 / 64)
    m = c.metrics.set_index("metric")
    assert m.loc["step_ns", "delta"] == -36 * MS
    assert m.loc["exposed_comm_ns", "delta"] == -36 * MS
    assert m.loc["exposed_comm_ns", "change_ratio"] == pytest.approx(-0.9)
    assert m.loc["compute_ns", "delta"] == 0 and m.loc["comm_ns", "delta"] == 0
    assert m.loc["overlap_ratio", "candidate"] == pytest.approx(0.9)
    assert "exposed_wait_ns" not in m.index  # single-rank runs have no wait/transfer split
    assert (c.baseline_bottleneck, c.candidate_bottleneck) == (
        "exposed-communication",
        "compute-bound",
    )
    assert c.bottleneck_changed
    assert c.main_change == "exposed_comm_ns"
    assert main_change_text(c) == "exposed comm fell by 36.00 ms per step (-90%)"
    # all of the exposed time was at the end of the step, with nothing computing after it
    assert m.loc["exposed_tail_ns", "delta"] == -36 * MS
    row = c.collectives.iloc[0]
    assert row["collective"] == "all_reduce #1"
    assert (row["baseline_exposed_ns"], row["candidate_exposed_ns"]) == (40 * MS, 4 * MS)
    assert row["delta_ns"] == -36 * MS


def _fixture(name: str) -> Path:
    p = WORKLOADS / name
    if not (p / "rank0.json.gz").exists():
        pytest.skip(f"fixture {p} absent")
    return p


def test_naive_vs_bucketed_fixtures() -> None:
    # the bucketed run overlaps its all-reduces with backward: it is faster per step, and what
    # moved most is exposed communication going down (timings vary; the direction does not)
    c = compare(analyze(_fixture("naive")), analyze(_fixture("bucketed")))
    assert c.step_speedup is not None and c.step_speedup > 1
    m = c.metrics.set_index("metric")
    assert m.loc["exposed_comm_ns", "delta"] < 0
    assert m.loc["overlap_ratio", "candidate"] > m.loc["overlap_ratio", "baseline"]
    assert c.main_change == "exposed_comm_ns"
    assert "step_speedup" in headline(c)
    assert not c.collectives.empty


def test_cli_compare_formats(tmp_path: Path) -> None:
    naive, bucketed = str(_fixture("naive")), str(_fixture("bucketed"))
    runner = CliRunner()
    res = runner.invoke(main, ["compare", naive, bucketed, "--format", "json"])
    assert res.exit_code == 0, res.output
    d = json.loads(res.output)
    assert d["step_speedup"] > 1
    assert d["baseline"]["ranks"] == [0, 1] and d["bottleneck"]["baseline"]
    assert {"metric", "baseline", "candidate", "delta", "change_ratio"} <= set(d["metrics"][0])

    res = runner.invoke(main, ["compare", naive, bucketed])
    assert res.exit_code == 0, res.output
    assert "step_speedup:" in res.output and "main change: exposed comm fell" in res.output

    out = tmp_path / "cmp.md"
    res = runner.invoke(main, ["compare", naive, bucketed, "-f", "markdown", "-o", str(out)])
    assert res.exit_code == 0, res.output
    text = out.read_text()
    assert text.startswith("# traceoverlap compare") and "| step (ms) |" in text


def test_cli_compare_missing_input_is_one_line(tmp_path: Path) -> None:
    res = CliRunner().invoke(main, ["compare", str(tmp_path / "nope"), str(_fixture("naive"))])
    assert res.exit_code == 2
    assert "no such file or folder" in res.output and "Traceback" not in res.output


def test_cli_compare_html_side_by_side(tmp_path: Path) -> None:
    # the comparison on top, then each run's report sections on one page: plotly.js once, and
    # both runs' per-step bars on the same time scale
    naive, bucketed = str(_fixture("naive")), str(_fixture("bucketed"))
    out = tmp_path / "cmp.html"
    res = CliRunner().invoke(main, ["compare", naive, bucketed, "--html", str(out)])
    assert res.exit_code == 0, res.output
    page = out.read_text(encoding="utf-8")
    assert "step_speedup" in page and "<iframe" not in page
    assert page.count("Communication overlap report") == 2
    assert page.count("plotly.js v") == 1  # the library's banner: embedded once
    ranges = re.findall(r'"yaxis":\{"gridcolor":"#e6e6e6","range":\[0,([0-9.]+)\]', page)
    assert len(ranges) == 2 and ranges[0] == ranges[1]


def test_compare_a_run_without_communication_prints_no_nan() -> None:
    # the candidate has no communication at all: its overlap ratio is undefined (null), and the
    # headline and table show "-" for it, never "nan%"
    from traceoverlap.reporters.compare_text import render_json, render_table

    base = analyze(_run(100, (0, 60), (60, 100)))
    ev = _run(60, (0, 60), (0, 0)).events
    cand = analyze(Timeline(ev[ev["name"] != "gloo:all_reduce"], _run(60, (0, 60), (0, 0)).traces))
    c = compare(base, cand)
    text = headline(c) + render_table(c) + render_json(c)
    # "nan" is a substring of "dominant": look for the tokens a NaN would print as
    assert not re.search(r"\bnan\b|\bNaN\b", text, re.IGNORECASE)
    assert c.metric("overlap_ratio")["candidate"] is None


def _three_steps() -> Timeline:
    """One CPU rank, three 100 ms steps, one compute op and one gloo all-reduce in each (ms):
    step 1 [0,100): compute [0,60), comm [50,60): comm 10, overlap 10 -> ratio 1.0
    step 2 [100,200): compute [100,160), comm [160,200): comm 40, overlap 0 -> ratio 0.0
    step 3 [200,300): compute [200,260), comm [250,270): comm 20, overlap 10 -> ratio 0.5
    """
    steps = [(0, 100, (0, 60), (50, 60)), (100, 200, (100, 160), (160, 200))]
    steps.append((200, 300, (200, 260), (250, 270)))
    cats, names, tids, threads, start, end = [], [], [], [], [], []
    for i, (s, e, comp, comm) in enumerate(steps, start=1):
        for cat, name, tid, th, (a, b) in (
            ("annotation", f"ProfilerStep#{i}", 1, "python", (s, e)),
            ("cpu_op", "aten::mm", 1, "python", comp),
            ("annotation", "gloo:all_reduce", 2, "pt_gloo_runloop", comm),
        ):
            cats.append(cat)
            names.append(name)
            tids.append(tid)
            threads.append(th)
            start.append(a)
            end.append(b)
    ev = make_events(
        len(cats),
        {
            "category": cats,
            "name": names,
            "tid": tids,
            "thread_name": threads,
            "start_ns": np.array(start) * MS,
            "end_ns": np.array(end) * MS,
        },
    )
    return Timeline(ev, (TraceInfo(path="r0.json", format="kineto", rank=0, clock="unix"),))


def test_compare_gives_the_overlap_ratio_analyze_gives() -> None:
    """Issue 35: one overlap figure per run. The run's overlap ratio (metrics.md "Summaries") is
    total overlap / total comm = (10 + 0 + 10) / (10 + 40 + 20) = 20/70 = 28.6 %; the median of
    the per-step ratios (1.0, 0.0, 0.5) would be 50.0 %, a different number under the same
    label. analyze's summary and compare's table, headline and JSON all say 28.6 %."""
    from traceoverlap.reporters import text
    from traceoverlap.reporters.compare_text import render_json, render_markdown, render_table

    a = analyze(_three_steps())
    assert a.steps["overlap_ratio"].tolist() == [1.0, 0.0, 0.5]
    assert a.summary.run.overlap_ratio == pytest.approx(20 / 70)
    c = compare(a, analyze(_three_steps()))
    row = c.metric("overlap_ratio")
    assert row["label"] == "overlap ratio"
    assert row["baseline"] == pytest.approx(20 / 70) and row["candidate"] == pytest.approx(20 / 70)
    assert "overlap ratio 28.6% of comm hidden behind compute" in text.render(a, width=120)
    table = render_table(c, width=120)
    assert re.search(r"overlap ratio\s+28\.6%\s+28\.6%", table), table
    assert "50.0%" not in table
    assert "overlap ratio 28.6% -> 28.6%" in headline(c)
    assert "| overlap ratio | 28.6% | 28.6% |" in render_markdown(c)
    (m,) = [r for r in json.loads(render_json(c))["metrics"] if r["metric"] == "overlap_ratio"]
    assert m["baseline"] == pytest.approx(20 / 70)
