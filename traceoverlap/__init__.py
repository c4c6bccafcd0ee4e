"""traceoverlap: how much of your communication is hidden behind computation, and why.

Library API (the CLI is a thin layer over it)::

    import traceoverlap
    timeline = traceoverlap.load("rank0.json.gz")        # columnar Timeline
    result = traceoverlap.analyze("runs/bucketed/")      # Analysis
    result.steps                                          # DataFrame, one row per (rank, step)
    result = traceoverlap.analyze("runs/x/", traceoverlap.AnalyzeOptions(steps="3-7"))
    detail = traceoverlap.step_detail(result, rank=0, step=5)   # one step's timeline

Names are imported on first use, so ``import traceoverlap`` (and ``traceoverlap --help``) does
not pay for numpy and pandas.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from ._version import __version__

if TYPE_CHECKING:
    from .analysis import analyze, load
    from .classify import Rules
    from .detail import step_detail
    from .errors import TraceFormatError, TraceoverlapError
    from .model import Timeline, TraceInfo
    from .options import AnalyzeOptions, Thresholds
    from .results import Analysis, StepDetail

_LAZY = {
    "Analysis": "results",
    "AnalyzeOptions": "options",
    "StepDetail": "results",
    "step_detail": "detail",
    "analyze": "analysis",
    "load": "analysis",
    "Rules": "classify",
    "Thresholds": "options",
    "Timeline": "model",
    "TraceInfo": "model",
    "TraceFormatError": "errors",
    "TraceoverlapError": "errors",
}

__all__ = [
    "Analysis",
    "AnalyzeOptions",
    "Rules",
    "StepDetail",
    "Thresholds",
    "Timeline",
    "TraceFormatError",
    "TraceInfo",
    "TraceoverlapError",
    "analyze",
    "load",
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
