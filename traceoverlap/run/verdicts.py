"""Why a step is slow and why its communication was exposed (docs/diagnosis.md).

Three things live here, all computed from numbers the metrics already hold:

1. **Causes** of every exposed nanosecond (M - C) of a step, first match wins:
   ``wait`` (inside the wait part of a matched collective: a peer was late; cross-rank, applied
   in :mod:`traceoverlap.collectives`), ``tail`` (no compute of the step starts after it),
   ``dependency`` (the next compute was already launched: it waited for this communication; on
   CPU units: the compute thread was blocked in a communication call) and ``host`` (the host had
   not launched the next compute yet). :func:`local_causes` splits the exposed set of one unit
   into tail / dependency / host; waiting is carved out of them later, across ranks.
2. The **verdict** of each step (:func:`verdict`): ``compute-bound`` when the time the device
   was not computing is below ``lost_ratio`` of the step, else the largest lost part names the
   class. The reason shows the deciding numbers and the runner-up when it is within 2x.
3. **Findings** (:func:`findings`): what to try, chosen by cause and collective family, naming
   the collectives and the numbers behind it (``same_stream`` first: the classic bug).

Precise edges (ns ``t`` is the nanosecond [t, t+1)): ``tail`` when t >= the latest start of a
compute activity of the step; ``dependency`` when the compute activities that start next after
t include one whose launch call started strictly before t.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from ..core.fmt import ms_unit as _ms
from ..core.fmt import pct as _pct
from ..core.options import Thresholds
from ..core.schema import (
    COMM_NS,
    COMPUTE_NS,
    COMPUTE_ONLY_NS,
    EXPOSED_TRANSFER_NS,
    EXPOSED_WAIT_NS,
    IDLE_NS,
    MEMORY_ONLY_NS,
    OTHER_STEPS_NS,
    OVERLAP_NS,
    STEP_NS,
)
from ..core.vocab import (
    Bottleneck,
)

I64 = npt.NDArray[np.int64]


#: Lost parts in tie-break order, with the name a reason uses.
LOST_PARTS: tuple[tuple[str, str], ...] = (
    (EXPOSED_WAIT_NS.name, "waiting for a peer in collectives"),
    (EXPOSED_TRANSFER_NS.name, "exposed communication (transfer)"),
    (IDLE_NS.name, "idle"),
    (MEMORY_ONLY_NS.name, "memcpy/memset alone"),
)


# --- verdicts ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class Verdict:
    bottleneck: str
    reason: str


def verdict(
    row: Mapping[str, Any],
    thresholds: Thresholds,
    waited_for: str | None = None,
    wait_known: bool = True,
    partial: str | None = None,
) -> Verdict:
    """The class of one step from its parts (diagnosis.md §2), with a reason that shows the
    deciding numbers. ``row`` holds the step's ``*_ns`` fields; ``waited_for`` names the rank
    this step waited for most (or None); ``partial``: the hedge of a run with ranks missing
    (:func:`partial_hedge`), said on every verdict that exposed transfer decides."""
    step = int(row[STEP_NS.name])
    compute, comm = int(row[COMPUTE_NS.name]), int(row[COMM_NS.name])
    if step <= 0:
        return Verdict(Bottleneck.COMPUTE, "empty window (0 ns): nothing to diagnose")
    # other steps' work in the window (overlapping steps, §7) is not lost time
    other = int(row.get(OTHER_STEPS_NS.name, 0))
    lost = step - int(row[COMPUTE_ONLY_NS.name]) - int(row[OVERLAP_NS.name]) - other
    if lost < thresholds.lost_ratio * step:
        return Verdict(
            Bottleneck.COMPUTE,
            f"the device computed for all but {_ms(lost)} = {_pct(lost / step)} of the step "
            f"(< {_pct(thresholds.lost_ratio)}): communication is hidden well enough",
        )
    parts = [(key, label, int(row[key])) for key, label in LOST_PARTS]
    ranked = sorted(range(len(parts)), key=lambda i: (-parts[i][2], i))
    key, label, value = parts[ranked[0]]
    share = f"{_ms(value)} = {_pct(value / step)} of the step"
    if key == EXPOSED_WAIT_NS.name:
        who = f"rank {waited_for}" if waited_for is not None else "a peer"
        cls = Bottleneck.PEER_WAIT
        text = f"waiting for {who} in collectives {share}: it arrived late"
    elif key == EXPOSED_TRANSFER_NS.name:
        if comm > compute:
            cls = Bottleneck.COMMUNICATION
            text = (
                f"exposed transfer {share}, and comm {_ms(comm)} > compute {_ms(compute)}: "
                f"even perfect overlap leaves {_ms(comm - compute)} exposed"
            )
        else:
            cls = Bottleneck.EXPOSED_COMMUNICATION
            text = (
                f"exposed transfer {share} while compute {_ms(compute)} >= comm "
                f"{_ms(comm)}: a better schedule could hide it"
            )
        if not wait_known and comm > 0:
            text += " (one rank only: waiting for peers cannot be told apart from transfer)"
        elif partial:
            text += f" ({partial})"
    elif key == IDLE_NS.name:
        cls = Bottleneck.IDLE
        text = f"idle {share}: nothing ran on the device (the host did not feed it)"
    else:
        cls = Bottleneck.MEMORY
        text = f"memcpy/memset alone {share}"
    second_key, second_label, second = parts[ranked[1]]
    if second > 0 and 2 * second >= value:
        text += f"; runner-up: {second_label} {_ms(second)} = {_pct(second / step)}"
    computing = step - lost - other
    if 2 * computing >= step:
        # the wording follows the size of the loss (§6): a step that mostly computes says so
        # first, and names its largest loss
        text = f"mostly computing ({_pct(computing / step)} of the step); largest loss: " + text
    return Verdict(cls, text)


def partial_hedge(ranks_given: int, world_size: int | None) -> str | None:
    """diagnosis.md §6: with ranks of the world missing, exposed time that is not provably
    transfer may be waiting for a missing rank."""
    if world_size is None or ranks_given >= world_size:
        return None
    return (
        f"{ranks_given} of {world_size} ranks given: waiting for a missing rank cannot be ruled "
        "out; analyse every rank"
    )
