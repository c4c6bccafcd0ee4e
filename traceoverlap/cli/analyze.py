"""`traceoverlap analyze`: the per-rank, per-step table, why, and what to try."""

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
    html_report,
    report_whatif,
    run_analysis,
    write_page,
    write_text,
)

# --- analyze --------------------------------------------------------------------------------


@click.command()
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@format_options("analysis", "json has a stable schema (docs/cli.md 'JSON schema').")
@click.option(
    "--html", "html_path", type=click.Path(dir_okay=False), help="Also write the HTML report."
)
@click.option(
    "--fail-if",
    "fail_if",
    multiple=True,
    metavar="COND",
    help="Exit 3 when COND holds for the run, e.g. 'exposed_comm_ratio>0.2' or "
    "'exposed_wait_ns>5ms' (docs/cli.md 'CI gate').",
)
@click.option(
    "-v",
    "--verbose",
    is_flag=True,
    help="The table format in full: every finding of 'What to try', each whole, with the "
    "collectives behind it (by default each takes at most 4 lines; json has everything).",
)
@analysis_options
@handle_errors
def analyze(
    paths: tuple[str, ...],
    fmt: str | None,
    output: str | None,
    html_path: str | None,
    fail_if: tuple[str, ...],
    verbose: bool,
    **opts: Any,
) -> None:
    """Per-rank, per-step overlap of communication and computation, and why.

    PATHS: a Kineto trace (.json / .json.gz), an Nsight Systems export (.sqlite, or .nsys-rep
    with nsys installed), several of them, or a folder of rank traces.

    \b
    For every (rank, step): step time split into compute, exposed communication,
    memory copies and idle; how much communication was hidden behind compute;
    why the exposed part was exposed (waiting for a late peer, nothing left to
    compute, compute waiting for it, host not ready); the verdict with the
    numbers that decided it; then what to try.

    \b
    Examples:
      traceoverlap analyze rank0.json.gz
      traceoverlap analyze runs/bucketed/ -o result.json        # json: from the suffix
      traceoverlap analyze trace.json --steps 3-7 --rank 0
      traceoverlap analyze trace.json --step-regex '^train_step'
      traceoverlap analyze runs/x/ --fail-if 'exposed_comm_ratio>0.2'
      traceoverlap analyze runs/job/ -j 8                        # 8 local processes
      traceoverlap analyze /shared/job/ --scheduler tcp://head:8786   # a Dask cluster
    """
    conditions = None
    if fail_if:  # (the gate's module loads only when asked for)
        from ..run.gate import parse_conditions

        conditions = parse_conditions(fail_if)  # validate before the (possibly long) analysis
    check_outputs([output, html_path], paths, opts)
    form = choose("analysis", fmt, output)
    advice = None
    page_whatif = None
    if form.what_to_try:  # "What to try" adds what the what-if would buy
        import dataclasses

        from ..whatif.advice import MAX_NODES, advise

        result = run_analysis(paths, graph=True, graph_max_nodes=MAX_NODES, **opts)
        advice = advise(result)
        if html_path:  # the page's what-if section, before the graphs go
            page_whatif = report_whatif(result)
        result = dataclasses.replace(result, unit_graphs=None)  # their memory, for the outputs
    else:
        result = run_analysis(paths, **opts)
    tty, width = _terminal()
    write_text(
        form.render(
            result, color=tty and output is None, width=width, advice=advice, verbose=verbose
        ),
        output,
    )
    if html_path:
        write_page(html_report(result, jobs=opts.get("jobs"), whatif=page_whatif), html_path)
        click.echo(f"wrote {html_path}", err=True)
    if conditions is None:
        return
    from ..run.gate import failed_conditions

    failed = failed_conditions(conditions, result.summary.run)
    if failed:
        from ..core.errors import GateFailed

        raise GateFailed("fail-if met: " + "; ".join(failed))
