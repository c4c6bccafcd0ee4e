"""The ``traceoverlap`` command line: a thin click layer over the library.

Only this package imports click: one module per command (``analyze``, ``compare``, ``report``,
``export``, ``whatif``, ``hang``, ``profile`` with ``demo``), the group and its one-line errors here, and
what the commands share (the option stack, building the library call, writing outputs) in
``_common``. Library errors (:class:`TraceoverlapError`) become one line on
stderr and the error's exit code here, at the boundary; ``--debug`` (before or after the command
name) shows the traceback instead. Nothing heavy is imported until a command runs, so ``--help``
and ``--version`` answer at once, and a command imports its own module only (:data:`COMMANDS`).
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Iterator, MutableMapping
from typing import Any

import click

from .._version import __version__
from ._common import debug_option

#: Each command: the module of this package that defines it and the command's name there. A
#: command's module is imported when the command is looked up (it runs, or `--help` lists it),
#: so `traceoverlap analyze` does not load the other commands' modules.
COMMANDS = {
    "analyze": ("analyze", "analyze"),
    "compare": ("compare", "compare"),
    "report": ("report", "report"),
    "export": ("export", "export_cmd"),
    "whatif": ("whatif", "whatif"),
    "hang": ("hang", "hang"),
    "profile": ("profile", "profile"),
    "demo": ("profile", "demo"),
}


class _LazyCommands(MutableMapping[str, click.Command]):
    """The group's ``commands``: every name of :data:`COMMANDS`, each command imported from its
    module on first access (click reads ``commands`` only through the mapping's methods)."""

    def __init__(self, lazy: dict[str, tuple[str, str]]) -> None:
        self._lazy = dict(lazy)
        self._loaded: dict[str, click.Command] = {}

    def __getitem__(self, name: str) -> click.Command:
        if name not in self._loaded:
            if name not in self._lazy:
                raise KeyError(name)
            module, attr = self._lazy.pop(name)
            command = getattr(importlib.import_module(f"{__name__}.{module}"), attr)
            assert isinstance(command, click.Command)
            self._loaded[name] = command
        return self._loaded[name]

    def __setitem__(self, name: str, command: click.Command) -> None:
        self._lazy.pop(name, None)
        self._loaded[name] = command

    def __delitem__(self, name: str) -> None:
        if self._lazy.pop(name, None) is None:
            del self._loaded[name]

    def __iter__(self) -> Iterator[str]:
        return iter([*self._loaded, *self._lazy])

    def __len__(self) -> int:
        return len(self._loaded) + len(self._lazy)

    def __contains__(self, name: object) -> bool:
        return name in self._loaded or name in self._lazy


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


main.commands = _LazyCommands(COMMANDS)
