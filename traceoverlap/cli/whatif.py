"""`traceoverlap whatif`: what fixing it would buy."""

from __future__ import annotations

import click

from ._common import check_outputs, debug_option, handle_errors, write_text

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
    "--format", "fmt", type=click.Choice(["text", "json"]), default="text", show_default=True
)
@click.option("-o", "--output", type=click.Path(dir_okay=False), help="Write to a file.")
@click.option("--step-regex", metavar="REGEX", help="Step marker regex (as for analyze).")
@click.option("-j", "--jobs", type=click.IntRange(1, None), help="Local processes for the map.")
@debug_option
@handle_errors
def whatif(
    paths: tuple[str, ...],
    scenarios: tuple[str, ...],
    fmt: str,
    output: str | None,
    step_regex: str | None,
    jobs: int | None,
) -> None:
    """What fixing it would buy: replay the run graph with a change (docs/whatif.md).

    \b
    Examples:
      traceoverlap whatif runs/slow_rank/
      traceoverlap whatif runs/job/ --scenario fix-rank:3 --scenario comm-speed:2
      traceoverlap whatif runs/job/ --format json -o whatif.json
    """
    from ..reporters.whatif_report import render_json, render_text
    from ..whatif.scenarios import load_graph, what_if

    check_outputs([output], paths, {})
    w = what_if(load_graph(list(paths), step_regex=step_regex, jobs=jobs), scenarios or None)
    write_text(render_json(w) if fmt == "json" else render_text(w), output)
