"""The ``traceoverlap`` command line: a thin click layer over the library.

Only this package imports click: one module per command (``analyze``, ``compare``, ``report``,
``export``, ``whatif``, ``hang``, ``profile`` with ``demo``), the group and its one-line errors here, and
what the commands share (the option stack, building the library call, writing outputs) in
``_common``. Library errors (:class:`TraceoverlapError`) become one line on
stderr and the error's exit code here, at the boundary; ``--debug`` (before or after the command
name) shows the traceback instead. Nothing heavy is imported until a command runs, so ``--help``
and ``--version`` answer at once.
"""

from __future__ import annotations

import sys
from typing import Any

import click

from .._version import __version__
from ._common import debug_option
from .analyze import analyze
from .compare import compare
from .export import export_cmd
from .hang import hang
from .profile import demo, profile
from .report import report
from .whatif import whatif


class _OneLineErrors(click.Group):
    """click's own errors (an unknown option, a bad value, a missing argument) as one line, like
    every other error: ``traceoverlap: error: ... (see `traceoverlap analyze --help`)``."""

    def main(self, *args: Any, **kwargs: Any) -> Any:
        if kwargs.get("standalone_mode", True) is False:
            return super().main(*args, **kwargs)
        kwargs["standalone_mode"] = False
        from ..core._signals import Terminated, sigterm_exits

        try:
            # SIGTERM ends the command through its clean-up: outputs written atomically keep
            # the old file and leave no temporary one, an `nsys export` child is killed
            with sigterm_exits():
                code = super().main(*args, **kwargs)
        except Terminated:
            click.echo("traceoverlap: terminated", err=True)
            raise
        except click.UsageError as exc:
            if type(exc).__name__ == "NoArgsIsHelpError":  # bare `traceoverlap`: the help
                click.echo(exc.format_message())
                sys.exit(exc.exit_code)
            where = exc.ctx.command_path if exc.ctx is not None else "traceoverlap"
            msg = " ".join(exc.format_message().split())
            click.echo(f"traceoverlap: error: {msg} (see `{where} --help`)", err=True)
            sys.exit(exc.exit_code)
        except click.ClickException as exc:
            click.echo(f"traceoverlap: error: {' '.join(exc.format_message().split())}", err=True)
            sys.exit(exc.exit_code)
        except click.exceptions.Abort:
            click.echo("traceoverlap: interrupted", err=True)
            sys.exit(130)
        sys.exit(code if isinstance(code, int) else 0)


@click.group(
    cls=_OneLineErrors,
    context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100},
)
@click.version_option(__version__, prog_name="traceoverlap")
@debug_option
def main(debug: bool) -> None:
    """How much of your distributed-training communication is hidden behind computation,
    how much is exposed, and why.

    \b
    Start here:
      traceoverlap analyze trace.json.gz          per-rank, per-step table + what to try
      traceoverlap analyze runs/bucketed/         a folder of rank traces
      traceoverlap analyze report.sqlite          an Nsight Systems SQLite export
      traceoverlap report runs/x -o report.html   offline HTML timeline report
      traceoverlap export runs/x -o run.json      the run on one clock, for ui.perfetto.dev
      traceoverlap hang /tmp/fr_dumps/            stuck? who the others wait for (Flight Recorder)
      traceoverlap compare runs/naive runs/bucketed
      traceoverlap profile --strategy bucketed --world-size 2 --out runs/bucketed
      traceoverlap demo                           profile + analyze two strategies on CPU
    """


for _command in (analyze, compare, report, export_cmd, whatif, hang, profile, demo):
    main.add_command(_command)
