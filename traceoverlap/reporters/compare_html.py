"""``traceoverlap compare --html FILE``: the comparison on top, then both runs' reports.

One self-contained page with plotly.js included once: the comparison table (medians, deltas,
step_speedup, verdict, the collectives whose exposure moved most), then each run's report
sections one after the other, their per-step bars on ONE time scale so the bars compare by eye.
Formatting only; deterministic like the report itself.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

from .._version import __version__
from ..core import fmt
from ..core.schema import OVERLAP_RATIO, STEP_NS
from ._html_page import CSS, LOADER, PAGE
from .compare_text import (
    _collective_cells,
    _is_ratio,
    _metric_cells,
    headline,
    main_change_text,
)
from .html_report import Page, plotly_script, sections

if TYPE_CHECKING:
    from ..rank.detail import StepDetail
    from ..run.compare import Comparison

# lower is better for every compared time; a higher overlap ratio is better
_HIGHER_IS_BETTER = {OVERLAP_RATIO.name}


def _cls(metric: str, delta: object) -> str:
    if delta is None or delta != delta or delta == 0:  # None / NaN / no change
        return ""
    good = (float(delta) > 0) == (metric in _HIGHER_IS_BETTER)  # type: ignore[arg-type]
    return "better" if good else "worse"


def render(
    cmp: Comparison,
    *,
    plotlyjs: str = "embed",
    details: tuple[StepDetail | None, StepDetail | None] = (None, None),
) -> str:
    """The comparison page; ``details``: the baseline's and the candidate's step drawn as a
    timeline (:func:`traceoverlap.run.detail.step_detail`), None: not drawn."""
    e = html.escape
    rows = []
    for r in cmp.metrics.to_dict("records"):
        metric = str(r["metric"])
        unit = "" if _is_ratio(metric) else " (ms)"
        base, cand, delta, change = _metric_cells(r)
        rows.append(
            f"<tr><td>{e(str(r['label']).strip())}{unit}</td>"
            f"<td class='num'>{e(base)}</td><td class='num'>{e(cand)}</td>"
            f"<td class='num {_cls(metric, r['delta'])}'>{e(delta)}</td>"
            f"<td class='num'>{e(change)}</td></tr>"
        )
    metrics = (
        "<table class='data'><tr><th>median per step</th><th class='num'>baseline</th>"
        "<th class='num'>candidate</th><th class='num'>delta</th><th class='num'>change</th></tr>"
        + "".join(rows)
        + "</table>"
    )
    coll = ""
    if not cmp.collectives.empty:
        crows = []
        for r in cmp.collectives.to_dict("records"):
            b, c, d = _collective_cells(r)
            crows.append(
                f"<tr><td>{e(str(r['collective']))}</td><td class='num'>{b}</td>"
                f"<td class='num'>{c}</td>"
                f"<td class='num {_cls('exposed_ns', r['delta_ns'])}'>{d}</td></tr>"
            )
        coll = (
            "<h3>Collectives whose exposure changed most (median exposed ms per step)</h3>"
            "<table class='data'><tr><th>collective</th><th class='num'>baseline</th>"
            "<th class='num'>candidate</th><th class='num'>delta</th></tr>"
            + "".join(crows)
            + "</table>"
        )
    verdict = (
        f"changed: {e(str(cmp.baseline_bottleneck))} &rarr; {e(str(cmp.candidate_bottleneck))}"
        if cmp.bottleneck_changed
        else f"unchanged: {e(str(cmp.baseline_bottleneck))}"
    )
    notes = "".join(f"<li>{e(n)}</li>" for n in cmp.notes)
    top = (
        "<header><h1>traceoverlap compare</h1>"
        f"<p class='lead'><b>step_speedup {fmt.speedup(cmp.step_speedup)}</b> &middot; "
        f"{e(main_change_text(cmp) or 'no time metric moved')} &middot; verdict {verdict}</p>"
        f"<p>{e(headline(cmp))}</p>"
        f"<p>baseline <code>{e(cmp.baseline_label)}</code> &middot; candidate "
        f"<code>{e(cmp.candidate_label)}</code></p>"
        + (f"<div class='caveats'><h3>Caveats</h3><ul>{notes}</ul></div>" if notes else "")
        + f"</header><section id='comparison'><h2>Median per step</h2>{metrics}{coll}</section>"
    )
    # one time scale for both runs' per-step bars
    y_max = max(
        float(cmp.baseline.steps[STEP_NS.name].max()),
        float(cmp.candidate.steps[STEP_NS.name].max()),
    )
    y_max_ms = 1.05 * y_max / 1e6
    bodies = [top]
    n_plots = 0
    for prefix, label, analysis, detail in (
        ("base", f"baseline: {cmp.baseline_label}", cmp.baseline, details[0]),
        ("cand", f"candidate: {cmp.candidate_label}", cmp.candidate, details[1]),
    ):
        page = Page(prefix=prefix)
        inner = "\n".join(s for s in sections(analysis, page, y_max_ms, detail=detail) if s)
        inner = inner.replace("id='", f"id='{prefix}-")
        bodies.append(
            f"<div class='run' id='{prefix}'><h1 class='run-title'>{e(label)}</h1>{inner}</div>"
        )
        n_plots += len(page.plot_ids)
    return PAGE.format(
        title=html.escape(f"traceoverlap compare: {cmp.baseline_label} vs {cmp.candidate_label}"),
        css=CSS
        + ".better{color:#1a7f37}.worse{color:#cf222e}.run-title{font-size:20px;margin:26px 4px 10px}",
        plotlyjs=plotly_script(plotlyjs),
        loader=LOADER,
        body="\n".join(bodies),
        version=html.escape(__version__),
        n_plots=n_plots,
    )


def write_report(cmp: Comparison, path: str | Path, *, plotlyjs: str = "embed") -> Path:
    out = Path(path)
    out.write_text(render(cmp, plotlyjs=plotlyjs), encoding="utf-8")
    return out
