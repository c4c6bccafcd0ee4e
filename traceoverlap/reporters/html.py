"""The offline HTML report: one self-contained file that answers "where is my communication
exposed?" at a glance, then lets the reader drill into one step.

    from traceoverlap import analyze
    from traceoverlap.reporters.html import write_report
    write_report(analyze("runs/bucketed"), "report.html")

Formatting only: the numbers come from :class:`traceoverlap.Analysis` (its step table and
summary) and from :mod:`traceoverlap.metrics` (the activities and interval sets of one step).
The output is deterministic (fixed element ids, sorted JSON keys, no timestamps) so a golden test
can compare two renderings byte for byte.
"""

from __future__ import annotations

import html
import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import plotly.graph_objects as go
import plotly.io as pio

from .. import __version__
from ..errors import UsageError
from ..metrics import activity_rows, step_sets
from ..model import GPU_ACTIVITY_CATEGORIES
from . import _html_figures as figs
from ._html_figures import fmt_bytes, fmt_ns
from ._html_page import CSS, LOADER, PAGE

if TYPE_CHECKING:
    from ..analysis import Analysis

PLOTLYJS_MODES = ("embed", "cdn")

#: Ranges drawn as phases (``## forward ##``, ``DistributedDataParallel.forward``,
#: ``Optimizer.step#SGD.step``...): on GPU ranks their GPU projections, on CPU ranks the host ranges.
PHASE_RE = re.compile(r"(?i)forward|backward|optimi[sz]er|zero_grad")
TOP_COLLECTIVES = 10


def render(
    analysis: Analysis,
    *,
    timeline_step: int | str | None = None,
    timeline_rank: int | None = None,
    plotlyjs: str = "embed",
) -> str:
    """The report as one HTML string.

    ``timeline_step``: the step label (``5`` for ``ProfilerStep#5``) drawn as a timeline; default
    the median step (by step time) of ``timeline_rank`` (default: the lowest rank).
    ``plotlyjs``: ``embed`` (offline, ~5 MB of plotly.js inside the file) or ``cdn`` (small file,
    needs the network to draw).
    """
    if plotlyjs not in PLOTLYJS_MODES:
        raise UsageError(f"--plotlyjs {plotlyjs!r}: expected one of {', '.join(PLOTLYJS_MODES)}")
    page = _Page()
    steps = analysis.steps.reset_index(drop=True)
    ranks = sorted(int(r) for r in steps["rank"].unique())
    rank, step = _pick_step(steps, ranks, timeline_rank, timeline_step)

    page.sections.append(_header(analysis, ranks))
    page.sections.append(_cards(analysis, ranks))
    page.sections.append(_bars_section(page, steps, len(ranks) > 1))
    detail = _timeline_section(page, analysis, rank, step, explicit=timeline_step is not None)
    page.sections.append(detail.html)
    page.sections.append(_collectives_table(analysis, detail))
    if len(ranks) > 1:
        page.sections.append(_heatmap_section(page, steps))
        page.sections.append(_across_ranks(analysis))
    page.sections.append(_next_steps(analysis, detail))
    page.sections.append(_merged_section(page))

    if plotlyjs == "embed":
        from plotly.offline import get_plotlyjs

        script = f'<script type="text/javascript">{get_plotlyjs()}</script>'
    else:
        from plotly.io._utils import plotly_cdn_url

        script = f'<script src="{plotly_cdn_url()}" charset="utf-8"></script>'
    title = "traceoverlap report: " + ", ".join(_input_names(analysis))
    return PAGE.format(
        title=html.escape(title),
        css=CSS,
        plotlyjs=script,
        loader=LOADER,
        body="\n".join(s for s in page.sections if s),
        version=html.escape(__version__),
        n_plots=len(page.plot_ids),
    )


def write_report(
    analysis: Analysis,
    path: str | Path,
    *,
    timeline_step: int | str | None = None,
    timeline_rank: int | None = None,
    plotlyjs: str = "embed",
) -> Path:
    """Render the report and write it to ``path`` (UTF-8); returns the path written."""
    out = Path(path)
    text = render(
        analysis, timeline_step=timeline_step, timeline_rank=timeline_rank, plotlyjs=plotlyjs
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    return out


# --- page plumbing ------------------------------------------------------------------------


@dataclass
class _Page:
    sections: list[str] = field(default_factory=list)
    plot_ids: list[str] = field(default_factory=list)
    merged: list[str] = field(default_factory=list)

    def plot(self, plot_id: str, fig: go.Figure) -> str:
        """A div and the script drawing ``fig`` in it, JSON with sorted keys (deterministic)."""
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


def _pct(x: Any) -> str:
    return "–" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{100 * float(x):.1f}%"


def _speedup(x: Any) -> str:
    return "–" if x is None or (isinstance(x, float) and np.isnan(x)) else f"{float(x):.2f}×"


def _input_names(analysis: Analysis) -> list[str]:
    return sorted(dict.fromkeys(Path(t.path).name for t in analysis.timeline.traces)) or [
        "(timeline)"
    ]


# --- choosing the step to draw ------------------------------------------------------------


def _pick_step(
    steps: pd.DataFrame, ranks: list[int], rank: int | None, step: int | str | None
) -> tuple[int, Any]:
    """(rank, step label) of the timeline: the requested one, else the rank's median step.

    The median step is the lower median by step time (ties broken by table order), so it is a
    step that exists, not an average of two.
    """
    if rank is None:
        rank = ranks[0]
    elif rank not in ranks:
        raise UsageError(f"--timeline-rank {rank}: no such rank (ranks: {_join(ranks)})")
    mine = steps[steps["rank"] == rank]
    if step is not None:
        hit = mine[mine["step"].astype(str) == str(step)]
        if hit.empty:
            raise UsageError(
                f"--timeline-step {step}: rank {rank} has no such step "
                f"(steps: {_join(mine['step'].tolist())})"
            )
        return rank, hit["step"].iloc[0]
    order = np.argsort(mine["step_ns"].to_numpy(dtype=np.int64), kind="stable")
    return rank, mine["step"].iloc[int(order[(len(order) - 1) // 2])]


def _join(xs: list[Any], limit: int = 20) -> str:
    s = ", ".join(str(x) for x in xs[:limit])
    return s + (f", … {len(xs) - limit} more" if len(xs) > limit else "")


# --- header and cards ---------------------------------------------------------------------


def _header(analysis: Analysis, ranks: list[int]) -> str:
    traces = sorted(analysis.timeline.traces, key=lambda t: t.rank)
    steps = analysis.steps
    n_steps = len(steps)
    labels = sorted({str(s) for s in steps["step"]}, key=figs.step_sort_key)
    rows = []
    for t in traces:
        if t.rank not in ranks:
            continue
        fmt = t.format + (f" {t.format_version}" if t.format_version else "")
        rank_src = (
            ""
            if t.rank_source == "distributedInfo"
            else f" <span class='muted'>({_e(t.rank_source)})</span>"
        )
        device = ", ".join(sorted(set(t.devices))) or t.device_kind.upper()
        rows.append(
            "<tr>"
            f"<td class='num'>{t.rank}{rank_src}</td>"
            f"<td class='path'>{_e(t.path)}</td>"
            f"<td>{_e(fmt)}</td>"
            f"<td class='num'>{_e(t.world_size if t.world_size is not None else '–')}</td>"
            f"<td>{_e(t.backend or '–')}</td>"
            f"<td>{_e(device)}</td>"
            "</tr>"
        )
    caveats = list(analysis.notes)
    notes = ""
    if caveats:
        notes = (
            "<div class='caveats'><h3>Caveats</h3><ul>"
            + "".join(f"<li>{_e(n)}</li>" for n in caveats)
            + "</ul></div>"
        )
    step_words = f"{n_steps} step{'s' if n_steps != 1 else ''}"
    if labels == ["all"]:
        step_words += " (no step markers: each rank's whole capture is one window)"
    else:
        step_words += f" ({_e(_step_list(labels))})"
    regex = analysis.step_regex or "^ProfilerStep#(\\d+)$"
    return (
        "<header>"
        f"<h1>Communication overlap report</h1>"
        f"<p class='lead'>{len(ranks)} rank{'s' if len(ranks) != 1 else ''}, {step_words}; "
        f"step markers <code>{_e(regex)}</code>.</p>"
        "<table class='inputs'><thead><tr><th>rank</th><th>input</th><th>format</th>"
        "<th>world size</th><th>backend</th><th>device</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
        + notes
        + "</header>"
    )


def _step_name(step: Any) -> str:
    """``step 5``, or ``the whole capture`` for the single window of an unmarked trace (HTML)."""
    return "the whole capture" if str(step) == "all" else f"step {_e(step)}"


def _step_list(labels: list[str]) -> str:
    """``steps 4–54`` for a contiguous numbered run, else ``steps 2, 5, 9`` (shortened)."""
    nums = [int(x) for x in labels if x.isdigit()]
    if len(nums) == len(labels) and len(nums) > 2 and nums == list(range(nums[0], nums[-1] + 1)):
        return f"steps {nums[0]}–{nums[-1]}"
    return "steps " + _join(labels)


def _stat(summary: dict[str, Any], metric: str, stat: str = "median") -> Any:
    return summary.get("metrics", {}).get(metric, {}).get(stat)


def _card(label: str, value: str, sub: str = "", cls: str = "") -> str:
    return (
        f"<div class='card {cls}'><div class='label'>{_e(label)}</div>"
        f"<div class='value'>{value}</div><div class='sub'>{sub}</div></div>"
    )


def _dominant_reason(steps: pd.DataFrame, dominant: str) -> str:
    """The reason of the median step among those of the dominant class (a real step's reason)."""
    rows = steps[steps["bottleneck"] == dominant]
    if rows.empty:
        return ""
    order = np.argsort(rows["step_ns"].to_numpy(dtype=np.int64), kind="stable")
    row = rows.iloc[int(order[(len(order) - 1) // 2])]
    return f"rank {int(row['rank'])}, step {row['step']}: {row['reason']}"


def _cards(analysis: Analysis, ranks: list[int]) -> str:
    run = analysis.summary.get("run", {})
    med_step = _stat(run, "step_ns")
    med_exposed = _stat(run, "exposed_comm_ns")
    med_exposed_ratio = _stat(run, "exposed_comm_ratio")
    dominant = run.get("dominant_bottleneck", "–")
    counts = run.get("bottlenecks", {})
    n = run.get("n_steps", len(analysis.steps))
    scope = "all ranks and steps" if len(ranks) > 1 else "over steps"
    cards = [
        _card(
            "median step", fmt_ns(med_step), f"p90 {fmt_ns(_stat(run, 'step_ns', 'p90'))} · {scope}"
        ),
        _card(
            "median exposed comm",
            fmt_ns(med_exposed),
            f"{_pct(med_exposed_ratio)} of the step (median)",
            "exposed",
        ),
        _card(
            "overlap ratio",
            _pct(run.get("overlap_ratio")),
            f"of all communication hidden behind compute; median step {_pct(_stat(run, 'overlap_ratio'))}",
            "overlap",
        ),
        _card(
            "median ideal step",
            fmt_ns(_stat(run, "ideal_ns")),
            "the step if all hideable communication were hidden",
        ),
        _card(
            "potential speedup",
            _speedup(run.get("potential_speedup")),
            f"total step time / total ideal; median step {_speedup(_stat(run, 'potential_speedup'))}",
        ),
    ]
    verdict = (
        f"<div class='verdict'><span class='label'>dominant bottleneck</span> "
        f"<b>{_e(dominant)}</b> <span class='muted'>in {counts.get(dominant, 0)} of {n} steps</span>"
        f"<div class='sub'>{_e(_dominant_reason(analysis.steps, dominant))}</div></div>"
    )
    out = (
        "<section id='summary'><h2>Summary</h2><div class='cards'>"
        + "".join(cards)
        + "</div>"
        + verdict
    )
    if len(ranks) > 1:
        out += _rank_table(analysis)
    return out + "</section>"


def _rank_table(analysis: Analysis) -> str:
    rows = []
    for r, s in sorted(analysis.summary.get("ranks", {}).items()):
        rows.append(
            "<tr>"
            f"<td class='num'>{r}</td>"
            f"<td class='num'>{s.get('n_steps', '–')}</td>"
            f"<td class='num'>{fmt_ns(_stat(s, 'step_ns'))}</td>"
            f"<td class='num'>{fmt_ns(_stat(s, 'exposed_comm_ns'))}</td>"
            f"<td class='num'>{_pct(_stat(s, 'exposed_comm_ratio'))}</td>"
            f"<td class='num'>{_pct(s.get('overlap_ratio'))}</td>"
            f"<td class='num'>{_speedup(s.get('potential_speedup'))}</td>"
            f"<td>{_e(s.get('dominant_bottleneck', '–'))}</td>"
            "</tr>"
        )
    return (
        "<h3>Per rank</h3><table class='data'><thead><tr><th>rank</th><th>steps</th>"
        "<th>median step</th><th>median exposed</th><th>exposed % (median)</th>"
        "<th>overlap ratio</th><th>potential speedup</th><th>dominant bottleneck</th>"
        "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
    )


# --- per-step bars and heatmap ------------------------------------------------------------


def _bars_section(page: _Page, steps: pd.DataFrame, several: bool) -> str:
    ranks = [int(r) for r in steps["rank"].tolist()]
    keys = [figs.step_sort_key(s) for s in steps["step"].tolist()]
    order = sorted(range(len(steps)), key=lambda i: (ranks[i], keys[i]))
    ordered = steps.iloc[order]
    return (
        "<section id='steps'><h2>Where each step's time goes</h2>"
        "<p class='explain'>Each bar is one step"
        + (" of one rank" if several else "")
        + ", split into parts that add up to the step: compute with no communication under it, "
        "communication hidden behind compute (overlapped), communication nothing hid (exposed), "
        "memory copies with neither, and idle time when the device did nothing."
        + (
            " With several ranks, exposed communication is split into time spent waiting for a "
            "later rank to arrive and the transfer itself."
            if "exposed_wait_ns" in steps.columns
            else ""
        )
        + "</p>"
        + page.plot("tov-plot-steps", figs.step_bars(ordered, several))
        + "</section>"
    )


def _heatmap_section(page: _Page, steps: pd.DataFrame) -> str:
    return (
        "<section id='heatmap'><h2>Exposed communication by rank and step</h2>"
        "<p class='explain'>A rank that is darker than the others in the same step waited longer "
        "for its collectives: look for a straggling peer or an unbalanced load.</p>"
        + page.plot("tov-plot-heatmap", figs.exposed_heatmap(steps))
        + "</section>"
    )


# --- the timeline of one step ---------------------------------------------------------------


@dataclass
class _Detail:
    html: str
    rank: int
    step: Any
    step_index: int
    origin: int
    comm: pd.DataFrame  # comm activities of the step with their exposed part


def _lane_order(lanes: pd.DataFrame) -> list[str]:
    """GPU streams first (by stream number), then host threads (by thread id), then the rest."""
    g = lanes.groupby("lane", observed=True, sort=True).agg(
        stream=("stream", "min"), tid=("tid", "min")
    )
    g = g.reset_index()
    g["gpu"] = (g["stream"] < 0).astype(int)
    g["lane"] = g["lane"].astype(str)
    return g.sort_values(["gpu", "stream", "tid", "lane"], kind="stable")["lane"].tolist()


def _phases(
    analysis: Analysis, rank: int, gpu: bool, lo: int, hi: int
) -> tuple[np.ndarray, np.ndarray, list[str]] | None:
    ev = analysis.timeline.events
    cat = "gpu_annotation" if gpu else "annotation"
    m = (ev["rank"].to_numpy() == rank) & (ev["category"] == cat).to_numpy()
    m &= (ev["start_ns"].to_numpy() < hi) & (ev["end_ns"].to_numpy() > lo)
    cand = ev.loc[m, ["name", "start_ns", "end_ns"]]
    if cand.empty:
        return None
    names = cand["name"].astype(str)
    step_rx = re.compile(analysis.step_regex or r"^ProfilerStep#(\d+)$")
    keep = names.map(lambda s: bool(PHASE_RE.search(s)) and not step_rx.search(s))
    cand = cand[keep.to_numpy()]
    if cand.empty:
        return None
    # one row of phases: earliest first, and a phase overlapping the one kept before it is
    # dropped (nested ranges such as DDP.forward inside "## forward ##" would hide each other)
    cand = cand.sort_values(["start_ns", "end_ns"], ascending=[True, False], kind="stable")
    keep_rows = []
    last_end = np.iinfo(np.int64).min
    for i, (a, b) in enumerate(
        zip(cand["start_ns"].tolist(), cand["end_ns"].tolist(), strict=True)
    ):
        if a >= last_end:
            keep_rows.append(i)
            last_end = b
        if len(keep_rows) >= figs.PHASE_CAP:
            break
    cand = cand.iloc[keep_rows]
    s = np.maximum(cand["start_ns"].to_numpy(np.int64), lo)
    e = np.minimum(cand["end_ns"].to_numpy(np.int64), hi)
    return s, e, cand["name"].astype(str).tolist()


def _timeline_section(
    page: _Page, analysis: Analysis, rank: int, step: Any, explicit: bool
) -> _Detail:
    win = analysis.windows
    wrow = win[(win["rank"] == rank) & (win["step"].astype(str) == str(step))].iloc[0]
    idx = int(wrow["step_index"])
    lo, hi = int(wrow["start_ns"]), int(wrow["end_ns"])
    timeline, table = analysis.timeline, analysis.step_table
    acts = activity_rows(timeline, table, only=[idx])
    sel = acts.group == idx
    ev = timeline.events
    rows = ev.iloc[acts.event_row[sel]][
        [
            "lane",
            "stream",
            "tid",
            "name",
            "coll_name",
            "coll_bytes",
            "process_group",
            "seq",
            "group_size",
        ]
    ].reset_index(drop=True)
    rows["kind"] = np.array(["compute", "comm", "memory", "none"], dtype=object)[acts.kind[sel]]
    rows["start_ns"] = acts.start_ns[sel]
    rows["end_ns"] = acts.end_ns[sel]
    rows["lane"] = rows["lane"].astype(str)
    sets = step_sets(timeline, table, idx)
    gpu = bool(
        np.isin(ev["category"].to_numpy()[acts.event_row[sel]], GPU_ACTIVITY_CATEGORIES).any()
    )

    # which (lane, kind) pairs get one bar per activity: the smallest first, within the budget
    counts = rows.groupby(["lane", "kind"], observed=True, sort=True).size().reset_index(name="n")
    counts = counts.sort_values(["n", "lane", "kind"], kind="stable")
    detailed = set()
    budget = figs.DETAIL_BUDGET
    for lane, kind, n in counts.itertuples(index=False):
        if n <= budget:
            detailed.add((lane, str(kind)))
            budget -= int(n)
    lanes = []
    unit = "kernels" if gpu else "ops"
    for lane in _lane_order(rows):
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
                    k.assign(start_ns=s - lo, dur_ns=e - s), lane, figs.KIND_LABELS[kind]
                )
            else:
                ms, me, gap = figs.coarsen(s, e, figs.SPAN_CAP)
                fl.intervals[kind] = (ms, me)
                fl.hover[kind] = figs.merged_hover(
                    s, e, ms, me, lane, figs.KIND_LABELS[kind], lo, unit
                )
                how = f"closing gaps up to {fmt_ns(gap)}" if gap else "their union"
                page.merged.append(
                    f"rank {rank} step {step}, {lane}, {figs.KIND_LABELS[kind]}: "
                    f"{len(k):,} {unit} drawn as {ms.size:,} merged span{'s' if ms.size != 1 else ''} ({how})"
                )
        lanes.append(fl)

    bands = []
    for key, label in (("exposed", "exposed comm"), ("overlap", "overlapped")):
        s, e = sets[key]
        ms, me, gap = figs.coarsen(s, e, figs.BAND_CAP)
        if gap:
            page.merged.append(
                f"rank {rank} step {step}, {label} band: {s.size:,} spans drawn as {ms.size:,} "
                f"(gaps up to {fmt_ns(gap)} closed)"
            )
        band = figs.Lane(label)
        band.intervals[key] = (ms, me)
        band.hover[key] = None
        bands.append(band)
    phases = _phases(analysis, rank, gpu, lo, hi)
    shade = bands[0].intervals["exposed"]
    fig = figs.timeline_figure(lanes, bands, phases, shade, lo, hi - lo)

    srow = analysis.steps[
        (analysis.steps["rank"] == rank) & (analysis.steps["step"].astype(str) == str(step))
    ].iloc[0]
    why = "as asked" if explicit else "the median step by step time"
    comm = rows[rows["kind"] == "comm"].copy()
    comm["exposed_ns"] = figs.covered_length(
        comm["start_ns"].to_numpy(np.int64), comm["end_ns"].to_numpy(np.int64), sets["exposed"]
    )
    name = _step_name(step)
    choose = (
        ""
        if str(step) == "all"
        else f"{why}; choose another with <code>--timeline-step N</code> / "
    )
    text = (
        f"<section id='timeline'><h2>Timeline of {name} on rank {rank}</h2>"
        f"<p class='explain'>{name[0].upper() + name[1:]} ({choose}"
        f"<code>--timeline-rank R</code>): {fmt_ns(srow['step_ns'])} window, "
        f"compute {fmt_ns(srow['compute_ns'])}, communication {fmt_ns(srow['comm_ns'])} of which "
        f"{fmt_ns(srow['overlap_ns'])} overlapped and "
        f"<b class='exposed-text'>{fmt_ns(srow['exposed_comm_ns'])} exposed</b>; "
        f"idle {fmt_ns(srow['idle_ns'])}. Bottleneck: <b>{_e(srow['bottleneck'])}</b> ({_e(srow['reason'])}).</p>"
        "<p class='explain'>One row per GPU stream or host thread: compute in blue, communication "
        "in orange, memory copies in grey. The <b>exposed comm</b> and <b>overlapped</b> rows are "
        "the step's exposed and hidden communication; exposed spans are also shaded across every "
        "row. Hover a bar for its name, duration and collective; drag to zoom, double-click to "
        "reset.</p>" + page.plot("tov-plot-timeline", fig) + "</section>"
    )
    return _Detail(text, rank, step, idx, lo, comm)


def _top_rows(analysis: Analysis, detail: _Detail) -> tuple[pd.DataFrame, str]:
    """The table's rows: matched collective instances when the run has several ranks (with the
    time spent waiting for a later rank), else the step's communication activities.

    Columns: name, coll, bytes, where, start_ns, dur_ns, wait_ns (or -1), exposed_ns, end_ns.
    """
    coll = analysis.collectives
    if coll is not None and hasattr(coll, "per_rank") and not coll.per_rank.empty:
        pr = coll.per_rank
        pr = pr[(pr["rank"] == detail.rank) & (pr["step_index"] == detail.step_index)]
        if not pr.empty:
            inst = coll.instances.set_index("instance")
            info = inst.reindex(pr["instance"].to_numpy())
            group = info["process_group"].astype(object).to_numpy()
            seq = info["seq"].astype(object).to_numpy()
            where = [
                " · ".join(
                    x
                    for x in (
                        f"group {g}" if g is not None and str(g) not in ("", "nan") else "",
                        f"seq {int(q)}" if q is not None and not pd.isna(q) else "",
                    )
                    if x
                )
                or "–"
                for g, q in zip(group.tolist(), seq.tolist(), strict=True)
            ]
            rows = pd.DataFrame(
                {
                    "name": info["name"].astype(str).to_numpy(),
                    "coll": info["name"].astype(str).to_numpy(),
                    "bytes": [
                        -1 if b is None or pd.isna(b) else int(b)
                        for b in info["bytes"].astype(object).tolist()
                    ],
                    "where": where,
                    "start_ns": pr["start_ns"].to_numpy(np.int64),
                    "dur_ns": pr["dur_ns"].to_numpy(np.int64),
                    "wait_ns": pr["wait_ns"].to_numpy(np.int64),
                    "exposed_ns": pr["exposed_ns"].to_numpy(np.int64),
                    "end_ns": pr["end_ns"].to_numpy(np.int64),
                }
            )
            return rows, "collectives matched across ranks"
    c = detail.comm
    rows = pd.DataFrame(
        {
            "name": c["name"].astype(str).to_numpy(),
            "coll": c["coll_name"].astype(str).to_numpy(),
            "bytes": c["coll_bytes"].to_numpy(np.int64),
            "where": c["lane"].astype(str).to_numpy(),
            "start_ns": c["start_ns"].to_numpy(np.int64),
            "dur_ns": (c["end_ns"] - c["start_ns"]).to_numpy(np.int64),
            "wait_ns": np.full(len(c), -1, np.int64),
            "exposed_ns": c["exposed_ns"].to_numpy(np.int64),
            "end_ns": c["end_ns"].to_numpy(np.int64),
        }
    )
    return rows, "communication activities"


def _collectives_table(analysis: Analysis, detail: _Detail) -> str:
    head = (
        f"<section id='collectives'><h2>Top exposed collectives in {_step_name(detail.step)} "
        f"(rank {detail.rank})</h2>"
    )
    rows, what = _top_rows(analysis, detail)
    if rows.empty:
        return head + "<p class='explain'>This step has no communication.</p></section>"
    top = rows.sort_values(["exposed_ns", "start_ns"], ascending=[False, True], kind="stable")
    top = top[top["exposed_ns"] > 0].head(TOP_COLLECTIVES)
    if top.empty:
        return head + (
            f"<p class='explain'>None: all {len(rows):,} {what} of this step were "
            "hidden behind compute.</p></section>"
        )
    has_wait = bool((rows["wait_ns"] >= 0).any())
    last_end = int(rows["end_ns"].max())
    out = []
    for r in top.to_dict("records"):
        name = str(r["name"])
        last = " <span class='tag'>last in step</span>" if int(r["end_ns"]) == last_end else ""
        dur, exposed = int(r["dur_ns"]), int(r["exposed_ns"])
        wait = f"<td class='num'>{fmt_ns(int(r['wait_ns']))}</td>" if has_wait else ""
        out.append(
            "<tr>"
            f"<td class='name' title='{_e(name)}'>{_e(figs.short(figs.display_name(name), 80))}{last}</td>"
            f"<td>{_e(str(r['coll']) or '–')}</td>"
            f"<td class='num'>{fmt_bytes(int(r['bytes']))}</td>"
            f"<td>{_e(r['where'])}</td>"
            f"<td class='num'>+{fmt_ns(int(r['start_ns']) - detail.origin)}</td>"
            f"<td class='num'>{fmt_ns(dur)}</td>"
            + wait
            + f"<td class='num exposed-text'>{fmt_ns(exposed)}</td>"
            f"<td class='num'>{_pct(exposed / dur if dur else None)}</td>"
            "</tr>"
        )
    wait_head = "<th class='num'>waiting for peers</th>" if has_wait else ""
    wait_text = (
        " <i>Waiting</i> is the part of the collective's duration spent waiting for the last rank "
        "to arrive (its duration minus the shortest duration of the same collective on any rank)."
        if has_wait
        else ""
    )
    return (
        head + f"<p class='explain'>The {what} with the most exposed time (the part not covered "
        f"by any compute on this rank), largest first; {len(rows):,} in the step.{wait_text}</p>"
        "<table class='data'><thead><tr><th>name</th><th>collective</th><th class='num'>size</th>"
        f"<th>{'group' if has_wait else 'lane'}</th><th class='num'>start</th>"
        f"<th class='num'>duration</th>{wait_head}<th class='num'>exposed</th>"
        "<th class='num'>exposed share</th></tr></thead><tbody>"
        + "".join(out)
        + "</tbody></table></section>"
    )


def _across_ranks(analysis: Analysis) -> str:
    """Waiting vs transfer and the stragglers, from :mod:`traceoverlap.collectives` when present."""
    coll = analysis.collectives
    if coll is None or not hasattr(coll, "stragglers"):
        return ""
    inst, per = coll.instances, coll.per_rank
    if inst.empty:
        return (
            "<section id='stragglers'><h2>Across ranks</h2><p class='explain'>No collective could "
            "be matched across the ranks, so waiting and transfer are not split (see the caveats "
            "above).</p></section>"
        )
    parts = [
        "<section id='stragglers'><h2>Across ranks: waiting vs transfer, stragglers</h2>",
        f"<p class='explain'>{len(inst):,} collectives matched on {len(coll.stragglers)} ranks. "
        "A collective finishes together on every rank, so a rank that arrives early waits for the "
        "last one: its duration minus the shortest duration of that collective on any rank is "
        "<i>waiting</i>, the rest is <i>transfer</i>.</p>",
    ]
    total = int(per["dur_ns"].sum()) if not per.empty else 0
    wait = int(per["wait_ns"].sum()) if not per.empty else 0
    split = coll.step_split
    ew = int(split["exposed_wait_ns"].sum()) if not split.empty else 0
    et = int(split["exposed_transfer_ns"].sum()) if not split.empty else 0
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
            f"{_pct(ew / (ew + et) if ew + et else None)} of all exposed comm; "
            f"{fmt_ns(et)} is transfer",
            "wait",
        ),
    ]
    top = coll.top_straggler if hasattr(coll, "top_straggler") else None
    if top is not None:
        cards.append(_card("most waited-for rank", f"rank {top}", "arrived last most often", ""))
    parts.append("<div class='cards'>" + "".join(cards) + "</div>")
    st = coll.stragglers
    if coll.aligned and not st.empty:
        rows = []
        for r in st.to_dict("records"):
            rows.append(
                "<tr>"
                f"<td class='num'>{int(r['rank'])}</td>"
                f"<td class='num'>{int(r['instances']):,}</td>"
                f"<td class='num'>{int(r['last_count']):,} ({_pct(r['last_ratio'])})</td>"
                f"<td class='num'>{fmt_ns(int(r['waited_for_ns']))}</td>"
                f"<td class='num'>{fmt_ns(int(r['wait_ns']))}</td>"
                "</tr>"
            )
        parts.append(
            "<h3>Who the others waited for</h3><table class='data'><thead><tr>"
            "<th class='num'>rank</th><th class='num'>collectives</th><th class='num'>arrived last</th>"
            "<th class='num'>others waited for it</th><th class='num'>it waited for others</th>"
            "</tr></thead><tbody>" + "".join(rows) + "</tbody></table>"
        )
    elif not coll.aligned:
        parts.append(
            "<p class='explain'>Arrival order is not shown: the ranks' clocks could not be aligned.</p>"
        )
    skew = coll.step_skew
    if not skew.empty:
        worst = skew.sort_values(["skew_ns", "step"], ascending=[False, True], kind="stable").head(
            8
        )
        rows = [
            "<tr>"
            f"<td>{_e(r['step'])}</td>"
            f"<td class='num'>{fmt_ns(int(r['skew_ns']))}</td>"
            f"<td class='num'>{int(r['slowest_rank'])} ({fmt_ns(int(r['max_step_ns']))})</td>"
            f"<td class='num'>{int(r['fastest_rank'])} ({fmt_ns(int(r['min_step_ns']))})</td>"
            "</tr>"
            for r in worst.to_dict("records")
        ]
        parts.append(
            "<h3>Step-time skew across ranks (largest first)</h3><table class='data'><thead><tr>"
            "<th>step</th><th class='num'>skew</th><th class='num'>slowest rank</th>"
            "<th class='num'>fastest rank</th></tr></thead><tbody>"
            + "".join(rows)
            + "</tbody></table>"
        )
    parts.append("</section>")
    return "".join(parts)


# --- advice -------------------------------------------------------------------------------

_ADVICE: dict[str, str] = {
    "communication-bound": (
        "<b>Communication-bound</b> ({n} steps): there is more communication than compute, so even "
        "perfect overlap leaves some exposed. Move fewer bytes or move them faster: gradient "
        "compression or low-precision communication hooks (DDP <code>register_comm_hook</code> with "
        "bf16/fp16 or PowerSGD), a larger per-GPU batch or gradient accumulation "
        "(<code>no_sync()</code>) to amortise each all-reduce, fewer/larger collectives, or a faster "
        "interconnect (NVLink, InfiniBand, topology-aware placement)."
    ),
    "exposed-communication": (
        "<b>Exposed communication</b> ({n} steps): compute would be long enough to hide the "
        "communication, but it is not scheduled under it. Start communication earlier and keep the "
        "tail short: smaller gradient buckets (DDP <code>bucket_cap_mb</code>) so the last all-reduce "
        "after backward is small, parameters ordered so gradients become ready in bucket order, "
        "<code>gradient_as_bucket_view=True</code>, avoid <code>find_unused_parameters</code>, and "
        "overlap the optimizer step with the remaining communication."
    ),
    "idle-bound": (
        "<b>Idle-bound</b> ({n} steps): the device waits for the host or for a peer. Look for launch "
        "overhead (many tiny kernels: CUDA graphs, <code>torch.compile</code>, larger batches), host "
        "synchronisation (<code>.item()</code>, <code>.cpu()</code>, printing tensors), a slow input "
        "pipeline (more DataLoader workers, <code>pin_memory</code>), or a straggling rank."
    ),
    "compute-bound": (
        "<b>Compute-bound</b> ({n} steps): communication is hidden well enough; the step is as long "
        "as its compute. Speed up the compute itself (mixed precision, fused kernels, "
        "<code>torch.compile</code>); communication is not what to fix."
    ),
}


def _next_steps(analysis: Analysis, detail: _Detail) -> str:
    counts: dict[str, int] = analysis.summary.get("run", {}).get("bottlenecks", {})
    items = []
    for cls in sorted(counts, key=lambda c: (-counts[c], c)):
        text = _ADVICE.get(cls)
        if text is not None:
            items.append("<li>" + text.format(n=counts[cls]) + "</li>")
    comm = detail.comm
    if not comm.empty and int(comm["exposed_ns"].sum()) > 0:
        worst = comm.sort_values(
            ["exposed_ns", "start_ns"], ascending=[False, True], kind="stable"
        ).iloc[0]
        if int(worst["end_ns"]) == int(comm["end_ns"].max()):
            items.insert(
                0,
                f"<li><b>The last collective of {_step_name(detail.step)} is the most exposed</b> "
                f"({fmt_ns(int(worst['exposed_ns']))} of {fmt_ns(int(worst['end_ns'] - worst['start_ns']))}): "
                "the classic late last bucket. Nothing is left to compute when it starts; a smaller "
                "final bucket, or an earlier start of the bucket's all-reduce, shortens the tail.</li>",
            )
    if len(analysis.steps["rank"].unique()) > 1 and counts.get("idle-bound", 0):
        items.append(
            "<li>Several ranks: compare them in the heatmap above; one rank with little exposed "
            "time while the others wait points at that rank as the straggler.</li>"
        )
    if not items:
        return ""
    return (
        "<section id='next'><h2>What to try next</h2><ul class='advice'>"
        + "".join(items)
        + "</ul></section>"
    )


def _merged_section(page: _Page) -> str:
    if not page.merged:
        return ""
    return (
        "<section id='merged'><h2>What the drawing simplified</h2><p class='explain'>Dense lanes are "
        "drawn as merged spans to keep this file small and the browser responsive; the numbers above "
        "are computed from every activity.</p><ul>"
        + "".join(f"<li>{_e(m)}</li>" for m in page.merged)
        + "</ul></section>"
    )
