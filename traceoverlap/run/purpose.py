"""The purposes of a run's collectives (docs/diagnosis.md §10), across ranks: each rank's
instance gets its unit's purpose (decided by the map, :mod:`traceoverlap.rank.purpose`), and each
matched instance the purpose most of its ranks give that is not ``unknown``.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pandas as pd

from ..core.vocab import Purpose
from ..rank.purpose import first_match
from ..rank.unit import UnitResult


def attach_purposes(
    instances: pd.DataFrame, per_rank: pd.DataFrame, local: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The run's instance and per-rank tables with a ``purpose`` column: per rank, its unit's
    local instance's (joined on unit, lane and start); per instance, the purpose most of its ranks
    give that is not ``unknown`` (``unknown`` when none)."""
    if per_rank.empty or "purpose" not in local.columns:
        return (
            instances.assign(purpose=pd.array([Purpose.UNKNOWN] * len(instances), dtype=object)),
            per_rank.assign(purpose=pd.array([Purpose.UNKNOWN] * len(per_rank), dtype=object)),
        )
    j = first_match(
        (
            per_rank["unit"].to_numpy(),
            per_rank["lane"].astype(str).to_numpy(dtype=object),
            per_rank["start_ns"].to_numpy(np.int64),
        ),
        (
            local["unit"].to_numpy(),
            local["lane"].astype(str).to_numpy(dtype=object),
            local["start_ns"].to_numpy(np.int64),
        ),
    )
    got = local["purpose"].to_numpy(dtype=object)[np.maximum(j, 0)]
    missing = (j < 0) | pd.isna(got)
    purpose = np.full(j.size, Purpose.UNKNOWN, dtype=object)
    purpose[~missing] = pd.Series(got[~missing], dtype=object).astype(str).to_numpy(dtype=object)
    per_rank = per_rank.assign(purpose=pd.array(purpose, dtype=object))
    # per instance: the purpose most of its ranks give that is not unknown (ties: the first
    # purpose in sort order)
    known = purpose != Purpose.UNKNOWN
    ids = per_rank["instance"].to_numpy(np.int64)[known]
    code, labels = pd.factorize(purpose[known], sort=True)
    pair, n = np.unique(ids * max(len(labels), 1) + code, return_counts=True)
    p_inst, p_code = pair // max(len(labels), 1), pair % max(len(labels), 1)
    order = np.lexsort((p_code, -n, p_inst))  # per instance: most ranks, then sort order
    head = order[np.r_[True, p_inst[order][1:] != p_inst[order][:-1]]] if order.size else order
    best_inst, best_label = p_inst[head], np.asarray(labels, dtype=object)[p_code[head]]
    want = instances["instance"].to_numpy(np.int64)
    at = np.minimum(np.searchsorted(best_inst, want), max(best_inst.size - 1, 0))
    hit = (best_inst.size > 0) & (best_inst[at] == want) if best_inst.size else np.zeros(0, bool)
    inst_p = np.full(want.size, Purpose.UNKNOWN, dtype=object)
    if best_inst.size:
        inst_p[hit] = best_label[at[hit]]
    return instances.assign(purpose=pd.array(inst_p, dtype=object)), per_rank


def prefetching(units: Sequence[UnitResult]) -> bool:
    """Whether the run's FSDP all-gathers are already prefetched (diagnosis.md §13): most of the
    units that have them issue most of them while compute still runs
    (:attr:`~traceoverlap.rank.purpose.UnitStrategy.prefetch`, read from the trace)."""
    said = [u.strategy.prefetch for u in units if u.strategy is not None]
    known = [p for p in said if p is not None]
    return bool(known) and 2 * sum(known) > len(known)
