"""`traceoverlap compare`: what an optimisation changed."""

from __future__ import annotations

from typing import Any

import click

from ..reporters.formats import choose
from ._common import (
    _terminal,
    analysis_options,
    check_outputs,
    format_options,
    handle_errors,
    run_analysis,
    write_page,
    write_text,
)

# --- compare --------------------------------------------------------------------------------


@click.command()
@click.argument("baseline", type=click.Path())
@click.argument("candidate", type=click.Path())
@format_options("compare", "json has a top-level step_speedup.")
@click.option(
    "--top",
    type=click.IntRange(0, None),
    default=10,
    show_default=True,
    help="How many collectives whose exposure changed most to list.",
)
@click.option(
    "--html",
    "html_path",
    type=click.Path(dir_okay=False),
    help="Also write a side-by-side HTML report (the comparison, then both runs' reports).",
)
@analysis_options
@handle_errors
def compare(
    baseline: str,
    candidate: str,
    fmt: str | None,
    output: str | None,
    top: int,
    html_path: str | None,
    **opts: Any,
) -> None:
    """What an optimisation changed: BASELINE vs CANDIDATE (each a trace file or a folder of
    rank traces), median per step side by side.

    \b
    Step time, compute, communication, overlap ratio, exposed communication and why
    it was exposed, memory and idle; deltas; step_speedup = baseline median step /
    candidate median step; whether the verdict changed; the collectives whose
    exposure changed most. The same options (--steps, --rank, ...) apply to both.

    \b
    Examples:
      traceoverlap compare runs/naive runs/bucketed
      traceoverlap compare before.json.gz after.json.gz --format json
      traceoverlap compare runs/naive runs/bucketed --html compare.html
    """
    from ..run.compare import compare as compare_runs

    check_outputs([output, html_path], (baseline, candidate), opts)
    form = choose("compare", fmt, output)
    base = run_analysis((baseline,), **opts)
    cand = run_analysis((candidate,), **opts)
    cmp = compare_runs(base, cand, baseline_label=baseline, candidate_label=candidate, top=top)
    tty, width = _terminal()
    write_text(form.render(cmp, color=tty and output is None, width=width), output)
    if html_path:
        from ..reporters.compare_html import render as render_compare
        from ..run.detail import step_detail

        details = (step_detail(base), step_detail(cand))
        write_page(render_compare(cmp, details=details), html_path)
        click.echo(f"wrote {html_path}", err=True)
