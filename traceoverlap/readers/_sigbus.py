"""One clear line, not "Bus error", when a memory-mapped input shrinks while it is read.

Plain trace files and SQLite exports are memory-mapped; when another program truncates or
rewrites the file meanwhile (``cp`` over it, a profiler re-exporting), touching a page past the
new end raises SIGBUS. Python cannot recover from it (its own handler only sets a flag and the
faulting access repeats), so :func:`guard` installs, while a file is read, a C-level handler
(through ``ctypes``) that writes one line naming the file and exits with status 2, as every bad
input does. Where ``ctypes`` cannot reach the C library the guard does nothing.
"""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["guard", "message"]

#: Exit status after a SIGBUS while reading (the status of every bad input).
EXIT_STATUS = 2

_HANDLER_T = ctypes.CFUNCTYPE(None, ctypes.c_int)
_stack: list[bytes] = []
_previous: list[Any] = []


def message(shown: str) -> bytes:
    """The line written when ``shown`` changes under us."""
    return os.fsencode(
        f"traceoverlap: error: {shown}: the file was truncated or rewritten while it was being "
        "read (bus error) (wait until whatever writes it, a copy or a profiler exporting, has "
        "finished, then run again)\n"
    )


def _on_bus(signum: int) -> None:  # pragma: no cover - runs in a process that then exits
    os.write(2, _stack[-1] if _stack else message("an input file"))
    os._exit(EXIT_STATUS)


_CALLBACK = _HANDLER_T(_on_bus)


def _libc_signal() -> Any:
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        fn = libc.signal
    except (OSError, AttributeError):  # pragma: no cover - no C library to reach
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [ctypes.c_int, ctypes.c_void_p]
    return fn


_SIGNAL = _libc_signal() if hasattr(signal, "SIGBUS") else None


@contextmanager
def guard(shown: str) -> Iterator[None]:
    """While the block runs, a SIGBUS ends the process with :func:`message` for ``shown``."""
    if _SIGNAL is None:  # pragma: no cover
        yield
        return
    _stack.append(message(shown))
    if len(_stack) == 1:
        _previous.append(_SIGNAL(signal.SIGBUS, ctypes.cast(_CALLBACK, ctypes.c_void_p)))
    try:
        yield
    finally:
        _stack.pop()
        if not _stack:
            _SIGNAL(signal.SIGBUS, _previous.pop())
