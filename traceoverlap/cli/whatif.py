"""`traceoverlap whatif`: what fixing it would buy."""

from __future__ import annotations

from typing import Any

import click

from ._common import (
    _terminal,
    analysis_options_with,
    check_outputs,
    handle_errors,
    run_analysis,
    text_or_json_options,
    write_text,
)

# --- whatif (issue 22) ----------------------------------------------------------------------


class _ScenarioOption(click.Option):
    """``--scenario``: its help lists the scenarios registered when it is shown
    (:mod:`traceoverlap.whatif.registry`, which loads no numpy)."""

    def get_help_record(self, ctx: click.Context) -> tuple[str, str] | None:
        from ..whatif.registry import option_help

        self.help = option_help()
        return super().get_help_record(ctx)


class _WhatifCommand(click.Command):
    """``whatif --help`` ends with every registered scenario and its line of help."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        from ..whatif.registry import SCENARIOS

        with formatter.section("Scenarios"):
            formatter.write_dl([(s.spelling, s.help) for s in SCENARIOS.values()])
        super().format_epilog(ctx, formatter)


@click.command(cls=_WhatifCommand)
@click.argument("paths", nargs=-1, required=True, type=click.Path())
@click.option("--scenario", "scenarios", cls=_ScenarioOption, multiple=True, metavar="NAME")
@click.option(
    "--sync-tolerance-us",
    type=click.FloatRange(min=0),
    default=None,
    metavar="US",
    help="Keep a guessed cross-stream sync edge that the trace contradicts by at most this many "
    "microseconds (clock granularity, launch jitter); drop it beyond (default 10).",
)
@text_or_json_options(
    "text: a row per scenario, then fixing each rank that matters; json: the same as data "
    "(docs/whatif.md)."
)
@analysis_options_with(
    steps="Only these step numbers (as for analyze): the run graph holds only their activities, "
    "so the replay and every step time are of those steps.",
    ranks="Check that rank R is in the input (repeatable). The replay always holds every rank "
    "given (a rank's collectives wait for the others, as analyze matches them all), so the "
    "tables do not change.",
    lost_threshold="The verdicts' threshold (as for analyze, and from --config): the replay does "
    "not read it.",
)
@handle_errors
def whatif(
    paths: tuple[str, ...],
    scenarios: tuple[str, ...],
    fmt: str,
    output: str | None,
    **opts: Any,
) -> None:
    """What fixing it would buy: replay the run graph with a change (docs/whatif.md).

    \b
    Examples:
      traceoverlap whatif runs/slow_rank/
      traceoverlap whatif runs/job/ --scenario fix-rank:3 --scenario comm-speed:2
      traceoverlap whatif runs/job/ --format json -o whatif.json
      traceoverlap whatif runs/job/ --steps 10-20 --comm-pattern my_allreduce
    """
    from ..reporters.whatif_report import render_json, render_text
    from ..whatif.scenarios import analysis_graph, straggler_of, what_if

    check_outputs([output], paths, opts)
    tolerance = opts.pop("sync_tolerance_us")
    # the run graph as analyze's "What to try" builds it, here without a node limit
    analysis = run_analysis(paths, graph=True, **opts)
    g = analysis_graph(analysis)
    straggler, credit = straggler_of(analysis)
    w = what_if(
        g,
        scenarios or None,
        sync_tolerance_ns=None if tolerance is None else round(tolerance * 1000),
        straggler=straggler,
        credit=credit,
    )
    write_text(render_json(w) if fmt == "json" else render_text(w, width=_terminal()[1]), output)
