"""A module-level regular expression compiled on first use, not at import.

Compiling a pattern costs ~0.1-0.5 ms; the package's modules define ~50, of which a run of
``analyze`` uses about half (the others serve a rare input: a flight recorder pickle, a
bareword NaN, a ``--fail-if``...). :func:`lazy_compile` stands for the compiled pattern where it
is only used through its attributes (``.search``, ``.sub``, ``.pattern``...): the first one
compiles it, and each attribute, once read, is kept on the object (later reads are a plain
attribute lookup). Not for a pattern handed to ``re`` functions or checked with ``isinstance``.
"""

from __future__ import annotations

import re
from typing import Any, AnyStr, cast


class _LazyPattern:
    """Compiles ``re.compile(pattern, flags)`` when an attribute is first read."""

    def __init__(self, pattern: str | bytes, flags: int) -> None:
        self._args = (pattern, flags)
        self._compiled: re.Pattern[Any] | None = None

    def __getattr__(self, name: str) -> Any:  # only for what is not yet in the instance
        if name.startswith("__"):
            raise AttributeError(name)
        compiled = self._compiled
        if compiled is None:
            compiled = self._compiled = re.compile(*self._args)
        value = getattr(compiled, name)
        setattr(self, name, value)
        return value

    def __repr__(self) -> str:
        return repr(self._compiled or re.compile(*self._args))


def lazy_compile(pattern: AnyStr, flags: int = 0) -> re.Pattern[AnyStr]:
    """``re.compile(pattern, flags)``, done when the pattern is first used."""
    return cast("re.Pattern[AnyStr]", _LazyPattern(pattern, flags))
