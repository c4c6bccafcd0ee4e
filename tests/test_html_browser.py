"""The HTML report in a real browser: headless Chromium, no network, every plot drawn, no JS error.

Screenshots land in ``tests/output/`` (gitignored) for a human to look at. Skipped, with the
reason, when no Chromium is installed (``.ci/run`` installs Debian's ``chromium``).
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
from _html_data import ddp_rank, ddp_run, dense_rank
from conftest import REAL_TRACES

from traceoverlap import analyze, step_detail
from traceoverlap.reporters import html_report
from traceoverlap.run.across import step_across
from traceoverlap.run.results import Analysis

REPO = Path(__file__).resolve().parents[1]
OUTPUT = REPO / "tests" / "output"
REAL = REAL_TRACES / "kineto" / "a100_nccl_allreduce_rank0.json.gz"
DLRM = REAL_TRACES / "kineto" / "dlrm_v100_8rank"
FIXTURE = REPO / "fixtures" / "workloads" / "bucketed_slow"

CHROMIUM = next(
    (p for p in map(shutil.which, ("chromium", "chromium-browser", "google-chrome")) if p), None
)
pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(CHROMIUM is None, reason="no chromium in PATH (apt-get install chromium)"),
]

# Console lines that report a JavaScript problem. Chromium logs every console message at INFO
# level, so the level cannot tell an error from a warning: match what errors say instead.
JS_ERROR = re.compile(r"CONSOLE.*(Uncaught|Error\b|Error:|is not defined|Failed to load)")


def write_report(a: Analysis, path: Path, step: object = None, **kw: Any) -> Path:
    """The report with the timeline of ``step`` (default: the median) on the lowest rank, as
    ``traceoverlap report`` draws it."""
    return html_report.write_report(a, path, detail=step_detail(a, None, step), **kw)


def chromium(url: str, tmp: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    cmd = [
        str(CHROMIUM),
        "--headless",
        "--no-sandbox",
        "--disable-gpu",
        "--disable-background-networking",
        "--disable-component-update",
        "--disable-sync",
        "--no-first-run",
        "--hide-scrollbars",
        f"--user-data-dir={tmp}",
        "--virtual-time-budget=10000",
        "--enable-logging=stderr",
        "--v=0",
        *extra,
        url,
    ]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=180, check=False)


def check_in_browser(html: Path, tmp_path: Path, shot: str, height: int, *flags: str) -> str:
    """Load the report; assert every plot rendered and no JS error; save a screenshot."""
    page = html.read_text(encoding="utf-8")
    expected = int(re.search(r'data-plots="(\d+)"', page).group(1))
    assert expected == len(re.findall(r'class="plot"', page))
    res = chromium(html.as_uri(), tmp_path / "profile-dom", "--dump-dom", *flags)
    dom = res.stdout
    assert dom, res.stderr[-2000:]
    # plotly wraps each drawn plot in a div.plot-container
    assert dom.count('class="plot-container plotly"') == expected, res.stderr[-2000:]
    # plotly's notice in place of a WebGL plot (the same words are inside plotly.js: skip scripts)
    assert "WebGL is not supported" not in re.sub(r"(?s)<script.*?</script>", "", dom)
    errors = [line for line in res.stderr.splitlines() if JS_ERROR.search(line)]
    assert not errors, "\n".join(errors)
    OUTPUT.mkdir(exist_ok=True)
    png = OUTPUT / shot
    png.unlink(missing_ok=True)
    res = chromium(
        html.as_uri(),
        tmp_path / "profile-shot",
        f"--window-size=1400,{height}",
        f"--screenshot={png}",
    )
    assert png.exists() and png.stat().st_size > 10_000, res.stderr[-2000:]
    return dom


def test_error_detector_sees_a_js_error(tmp_path):
    # guard against a check that can never fail: a page that throws must be caught
    bad = tmp_path / "bad.html"
    bad.write_text("<html><body><script>undefined_function();</script></body></html>")
    res = chromium(bad.as_uri(), tmp_path / "p", "--dump-dom")
    assert any(JS_ERROR.search(line) for line in res.stderr.splitlines())


def test_two_rank_report_renders(tmp_path):
    tl = ddp_run(2, steps=3)
    a = analyze(tl)
    out = write_report(a, tmp_path / "two_ranks.html", across=step_across(a, source=tl))
    dom = check_in_browser(out, tmp_path, "report_two_ranks.png", 3800)
    assert "Timeline of step 2 on rank 0" in dom and "Step 2 across ranks" in dom


def test_dense_report_renders(tmp_path):
    out = write_report(analyze(dense_rank(100_000)), tmp_path / "dense.html")
    check_in_browser(out, tmp_path, "report_dense.png", 1900)


@pytest.mark.parametrize("webgl", [True, False], ids=["webgl", "no-webgl"])
def test_large_step_renders_with_and_without_webgl(tmp_path, webgl):
    # 5 000 kernels + 100 all-reduces, every one its own hoverable bar (SVG): the page must draw
    # whether the browser has WebGL or not
    out = write_report(analyze(dense_rank(5_000, comm_every=50)), tmp_path / "gl.html")
    assert '"type":"scattergl"' not in out.read_text(encoding="utf-8")
    flags = () if webgl else ("--disable-webgl",)
    shot = f"report_webgl_{'on' if webgl else 'off'}.png"
    check_in_browser(out, tmp_path, shot, 1900, *flags)


@pytest.mark.skipif(not FIXTURE.exists(), reason="fixtures/workloads not generated")
def test_cpu_workload_report_renders(tmp_path):
    # the 2-rank CPU fixture, with the step across ranks
    a = analyze(FIXTURE)
    out = write_report(a, tmp_path / "bucketed_slow.html", across=step_across(a))
    dom = check_in_browser(out, tmp_path, "report_bucketed_slow.png", 4000)
    assert "across ranks</h2>" in dom


ACROSS_PROBE = """<script>
setTimeout(function () {
  var gd = document.getElementById("tov-plot-across");
  var n = gd.data.findIndex(function (t) { return t.name === "waiting for the last rank"; });
  Plotly.Fx.hover(gd, [{curveNumber: n, pointNumber: 0}]);
  var layer = gd.querySelector(".hoverlayer");
  document.body.setAttribute("data-hover", layer ? layer.textContent : "none");
}, 300);
</script>"""


@pytest.mark.skipif(not DLRM.exists(), reason="shared real traces not present")
def test_dlrm_8_rank_report_renders_the_step_across_ranks(tmp_path):
    a = analyze(DLRM)
    x = step_across(a)
    out = write_report(a, tmp_path / "dlrm.html", across=x)
    dom = check_in_browser(out, tmp_path, "report_dlrm_8ranks.png", 4200)
    assert f"Step {x.step} across ranks" in dom and "the other ranks waited most for" in dom
    # hover the first wait part drawn: it names the collective, its last arrival and the wait
    probe = tmp_path / "probe.html"
    page = out.read_text(encoding="utf-8")
    probe.write_text(page.replace("</body>", ACROSS_PROBE + "</body>"), encoding="utf-8")
    res = chromium(probe.as_uri(), tmp_path / "p", "--dump-dom")
    hover = re.search(r'data-hover="([^"]*)"', res.stdout)
    assert hover, res.stderr[-2000:]
    text = hover.group(1)
    assert text.startswith("all_to_all #") and "last arrival: rank" in text and "waited" in text


MOUSE_PROBE = """<script>
setTimeout(function () {
  var gd = document.getElementById("tov-plot-across");
  var row = gd.layout.yaxis.ticktext.indexOf("communication", 4);  // rank 1's communication row
  var t = gd._fullData.find(function (t) {
    return t.name === "waiting for the last rank" && t.y[0] === row; });
  // the middle of rank 1's first wait part, as a mouse would point at it
  Plotly.Fx.hover(gd, {xval: t.base[0] + t.x[0] / 2, yval: row});
  var layer = gd.querySelector(".hoverlayer");
  document.body.setAttribute("data-hover", layer ? layer.textContent : "none");
}, 300);
</script>"""


@pytest.mark.skipif(not DLRM.exists(), reason="shared real traces not present")
def test_dlrm_pointing_at_a_wait_names_the_collective(tmp_path):
    # rank 1 waits the longest for rank 7 at the step's first all_to_all: pointing anywhere over
    # that purple bar names it (not the rank's other communication under it)
    a = analyze(DLRM)
    out = write_report(a, tmp_path / "dlrm.html", across=step_across(a), plotlyjs="embed")
    probe = tmp_path / "mouse.html"
    page = out.read_text(encoding="utf-8")
    probe.write_text(page.replace("</body>", MOUSE_PROBE + "</body>"), encoding="utf-8")
    res = chromium(probe.as_uri(), tmp_path / "p", "--dump-dom")
    hover = re.search(r'data-hover="([^"]*)"', res.stdout)
    assert hover, res.stderr[-2000:]
    text = hover.group(1)
    assert text.startswith("all_to_all #") and "on rank 1" in text
    assert "last arrival: rank 7" in text


@pytest.mark.skipif(not REAL.exists(), reason="shared real traces not present")
def test_real_gpu_trace_report_renders(tmp_path):
    out = write_report(analyze(REAL), tmp_path / "a100.html")
    dom = check_in_browser(out, tmp_path, "report_a100.png", 2500)
    assert "Timeline of step 4 on rank 0" in dom


HOVER_PROBE = """<script>
setTimeout(function () {
  var gd = document.getElementById("tov-plot-timeline");
  var n = gd.data.findIndex(function (t) { return t.type === "bar" && t.name === "communication"; });
  Plotly.Fx.hover(gd, [{curveNumber: n, pointNumber: 4}]);
  var layer = gd.querySelector(".hoverlayer");
  document.body.setAttribute("data-hover", layer ? layer.textContent : "none");
}, 300);
</script>"""


def test_timeline_hover_shows_name_duration_and_collective(tmp_path):
    # Hover the 5th all-reduce of step 2 (the exposed last bucket: 50-56 ms, 5 x 4 MiB, 2 ranks)
    # through plotly's own hover API, and read the hover box back from the page.
    page = write_report(analyze(ddp_rank(0, 6, steps=3)), tmp_path / "r.html", step=2)
    probe = tmp_path / "probe.html"
    probe.write_text(
        page.read_text(encoding="utf-8").replace("</body>", HOVER_PROBE + "</body>"),
        encoding="utf-8",
    )
    res = chromium(probe.as_uri(), tmp_path / "p", "--dump-dom")
    hover = re.search(r'data-hover="([^"]*)"', res.stdout)
    assert hover, res.stderr[-2000:]
    text = hover.group(1)
    assert text.startswith("ncclKernel_AllReduce_RING_LL_Sum_float")
    for part in ("stream 40", "6.00 ms at +50.00 ms", "allreduce", "20.0 MiB", "2 ranks"):
        assert part in text


EDGE_PROBE = """<script>
setTimeout(function () {
  var gd = document.getElementById("tov-plot-timeline");
  var rows = gd.layout.yaxis.ticktext;
  // 0.3 ms into the 6 ms bar at 50-56 ms on stream 40: far from the bar's centre
  Plotly.Fx.hover(gd, {xval: 50.3, yval: rows.indexOf("stream 40")});
  var layer = gd.querySelector(".hoverlayer");
  document.body.setAttribute("data-hover", layer ? layer.textContent : "none");
}, 300);
</script>"""


def test_timeline_hover_near_a_bar_edge_names_that_bar(tmp_path):
    # hovering anywhere over a bar names that bar: here the last all-reduce of step 2, 0.3 ms
    # after its start (the hover boxes used to come from markers at the bars' centres only)
    page = write_report(analyze(ddp_rank(0, 6, steps=3)), tmp_path / "r.html", step=2)
    probe = tmp_path / "edge.html"
    probe.write_text(
        page.read_text(encoding="utf-8").replace("</body>", EDGE_PROBE + "</body>"),
        encoding="utf-8",
    )
    res = chromium(probe.as_uri(), tmp_path / "p", "--dump-dom")
    hover = re.search(r'data-hover="([^"]*)"', res.stdout)
    assert hover, res.stderr[-2000:]
    text = hover.group(1)
    assert text.startswith("ncclKernel_AllReduce_RING_LL_Sum_float") and "at +50.00 ms" in text
