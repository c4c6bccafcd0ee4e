"""Which units make one run: the rules every command that joins rank files obeys (``analyze``'s
reduce and the run graph of ``whatif`` read the same units, so they must refuse and renumber
the same way).

A rank number that was only guessed (no metadata said it) and is already taken gets the next free
number, with a note. Two files that both say they are rank R, traces that disagree on the world
size, and unix-clock captures that do not overlap in time are refused with a
:class:`~traceoverlap.core.errors.UsageError` that names the files.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..core.errors import UsageError
from ..core.model import TraceInfo

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

    class _Unit(DataclassInstance, Protocol):
        @property
        def trace(self) -> TraceInfo: ...


U = TypeVar("U", bound="_Unit")

#: Where a rank number was only guessed (no metadata said it): such ranks may be renumbered.
GUESSED_RANK_SOURCES = frozenset({"default", "process-order"})
#: Two unix-clock traces whose captures are further apart than this cannot be one run.
CLOCK_GAP_NS = 60 * 1_000_000_000


def one_run(files: Sequence[Sequence[U]], span: Callable[[U], tuple[int, int] | None]) -> list[U]:
    """The units of every file (``files``: per file, its units) as one run, guessed ranks
    renumbered; raises where the files cannot be one run. ``span``: a unit's first start and
    last end (ns), None where it has no step."""
    units: list[U] = []
    owner: dict[int, str] = {}
    for file_units in files:
        renumbered = _renumber_guessed(list(file_units), set(owner))
        for u in renumbered:
            t = u.trace
            if t.rank in owner and owner[t.rank] != t.path:
                raise UsageError(
                    f"rank {t.rank} appears in two traces ({owner[t.rank]} and {t.path}): they "
                    "cannot be one run; analyse them separately"
                )
        for u in renumbered:
            owner[u.trace.rank] = u.trace.path
        units.extend(renumbered)
    _check_world_sizes(units)
    _check_clocks(units, span)
    return units


def _renumber_guessed(file_units: list[U], taken: set[int]) -> list[U]:
    """Units whose rank was only guessed and is taken get the next free rank, with a note."""
    taken = set(taken)
    mapping: dict[int, int] = {}
    for u in file_units:
        r = u.trace.rank
        if r in taken and r not in mapping and u.trace.rank_source in GUESSED_RANK_SOURCES:
            free = next(x for x in range(len(taken) + len(file_units) + 1) if x not in taken)
            mapping[r] = free
            taken.add(free)
    out = []
    for u in file_units:
        t = u.trace
        if t.rank in mapping:
            new = mapping[t.rank]
            note = (
                f"no rank recorded in {t.path}; numbered rank {new} in file order "
                f"(rank {t.rank} was already taken)"
            )
            u = replace(u, trace=replace(t, rank=new, notes=t.notes + (note,)))
        out.append(u)
    return out


def _check_world_sizes(units: Sequence[U]) -> None:
    sizes: dict[int, str] = {}
    for u in units:
        if u.trace.world_size:
            sizes.setdefault(u.trace.world_size, u.trace.path)
    if len(sizes) > 1:
        shown = ", ".join(f"{w} in {p}" for w, p in sorted(sizes.items()))
        raise UsageError(
            f"the traces disagree on the world size ({shown}): they cannot be one run; analyse "
            "them separately"
        )


def _check_clocks(units: Sequence[U], span: Callable[[U], tuple[int, int] | None]) -> None:
    spans = []
    for u in units:
        first_last = span(u) if u.trace.clock == "unix" else None
        if first_last is not None:
            spans.append((first_last[0], first_last[1], u.trace.path))
    if len(spans) < 2:
        return
    spans.sort()
    reach_end, reach_path = spans[0][1], spans[0][2]
    for s, e, path in spans[1:]:
        if s > reach_end + CLOCK_GAP_NS:
            gap = (s - reach_end) / 1e9
            raise UsageError(
                f"{path} starts {gap:.0f} s after {reach_path} ends (both on unix time): traces "
                "that do not overlap in time cannot be one run; analyse them separately"
            )
        if e > reach_end:
            reach_end, reach_path = e, path


__all__ = ["CLOCK_GAP_NS", "GUESSED_RANK_SOURCES", "one_run"]
