"""Every label the HTML report's plotly figures draw is escaped (issue 41: the step-across-ranks
view drew phase names as plotly text unescaped, so a phase named ``<a href='https://x'>backward``
became a clickable external link). Plotly renders a subset of HTML in every text field (text,
hovertext, names, hover templates and the customdata they show, annotations, tick text,
titles), so the test walks every string of every figure of the report, GPU and CPU runs, one
rank and several, and allows only the tags the report writes itself."""

from __future__ import annotations

import dataclasses
import gzip
import json
import re
from pathlib import Path
from typing import Any

import pandas as pd
import plotly.io as pio
import pytest
from _html_data import ddp_run
from conftest import WORKLOAD_FIXTURES

from traceoverlap import analyze, report_parts
from traceoverlap.core.model import Timeline
from traceoverlap.reporters import html_report
from traceoverlap.run.across import step_across

TAG = "<a href='https://x.example'>"
# what the report's own labels use: bold, italics, line breaks, plotly's <extra> box
OWN_TAGS = re.compile(r"</?(?:b|i|br|extra|sub|sup)>")


def _strings(obj: Any, where: str = "") -> list[tuple[str, str]]:
    """Every string in a figure's JSON, with where it is (keys are not drawn)."""
    if isinstance(obj, str):
        return [(where, obj)]
    if isinstance(obj, dict):
        return [s for k, v in obj.items() for s in _strings(v, f"{where}.{k}")]
    if isinstance(obj, list):
        return [s for i, v in enumerate(obj) for s in _strings(v, f"{where}[{i}]")]
    return []


def _figures(analysis: Any, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The report's figures as plotly JSON, by plot name (every figure goes through Page.plot)."""
    seen: dict[str, Any] = {}
    plot = html_report.Page.plot

    def recording(self: html_report.Page, name: str, fig: Any) -> str:
        seen[name] = json.loads(pio.to_json(fig, validate=False))
        return plot(self, name, fig)

    monkeypatch.setattr(html_report.Page, "plot", recording)
    parts = report_parts(analysis)
    if parts.across is None and analysis.multi_rank:  # in memory: no rank files to read again
        parts = dataclasses.replace(parts, across=step_across(analysis, detail=parts.detail))
    page = html_report.render_parts(analysis, parts, plotlyjs="cdn")
    assert "x.example'>" not in page.replace("\\u003c", "<").replace("&lt;", "")
    return seen


def _unescaped(figures: dict[str, Any]) -> list[str]:
    bad = []
    for name, spec in figures.items():
        for where, s in _strings(spec):
            if "<" in OWN_TAGS.sub("", s):
                bad.append(f"{name}{where}: {s[:120]!r}")
    return bad


def _poisoned_gpu_run() -> Timeline:
    """Two GPU ranks (tests/_html_data.ddp_run) with the tag in front of every string the
    reader takes from a trace: kernel, phase and collective names, lanes, thread names, paths,
    devices, backend (step markers keep their names, so the steps are found)."""
    tl = ddp_run(2, steps=3)
    ev = tl.events.copy()
    for col in ("name", "lane", "coll_name", "thread_name", "process_group"):
        if col not in ev or not isinstance(ev[col].dtype, pd.CategoricalDtype):
            continue
        cats = ev[col].cat.categories
        ev[col] = ev[col].cat.rename_categories(
            [c if (not c or c.startswith("ProfilerStep")) else TAG + c for c in cats]
        )
    traces = tuple(
        dataclasses.replace(
            t,
            path=f"run/{TAG}rank{t.rank}.json.gz",
            devices=tuple(TAG + d for d in t.devices),
            backend=TAG + (t.backend or ""),
        )
        for t in tl.traces
    )
    return Timeline(ev, traces)


def test_every_label_of_a_gpu_report_is_escaped(monkeypatch: pytest.MonkeyPatch) -> None:
    figures = _figures(analyze(_poisoned_gpu_run()), monkeypatch)
    assert {"steps", "heatmap", "timeline", "across"} <= set(figures), sorted(figures)
    assert not _unescaped(figures), "\n".join(_unescaped(figures))


def _poisoned_cpu_folder(tmp_path: Path) -> Path:
    # the gloo fixture, every range and op named with the tag in front (step markers kept)
    folder = tmp_path / "run"
    folder.mkdir()
    for src in sorted((WORKLOAD_FIXTURES / "ddp").glob("rank*.json.gz")):
        doc = json.loads(gzip.open(src).read())
        for e in doc["traceEvents"]:
            name = e.get("name")
            if isinstance(name, str) and e.get("ph") == "X" and "ProfilerStep" not in name:
                e["name"] = TAG + name
        (folder / src.name.replace(".gz", "")).write_text(json.dumps(doc))
    return folder


def test_every_label_of_a_cpu_report_is_escaped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    figures = _figures(analyze(_poisoned_cpu_folder(tmp_path)), monkeypatch)
    assert len(figures) >= 3, sorted(figures)
    assert not _unescaped(figures), "\n".join(_unescaped(figures))
