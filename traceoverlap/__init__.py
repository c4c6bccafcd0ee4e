"""traceoverlap: how much of your communication is hidden behind computation, and why.

Library API (the CLI is a thin layer over it)::

    import traceoverlap
    timeline = traceoverlap.load("rank0.json.gz")        # columnar Timeline
    result = traceoverlap.analyze("runs/bucketed/")      # Analysis
    result.steps                                          # DataFrame, one row per (rank, step)
    result = traceoverlap.analyze("runs/x/", traceoverlap.AnalyzeOptions(steps="3-7"))
    detail = traceoverlap.step_detail(result, rank=0, step=5)   # one step's timeline
    parts = traceoverlap.report_parts(result)            # what the HTML report draws

The code is laid out by stage, each package importing only the ones before it: ``core`` (the
words and the table), ``readers``, ``rank`` (the per-rank map), ``run`` (the cross-rank reduce),
``whatif``, ``reporters``, ``record`` and ``cli`` (CONTRIBUTING.md). ``traceoverlap.options``,
``traceoverlap.schema`` and ``traceoverlap.vocab`` stay importable by those names (the Python API,
docs/python-api.md).

Names are imported on first use, so ``import traceoverlap`` (and ``traceoverlap --help``) does
not pay for numpy and pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .core.errors import TraceFormatError, TraceoverlapError
    from .core.model import Timeline, TraceInfo
    from .core.options import AnalyzeOptions, Thresholds
    from .core.rules import Rules
    from .rank.detail import StepDetail
    from .run.analysis import analyze, load
    from .run.detail import ReportParts, report_parts, step_detail
    from .run.results import Analysis

_LAZY = {
    "Analysis": "run.results",
    "AnalyzeOptions": "core.options",
    "ReportParts": "run.detail",
    "StepDetail": "rank.detail",
    "report_parts": "run.detail",
    "step_detail": "run.detail",
    "analyze": "run.analysis",
    "load": "run.analysis",
    "Rules": "core.rules",
    "Thresholds": "core.options",
    "Timeline": "core.model",
    "TraceInfo": "core.model",
    "TraceFormatError": "core.errors",
    "TraceoverlapError": "core.errors",
}

__all__ = [
    "Analysis",
    "AnalyzeOptions",
    "ReportParts",
    "Rules",
    "StepDetail",
    "Thresholds",
    "Timeline",
    "TraceFormatError",
    "TraceInfo",
    "TraceoverlapError",
    "analyze",
    "load",
    "report_parts",
    "step_detail",
    "__version__",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'traceoverlap' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    # the lazy names are part of the module: dir() and tab completion list them
    return sorted(set(globals()) | set(__all__))
