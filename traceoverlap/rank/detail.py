"""One step's detail: everything the timeline of one (rank, step) shows (:class:`StepDetail`),
built by the map's :func:`traceoverlap.rank.unit.unit_step_detail` from one unit's events, on
demand (:func:`traceoverlap.run.detail.step_detail`).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt
import pandas as pd

if TYPE_CHECKING:
    pass

I64 = npt.NDArray[np.int64]
Spans = tuple[I64, I64]


@dataclass(frozen=True)
class StepDetail:
    """Everything the timeline of one step shows, computed by the analysis.

    ``activities``: one row per activity of the step (clipped to the window on CPU units) with
    ``lane``, ``stream``, ``tid``, ``kind`` (compute / comm / memory), ``name``, ``start_ns``,
    ``end_ns`` and the collective metadata (``coll_name``, ``coll_bytes``, ``process_group``,
    ``seq``, ``group_size``). ``lanes``: lane names in drawing order (GPU streams by number,
    then host threads). ``compute`` / ``comm`` / ``memory`` / ``busy``: the unions C, M, Y and
    C ∪ M ∪ Y of the step; ``overlap`` / ``exposed``: C ∩ M and M − C; ``exposed_by_cause``: the
    exposed spans per cause (wait, tail, dependency, host). All spans are (starts, ends), ns.
    ``phases``: (start, end, name) of the phase ranges (forward, backward, grad_sync,
    optimizer...), non-overlapping, earliest first.
    """

    rank: int
    device: int | None
    step: int | str
    window: int
    start_ns: int
    end_ns: int
    gpu: bool
    activities: pd.DataFrame
    lanes: tuple[str, ...]
    compute: Spans
    comm: Spans
    memory: Spans
    busy: Spans
    overlap: Spans
    exposed: Spans
    exposed_by_cause: Mapping[str, Spans]
    phases: tuple[I64, I64, tuple[str, ...]]
    chosen: str = "asked"
