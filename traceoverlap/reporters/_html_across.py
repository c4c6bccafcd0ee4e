"""The report's "step across ranks": one step of every rank on one clock, side by side.

Formatting only: the spans, the clock offsets and every collective's wait and transfer parts
come from :class:`~traceoverlap.run.across.StepAcross` (built by the analysis side). What this
module decides is how to draw them: up to :data:`EXPANDED_MAX_RANKS` ranks, a group of rows per
rank (phases, compute, communication, memory); beyond, one row per rank with merged spans, and
the page says so.
"""

from __future__ import annotations

import html
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pandas as pd
import plotly.graph_objects as go

from ..core.fmt import duration as fmt_ns
from ..core.schema import WAIT_NS, WAITED_FOR_RANK
from ..core.vocab import KIND_WORDS, WHOLE_CAPTURE, Cause
from . import _html_figures as figs

if TYPE_CHECKING:
    from ..run.across import RankStep, StepAcross

I64 = npt.NDArray[np.int64]

#: Most ranks drawn as a group of rows each; more are drawn one row per rank.
EXPANDED_MAX_RANKS = 16
#: Most spans per rank and kind in the drawing (the rest merged: :func:`figs.coarsen`).
RANK_SPAN_CAP = 600
#: Collective parts (wait + transfer, all ranks) drawn with their own hover; beyond, merged.
INSTANCE_BUDGET = 4000
ROW_PX = 22
WAIT_LABEL = "waiting for the last rank"
TRANSFER_LABEL = "collective: transfer"


@dataclass
class Drawing:
    """The figure and the lines telling what was merged to draw it."""

    fig: go.Figure
    merged: list[str]
    collapsed: bool


def rank_label(r: RankStep, several_devices: bool) -> str:
    if r.device is not None and several_devices:
        return f"rank {r.rank} (GPU {r.device})"
    return f"rank {r.rank}"


def across_figure(x: StepAcross) -> Drawing:
    """The step across ranks (see the module docstring)."""
    ranks = x.ranks
    multi_dev = len({r.rank for r in ranks}) < len(ranks)
    collapsed = len(ranks) > EXPANDED_MAX_RANKS
    kinds = ["compute", "comm"] + (
        ["memory"] if any(r.memory[0].size for r in ranks) and not collapsed else []
    )
    with_phases = not collapsed and any(len(r.phases[2]) for r in ranks)
    rows: list[str] = []
    ticks: list[str] = []
    row_of: dict[tuple[int, str], int] = {}
    for i, r in enumerate(ranks):
        name = rank_label(r, multi_dev)
        parts = ["rank"] if collapsed else (["phases"] if with_phases else []) + kinds
        for j, p in enumerate(parts):
            row_of[(i, p)] = len(rows)
            rows.append(f"{name} {p}")
            ticks.append(f"<b>{name}</b>" if collapsed else _tick(name, p, j == 0))
    fig = go.Figure()
    merged: list[str] = []
    bars = figs._Bars(fig, {label: k for k, label in enumerate(rows)}, x.origin_ns)
    _add_windows(fig, x, ranks, row_of, collapsed)
    for i, r in enumerate(ranks):
        name = rank_label(r, multi_dev)
        for kind in kinds:
            row = rows[row_of[(i, "rank" if collapsed else kind)]]
            if collapsed and kind == "comm":
                continue  # drawn by the collectives
            s, e = r.other_comm if kind == "comm" else getattr(r, kind)
            ms, me, gap = figs.coarsen(s, e, RANK_SPAN_CAP)
            if gap:
                merged.append(
                    f"{name}, {KIND_WORDS[kind]}: {s.size:,} spans drawn as {ms.size:,} "
                    f"(gaps up to {fmt_ns(gap)} closed)"
                )
            hover = _union_hover(name, KIND_WORDS[kind], ms, me, x.origin_ns)
            width = 0.36 if collapsed else 0.66
            color = figs.COLORS[kind] if kind != "comm" else "rgba(230,159,0,0.45)"
            label = "other communication" if kind == "comm" else KIND_WORDS[kind]
            bars.add(row, ms, me, color, label, hover, width=width)
        if with_phases and len(r.phases[2]):
            ps, pe, names = r.phases
            _phases(bars, rows[row_of[(i, "phases")]], ps, pe, names, x)
    _add_instances(bars, x, rows, row_of, collapsed, merged, multi_dev)
    fig.update_layout(**_layout(rows, ticks, x))
    return Drawing(fig, merged, collapsed)


def _tick(name: str, part: str, first: bool) -> str:
    label = KIND_WORDS.get(part, part)
    return f"<b>{name}</b>  {label}" if first else label


def _union_hover(name: str, kind: str, s: I64, e: I64, origin: int) -> list[str]:
    return [
        f"<b>{html.escape(name)}</b> · {kind}<br>{fmt_ns(int(b - a))} at +{fmt_ns(int(a - origin))}"
        for a, b in zip(s.tolist(), e.tolist(), strict=True)
    ]


def _phases(
    bars: figs._Bars, row: str, ps: I64, pe: I64, names: tuple[str, ...], x: StepAcross
) -> None:
    hover = [
        f"<b>{html.escape(n)}</b><br>{fmt_ns(int(b - a))} at +{fmt_ns(int(a - x.origin_ns))}"
        for n, a, b in zip(names, ps.tolist(), pe.tolist(), strict=True)
    ]
    bars.add(row, ps, pe, "rgba(120,120,120,0.30)", "phases", hover, width=0.76)
    window = max(x.end_ns - x.origin_ns, 1)
    mid = ((ps + pe) / 2 - x.origin_ns) / 1e6
    bars.fig.add_trace(
        go.Scatter(
            x=mid.round(6),
            y=np.full(mid.size, bars.row_y[row], dtype=float),
            mode="text",
            text=[
                html.escape(figs.short(n.strip("# "), 22)) if (b - a) >= 0.07 * window else ""
                for n, a, b in zip(names, ps.tolist(), pe.tolist(), strict=True)
            ],
            textfont=dict(size=10, color="#333"),
            hoverinfo="skip",
            showlegend=False,
            name="phase labels",
        )
    )


def _add_windows(
    fig: go.Figure,
    x: StepAcross,
    ranks: tuple[RankStep, ...],
    row_of: dict[tuple[int, str], int],
    collapsed: bool,
) -> None:
    """Grey outside each rank's own step window; a line between rank groups."""
    shapes: list[dict[str, Any]] = []
    lo, hi = 0.0, (x.end_ns - x.origin_ns) / 1e6
    for i, r in enumerate(ranks):
        rows = [v for (u, _), v in row_of.items() if u == i]
        y0, y1 = min(rows) - 0.5, max(rows) + 0.5
        s, e = (r.start_ns - x.origin_ns) / 1e6, (r.end_ns - x.origin_ns) / 1e6
        for a, b in ((lo, s), (e, hi)):
            if b > a:
                shapes.append(
                    dict(
                        type="rect",
                        x0=a,
                        x1=b,
                        y0=y0,
                        y1=y1,
                        xref="x",
                        yref="y",
                        fillcolor="rgba(0,0,0,0.06)",
                        line=dict(width=0),
                        layer="below",
                    )
                )
        if i and not collapsed:
            shapes.append(
                dict(
                    type="line",
                    x0=0,
                    x1=1,
                    y0=y0,
                    y1=y0,
                    xref="paper",
                    yref="y",
                    line=dict(color="#9aa0a6", width=1),
                )
            )
    fig.update_layout(shapes=shapes)


def _instance_hover(r: Any, name: str, origin: int, blame: dict[tuple[int, int], str]) -> str:
    """What one rank's part of one collective instance says on hover (``blame``: the step's
    blame sentence per (waiting rank, rank waited for))."""
    head = f"<b>{html.escape(str(r.name))} #{int(r.instance)}</b> on {html.escape(name)}"
    where = [str(r.family)]
    if isinstance(r.process_group, str) and r.process_group:
        where.append(f"group {html.escape(r.process_group)}")
    if r.seq is not None and not pd.isna(r.seq):
        where.append(f"seq {int(r.seq)}")
    where.append(f"{int(r.n_ranks)} ranks")
    lines = [head, " · ".join(where)]
    span = f"+{fmt_ns(int(r.start_ns) - origin)} to +{fmt_ns(int(r.end_ns) - origin)}"
    if not bool(r.matched):
        lines.append(f"{span}; not matched across ranks: no wait / transfer split")
    else:
        last = None if pd.isna(r.last_rank) else int(r.last_rank)
        if last is None:
            arrival = "last arrival: a tie"
        elif last == int(r.rank):
            arrival = "this rank arrived last (the others waited for it)"
        else:
            arrival = f"last arrival: rank {last}"
        lines.append(f"arrived {span}; {arrival}")
        # who the wait was for: the job model's answer (the blame's), not the arrival order
        target = None if pd.isna(r.waited_for_rank) else int(r.waited_for_rank)
        whom = f" for rank {target}" if target is not None and int(r.wait_ns) else ""
        lines.append(
            f"waited {fmt_ns(int(r.wait_ns))}{whom}, transfer {fmt_ns(int(r.transfer_ns))}, "
            f"exposed {fmt_ns(int(r.exposed_ns))}"
        )
        chain = blame.get((int(r.rank), target)) if target is not None and whom else None
        if chain:
            lines.append(f"in this step: {html.escape(chain.replace('<-', '←'))}")
    return "<br>".join(lines)


def _add_instances(
    bars: figs._Bars,
    x: StepAcross,
    rows: list[str],
    row_of: dict[tuple[int, str], int],
    collapsed: bool,
    merged: list[str],
    multi_dev: bool,
) -> None:
    """Each instance on each rank: its wait part, then its transfer part."""
    inst = x.instances
    if inst.empty:
        return
    unit_pos = {r.unit: i for i, r in enumerate(x.ranks)}
    detailed = 2 * len(inst) <= INSTANCE_BUDGET
    blame = {
        (int(b["rank"]), int(b[WAITED_FOR_RANK.name])): str(b["line"])
        for b in x.blame.to_dict("records")
    }
    for unit, sub in inst.groupby("unit", sort=True):
        i = unit_pos[int(unit)]
        row = rows[row_of[(i, "rank" if collapsed else "comm")]]
        name = rank_label(x.ranks[i], multi_dev)
        s = sub["start_ns"].to_numpy(np.int64)
        e = sub["end_ns"].to_numpy(np.int64)
        w = s + sub[WAIT_NS.name].to_numpy(np.int64)
        hover: list[str] | None = None
        if detailed:
            hover = [
                _instance_hover(r, name, x.origin_ns, blame) for r in sub.itertuples(index=False)
            ]
        _parts(bars, row, (s, w), (w, e), hover, merged, name, collapsed)


def _parts(
    bars: figs._Bars,
    row: str,
    wait: tuple[I64, I64],
    transfer: tuple[I64, I64],
    hover: list[str] | None,
    merged: list[str],
    name: str,
    collapsed: bool,
) -> None:
    width = 0.5 if collapsed else 0.66
    for (s, e), color, label in (
        (wait, figs.COLORS[Cause.WAIT], WAIT_LABEL),
        (transfer, figs.COLORS["comm"], TRANSFER_LABEL),
    ):
        keep = e > s
        if hover is not None:
            h = [t for t, k in zip(hover, keep.tolist(), strict=True) if k]
            bars.add(row, s[keep], e[keep], color, label, h, width=width)
            continue
        ms, me, gap = figs.coarsen(s[keep], e[keep], RANK_SPAN_CAP)
        merged.append(
            f"{name}, {label}: {int(keep.sum()):,} parts drawn merged, no per-collective hover"
        )
        del gap
        bars.add(
            row, ms, me, color, label, _union_hover(name, label, ms, me, bars.origin), width=width
        )


def _layout(rows: list[str], ticks: list[str], x: StepAcross) -> dict[str, Any]:
    return figs.lanes_layout(
        110 + ROW_PX * len(rows),
        "time on one clock, since the earliest rank's step start (ms)",
        x.end_ns - x.origin_ns,
        ticks,
        tickfont=dict(size=11),
    )


def section(x: StepAcross, plot: Callable[[str, go.Figure], str], merged: list[str]) -> str:
    """The section: what it shows, how the clocks were aligned, the figure."""
    d = across_figure(x)
    merged.extend(f"step across ranks: {m}" for m in d.merged)
    step = (
        "the whole capture" if str(x.step) == WHOLE_CAPTURE else f"step {html.escape(str(x.step))}"
    )
    if str(x.step) == WHOLE_CAPTURE:
        why = "no step markers: each rank's whole capture is one window"
    else:
        why = "as asked" if x.chosen == "asked" else f"the median step of rank {x.median_of_rank}"
        why += "; choose another with <code>--timeline-step N</code>"
    if x.clock == "unix":
        clock = "The ranks' clocks are unix time and agree: drawn as recorded."
    elif x.clock == "estimated":
        shifts = [f"rank {r.rank} {_signed_ms(-r.offset_ns)}" for r in x.ranks if r.offset_ns]
        clock = (
            "Clocks aligned on collective end times (a collective ends together on every rank): "
            + (
                ", ".join(shifts[:12]) + (" …" if len(shifts) > 12 else "")
                if shifts
                else "no shift"
            )
            + "."
        )
    else:
        clock = (
            "<b>The clocks could not be aligned</b> (no collective matched across ranks): each rank "
            "is on its own clock, so arrival order across rows means nothing."
        )
    layout = (
        f"{len(x.ranks)} ranks: one row per rank (compute in blue underneath; on top each "
        "collective, purple while waiting for the last rank, orange for the transfer); memory "
        "copies and phases are not drawn at this size."
        if d.collapsed
        else "Each rank is a group of rows: its phases, compute, communication"
        + (" and memory copies" if any(r.memory[0].size for r in x.ranks) else "")
        + ". On the communication row, every collective of the step is drawn on every rank that "
        "ran it: <b style='color:#A4487F'>purple while waiting</b> for the last rank to arrive, "
        "<b style='color:#B37700'>orange for the transfer</b> (the part every rank spends); faint "
        "orange is other communication."
    )
    missing = f" Ranks without {step}: {', '.join(str(r) for r in x.missing)}." if x.missing else ""
    lead = _lead(x, step)
    return (
        f"<section id='across'><h2>{step[0].upper() + step[1:]} across ranks</h2>{lead}"
        f"<p class='explain'>{step[0].upper() + step[1:]} ({why}) on every rank, on one clock. "
        f"{clock} {layout} Grey: "
        f"outside that rank's own step window. Hover a collective for its name, group, last "
        f"arrival and wait; drag to zoom, double-click to reset. Every event of every rank on this "
        f"clock: <code>traceoverlap export RUN -o run.json</code>, opened in ui.perfetto.dev."
        f"{missing}</p>" + plot("across", d.fig) + "</section>"
    )


def _lead(x: StepAcross, step: str) -> str:
    """Who the others waited for in this step, in one sentence (numbers from the analysis)."""
    wf = x.waited_for
    n = x.n_matched
    if wf.empty or n == 0:
        return ""
    top = wf.iloc[0]
    rank, count = int(top["rank"]), int(top["instances"])
    waited = int(top["exposed_waited_for_ns"])
    chains = "".join(
        f"<li>{_md(str(line).replace('<-', '←'))}</li>" for line in x.blame["line"].head(3)
    )
    return (
        f"<p class='lead'>In {html.escape(step)}, the other ranks waited most for <b>rank "
        f"{rank}</b>: <b>{fmt_ns(waited)}</b> of exposed waiting (summed over ranks) in {count} "
        f"of {n} matched collectives.</p>"
        + (
            f"<p class='explain'>Who waited for whom, most exposed waiting first:</p><ul>{chains}</ul>"
            if chains
            else ""
        )
    )


def _md(text: str) -> str:
    """Escaped, each Markdown `name` as <code>name</code> (the blame lines quote functions)."""
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", html.escape(text))


def _signed_ms(ns: int) -> str:
    return f"{'+' if ns >= 0 else '−'}{fmt_ns(abs(ns))}"
