"""What fixing it would buy: the run graph joined across units, its replay, the overlap tax, and
the scenarios (docs/whatif.md)::

    import traceoverlap.whatif as whatif
    w = whatif.what_if(whatif.load_graph("runs/job/"), ["fix-rank:1"])   # WhatIf
    advice = whatif.advise(analysis)          # "What to try" of an AnalyzeOptions(graph=True) one

Names are imported on first use: the scenario registry (:mod:`traceoverlap.whatif.registry`)
loads without numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from .advice import MAX_NODES, Advice, advise
    from .graph import RunGraph, run_graph
    from .registry import Changed, Scenario, register
    from .scenarios import ScenarioResult, WhatIf, graph_of, load_graph, what_if

_LAZY = {
    "Advice": "advice",
    "MAX_NODES": "advice",
    "advise": "advice",
    "RunGraph": "graph",
    "run_graph": "graph",
    "Changed": "registry",
    "Scenario": "registry",
    "register": "registry",
    "ScenarioResult": "scenarios",
    "WhatIf": "scenarios",
    "graph_of": "scenarios",
    "load_graph": "scenarios",
    "what_if": "scenarios",
}

__all__ = [
    "MAX_NODES",
    "Advice",
    "Changed",
    "RunGraph",
    "Scenario",
    "ScenarioResult",
    "WhatIf",
    "advise",
    "graph_of",
    "load_graph",
    "register",
    "run_graph",
    "what_if",
]


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'traceoverlap.whatif' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_LAZY))
