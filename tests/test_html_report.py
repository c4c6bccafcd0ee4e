"""The HTML report: numbers it draws, what it picks, determinism, size on dense steps, the CLI.

Inputs are the hand-built timelines of ``_html_data.py``; the expected numbers are derived in
comments from their construction. Browser rendering is tested in ``test_html_browser.py``.
"""

from __future__ import annotations

import base64
import html
import json
import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from _html_data import MS, ddp_rank, ddp_run, dense_rank
from click.testing import CliRunner
from conftest import REAL_TRACES

from traceoverlap import analyze, report_parts, step_detail
from traceoverlap.cli import main
from traceoverlap.core import intervals as iv
from traceoverlap.core.errors import UsageError
from traceoverlap.reporters import _html_figures as figs
from traceoverlap.reporters.html_report import render as render_page
from traceoverlap.reporters.html_report import render_parts, write_report
from traceoverlap.run.results import Analysis

REPO = Path(__file__).resolve().parents[1]
REAL = REAL_TRACES / "kineto" / "a100_nccl_allreduce_rank0.json.gz"
FIXTURE = REPO / "fixtures" / "workloads" / "bucketed"


def render(analysis: Analysis, rank: int | None = None, step: object = None, **kw: Any) -> str:
    """The report with the timeline of ``step`` on ``rank`` (default: the lowest rank's median
    step), as ``traceoverlap report`` draws it."""
    return render_page(analysis, detail=step_detail(analysis, rank, step), **kw)


def plot_spec(page: str, plot_id: str) -> tuple[list[dict], dict]:
    """The (data, layout) the page passes to plotly for one plot."""
    head = f'tovPlot("{plot_id}", '
    i = page.index(head) + len(head)
    dec = json.JSONDecoder()
    data, j = dec.raw_decode(page, i)
    layout, _ = dec.raw_decode(page, j + 2)  # skip ", "
    return data, layout


def arr(v: object) -> np.ndarray:
    """A plotly array: a plain list or a typed array {"dtype", "bdata"} (plotly.py >= 6)."""
    if isinstance(v, dict):
        a = np.frombuffer(base64.b64decode(v["bdata"]), dtype=np.dtype(v["dtype"]))
        if "shape" in v:
            shape = v["shape"]
            a = a.reshape(
                [int(n) for n in str(shape).split(",")] if isinstance(shape, str) else shape
            )
        return a
    return np.asarray(v, dtype=float)


def bar_spans(trace: dict) -> list[tuple[float, float]]:
    """(x0, x1) of each horizontal bar of a timeline bar trace (ms from the window start)."""
    base, width = arr(trace["base"]), arr(trace["x"])
    return [(round(float(b), 6), round(float(b + w), 6)) for b, w in zip(base, width)]


@pytest.fixture(scope="module")
def one_rank():
    return analyze(ddp_rank(0, 6, steps=3))


@pytest.fixture(scope="module")
def two_ranks():
    return analyze(ddp_run(2, steps=3))


# --- numbers drawn ------------------------------------------------------------------------------


def test_step_components_add_up_to_the_step(one_rank):
    # Step 2 of the worked example plus a 2 ms memcpy after the last all-reduce: window [0, 58) ms;
    # compute 50 (backward), comm 30 (5 x 6), overlap 24 (first four buckets under backward),
    # exposed 6 (the last bucket, 50-56), memory 2 (56-58) with nothing under it, idle 0.
    # compute only = 50 - 24 = 26; memory only = 58 - 0 - 50 - 6 = 2. The exposed 6 ms come after
    # the last backward kernel started (45 ms): nothing was left to compute under them (tail).
    steps = one_rank.steps
    row = steps[steps["step"].astype(str) == "2"]
    parts = figs.step_components(row).iloc[0]
    assert parts["compute_only_ns"] == 26 * MS
    assert parts["overlap_ns"] == 24 * MS
    assert parts["exposed_tail_ns"] == 6 * MS
    assert parts["exposed_wait_ns"] + parts["exposed_dependency_ns"] + parts["exposed_host_ns"] == 0
    assert parts["memory_only_ns"] == 2 * MS
    assert parts["idle_ns"] == 0
    # and on every step of both runs the parts add up to the step
    for a in (one_rank, analyze(ddp_run(2, steps=3))):
        total = figs.step_components(a.steps).sum(axis=1).to_numpy()
        assert (total == a.steps["step_ns"].to_numpy(np.int64)).all()


def test_exposed_wait_split_in_bars(two_ranks):
    # Rank 1's all-reduces take 7 ms, rank 0's 6 ms: transfer = 6 ms (the shortest), rank 1 waits
    # 1 ms at the start of each. Only the last one (50-57) is exposed on rank 1, so per step its
    # exposed comm 7 ms splits into 1 ms waiting + 6 ms with nothing left to compute (after the
    # last backward kernel started at 45); rank 0 waits 0 and its 6 ms are all tail.
    page = render(two_ranks)
    data, _ = plot_spec(page, "tov-plot-steps")
    by_name = {t["name"]: arr(t["y"]) for t in data}
    # bars are ordered rank 0 steps 1..3, then rank 1 steps 1..3 (ms)
    assert list(by_name["exposed: waiting for a peer"]) == [0, 0, 0, 1, 1, 1]
    assert list(by_name["exposed: nothing left to compute"]) == [6, 6, 6, 6, 6, 6]
    assert "exposed: host not ready" not in by_name  # no step has any


def test_timeline_bands_and_lanes_are_the_step_sets(one_rank):
    # Step 2 window starts at the first kernel (t0). In ms from there: exposed comm = [50, 56);
    # overlapped = [10,16), [20,26), [30,36), [40,46); stream 40 = the five all-reduces;
    # stream 7 compute = ten 5 ms kernels (few enough to draw one by one); memory = [56, 58).
    page = render(analyze(ddp_rank(0, 6, steps=3)), 0, 2)
    data, layout = plot_spec(page, "tov-plot-timeline")
    bars = [t for t in data if t["type"] == "bar"]
    rows = layout["yaxis"]["ticktext"]
    assert rows == ["phases", "exposed comm", "overlapped", "stream 7", "stream 40"]

    def spans(name: str, row: str) -> list[tuple[float, float]]:
        y = rows.index(row)
        out = []
        for t in bars:
            if t["name"] == name and (arr(t["y"]) == y).all():
                out += bar_spans(t)
        return out

    assert spans("exposed: nothing left to compute", "exposed comm") == [(50.0, 56.0)]
    assert spans("overlapped", "overlapped") == [
        (10.0, 16.0),
        (20.0, 26.0),
        (30.0, 36.0),
        (40.0, 46.0),
    ]
    assert spans("communication", "stream 40") == [(10.0 * b, 10.0 * b + 6) for b in range(1, 6)]
    assert spans("compute", "stream 7") == [(5.0 * i, 5.0 * i + 5) for i in range(10)]
    assert spans("memory", "stream 7") == [(56.0, 58.0)]
    assert layout["xaxis"]["range"] == [0, 58.0]
    # the phase range "## backward ##" covers [0, 50)
    assert "## backward ##" in page
    assert "What the drawing simplified" not in page  # nothing was merged


def test_default_timeline_is_the_median_step(one_rank, two_ranks):
    # rank 0 step times: 56, 58, 58 ms (steps 1, 2, 3); sorted stably: 1, 2, 3; lower median = 2
    assert "Timeline of step 2 on rank 0" in render(one_rank)
    assert "Timeline of step 3 on rank 0" in render(analyze(ddp_rank(0, 6, steps=3)), 0, 3)
    assert "Timeline of step 1 on rank 1" in render(analyze(ddp_run(2, steps=3)), 1, "1")
    with pytest.raises(UsageError, match="no such step"):
        step_detail(analyze(ddp_rank(0, 6, steps=3)), 0, 9)
    with pytest.raises(UsageError, match="no such rank"):
        step_detail(analyze(ddp_rank(0, 6, steps=3)), 5)


def test_top_exposed_collectives_single_rank(one_rank):
    # Step 2: only the last all-reduce (50-56 ms, nothing computing) is exposed: 6 ms of 6 ms.
    page = render(analyze(ddp_rank(0, 6, steps=3)), 0, 2)
    section = page[page.index("<section id='collectives'>") :]
    section = section[: section.index("</section>")]
    rows = re.findall(r"<tr>.*?</tr>", section)
    assert len(rows) == 2  # header + the one exposed collective
    assert "ncclKernel_AllReduce_RING_LL_Sum_float" in rows[1]
    assert "(ncclDevComm*" not in rows[1].split("title=")[1].split(">", 1)[1]  # args stripped
    assert "20.0 MiB" in rows[1]  # bucket 5 of 4 MiB x 5
    # the time columns are in ms (their headings say so): start +50, duration and exposed 6
    assert "<td class='num'>+50.000</td>" in rows[1] and rows[1].count(">6.000<") == 2
    assert "tail 6.000 ms" in rows[1] and "last in step" in rows[1]
    # and the advice for it: the last gradient all-reduce had nothing left to compute under it
    # (a synthetic trace with no host ranges around the launch: its purpose is said unknown)
    assert "AllReduce (purpose unknown): 18.00 ms exposed because nothing was left" in page


def test_several_ranks_add_heatmap_and_stragglers(two_ranks):
    page = render(two_ranks)
    ids = re.findall(r'<div id="(tov-plot-[a-z]+)" class="plot">', page)
    assert ids == ["tov-plot-steps", "tov-plot-timeline", "tov-plot-heatmap"]
    assert 'data-plots="3"' in page
    data, _ = plot_spec(page, "tov-plot-heatmap")
    # exposed comm per (rank, step), ms: rank 0 6 (last 6 ms bucket), rank 1 7 (last 7 ms bucket)
    assert arr(data[0]["z"]).tolist() == [[6, 6, 6], [7, 7, 7]]
    assert "Across ranks: waiting vs transfer" in page
    assert "waiting for peers" in page  # the top-collectives table gained the wait column


def test_single_rank_has_no_heatmap(one_rank):
    page = render(one_rank)
    assert "tov-plot-heatmap" not in page and 'data-plots="2"' in page


# --- file properties ------------------------------------------------------------------------


def test_render_is_deterministic(two_ranks):
    a = render(two_ranks)
    assert a == render(two_ranks)
    assert a == render(analyze(ddp_run(2, steps=3)))  # a fresh analysis
    assert '"uid"' not in a


def test_offline_by_default_and_cdn_is_small(one_rank):
    embed = render(one_rank)
    assert "<script src=" not in embed and "plotly.js v" in embed
    cdn = render(one_rank, plotlyjs="cdn")
    assert re.search(r'<script src="https://cdn\.plot\.ly/plotly-[0-9.]+\.min\.js"', cdn)
    assert len(cdn) < 200_000 < 4_000_000 < len(embed)
    with pytest.raises(UsageError, match="plotlyjs"):
        render(one_rank, plotlyjs="inline")


def test_no_script_injection_from_names():
    tl = ddp_rank(0, steps=1)
    ev = tl.events.copy()
    names = ev["name"].astype(str)
    ev["name"] = names.where(~names.str.startswith("void backward"), "</script><b>x</b>").astype(
        "category"
    )
    page = render(analyze(type(tl)(ev, tl.traces)))
    body = page[page.index("<main") :]
    assert "</script><b>" not in body


def test_dense_step_is_merged_and_stays_small():
    # 100 000 compute kernels of 2 µs with 1 µs gaps (+100 all-reduces): the union of the compute
    # lane still has 100 000 spans, more than SPAN_CAP, so every 1 µs gap is closed -> 1 span.
    page = render(analyze(dense_rank(100_000)), plotlyjs="cdn")
    assert "100,000 kernels drawn as 1 merged span (closing gaps up to 1.0 µs)" in page
    assert len(page) < 1_500_000
    data, _ = plot_spec(page, "tov-plot-timeline")
    drawn = sum(len(arr(t["x"])) for t in data if t["type"] == "bar")
    assert drawn <= 2 * figs.SPAN_CAP + 2 * figs.BAND_CAP  # two lanes, two bands, each capped


def test_covered_length_and_coarsen_by_hand():
    cover = (np.array([0, 0]), np.array([0, 20]), np.array([10, 30]))  # one group: [0,10) [20,30)
    # [5,25) covers 5 of [0,10) and 5 of [20,30); [10,20) falls in the gap; [25,40) gets 5
    q = np.zeros(4, np.int64)
    got = iv.grouped_covered(cover, q, np.array([5, 10, 0, 25]), np.array([25, 20, 30, 40]), 1)
    assert got.tolist() == [10, 0, 20, 5]
    # gaps 1, 2, 4 between [0,1) [2,3) [5,6) [10,11); two spans keep only the widest gap (4)
    s, e, closed = figs.coarsen(np.array([0, 2, 5, 10]), np.array([1, 3, 6, 11]), cap=2)
    assert s.tolist() == [0, 10] and e.tolist() == [6, 11] and closed == 2


def test_display_name():
    assert (
        figs.display_name("ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long)")
        == "ncclKernel_AllReduce_RING_LL_Sum_float"
    )
    assert (
        figs.display_name("void at::native::(anonymous namespace)::k<int>(float*)")
        == "void at::native::(anonymous namespace)::k<int>"
    )
    assert figs.display_name("Memcpy DtoH (Device -> Pinned)") == "Memcpy DtoH"
    assert figs.display_name("aten::mm") == "aten::mm"


# --- command line -------------------------------------------------------------------------------


@pytest.mark.skipif(not FIXTURE.exists(), reason="fixtures/workloads not generated")
def test_report_command_and_analyze_html_write_the_same_file(tmp_path):
    runner = CliRunner()
    out = tmp_path / "r.html"
    res = runner.invoke(main, ["report", str(FIXTURE), "-o", str(out), "--plotlyjs", "cdn"])
    assert res.exit_code == 0, res.output
    page = out.read_text(encoding="utf-8")
    assert "Timeline of step" in page and "tov-plot-heatmap" in page
    # analyze --html writes the embedded report; report's default is the same
    via_analyze = tmp_path / "a.html"
    res = runner.invoke(main, ["analyze", str(FIXTURE), "--html", str(via_analyze)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(main, ["report", str(FIXTURE), "-o", str(tmp_path / "b.html")])
    assert res.exit_code == 0, res.output
    assert via_analyze.read_bytes() == (tmp_path / "b.html").read_bytes()
    res = runner.invoke(main, ["report", str(FIXTURE), "-o", str(out), "--timeline-step", "99"])
    assert res.exit_code == 2
    assert "timeline step 99" in res.output and "Traceback" not in res.output


@pytest.mark.skipif(not FIXTURE.exists(), reason="fixtures/workloads not generated")
def test_report_parts_and_render_parts_make_the_report_commands_page(tmp_path):
    """A Python user makes the page `traceoverlap report` writes without code from cli/: the data
    (report_parts: the timeline and the step across ranks; what_if on the analysis' run graph)
    then the page (render_parts)."""
    from traceoverlap.core.options import AnalyzeOptions
    from traceoverlap.whatif import advice
    from traceoverlap.whatif.scenarios import analysis_graph, what_if

    out = tmp_path / "r.html"
    args = ["--plotlyjs", "cdn", "--timeline-step", "3", "--timeline-rank", "1"]
    res = CliRunner().invoke(main, ["report", str(FIXTURE), "-o", str(out), *args])
    assert res.exit_code == 0, res.output
    result = analyze(FIXTURE, AnalyzeOptions(graph=True, graph_max_nodes=advice.MAX_NODES))
    parts = report_parts(result, step="3", rank=1)
    assert (parts.detail.rank, str(parts.detail.step), parts.detail.chosen) == (1, "3", "asked")
    assert parts.across is not None and str(parts.across.step) == "3"
    page = render_parts(result, parts, plotlyjs="cdn", whatif=what_if(analysis_graph(result)))
    assert page.encode("utf-8", "surrogateescape") == out.read_bytes()
    # the defaults: the lowest rank's median step, on every rank
    parts = report_parts(result)
    assert parts.detail.rank == 0 and parts.detail.chosen == "median"
    assert parts.across is not None and parts.across.step == parts.detail.step


def test_report_parts_of_one_rank_have_no_step_across(one_rank):
    parts = report_parts(one_rank)
    assert parts.across is None and parts.detail.chosen == "median"
    with pytest.raises(UsageError, match="timeline step 99"):
        report_parts(one_rank, step="99")


def test_write_report_returns_the_path(tmp_path, one_rank):
    p = write_report(one_rank, tmp_path / "sub" / "x.html", plotlyjs="cdn")
    assert p.exists() and p.read_text(encoding="utf-8").startswith("<!DOCTYPE html>")


@pytest.mark.skipif(not REAL.exists(), reason="shared real traces not present")
def test_real_a100_trace():
    # README reference figures, step 4: comm 11 990 µs, overlap 1 830 µs, exposed 10 160 µs.
    # Step times 215.8 (4), 213.5 (5), 218.8 (6) ms: the lower median is step 4.
    page = render(analyze(REAL), plotlyjs="cdn")
    assert "Timeline of step 4 on rank 0" in page
    assert "10.16 ms exposed" in page
    assert "communication 11.99 ms of which 1.83 ms overlapped" in page
    data, layout = plot_spec(page, "tov-plot-timeline")
    assert layout["yaxis"]["ticktext"] == [
        "phases",
        "exposed comm",
        "overlapped",
        "stream 7",
        "stream 40",
    ]
    assert "DistributedDataParallel.forward" in page  # GPU projection of the forward range


# --- what-if section ----------------------------------------------------------------------------


def _whatif_rows(page: str, table: str) -> dict[str, tuple[str, str]]:
    """Per scenario row of the what-if section's ``table`` (whatif, fixrank): (predicted step
    ms, speedup) as the page prints them."""
    i = page.index("<section id='whatif'>")
    sec = page[i : page.index("</section>", i)]
    t = sec[sec.index(f"<table class='data {table}'>") :]
    t = t[: t.index("</table>")]
    out = {}
    for name, row in re.findall(r"<tr data-scenario='([^']+)'>(.*?)</tr>", t):
        cells = re.findall(r"<td class='num'>([^<]*)</td>", row)
        # scenarios: step, range, replay, speedup; fix-rank: rank, step, range, replay, speedup
        out[name] = (cells[-4], cells[-1])
    return out


def test_whatif_section_on_a_hand_built_straggler():
    from builders import cpu_timeline
    from test_whatif import _rank

    from traceoverlap.core.model import concat_timelines
    from traceoverlap.whatif.scenarios import graph_of, what_if

    tls = [cpu_timeline(_rank(0, 10), rank=0), cpu_timeline(_rank(1, 40), rank=1)]
    w = what_if(graph_of(tls), ["replay", "fix-rank:1", "no-straggler"])
    run = analyze(concat_timelines(tls))
    page = render(run, plotlyjs="cdn", whatif=w)
    rows = _whatif_rows(page, "whatif")
    # test_whatif.test_fix_rank_removes_the_straggler: the 60 ms step replays as 60 ms; fixing
    # rank 1 (its 40 ms mm at rank 0's 10 ms) ends both ranks 30 ms earlier: 30 ms, 60/30 = 2x;
    # no-straggler: the median mm of two ranks is the lower middle value (10 ms) on both: 30 ms,
    # 2x
    assert rows["replay"] == ("60.00", "1.00×")
    assert rows["fix-rank:1"] == ("30.00", "2.00×")
    assert rows["no-straggler"] == ("30.00", "2.00×")
    # the fix-rank table: rank 1 first (most speedup), the same 30 ms
    fix = _whatif_rows(page, "fixrank")
    assert list(fix)[0] == "fix-rank:1" and fix["fix-rank:1"] == ("30.00", "2.00×")
    # placed after "What to try", before the step bars; nothing loaded from the network
    assert page.index("id='next'") < page.index("id='whatif'") < page.index("id='steps'")
    # a reason instead of a section
    why = render(run, plotlyjs="cdn", whatif="The what-if was left out: <x>")
    assert "The what-if was left out: &lt;x&gt;" in why and "<table class='data whatif'>" not in why
    assert "id='whatif'" not in render(run, plotlyjs="cdn")


@pytest.mark.skipif(not FIXTURE.exists(), reason="fixtures/workloads not generated")
def test_report_whatif_section_matches_whatif_json(tmp_path):
    slow = REPO / "fixtures" / "workloads" / "naive_slow"
    runner = CliRunner()
    out = tmp_path / "r.html"
    res = runner.invoke(main, ["report", str(slow), "-o", str(out), "--plotlyjs", "cdn"])
    assert res.exit_code == 0, res.output
    page = out.read_text(encoding="utf-8")
    res = runner.invoke(main, ["whatif", str(slow), "--format", "json"])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)

    def cells(r: dict) -> tuple[str, str]:
        return (f"{r['step_ns'] / 1e6:.2f}", f"{r['speedup']:.2f}×")

    assert _whatif_rows(page, "whatif") == {r["name"]: cells(r) for r in doc["scenarios"]}
    assert _whatif_rows(page, "fixrank") == {r["name"]: cells(r) for r in doc["fix_rank"]}
    # the overlap tax carries its label (measured or estimated, from what)
    tax = doc["overlap_tax"]
    if tax["overlap_ns"]:
        assert html.escape(tax["label"], quote=True).split(":")[0] in page
    assert "<script src=" not in page.split("</head>", 1)[1]  # offline: no CDN in the body
