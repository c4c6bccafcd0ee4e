"""``traceoverlap compare`` output: table (terminal), JSON and Markdown. Formatting only.

JSON (``schema_version`` 2): ``step_speedup`` (baseline median step / candidate median step),
``headline``, ``main_change``, ``baseline`` / ``candidate`` (label, ranks, steps, bottleneck
counts), ``metrics`` (one object per metric: baseline and candidate medians, ``delta`` =
candidate - baseline, ``change_ratio`` = delta / baseline; times in ns, ratios 0-1),
``bottleneck`` (baseline, candidate, changed), ``collectives`` (exposure changed most), ``notes``.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Any

from rich import box
from rich.table import Table

from .._version import __version__
from ..core import fmt
from ..core.schema import OVERLAP_RATIO, STEP_NS
from ._format import make_console, wrap
from .json_report import SCHEMA_VERSION, encode, records

if TYPE_CHECKING:
    from ..run.compare import Comparison
    from ..run.results import Analysis


#: the one row of the table that is not a median (docs/metrics.md "Summaries")
RATIO_NOTE = (
    "overlap ratio: each run's total overlap / total comm, the figure analyze gives; not a median"
)


def _is_ratio(metric: str) -> bool:
    return metric.endswith("_ratio")


def _value(metric: str, v: Any) -> str:
    return fmt.pct(v) if _is_ratio(metric) else fmt.ms(v)


def _delta(metric: str, v: Any) -> str:
    if v is None or v != v:
        return "-"
    if _is_ratio(metric):
        return f"{100 * float(v):+.1f} pp"
    return fmt.signed_ms(v)


def _metric_cells(r: dict[str, Any]) -> tuple[str, str, str, str]:
    """A metric row's baseline, candidate, delta and change as text (a ratio has no change)."""
    metric = str(r["metric"])
    return (
        _value(metric, r["baseline"]),
        _value(metric, r["candidate"]),
        _delta(metric, r["delta"]),
        "-" if _is_ratio(metric) else fmt.signed_pct(r["change_ratio"]),
    )


def _collective_cells(r: dict[str, Any]) -> tuple[str, str, str]:
    """A collective row's median exposed ms in each run (``absent`` where the run has none of it)
    and the delta."""
    return (
        fmt.ms(r["baseline_exposed_ns"]) if r["baseline_count"] else "absent",
        fmt.ms(r["candidate_exposed_ns"]) if r["candidate_count"] else "absent",
        fmt.signed_ms(r["delta_ns"]),
    )


def main_change_text(cmp: Comparison) -> str | None:
    """The metric that moved most, in words: ``exposed comm fell by 15.82 ms per step (-59%)``."""
    if cmp.main_change is None:
        return None
    row = cmp.metric(cmp.main_change)
    d = float(row["delta"])
    rel = row["change_ratio"]
    rel_txt = f" ({fmt.signed_pct(rel)})" if rel is not None else ""
    label = str(row["label"]).strip()
    return f"{label} {'fell' if d < 0 else 'rose'} by {fmt.ms(abs(d))} ms per step{rel_txt}"


def headline(cmp: Comparison) -> str:
    """One sentence: the speedup and what moved most (plain text)."""
    step = cmp.metric(STEP_NS.name)
    parts = []
    if cmp.step_speedup is not None:
        parts.append(
            f"step_speedup {fmt.speedup(cmp.step_speedup)} (median step "
            f"{fmt.ms(step['baseline'])} -> {fmt.ms(step['candidate'])} ms)"
        )
    try:
        ov = cmp.metric(OVERLAP_RATIO.name)
    except KeyError:
        ov = {"baseline": None, "candidate": None}
    if ov["baseline"] is not None or ov["candidate"] is not None:
        parts.append(f"overlap ratio {fmt.pct(ov['baseline'])} -> {fmt.pct(ov['candidate'])}")
    change = main_change_text(cmp)
    if change:
        parts.append(change)
    if cmp.bottleneck_changed:
        parts.append(f"bottleneck {cmp.baseline_bottleneck} -> {cmp.candidate_bottleneck}")
    else:
        parts.append(f"bottleneck unchanged ({cmp.baseline_bottleneck})")
    return "; ".join(parts)


def _run_info(a: Analysis, label: str, bottlenecks: dict[str, int]) -> dict[str, Any]:
    run = a.summary.run
    return {
        "label": label,
        "paths": sorted({t.path for t in a.traces}),
        "ranks": a.ranks,
        "n_steps": run.n_steps,
        "dominant_bottleneck": run.dominant_bottleneck,
        "bottlenecks": bottlenecks,
    }


def to_dict(cmp: Comparison) -> dict[str, Any]:
    return {
        "schema_version": SCHEMA_VERSION,
        "tool": {"name": "traceoverlap", "version": __version__},
        "step_speedup": cmp.step_speedup,
        "headline": headline(cmp),
        "main_change": main_change_text(cmp),
        "baseline": _run_info(cmp.baseline, cmp.baseline_label, cmp.baseline_bottlenecks),
        "candidate": _run_info(cmp.candidate, cmp.candidate_label, cmp.candidate_bottlenecks),
        "metrics": [
            {**r, "label": str(r["label"]).strip()}
            for r in records(cmp.metrics, list(cmp.metrics.columns))
        ],
        "bottleneck": {
            "baseline": cmp.baseline_bottleneck,
            "candidate": cmp.candidate_bottleneck,
            "changed": cmp.bottleneck_changed,
        },
        "collectives": records(cmp.collectives, list(cmp.collectives.columns)),
        "notes": list(cmp.notes),
    }


def render_json(cmp: Comparison) -> str:
    return encode(to_dict(cmp))


def _bottleneck_text(counts: dict[str, int]) -> str:
    return ", ".join(f"{k} {v}" for k, v in counts.items()) or "-"


def render_table(
    cmp: Comparison, *, color: bool = False, width: int = 80, verbose: bool = False
) -> str:
    """The comparison for a terminal, wrapped to ``width`` (at least 80) columns at spaces (a
    path stays whole); ``verbose`` changes nothing: every line is shown."""
    buf = io.StringIO()
    console = make_console(buf, color=color, width=width)
    width = max(width, 80)

    def say(text: str, indent: str = "", cont: str = "    ") -> None:
        for line in wrap(text, width, indent, cont):
            console.print(line, markup=False, soft_wrap=True)

    say(f"baseline:  {cmp.baseline_label}")
    say(f"candidate: {cmp.candidate_label}")
    console.print()
    table = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
    for col, just in (
        ("median per step", "left"),
        ("baseline", "right"),
        ("candidate", "right"),
        ("delta", "right"),
        ("change", "right"),
    ):
        table.add_column(col, justify=just, no_wrap=True)  # type: ignore[arg-type]
    for r in cmp.metrics.to_dict("records"):
        unit = "" if _is_ratio(str(r["metric"])) else " ms"
        table.add_row(str(r["label"]) + unit, *_metric_cells(r))
    console.print(table)
    if (cmp.metrics["metric"] == OVERLAP_RATIO.name).any():
        say(f"({RATIO_NOTE})")
    say(f"step_speedup: {fmt.speedup(cmp.step_speedup)}")
    change = main_change_text(cmp)
    if change:
        say(f"main change: {change}")
    verdict = (
        f"changed: {cmp.baseline_bottleneck} -> {cmp.candidate_bottleneck}"
        if cmp.bottleneck_changed
        else f"unchanged: {cmp.baseline_bottleneck}"
    )
    say(
        f"bottleneck {verdict} "
        f"(steps: {_bottleneck_text(cmp.baseline_bottlenecks)} -> "
        f"{_bottleneck_text(cmp.candidate_bottlenecks)})"
    )
    if not cmp.collectives.empty:
        console.print()
        console.print("Collectives whose exposure changed most (median exposed ms per step):")
        ct = Table(box=box.SIMPLE_HEAD, pad_edge=False, show_edge=False, header_style="bold")
        for col in ("collective", "baseline", "candidate", "delta"):
            ct.add_column(col, justify="left" if col == "collective" else "right", no_wrap=True)
        for r in cmp.collectives.to_dict("records"):
            ct.add_row(str(r["collective"]), *_collective_cells(r))
        console.print(ct)
    if cmp.notes:
        console.print()
        console.print("Notes:", style="bold")
        for n in cmp.notes:
            say(n, "  - ", "    ")
    return fmt.TerminalText(buf.getvalue())


def render_markdown(cmp: Comparison) -> str:
    lines = [
        "# traceoverlap compare",
        "",
        f"- baseline: `{cmp.baseline_label}`",
        f"- candidate: `{cmp.candidate_label}`",
        f"- **{headline(cmp)}**",
        "",
        "| median per step | baseline | candidate | delta | change |",
        "|---|---:|---:|---:|---:|",
    ]
    for r in cmp.metrics.to_dict("records"):
        unit = "" if _is_ratio(str(r["metric"])) else " (ms)"
        lines.append(f"| {r['label']}{unit} | " + " | ".join(_metric_cells(r)) + " |")
    if (cmp.metrics["metric"] == OVERLAP_RATIO.name).any():
        lines += ["", RATIO_NOTE[0].upper() + RATIO_NOTE[1:] + "."]
    lines += [
        "",
        f"Bottleneck: {cmp.baseline_bottleneck} -> {cmp.candidate_bottleneck} "
        f"({'changed' if cmp.bottleneck_changed else 'unchanged'}).",
    ]
    if not cmp.collectives.empty:
        lines += [
            "",
            "## Collectives whose exposure changed most",
            "",
            "| collective | baseline exposed (ms) | candidate exposed (ms) | delta (ms) |",
            "|---|---:|---:|---:|",
        ]
        for r in cmp.collectives.to_dict("records"):
            lines.append(f"| {r['collective']} | " + " | ".join(_collective_cells(r)) + " |")
    if cmp.notes:
        lines += ["", "## Notes", ""] + [f"- {n}" for n in cmp.notes]
    return "\n".join(lines) + "\n"
