"""Writing output files safely: never over an input, never half-written, never blocking.

- :func:`check_outputs` refuses, before any analysis, an output (``-o``, ``--html``, ``report
  -o``, ``compare -o``) that resolves to a file the analysis reads: an input named on the command
  line, or a file of an input folder that would be read as a trace (a trace-named file that is not
  this tool's own JSON output, which the folder listing skips anyway). Two outputs that are the
  same file are refused too.
- :func:`write_output` writes a regular file atomically: a temporary file beside it
  (:func:`tempfile.mkstemp`, no predictable name) then :func:`os.replace`, so an interrupted run
  leaves the old file whole, and a symlink is written through (its target replaced). A named pipe
  is written only when a reader is already there (opened with ``O_NONBLOCK``), never waited on
  forever; a character device (``/dev/null``, a terminal) is written directly; anything else
  (a socket, a folder) is refused.
- :func:`open_output` is the same for an output written in pieces (``traceoverlap export``
  streams the run): a context manager yielding a binary file; the temporary file replaces the
  target only when the ``with`` block ends without an error, and is removed on any error or
  interrupt (the old file stays whole, no temporary file is left). :func:`write_output` is one
  ``write`` into it.

Errors writing the output (a full disk, a missing folder) are :class:`UsageError` naming it.
Standard output too (:func:`writing_stdout`): a full disk or a file size limit (``ulimit -f``)
where it is redirected is one error line and a non-zero exit, never a silently cut file. A
reader that went away (``| head``) is not an error: :class:`BrokenPipeError` passes through to
the command line's quiet exit.
"""

from __future__ import annotations

import contextlib
import errno
import io
import os
import re
import stat
import sys
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any, BinaryIO

from ..core.errors import UsageError

__all__ = [
    "check_outputs",
    "write_output",
    "open_output",
    "writing_stdout",
    "stdout_failed",
    "is_own_json",
]

_OWN_JSON = re.compile(rb'^\s*\{\s*"schema_version"\s*:')


def is_own_json(path: str | Path) -> bool:
    """Whether ``path`` starts like this tool's own JSON output (``{"schema_version": ...``)."""
    try:
        with open(path, "rb", opener=_nonblocking) as fh:
            return bool(_OWN_JSON.match(fh.read(256)))
    except OSError:
        return False


def _nonblocking(path: str, flags: int) -> int:
    return os.open(path, flags | os.O_NONBLOCK)


def _identity(path: str | Path) -> tuple[int, int] | None:
    try:
        st = os.stat(path)
    except (OSError, ValueError):
        return None
    return (st.st_dev, st.st_ino)


def _read_inputs(inputs: Sequence[str | Path]) -> dict[tuple[int, int], str]:
    """(device, inode) -> name of every file the analysis of ``inputs`` would read as a trace."""
    from ..readers.paths import TRACE_SUFFIXES

    out: dict[tuple[int, int], str] = {}
    for item in inputs:
        if str(item) == "-":
            continue
        p = Path(item)
        try:
            if p.is_dir():
                found = [q for q in p.iterdir() if q.name.lower().endswith(TRACE_SUFFIXES)]
                found = [q for q in found if not is_own_json(q)]
            else:
                found = [p]
        except OSError:
            continue  # the analysis says what is wrong with it
        for q in found:
            ident = _identity(q)
            if ident is not None:
                out.setdefault(ident, str(q))
    return out


def check_outputs(outputs: Sequence[str | None], inputs: Sequence[str | Path]) -> None:
    """Refuse outputs that would replace an input (or each other); see the module docstring."""
    named = [o for o in outputs if o and o != "-"]
    if not named:
        return
    read = _read_inputs(inputs)
    seen: dict[tuple[int, int] | str, str] = {}
    for out in named:
        ident = _identity(out)
        if ident is not None and ident in read:
            raise UsageError(
                f"{out}: refusing to write the output over an input trace ({read[ident]}); "
                "choose another output file"
            )
        key: tuple[int, int] | str = ident if ident is not None else os.path.realpath(out)
        if key in seen:
            raise UsageError(
                f"{out}: given as two outputs (also {seen[key]}); give each output its own file"
            )
        seen[key] = out


def write_output(text: str, output: str) -> None:
    """Write ``text`` (UTF-8) to the file ``output``; see the module docstring."""
    with open_output(output) as fh:
        fh.write(text.encode("utf-8", "surrogateescape"))


@contextlib.contextmanager
def open_output(output: str) -> Iterator[BinaryIO]:
    """The file ``output`` open for writing bytes, written atomically: see the module docstring.

    A regular file (or a new one) is a temporary file beside the target (a symlink's target) that
    replaces it when the block ends; on any error or interrupt in the block the temporary file is
    removed and the old file is left as it was. A named pipe with a reader and a character device
    are written directly; anything else is refused before the block runs."""
    target = os.path.realpath(output)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _cannot_write(output, exc) from None
    if st is not None and not stat.S_ISREG(st.st_mode):
        fh = _Output(_open_special(output, target, st.st_mode), output)
        try:
            yield fh
            fh.close()
        except BaseException:
            _discard(fh)
            raise
        return
    folder, name = os.path.split(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name[:100]}.", suffix=".tmp", dir=folder or ".")
    except OSError as exc:
        raise _cannot_write(output, exc) from None
    fh = _Output(fd, output)
    try:
        yield fh
        fh.close()
        try:
            os.chmod(tmp, stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask())
            os.replace(tmp, target)
        except OSError as exc:
            raise _cannot_write(output, exc) from None
    except BaseException:
        _discard(fh)
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


class _Output(io.BufferedWriter):
    """A binary file on ``fd`` whose write errors (a full disk...) are :class:`UsageError`
    naming ``output``; errors of the code writing into it pass as they are."""

    def __init__(self, fd: int, output: str) -> None:
        super().__init__(io.FileIO(fd, "w"))
        self.output = output

    def write(self, data: Any) -> int:
        try:
            return super().write(data)
        except OSError as exc:
            raise _cannot_write(self.output, exc) from None

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as exc:
            raise _cannot_write(self.output, exc) from None

    def close(self) -> None:
        try:
            super().close()
        except OSError as exc:
            raise _cannot_write(self.output, exc) from None


@contextlib.contextmanager
def writing_stdout() -> Iterator[BinaryIO]:
    """Standard output as a binary file, for the block to write into; flushed at the end. A
    write or the flush failing (a full disk, ``ulimit -f``, ``/dev/full``) is a
    :class:`UsageError` (:func:`stdout_failed`); :class:`BrokenPipeError` passes as it is.

    Every byte is written or an error raised: with ``PYTHONUNBUFFERED`` standard output is an
    unbuffered file whose writes may stop short (the file size limit reached), and Python's own
    text layer drops the rest without a word; here a short write is continued, and the write
    after it fails."""
    try:
        sys.stdout.flush()  # what was printed before comes first
        target = sys.stdout.buffer
        fh = io.BufferedWriter(_Passthrough(target))
        yield fh
        fh.flush()
        target.flush()
    except BrokenPipeError:
        raise
    except OSError as exc:
        raise stdout_failed(exc) from None


class _Passthrough(io.RawIOBase):
    """A raw file writing into ``target`` and saying how much it took (a short write is then
    continued by the :class:`io.BufferedWriter` over it)."""

    def __init__(self, target: BinaryIO) -> None:
        super().__init__()
        self.target = target

    def writable(self) -> bool:
        return True

    def write(self, data: Any) -> int:
        n = self.target.write(data)
        return len(data) if n is None else n


def stdout_failed(exc: OSError) -> UsageError:
    """The error for standard output that could not take what was written. Standard output is
    pointed at the null device first, so that what is still buffered cannot fail again (with a
    traceback) when the interpreter exits."""
    with contextlib.suppress(OSError, ValueError, AttributeError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        os.close(devnull)
    return UsageError(
        f"standard output: cannot write the output ({exc.strerror or exc}); what was written "
        "is incomplete (check the free space and file size limit where it goes, or use -o FILE)"
    )


def _discard(fh: _Output) -> None:
    """Close ``fh`` after an error: the error that stopped the writing is the one to report."""
    with contextlib.suppress(Exception):
        fh.close()


def _cannot_write(output: str, exc: OSError) -> UsageError:
    return UsageError(
        f"{output}: cannot write the output ({exc.strerror or exc}); check that the folder "
        "exists and is writable"
    )


def _open_special(output: str, target: str, mode: int) -> int:
    """A descriptor open for writing on the named pipe or character device ``target``, never
    waiting for a pipe's reader; anything else is refused."""
    if stat.S_ISDIR(mode):
        raise UsageError(f"{output}: is a folder; give a file name for the output")
    if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        raise UsageError(f"{output}: is a socket or device, not a file; give a file name")
    try:
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == errno.ENXIO:  # a named pipe nobody reads
            raise UsageError(
                f"{output}: named pipe with no reader; start the reader first, or give a file"
            ) from None
        raise _cannot_write(output, exc) from None
    try:
        os.set_blocking(fd, True)
    except OSError as exc:
        os.close(fd)
        raise _cannot_write(output, exc) from None
    return fd


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
