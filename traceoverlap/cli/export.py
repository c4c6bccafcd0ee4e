"""`traceoverlap export`: the run on one clock, for Perfetto."""

from __future__ import annotations

from typing import Any

import click

from ._common import analysis_options, check_outputs, handle_errors, run_analysis

# --- export: the run on one clock for Perfetto (issue 23) -----------------------------------


@click.command("export")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "-o",
    "--output",
    required=True,
    metavar="FILE",
    help="Trace Event Format JSON to write ('-': standard output). Written atomically: an "
    "interrupted export leaves the old file as it was.",
)
@analysis_options
@handle_errors
def export_cmd(paths: tuple[str, ...], output: str, **opts: Any) -> None:
    """Write the run on one clock as a trace for ui.perfetto.dev / chrome://tracing.

    One process per rank (clock offsets removed), its threads and streams as tracks, and
    analysis tracks on top: steps, exposed communication by cause, collective instances, and
    waits with an arrow to the rank waited for.

    \b
    Examples:
      traceoverlap export runs/bucketed/ -o run.json      then open run.json in ui.perfetto.dev
      traceoverlap export runs/bucketed/ -o - | gzip > run.json.gz
    """
    from ..reporters.outputs import open_output, writing_stdout
    from ..reporters.perfetto import write_trace

    check_outputs([output], paths, opts)
    result = run_analysis(paths, **opts)
    if output == "-":
        with writing_stdout() as out:  # a full disk or `ulimit -f` is an error, not a cut trace
            stats = write_trace(result, out)
    else:
        # a temporary file beside it, replacing it only once whole (reporters/outputs.py)
        with open_output(output) as fh:
            stats = write_trace(result, fh)
    n = sum(stats.events.values())
    where = "standard output" if output == "-" else output
    click.echo(
        f"wrote {where}: {len(stats.events)} ranks, {n:,} events, {stats.flows} wait arrows",
        err=True,
    )
