"""The ``traceoverlap`` command line: a thin click layer over the library.

Only this module imports click. Library errors (:class:`TraceoverlapError`) become one line on
stderr and the error's exit code here, at the boundary; ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import click

from . import __version__
from .errors import TraceoverlapError

F = TypeVar("F", bound=Callable[..., Any])


def handle_errors(func: F) -> F:
    """Turn library errors into one clear line and a non-zero exit (no traceback)."""

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        ctx = click.get_current_context()
        debug = bool(ctx.find_root().params.get("debug"))
        try:
            return func(*args, **kwargs)
        except TraceoverlapError as exc:
            if debug:
                raise
            click.echo(f"traceoverlap: error: {exc}", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            click.echo("traceoverlap: interrupted", err=True)
            sys.exit(130)

    return wrapper  # type: ignore[return-value]


@click.group(context_settings={"help_option_names": ["-h", "--help"], "max_content_width": 100})
@click.version_option(__version__, prog_name="traceoverlap")
@click.option("--debug", is_flag=True, help="Show full tracebacks instead of one-line errors.")
def main(debug: bool) -> None:
    """How much of your distributed-training communication is hidden behind computation,
    how much is exposed, and why.

    \b
    Start here:
      traceoverlap analyze trace.json.gz          per-rank, per-step overlap table
      traceoverlap analyze runs/bucketed/         a folder of rank traces
      traceoverlap analyze report.sqlite          an Nsight Systems SQLite export
      traceoverlap report runs/x -o report.html   offline HTML timeline report
      traceoverlap compare runs/naive runs/bucketed
      traceoverlap profile --strategy bucketed --world-size 2 --out runs/bucketed
      traceoverlap demo                           profile + analyze two strategies on CPU
    """


# Commands are registered below, one section per command.
