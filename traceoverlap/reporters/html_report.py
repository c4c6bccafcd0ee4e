"""The offline HTML report: one self-contained file that answers "where is my communication
exposed, and why?" at a glance, then lets the reader drill into one step.

    from traceoverlap import analyze, report_parts
    from traceoverlap.reporters.html_report import render_parts
    result = analyze("runs/bucketed")
    html = render_parts(result, report_parts(result))   # what `traceoverlap report` writes

Formatting only: the numbers come from the :class:`~traceoverlap.run.results.Analysis` (the step
table, the summary, the findings, the collectives and the :class:`StepDetail` of the step drawn
as a timeline). The output is deterministic (fixed element ids, sorted JSON keys, no timestamps)
so two renderings of the same analysis are identical byte for byte.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from .._version import __version__
from ..core import fmt
from ..core.errors import UsageError
from ..core.fmt import duration as fmt_ns
from ..core.fmt import size as fmt_bytes
from ..core.schema import (
    BOTTLENECK,
    EXPOSED_BY_CAUSE,
    EXPOSED_COMM_NS,
    EXPOSED_COMM_RATIO,
    EXPOSED_NS,
    EXPOSED_UNMATCHED_NS,
    EXPOSED_WAIT_NS,
    IDEAL_NS,
    OVERLAP_RATIO,
    POTENTIAL_SPEEDUP,
    RANK,
    REASON,
    STEP,
    STEP_NS,
    WAIT_NS,
)
from ..core.vocab import CAUSE_WORDS, CAUSES, KIND_WORDS, PURPOSES, WHOLE_CAPTURE, Purpose
from . import _html_across, _html_whatif
from . import _html_figures as figs
from ._format import several_devices
from ._html_page import CSS, LOADER, PAGE

if TYPE_CHECKING:
    from ..rank.detail import StepDetail
    from ..run.across import StepAcross
    from ..run.detail import ReportParts
    from ..run.results import Analysis
    from ..whatif.scenarios import WhatIf

PLOTLYJS_MODES = ("embed", "cdn")
TOP_COLLECTIVES = 10


def plotly_script(plotlyjs: str) -> str:
    if plotlyjs not in PLOTLYJS_MODES:
        raise UsageError(f"plotlyjs {plotlyjs!r}: expected one of {', '.join(PLOTLYJS_MODES)}")
    if plotlyjs == "embed":
        from plotly.offline import get_plotlyjs

        return f'<script type="text/javascript">{get_plotlyjs()}</script>'
    from plotly.io._utils import plotly_cdn_url

    return f'<script src="{plotly_cdn_url()}" charset="utf-8"></script>'


def render(
    analysis: Analysis,
    *,
    plotlyjs: str = "embed",
    across: StepAcross | None = None,
    detail: StepDetail | None = None,
    whatif: WhatIf | str | None = None,
) -> str:
    """The report as one HTML string. ``detail``: the step drawn as a timeline
    (:func:`traceoverlap.run.detail.step_detail`); without one the page says how to get it.
    ``across``: one step of every rank on one clock (:func:`traceoverlap.run.across.step_across`).
    ``whatif``: the what-if section's :class:`~traceoverlap.whatif.scenarios.WhatIf`
    (:func:`traceoverlap.whatif.what_if`), or a sentence saying why there is none."""
    page = Page()
    body = "\n".join(
        s for s in sections(analysis, page, across=across, detail=detail, whatif=whatif) if s
    )
    title = "traceoverlap report: " + ", ".join(input_names(analysis))
    return PAGE.format(
        title=html.escape(title),
        css=CSS,
        plotlyjs=plotly_script(plotlyjs),
        loader=LOADER,
        body=body,
        version=html.escape(__version__),
        n_plots=len(page.plot_ids),
    )


def render_parts(
    analysis: Analysis,
    parts: ReportParts,
    *,
    plotlyjs: str = "embed",
    whatif: WhatIf | str | None = None,
) -> str:
    """The report of ``traceoverlap report`` as one HTML string: ``parts`` from
    :func:`traceoverlap.run.detail.report_parts` (the step drawn as a timeline, and across
    ranks); ``whatif`` as for :func:`render`."""
    return render(
        analysis, plotlyjs=plotlyjs, across=parts.across, detail=parts.detail, whatif=whatif
    )


def write_report(
    analysis: Analysis,
    path: str | Path,
    *,
    plotlyjs: str = "embed",
    across: StepAcross | None = None,
    detail: StepDetail | None = None,
) -> Path:
    """Render the report and write it to ``path`` (UTF-8, parent folders created); returns the
    path written."""
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    page = render(analysis, plotlyjs=plotlyjs, across=across, detail=detail)
    out.write_text(page, encoding="utf-8")
    return out


def sections(
    analysis: Analysis,
    page: Page,
    y_max_ms: float | None = None,
    across: StepAcross | None = None,
    detail: StepDetail | None = None,
    whatif: WhatIf | str | None = None,
) -> list[str]:
    """The report's sections in order (the compare page stacks two runs' sections)."""
    steps = analysis.steps.reset_index(drop=True)
    several = analysis.multi_rank
    out = [
        _header(analysis),
        _cards(analysis),
        _findings(analysis),
        _html_whatif.section(whatif),
        _bars_section(page, steps, several, y_max_ms),
    ]
    if across is not None:
        out.append(_html_across.section(across, page.plot, page.merged))
    if detail is not None:
        out.append(_timeline_section(page, analysis, detail))
        out.append(_collectives_table(analysis, detail))
    else:
        out.append(
            "<section id='timeline'><h2>Timeline</h2><p class='explain'>No step was chosen to "
            "draw: pass <code>detail=step_detail(analysis)</code> (what <code>traceoverlap "
            "report</code> does).</p></section>"
        )
    if several:
        out.append(_heatmap_section(page, steps))
        out.append(_across_ranks(analysis))
    out.append(_merged_section(page))
    return out


# --- page plumbing ------------------------------------------------------------------------


@dataclass
class Page:
    """Collects the plots of a page (ids must be unique: ``prefix`` keeps two runs apart)."""

    prefix: str = "tov"
    plot_ids: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)

    def plot(self, name: str, fig: go.Figure) -> str:
        """A div and the script drawing ``fig`` in it, JSON with sorted keys (deterministic)."""
        plot_id = f"{self.prefix}-plot-{name}"
        self.plot_ids.append(plot_id)
        spec = json.loads(pio.to_json(fig, validate=False, remove_uids=True))
        config = {
            "displaylogo": False,
            "responsive": True,
            "modeBarButtonsToRemove": ["select2d", "lasso2d", "autoScale2d"],
        }
        data = _js_json(spec.get("data", []))
        layout = _js_json(spec.get("layout", {}))
        return (
            f'<div id="{plot_id}" class="plot"></div>\n'
            f'<script type="text/javascript">tovPlot("{plot_id}", {data}, {layout}, '
            f"{_js_json(config)});</script>"
        )


def _js_json(obj: Any) -> str:
    # "<" only occurs inside JSON strings, where \u003c is equivalent: no "</script>" can leak
    return json.dumps(obj, sort_keys=True, separators=(",", ":"), ensure_ascii=False).replace(
        "<", "\\u003c"
    )


def _e(x: Any) -> str:
    return html.escape(str(x))


_CODE = re.compile(r"`([^`]+)`")


def _md(x: Any) -> str:
    """Text that may quote names in Markdown backticks (findings, reasons, notes): escaped, each
    `name` as <code>name</code>."""
    return _CODE.sub(r"<code>\1</code>", html.escape(str(x)))


def _ms(ns: Any, digits: int = 2) -> str:
    """A table cell of a column in ms (its heading says so): one unit per column."""
    return fmt.ms(ns, digits, missing="–")


def _pct(x: Any) -> str:
    return fmt.pct(x, missing="–")


def _speedup(x: Any) -> str:
    return fmt.speedup(x, missing="–", sign="×")


def input_names(analysis: Analysis) -> list[str]:
    return sorted(dict.fromkeys(Path(t.path).name for t in analysis.traces)) or ["(timeline)"]


def _step_name(step: Any) -> str:
    """``step 5``, or ``the whole capture`` for the single window of an unmarked trace."""
    return "the whole capture" if str(step) == WHOLE_CAPTURE else f"step {_e(step)}"


def _unit(rank: int, device: Any, analysis: Analysis) -> str:
    if device is not None and rank in several_devices(analysis):
        return f"rank {rank} (GPU {device})"
    return f"rank {rank}"


# --- header, cards, findings ----------------------------------------------------------------


def _header(analysis: Analysis) -> str:
    rows = []
    for t in analysis.traces:
        fmt_v = t.format + (f" {t.format_version}" if t.format_version else "")
        rank_src = (
            ""
            if t.rank_source == "distributedInfo"
            else f" <span class='muted'>({_e(t.rank_source)})</span>"
        )
        device = ", ".join(sorted(set(t.devices))) or t.device_kind.upper()
        if t.device is not None:
            device = f"GPU {t.device}: {device}"
        rows.append(
            "<tr>"
            f"<td class='num'>{t.rank}{rank_src}</td>"
            f"<td class='path'>{_e(t.path)}</td>"
            f"<td>{_e(fmt_v)}</td>"
            f"<td class='num'>{_e(t.world_size if t.world_size is not None else '–')}</td>"
            f"<td>{_e(t.backend or '–')}</td>"
            f"<td>{_e(device)}</td>"
            "</tr>"
        )
    notes = ""
    if analysis.notes:
        notes = (
            "<div class='caveats'><h3>Caveats</h3><ul>"
            + "".join(f"<li>{_md(n)}</li>" for n in analysis.notes)
            + "</ul></div>"
        )
    steps = analysis.steps
    labels = sorted({str(s) for s in steps["step"]}, key=figs.step_sort_key)
    step_words = fmt.count(len(steps), "step")
    if labels == [WHOLE_CAPTURE]:
        step_words += " (no step markers: each rank's whole capture is one window)"
    else:
        step_words += f" ({_e(_step_list(labels))})"
    n = len(analysis.traces)
    return (
        "<header>"
        "<h1>Communication overlap report</h1>"
        f"<p class='lead'>{fmt.count(n, 'rank')}, {step_words}; step markers "
        f"<code>{_e(analysis.options.step_pattern)}</code>.</p>"
        "<table class='inputs'><thead><tr><th>rank</th><th>input</th><th>format</th>"
        "<th>world size</th><th>backend</th><th>device</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
        + notes
        + "</header>"
    )


def _step_list(labels: list[str]) -> str:
    from ..core.options import describe_steps

    return "steps " + describe_steps(labels)


def _card(label: str, value: str, sub: str = "", cls: str = "") -> str:
    return (
        f"<div class='card {cls}'><div class='label'>{_e(label)}</div>"
        f"<div class='value'>{value}</div><div class='sub'>{sub}</div></div>"
    )


def _dominant_reason(steps: pd.DataFrame, dominant: str | None) -> str:
    """The reason of the median step among those of the dominant class (a real step's reason)."""
    rows = steps[steps[BOTTLENECK.name] == dominant]
    if rows.empty:
        return ""
    order = np.argsort(rows[STEP_NS.name].to_numpy(dtype=np.int64), kind="stable")
    row = rows.iloc[int(order[(len(order) - 1) // 2])]
    return f"rank {int(row[RANK.name])}, step {row[STEP.name]}: {row[REASON.name]}"


def _cards(analysis: Analysis) -> str:
    run = analysis.summary.run
    scope = "all ranks and steps" if analysis.multi_rank else "over steps"
    cards = [
        _card(
            "median step",
            fmt_ns(run.median(STEP_NS.name)),
            f"p90 {fmt_ns(run.stat(STEP_NS.name, 'p90'))} · {scope}",
        ),
        _card(
            "median exposed comm",
            fmt_ns(run.median(EXPOSED_COMM_NS.name)),
            f"{_pct(run.median(EXPOSED_COMM_RATIO.name))} of the step (median)",
            "exposed",
        ),
        _card(
            "overlap ratio",
            _pct(run.overlap_ratio),
            "of all communication hidden behind compute; median step "
            f"{_pct(run.median(OVERLAP_RATIO.name))}",
            "overlap",
        ),
        _card(
            "median ideal step",
            fmt_ns(run.median(IDEAL_NS.name)),
            "the step if all hideable communication were hidden",
        ),
        _card(
            "potential speedup",
            _speedup(run.potential_speedup),
            f"total step time / total ideal; median step {_speedup(run.median(POTENTIAL_SPEEDUP.name))}",
        ),
    ]
    dominant = run.dominant_bottleneck
    verdict = (
        f"<div class='verdict'><span class='label'>dominant verdict</span> "
        f"<b>{_e(dominant or '–')}</b> <span class='muted'>in "
        f"{run.bottlenecks.get(dominant or '', 0)} of {run.n_steps} steps</span>"
        f"<div class='sub'>{_md(_dominant_reason(analysis.steps, dominant))}</div></div>"
    )
    out = "<section id='summary'><h2>Summary</h2><div class='cards'>" + "".join(cards) + "</div>"
    out += verdict
    if analysis.multi_rank:
        out += _rank_table(analysis)
    return out + "</section>"


def _rank_table(analysis: Analysis) -> str:
    rows = []
    # diagnosis.md §12: shown when some step has exposed time with no wait / transfer split
    unknown = bool((analysis.steps[EXPOSED_UNMATCHED_NS.name] > 0).any())
    for r, s in sorted(analysis.summary.ranks.items(), key=lambda kv: kv[0]):
        rows.append(
            "<tr>"
            f"<td class='num'>{_e(r)}</td>"
            f"<td class='num'>{s.n_steps}</td>"
            f"<td class='num'>{_ms(s.median(STEP_NS.name))}</td>"
            f"<td class='num'>{_ms(s.median(EXPOSED_COMM_NS.name))}</td>"
            f"<td class='num'>{_ms(s.median(EXPOSED_WAIT_NS.name))}</td>"
            + (
                f"<td class='num'>{_ms(s.median(EXPOSED_UNMATCHED_NS.name))}</td>"
                if unknown
                else ""
            )
            + f"<td class='num'>{_pct(s.overlap_ratio)}</td>"
            f"<td class='num'>{_speedup(s.potential_speedup)}</td>"
            f"<td>{_e(s.dominant_bottleneck or '–')}</td>"
            "</tr>"
        )
    return (
        "<h3>Per rank</h3><table class='data'><thead><tr><th>rank</th><th>steps</th>"
        "<th class='num'>median step (ms)</th><th class='num'>median exposed (ms)</th>"
        "<th class='num'>of which waiting (ms)</th>"
        + (
            "<th class='num' title='exposed comm with no peer or pair in the trace: waiting "
            "cannot be told from transfer'>of which unmatched (ms)</th>"
            if unknown
            else ""
        )
        + "<th>overlap ratio</th><th>potential speedup</th><th>dominant verdict</th>"
        "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


def _findings(analysis: Analysis) -> str:
    """What to try: the analysis' findings, in its order, each with the numbers behind it."""
    if not analysis.findings:
        return ""
    items = []
    for f in analysis.findings:
        where = ""
        if f.collectives:
            where = (
                "<div class='where'>where: " + "; ".join(_md(c) for c in f.collectives) + "</div>"
            )
        share = f" · {_pct(f.share_ratio)}" if f.share_ratio is not None else ""
        items.append(
            f"<li class='finding {_e(f.kind)}'><b>{_md(f.title)}</b>"
            f"<div class='evidence muted'>{_e(f.kind)}{share} · {fmt_ns(f.exposed_ns)}</div>"
            f"<div class='advice'>{_md(f.advice)}</div>{where}</li>"
        )
    return (
        "<section id='next'><h2>What to try next</h2><p class='explain'>Chosen from why the "
        "communication was exposed (waiting for a late peer, nothing left to compute, compute "
        "waiting for it, the host not ready) and from the kind of collective that carried it; "
        "most time first.</p><ol class='advice'>" + "".join(items) + "</ol></section>"
    )


# --- per-step bars and heatmap ------------------------------------------------------------


def _bars_section(page: Page, steps: pd.DataFrame, several: bool, y_max_ms: float | None) -> str:
    ranks = [int(r) for r in steps["rank"].tolist()]
    keys = [figs.step_sort_key(s) for s in steps["step"].tolist()]
    order = sorted(range(len(steps)), key=lambda i: (ranks[i], keys[i]))
    ordered = steps.iloc[order]
    return (
        "<section id='steps'><h2>Where each step's time goes</h2>"
        "<p class='explain'>Each bar is one step"
        + (" of one rank" if several else "")
        + ", split into parts that add up to the step: compute with no communication under it, "
        "communication hidden behind compute (overlapped), exposed communication split by why "
        "it was exposed (waiting for a later rank, nothing left to compute, compute waiting for "
        "it, the host not having launched the next compute), memory copies with neither, and "
        "idle time when the device did nothing.</p>"
        + page.plot("steps", figs.step_bars(ordered, several, y_max_ms))
        + "</section>"
    )


def _heatmap_section(page: Page, steps: pd.DataFrame) -> str:
    return (
        "<section id='heatmap'><h2>Exposed communication by rank and step</h2>"
        "<p class='explain'>A rank that is darker than the others in the same step waited longer "
        "for its collectives: look for a straggling peer or an unbalanced load.</p>"
        + page.plot("heatmap", figs.exposed_heatmap(steps))
        + "</section>"
    )


# --- the timeline of one step ---------------------------------------------------------------


def _timeline_section(page: Page, analysis: Analysis, d: StepDetail) -> str:
    """The timeline of one step: its lanes, the exposed / overlapped bands and phases, and the
    text that reads the step's numbers and verdict."""
    where = _unit(d.rank, d.device, analysis)
    lanes = _timeline_lanes(page, d, where)  # their merge lines come first on the page
    bands = _timeline_bands(page, d, where)
    ps, pe, names = d.phases
    cap = figs.PHASE_CAP
    phases = (ps[:cap], pe[:cap], list(names[:cap])) if ps.size else None
    fig = figs.timeline_figure(lanes, bands, phases, d.exposed, d.start_ns, d.end_ns - d.start_ns)
    return (
        f"<section id='timeline'><h2>Timeline of {_step_name(d.step)} on {where}</h2>"
        + _timeline_text(analysis, d)
        + page.plot("timeline", fig)
        + "</section>"
    )


def _detailed_pairs(rows: pd.DataFrame) -> set[tuple[str, str]]:
    """The (lane, kind) pairs drawn with one bar per activity: the smallest first, while their
    activities fit in :data:`~._html_figures.DETAIL_BUDGET`; the others are merged."""
    counts = rows.groupby(["lane", "kind"], sort=True).size().reset_index(name="n")
    counts = counts.sort_values(["n", "lane", "kind"], kind="stable")
    detailed = set()
    budget = figs.DETAIL_BUDGET
    for lane, kind, n in counts.itertuples(index=False):
        if n <= budget:
            detailed.add((lane, str(kind)))
            budget -= int(n)
    return detailed


def _timeline_lanes(page: Page, d: StepDetail, where: str) -> list[figs.Lane]:
    """One row per lane of the step (GPU stream / host thread), per kind either every activity
    with its own hover, or merged spans (:func:`~._html_figures.coarsen`) with a line on the
    page saying how many activities each drawing stands for."""
    lo = d.start_ns
    rows = d.activities
    detailed = _detailed_pairs(rows)
    unit = "kernels" if d.gpu else "ops"
    lanes = []
    for lane in d.lanes:
        sub = rows[rows["lane"] == lane]
        fl = figs.Lane(lane)
        for kind in ("compute", "comm", "memory"):
            k = sub[sub["kind"] == kind].sort_values(["start_ns", "end_ns"], kind="stable")
            if k.empty:
                continue
            s = k["start_ns"].to_numpy(np.int64)
            e = k["end_ns"].to_numpy(np.int64)
            if (lane, kind) in detailed:
                fl.intervals[kind] = (s, e)
                fl.hover[kind] = figs.hover_texts(
                    k.assign(start_ns=s - lo, dur_ns=e - s), lane, KIND_WORDS[kind]
                )
            else:
                ms, me, gap = figs.coarsen(s, e, figs.SPAN_CAP)
                fl.intervals[kind] = (ms, me)
                fl.hover[kind] = figs.merged_hover(s, e, ms, me, lane, KIND_WORDS[kind], lo, unit)
                how = f"closing gaps up to {fmt_ns(gap)}" if gap else "their union"
                page.merged.append(
                    f"{where} step {d.step}, {lane}, {KIND_WORDS[kind]}: {len(k):,} {unit} "
                    f"drawn as {ms.size:,} merged span{'s' if ms.size != 1 else ''} ({how})"
                )
        lanes.append(fl)
    return lanes


def _timeline_bands(page: Page, d: StepDetail, where: str) -> list[figs.Lane]:
    """The derived rows: the exposed communication by cause, and the overlapped part."""
    exposed_band = figs.Lane("exposed comm")
    for cause in CAUSES:
        s, e = d.exposed_by_cause.get(cause, (np.zeros(0, np.int64), np.zeros(0, np.int64)))
        if s.size == 0:
            continue
        what = f"{where} step {d.step}, exposed ({cause})"
        exposed_band.intervals[cause] = _band_spans(page, what, s, e)
    overlap_band = figs.Lane("overlapped")
    s, e = d.overlap
    overlap_band.intervals["overlap"] = _band_spans(
        page, f"{where} step {d.step}, overlapped", s, e
    )
    return [exposed_band, overlap_band]


def _band_spans(
    page: Page, what: str, s: npt.NDArray[np.int64], e: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """A band's spans (ns) within :data:`~._html_figures.BAND_CAP`; when gaps had to be closed
    to get there, a line on the page says so."""
    ms, me, gap = figs.coarsen(s, e, figs.BAND_CAP)
    if gap:
        page.merged.append(
            f"{what}: {s.size:,} spans drawn as {ms.size:,} (gaps up to {fmt_ns(gap)} closed)"
        )
    return ms, me


def _timeline_text(analysis: Analysis, d: StepDetail) -> str:
    """What the timeline shows: which step and why that one, its numbers (window, compute,
    communication, overlap, exposed by cause, idle) and verdict, and how to read the rows."""
    srow = analysis.step_row(d.rank, d.step, d.device)
    name = _step_name(d.step)
    why = "as asked" if d.chosen == "asked" else "the median step by step time"
    choose = (
        ""
        if str(d.step) == WHOLE_CAPTURE
        else f"{why}; choose another with <code>--timeline-step N</code> / "
    )
    causes = ", ".join(
        f"{label} {fmt_ns(srow[EXPOSED_BY_CAUSE[c].name])}"
        for c, label in CAUSE_WORDS.items()
        if int(srow[EXPOSED_BY_CAUSE[c].name]) > 0
    )
    return (
        f"<p class='explain'>{name[0].upper() + name[1:]} ({choose}"
        f"<code>--timeline-rank R</code>): {fmt_ns(srow['step_ns'])} window, "
        f"compute {fmt_ns(srow['compute_ns'])}, communication {fmt_ns(srow['comm_ns'])} of which "
        f"{fmt_ns(srow['overlap_ns'])} overlapped and "
        f"<b class='exposed-text'>{fmt_ns(srow['exposed_comm_ns'])} exposed</b>"
        + (f" ({_e(causes)})" if causes else "")
        + f"; idle {fmt_ns(srow['idle_ns'])}. Verdict: <b>{_e(srow['bottleneck'])}</b> "
        f"({_e(srow['reason'])}).</p>"
        "<p class='explain'>One row per GPU stream or host thread: compute in blue, communication "
        "in orange, memory copies in grey. The <b>exposed comm</b> row is the step's exposed "
        "communication coloured by why it was exposed; <b>overlapped</b> is the hidden part; "
        "exposed spans are also shaded across every row. Hover a bar for its name, duration and "
        "collective; drag to zoom, double-click to reset.</p>"
    )


def _collectives_table(analysis: Analysis, d: StepDetail) -> str:
    where = _unit(d.rank, d.device, analysis)
    head = (
        f"<section id='collectives'><h2>Top exposed collectives in {_step_name(d.step)} "
        f"({where})</h2>"
    )
    coll = analysis.collectives
    pr = coll.per_rank if coll is not None else pd.DataFrame()
    if len(pr):
        pr = pr[pr["window"] == d.window]
    if pr.empty:
        return head + "<p class='explain'>This step has no communication.</p></section>"
    info = coll.instances.set_index("instance") if coll is not None else pd.DataFrame()
    top = pr.sort_values([EXPOSED_NS.name, "start_ns"], ascending=[False, True], kind="stable")
    top = top[top[EXPOSED_NS.name] > 0].head(TOP_COLLECTIVES)
    if top.empty:
        return head + (
            f"<p class='explain'>None: all {len(pr):,} collectives of this step were hidden "
            "behind compute.</p></section>"
        )
    has_wait = bool(pr["matched"].any())
    last_end = int(pr["end_ns"].max())
    out = []
    for r in top.to_dict("records"):
        inst = info.loc[r["instance"]] if r["instance"] in info.index else None
        nbytes = inst["bytes"] if inst is not None else None
        bus = inst.get("busbw_gbps") if inst is not None else None
        bus_text = "–" if bus is None or pd.isna(bus) else f"{float(bus):.1f}"
        purpose = (
            str(inst.get("purpose") or Purpose.UNKNOWN) if inst is not None else Purpose.UNKNOWN
        )
        group = []
        if inst is not None and not pd.isna(inst["process_group"]) and inst["process_group"]:
            group.append(f"group {inst['process_group']}")
        if inst is not None and not pd.isna(inst["seq"]):
            group.append(f"seq {int(inst['seq'])}")
        dur, exposed = int(r["dur_ns"]), int(r[EXPOSED_NS.name])
        last = " <span class='tag'>last in step</span>" if int(r["end_ns"]) == last_end else ""
        same = " <span class='tag warn'>on a compute stream</span>" if r["same_stream"] else ""
        causes = ", ".join(
            f"{c} {_ms(int(r[EXPOSED_BY_CAUSE[c].name]), 3)} ms"
            for c in CAUSES
            if int(r[EXPOSED_BY_CAUSE[c].name]) > 0
        )
        wait = f"<td class='num'>{_ms(int(r['wait_ns']), 3)}</td>" if has_wait else ""
        queued = "–" if pd.isna(r["queued_ns"]) else _ms(int(r["queued_ns"]), 3)
        out.append(
            "<tr>"
            f"<td class='name' title='{_e(r['kernel'])}'>"
            f"{_e(figs.short(figs.display_name(str(r['kernel'])), 60))}{last}{same}</td>"
            f"<td>{_e(r['name'])}<br><span class='muted'>{_e(r['family'])} · "
            f"{_e(PURPOSES.get(purpose, purpose))}</span></td>"
            f"<td class='num'>{fmt_bytes(nbytes)}</td>"
            f"<td class='num'>{bus_text}</td>"
            f"<td>{_e(' · '.join(group) or r['lane'])}</td>"
            f"<td class='num'>+{_ms(int(r['start_ns']) - d.start_ns, 3)}</td>"
            f"<td class='num'>{_ms(dur, 3)}</td>" + wait + f"<td class='num'>{queued}</td>"
            f"<td class='num exposed-text'>{_ms(exposed, 3)}</td>"
            f"<td>{_e(causes)}</td>"
            "</tr>"
        )
    wait_head = "<th class='num'>waiting for peers (ms)</th>" if has_wait else ""
    wait_text = (
        " <i>Waiting</i> is the part of the collective's duration spent waiting for the last rank "
        "to arrive (its duration minus the shortest duration of the same collective on any rank)."
        if has_wait
        else ""
    )
    return (
        head + "<p class='explain'>The collectives of this step with the most exposed time (the "
        f"part no compute on this rank covered), largest first; {len(pr):,} in the step. "
        "<i>Queued</i> is the time it waited behind earlier communication after its launch."
        f"{wait_text}</p>"
        "<table class='data'><thead><tr><th>kernel</th><th>collective</th><th class='num'>size</th>"
        "<th class='num' title='bus bandwidth, GB/s: bytes / transfer time x NCCL factor'>"
        "busbw GB/s</th>"
        "<th>group / lane</th><th class='num'>start (ms)</th><th class='num'>duration (ms)</th>"
        f"{wait_head}<th class='num'>queued (ms)</th><th class='num'>exposed (ms)</th>"
        "<th>why exposed</th>"
        "</tr></thead><tbody>" + "".join(out) + "</tbody></table></section>"
    )


def _across_ranks(analysis: Analysis) -> str:
    """Waiting vs transfer and the stragglers, from the analysis' collectives."""
    coll = analysis.collectives
    if coll is None:
        return ""
    per = coll.per_rank[coll.per_rank["matched"].astype(bool)] if len(coll.per_rank) else None
    if per is None or per.empty:
        um = int(analysis.steps[EXPOSED_UNMATCHED_NS.name].sum())
        return (
            "<section id='stragglers'><h2>Across ranks</h2><p class='explain'>No collective could "
            "be matched across the ranks, so waiting and transfer are not split (see the caveats "
            "above)"
            + (f": {fmt_ns(um)} of exposed communication is unmatched" if um else "")
            + ".</p></section>"
        )
    given = (
        f" among the {coll.ranks_given} ranks given (world size {coll.world_size})"
        if coll.partial
        else ""
    )
    parts = [
        "<section id='stragglers'><h2>Across ranks: waiting vs transfer, stragglers</h2>",
        f"<p class='explain'>{coll.n_matched:,} collectives matched on {len(coll.stragglers)} "
        f"ranks{_e(given)}. A collective finishes together on every rank, so a rank that arrives "
        "early waits for the last one: its duration minus the shortest duration of that "
        "collective on any rank is <i>waiting</i>, the rest is <i>transfer</i>.</p>",
    ]
    total, wait = int(per["dur_ns"].sum()), int(per[WAIT_NS.name].sum())
    steps = analysis.steps
    ew = int(steps[EXPOSED_WAIT_NS.name].sum())
    ex = int(steps[EXPOSED_COMM_NS.name].sum())
    um = int(steps[EXPOSED_UNMATCHED_NS.name].sum())
    unknown = (
        f"; {fmt_ns(um)} has no wait / transfer split (unmatched: no peer or pair in the trace, "
        "or a transfer the bytes do not explain)"
        if um
        else ""
    )
    cards = [
        _card(
            "waiting in collectives",
            fmt_ns(wait),
            f"{_pct(wait / total if total else None)} of {fmt_ns(total)} collective time, all ranks",
            "wait",
        ),
        _card(
            "exposed comm that is waiting",
            fmt_ns(ew),
            f"{_pct(ew / ex if ex else None)} of all exposed comm; {fmt_ns(ex - ew - um)} is "
            f"transfer{unknown}",
            "wait",
        ),
    ]
    top = coll.top_straggler
    if top is not None:
        label = "latest rank among those given" if coll.partial else "most waited-for rank"
        cards.append(_card(label, f"rank {top}", "arrived last most often", ""))
    elif coll.verdict is not None:
        moving = bool(coll.verdict.moving)
        cards.append(
            _card(
                "the late rank" if moving else "straggler",
                "moves" if moving else "none",
                _e(coll.verdict.text()),
                "",
            )
        )
    parts.append("<div class='cards'>" + "".join(cards) + "</div>")
    st = coll.stragglers
    if coll.aligned and not st.empty:
        rows = [
            "<tr>"
            f"<td class='num'>{int(r['rank'])}</td>"
            f"<td class='num'>{int(r['instances']):,}</td>"
            f"<td class='num'>{int(r['last_count']):,} ({_pct(r['last_ratio'])})</td>"
            f"<td class='num'>{_ms(int(r['waited_for_ns']))}</td>"
            f"<td class='num'>{_ms(int(r['exposed_waited_for_ns']))}</td>"
            f"<td class='num'>{_ms(int(r['wait_ns']))}</td>"
            "</tr>"
            for r in st.to_dict("records")
        ]
        parts.append(
            "<h3>Who the others waited for</h3><table class='data'><thead><tr>"
            "<th class='num'>rank</th><th class='num'>collectives</th><th class='num'>arrived last</th>"
            "<th class='num'>others waited for it (ms)</th><th class='num'>of which exposed (ms)</th>"
            "<th class='num'>it waited for others (ms)</th>"
            "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
        )
    elif not coll.aligned:
        parts.append(
            "<p class='explain'>Arrival order is not shown: the ranks' clocks could not be aligned.</p>"
        )
    skew = coll.step_skew
    if not skew.empty:
        worst = skew.sort_values(["skew_ns"], ascending=[False], kind="stable").head(8)
        rows = [
            "<tr>"
            f"<td>{_e(r['step'])}</td>"
            f"<td class='num'>{_ms(int(r['skew_ns']))}</td>"
            f"<td class='num'>{int(r['slowest_rank'])} ({_ms(int(r['max_step_ns']))})</td>"
            f"<td class='num'>{int(r['fastest_rank'])} ({_ms(int(r['min_step_ns']))})</td>"
            "</tr>"
            for r in worst.to_dict("records")
        ]
        parts.append(
            "<h3>Step-time skew across ranks (largest first)</h3><table class='data'><thead><tr>"
            "<th>step</th><th class='num'>skew (ms)</th><th class='num'>slowest rank (step ms)</th>"
            "<th class='num'>fastest rank (step ms)</th></tr></thead><tbody>"
            + "".join(rows)
            + "</tbody></table>"
        )
    parts.append("</section>")
    return "".join(parts)


def _merged_section(page: Page) -> str:
    if not page.merged:
        return ""
    return (
        "<section id='merged'><h2>What the drawing simplified</h2><p class='explain'>Dense lanes are "
        "drawn as merged spans to keep this file small and the browser responsive; the numbers above "
        "are computed from every activity.</p><ul>"
        + "".join(f"<li>{_md(m)}</li>" for m in page.merged)
        + "</ul></section>"
    )
