"""`traceoverlap export`: the run on one clock, for Perfetto."""

from __future__ import annotations

import os
from typing import Any

import click

from ..core.errors import UsageError
from ._common import analysis_options, check_outputs, handle_errors, run_analysis

# --- export: the run on one clock for Perfetto (issue 23) -----------------------------------


@click.command("export")
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "-o", "--output", required=True, metavar="FILE", help="Trace Event Format JSON to write."
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
    """
    from ..reporters.perfetto import write_trace

    check_outputs([output], paths, opts)
    result = run_analysis(paths, **opts)
    try:
        # O_NONBLOCK: a named pipe nobody reads is an error (ENXIO), not a hang
        fd = os.open(output, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NONBLOCK, 0o666)
        os.set_blocking(fd, True)
        with os.fdopen(fd, "wb") as fh:
            stats = write_trace(result, fh)
    except OSError as exc:
        raise UsageError(
            f"{output}: cannot write the output ({exc.strerror or exc}); check that the folder "
            "exists and is writable"
        ) from None
    n = sum(stats.events.values())
    click.echo(
        f"wrote {output}: {len(stats.events)} ranks, {n:,} events, {stats.flows} wait arrows",
        err=True,
    )
