"""``traceoverlap compare --html FILE``: the comparison on top, both runs' reports side by side.

One self-contained file: the comparison table (medians, deltas, step_speedup, bottleneck, the
collectives whose exposure moved most), then the full HTML report of each run
(:mod:`traceoverlap.reporters.html`), each in its own frame (``srcdoc``) so the two reports'
element ids and scripts cannot collide. Formatting only; deterministic like the report itself.
"""

from __future__ import annotations

import html
from pathlib import Path
from typing import TYPE_CHECKING

from .. import __version__
from .compare import _change, _delta, _is_ratio, _value
from .html import render as render_report

if TYPE_CHECKING:
    from ..compare import Comparison

_CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:0;color:#1f2328}
header{padding:16px 24px;border-bottom:1px solid #d0d7de}
h1{font-size:20px;margin:0 0 6px} .headline{font-size:15px;margin:4px 0}
table{border-collapse:collapse;margin:12px 0;font-size:13px}
th,td{padding:3px 10px;border-bottom:1px solid #eaeef2;text-align:right}
th:first-child,td:first-child{text-align:left}
.better{color:#1a7f37}.worse{color:#cf222e}
.tables{display:flex;gap:40px;flex-wrap:wrap;padding:0 24px}
.runs{display:flex;gap:8px;padding:8px}
.run{flex:1 1 50%;min-width:0} .run h2{font-size:15px;margin:6px 8px;word-break:break-all}
iframe{width:100%;height:90vh;border:1px solid #d0d7de;border-radius:6px}
"""

# lower is better for every compared time; a higher overlap ratio is better
_HIGHER_IS_BETTER = {"overlap_ratio"}


def _cls(metric: str, delta: object) -> str:
    if delta is None or delta != delta or delta == 0:  # None / NaN / no change
        return ""
    good = (float(delta) > 0) == (metric in _HIGHER_IS_BETTER)  # type: ignore[arg-type]
    return "better" if good else "worse"


def render(cmp: Comparison, *, plotlyjs: str = "embed") -> str:
    e = html.escape
    rows = []
    for r in cmp.metrics.to_dict("records"):
        metric = str(r["metric"])
        unit = "" if _is_ratio(metric) else " (ms)"
        rows.append(
            f"<tr><td>{e(str(r['label']))}{unit}</td><td>{e(_value(metric, r['baseline']))}</td>"
            f"<td>{e(_value(metric, r['candidate']))}</td>"
            f"<td class='{_cls(metric, r['delta'])}'>{e(_delta(metric, r['delta']))}</td>"
            f"<td>{'-' if _is_ratio(metric) else e(_change(r['change_ratio']))}</td></tr>"
        )
    metrics = (
        "<table><tr><th>median per step</th><th>baseline</th><th>candidate</th><th>delta</th>"
        "<th>change</th></tr>" + "".join(rows) + "</table>"
    )
    coll = ""
    if not cmp.collectives.empty:
        crows = []
        for r in cmp.collectives.to_dict("records"):
            b = f"{float(r['baseline_exposed_ns']) / 1e6:.2f}" if r["baseline_count"] else "absent"
            c = (
                f"{float(r['candidate_exposed_ns']) / 1e6:.2f}"
                if r["candidate_count"]
                else "absent"
            )
            d = float(r["delta_ns"])
            crows.append(
                f"<tr><td>{e(str(r['collective']))}</td><td>{b}</td><td>{c}</td>"
                f"<td class='{_cls('exposed_ns', d)}'>{d / 1e6:+.2f}</td></tr>"
            )
        coll = (
            "<table><tr><th>collective (exposure changed most)</th><th>baseline ms</th>"
            "<th>candidate ms</th><th>delta</th></tr>" + "".join(crows) + "</table>"
        )
    verdict = (
        f"changed: {cmp.baseline_bottleneck} &rarr; {cmp.candidate_bottleneck}"
        if cmp.bottleneck_changed
        else f"unchanged: {cmp.baseline_bottleneck}"
    )
    notes = "".join(f"<li>{e(n)}</li>" for n in cmp.notes)
    frames = []
    for label, analysis in (
        (f"baseline: {cmp.baseline_label}", cmp.baseline),
        (f"candidate: {cmp.candidate_label}", cmp.candidate),
    ):
        doc = render_report(analysis, plotlyjs=plotlyjs)
        frames.append(
            f"<div class='run'><h2>{e(label)}</h2>"
            f"<iframe title='{e(label)}' srcdoc=\"{e(doc, quote=True)}\"></iframe></div>"
        )
    sp = cmp.step_speedup
    return (
        "<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
        f"<title>traceoverlap compare: {e(cmp.baseline_label)} vs {e(cmp.candidate_label)}</title>"
        f"<style>{_CSS}</style></head><body><header><h1>traceoverlap compare</h1>"
        f"<p class='headline'><b>step_speedup {'-' if sp is None else f'{sp:.2f}x'}</b>"
        f" &middot; {e(cmp.main_change or '')} &middot; bottleneck {verdict}</p>"
        f"<p>baseline <code>{e(cmp.baseline_label)}</code> &middot; candidate "
        f"<code>{e(cmp.candidate_label)}</code> &middot; traceoverlap {e(__version__)}</p>"
        + (f"<ul>{notes}</ul>" if notes else "")
        + f"</header><div class='tables'>{metrics}{coll}</div>"
        f"<div class='runs'>{''.join(frames)}</div></body></html>\n"
    )


def write_report(cmp: Comparison, path: str | Path, *, plotlyjs: str = "embed") -> Path:
    out = Path(path)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(render(cmp, plotlyjs=plotlyjs), encoding="utf-8")
    return out
