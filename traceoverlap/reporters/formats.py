"""The output formats of ``analyze`` and ``compare``: one registry line per format.

Each :class:`Format` says what it renders (``kind``: ``"analysis"``, an
:class:`~traceoverlap.run.results.Analysis`, for ``analyze``; ``"compare"``, a
:class:`~traceoverlap.run.compare.Comparison`, for ``compare``), its ``--format`` name, the
``-o FILE`` suffixes that choose it when ``--format`` is not given, and its render function by
module path in this package, imported on first use: the registry imports nothing but the standard
library, so ``traceoverlap --help`` stays light. The ``--format`` choices, the suffix guess and
its ``--help`` text all come from :data:`FORMATS`, so a new output format is one reporter module
with a render function and one line here::

    Format("analysis", "tsv", (".tsv",), "tsv_report:render"),

The HTML report and the Perfetto export are not formats of this registry: neither renders the
analysis alone (the report draws steps read again, :func:`traceoverlap.run.detail.report_parts`;
the export streams every rank file again, :func:`traceoverlap.reporters.perfetto.write_trace`),
each is its own command with its own options (``report``, ``export``), and neither is a
``--format`` choice.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast

from ..core.errors import UsageError

__all__ = ["DEFAULT", "FORMATS", "KINDS", "Format", "choose", "formats", "suffix_help"]

#: What a format renders: ``analysis`` (``analyze``) or ``compare`` (``compare``).
KINDS = ("analysis", "compare")

#: The format when neither ``--format`` nor a known ``-o`` suffix says one.
DEFAULT = "table"


@dataclass(frozen=True)
class Format:
    """One output format of one command."""

    #: what it renders: one of :data:`KINDS`
    kind: str
    #: its ``--format`` name
    name: str
    #: ``-o FILE`` suffixes (lower case, with the dot) that choose it without ``--format``
    suffixes: tuple[str, ...]
    #: ``module:function`` in :mod:`traceoverlap.reporters`: ``function(obj) -> str``
    renderer: str
    #: a terminal table: the function also takes ``color=``, ``width=`` and ``verbose=``
    styled: bool = False
    #: shows "What to try": ``analyze`` replays the run graph for it (docs/whatif.md §3)
    what_to_try: bool = False

    def function(self) -> Callable[..., Any]:
        """The render function (its module imported now)."""
        module, _, name = self.renderer.partition(":")
        return cast(
            "Callable[..., Any]", getattr(importlib.import_module(f"{__package__}.{module}"), name)
        )

    def render(
        self,
        obj: Any,
        *,
        color: bool = False,
        width: int = 80,
        advice: Any = None,
        verbose: bool = False,
    ) -> str:
        """``obj`` in this format; ``color``, ``width`` and ``verbose`` (every line whole) are for
        a styled (terminal) format, ``advice`` (:func:`traceoverlap.whatif.advise`) for one that
        shows "What to try". The text keeps its type: a :class:`~traceoverlap.core.fmt.TerminalText`
        keeps its own colours on a terminal, an :class:`~traceoverlap.core.fmt.EscapedText`
        (JSON) is written without a scan (``write_text``)."""
        kwargs: dict[str, Any] = (
            {"color": color, "width": width, "verbose": verbose} if self.styled else {}
        )
        if self.what_to_try:
            kwargs["advice"] = advice
        text = self.function()(obj, **kwargs)
        return text if isinstance(text, str) else str(text)


#: Every output format, each kind's in ``--format`` order; a suffix names one format per kind.
FORMATS: tuple[Format, ...] = (
    Format("analysis", "table", (), "text:render", styled=True, what_to_try=True),
    Format("analysis", "json", (".json",), "json_report:render"),
    Format("analysis", "csv", (".csv",), "csv_report:render"),
    Format("analysis", "markdown", (".md", ".markdown"), "markdown:render", what_to_try=True),
    Format("compare", "table", (), "compare_text:render_table", styled=True),
    Format("compare", "json", (".json",), "compare_text:render_json"),
    Format("compare", "markdown", (".md", ".markdown"), "compare_text:render_markdown"),
)


def formats(kind: str) -> dict[str, Format]:
    """The formats of ``kind`` by name, in registry order (the ``--format`` choices)."""
    if kind not in KINDS:
        raise UsageError(f"output kind {kind!r}: expected one of {', '.join(KINDS)}")
    return {f.name: f for f in FORMATS if f.kind == kind}


def choose(kind: str, name: str | None = None, output: str | None = None) -> Format:
    """The format of ``kind`` to write: ``name`` when given (an explicit ``--format`` always
    wins), else the one whose suffix ``output`` ends with (any case), else :data:`DEFAULT`."""
    known = formats(kind)
    if name is not None:
        if name not in known:
            raise UsageError(f"format {name!r}: expected one of {', '.join(known)}")
        return known[name]
    if output and output != "-":
        suffix = os.path.splitext(output)[1].lower()
        for f in known.values():
            if suffix and suffix in f.suffixes:
                return f
    return known[DEFAULT]


def suffix_help(kind: str) -> str:
    """The suffix guess in words, for ``--help``: ``.json: json, .csv: csv, ...``."""
    return ", ".join(
        f"{' or '.join(f.suffixes)}: {f.name}" for f in formats(kind).values() if f.suffixes
    )
