"""Numbers as text, in one place: every reason line, table and page formats times and ratios here.

Inside the program times are integer nanoseconds and ratios 0-1 floats; only text shows ms and %.
A missing value (None, NaN, pandas' NA) shows as ``-`` (or the given ``missing``).
"""

from __future__ import annotations

import math
import re
from typing import Any

import pandas as pd

from ._lazyre import lazy_compile


def _missing(x: Any) -> bool:
    return x is None or x is pd.NA or (isinstance(x, float) and math.isnan(x))


def ms(ns: Any, digits: int = 2, missing: str = "-") -> str:
    """Nanoseconds -> ``12.35`` (milliseconds, no unit)."""
    if _missing(ns):
        return missing
    return f"{float(ns) / 1e6:.{digits}f}"


def ms_unit(ns: Any, digits: int = 2) -> str:
    """Nanoseconds -> ``12.35 ms``."""
    return f"{ms(ns, digits)} ms"


def pct(ratio: Any, digits: int = 1, missing: str = "-") -> str:
    """A 0-1 ratio -> ``15.2%``."""
    if _missing(ratio):
        return missing
    return f"{100 * float(ratio):.{digits}f}%"


def signed_pct(ratio: Any, missing: str = "-") -> str:
    """A relative change -> ``+12%`` / ``-45%``."""
    return missing if _missing(ratio) else f"{100 * float(ratio):+.0f}%"


def signed_ms(ns: Any, missing: str = "-") -> str:
    return missing if _missing(ns) else f"{float(ns) / 1e6:+.2f}"


def speedup(x: Any, missing: str = "-", sign: str = "x") -> str:
    return missing if _missing(x) else f"{float(x):.2f}{sign}"


def duration(ns: Any, missing: str = "–") -> str:
    """A duration for humans, unit picked by size: ``1.234 s`` / ``12.35 ms`` / ``850.0 µs`` /
    ``420 ns``."""
    if _missing(ns):
        return missing
    a = abs(float(ns))
    if a >= 1e9:
        return f"{float(ns) / 1e9:.3f} s"
    if a >= 1e6:
        return f"{float(ns) / 1e6:.2f} ms"
    if a >= 1e3:
        return f"{float(ns) / 1e3:.1f} µs"
    return f"{int(ns)} ns"


def size(n: Any, missing: str = "–") -> str:
    """Bytes for humans: ``1.5 MiB``."""
    if _missing(n) or int(n) < 0:
        return missing
    n = int(n)
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} B"


def count(n: int, word: str, plural: str | None = None) -> str:
    """``1 step`` / ``3 steps``."""
    return f"{n} {word if n == 1 else (plural or word + 's')}"


# Terminal control in text drawn from traces (kernel, device, backend, collective names): an
# OSC sequence sets the window title or writes the clipboard (ESC ] 52), CSI moves the cursor.
_SGR = r"\x1b\[[0-9;]*m"
_ESCAPES = (
    r"\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)?"  # OSC ... BEL / ST (or unterminated)
    r"|\x1b[P^_X][^\x1b]*(?:\x1b\\)?"  # DCS / PM / APC / SOS ... ST
    r"|\x1b\[[0-?]*[ -/]*[@-~]?"  # CSI
    r"|\x1b[ -~]?"  # two-character escapes, a lone ESC
    r"|\x9d[^\x07\x1b\x9c]*(?:\x07|\x9c)?"  # 8-bit OSC
    r"|\x9b[0-?]*[ -/]*[@-~]?"  # 8-bit CSI
    r"|\r(?!\n)"  # a carriage return that does not end a line (CSV's CRLF stays)
    r"|[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f]"  # other C0 (not tab, newline), DEL, C1
)
_UNSAFE = lazy_compile(_ESCAPES)
_UNSAFE_BUT_SGR = lazy_compile(f"({_SGR})|{_ESCAPES}")


# the undecodable bytes of a file name that is not UTF-8 (os.fsdecode's surrogate escapes)
_SURROGATE = lazy_compile("[\ud800-\udfff]")
# any character that may start something to remove (not CR: CSV lines end in CRLF)
_ANY_UNSAFE = re.compile("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]")
_LONE_CR = lazy_compile("\r(?!\n)")


class TerminalText(str):
    """Text whose colour sequences are the tool's own: a rich console made by
    :func:`traceoverlap.reporters._format.make_console` filtered every string it was given
    (:func:`safe_text`) before styling it, so the only SGR sequences left are the ones it added.
    Only such text keeps its colours on a terminal (``write_text``); any other text, whatever it
    holds, loses every escape sequence."""

    __slots__ = ()


class EscapedText(str):
    """Text that holds nothing :func:`safe_text` would remove, by how it was made: the JSON of
    :func:`traceoverlap.reporters.json_report.encode` (its encoder escapes every C0 control,
    DEL and C1, and replaces surrogates) or ``json.dumps`` with ASCII escapes. ``write_text``
    writes it as it is, without a scan of its whole text (~0.12 s for a 23 MB output); any
    other text, or this one once changed (a new plain ``str``), is filtered."""

    __slots__ = ()


def safe_text(text: str, keep_sgr: bool = False) -> str:
    """``text`` without terminal control: escape sequences and control characters other than tab,
    newline and a line-ending carriage return removed. ``keep_sgr`` keeps colour sequences (``ESC [ ... m``, what our own
    coloured tables hold; they cannot move the cursor or talk to the terminal). Undecodable
    bytes of file names (surrogate escapes) become U+FFFD: the text can always be written."""
    if not _ANY_UNSAFE.search(text) and ("\r" not in text or not _LONE_CR.search(text)):
        return text  # the usual case, one fast scan
    text = _SURROGATE.sub("\ufffd", text)
    if keep_sgr:
        return _UNSAFE_BUT_SGR.sub(lambda m: m.group(1) or "", text)
    return _UNSAFE.sub("", text)
