"""Text shared by the reporters: inputs, summary, what to try (terminal and Markdown), the words
for units and causes (the HTML report too). Formatting only: every number comes from the
:class:`~traceoverlap.results.Analysis`."""

from __future__ import annotations

import os
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING

from rich.console import Console

from .. import fmt
from ..summary import unit_key
from ..vocab import CAUSE_WORDS, SHORT_BOTTLENECK

if TYPE_CHECKING:
    from ..diagnosis import Finding
    from ..results import Analysis


def make_console(file: IO[str], *, color: bool, width: int) -> Console:
    """A rich console for a text report: colour only when asked (a terminal, and no NO_COLOR in
    the environment), at least 80 columns wide."""
    color = color and not os.environ.get("NO_COLOR")
    return Console(
        file=file,
        width=max(width, 80),
        force_terminal=color,
        no_color=not color,
        color_system="auto" if color else None,
        highlight=False,
        emoji=False,
    )


def several_devices(analysis: Analysis) -> set[int]:
    """Ranks whose process drove several GPUs (their rows carry the device)."""
    ranks = [t.rank for t in analysis.traces]
    return {r for r in ranks if ranks.count(r) > 1}


#: The step table of the terminal and Markdown reports: times in ms, overlap ratio in %.
STEP_TABLE = (
    "rank",
    "step",
    "step ms",
    "compute",
    "exposed",
    "memory",
    "idle",
    "comm",
    "overlap",
    "bottleneck",
)


def has_other_steps(analysis: Analysis) -> bool:
    """Do some steps' windows hold other steps' work (diagnosis.md §7)?"""
    st = analysis.steps
    return "other_steps_ns" in st.columns and bool((st["other_steps_ns"] > 0).any())


def step_table_header(analysis: Analysis) -> tuple[str, ...]:
    """:data:`STEP_TABLE`, with an ``other`` column (other steps' work) after ``idle`` when
    some step has it, so that the row still adds up."""
    if not has_other_steps(analysis):
        return STEP_TABLE
    i = STEP_TABLE.index("idle") + 1
    return STEP_TABLE[:i] + ("other",) + STEP_TABLE[i:]


def step_table_rows(analysis: Analysis) -> Iterator[tuple[list[str], str]]:
    """Per (unit, step): the cells under :func:`step_table_header` (the verdict shortened to fit
    80 columns), and the verdict itself."""
    several = several_devices(analysis)
    other = has_other_steps(analysis)
    for r in analysis.steps.itertuples(index=False):
        times: tuple[int, ...] = (
            r.step_ns,
            r.compute_ns,
            r.exposed_comm_ns,
            r.memory_only_ns,
            r.idle_ns,
        )
        times += ((r.other_steps_ns,) if other else ()) + (r.comm_ns,)
        cells = [
            unit_key(r.rank, r.device, r.rank in several),
            str(r.step),
            *(fmt.ms(ns) for ns in times),
            fmt.pct(r.overlap_ratio),
            SHORT_BOTTLENECK.get(r.bottleneck, r.bottleneck),
        ]
        yield cells, r.bottleneck


def describe_inputs(analysis: Analysis) -> list[str]:
    """One line per unit: file, format, rank (and where it came from), backend, device."""
    lines = []
    several = several_devices(analysis)
    for t in analysis.traces:
        bits = [f"{t.format}" + (f" {t.format_version}" if t.format_version else "")]
        ws = f" of {t.world_size}" if t.world_size else ""
        bits.append(f"rank {t.rank}{ws} (from {t.rank_source})")
        if t.backend:
            bits.append(t.backend)
        if t.device_kind == "gpu":
            name = t.devices[0] if t.devices else ""
            dev = f"GPU {t.device}" if t.rank in several or t.format == "nsys" else "GPU"
            bits.append(f"{dev} {name}".strip())
        else:
            bits.append(t.devices[0] if t.devices else "CPU")
        if t.pid is not None and t.format == "nsys":
            bits.append(f"pid {t.pid}")
        lines.append(f"{t.path}: " + " · ".join(bits))
    return lines


def summary_lines(analysis: Analysis) -> list[str]:
    """The run summary in words: where the time of a step goes (means add up), ratios, causes,
    the verdicts and the most exposed step."""
    run = analysis.summary.run
    n_units = len(analysis.traces)
    mean = {k: (s.mean or 0.0) for k, s in run.metrics.items()}
    n = run.n_steps
    lines = [
        f"{fmt.count(n, 'step')} on {fmt.count(n_units, 'rank')}; per step (mean, the parts add "
        "up to the step):",
        f"  step {fmt.ms(mean['step_ns'])} ms = compute {fmt.ms(mean['compute_ns'])} + exposed "
        f"comm {fmt.ms(mean['exposed_comm_ns'])} + memory {fmt.ms(mean['memory_only_ns'])} + idle "
        f"{fmt.ms(mean['idle_ns'])}"
        + (
            f" + other steps' work {fmt.ms(mean['other_steps_ns'])}"
            if mean.get("other_steps_ns", 0) > 0
            else ""
        ),
    ]
    exposed = run.totals.get("exposed_comm_ns", 0)
    if exposed:
        causes = [(label, run.totals.get(f"exposed_{c}_ns", 0)) for c, label in CAUSE_WORDS.items()]
        shown = ", ".join(f"{label} {fmt.pct(ns / exposed)}" for label, ns in causes if ns > 0)
        lines.append(f"  exposed comm {fmt.pct(run.exposed_comm_ratio)} of step time; why: {shown}")
    lines += [
        f"  overlap ratio {fmt.pct(run.overlap_ratio)} of comm hidden behind compute (comm "
        f"{fmt.ms(mean['comm_ns'])} ms per step)",
        f"  ideal step {fmt.ms(mean['ideal_ns'])} ms -> potential speedup "
        f"{fmt.speedup(run.potential_speedup)}",
    ]
    if run.dominant_bottleneck:
        others = ", ".join(
            f"{k} {v}" for k, v in run.bottlenecks.items() if k != run.dominant_bottleneck
        )
        lines.append(
            f"  verdict: {run.dominant_bottleneck} in {run.bottlenecks.get(run.dominant_bottleneck, 0)}"
            f" of {n} steps" + (f" (also {others})" if others else "")
        )
    worst = run.worst_step
    if worst is not None and worst.exposed_comm_ns > 0:
        lines.append(
            f"  most exposed: rank {worst.rank} step {worst.step} "
            f"({fmt.ms(worst.exposed_comm_ns)} ms exposed communication, waiting and transfer): "
            f"{worst.bottleneck}: {worst.reason}"
        )
    return lines


def finding_lines(findings: tuple[Finding, ...], limit: int = 4) -> list[str]:
    """The "what to try" block: title, advice and the collectives behind each finding."""
    out: list[str] = []
    for i, f in enumerate(findings[:limit], 1):
        out.append(f"{i}. {f.title}")
        out.append(f"   try: {f.advice}")
        if f.collectives:
            out.append(f"   where: {'; '.join(f.collectives[:3])}")
    return out
