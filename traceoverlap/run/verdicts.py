"""The verdict of each step (docs/diagnosis.md §2), from the parts the metrics already hold.

``compute-bound`` when the time the device was not computing is below ``lost_ratio`` of the
step; else the largest lost part names the class. The lost parts are a registry,
:data:`LOST_PARTS`, in tie-break order: each names its step column, the words a reason uses for
it, and how it words the verdict when it is the largest. A new part (a new kind of lost time)
is one entry there. The reason shows the deciding numbers, and the runner-up when it is within
2x.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
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
    EXPOSED_UNMATCHED_NS,
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


@dataclass(frozen=True)
class Verdict:
    bottleneck: str
    reason: str


@dataclass(frozen=True)
class _Facts:
    """What a lost part's wording may use: its share of the step (already worded), the step's
    compute and communication, the rank waited for, and the hedges."""

    share: str
    compute: int
    comm: int
    waited_for: str | None
    wait_known: bool
    partial: str | None
    unmatched_why: str | None = None


def _peer_wait(f: _Facts) -> Verdict:
    who = f"rank {f.waited_for}" if f.waited_for is not None else "a peer"
    return Verdict(
        Bottleneck.PEER_WAIT, f"waiting for {who} in collectives {f.share}: it arrived late"
    )


def _transfer(f: _Facts) -> Verdict:
    compute, comm = f.compute, f.comm
    if comm > compute:
        cls = Bottleneck.COMMUNICATION
        text = (
            f"exposed transfer {f.share}, and comm {_ms(comm)} > compute {_ms(compute)}: "
            f"even perfect overlap leaves {_ms(comm - compute)} exposed"
        )
    else:
        cls = Bottleneck.EXPOSED_COMMUNICATION
        text = (
            f"exposed transfer {f.share} while compute {_ms(compute)} >= comm "
            f"{_ms(comm)}: a better schedule could hide it"
        )
    if not f.wait_known and comm > 0:
        text += " (one rank only: waiting for peers cannot be told apart from transfer)"
    elif f.partial:
        text += f" ({f.partial})"
    return Verdict(cls, text)


def _unmatched(f: _Facts) -> Verdict:
    """diagnosis.md §12: exposed communication with no peers or pair to split it by is
    ``exposed-communication`` whatever |M| vs |C|: waiting and transfer cannot be told apart, so
    it says why, and never calls it transfer (no bandwidth, no communication-bound)."""
    why = f.unmatched_why or "no peers or pair in the trace"
    text = (
        f"exposed communication with no wait / transfer split {f.share}: waiting for a peer "
        f"cannot be told from transfer ({why})"
    )
    if f.partial:
        text += f" ({f.partial})"
    return Verdict(Bottleneck.EXPOSED_COMMUNICATION, text)


def _idle(f: _Facts) -> Verdict:
    return Verdict(
        Bottleneck.IDLE, f"idle {f.share}: nothing ran on the device (the host did not feed it)"
    )


def _memory(f: _Facts) -> Verdict:
    return Verdict(Bottleneck.MEMORY, f"memcpy/memset alone {f.share}")


@dataclass(frozen=True)
class LostPart:
    """One kind of lost time a verdict can name: its step column, the words a reason (and a
    runner-up) uses for it, and the verdict it gives when it is the step's largest."""

    column: str
    label: str
    decide: Callable[[_Facts], Verdict]


#: The verdict registry: the lost parts in tie-break order (the first wins a tie).
LOST_PARTS: tuple[LostPart, ...] = (
    LostPart(EXPOSED_WAIT_NS.name, "waiting for a peer in collectives", _peer_wait),
    LostPart(EXPOSED_TRANSFER_NS.name, "exposed communication (transfer)", _transfer),
    LostPart(
        EXPOSED_UNMATCHED_NS.name, "exposed communication (wait vs transfer unknown)", _unmatched
    ),
    LostPart(IDLE_NS.name, "idle", _idle),
    LostPart(MEMORY_ONLY_NS.name, "memcpy/memset alone", _memory),
)


def verdict(
    row: Mapping[str, Any],
    thresholds: Thresholds,
    waited_for: str | None = None,
    wait_known: bool = True,
    partial: str | None = None,
    unmatched_why: str | None = None,
) -> Verdict:
    """The class of one step from its parts (diagnosis.md §2), with a reason that shows the
    deciding numbers. ``row`` holds the step's ``*_ns`` fields; ``waited_for`` names the rank
    this step waited for most (or None); ``partial``: the hedge of a run with ranks missing
    (:func:`partial_hedge`), said on every verdict that exposed transfer decides;
    ``unmatched_why``: why the step's unmatched exposed time has no split (diagnosis.md §12)."""
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
    values = [int(row.get(part.column, 0)) for part in LOST_PARTS]
    ranked = sorted(range(len(values)), key=lambda i: (-values[i], i))
    top, value = LOST_PARTS[ranked[0]], values[ranked[0]]
    share = f"{_ms(value)} = {_pct(value / step)} of the step"
    decided = top.decide(
        _Facts(share, compute, comm, waited_for, wait_known, partial, unmatched_why)
    )
    text = decided.reason
    second_part, second = LOST_PARTS[ranked[1]], values[ranked[1]]
    if second > 0 and 2 * second >= value:
        text += f"; runner-up: {second_part.label} {_ms(second)} = {_pct(second / step)}"
    computing = step - lost - other
    if 2 * computing >= step:
        # the wording follows the size of the loss (§6): a step that mostly computes says so
        # first, and names its largest loss
        text = f"mostly computing ({_pct(computing / step)} of the step); largest loss: " + text
    return Verdict(decided.bottleneck, text)


def partial_hedge(ranks_given: int, world_size: int | None) -> str | None:
    """diagnosis.md §6: with ranks of the world missing, exposed time that is not provably
    transfer may be waiting for a missing rank."""
    if world_size is None or ranks_given >= world_size:
        return None
    return (
        f"{ranks_given} of {world_size} ranks given: waiting for a missing rank cannot be ruled "
        "out; analyse every rank"
    )
