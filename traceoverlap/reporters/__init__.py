"""Formatting only: the analysis, a comparison or a what-if as text, JSON, CSV, Markdown, HTML or
a Perfetto trace, and writing output files safely (:mod:`.outputs`).

The output formats of ``analyze`` and ``compare`` (name, ``-o`` suffixes, render function) are
one registry, :data:`FORMATS` (:mod:`.formats`): importing it loads no reporter, so ``--help``
stays light::

    from traceoverlap.reporters import choose
    text = choose("analysis", output="result.json").render(result)   # the JSON report
"""

from __future__ import annotations

from .formats import DEFAULT, FORMATS, KINDS, Format, choose, formats, suffix_help

__all__ = ["DEFAULT", "FORMATS", "KINDS", "Format", "choose", "formats", "suffix_help"]
