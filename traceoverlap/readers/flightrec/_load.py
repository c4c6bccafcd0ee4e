"""One Flight Recorder dump's bytes into plain Python data: a pickle through an unpickler that
admits no Python object at all, or JSON. Nothing here knows the dump's schema beyond "a dict".

PyTorch writes the pickle with its own pickler (protocol 2): dicts, lists, tuples, str, int,
float, bool and None only. A pickle names anything else (a class, a function: ``os.system``)
through ``GLOBAL`` / ``STACK_GLOBAL`` (and the copyreg extension codes), which reach
:meth:`~pickle.Unpickler.find_class`, or through a persistent id; :class:`PlainUnpickler` refuses
both, so a crafted dump cannot make the reader call anything (``REDUCE``, ``BUILD``, ``NEWOBJ``
and ``INST`` need such a callable on the stack first).
"""

from __future__ import annotations

import io
import json
import pickle
from pathlib import Path
from typing import Any

from ...core.errors import TraceFormatError
from .._bytes import file_error, gunzip, label

__all__ = ["PlainUnpickler", "load_dump", "loads_dump"]

_HINT_RECOLLECT = "the rank may have been killed while writing it: dump it again, or leave it out"


class RefusedObject(pickle.UnpicklingError):
    """A pickle that names a Python object (``module.name``) or a persistent id."""


class PlainUnpickler(pickle.Unpickler):
    """An unpickler that builds plain containers and scalars only: every class, function or
    persistent id a pickle names is refused before it is looked up."""

    def find_class(self, module: str, name: str) -> Any:  # noqa: ANN401 (pickle's signature)
        raise RefusedObject(f"{module}.{name}"[:80])

    def persistent_load(self, pid: Any) -> Any:  # noqa: ANN401 (pickle's signature)
        raise RefusedObject("a persistent id")


def _unpickle(shown: str, data: bytes) -> Any:  # noqa: ANN401 (plain data of any shape)
    try:
        # through a buffered reader: the unpickler reads a file with ``peek`` in blocks, a bare
        # BytesIO one call per opcode (3x slower on a ring of 2,000 entries)
        reader = io.BufferedReader(io.BytesIO(data), buffer_size=1 << 16)
        return PlainUnpickler(reader).load()
    except RefusedObject as exc:
        raise TraceFormatError(
            shown,
            f"the pickle names a Python object ({exc}), which a Flight Recorder dump never does: "
            "refused, nothing in it was run",
            "read only dumps written by torch.distributed's Flight Recorder",
        ) from None
    except EOFError:
        raise TraceFormatError(
            shown, "truncated pickle: the dump ends before its end mark", _HINT_RECOLLECT
        ) from None
    except RecursionError:
        raise TraceFormatError(
            shown, "pickle nested too deeply to be a Flight Recorder dump", _HINT_RECOLLECT
        ) from None
    except MemoryError:
        raise TraceFormatError(shown, "pickle too large to read in memory") from None
    except Exception as exc:  # noqa: BLE001 (any malformed pickle: one line, never a traceback)
        what = str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__
        if "truncated" in what:  # "pickle data was truncated": the end is missing
            raise TraceFormatError(
                shown, "truncated pickle: the dump ends before its end mark", _HINT_RECOLLECT
            ) from None
        raise TraceFormatError(
            shown, f"corrupt or truncated pickle ({what})", _HINT_RECOLLECT
        ) from None


def _parse_json(shown: str, data: bytes) -> Any:  # noqa: ANN401 (plain data of any shape)
    try:
        return json.loads(data)
    except UnicodeDecodeError as exc:
        raise TraceFormatError(shown, f"JSON that is not valid UTF-8 ({exc.reason})") from None
    except json.JSONDecodeError as exc:
        # a string left open runs to the end: the text stops in the middle of it
        at_end = not data[exc.pos :].strip() or exc.msg.startswith("Unterminated string")
        if at_end:
            raise TraceFormatError(
                shown, "truncated JSON: the dump ends in the middle", _HINT_RECOLLECT
            ) from None
        raise TraceFormatError(
            shown,
            f"invalid JSON at line {exc.lineno} column {exc.colno}: {exc.msg}",
            _HINT_RECOLLECT,
        ) from None
    except RecursionError:
        raise TraceFormatError(
            shown, "JSON nested too deeply to be a Flight Recorder dump"
        ) from None


def loads_dump(shown: str, data: bytes) -> tuple[Any, str]:
    """The plain data of a dump's bytes (gzip inflated, within the readers' limits) and how it
    was written (``"pickle"`` / ``"json"``)."""
    if data[:2] == b"\x1f\x8b":
        data = bytes(gunzip(data, shown))
    body = data.lstrip(b" \t\r\n")
    if body.startswith(b"\xef\xbb\xbf"):
        body = body[3:].lstrip(b" \t\r\n")
    if not body:
        raise file_error(shown, "empty")
    if body[:1] == b"\x80":
        return _unpickle(shown, body), "pickle"
    if body[:1] in (b"{", b"["):
        return _parse_json(shown, body), "json"
    raise TraceFormatError(
        shown,
        "neither a pickle nor JSON: not a Flight Recorder dump",
        "pass the files torch.distributed's Flight Recorder wrote: one per rank, named "
        "TORCH_FR_DUMP_TEMP_FILE<rank>",
    )


def load_dump(path: str | Path) -> tuple[Any, str]:
    """The plain data of the dump in ``path`` and how it was written."""
    shown = label(path)
    p = Path(path)
    try:
        data = p.read_bytes()
    except FileNotFoundError:
        raise file_error(shown, "missing") from None
    except IsADirectoryError:
        raise TraceFormatError(
            shown, "is a directory, not a dump", "pass the folder itself, or its files"
        ) from None
    except OSError as exc:
        raise TraceFormatError(shown, f"cannot read the file: {exc.strerror or exc}") from None
    return loads_dump(shown, data)
