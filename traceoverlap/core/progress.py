"""Progress of long work, reported by the stages and shown by whoever installs a reporter.

A 64-rank folder or a 500 MB ``nsys export`` once printed nothing for tens of seconds (issue 35).
The stages say what they are doing through :func:`steps` (``total`` units, advanced one by one:
the per-rank map) and :func:`activity` (work of unknown length: an ``nsys export``); with no
reporter installed both do nothing, so the library is quiet. The CLI installs one
(:mod:`traceoverlap.reporters.progress`: a transient rich bar on stderr) only when stderr is a
terminal, so a pipe, a file, JSON or CSV never sees it. Only the process that installed the
reporter shows progress: a worker process the map forks inherits it, and stays quiet.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Protocol


class Reporter(Protocol):
    """What shows progress: both methods are context managers around the work."""

    def steps(self, label: str, total: int) -> AbstractContextManager[Callable[[], None]]:
        """``total`` units of work; the context gives the function that marks one done."""

    def activity(self, label: str) -> AbstractContextManager[None]:
        """Work of unknown length (a spinner and the time elapsed)."""


_reporter: Reporter | None = None
_owner_pid = 0


def install(reporter: Reporter | None) -> Reporter | None:
    """Make ``reporter`` show this process's progress (None: nothing shown); returns the one it
    replaces."""
    global _reporter, _owner_pid
    before = _active()
    _reporter, _owner_pid = reporter, os.getpid()
    return before


def _active() -> Reporter | None:
    return _reporter if _reporter is not None and os.getpid() == _owner_pid else None


def _nothing() -> None:
    return None


@contextmanager
def steps(label: str, total: int) -> Iterator[Callable[[], None]]:
    """``with steps("reading rank traces", n) as done: ... done()`` once per unit."""
    reporter = _active()
    if reporter is None:
        yield _nothing
        return
    with reporter.steps(label, total) as done:
        yield done


@contextmanager
def activity(label: str) -> Iterator[None]:
    """``with activity("exporting x.nsys-rep to SQLite"): ...``"""
    reporter = _active()
    if reporter is None:
        yield
        return
    with reporter.activity(label):
        yield
