"""Errors a user can act on.

Every error the library raises on bad input is a :class:`TraceoverlapError`; the CLI prints
``str(error)`` on one line and exits with ``error.exit_code`` (never a traceback unless
``--debug``). Library code never logs-and-returns-None: it raises one of these.
"""

from __future__ import annotations

from pathlib import Path


class TraceoverlapError(Exception):
    """Base class: something the user can fix. ``exit_code`` is what the CLI exits with."""

    exit_code = 2


class UsageError(TraceoverlapError):
    """Bad options or arguments (a malformed ``--steps`` range, an invalid regex...)."""


class TraceFormatError(TraceoverlapError):
    """An input file that cannot be read as a supported trace.

    ``reason`` says what is wrong, ``hint`` what to do about it; the message names the file.
    """

    def __init__(self, path: str | Path, reason: str, hint: str = "") -> None:
        self.path = str(path)
        self.reason = reason
        self.hint = hint
        msg = f"{self.path}: {reason}"
        if hint:
            msg += f" ({hint})"
        super().__init__(msg)


class GateFailed(TraceoverlapError):
    """A ``--fail-if`` condition was met: the analysis worked, the run failed the gate."""

    exit_code = 3


class NotATraceError(TraceFormatError):
    """A readable file that is not a trace at all (a config file, this tool's own JSON output).

    Named on the command line it is an error like any other; found by listing a folder it is
    skipped with a note.
    """
