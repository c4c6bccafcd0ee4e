"""`traceoverlap report`: the offline HTML report."""

from __future__ import annotations

from typing import Any

import click

from ._common import (
    analysis_options,
    check_outputs,
    handle_errors,
    html_report,
    run_analysis,
    write_page,
)

# --- report ---------------------------------------------------------------------------------


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option(
    "-o",
    "--output",
    type=click.Path(dir_okay=False),
    default="report.html",
    show_default=True,
    help="The HTML file to write.",
)
@click.option(
    "--timeline-step",
    metavar="N",
    help="Step drawn as a timeline (its ProfilerStep number; default: the median step).",
)
@click.option(
    "--timeline-rank",
    type=int,
    metavar="R",
    help="Rank whose step is drawn as a timeline (default: the lowest rank).",
)
@click.option(
    "--plotlyjs",
    type=click.Choice(["embed", "cdn"]),
    default="embed",
    show_default=True,
    help="embed: plotly.js inside the file (works offline, ~5 MB); cdn: small file, needs the network.",
)
@analysis_options
@handle_errors
def report(
    paths: tuple[str, ...],
    output: str,
    timeline_step: str | None,
    timeline_rank: int | None,
    plotlyjs: str,
    **opts: Any,
) -> None:
    """Write an offline HTML report: summary, what to try, what fixing it would buy (the
    what-if), per-step bars, one step's timeline.

    PATHS: trace files or folders, as for `analyze`.

    \b
    Examples:
      traceoverlap report rank0.json.gz -o report.html
      traceoverlap report runs/bucketed/ --timeline-step 5 --timeline-rank 1
      traceoverlap report trace.json --plotlyjs cdn -o small.html
    """
    from ..whatif.advice import MAX_NODES

    check_outputs([output], paths, opts)
    # with the run graph: the what-if section (left out past MAX_NODES, as analyze's)
    result = run_analysis(paths, graph=True, graph_max_nodes=MAX_NODES, **opts)
    page = html_report(result, plotlyjs, timeline_step, opts.get("jobs"), timeline_rank)
    write_page(page, output)
    click.echo(f"wrote {'standard output' if output == '-' else output}", err=True)
