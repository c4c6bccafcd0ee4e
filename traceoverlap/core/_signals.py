"""SIGTERM as an exit that cleans up (:func:`sigterm_exits`)."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType

#: The exit status of a process ended by SIGTERM (128 + 15), as a shell reports it.
TERMINATED = 128 + signal.SIGTERM


class Terminated(SystemExit):
    """Raised by :func:`sigterm_exits`' handler: the process was asked to end (SIGTERM)."""


@contextlib.contextmanager
def sigterm_exits() -> Iterator[None]:
    """While the block runs, SIGTERM raises :class:`Terminated` (``SystemExit(143)``), so that
    ``finally`` blocks and context managers clean up (a child process killed, temporary files
    removed, the old output left whole) instead of the process vanishing. Only in the main thread
    and only where SIGTERM is not handled already (else the block runs as it is). A forked child
    gets the default handler back (it dies of SIGTERM at once, as it would have)."""
    if (
        threading.current_thread() is not threading.main_thread()
        or signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL
    ):
        yield
        return
    owner = os.getpid()

    def terminate(signum: int, frame: FrameType | None) -> None:
        if os.getpid() != owner:
            signal.signal(signal.SIGTERM, signal.SIG_DFL)
            os.kill(os.getpid(), signal.SIGTERM)
            return
        raise Terminated(TERMINATED)

    _ours.append(terminate)
    signal.signal(signal.SIGTERM, terminate)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        _ours.remove(terminate)


#: The handlers :func:`sigterm_exits` has installed (and not yet removed).
_ours: list[object] = []


def _default_in_child() -> None:
    # a forked worker (a process pool's) is ended by SIGTERM at once, even inside C code, as
    # before: the handler is this process's, not the child's
    if signal.getsignal(signal.SIGTERM) in _ours:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


if hasattr(os, "register_at_fork"):
    os.register_at_fork(after_in_child=_default_in_child)
