"""The progress of long work on a terminal: a transient rich display on stderr for
:mod:`traceoverlap.core.progress` (the stages report, this shows).

:func:`terminal_reporter` decides: a display only when stderr is a terminal (and ``TERM`` is not
``dumb``); otherwise None, and the run is quiet. The display is one rich ``Progress`` shared by
everything in flight (a rank bar with an ``nsys export`` spinner under it: rich allows one live
display per console), removed when the last piece of work ends.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import IO, Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    Progress,
    ProgressColumn,
    SpinnerColumn,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)
from rich.text import Text


class _Count(ProgressColumn):
    """``done/total`` for counted work, nothing for an activity."""

    def render(self, task: Task) -> Text:
        if task.total is None:
            return Text("")
        return Text(f"{int(task.completed)}/{int(task.total)}")


class RichProgress:
    """A :class:`traceoverlap.core.progress.Reporter` drawing on ``console``."""

    def __init__(self, console: Console) -> None:
        self.console = console
        self._progress: Progress | None = None
        self._open = 0

    @contextmanager
    def _task(self, label: str, total: int | None) -> Iterator[tuple[Progress, TaskID]]:
        if self._progress is None:
            self._progress = Progress(
                SpinnerColumn(),
                TextColumn("{task.description}"),
                BarColumn(),
                _Count(),
                TimeElapsedColumn(),
                console=self.console,
                transient=True,
            )
            self._progress.start()
        progress = self._progress
        self._open += 1
        task = progress.add_task(label, total=total)
        try:
            yield progress, task
        finally:
            progress.remove_task(task)
            self._open -= 1
            if self._open == 0:
                progress.stop()
                self._progress = None

    @contextmanager
    def steps(self, label: str, total: int) -> Iterator[Callable[[], None]]:
        with self._task(label, total) as (progress, task):
            yield lambda: progress.advance(task)

    @contextmanager
    def activity(self, label: str) -> Iterator[None]:
        with self._task(label, None):
            yield


def shows_progress(stream: Any) -> bool:
    """Whether ``stream`` (stderr) is a terminal a progress display may draw on."""
    try:
        tty = bool(stream.isatty())
    except (AttributeError, ValueError, OSError):  # closed, or not a real stream
        return False
    return tty and os.environ.get("TERM") != "dumb"


def terminal_reporter(stream: IO[str] | None = None) -> RichProgress | None:
    """A display on ``stream`` (default stderr) when it is a terminal, else None."""
    stream = sys.stderr if stream is None else stream
    if not shows_progress(stream):
        return None
    return RichProgress(Console(file=stream, stderr=stream is sys.stderr))
