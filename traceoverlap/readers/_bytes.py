"""A trace's bytes, whatever they come in: plain files, gzip, pipes and standard input, text
encodings other than UTF-8.

- Plain files are memory-mapped copy-on-write (``ACCESS_COPY``): no copy of a large trace, and
  the reader may patch a byte in place (to cut the events array into decodable chunks without
  copying them) and give pages back once read (``MADV_DONTNEED``) without touching the file.
- gzip is decompressed into one buffer. The gzip trailer's ISIZE (size mod 2**32 of the last
  member) is only a hint: the buffer is preallocated from it, but never larger than
  :data:`GZIP_MAX_RATIO` times the compressed size, so a truncated or forged file cannot make us
  allocate the 4 GiB its trailer claims.
- Pipes (``<(zcat rank0.json.gz)``, a named FIFO) and ``-`` (standard input) are read to the end
  into memory; the format is then sniffed from the bytes. A named FIFO with no writer is waited
  for :data:`FIFO_WAIT_S` seconds, then refused, never waited on forever. Character devices
  (``/dev/zero``, a terminal) are refused: they never end.
- JSON written as UTF-16 / UTF-32 (with or without a byte order mark) is re-encoded as UTF-8; a
  UTF-8 byte order mark is blanked.
"""

from __future__ import annotations

import mmap
import os
import re
import select
import stat
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import Literal

from ..core._lazyre import lazy_compile
from ..core.errors import TraceFormatError

__all__ = [
    "Buffer",
    "STDIN",
    "FIFO_WAIT_S",
    "GZIP_MAX_RATIO",
    "is_stream",
    "label",
    "file_error",
    "rank_from_filename",
    "read_raw",
    "is_gzip",
    "gunzip_pieces",
    "prepare",
    "is_plain_utf8",
    "starts_json",
    "is_blank",
    "inflated_head",
]

#: What a trace's bytes live in: a private memory map (plain files) or a bytearray.
Buffer = mmap.mmap | bytearray

#: The path that means standard input.
STDIN = "-"
#: How long to wait for a writer on a named FIFO nobody writes to yet, seconds.
FIFO_WAIT_S = 10.0
#: Preallocate at most this many times the compressed size when gunzipping. Kineto JSON
#: compresses 8-15x; a larger real ratio only costs the buffer growing while decompressing.
GZIP_MAX_RATIO = 32

#: A gzip trace may inflate to at most this many times its compressed size (Kineto JSON
#: compresses 8-15x, a very repetitive trace maybe 50x) ...
GZIP_MAX_INFLATE_RATIO = 200
#: ... once past this many bytes (small files with a high ratio are harmless) ...
GZIP_RATIO_FROM_BYTES = 256 << 20
#: ... and never to more than this many bytes. Both are overridden by the environment variables
#: ``TRACEOVERLAP_GZIP_MAX_RATIO`` and ``TRACEOVERLAP_GZIP_MAX_BYTES`` (docs/inputs.md "Inputs").
GZIP_MAX_BYTES = 64 << 30

_GZIP_MAGIC = b"\x1f\x8b"
_UTF8_BOM = b"\xef\xbb\xbf"
# Longest first: the UTF-32 LE mark begins with the UTF-16 LE one.
_BOMS = (
    (b"\xff\xfe\x00\x00", "utf-32-le"),
    (b"\x00\x00\xfe\xff", "utf-32-be"),
    (b"\xff\xfe", "utf-16-le"),
    (b"\xfe\xff", "utf-16-be"),
)
_WS = b" \t\r\n"


def is_stream(path: str | Path) -> bool:
    """Whether ``path`` is standard input (``-``) or a pipe: read once, to the end, in memory."""
    if str(path) == STDIN:
        return True
    try:
        return stat.S_ISFIFO(os.stat(path).st_mode)
    except (OSError, ValueError):
        return False


def label(path: str | Path) -> str:
    """How messages name the input: ``<stdin>`` for ``-``, else the path as given."""
    return "<stdin>" if str(path) == STDIN else str(path)


#: What is wrong with a path that is not a readable trace file: (reason, hint).
_FILE_ERRORS = {
    "missing": ("file not found", "check the path"),
    "empty": (
        "file is empty",
        "the profiler may not have finished writing it; re-collect the trace",
    ),
    "directory": (
        "is a directory, not a trace file",
        "pass the folder to `analyze`, which expands it",
    ),
    "device": (
        "is a device or socket, not a trace file",
        "pass a trace file, a pipe, or - for standard input",
    ),
}


def file_error(
    shown: str | Path, kind: Literal["missing", "empty", "directory", "device"]
) -> TraceFormatError:
    """The error for a path that is ``"missing"``, ``"empty"``, a ``"directory"`` or a
    ``"device"``: the same words whoever finds it (sniffing, reading, a pipe)."""
    reason, hint = _FILE_ERRORS[kind]
    return TraceFormatError(shown, reason, hint)


_RANK_IN_NAME = lazy_compile(r"(?:^|[^a-z0-9])rank[-_]?(\d+)(?![0-9])", re.IGNORECASE)


def rank_from_filename(path: str | Path) -> int | None:
    """The rank written in a file name (``rank-3``, ``rank3``, ``_rank3``, ``rank_3``), else None:
    one spelling for every reader."""
    m = _RANK_IN_NAME.search(Path(path).name)
    return int(m.group(1)) if m else None


def _unicode_encoding(head: bytes) -> str | None:
    """UTF-16 / UTF-32 from a byte order mark, or from the zero bytes around the first ASCII
    character of a JSON text (RFC 4627, section 3); None for UTF-8 (or anything else)."""
    for bom, enc in _BOMS:
        if head.startswith(bom):
            return enc
    if len(head) >= 4:
        z = tuple(b == 0 for b in head[:4])
        if z == (True, True, True, False):
            return "utf-32-be"
        if z == (False, True, True, True):
            return "utf-32-le"
        if z[:2] == (True, False) and z[2:] != (True, True):
            return "utf-16-be"
        if z[:2] == (False, True) and z[2:] != (True, True):
            return "utf-16-le"
    return None


def is_plain_utf8(head: bytes) -> bool:
    """Whether a JSON text starting with ``head`` (at least its first 4 bytes, when it has them)
    is UTF-8 without a byte order mark: nothing for :func:`prepare` to do but gunzip it."""
    return _unicode_encoding(head[:4]) is None and not head.startswith(_UTF8_BOM)


def _without_utf8_boms(head: bytes) -> bytes:
    while head.startswith(_UTF8_BOM):  # an editor may have added a second one
        head = head[len(_UTF8_BOM) :]
    return head


def starts_json(head: bytes) -> bool:
    """Whether a file's first bytes start gzip (the JSON reader inflates it) or a JSON text:
    ``{`` / ``[`` after whitespace, in UTF-8 (byte order marks allowed), UTF-16 or UTF-32."""
    if head.startswith(_GZIP_MAGIC):
        return True
    enc = _unicode_encoding(head)
    if enc is not None:
        # Decode what we have of it (an odd trailing byte is dropped) and look at the text.
        chars = head[: len(head) - len(head) % 4].decode(enc, errors="ignore").lstrip("\ufeff")
        if chars.lstrip()[:1] in ("{", "["):
            return True
    return _without_utf8_boms(head).lstrip(_WS)[:1] in (b"{", b"[")


def inflated_head(path: str | Path, n: int) -> bytes:
    """A file's first ``n`` bytes, or a gzip file's first ``n`` inflated bytes (what it holds);
    empty when it cannot be read."""
    try:
        with open(path, "rb") as f:
            head = f.read(n)
            if head[:2] != _GZIP_MAGIC:
                return head
            f.seek(0)
            return zlib.decompressobj(wbits=31).decompress(f.read(1 << 16), n)
    except (OSError, zlib.error):
        return b""


def is_blank(head: bytes) -> bool:
    """Whether a file's first bytes are whitespace only (after UTF-8 byte order marks): nothing
    says yet what the file is."""
    return not _without_utf8_boms(head).strip(_WS)


# --------------------------------------------------------------------------------------------
# Pipes and standard input


def _is_anonymous_pipe(fd: int) -> bool:
    # /dev/fd/63 (bash process substitution) reopens an anonymous pipe whose writer is already
    # there; a named FIFO may have none yet. Linux tells them apart in /proc.
    try:
        return os.readlink(f"/proc/self/fd/{fd}").startswith("pipe:")
    except OSError:
        return False


def _read_fd(fd: int) -> bytearray:
    out = bytearray()
    while True:
        chunk = os.read(fd, 1 << 20)
        if not chunk:
            return out
        out += chunk


def read_stream(path: str | Path) -> bytearray:
    """All the bytes of standard input (``-``) or of a pipe, read to its end."""
    shown = label(path)
    if str(path) == STDIN:
        fd = 0
        try:
            mode = os.fstat(fd).st_mode
        except OSError as exc:
            raise TraceFormatError(shown, f"cannot read standard input: {exc}") from None
        if os.isatty(fd) or stat.S_ISCHR(mode):
            raise TraceFormatError(
                shown,
                "standard input is a terminal or device, not a trace",
                "pipe a trace into it, e.g. `zcat rank0.json.gz | traceoverlap analyze -`",
            )
        try:
            return _read_fd(fd)
        except OSError as exc:
            raise TraceFormatError(shown, f"cannot read standard input: {exc}") from None
    try:
        # O_NONBLOCK: opening a FIFO for reading otherwise blocks until a writer opens it.
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    except FileNotFoundError:
        raise file_error(shown, "missing") from None
    except OSError as exc:
        raise TraceFormatError(shown, f"cannot open the pipe: {exc.strerror or exc}") from None
    try:
        if not _is_anonymous_pipe(fd):
            # Linux reports POLLIN / POLLHUP only once a writer has connected.
            poller = select.poll()
            poller.register(fd, select.POLLIN)
            if not poller.poll(int(FIFO_WAIT_S * 1000)):
                raise TraceFormatError(
                    shown,
                    f"named pipe with no writer (waited {FIFO_WAIT_S:g} s)",
                    "start the program that writes the trace into it first, or pass a file",
                )
        os.set_blocking(fd, True)
        return _read_fd(fd)
    except OSError as exc:
        raise TraceFormatError(shown, f"cannot read the pipe: {exc.strerror or exc}") from None
    finally:
        os.close(fd)


# --------------------------------------------------------------------------------------------
# gzip


def _truncated(shown: str) -> TraceFormatError:
    return TraceFormatError(
        shown,
        "truncated gzip: the compressed stream ends before its end marker (the rank may have "
        "crashed or been killed mid-write)",
        "re-collect the trace, or analyze the other ranks without this file",
    )


#: Largest piece :func:`gunzip_pieces` yields: bounds the memory of streaming readers.
PIECE_BYTES = 4 << 20


def _env_limit(name: str, default: int) -> int:
    value = os.environ.get(name, "").strip()
    if not value:
        return default
    try:
        n = int(float(value))
    except ValueError:
        raise TraceFormatError(
            f"${name}", f"not a number: {value[:40]!r}", "unset it or give a positive number"
        ) from None
    return n if n > 0 else default


def inflate_limit(compressed: int) -> tuple[int, str]:
    """The most bytes a gzip of ``compressed`` bytes may inflate to, and why (the ratio or the
    ceiling; see :data:`GZIP_MAX_INFLATE_RATIO`, :data:`GZIP_MAX_BYTES`)."""
    ratio = _env_limit("TRACEOVERLAP_GZIP_MAX_RATIO", GZIP_MAX_INFLATE_RATIO)
    ceiling = _env_limit("TRACEOVERLAP_GZIP_MAX_BYTES", GZIP_MAX_BYTES)
    by_ratio = max(ratio * compressed, GZIP_RATIO_FROM_BYTES)
    if by_ratio < ceiling:
        return by_ratio, f"{ratio} times its compressed size"
    return ceiling, "the ceiling"


def _bomb(shown: str, limit: int, why: str) -> TraceFormatError:
    from ..core.fmt import size

    return TraceFormatError(
        shown,
        f"gzip data inflates to more than {size(limit)} ({why}): refusing it (a decompression "
        "bomb, or a trace too large to read)",
        "if the trace is genuine, raise TRACEOVERLAP_GZIP_MAX_RATIO / TRACEOVERLAP_GZIP_MAX_BYTES",
    )


def gunzip_pieces(raw: bytes | Buffer, shown: str) -> Iterator[bytes]:
    """Decompress (possibly multi-member) gzip piece by piece (each at most
    :data:`PIECE_BYTES`); raises :class:`TraceFormatError` if the data is truncated or corrupt
    (after yielding what could be decompressed), or inflates past :func:`inflate_limit`."""
    limit, why = inflate_limit(len(raw))
    total = 0
    for piece in _gunzip_pieces(raw, shown):
        total += len(piece)
        if total > limit:
            raise _bomb(shown, limit, why)
        yield piece


def _gunzip_pieces(raw: bytes | Buffer, shown: str) -> Iterator[bytes]:
    src = memoryview(raw)
    step = 1 << 20
    try:
        while len(src):
            d = zlib.decompressobj(wbits=31)
            fed = 0
            while not d.eof:
                if d.unconsumed_tail:
                    piece = d.decompress(d.unconsumed_tail, PIECE_BYTES)
                elif fed < len(src):
                    piece = d.decompress(src[fed : fed + step], PIECE_BYTES)
                    fed += step
                else:
                    raise _truncated(shown)
                if piece:
                    yield piece
            # The next member (if any) starts in what this one did not consume.
            rest = d.unused_data + bytes(src[fed:]) if fed < len(src) else d.unused_data
            src = memoryview(rest.lstrip(b"\x00"))  # members may be followed by zero padding
    except zlib.error as exc:
        raise TraceFormatError(
            shown, f"corrupt gzip data ({exc})", "re-copy or re-collect the trace file"
        ) from None


def gunzip(raw: bytes | Buffer, shown: str) -> bytearray:
    """Decompress (possibly multi-member) gzip into one buffer.

    ``gzip.decompress`` grows its output as it goes and peaks at about twice the result; here
    the output is preallocated from the trailer's ISIZE (exact for the usual single-member file
    under 4 GiB), bounded by :data:`GZIP_MAX_RATIO` x the input, and grows past that if needed.
    """
    hint = int.from_bytes(raw[-4:], "little") if len(raw) >= 18 else 0
    out = bytearray(min(hint, GZIP_MAX_RATIO * len(raw)))
    pos = 0
    for piece in gunzip_pieces(raw, shown):
        out[pos : pos + len(piece)] = piece
        pos += len(piece)
    del out[pos:]
    return out


# --------------------------------------------------------------------------------------------
# Putting it together


def prepare(data: Buffer, shown: str) -> Buffer:
    """Gunzip, re-encode UTF-16/32 as UTF-8, blank a UTF-8 byte order mark; refuse emptiness."""
    if data[:2] == _GZIP_MAGIC:
        data = gunzip(data, shown)
    head = bytes(data[:4])
    enc = _unicode_encoding(head)
    if enc is not None:
        text = bytes(data).decode(enc, errors="replace")
        data = bytearray(text.lstrip("\ufeff").encode("utf-8"))
    elif head[:3] == _UTF8_BOM:
        at = 0
        while data[at : at + 3] == _UTF8_BOM:  # an editor may have added a second one
            data[at : at + 3] = b"   "  # whitespace is valid JSON; works on the private map too
            at += 3
    if _all_ws(data):
        raise file_error(shown, "empty")
    return data


def _all_ws(data: Buffer) -> bool:
    """Whether the buffer is empty or whitespace only (a real trace answers in its first
    bytes: those are looked at before any MB is copied)."""
    if bytes(data[:4096]).strip(_WS):
        return False
    for i in range(0, len(data), 1 << 20):
        if bytes(data[i : i + (1 << 20)]).strip(_WS):
            return False
    return True


def is_gzip(data: Buffer) -> bool:
    return data[:2] == _GZIP_MAGIC


def read_raw(path: str | Path) -> Buffer:
    """The bytes of a trace file (memory-mapped; gzip left compressed, in memory), a pipe or
    standard input, as they are: see :func:`prepare` for the rest."""
    shown = label(path)
    if is_stream(path):
        return read_stream(path)
    p = Path(path)
    try:
        with open(p, "rb") as f:
            st = os.fstat(f.fileno())
            if stat.S_ISDIR(st.st_mode):
                raise IsADirectoryError
            if not stat.S_ISREG(st.st_mode):
                raise file_error(shown, "device")
            if st.st_size == 0:
                raise file_error(shown, "empty")
            magic = f.read(2)
            if magic == _GZIP_MAGIC:
                data: Buffer = bytearray(magic + f.read())
            else:
                data = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_COPY)
    except FileNotFoundError:
        raise file_error(shown, "missing") from None
    except IsADirectoryError:
        raise file_error(shown, "directory") from None
    except (OSError, ValueError) as exc:
        raise TraceFormatError(shown, f"cannot read the file: {exc}") from None
    return data
