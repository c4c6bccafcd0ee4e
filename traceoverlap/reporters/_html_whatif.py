"""The HTML report's what-if section (docs/whatif.md §3): the scenarios (predicted step,
speedup, whether the scenario keeps the observed slack) and the "fixing rank R buys" table, the
same numbers as ``traceoverlap whatif --format json`` (both format one
:class:`~traceoverlap.whatif.scenarios.WhatIf`); the overlap tax with its label (measured or
estimated, and from what). Formatting only."""

from __future__ import annotations

import html
from typing import TYPE_CHECKING

from ..core import fmt

if TYPE_CHECKING:
    from ..whatif.scenarios import ScenarioResult, WhatIf


def _e(x: object) -> str:
    return html.escape(str(x))


def _ms(ns: float | None) -> str:
    return fmt.ms(ns, 2, missing="–")


def _x(v: float | None) -> str:
    return "–" if v is None else f"{v:.2f}×"


def _pct(v: float | None) -> str:
    return "–" if v is None else f"{100 * v:.2f} %"


def _says_slack(w: WhatIf) -> bool:
    """The scenarios say what they do with the observed slack (``ScenarioResult.slack``)."""
    return any(getattr(r, "slack", None) is not None for r in (*w.scenarios, *w.fix_rank))


def _slack(r: ScenarioResult, shown: bool) -> str:
    """The slack cell: ``kept`` / ``zeroed``... as the scenario says (docs/whatif.md §3)."""
    if not shown:
        return ""
    v = getattr(r, "slack", None)
    return f"<td>{'–' if v is None else _e(v)}</td>"


def _range(steps_ns: tuple[float | None, ...]) -> str:
    v = [x for x in steps_ns if x is not None]
    return "–" if len(v) < 2 else f"{min(v) / 1e6:.1f}–{max(v) / 1e6:.1f}"


def section(w: WhatIf | str | None) -> str:
    """The section; ``w`` a what-if, or why there is none (a sentence), or None (no section)."""
    if w is None:
        return ""
    head = "<section id='whatif'><h2>What fixing it would buy</h2>"
    if isinstance(w, str):
        return head + f"<p class='explain'>{_e(w)}</p></section>"
    shown = _says_slack(w)
    explain = (
        "<p class='explain'>Each scenario changes durations or gaps of the run graph and replays "
        "it (docs/whatif.md). Predicted step: per step the mean over ranks of the replayed step, "
        "median over steps. Replay: the unchanged replay measured as the scenario is, every "
        "rank's first step from the same start in both (a rank the scenario starts earlier: from "
        "there); speedup: replay / predicted step. "
        + (
            "Slack: what the scenario does with the delays the graph does not explain (kept: "
            "as the trace shows them). "
            if shown
            else "Every scenario keeps the delays the graph does not explain (slack) as the "
            "trace shows them, except where it changes them. "
        )
        + "The "
        f"unchanged replay reproduces the trace within {_e(_pct(w.median_error_ratio))} "
        f"(median over {len(w.step_labels)} step(s); max {_e(_pct(w.max_error_ratio))}).</p>"
    )
    rows = []
    slack_th = "<th>slack</th>" if shown else ""
    for r in w.scenarios:
        kind = str(w.tax_basis.get("kind", "")) if w.tax_basis else ""
        note = (
            f" <span class='muted'>(the tax {_e(kind)}: see Overlap tax)</span>"
            if r.name == "no-overlap-tax" and kind
            else ""
        )
        rows.append(
            f"<tr data-scenario='{_e(r.name)}'><td><code>{_e(r.name)}</code></td>"
            f"<td class='num'>{_ms(r.step_ns)}</td><td class='num'>{_range(r.steps_ns)}</td>"
            f"<td class='num'>{_ms(r.baseline_ns)}</td>"
            f"<td class='num'>{_x(r.speedup)}</td>{_slack(r, shown)}"
            f"<td>{_e(r.changed)}{note}</td></tr>"
        )
    table = (
        "<table class='data whatif'><thead><tr><th>scenario</th>"
        "<th class='num'>predicted step (ms)</th><th class='num'>steps range (ms)</th>"
        "<th class='num'>replay (ms)</th>"
        f"<th class='num'>speedup</th>{slack_th}<th>what changed</th></tr></thead><tbody>"
        + "".join(rows)
        + "</tbody></table>"
    )
    fix = ""
    if w.fix_rank:
        frows = "".join(
            f"<tr data-scenario='{_e(r.name)}'><td class='num'>{_e(r.name.split(':', 1)[1])}</td>"
            f"<td class='num'>{_ms(r.step_ns)}</td><td class='num'>{_range(r.steps_ns)}</td>"
            f"<td class='num'>{_ms(r.baseline_ns)}</td>"
            f"<td class='num'>{_x(r.speedup)}</td>{_slack(r, shown)}</tr>"
            for r in w.fix_rank
        )
        fix = (
            "<h3>Fixing rank R buys</h3><p class='explain'>Rank R's durations and host gaps "
            "replaced by the median of its peers at the same position; most speedup first.</p>"
            "<table class='data fixrank'><thead><tr><th>rank</th>"
            "<th class='num'>predicted step (ms)</th><th class='num'>steps range (ms)</th>"
            "<th class='num'>replay (ms)</th>"
            f"<th class='num'>speedup</th>{slack_th}</tr></thead><tbody>"
            + frows
            + "</tbody></table>"
        )
    tax = ""
    if w.tax_overlap_ns:
        tax = (
            "<h3>Overlap tax</h3><p class='tax'>"
            f"{_e(f'{w.tax_ns / 1e6:.2f}')} ms of the {_e(f'{w.tax_overlap_ns / 1e6:.2f}')} ms "
            f"of compute under communication: {_e(w.tax_label or 'estimated')}</p>"
        )
    notes = ""
    # a caveat once, naming its scenarios (as the text output's notes)
    by_note: dict[str, list[str]] = {}
    for r in (*w.scenarios, *w.fix_rank):
        for part in r.note.split("; ") if r.note else ():
            by_note.setdefault(part, []).append(r.name)
    caveats = [f"{', '.join(dict.fromkeys(n))}: {note}" for note, n in by_note.items()]
    lines = [*w.findings, *caveats, *w.notes]
    if lines:
        notes = "<ul class='notes'>" + "".join(f"<li>{_e(n)}</li>" for n in lines) + "</ul>"
    return head + explain + table + fix + tax + notes + "</section>"
