"""Plotly figures of the HTML report: per-step stacked bars, one-step timeline, rank x step heatmap.

Formatting only: every duration drawn here comes from the metrics layer (the step table, the
per-step interval sets of :func:`traceoverlap.metrics.step_sets` and the activity rows of
:func:`traceoverlap.metrics.activity_rows`). What this module decides is how to *draw* them within
a size budget: dense lanes are drawn as merged spans (see :func:`coarsen`), and every merge is
reported back to the page so the reader knows what was simplified.
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

from .. import intervals as iv

IntArray = npt.NDArray[np.int64]

# Okabe-Ito palette: distinguishable under the common colour-vision deficiencies.
COLORS: dict[str, str] = {
    "compute": "#0072B2",  # blue
    "comm": "#E69F00",  # orange
    "memory": "#999999",  # grey
    "overlap": "#009E73",  # bluish green: communication hidden behind compute
    "exposed": "#D55E00",  # vermillion: communication nothing hid
    "wait": "#CC79A7",  # reddish purple: exposed comm spent waiting for a later rank
    "idle": "#E3E3E3",
}
KIND_LABELS: dict[str, str] = {
    "compute": "compute",
    "comm": "communication",
    "memory": "memory",
}
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
#: Hover points above which the invisible hover markers are drawn with WebGL (scattergl).
WEBGL_POINTS = 3000
#: Longest kernel name shown in a hover box.
NAME_CHARS = 90


def fmt_ns(ns: float | int | None) -> str:
    """A duration for humans: ``12.35 ms`` / ``850 µs`` / ``420 ns``; ``–`` when unknown."""
    if ns is None or (isinstance(ns, float) and np.isnan(ns)):
        return "–"
    a = abs(float(ns))
    if a >= 1e9:
        return f"{ns / 1e9:.3f} s"
    if a >= 1e6:
        return f"{ns / 1e6:.2f} ms"
    if a >= 1e3:
        return f"{ns / 1e3:.1f} µs"
    return f"{int(ns)} ns"


def fmt_bytes(n: int | None) -> str:
    if n is None or n < 0:
        return "–"
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


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


def step_components(steps: pd.DataFrame) -> pd.DataFrame:
    """The five parts a step's time splits into, from the step table's columns, in ns.

    With C, M, B as in the metrics contract (overlap = |C ∩ M|, exposed = |M| − overlap,
    idle = step − |B|):
      compute only   |C| − overlap           = compute_ns − overlap_ns
      overlapped     |C ∩ M|                 = overlap_ns
      exposed comm   |M| − |C ∩ M|           = exposed_comm_ns
      memory only    |B| − |C ∪ M|           = step_ns − idle_ns − compute_ns − exposed_comm_ns
                     (|C ∪ M| = |C| + |M| − |C ∩ M| = compute + exposed)
      idle           step − |B|              = idle_ns
    The five add up to ``step_ns`` by construction. When the step table carries the
    cross-rank split (``exposed_wait_ns`` + ``exposed_transfer_ns`` = ``exposed_comm_ns``, from
    :mod:`traceoverlap.collectives`), exposed comm is shown as those two parts instead.
    """
    step = steps["step_ns"].astype(np.int64)
    compute = steps["compute_ns"].astype(np.int64)
    overlap = steps["overlap_ns"].astype(np.int64)
    exposed = steps["exposed_comm_ns"].astype(np.int64)
    idle = steps["idle_ns"].astype(np.int64)
    parts: dict[str, Any] = {"compute_only_ns": compute - overlap, "overlap_ns": overlap}
    if "exposed_wait_ns" in steps.columns and "exposed_transfer_ns" in steps.columns:
        parts["exposed_transfer_ns"] = steps["exposed_transfer_ns"].astype(np.int64)
        parts["exposed_wait_ns"] = steps["exposed_wait_ns"].astype(np.int64)
    else:
        parts["exposed_comm_ns"] = exposed
    parts["memory_only_ns"] = step - idle - compute - exposed
    parts["idle_ns"] = idle
    return pd.DataFrame(parts, index=steps.index)


def step_bars(steps: pd.DataFrame, several_ranks: bool) -> go.Figure:
    """Stacked bar per (rank, step): compute only, overlapped, exposed comm, memory only, idle."""
    parts = step_components(steps)
    labels = [str(s) for s in steps["step"]]
    if several_ranks:
        x: Any = [[f"rank {r}" for r in steps["rank"]], labels]
    else:
        x = labels
    series = [
        (col, name, color)
        for col, name, color in (
            ("compute_only_ns", "compute only", COLORS["compute"]),
            ("overlap_ns", "overlapped", COLORS["overlap"]),
            ("exposed_comm_ns", "exposed comm", COLORS["exposed"]),
            ("exposed_transfer_ns", "exposed: transfer", COLORS["exposed"]),
            ("exposed_wait_ns", "exposed: waiting for a peer", COLORS["wait"]),
            ("memory_only_ns", "memory only", COLORS["memory"]),
            ("idle_ns", "idle", "#C8C8C8"),
        )
        if col in parts.columns
    ]
    step_ms = (steps["step_ns"].astype(np.int64) / 1e6).round(4).to_numpy()
    fig = go.Figure()
    for col, name, color in series:
        ms = (parts[col] / 1e6).round(4).to_numpy()
        fig.add_trace(
            go.Bar(
                x=x,
                y=ms,
                name=name,
                marker=dict(color=color, line=dict(width=0)),
                customdata=np.stack(
                    [step_ms, np.where(step_ms > 0, 100 * ms / step_ms, 0)], 1
                ).round(2),
                hovertemplate=(
                    f"<b>{name}</b><br>%{{y:.3f}} ms (%{{customdata[1]:.1f}}% of the "
                    "%{customdata[0]:.3f} ms step)<extra></extra>"
                ),
            )
        )
    n = len(steps)
    fig.update_layout(
        **base_layout(
            barmode="stack",
            bargap=0.25 if n > 3 else 0.5,
            height=380,
            yaxis=dict(title=dict(text="time (ms)"), gridcolor="#e6e6e6", zeroline=False),
            xaxis=dict(
                title=dict(text="step"), type="multicategory" if several_ranks else "category"
            ),
            legend=dict(
                orientation="h", yanchor="bottom", y=1.02, xanchor="left", x=0, traceorder="normal"
            ),
            margin=dict(l=70, r=20, t=50, b=70 if several_ranks else 50),
        )
    )
    return fig


# --- heatmap ------------------------------------------------------------------------------


def exposed_heatmap(steps: pd.DataFrame) -> go.Figure:
    """Rank x step heatmap of exposed communication (ms), numbers from the step table."""
    pv = steps.assign(
        step_label=steps["step"].astype(str),
        exposed_ms=steps["exposed_comm_ns"].astype(np.int64) / 1e6,
        ratio=pd.to_numeric(steps["exposed_comm_ratio"], errors="coerce") * 100,
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


def covered_length(
    starts: npt.NDArray[np.int64], ends: npt.NDArray[np.int64], cover: tuple[IntArray, IntArray]
) -> IntArray:
    """Length of each ``[start, end)`` covered by a disjoint sorted set ``cover``, in ns.

    Used to attribute the metrics' exposed set to the collectives under it, and to say how busy
    a merged span is. F(t), the covered length before t, comes from a prefix sum, and the
    answer is F(end) - F(start): vectorised, no loop over intervals.
    """
    cs, ce = cover
    if cs.size == 0:
        return np.zeros(starts.size, np.int64)
    lengths = ce - cs
    before = np.concatenate(([0], np.cumsum(lengths)))

    def upto(t: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
        j = np.searchsorted(cs, t, side="right")  # cover intervals starting at or before t
        prev = np.maximum(j - 1, 0)
        inside = np.where(j > 0, np.clip(t - cs[prev], 0, lengths[prev]), 0)
        return np.where(j > 0, before[prev], 0) + inside

    return (upto(np.asarray(ends, np.int64)) - upto(np.asarray(starts, np.int64))).astype(np.int64)


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
    busy = covered_length(span_s, span_e, iv.union(starts, ends))
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
    phases: tuple[IntArray, IntArray, list[str]] | None,
    exposed: tuple[IntArray, IntArray],
    origin: int,
    window_ns: int,
) -> go.Figure:
    """The one-step timeline.

    Rows from the top: phases (if any), the derived bands (exposed comm, overlapped), then one
    row per lane. The bars of one (row, kind) are one filled path of NaN-separated rectangles;
    hover comes from an invisible marker per bar at its middle (WebGL when there are many), so a
    dense lane stays two traces however many kernels it has.
    Exposed spans are also shaded faintly across all rows so the eye can follow them down.
    """
    n_hover = sum(
        row.intervals[k][0].size for row in list(lanes) + list(bands) for k in row.intervals
    )
    # WebGL only when the SVG alternative would be heavy: software-rendered or disabled WebGL
    # (headless browsers, remote desktops) then only matters for large steps
    marker_trace: Any = go.Scattergl if n_hover > WEBGL_POINTS else go.Scatter
    rows: list[str] = []
    if phases is not None:
        rows.append("phases")
    rows.extend(b.label for b in bands)
    rows.extend(lane.label for lane in lanes)
    row_px = 30
    bar_px = 20
    bar_h = bar_px / row_px
    n_rows = len(rows)
    fig = go.Figure()
    y_top, y_bottom = -0.5, n_rows - 0.5

    # faint vertical shading of the exposed spans across every row (one filled trace)
    if exposed[0].size:
        xs, ys = rects(exposed[0], exposed[1], origin, y_top, y_bottom)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                fill="toself",
                fillcolor="rgba(213,94,0,0.10)",
                line=dict(width=0),
                hoverinfo="skip",
                showlegend=False,
                name="exposed (shading)",
            )
        )

    shown_legend: set[str] = set()
    row_y = {label: i for i, label in enumerate(rows)}

    if phases is not None:
        ps, pe, names = phases
        y = row_y["phases"]
        xs, ys = rects(ps, pe, origin, y - 0.38, y + 0.38)
        fig.add_trace(
            go.Scatter(
                x=xs,
                y=ys,
                mode="lines",
                fill="toself",
                fillcolor="rgba(120,120,120,0.16)",
                line=dict(width=1, color="#8a8a8a"),
                hoverinfo="skip",
                name="phases",
                legendgroup="phase",
                legendrank=_LEGEND_RANK["phases"],
            )
        )
        mid = ((ps + pe) / 2 - origin) / 1e6
        fig.add_trace(
            go.Scatter(
                x=mid.round(6),
                y=np.full(mid.size, y, dtype=float),
                mode="text",
                text=[
                    short(n, 28) if (b - a) >= 0.06 * window_ns else ""
                    for n, a, b in zip(names, ps.tolist(), pe.tolist(), strict=True)
                ],
                textfont=dict(size=11, color="#333"),
                hovertext=[
                    f"<b>{html.escape(n)}</b><br>{fmt_ns(int(b - a))}"
                    for n, a, b in zip(names, ps.tolist(), pe.tolist(), strict=True)
                ],
                hovertemplate="%{hovertext}<extra></extra>",
                showlegend=False,
                name="phase labels",
            )
        )

    def add_row(row: Lane, kind: str, color: str, legend_name: str) -> None:
        s, e = row.intervals[kind]
        if s.size == 0:
            return
        y = row_y[row.label]
        # exact-width filled rectangles, all of a (row, kind) in one SVG path: thick WebGL lines
        # would overshoot each end by half their width and make a 1 µs kernel look 20 px wide
        x, yy = rects(s, e, origin, y - bar_h / 2, y + bar_h / 2)
        first = legend_name not in shown_legend
        shown_legend.add(legend_name)
        fig.add_trace(
            go.Scatter(
                x=x,
                y=yy,
                mode="lines",
                fill="toself",
                fillcolor=color,
                # a 1 px outline keeps sub-pixel spans (a 20 µs exposed tail in a 300 ms step)
                # visible; hover gives the exact duration
                line=dict(width=1, color=color),
                hoverinfo="skip",
                name=legend_name,
                legendgroup=legend_name,
                legendrank=_LEGEND_RANK[legend_name],
                showlegend=first,
            )
        )
        texts = row.hover.get(kind)
        if texts is None:
            texts = [
                f"<b>{html.escape(row.label)}</b> · {legend_name}<br>"
                f"{fmt_ns(int(b - a))} from {fmt_ns(int(a - origin))}"
                for a, b in zip(s.tolist(), e.tolist(), strict=True)
            ]
        fig.add_trace(
            marker_trace(
                x=(((s + e) / 2 - origin) / 1e6).round(6),
                y=np.full(s.size, y, dtype=float),
                mode="markers",
                marker=dict(size=bar_px, color=color, opacity=0),
                hovertext=texts,
                hovertemplate="%{hovertext}<extra></extra>",
                hoverlabel=dict(bgcolor="white", bordercolor=color),
                name=legend_name,
                legendgroup=legend_name,
                showlegend=False,
            )
        )

    for band in bands:
        for kind in band.intervals:
            add_row(band, kind, COLORS[kind], _BAND_LEGEND[kind])
    for lane in lanes:
        for kind in ("compute", "comm", "memory"):
            if kind in lane.intervals:
                add_row(lane, kind, COLORS[kind], KIND_LABELS[kind])

    height = 90 + row_px * n_rows + 60
    fig.update_layout(
        **base_layout(
            height=max(height, 260),
            hovermode="closest",
            hoverdistance=30,
            xaxis=dict(
                title=dict(text="time since the start of the step window (ms)"),
                range=[0, window_ns / 1e6],
                gridcolor="#ececec",
                zeroline=False,
                showline=True,
                linecolor="#999",
            ),
            yaxis=dict(
                tickmode="array",
                tickvals=list(range(n_rows)),
                ticktext=rows,
                range=[y_bottom, y_top],
                fixedrange=True,
                showgrid=False,
                zeroline=False,
                automargin=True,
            ),
            margin=dict(l=10, r=20, t=50, b=55),
            dragmode="zoom",
        )
    )
    return fig


_LEGEND_RANK = {
    "compute": 1,
    "communication": 2,
    "memory": 3,
    "overlapped": 4,
    "exposed comm": 5,
    "phases": 6,
}

_BAND_LEGEND = {
    "exposed": "exposed comm",
    "overlap": "overlapped",
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
