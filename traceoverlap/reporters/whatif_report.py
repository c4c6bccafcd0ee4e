"""``traceoverlap whatif``: the scenarios table, the "fixing rank R buys" table, JSON
(docs/whatif.md §3); and the what-if lines of analyze's "What to try". Formats a
:class:`traceoverlap.whatif.scenarios.WhatIf` or :class:`traceoverlap.whatif.advice.Advice`;
computes nothing."""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

from ..core.fmt import EscapedText
from ..core.schema import OVERLAP_TAX, REPLAY, REPLAY_STEPS, SCENARIOS, TAX_RANK_STEPS
from ..core.vocab import SHARED_CPU_MARK

if TYPE_CHECKING:
    from ..whatif.advice import Advice
    from ..whatif.scenarios import ScenarioResult, WhatIf

#: Version of the ``whatif --format json`` document.
WHATIF_SCHEMA_VERSION = 1


def _ms(ns: float | None) -> str:
    return "-" if ns is None else f"{ns / 1e6:.2f}"


def _x(v: float | None) -> str:
    return "-" if v is None else f"{v:.2f}x"


def _pct(v: float | None) -> str:
    return "-" if v is None else f"{100 * v:.2f}%"


def _range(steps_ns: tuple[float | None, ...]) -> str:
    """The smallest and largest per-step value ("-" with fewer than two steps)."""
    v = [x for x in steps_ns if x is not None]
    return "-" if len(v) < 2 else f"{min(v) / 1e6:.1f}-{max(v) / 1e6:.1f}"


def _row(r: ScenarioResult, width: int = 18, tax_kind: str = "", against: bool = False) -> str:
    who = []
    if r.ranks:
        who.append(
            "ranks " + ",".join(str(x) for x in r.ranks[:8]) + ("…" if len(r.ranks) > 8 else "")
        )
    if r.collectives:
        who.append(",".join(r.collectives))
    if r.name == "no-overlap-tax" and tax_kind:
        who.append(f"the tax {tax_kind}: see Overlap tax")
    return (
        f"  {r.name:<{width}} {_ms(r.step_ns):>10} {_range(r.steps_ns):>13} "
        + (f"{_ms(r.baseline_ns):>10} " if against else "")
        + f"{_x(r.speedup):>8}  {_CHANGED}{r.changed}"
    ) + (f" ({'; '.join(who)})" if who else "")


def render_text(w: WhatIf, width: int = 80) -> str:
    """The scenarios, fixing each rank, the notes, wrapped to ``width`` (at least 80) columns at
    spaces: a scenario's "what changed" continues under its column when that leaves 30 columns,
    else indented six."""
    width = max(width, 80)
    return "\n".join(_fit(line, width) for line in _text_lines(w)) + "\n"


def _fit(line: str, width: int) -> str:
    from ._format import wrap

    head, sep, rest = line.partition(_CHANGED)
    if sep:  # a scenario row: "what changed" is the only text that wraps
        col = len(head)
        if col + len(rest) <= width:
            return head + rest
        cont = " " * (col if width - col >= 30 else 6)
        first = wrap(rest, width - col, "", "")[0]
        more = rest[len(first) :].strip()
        return "\n".join([head + first, *(wrap(more, width, cont, cont) if more else [])])
    if len(line) <= width:
        return line
    if line.startswith("  - "):  # a note
        return "\n".join(wrap(line[4:], width, "  - ", "    "))
    indent = " " * (len(line) - len(line.lstrip(" ")))
    return "\n".join(wrap(line.lstrip(" "), width, indent, indent + "  "))


#: What a scenario does with the slack, as the text says it.
_SLACK = {
    "kept": "kept",
    "peers": "the peers' median",
    "zeroed-host": "zeroed on host lanes",
    "zeroed": "zeroed",
}

#: Between a scenario row's numbers and what changed (where :func:`_fit` wraps the row).
_CHANGED = "\0"


def _against_differs(w: WhatIf) -> bool:
    """Whether the rows' speedups are against more than one replay figure (as printed, 0.01 ms;
    the replay row's own step among them)."""
    rows = (*w.scenarios, *w.fix_rank)
    seen = {_ms(r.baseline_ns) for r in rows if r.baseline_ns is not None}
    seen |= {_ms(r.step_ns) for r in w.scenarios if r.name == "replay"}
    return len(seen) > 1


def _text_lines(w: WhatIf) -> list[str]:
    lines = [
        f"Identity replay: per-step error median {_pct(w.median_error_ratio)}, max "
        f"{_pct(w.max_error_ratio)} over {len(w.step_labels)} step(s) ({w.rounds} rounds)",
    ]
    bad = [
        f"{lbl} ({_pct(e)})"
        for lbl, e in zip(w.step_labels, w.error_ratio, strict=True)
        if e is not None and e > 0.05
    ]
    if bad:
        lines.append("  steps the replay does not reproduce within 5 %: " + ", ".join(bad))
    # one width for both tables: the longest scenario name (hide:AllGather/ReduceScatter...)
    width = max([18, *(len(r.name) for r in w.scenarios)])
    # a "replay ms" column where some row's speedup is against another replay figure than the
    # replay's own step (a scenario that starts a late rank earlier, measured from there)
    against = _against_differs(w)
    lines += [
        "",
        f"  {'scenario':<{width}} {'step ms':>10} {'steps range':>13} "
        + (f"{'replay ms':>10} " if against else "")
        + f"{'speedup':>8}  what changed",
    ]
    kind = str(w.tax_basis.get("kind", "")) if w.tax_basis else ""
    lines += [_row(r, width, kind, against) for r in w.scenarios]
    kept = [r.name for r in w.scenarios if r.slack == "kept"]
    other = [f"{r.name} ({_SLACK[r.slack]})" for r in w.scenarios if r.slack != "kept"]
    lines += [
        "",
        "Slack (delays the graph does not explain): "
        + (f"{_pct(w.slack_ratio)} of the median step; " if w.slack_ratio is not None else "")
        + (f"kept by {', '.join(kept)}" if kept else "")
        + ("; " if kept and other else "")
        + ", ".join(other),
    ]
    if w.fix_rank:
        lines += ["", "Fixing rank R buys (R runs like the median of its peers):"]
        lines += [
            f"  {'rank':<{width}} {'step ms':>10} {'steps range':>13} "
            + (f"{'replay ms':>10} " if against else "")
            + f"{'speedup':>8}"
        ]
        for r in w.fix_rank:
            lines.append(
                f"  {r.name.split(':')[1]:<{width}} {_ms(r.step_ns):>10} {_range(r.steps_ns):>13} "
                + (f"{_ms(r.baseline_ns):>10} " if against else "")
                + f"{_x(r.speedup):>8}"
            )
    tax = tax_line(w)
    if tax:
        lines += ["", tax]
    caveats = _caveats(w)
    if caveats or w.notes or w.findings:
        lines += ["", "Notes:"]
        lines += [f"  - {n}" for n in w.findings]
        lines += [f"  - {n}" for n in caveats]
        lines += [f"  - {n}" for n in w.notes]
    lines.append(
        "step ms: per step the mean over ranks of the replayed step, median over steps; steps "
        "range: the smallest and largest of those steps; "
        + (
            "replay ms: the unchanged replay measured as the scenario is, every rank's first "
            "step from the same start in both (a scenario that starts a late rank earlier: from "
            "there); speedup: replay ms / step ms (docs/whatif.md)"
            if against
            else "speedup: against the replay (docs/whatif.md)"
        )
    )
    return lines


def tax_line(w: WhatIf) -> str:
    """``Overlap tax: X ms of the Y ms of compute under communication, estimated (...)``: the
    tax with its label (measured or estimated, from what); "" where no compute ran under
    communication."""
    if not w.tax_overlap_ns:
        return ""
    label = w.tax_label or "estimated"
    return (
        f"Overlap tax: {w.tax_ns / 1e6:.2f} ms of the {w.tax_overlap_ns / 1e6:.2f} ms of compute "
        f"under communication, {label}"
    )


def _caveats(w: WhatIf) -> list[str]:
    """One line per distinct caveat, naming the scenarios it applies to."""
    by_note: dict[str, list[str]] = {}
    for r in w.scenarios + w.fix_rank:
        for part in r.note.split("; ") if r.note else ():
            by_note.setdefault(part, []).append(r.name)
    return [f"{', '.join(dict.fromkeys(names))}: {note}" for note, names in by_note.items()]


def _scenario(r: ScenarioResult) -> dict[str, Any]:
    values = (
        r.name,
        r.step_ns,
        r.speedup,
        r.changed,
        list(r.ranks),
        list(r.collectives),
        list(r.steps_ns),
        r.note or None,
        r.contention_ns,
        r.slack,
        r.baseline_ns,
    )
    return dict(zip(SCENARIOS.names, values, strict=True))


def to_dict(w: WhatIf) -> dict[str, Any]:
    slack = w.slack_ns or tuple(None for _ in w.step_labels)
    steps = zip(w.step_labels, w.observed_ns, w.replayed_ns, w.error_ratio, slack, strict=True)
    replay = (
        w.median_error_ratio,
        w.max_error_ratio,
        w.rounds,
        [dict(zip(REPLAY_STEPS.names, s, strict=True)) for s in steps],
        w.slack_ratio,
    )
    tax = (
        w.tax_ns,
        w.tax_overlap_ns,
        w.tax_unmeasured_ns,
        w.tax_estimated_ns,
        dict(w.tax_by_family_ns),
        list(w.tax_steps_ns),
        [dict(zip(TAX_RANK_STEPS.names, r, strict=True)) for r in w.tax_rank_steps],
        dict(w.tax_basis),
        w.tax_label,
    )
    return {
        "schema_version": WHATIF_SCHEMA_VERSION,
        "replay": dict(zip(REPLAY.names, replay, strict=True)),
        "scenarios": [_scenario(r) for r in w.scenarios],
        "fix_rank": [_scenario(r) for r in w.fix_rank],
        "straggler": w.straggler,
        "ideal": None
        if w.ideal_slowdown is None
        else {
            "slowdown": w.ideal_slowdown,
            "by_type": dict(w.ideal_by_type),
            "by_rank": {str(r): v for r, v in w.ideal_by_rank},
        },
        "overlap_tax": dict(zip(OVERLAP_TAX.names, tax, strict=True)),
        "findings": list(w.findings),
        "notes": list(w.notes),
    }


def render_json(w: WhatIf) -> EscapedText:
    """The what-if as JSON; ASCII, every other character escaped (``json.dumps``'s default):
    nothing for ``safe_text`` to remove."""
    return EscapedText(json.dumps(to_dict(w), indent=2) + "\n")


def advice_lines(a: Advice) -> list[str]:
    """The what-if lines of analyze's "What to try": one per scenario that buys the most, then
    the overlap-tax findings; or one saying the what-if was left out."""
    if a.left_out:
        return [
            f"what-if left out: the run graph has {a.nodes:,} activities (more than "
            f"{a.max_nodes:,}: its replays would take minutes); run traceoverlap whatif"
        ]
    return [_top_line(r, a.tax_kind, a.replay_ns) for r in a.scenarios] + [
        f"overlap tax: {f}" for f in a.findings
    ]


def _top_line(r: ScenarioResult, tax_kind: str = "", replay_ns: float | None = None) -> str:
    caveat = (
        f"; {_ms(r.contention_ns)} ms more compute beside communication, its contention left out"
        if r.contention_ns
        else ""
    )
    if SHARED_CPU_MARK in r.note:
        caveat += "; ranks share CPU cores, contention for them left out"
    if r.name == "no-overlap-tax" and tax_kind:
        caveat += f"; the tax {tax_kind}"
    against = ""
    if replay_ns is not None and r.baseline_ns is not None and abs(r.baseline_ns - replay_ns) >= 1:
        # a rank started at another time than the trace: measured from the same first starts
        against = f" against the replay's {_ms(r.baseline_ns)} ms from the same first starts"
    return (
        f"what-if {r.name}: step {_ms(r.step_ns)} ms, {_x(r.speedup)}{against} ({r.changed}"
        f"{caveat}; traceoverlap whatif)"
    )
