"""Small formatting helpers shared by the text reporters (no computation here)."""

from __future__ import annotations

from typing import IO, TYPE_CHECKING, Any

from rich.console import Console

if TYPE_CHECKING:
    from ..analysis import Analysis


def make_console(file: IO[str], *, color: bool, width: int) -> Console:
    """A rich console for a text report: colour only when asked (a terminal), at least 80 wide."""
    return Console(
        file=file,
        width=max(width, 80),
        force_terminal=color,
        no_color=not color,
        color_system="auto" if color else None,
        highlight=False,
        emoji=False,
    )


SHORT_BOTTLENECK = {
    "communication-bound": "comm-bound",
    "exposed-communication": "exposed-comm",
    "idle-bound": "idle-bound",
    "compute-bound": "compute",
}


def ms(ns: Any, digits: int = 2) -> str:
    """Nanoseconds -> milliseconds text; '-' for missing."""
    if ns is None:
        return "-"
    return f"{float(ns) / 1e6:.{digits}f}"


def pct(ratio: Any, digits: int = 1) -> str:
    """A 0-1 ratio -> percent text; '-' for None (e.g. overlap ratio of a step without comm)."""
    if ratio is None:
        return "-"
    return f"{100 * float(ratio):.{digits}f}%"


def speedup(x: Any) -> str:
    return "-" if x is None else f"{float(x):.2f}x"


def describe_inputs(analysis: Analysis) -> list[str]:
    """One line per input trace: file, format, rank (and where it came from), backend, device."""
    lines = []
    for t in analysis.timeline.traces:
        bits = [f"{t.format}" + (f" {t.format_version}" if t.format_version else "")]
        ws = f" of {t.world_size}" if t.world_size else ""
        bits.append(f"rank {t.rank}{ws} (from {t.rank_source})")
        if t.backend:
            bits.append(t.backend)
        dev = t.devices[0] if t.devices else ("GPU" if t.device_kind == "gpu" else "CPU")
        if t.device_kind == "gpu" and t.devices:
            dev = f"GPU {t.devices[0]}"
        bits.append(dev)
        if t.pid is not None and t.format == "nsys":
            bits.append(f"pid {t.pid}" + (f" device {t.device}" if t.device is not None else ""))
        lines.append(f"{t.path}: " + " · ".join(bits))
    return lines


def summary_lines(analysis: Analysis) -> list[str]:
    """The run summary in words: medians, aggregate ratios, the dominant bottleneck, the worst step."""
    run = analysis.summary["run"]
    m = run.get("metrics", {})

    def med(col: str) -> Any:
        return m.get(col, {}).get("median")

    n_ranks = len(analysis.summary["ranks"])
    lines = [
        f"{run['n_steps']} step{'s' if run['n_steps'] != 1 else ''} on {n_ranks} rank"
        f"{'s' if n_ranks != 1 else ''} (medians over steps):",
        f"  step {ms(med('step_ns'))} ms: compute {ms(med('compute_ns'))}, comm {ms(med('comm_ns'))} "
        f"({ms(med('exposed_comm_ns'))} exposed), memory {ms(med('memory_ns'))}, idle {ms(med('idle_ns'))}",
        f"  overlap ratio {pct(run.get('overlap_ratio'))} of comm hidden; exposed comm "
        f"{pct(run.get('exposed_comm_ratio'))} of step time",
        f"  ideal step {ms(med('ideal_ns'))} ms -> potential speedup {speedup(run.get('potential_speedup'))}",
    ]
    counts = run.get("bottlenecks", {})
    dom = run.get("dominant_bottleneck")
    if dom:
        lines.append(f"  bottleneck: {dom} in {counts.get(dom, 0)} of {run['n_steps']} steps")
    worst = run.get("worst_step")
    if worst and worst.get("exposed_comm_ns", 0) > 0:
        lines.append(
            f"  most exposed: rank {worst['rank']} step {worst['step']} "
            f"({ms(worst['exposed_comm_ns'])} ms exposed): {worst['bottleneck']}: {worst['reason']}"
        )
    return lines
