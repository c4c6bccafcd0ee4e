"""The import-time fast paths against what they replace (issue 40: start-up cost):
:func:`traceoverlap.core._lazyre.lazy_compile`, a pattern compiled on first use, answers as the
compiled one."""

from __future__ import annotations

import re


def test_lazy_pattern_answers_as_the_compiled_one() -> None:
    from traceoverlap.core._lazyre import lazy_compile

    for pattern, flags, text in [
        (r"(?:^|[^a-z0-9])rank[-_]?(\d+)(?![0-9])", re.IGNORECASE, "trace_RANK-12.json"),
        (rb"\s*", 0, b"  {"),
        (r"\r(?!\n)", 0, "a\rb\r\nc"),
    ]:
        lazy, rx = lazy_compile(pattern, flags), re.compile(pattern, flags)
        assert lazy.pattern == rx.pattern and lazy.flags == rx.flags and lazy.groups == rx.groups
        assert lazy.search(text) is not None and lazy.search(text).span() == rx.search(text).span()
        assert lazy.sub(text[:0], text) == rx.sub(text[:0], text)
        assert lazy.findall(text) == rx.findall(text)
        m1, m2 = lazy.match(text), rx.match(text)
        assert (m1 and m1.span()) == (m2 and m2.span())
