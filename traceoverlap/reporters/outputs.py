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
"""

from __future__ import annotations

import os
import re
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path

from ..core.errors import UsageError

__all__ = ["check_outputs", "write_output", "is_own_json"]

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
    target = os.path.realpath(output)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise _cannot_write(output, exc) from None
    data = text.encode("utf-8", "surrogateescape")
    if st is not None and not stat.S_ISREG(st.st_mode):
        _write_special(output, target, st.st_mode, data)
        return
    _write_atomic(output, target, data, st)


def _cannot_write(output: str, exc: OSError) -> UsageError:
    return UsageError(
        f"{output}: cannot write the output ({exc.strerror or exc}); check that the folder "
        "exists and is writable"
    )


def _write_special(output: str, target: str, mode: int, data: bytes) -> None:
    if stat.S_ISDIR(mode):
        raise UsageError(f"{output}: is a folder; give a file name for the output")
    if not (stat.S_ISFIFO(mode) or stat.S_ISCHR(mode)):
        raise UsageError(f"{output}: is a socket or device, not a file; give a file name")
    try:
        fd = os.open(target, os.O_WRONLY | os.O_NONBLOCK)
    except OSError as exc:
        if exc.errno == 6:  # ENXIO: a named pipe nobody reads
            raise UsageError(
                f"{output}: named pipe with no reader; start the reader first, or give a file"
            ) from None
        raise _cannot_write(output, exc) from None
    try:
        os.set_blocking(fd, True)
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        raise _cannot_write(output, exc) from None
    finally:
        os.close(fd)


def _write_atomic(output: str, target: str, data: bytes, st: os.stat_result | None) -> None:
    folder, name = os.path.split(target)
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{name[:100]}.", suffix=".tmp", dir=folder or ".")
    except OSError as exc:
        raise _cannot_write(output, exc) from None
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
        os.chmod(tmp, stat.S_IMODE(st.st_mode) if st is not None else 0o666 & ~_umask())
        os.replace(tmp, target)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise _cannot_write(output, exc) from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
