"""Text shared by the reporters: inputs, summary, what to try (terminal and Markdown), the words
for units and causes (the HTML report too). Formatting only: every number comes from the
:class:`~traceoverlap.run.results.Analysis`."""

from __future__ import annotations

import os
import textwrap
from collections.abc import Iterator
from typing import IO, TYPE_CHECKING, Any

from rich.console import Console

from ..core import fmt
from ..core.schema import (
    BOTTLENECK,
    COMM_NS,
    COMPUTE_NS,
    DEVICE,
    EXPOSED_BY_CAUSE,
    EXPOSED_COMM_NS,
    IDEAL_NS,
    IDLE_NS,
    MEMORY_ONLY_NS,
    OTHER_STEPS_NS,
    OVERLAP_RATIO,
    RANK,
    RATIO,
    STEP,
    STEP_NS,
    Column,
)
from ..core.vocab import CAUSE_WORDS, SHORT_BOTTLENECK
from ..run.summary import unit_key

if TYPE_CHECKING:
    from ..run.findings import Finding
    from ..run.results import Analysis


class _FilteringConsole(Console):
    """A rich console that removes terminal control from every string it is given (table cells,
    headers, titles, printed lines: all pass through :meth:`render_str`) before styling it, so
    a trace string cannot conceal or black out a line (``ESC[8m``) or move the cursor, and the
    colour sequences in its output are only its own (:class:`~traceoverlap.core.fmt.TerminalText`)."""

    def render_str(self, text: str, **kwargs: Any) -> Any:
        return super().render_str(fmt.safe_text(text), **kwargs)


def make_console(file: IO[str], *, color: bool, width: int) -> Console:
    """A rich console for a text report: colour only when asked (a terminal, and no NO_COLOR in
    the environment), at least 80 columns wide; the strings it prints lose any terminal control
    (:class:`_FilteringConsole`), so its output is :class:`~traceoverlap.core.fmt.TerminalText`."""
    color = color and not os.environ.get("NO_COLOR")
    return _FilteringConsole(
        file=file,
        width=max(width, 80),
        force_terminal=color,
        no_color=not color,
        color_system="auto" if color else None,
        highlight=False,
        emoji=False,
        markup=False,  # a trace string's "[conceal]" is text; our styles are Text / style=
    )


def several_devices(analysis: Analysis) -> set[int]:
    """Ranks whose process drove several GPUs (their rows carry the device)."""
    ranks = [t.rank for t in analysis.traces]
    return {r for r in ranks if ranks.count(r) > 1}


#: The step table of the terminal and Markdown reports: after the unit and the step, the step
#: columns shown (header, column): times in ms, ratios in %; then the verdict.
STEP_TABLE_COLUMNS: tuple[tuple[str, Column], ...] = (
    ("step ms", STEP_NS),
    ("compute", COMPUTE_NS),
    ("exposed", EXPOSED_COMM_NS),
    ("memory", MEMORY_ONLY_NS),
    ("idle", IDLE_NS),
    ("other", OTHER_STEPS_NS),
    ("comm", COMM_NS),
    ("overlap", OVERLAP_RATIO),
)
STEP_TABLE = (
    "rank",
    "step",
    *(h for h, c in STEP_TABLE_COLUMNS if c is not OTHER_STEPS_NS),
    "bottleneck",
)


def has_other_steps(analysis: Analysis) -> bool:
    """Do some steps' windows hold other steps' work (diagnosis.md §7)?"""
    st = analysis.steps
    col = OTHER_STEPS_NS.name
    return col in st.columns and bool((st[col] > 0).any())


def _shown(analysis: Analysis) -> tuple[tuple[str, Column], ...]:
    """:data:`STEP_TABLE_COLUMNS`, ``other`` (other steps' work) only when some step has it, so
    that the row still adds up."""
    other = has_other_steps(analysis)
    return tuple((h, c) for h, c in STEP_TABLE_COLUMNS if other or c is not OTHER_STEPS_NS)


def step_table_header(analysis: Analysis) -> tuple[str, ...]:
    """:data:`STEP_TABLE`, with an ``other`` column after ``idle`` when some step has it."""
    return ("rank", "step", *(h for h, _ in _shown(analysis)), "bottleneck")


def _cell(column: Column, value: object) -> str:
    return fmt.pct(value) if column.unit == RATIO else fmt.ms(value)


def step_table_rows(analysis: Analysis) -> Iterator[tuple[list[str], str]]:
    """Per (unit, step): the cells under :func:`step_table_header` (the verdict shortened to fit
    80 columns), and the verdict itself."""
    several = several_devices(analysis)
    shown = _shown(analysis)
    st = analysis.steps
    columns = [st[c.name].tolist() for _, c in shown]
    units, steps = st[RANK.name].tolist(), st[STEP.name].tolist()
    devices, verdicts = st[DEVICE.name].tolist(), st[BOTTLENECK.name].tolist()
    for i, verdict in enumerate(verdicts):
        cells = [
            unit_key(units[i], devices[i], units[i] in several),
            str(steps[i]),
            *(_cell(c, values[i]) for (_, c), values in zip(shown, columns, strict=True)),
            SHORT_BOTTLENECK.get(verdict, verdict),
        ]
        yield cells, verdict


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
            dev = f"GPU {t.device}" if t.rank in several or t.multiprocess_capture else "GPU"
            bits.append(f"{dev} {name}".strip())
        else:
            bits.append(t.devices[0] if t.devices else "CPU")
        if t.pid is not None and t.multiprocess_capture:
            bits.append(f"pid {t.pid}")
        lines.append(f"{t.path}: " + " · ".join(bits))
    return lines


def summary_lines(analysis: Analysis) -> list[str]:
    """The run summary in words: where the time of a step goes (means add up), ratios, causes,
    the verdicts and the most exposed step."""
    run = analysis.summary.run
    n_units = len(analysis.traces)
    mean = {k: (s.mean or 0.0) for k, s in run.metrics.items()}

    def ms(column: Column) -> str:
        return fmt.ms(mean[column.name])

    n = run.n_steps
    lines = [
        f"{fmt.count(n, 'step')} on {fmt.count(n_units, 'rank')}; per step (mean, the parts add "
        "up to the step):",
        f"  step {ms(STEP_NS)} ms = compute {ms(COMPUTE_NS)} + exposed comm "
        f"{ms(EXPOSED_COMM_NS)} + memory {ms(MEMORY_ONLY_NS)} + idle {ms(IDLE_NS)}"
        + (
            f" + other steps' work {ms(OTHER_STEPS_NS)}"
            if mean.get(OTHER_STEPS_NS.name, 0) > 0
            else ""
        ),
    ]
    exposed = run.totals.get(EXPOSED_COMM_NS.name, 0)
    if exposed:
        causes = [
            (label, run.totals.get(EXPOSED_BY_CAUSE[c].name, 0)) for c, label in CAUSE_WORDS.items()
        ]
        shown = ", ".join(f"{label} {fmt.pct(ns / exposed)}" for label, ns in causes if ns > 0)
        lines.append(f"  exposed comm {fmt.pct(run.exposed_comm_ratio)} of step time; why: {shown}")
    lines += [
        f"  overlap ratio {fmt.pct(run.overlap_ratio)} of comm hidden behind compute (comm "
        f"{ms(COMM_NS)} ms per step)",
        f"  ideal step {ms(IDEAL_NS)} ms -> potential speedup {fmt.speedup(run.potential_speedup)}",
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


#: The most lines one item of "What to try" takes in the terminal without ``--verbose``: the
#: number and the cause (the title), the fix (``try:``) and what it buys (the what-if lines).
ITEM_LINES = 4
#: Marks text cut to fit :data:`ITEM_LINES`.
CUT = " …"


def wrap(text: str, width: int, indent: str = "", cont: str | None = None) -> list[str]:
    """``text`` in lines of at most ``width`` columns, broken at spaces only: a file name or a
    path is never split (one longer than the line gets a line of its own); continuation lines
    start with ``cont`` (``indent`` and four spaces when not given). Terminal control in
    ``text`` (a trace string) goes first, so it can neither be split nor count as width."""
    return textwrap.wrap(
        fmt.safe_text(text),
        width=width,
        initial_indent=indent,
        subsequent_indent=indent + "    " if cont is None else cont,
        break_long_words=False,
        break_on_hyphens=False,
    ) or [indent.rstrip()]


def wrap_cut(text: str, width: int, lines: int, indent: str, cont: str) -> list[str]:
    """:func:`wrap`, cut to ``lines`` lines when longer: at the last ``"; "`` (a clause) that
    fits, else at the last word that fits, marked with :data:`CUT`."""
    full = wrap(text, width, indent, cont)
    if len(full) <= lines:
        return full
    clauses = text.split("; ")
    for k in range(len(clauses) - 1, 0, -1):
        out = wrap("; ".join(clauses[:k]) + ";" + CUT, width, indent, cont)
        if len(out) <= lines:
            return out
    words = text.split(" ")
    for k in range(len(words) - 1, 0, -1):
        out = wrap(" ".join(words[:k]) + CUT, width, indent, cont)
        if len(out) <= lines:
            return out
    return wrap(words[0] + CUT, width, indent, cont)


def finding_item(
    i: int, f: Finding, width: int, *, verbose: bool, indent: str = "  "
) -> tuple[list[str], bool]:
    """One item of "What to try" in the terminal, and whether it was shortened: whole with
    ``verbose`` (the title, ``try:`` and ``where:``, the collectives behind it), else the title
    and ``try:`` within :data:`ITEM_LINES` lines (the title at most half of them: the fix is
    what the reader came for)."""
    head = f"{indent}{i}. "
    body = " " * len(head)
    if verbose:
        lines = wrap(f.title, width, head, body)
        lines += wrap(f"try: {f.advice}", width, body, body + "    ")
        if f.collectives:
            lines += wrap(f"where: {'; '.join(f.collectives[:3])}", width, body, body + "    ")
        return lines, False
    title = wrap_cut(f.title, width, ITEM_LINES // 2, head, body)
    advice = wrap_cut(f"try: {f.advice}", width, ITEM_LINES - len(title), body, body + "    ")
    cut = title[-1].endswith(CUT) or advice[-1].endswith(CUT) or bool(f.collectives)
    return title + advice, cut


def finding_lines(findings: tuple[Finding, ...], limit: int = 4) -> list[str]:
    """The "what to try" block: title, advice and the collectives behind each finding."""
    out: list[str] = []
    for i, f in enumerate(findings[:limit], 1):
        out.append(f"{i}. {f.title}")
        out.append(f"   try: {f.advice}")
        if f.collectives:
            out.append(f"   where: {'; '.join(f.collectives[:3])}")
    return out
