"""Plotly figures of the HTML report: per-step stacked bars, one-step timeline, rank x step heatmap.

Formatting only: every duration drawn here comes from the analysis (the step table and the
:class:`~traceoverlap.rank.detail.StepDetail` of one step). What this module decides is how to
*draw* them within a size budget: dense lanes are drawn as merged spans (see :func:`coarsen`),
and every merge is reported back to the page so the reader knows what was simplified.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import plotly.graph_objects as go

from ..core import intervals as iv
from ..core.fmt import duration as fmt_ns
from ..core.fmt import size as fmt_bytes
from ..core.schema import (
    COMPUTE_ONLY_NS,
    EXPOSED_BY_CAUSE,
    EXPOSED_COMM_NS,
    EXPOSED_COMM_RATIO,
    IDLE_NS,
    MEMORY_ONLY_NS,
    OTHER_STEPS_NS,
    OVERLAP_NS,
    RANK,
    STEP,
    STEP_NS,
)
from ..core.vocab import CAUSE_WORDS, KIND_WORDS, ActivityKind, Cause

IntArray = npt.NDArray[np.int64]

# Okabe-Ito palette: distinguishable under the common colour-vision deficiencies.
COLORS: dict[str, str] = {
    "compute": "#0072B2",  # blue
    "comm": "#E69F00",  # orange
    "memory": "#999999",  # grey
    "overlap": "#009E73",  # bluish green: communication hidden behind compute
    "exposed": "#D55E00",  # vermillion: communication nothing hid
    Cause.WAIT: "#CC79A7",  # reddish purple: exposed comm spent waiting for a later rank
    Cause.TAIL: "#D55E00",  # vermillion: nothing left to compute under it
    Cause.DEPENDENCY: "#F0E442",  # yellow: compute was queued but waited for it
    Cause.HOST: "#56B4E9",  # sky blue: the host had not launched the next compute
    "idle": "#E3E3E3",
    "other_steps": "#B8C4D6",
}
CAUSE_LABELS: dict[str, str] = {c: f"exposed: {words}" for c, words in CAUSE_WORDS.items()}
FONT = dict(
    family="system-ui, -apple-system, 'Segoe UI', Roboto, 'Helvetica Neue', Arial, sans-serif",
    size=13,
    color="#222",
)

#: Per-event bars (with their own hover) across the whole timeline; beyond it lanes are merged.
DETAIL_BUDGET = 6000
#: Most spans one (lane, kind) may draw after merging.
SPAN_CAP = 1500
#: Most spans the exposed / overlapped bands may draw: they are what the reader came for.
BAND_CAP = 4000
#: Phase ranges drawn at most (labels beyond this would be unreadable anyway).
PHASE_CAP = 200
#: Longest kernel name shown in a hover box.
NAME_CHARS = 90


def base_layout(**kw: Any) -> dict[str, Any]:
    """Shared look: no template blob in the file, white paper, legible fonts, fixed margins."""
    layout: dict[str, Any] = dict(
        template="none",
        font=FONT,
        paper_bgcolor="white",
        plot_bgcolor="white",
        hoverlabel=dict(font=dict(family=FONT["family"], size=12), align="left"),
        legend=dict(orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0),
        margin=dict(l=70, r=20, t=40, b=50),
    )
    layout.update(kw)
    return layout


# --- per-step stacked bars ----------------------------------------------------------------


#: The parts of a step in the bars, bottom up: (label, colour) per step column.
_PART_STYLE = {
    COMPUTE_ONLY_NS.name: ("compute only", COLORS["compute"]),
    OVERLAP_NS.name: ("overlapped comm", COLORS["overlap"]),
    **{col.name: (CAUSE_LABELS[c], COLORS[c]) for c, col in EXPOSED_BY_CAUSE.items()},
    MEMORY_ONLY_NS.name: ("memory only", COLORS["memory"]),
    OTHER_STEPS_NS.name: ("other steps' work", COLORS["other_steps"]),
    IDLE_NS.name: ("idle", COLORS["idle"]),
}


def step_components(steps: pd.DataFrame) -> pd.DataFrame:
    """The parts a step's time splits into, straight from the step table (ns): compute only,
    overlapped, the exposed communication by cause (waiting for a peer, nothing left to compute,
    compute waited for it, host not ready), memory only and idle. They add up to ``step_ns``
    (docs/diagnosis.md §1 and §3)."""
    return steps[list(_PART_STYLE)].astype(np.int64)


def step_bars(steps: pd.DataFrame, several_ranks: bool, y_max_ms: float | None = None) -> go.Figure:
    """Stacked bar per (rank, step) of the parts in :func:`step_components` (only the parts some
    step has). ``y_max_ms``: a fixed y range (two runs side by side share one scale)."""
    parts = step_components(steps)
    labels = [str(s) for s in steps[STEP.name]]
    x: Any = [[f"rank {r}" for r in steps[RANK.name]], labels] if several_ranks else labels
    step_ms = (steps[STEP_NS.name].astype(np.int64) / 1e6).round(4).to_numpy()
    fig = go.Figure()
    for col, (name, color) in _PART_STYLE.items():
        if not (parts[col] > 0).any() and col not in (COMPUTE_ONLY_NS.name, IDLE_NS.name):
            continue
        ms = (parts[col] / 1e6).round(4).to_numpy()
        fig.add_trace(
            go.Bar(
                x=x,
                y=ms,
                name=name,
                marker=dict(color=color, line=dict(width=0)),
                customdata=np.stack(
                    [step_ms, np.where(step_ms > 0, 100 * ms / np.maximum(step_ms, 1e-12), 0)], 1
                ).round(2),
                hovertemplate=(
                    f"<b>{name}</b><br>%{{y:.3f}} ms (%{{customdata[1]:.1f}}% of the "
                    "%{customdata[0]:.3f} ms step)<extra></extra>"
                ),
            )
        )
    n = len(steps)
    yaxis: dict[str, Any] = dict(title=dict(text="time (ms)"), gridcolor="#e6e6e6", zeroline=False)
    if y_max_ms is not None:
        yaxis["range"] = [0, y_max_ms]
    fig.update_layout(
        **base_layout(
            barmode="stack",
            bargap=0.25 if n > 3 else 0.5,
            height=400,
            yaxis=yaxis,
            xaxis=dict(
                title=dict(text="step"), type="multicategory" if several_ranks else "category"
            ),
            legend=dict(
                orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0, traceorder="normal"
            ),
            margin=dict(l=70, r=20, t=70, b=70 if several_ranks else 50),
        )
    )
    return fig


# --- heatmap ------------------------------------------------------------------------------


def exposed_heatmap(steps: pd.DataFrame) -> go.Figure:
    """Rank x step heatmap of exposed communication (ms), numbers from the step table."""
    pv = steps.assign(
        step_label=steps[STEP.name].astype(str),
        exposed_ms=steps[EXPOSED_COMM_NS.name].astype(np.int64) / 1e6,
        ratio=pd.to_numeric(steps[EXPOSED_COMM_RATIO.name], errors="coerce").astype(float) * 100,
    )
    step_order = sorted(set(pv["step_label"]), key=step_sort_key)
    ranks = sorted(pv["rank"].unique().tolist())
    z = pv.pivot_table(index="rank", columns="step_label", values="exposed_ms", aggfunc="first")
    z = z.reindex(index=ranks, columns=step_order)
    pct = pv.pivot_table(index="rank", columns="step_label", values="ratio", aggfunc="first")
    pct = pct.reindex(index=ranks, columns=step_order)
    zv = z.to_numpy(dtype=float).round(4)
    show_text = zv.size <= 400
    fig = go.Figure(
        go.Heatmap(
            z=zv,
            x=[str(s) for s in step_order],
            y=[f"rank {r}" for r in ranks],
            customdata=pct.to_numpy(dtype=float).round(2),
            colorscale=[[0.0, "#FFF7EC"], [0.5, "#FC8D59"], [1.0, "#7F0000"]],
            # anchored at 0 so that colour means "how much", not "more than the best rank"
            zmin=0,
            zmax=float(np.nanmax(zv)) if np.isfinite(zv).any() and np.nanmax(zv) > 0 else 1.0,
            colorbar=dict(title=dict(text="exposed<br>comm (ms)")),
            hovertemplate="%{y}, step %{x}<br>exposed comm %{z:.3f} ms (%{customdata:.1f}% of the step)<extra></extra>",
            texttemplate="%{z:.1f}" if show_text else None,
            xgap=2,
            ygap=2,
        )
    )
    fig.update_layout(
        **base_layout(
            height=max(220, 60 + 34 * len(ranks)),
            xaxis=dict(title=dict(text="step"), type="category"),
            yaxis=dict(autorange="reversed", type="category"),
            margin=dict(l=80, r=20, t=20, b=50),
        )
    )
    return fig


# --- timeline -----------------------------------------------------------------------------


def coarsen(starts: IntArray, ends: IntArray, cap: int) -> tuple[IntArray, IntArray, int]:
    """Draw at most ``cap`` spans: union the intervals, then close the smallest gaps.

    Returns (starts, ends, closed_gap_ns): the largest gap that was closed (0 when only the union
    was needed). The result covers the union plus gaps no wider than ``closed_gap_ns``; it is for
    drawing only, never for measuring.
    """
    s, e = iv.union(starts, ends)
    if s.size <= cap:
        return s, e, 0
    gaps = s[1:] - e[:-1]
    # close every gap up to the cap-th widest: at most cap - 1 wider gaps remain as breaks
    # (ties at the threshold are closed too, so there are never more than cap spans)
    threshold = np.partition(gaps, gaps.size - cap)[gaps.size - cap]
    breaks = np.flatnonzero(gaps > threshold)
    keep_s = np.concatenate(([0], breaks + 1))
    keep_e = np.concatenate((breaks, [s.size - 1]))
    closed = gaps[gaps <= threshold]
    return s[keep_s], e[keep_e], int(closed.max()) if closed.size else 0


def merged_hover(
    starts: IntArray,
    ends: IntArray,
    span_s: IntArray,
    span_e: IntArray,
    lane: str,
    kind: str,
    origin: int,
    unit: str,
) -> list[str]:
    """Hover text of merged spans: how many activities each holds and how busy it really is.

    ``starts`` must be sorted; the spans come from :func:`coarsen` of these intervals.
    """
    count = np.searchsorted(starts, span_e, side="left") - np.searchsorted(
        starts, span_s, side="left"
    )
    us, ue = iv.union(starts, ends)
    z = np.zeros(span_s.size, np.int64)
    busy = iv.grouped_covered((np.zeros(us.size, np.int64), us, ue), z, span_s, span_e, 1)
    label = html.escape(lane)
    return [
        f"<b>{label}</b> · {kind}, merged span<br>{n:,} {unit}, busy {fmt_ns(b)} of "
        f"{fmt_ns(e - s)} from +{fmt_ns(s - origin)}"
        for n, b, s, e in zip(
            count.tolist(), busy.tolist(), span_s.tolist(), span_e.tolist(), strict=True
        )
    ]


@dataclass
class Lane:
    """One row of the timeline: a GPU stream / CPU thread, or a derived band."""

    label: str
    intervals: dict[str, tuple[IntArray, IntArray]] = field(default_factory=dict)
    # per kind: hover text per interval (detailed) or None (merged spans)
    hover: dict[str, list[str] | None] = field(default_factory=dict)


def rects(
    starts: IntArray, ends: IntArray, origin: int, y0: float, y1: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """x/y arrays of closed rectangles (for ``fill='toself'``), NaN-separated, ms since origin."""
    n = starts.size
    xs = (starts - origin) / 1e6
    xe = (ends - origin) / 1e6
    x = np.full(6 * n, np.nan)
    y = np.full(6 * n, np.nan)
    x[0::6], x[1::6], x[2::6], x[3::6], x[4::6] = xs, xe, xe, xs, xs
    y[0::6], y[1::6], y[2::6], y[3::6], y[4::6] = y0, y0, y1, y1, y0
    return x.round(6), y


def timeline_figure(
    lanes: Sequence[Lane],
    bands: Sequence[Lane],
    phases: tuple[IntArray, IntArray, Sequence[str]] | None,
    exposed: tuple[IntArray, IntArray],
    origin: int,
    window_ns: int,
) -> go.Figure:
    """The one-step timeline.

    Rows from the top: phases (if any), the derived bands (exposed comm by cause, overlapped),
    then one row per lane. Every span is a real horizontal bar (``go.Bar`` with a base), so the
    hover box appears anywhere over a bar and names that bar, never a neighbour's; bars have no
    outline, so a 1 µs span stays 1 µs wide at any zoom (sub-pixel spans are not inflated into
    solid blocks). Exposed spans are also shaded faintly across all rows.
    """
    rows: list[str] = []
    if phases is not None:
        rows.append("phases")
    rows.extend(b.label for b in bands)
    rows.extend(lane.label for lane in lanes)
    fig = go.Figure()
    if exposed[0].size:
        fig.add_trace(_exposed_shading(exposed, origin, len(rows)))
    bars = _Bars(fig, {label: i for i, label in enumerate(rows)}, origin)
    if phases is not None:
        _add_phases(bars, phases, window_ns)
    for band in bands:
        for kind, (s, e) in band.intervals.items():
            bars.add(
                band.label, s, e, COLORS[kind], _BAND_LEGEND.get(kind, kind), band.hover.get(kind)
            )
    for lane in lanes:
        for kind in ("compute", "comm", "memory"):
            if kind in lane.intervals:
                s, e = lane.intervals[kind]
                bars.add(lane.label, s, e, COLORS[kind], KIND_WORDS[kind], lane.hover.get(kind))
    fig.update_layout(**_timeline_layout(rows, window_ns))
    return fig


def _exposed_shading(exposed: tuple[IntArray, IntArray], origin: int, n_rows: int) -> go.Scatter:
    """The faint shading of the exposed spans (ns) across every row, as filled rectangles."""
    xs, ys = rects(exposed[0], exposed[1], origin, -0.5, n_rows - 0.5)
    return go.Scatter(
        x=xs,
        y=ys,
        mode="lines",
        fill="toself",
        fillcolor="rgba(213,94,0,0.08)",
        line=dict(width=0),
        hoverinfo="skip",
        showlegend=False,
        name="exposed (shading)",
    )


@dataclass
class _Bars:
    """Adds horizontal bars to one timeline figure: ``row_y`` is the y of each row label,
    ``origin`` the ns drawn at x = 0; each legend name is shown once (``shown``)."""

    fig: go.Figure
    row_y: dict[str, int]
    origin: int
    shown: set[str] = field(default_factory=set)

    def add(
        self,
        label: str,
        s: IntArray,
        e: IntArray,
        color: str,
        name: str,
        hover: list[str] | None,
        width: float = 0.66,
    ) -> None:
        """One trace of bars [s, e) (ns) on row ``label`` (in ms since the origin); ``hover``
        None: a hover box with the row, ``name``, duration and offset of each bar."""
        if s.size == 0:
            return
        origin = self.origin
        if hover is None:
            hover = [
                f"<b>{html.escape(label)}</b> · {name}<br>{fmt_ns(int(b - a))} at "
                f"+{fmt_ns(int(a - origin))}"
                for a, b in zip(s.tolist(), e.tolist(), strict=True)
            ]
        self.fig.add_trace(
            go.Bar(
                base=((s - origin) / 1e6).round(6),
                x=((e - s) / 1e6).round(6),
                y=np.full(s.size, self.row_y[label], dtype=float),
                orientation="h",
                width=width,
                marker=dict(color=color, line=dict(width=0)),
                hovertext=hover,
                hovertemplate="%{hovertext}<extra></extra>",
                hoverlabel=dict(bgcolor="white", bordercolor=color),
                name=name,
                legendgroup=name,
                legendrank=_LEGEND_RANK.get(name, 50),
                showlegend=name not in self.shown,
            )
        )
        self.shown.add(name)


def _add_phases(
    bars: _Bars, phases: tuple[IntArray, IntArray, Sequence[str]], window_ns: int
) -> None:
    """The phases row: one grey bar per phase range (ns), and its name written over it when
    the range is at least 6 % of the window."""
    ps, pe, names = phases
    origin = bars.origin
    hover = [
        f"<b>{html.escape(n)}</b><br>{fmt_ns(int(b - a))} at +{fmt_ns(int(a - origin))}"
        for n, a, b in zip(names, ps.tolist(), pe.tolist(), strict=True)
    ]
    bars.add("phases", ps, pe, "rgba(120,120,120,0.30)", "phases", hover, width=0.76)
    mid = ((ps + pe) / 2 - origin) / 1e6
    bars.fig.add_trace(
        go.Scatter(
            x=mid.round(6),
            y=np.full(mid.size, bars.row_y["phases"], dtype=float),
            mode="text",
            text=[
                html.escape(short(n, 28)) if (b - a) >= 0.06 * window_ns else ""
                for n, a, b in zip(names, ps.tolist(), pe.tolist(), strict=True)
            ],
            textfont=dict(size=11, color="#333"),
            hoverinfo="skip",
            showlegend=False,
            name="phase labels",
        )
    )


def lanes_layout(
    height: int, x_title: str, span_ns: int, ticks: Sequence[str], **yaxis: Any
) -> dict[str, Any]:
    """A lanes figure's layout: x in ms from 0 to ``span_ns``, one row per tick, top down
    (the step timeline and the step across ranks share it)."""
    n = len(ticks)
    return base_layout(
        height=max(height, 260),
        barmode="overlay",
        hovermode="closest",
        xaxis=dict(
            title=dict(text=x_title),
            range=[0, span_ns / 1e6],
            gridcolor="#ececec",
            zeroline=False,
            showline=True,
            linecolor="#999",
        ),
        yaxis=dict(
            tickmode="array",
            tickvals=list(range(n)),
            ticktext=list(ticks),
            range=[n - 0.5, -0.5],
            fixedrange=True,
            showgrid=False,
            zeroline=False,
            automargin=True,
            **yaxis,
        ),
        margin=dict(l=10, r=20, t=50, b=55),
        dragmode="zoom",
    )


def _timeline_layout(rows: Sequence[str], window_ns: int) -> dict[str, Any]:
    """The timeline's layout: 30 px per row, x in ms over the step window, rows top down."""
    return lanes_layout(
        90 + 30 * len(rows) + 60,
        "time since the start of the step window (ms)",
        window_ns,
        [html.escape(r) for r in rows],
    )


_LEGEND_RANK = {
    KIND_WORDS[ActivityKind.COMPUTE]: 1,
    KIND_WORDS[ActivityKind.COMM]: 2,
    KIND_WORDS[ActivityKind.MEMORY]: 3,
    "overlapped": 4,
    CAUSE_LABELS[Cause.WAIT]: 5,
    CAUSE_LABELS[Cause.TAIL]: 6,
    CAUSE_LABELS[Cause.DEPENDENCY]: 7,
    CAUSE_LABELS[Cause.HOST]: 8,
    "phases": 9,
}

_BAND_LEGEND = {
    "overlap": "overlapped",
    **CAUSE_LABELS,
}


def step_sort_key(label: Any) -> tuple[int, int, str]:
    """Numbered steps in numeric order, then anything else (``all``) by name."""
    s = str(label)
    return (0, int(s), "") if s.isdigit() else (1, 0, s)


def display_name(name: str) -> str:
    """A kernel name without its trailing argument list: ``ncclKernel_AllReduce_RING_LL_Sum_float``
    for ``ncclKernel_AllReduce_RING_LL_Sum_float(ncclDevComm*, unsigned long, ncclWork*)``."""
    if not name.endswith(")"):
        return name
    depth = 0
    for i in range(len(name) - 1, -1, -1):
        c = name[i]
        if c == ")":
            depth += 1
        elif c == "(":
            depth -= 1
            if depth == 0:
                return name[:i].rstrip() if i > 0 else name
    return name


def short(s: str, n: int) -> str:
    return s if len(s) <= n else s[: n - 1] + "…"


def hover_texts(rows: pd.DataFrame, lane: str, kind: str) -> list[str]:
    """One hover text per activity: name, start, duration, collective metadata when known.

    ``rows`` has name, start_ns (relative to the window), dur_ns, and the collective columns.
    Bounded by the detail budget, so a Python comprehension over these rows is fine.
    """
    names = [html.escape(short(display_name(str(n)), NAME_CHARS)) for n in rows["name"].tolist()]
    start = rows["start_ns"].tolist()
    dur = rows["dur_ns"].tolist()
    coll = rows["coll_name"].astype(str).tolist()
    nbytes = rows["coll_bytes"].tolist()
    pg = rows["process_group"].astype(str).tolist()
    seq = rows["seq"].tolist()
    gsize = rows["group_size"].tolist()
    out = []
    label = html.escape(lane)
    for i in range(len(names)):
        t = f"<b>{names[i]}</b><br>{label} · {kind}<br>{fmt_ns(dur[i])} at +{fmt_ns(start[i])}"
        if coll[i]:
            extra = [html.escape(coll[i])]
            if nbytes[i] >= 0:
                extra.append(fmt_bytes(nbytes[i]))
            if pg[i]:
                extra.append(f"group {html.escape(pg[i])}")
            if gsize[i] >= 0:
                extra.append(f"{gsize[i]} ranks")
            if seq[i] >= 0:
                extra.append(f"seq {seq[i]}")
            t += "<br>" + " · ".join(extra)
        out.append(t)
    return out
