"""``python -m traceoverlap`` = the ``traceoverlap`` command (:func:`run`)."""

from __future__ import annotations

import atexit
import os
import sys
import threading

from .cli import main
from .core._blas import one_thread
from .core._collector import pause, resume


def run() -> None:
    """The command, then a quick exit.

    A finished command has written and closed its outputs; what is left is the interpreter's
    teardown, which frees every object and module one by one (pandas' alone: ~0.08 s CPU; after
    analysing a 145 MB trace ~0.13 s, over a tenth of the run). So once the command has ended
    with an exit code, the exit handlers run (logging, temporary files, process pools, Dask), the
    standard streams are flushed, and the process ends without the teardown. Anything unusual (an
    exception escaping with ``--debug``, a thread still running, an exit "code" that is a
    message) takes the normal exit.
    """
    pause()  # until the command's modules are loaded (traceoverlap.core._collector)
    one_thread()
    try:
        main()
    except SystemExit as exc:
        code = exc.code
        if code is None:
            code = 0
        if not isinstance(code, int) or _other_threads():
            raise
    else:  # pragma: no cover - click's standalone mode always exits
        code = 0
    finally:
        resume()  # a command that analysed nothing (--help, an error) did not turn it back on
    atexit._run_exitfuncs()
    try:
        sys.stdout.flush()
    except BrokenPipeError:  # the reader went away (`| head`): not an error of ours
        raise SystemExit(code) from None
    except OSError as exc:  # a full disk, `ulimit -f`: what was written is cut
        # the line of reporters.outputs.stdout_failed (the entry point imports only the CLI)
        print(
            f"traceoverlap: error: standard output: cannot write the output "
            f"({exc.strerror or exc}); what was written is incomplete (check the free space "
            "and file size limit where it goes, or use -o FILE)",
            file=sys.stderr,
        )
        code = code or 2
        devnull = os.open(os.devnull, os.O_WRONLY)  # what is still buffered cannot fail again
        os.dup2(devnull, sys.stdout.fileno())
    except ValueError:  # a closed stream: the normal exit reports it
        raise SystemExit(code) from None
    try:
        sys.stderr.flush()
    except (OSError, ValueError):
        raise SystemExit(code) from None
    os._exit(code)


def _other_threads() -> bool:
    """Whether a thread other than this one is still running (its work must finish first)."""
    me = threading.current_thread()
    return any(t is not me and t.is_alive() and not t.daemon for t in threading.enumerate())


if __name__ == "__main__":
    run()
