"""traceoverlap: how much of your communication is hidden behind computation, and why.

Library API (the CLI is a thin layer over it)::

    import traceoverlap
    timeline = traceoverlap.load("rank0.json.gz")        # columnar Timeline
    result = traceoverlap.analyze("runs/bucketed/")      # Analysis
    result.steps                                          # DataFrame, one row per (rank, step)
"""

from .analysis import Analysis, analyze, load
from .classify import Rules
from .errors import TraceFormatError, TraceoverlapError
from .metrics import Thresholds
from .model import Timeline, TraceInfo

__version__ = "0.1.0"

__all__ = [
    "Analysis",
    "Rules",
    "Thresholds",
    "Timeline",
    "TraceFormatError",
    "TraceInfo",
    "TraceoverlapError",
    "analyze",
    "load",
    "__version__",
]
