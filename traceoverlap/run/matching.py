"""Collectives across ranks: matching the units' instances, waiting vs transfer, stragglers.

The units' collective instances (:mod:`traceoverlap.rank.instances`, the map) are matched across
the units of a run here (:func:`match_collectives`, the reduce).

Matching across units: an instance must be present on every unit given that is a member of its
group; when counts differ a note names them and only what all have is matched. Point-to-point:
in a group of two, the n-th send of a rank pairs with the n-th recv of the other (their wait is
the time before the peer started); undirected SendRecv only when the group has two members.
Waiting is then credited once (:mod:`traceoverlap.run.job`).

Clocks (docs/diagnosis.md §5): every unit's clock offset is estimated from collective END times
(a collective completes together on every rank), relative to the lowest unit, as the median
difference over matched instances. A matched instance is *consistent* when, after removing the
offsets, its intervals on all units share an instant (within :data:`TOLERANCE_NS`); inconsistent
matches are counted in a note and not used for waiting or stragglers. On unix clocks an offset
beyond :data:`MAX_UNIX_SKEW_NS` is not believed (the matching, not the clocks, is off) and 0 is
used.

Per consistent instance (integer ns): ``transfer_ns`` = the shortest duration across units;
each unit's ``wait_ns`` = its duration - transfer; the wait part on a unit is
``[start, start + wait_ns)``; ``last_rank`` = the unit with the latest aligned start (None on a
tie). Each unit's exposed time of the instance is split by cause (diagnosis.md §3).

Unknown is not transfer (diagnosis.md §12): in a run of several units, exposed time outside every
matched instance's wait and transfer parts (instances left unmatched, each with its reason in
``unmatched_why``; the part of a transfer estimate more than 3x the median of its family and
size) is ``exposed_unmatched``, neither wait nor transfer.

Stragglers: per unit, how often it arrived last and the total time the others waited in the
instances where it did (``waited_for_ns``). With fewer ranks than the world, these are "among the
ranks given" and the reports say so.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
import numpy.typing as npt
import pandas as pd

from ..core import intervals as iv
from ..core.intervals import GroupedIntervals
from ..core.model import TraceInfo
from ..core.schema import (
    BLAME,
    COLLECTIVE_PER_RANK,
    COLLECTIVES,
    EXPOSED_DEPENDENCY_NS,
    EXPOSED_HOST_NS,
    EXPOSED_NS,
    EXPOSED_TAIL_NS,
    EXPOSED_UNMATCHED_NS,
    EXPOSED_WAIT_NS,
    ROOT_WAITED_FOR_NS,
    STEP_NS,
    STEP_SKEW,
    STRAGGLERS,
    WAIT_NS,
    WAITED_FOR_RANK,
    conform,
)
from ..core.vocab import (
    CAUSES,
    FAMILIES,
    Cause,
)
from ..rank.instances import UNKNOWN_GROUP, known_ns
from .job import (
    CREDIT_COLUMNS,
    StragglerVerdict,
    credit_segments,
    empty_blame,
    waited_for_ranks,
)

I64 = npt.NDArray[np.int64]

#: Timestamp jitter allowed when checking that a matched instance's spans share an instant.
TOLERANCE_NS = 10_000
#: Largest clock offset believed between ranks that both claim unix time.
MAX_UNIX_SKEW_NS = 10_000_000


PER_RANK_COLUMNS = (
    "instance",
    "unit",
    "rank",
    "device",
    "step",
    "window",
    "name",
    "kernel",
    "family",
    "lane",
    "start_ns",
    "end_ns",
    "dur_ns",
    WAIT_NS.name,
    EXPOSED_NS.name,
    EXPOSED_WAIT_NS.name,
    EXPOSED_TAIL_NS.name,
    EXPOSED_DEPENDENCY_NS.name,
    EXPOSED_HOST_NS.name,
    EXPOSED_UNMATCHED_NS.name,
    "unmatched_why",
    "same_stream",
    "queued_ns",
    "behind_comm_ns",
    "matched",
    "aligned_start_ns",
    "aligned_end_ns",
    WAITED_FOR_RANK.name,
)
INSTANCE_COLUMNS = (
    "instance",
    "name",
    "family",
    "process_group",
    "seq",
    "bytes",
    "n_ranks",
    "ranks",
    "step",
    "start_ns",
    "transfer_ns",
    WAIT_NS.name,
    "last_rank",
    EXPOSED_NS.name,
    "matched",
    "group",
    "members",
    "p2p",
    "src_rank",
    "dst_rank",
    "last_arrival_ns",
    "transfer_outlier",
)
#: The straggler table as matching builds it (the reduce adds the blame chains' roots).
STRAGGLER_COLUMNS = tuple(n for n in STRAGGLERS.names if n != ROOT_WAITED_FOR_NS.name)
SKEW_COLUMNS = STEP_SKEW.names


# --- reduce side: matching across units ---------------------------------------------------------


@dataclass(frozen=True)
class Collectives:
    """Collective instances of a run, matched across ranks (see the module docstring).

    ``instances``: one row per instance (:data:`INSTANCE_COLUMNS`), matched across ranks or, when
    it could not be, one row per unit's own instance (``matched`` false, ``n_ranks`` 1).
    ``per_rank``: one row per (instance, unit) (:data:`PER_RANK_COLUMNS`) with the exposed time
    split by cause. ``stragglers``: one row per unit, most waited-for first. ``step_skew``: one row
    per step label present on two or more units. ``clock``: ``unix``, ``estimated`` (offsets from
    collective end times) or None (no arrival order). ``partial``: fewer ranks than the world.
    """

    instances: pd.DataFrame
    per_rank: pd.DataFrame
    stragglers: pd.DataFrame
    step_skew: pd.DataFrame
    notes: tuple[str, ...]
    clock: str | None
    n_matched: int
    n_inconsistent: int
    ranks_given: int
    world_size: int | None
    credit: pd.DataFrame = field(default_factory=lambda: pd.DataFrame(columns=list(CREDIT_COLUMNS)))
    groups: pd.DataFrame = field(default_factory=pd.DataFrame)
    blame: pd.DataFrame = field(default_factory=empty_blame)
    #: per unit index: the clock offset (ns) removed from its times to put it on the run's one
    #: clock (aligned = raw - offset; 0 for units without consistent matched instances)
    offsets_ns: tuple[int, ...] = ()
    #: diagnosis.md §14: whether a straggler is named (significant, stable); set by the reduce
    verdict: StragglerVerdict | None = None

    def conformed(self) -> Collectives:
        """These collectives with every table's columns in their schema dtypes
        (:func:`traceoverlap.core.schema.conform`): what the Python API hands out."""
        return replace(
            self,
            instances=conform(self.instances, COLLECTIVES),
            per_rank=conform(self.per_rank, COLLECTIVE_PER_RANK),
            stragglers=conform(self.stragglers, STRAGGLERS),
            step_skew=conform(self.step_skew, STEP_SKEW),
            credit=conform(self.credit, BLAME),
            blame=conform(self.blame, BLAME),
        )

    @property
    def aligned(self) -> bool:
        """Start times compare across ranks (arrival order is known)."""
        return self.clock is not None

    @property
    def partial(self) -> bool:
        return self.world_size is not None and self.ranks_given < self.world_size

    @property
    def top_straggler(self) -> int | None:
        """The rank credited with the most exposed waiting (docs/job-model.md), or None; None
        too when the waiting it causes is below the straggler threshold or the late rank moves
        from step to step (:attr:`verdict`, diagnosis.md §14)."""
        if self.verdict is not None and self.verdict.rank is None:
            return None
        s = self.stragglers
        if s.empty or int(s["last_count"].max()) == 0 or int(s["exposed_waited_for_ns"].max()) == 0:
            return None
        named = None if self.verdict is None else self.verdict.rank
        if named is not None and named in set(s["rank"].tolist()):
            return int(named)  # the rank §14's stability test named
        return int(s["rank"].iloc[0])


@dataclass(frozen=True)
class CauseSets:
    """Per window (global index): the exposed set split by cause, as grouped disjoint sets."""

    wait: GroupedIntervals
    tail: GroupedIntervals
    dependency: GroupedIntervals
    host: GroupedIntervals
    #: the exposed set with no known split into wait and transfer (diagnosis.md §12); not a
    #: cause: it overlaps the tail / dependency / host sets
    unmatched: GroupedIntervals = field(
        default_factory=lambda: (
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
            np.zeros(0, np.int64),
        )
    )

    def by_name(self) -> dict[str, GroupedIntervals]:
        return {
            Cause.WAIT: self.wait,
            Cause.TAIL: self.tail,
            Cause.DEPENDENCY: self.dependency,
            Cause.HOST: self.host,
        }


def _describe_group(g: str) -> str:
    if g == UNKNOWN_GROUP:
        return "an unknown group"
    if g.startswith("\x00stream#"):
        return f"NCCL stream #{g[len(chr(0)) + len('stream#') :]}"
    return f"group {g!r}" if g else "the default group"


def group_members(traces: Sequence[TraceInfo]) -> dict[str, tuple[int, ...]]:
    """Process group name -> its ranks, from every trace's ``pg_config`` (first seen wins)."""
    out: dict[str, tuple[int, ...]] = {}
    for t in traces:
        for name, ranks in t.process_groups:
            out.setdefault(name, tuple(sorted(ranks)))
    return out


def _p2p_direction(
    inst: pd.DataFrame, unit_rank: npt.NDArray[np.int64], members: dict[object, tuple[int, ...]]
) -> tuple[npt.NDArray[np.object_], I64, I64]:
    """Directed point-to-point (diagnosis.md §6): a ``send`` / ``recv`` in a group of two pairs
    with the opposite call on the other member. Per row: the kind key to match on
    (``p2p:<src>><dst>`` for a directed send/recv, else the row's own), the sending and the
    receiving rank (-1 when not a directed p2p). The n-th send of ``a`` to ``b`` then meets the
    n-th recv of ``b`` from ``a``: never a send with a send."""
    kind = inst["kind_key"].to_numpy(dtype=object).copy()
    src = np.full(len(inst), -1, dtype=np.int64)
    dst = np.full(len(inst), -1, dtype=np.int64)
    if inst.empty:
        return kind, src, dst
    is_send = np.isin(kind, ["send", "isend"])
    is_recv = np.isin(kind, ["recv", "irecv", "recvanysource"])
    rank = unit_rank[inst["unit"].to_numpy(np.int64)]
    pair = {g: m for g, m in members.items() if len(m) == 2}
    # the two members of each row's group (-1: not a group of two), by dict lookups where a
    # Series.map and fillna per column cost more
    gk = inst["group_key"].tolist()
    m0 = np.array([pair[g][0] if g in pair else -1 for g in gk], dtype=np.int64)
    m1 = np.array([pair[g][1] if g in pair else -1 for g in gk], dtype=np.int64)
    ok = (is_send | is_recv) & (m0 >= 0) & ((rank == m0) | (rank == m1))
    peer = np.where(rank == m0, m1, m0)
    src[ok] = np.where(is_send, rank, peer)[ok]
    dst[ok] = np.where(is_send, peer, rank)[ok]
    if ok.any():
        at = np.flatnonzero(ok)
        for i, a, b in zip(at.tolist(), src[ok].tolist(), dst[ok].tolist(), strict=True):
            kind[i] = f"p2p:{a}>{b}"
    return kind, src, dst


def _sorted_codes(values: npt.NDArray[Any]) -> tuple[I64, list[Any]]:
    """Per value, its place among the distinct non-null values in ``sorted`` order (-1: null,
    as ``pd.factorize`` tells it), and those values: a hash of the rows, a sort of the few
    distinct values only."""
    codes, uniq = pd.factorize(values, sort=False)
    distinct = list(uniq)
    order = sorted(range(len(distinct)), key=distinct.__getitem__)
    place = np.empty(len(order) + 1, dtype=np.int64)
    place[order] = np.arange(len(order), dtype=np.int64)
    place[-1] = -1  # code -1 (null) reads the last cell
    return place[np.asarray(codes, dtype=np.int64)], [distinct[i] for i in order]


def _distinct_pairs(a: I64, b: I64) -> tuple[I64, I64, I64]:
    """The distinct (a, b) rows sorted by a then b, and how many rows each has."""
    if a.size == 0:
        return a, b, np.zeros(0, dtype=np.int64)
    order = np.lexsort((b, a))
    sa, sb = a[order], b[order]
    new = np.ones(a.size, dtype=bool)
    new[1:] = (sa[1:] != sa[:-1]) | (sb[1:] != sb[:-1])
    at = np.flatnonzero(new)
    return sa[at], sb[at], np.diff(np.append(at, a.size))


def _units_by_group(inst: pd.DataFrame) -> dict[object, set[int]]:
    """Per group key (sorted, as a groupby; null keys left out): the units that ran it."""
    codes, keys = _sorted_codes(inst["group_key"].to_numpy(dtype=object))
    unit = inst["unit"].to_numpy(np.int64)
    ok = codes >= 0  # groupby drops null keys
    gs, us, _ = _distinct_pairs(codes[ok], unit[ok])
    seen: dict[object, set[int]] = {k: set() for k in keys}
    for g, u in zip(gs.tolist(), us.tolist(), strict=True):
        seen[keys[g]].add(u)
    return seen


def _group_table(
    inst: pd.DataFrame,
    traces: Sequence[TraceInfo],
    shown_of: dict[object, set[int]] | None = None,
) -> tuple[dict[object, tuple[int, ...]], dict[object, tuple[int, ...]]]:
    """Per group key: its members (ranks; from ``pg_config`` when known, else the ranks that
    ran its collectives) and the units given that are members."""
    known = group_members(traces)
    unit_rank = [t.rank for t in traces]
    members: dict[object, tuple[int, ...]] = {}
    units_of: dict[object, tuple[int, ...]] = {}
    for g, us in (_units_by_group(inst) if shown_of is None else shown_of).items():
        shown = sorted(us)
        if str(g) in known:
            members[g] = known[str(g)]
            units_of[g] = tuple(
                sorted(set(shown) | {u for u, r in enumerate(unit_rank) if r in known[str(g)]})
            )
        else:
            members[g] = tuple(sorted({unit_rank[u] for u in shown}))
            units_of[g] = tuple(shown)
    return members, units_of


def _ngroup(*columns: npt.NDArray[Any]) -> I64:
    """Per row, ``groupby(columns, sort=False).ngroup()``: its group's number in order of first
    appearance, -1 where a column is null (pandas: NaN; group keys are never null). Codes
    per column, then a sort of the code rows."""
    n = len(columns[0])
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    codes = [np.asarray(pd.factorize(c, sort=False)[0], dtype=np.int64) for c in columns]
    null = np.zeros(n, dtype=bool)
    for c in codes:
        null |= c < 0
    order = np.lexsort(codes[::-1])
    new = np.ones(n, dtype=bool)
    new[1:] = np.zeros(n - 1, dtype=bool)
    for c in codes:
        cs = c[order]
        new[1:] |= cs[1:] != cs[:-1]
    group = np.empty(n, dtype=np.int64)
    group[order] = np.cumsum(new) - 1
    group[null] = -1
    # number the groups by their first row
    valid = np.flatnonzero(~null)
    firsts = np.full(int(group.max()) + 1 if valid.size else 0, n, dtype=np.int64)
    np.minimum.at(firsts, group[valid], valid)
    rank = np.empty(firsts.size, dtype=np.int64)
    rank[np.argsort(firsts, kind="stable")] = np.arange(firsts.size, dtype=np.int64)
    out = np.full(n, -1, dtype=np.int64)
    out[valid] = rank[group[valid]]
    return out


#: What a note says of the exposed time of instances left unmatched in a run of several units.
_UNMATCHED_WORDS = "is unmatched: waiting cannot be told from transfer (diagnosis.md §12)"


@dataclass(frozen=True)
class _Extra:
    """Per local instance row: its group's members, p2p direction and why it is unmatched."""

    members: npt.NDArray[np.object_]
    src_rank: I64
    dst_rank: I64
    why: npt.NDArray[np.object_]


def _object_array(values: Sequence[Any]) -> npt.NDArray[np.object_]:
    """A 1-d object array of ``values`` (tuples stay elements, not rows)."""
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


def _by_key(keys: npt.NDArray[Any], of: Callable[[Any], Any]) -> npt.NDArray[np.object_]:
    """``[of(k) for k in keys]`` as an object array, ``of`` called once per distinct key (by
    ``pd.factorize``: equal keys alike, every null as None: ``of`` must not tell nulls apart)."""
    code, distinct = pd.factorize(keys, sort=False)
    out: npt.NDArray[np.object_] = _object_array([of(k) for k in [*distinct.tolist(), None]])
    return np.asarray(out[np.asarray(code, dtype=np.int64)], dtype=object)


def _match(
    inst: pd.DataFrame,
    units: Sequence[int],
    unit_label: dict[int, str],
    traces: Sequence[TraceInfo],
) -> tuple[npt.NDArray[np.int64], list[str], _Extra]:
    """Per local instance row: its matched instance key (-1 unmatched), notes, and per row its
    group's members and p2p direction (``members``, ``src_rank``, ``dst_rank``) and why it is
    unmatched. Matching is the n-th instance within a group (diagnosis.md §6)."""
    notes: list[str] = []
    n = len(inst)
    key = np.full(n, -1, dtype=np.int64)
    why = np.full(n, "", dtype=object)
    if inst.empty:
        return key, notes, _Extra(_object_array([()] * n), key.copy(), key.copy(), why)
    unit_rank = np.array([t.rank for t in traces], dtype=np.int64)
    shown_of = _units_by_group(inst)
    members, units_of = _group_table(inst, traces, shown_of)
    match_kind, src, dst = _p2p_direction(inst, unit_rank, members)
    # per distinct group key its members and sizes, spread to the rows
    group_col = inst["group_key"].to_numpy(dtype=object)
    member_col = _by_key(group_col, lambda g: members.get(g, ()))
    unknown = inst["group_key"].to_numpy(dtype=object) == UNKNOWN_GROUP
    if unknown.any():
        notes.append(
            f"{int(unknown.sum())} communication activit{'y' if unknown.sum() == 1 else 'ies'} "
            "whose process group cannot be told (the ranks run several groups; no group in the "
            "trace args, and no gloo worker pool or single NCCL stream to tell it by) were not "
            "matched: a match across groups is worse than none; their exposed time "
            + (_UNMATCHED_WORDS if len(units) > 1 else "counts as transfer")
        )
    if len(units) < 2:
        return key, notes, _Extra(member_col, src, dst, why)
    for g, us in units_of.items():
        shown = shown_of.get(g, set())
        missing = sorted(set(us) - shown)
        named = not str(g).startswith("\x00") and g != ""
        if missing and not named:
            notes.append(
                f"collectives of {_describe_group(str(g))} appear on "
                f"{_labels(sorted(shown), unit_label)} but not on {_labels(missing, unit_label)}"
            )
    groups = inst["group_key"].to_numpy(dtype=object)
    unit = inst["unit"].to_numpy(np.int64)
    ids = _ngroup(groups, match_kind, inst["seq"].to_numpy(), inst["ordinal"].to_numpy())
    count = np.bincount(ids + 1)  # value_counts, -1 (a null key) among them
    n_present = count[ids + 1]
    exp = _by_key(group_col, lambda g: len(units_of.get(g, ()))).astype(np.int64)
    complete = (n_present == exp) & (exp >= 2) & ~unknown
    p2p = inst["p2p"].to_numpy(dtype=bool)
    undirected = p2p & (src < 0)
    # a group of more than two ranks, all given or not: a send/recv of a partial run pairs with
    # its peer's call, never with another rank's send
    n_members = _by_key(group_col, lambda g: len(members.get(g, ()))).astype(np.int64)
    wide = undirected & ((exp > 2) | (n_members > 2))
    paired, recorded, ends = _pair_wide(
        inst, wide, unit_rank, members, traces, (key, src, dst), int(ids.max()) + 1, notes
    )
    complete &= ~wide
    for i, a, b in zip(
        np.flatnonzero(paired).tolist(), src[paired].tolist(), dst[paired].tolist(), strict=True
    ):
        member_col[i] = (int(a), int(b))
    narrow = ~wide
    notes.extend(
        _count_notes_of(
            (groups[narrow], match_kind[narrow], unit[narrow]),
            inst["label"].to_numpy(dtype=object)[narrow],
            ids[narrow],
            complete[narrow],
            units_of,
            unit_label,
        )
    )
    for g, us in units_of.items():
        if len(us) == 1 and str(g) and not str(g).startswith("\x00"):
            notes.append(
                f"collectives of {_describe_group(str(g))} appear only on {unit_label[us[0]]}: "
                "nothing to match them with (is a rank trace missing?)"
            )
    key[complete] = ids[complete]
    why = _unmatched_why(
        (unit, groups, match_kind),
        ids,
        complete | paired,  # a send/recv paired by end time has its peer: no reason
        unknown,
        wide & ~paired,
        np.maximum(exp, n_members),
        (members, units_of),
        unit_rank,
        unit_label,
    )
    if (recorded & ~paired).any():
        why = _recorded_why(why, recorded & ~paired, inst, unit_rank, ends)
    return key, notes, _Extra(member_col, src, dst, why)


def _unmatched_why(
    rows: tuple[I64, npt.NDArray[np.object_], npt.NDArray[np.object_]],
    ids: npt.NDArray[np.int64],
    complete: npt.NDArray[np.bool_],
    unknown: npt.NDArray[np.bool_],
    unnamed_p2p: npt.NDArray[np.bool_],
    exp: I64,
    groups_of: tuple[dict[object, tuple[int, ...]], dict[object, tuple[int, ...]]],
    unit_rank: I64,
    unit_label: dict[int, str],
) -> npt.NDArray[np.object_]:
    """Per local instance row (``rows``: its unit, group key and match kind): why it has no
    peers to split wait from transfer with (diagnosis.md §12), in words; "" where it was
    matched. One pass over the incomplete instances only."""
    member_ranks, units_of = groups_of
    units, groups, kinds = rows
    given = set(unit_rank.tolist())
    why = np.full(len(units), "", dtype=object)
    why[unknown] = "its process group cannot be told"
    for i in np.flatnonzero(unnamed_p2p).tolist():
        why[i] = f"a send/recv in a group of {int(exp[i])} ranks that names no peer"
    rest = ~complete & ~unknown & ~unnamed_p2p
    if not rest.any():
        return why
    sub = np.flatnonzero(rest)
    present: dict[int, set[int]] = {}
    for i in sub.tolist():
        present.setdefault(int(ids[i]), set()).add(int(units[i]))
    for i in sub.tolist():
        members = units_of.get(groups[i], ())
        missing = sorted(set(members) - present[int(ids[i])])
        kind = str(kinds[i])
        if len(members) < 2:
            absent = [r for r in member_ranks.get(groups[i], ()) if r not in given]
            why[i] = (
                f"its group's other rank{'s' if len(absent) > 1 else ''} "
                f"{', '.join(map(str, absent))} {'are' if len(absent) > 1 else 'is'} not in the "
                "trace"
                if absent
                else "no peer of its group in the trace (is a rank trace missing?)"
            )
        elif missing and kind.startswith("p2p:"):
            own = unit_rank[int(units[i])]
            src = int(kind[4:].split(">")[0])
            other = "recv" if src == own else "send"
            why[i] = f"no matching {other} on {_labels(missing, unit_label)}"
        elif missing:
            why[i] = f"absent on {_labels(missing, unit_label)}"
        else:
            why[i] = "instance counts differ across ranks"
    return why


#: How far apart the ends of a send and its recv may be when paired by end time (unix clocks).
P2P_END_TOLERANCE_NS = 1_000_000


def _pair_wide(
    inst: pd.DataFrame,
    wide: npt.NDArray[np.bool_],
    unit_rank: I64,
    members: dict[object, tuple[int, ...]],
    traces: Sequence[TraceInfo],
    out: tuple[I64, I64, I64],
    next_key: int,
    notes: list[str],
) -> tuple[npt.NDArray[np.bool_], npt.NDArray[np.bool_], tuple[I64, I64]]:
    """Sends and recvs of groups of more than two ranks (``wide``), paired (in place: ``out`` =
    key, src, dst; notes appended): first exactly, by the peer and tag each side records
    (:func:`_pair_by_peer`), then the rest by end time (:func:`_pair_by_end`, keeping to any
    recorded peer). Returns the rows paired, the rows that record their peer, and per row the
    sending and receiving rank they record (-1: none)."""
    key, src, dst = out
    paired = np.zeros(len(inst), dtype=bool)
    named, named_src, named_dst = _named_peers(inst, wide, unit_rank, members, traces)
    if named.any():
        exact, next_key = _pair_by_peer(inst, named, named_src, named_dst, key, src, dst, next_key)
        paired |= exact
        if exact.any():
            notes.append(
                f"{int(exact.sum()) // 2} send/recv pair(s) in groups of more than two ranks were "
                "matched by the peer and tag each side records (c10d::send / c10d::recv_ "
                "Concrete Inputs): the n-th send of a rank to another with a tag meets the n-th "
                "recv of the other from it with that tag"
            )
    rest = wide & ~paired
    if rest.any() and all(t.clock == "unix" for t in traces):
        by_end = _pair_by_end(
            inst, rest, unit_rank, key, src, dst, next_key, (named_src, named_dst)
        )
        paired |= by_end
        if by_end.any():
            notes.append(
                f"{int(by_end.sum()) // 2} send/recv pair(s) in groups of more than two ranks were "
                "paired by end time (a blocking transfer ends together on both sides; the trace "
                f"names no peer), within {P2P_END_TOLERANCE_NS / 1e6:g} ms"
            )
    left = named & ~paired
    if left.any():
        notes.append(
            f"{int(left.sum())} send/recv(s) in groups of more than two ranks name their peer but "
            "no call on it names them back as often (a rank trace missing, or a transfer cut by "
            f"the capture window): not matched; their exposed time {_UNMATCHED_WORDS}"
        )
    if (wide & ~paired & ~named).any():
        n = int((wide & ~paired & ~named).sum())
        notes.append(
            f"{n} point-to-point transfer(s) (SendRecv / send / recv) in groups of more than two "
            "ranks were not matched: a transfer pairs two ranks and the trace does not say which; "
            f"their exposed time {_UNMATCHED_WORDS}"
        )
    return paired, named, (named_src, named_dst)


def _recorded_why(
    why: npt.NDArray[np.object_],
    rows: npt.NDArray[np.bool_],
    inst: pd.DataFrame,
    unit_rank: I64,
    ends: tuple[I64, I64],
) -> npt.NDArray[np.object_]:
    """``why`` with the reason of each unpaired send/recv that records its peer (``rows``)."""
    why = why.copy()
    named_src, named_dst = ends
    for i in np.flatnonzero(rows).tolist():
        own = int(unit_rank[int(inst["unit"].iat[i])])
        send = int(named_src[i]) == own
        peer = int(named_dst[i] if send else named_src[i])
        why[i] = (
            f"a {'send to' if send else 'recv from'} rank {peer} (the peer it records) that "
            f"no {'recv' if send else 'send'} on rank {peer} names back"
        )
    return why


#: Kind keys of the directed point-to-point calls.
_SEND_KINDS = ["send", "isend"]
_RECV_KINDS = ["recv", "irecv", "recvanysource"]


def _named_peers(
    inst: pd.DataFrame,
    wide: npt.NDArray[np.bool_],
    unit_rank: I64,
    members: dict[object, tuple[int, ...]],
    traces: Sequence[TraceInfo],
) -> tuple[npt.NDArray[np.bool_], I64, I64]:
    """The ``wide`` send/recv rows whose trace records the peer and tag (``peer_rank``, a rank
    of the op's group, and ``p2p_tag``: diagnosis.md §6), and per row the global sending and
    receiving rank (-1 where the peer is not known). A group rank is a global rank through the
    group's members as ``pg_config`` lists them (a group's ranks in ascending order are its
    ranks 0, 1, ...: ``new_group`` sorts them); without ``pg_config``, only a group whose ranks
    are the whole world (identity) maps; otherwise the peer stays unknown."""
    n = len(inst)
    src = np.full(n, -1, dtype=np.int64)
    dst = np.full(n, -1, dtype=np.int64)
    if "peer_rank" not in inst or not wide.any():
        return np.zeros(n, dtype=bool), src, dst
    known = group_members(traces)
    world = max((t.world_size or 0 for t in traces), default=0)
    ranks_of: dict[object, tuple[int, ...]] = {}
    for g, m in members.items():
        if str(g) in known:
            ranks_of[g] = known[str(g)]
        elif world and tuple(m) == tuple(range(world)):
            ranks_of[g] = tuple(m)
    kind = inst["kind_key"].to_numpy(dtype=object)
    is_send = np.isin(kind, _SEND_KINDS)
    peer_g = inst["peer_rank"].to_numpy(np.int64)
    tag = inst["p2p_tag"].to_numpy(np.int64)
    cand = wide & (is_send | np.isin(kind, _RECV_KINDS)) & (peer_g >= 0) & (tag >= 0)
    peer = np.full(n, -1, dtype=np.int64)
    groups = inst["group_key"].to_numpy(dtype=object)
    for i in np.flatnonzero(cand).tolist():
        r = ranks_of.get(groups[i], ())
        if peer_g[i] < len(r):
            peer[i] = r[peer_g[i]]
    own = unit_rank[inst["unit"].to_numpy(np.int64)]
    named = cand & (peer >= 0) & (peer != own)
    src[named] = np.where(is_send, own, peer)[named]
    dst[named] = np.where(is_send, peer, own)[named]
    return named, src, dst


def _pair_by_peer(
    inst: pd.DataFrame,
    named: npt.NDArray[np.bool_],
    named_src: I64,
    named_dst: I64,
    key: I64,
    src: I64,
    dst: I64,
    next_key: int,
) -> tuple[npt.NDArray[np.bool_], int]:
    """Sends and recvs that name their peer, paired exactly (in place: ``key``, ``src``,
    ``dst``): the n-th send (by call start) of rank ``a`` to rank ``b`` with tag ``t`` in a
    group meets the n-th recv of ``b`` from ``a`` with tag ``t`` in that group (messages between
    two ranks with one tag arrive in the order sent, blocking or not). A stream (group, a, b, t)
    whose send and recv counts differ is left to the fallback: which of its calls the capture
    window cut cannot be told. Returns the rows paired and the next free key."""
    out = np.zeros(len(inst), dtype=bool)
    rows = np.flatnonzero(named)
    kind = inst["kind_key"].to_numpy(dtype=object)
    d = pd.DataFrame(
        {
            "row": rows,
            "unit": inst["unit"].to_numpy(np.int64)[rows],
            "group": inst["group_key"].to_numpy(dtype=object)[rows],
            "send": np.isin(kind[rows], _SEND_KINDS),
            "src": named_src[rows],
            "dst": named_dst[rows],
            "tag": inst["p2p_tag"].to_numpy(np.int64)[rows],
            "start": inst["start_ns"].to_numpy(np.int64)[rows],
        }
    ).sort_values(["start", "row"], kind="stable")
    stream = ["group", "src", "dst", "tag"]
    d["n"] = d.groupby(["unit", "send", *stream], sort=False).cumcount()
    # per stream and side: (calls, units); a stream pairs when both sides have the same count,
    # each on one unit (two traces of one rank would pair twice)
    sides: dict[tuple[Any, ...], dict[bool, tuple[int, int]]] = {}
    for k, (size, n_units) in (
        d.groupby([*stream, "send"], sort=False)["unit"].agg(["size", "nunique"]).iterrows()
    ):
        sides.setdefault(tuple(k[:-1]), {})[bool(k[-1])] = (int(size), int(n_units))
    good = {
        k
        for k, v in sides.items()
        if True in v and False in v and v[True][0] == v[False][0] and v[True][1] == v[False][1] == 1
    }
    if not good:
        return out, next_key
    keep = [tuple(x) in good for x in d[stream].itertuples(index=False)]
    d = d[np.array(keep, dtype=bool)]
    pair_id = d.groupby([*stream, "n"], sort=False).ngroup().to_numpy(np.int64)
    r = d["row"].to_numpy(np.int64)
    key[r] = next_key + pair_id
    src[r] = d["src"].to_numpy(np.int64)
    dst[r] = d["dst"].to_numpy(np.int64)
    out[r] = True
    return out, next_key + (int(pair_id.max()) + 1 if pair_id.size else 0)


def _pair_by_end(
    inst: pd.DataFrame,
    wide: npt.NDArray[np.bool_],
    unit_rank: npt.NDArray[np.int64],
    key: npt.NDArray[np.int64],
    src: npt.NDArray[np.int64],
    dst: npt.NDArray[np.int64],
    next_key: int,
    named: tuple[I64, I64] | None = None,
) -> npt.NDArray[np.bool_]:
    """Sends and recvs of groups of more than two ranks whose peer the trace does not name,
    paired by end time (in place: ``key``, ``src``, ``dst``): a send on one rank and a recv on
    another, in the same group, whose spans overlap and whose ends are within
    :data:`P2P_END_TOLERANCE_NS`, closest ends first, each used once. ``named``: per row the
    sending and receiving rank a side records (-1: none), which a pair must agree with (a send
    to rank 2 pairs with a recv on rank 2 only). Returns the rows paired."""
    kind = inst["kind_key"].to_numpy(dtype=object)
    send = np.flatnonzero(wide & np.isin(kind, ["send", "isend"]))
    recv = np.flatnonzero(wide & np.isin(kind, ["recv", "irecv", "recvanysource"]))
    out = np.zeros(len(inst), dtype=bool)
    if send.size == 0 or recv.size == 0:
        return out
    end = inst["end_ns"].to_numpy(np.int64)
    start = inst["start_ns"].to_numpy(np.int64)
    unit = inst["unit"].to_numpy(np.int64)
    group = inst["group_key"].to_numpy(dtype=object)
    recv = recv[np.argsort(end[recv], kind="stable")]
    lo = np.searchsorted(end[recv], end[send] - P2P_END_TOLERANCE_NS, side="left")
    hi = np.searchsorted(end[recv], end[send] + P2P_END_TOLERANCE_NS, side="right")
    i, j = iv.range_pairs(lo.astype(np.int64), hi.astype(np.int64))
    a, b = send[i], recv[j]
    ok = (unit[a] != unit[b]) & (group[a] == group[b])
    ok &= (start[a] < end[b]) & (start[b] < end[a])
    if named is not None:
        n_src, n_dst = named
        ra, rb = unit_rank[unit[a]], unit_rank[unit[b]]
        ok &= (n_dst[a] < 0) | (n_dst[a] == rb)  # the send names its recv's rank, or none
        ok &= (n_src[b] < 0) | (n_src[b] == ra)
    a, b = a[ok], b[ok]
    order = np.lexsort((b, a, np.abs(end[a] - end[b])))
    for x, y in zip(a[order].tolist(), b[order].tolist(), strict=True):
        if out[x] or out[y]:
            continue
        out[x] = out[y] = True
        key[x] = key[y] = next_key
        next_key += 1
        src[x] = src[y] = unit_rank[unit[x]]
        dst[x] = dst[y] = unit_rank[unit[y]]
    return out


def _count_notes_of(
    rows: tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]],
    label: npt.NDArray[np.object_],
    ids: npt.NDArray[np.int64],
    complete: npt.NDArray[np.bool_],
    units_of: dict[object, tuple[int, ...]],
    unit_label: dict[int, str],
) -> list[str]:
    """A note per (group, kind) whose instance counts differ across its member units, from the
    rows' group key, match kind and unit (``rows``) and their labels."""
    notes: list[str] = []
    group, kind, unit = rows
    # rows per (group, kind, unit) counted on codes, (group, kind) in sorted order: a groupby
    # and its per-group Series, or a dict per row, cost milliseconds
    gc, gv = _sorted_codes(group)
    kc, kv = _sorted_codes(kind)
    uc, uv = _sorted_codes(unit)
    ok = (gc >= 0) & (kc >= 0) & (uc >= 0)  # groupby drops nulls
    ok &= np.asarray(group != UNKNOWN_GROUP, dtype=bool)
    pair = gc[ok] * max(len(kv), 1) + kc[ok]
    pairs, per_pair = np.unique(pair, return_inverse=True)
    ps, us, n = _distinct_pairs(per_pair.reshape(-1).astype(np.int64), uc[ok])
    # per (group, kind): its first row in ps, how many units and their least and most rows
    first = np.flatnonzero(np.diff(np.append(-1, ps)) != 0)
    n_units = np.diff(np.append(first, ps.size))
    lo = np.minimum.reduceat(n, first) if first.size else n
    hi = np.maximum.reduceat(n, first) if first.size else n
    for p, (at, n_u, a, b) in enumerate(
        zip(first.tolist(), n_units.tolist(), lo.tolist(), hi.tolist(), strict=True)
    ):
        g, k = gv[int(pairs[p]) // max(len(kv), 1)], kv[int(pairs[p]) % max(len(kv), 1)]
        expected = len(units_of.get(g, ()))
        if str(k).startswith("p2p:"):
            expected = 2
        if a != b or n_u != expected:
            sel = (group == g) & (kind == k)
            lab = label[np.flatnonzero(sel)[0]]
            desc = ", ".join(
                f"{unit_label[int(uv[u])]}: {c}"
                for u, c in zip(us[at : at + n_u].tolist(), n[at : at + n_u].tolist(), strict=True)
            )
            n_ok = len(np.unique(ids[sel & complete]))
            notes.append(
                f"{lab} in {_describe_group(str(g))}: instance counts differ across ranks "
                f"({desc}); matched the {n_ok} present on every rank, the rest left unmatched"
            )
    return notes


def _labels(units: Sequence[int] | npt.NDArray[np.int64], unit_label: dict[int, str]) -> str:
    return ", ".join(unit_label[int(u)] for u in sorted(int(x) for x in units))


def _offsets(m: pd.DataFrame, use: npt.NDArray[np.bool_]) -> dict[int, int]:
    """Clock offset of each unit relative to the lowest unit that shares instances with it,
    as the median end-time difference over the matched instances in ``use`` (BFS over units)."""
    return _offsets_of(
        m["key"].to_numpy(), m["unit"].to_numpy(), m["end_ns"].to_numpy(np.int64), use
    )


def _offsets_of(
    key: npt.NDArray[Any], unit: npt.NDArray[Any], end: I64, use: npt.NDArray[np.bool_]
) -> dict[int, int]:
    """:func:`_offsets` on the rows' key, unit and end columns."""
    off: dict[int, int] = {}
    if not use.any():
        return off
    ends, present, cols = _end_table(key[use], unit[use], end[use])
    for root in range(len(cols)):
        if cols[root] in off:
            continue
        off[cols[root]] = 0
        frontier = [root]
        while frontier:
            a = frontier.pop()
            for b in range(len(cols)):
                if cols[b] in off:
                    continue
                both = present[:, a] & present[:, b]
                if not both.any():
                    continue
                d = (ends[both, b] - ends[both, a]).astype(np.float64)
                off[cols[b]] = off[cols[a]] + int(np.median(d))
                frontier.append(b)
    return off


def _end_table(
    key: npt.NDArray[Any], unit: npt.NDArray[Any], end: I64
) -> tuple[I64, npt.NDArray[np.bool_], list[int]]:
    """The latest end per (key, unit) as a keys x units table (rows and columns sorted), which
    cells are present, and the units: what ``pivot_table(aggfunc="max")`` gives, including its
    float64 round trip of every cell when any cell is missing."""
    keys, ki = np.unique(key, return_inverse=True)
    cols, ui = np.unique(unit, return_inverse=True)
    order = np.lexsort((end, ui, ki))
    r, c = ki[order], ui[order]
    last = np.ones(r.size, dtype=bool)  # the last row of each cell holds its max
    last[:-1] = (r[1:] != r[:-1]) | (c[1:] != c[:-1])
    ends = np.zeros((keys.size, cols.size), dtype=np.int64)
    present = np.zeros((keys.size, cols.size), dtype=bool)
    ends[r[last], c[last]] = end[order][last]
    present[r, c] = True
    if not present.all():  # the pivot held NaN, so float64 cells
        ends = ends.astype(np.float64).astype(np.int64)
    return ends, present, [int(c) for c in cols]


def match_collectives(
    inst: pd.DataFrame,
    pieces: tuple[I64, I64, I64, I64],
    exposed: dict[str, GroupedIntervals],
    n_windows: int,
    traces: Sequence[TraceInfo],
    window_labels: Sequence[object],
    steps: pd.DataFrame,
) -> tuple[Collectives, CauseSets, pd.DataFrame]:
    """Match the units' instances and split every exposed ns by cause, across ranks.

    ``inst``: all units' local instances (:data:`LOCAL_COLUMNS` plus ``unit`` and the global
    ``window``); ``pieces``: (instance row, window, start, end) of every instance piece (union of
    its activities per window); ``exposed``: the local cause sets ``tail``, ``dependency``,
    ``host`` per global window. Returns the collectives, the final cause sets (with ``wait``),
    and the exposed ns per (window, collective family, cause) used by the findings.
    """
    units = list(range(len(traces)))
    unit_label = {u: _unit_name(traces, u) for u in units}
    notes: list[str] = []
    key, match_notes, extra = _match(inst, units, unit_label, traces)
    notes.extend(match_notes)
    inst = inst.assign(
        key=key,
        dur_ns=(inst["end_ns"] - inst["start_ns"]).astype(np.int64),
        members=extra.members,
        src_rank=extra.src_rank,
        dst_rank=extra.dst_rank,
        why=extra.why,
    )
    unix = bool(traces) and all(t.clock == "unix" for t in traces)
    m, n_inconsistent, clock, offsets = _align_clocks(inst, unix, notes)

    # wait / transfer per matched (instance, unit): the least duration of its key, by key
    # codes (a groupby transform costs a millisecond)
    m_dur = m["dur_ns"].to_numpy(np.int64)
    uk, kinv = np.unique(m["key"].to_numpy(), return_inverse=True)
    kinv = kinv.reshape(-1)
    least = np.full(uk.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(least, kinv, m_dur)
    m["transfer_ns"] = least[kinv]
    m[WAIT_NS.name] = m_dur - least[kinv]
    _p2p_waits(m)
    wait = np.zeros(len(inst), dtype=np.int64)  # 0 where not matched
    wait[inst.index.get_indexer(m.index)] = m[WAIT_NS.name].to_numpy(np.int64)
    inst[WAIT_NS.name] = wait
    _known_transfer(inst, m, multi=len(traces) > 1, given={t.rank for t in traces})
    unit_rank = np.array([t.rank for t in traces], dtype=np.int64)
    _arrivals(inst, m, unit_rank)
    sets = _cause_sets(inst, pieces, exposed, n_windows)
    _instance_causes(inst, pieces, sets, exposed, n_windows)

    family_causes = _family_causes(inst, pieces, sets, n_windows)
    instances, per_rank, row_instance = _tables(inst, m, traces, window_labels, clock)
    credit = _credit(inst, pieces, sets, n_windows, row_instance, unit_rank, window_labels)
    coll = Collectives(
        instances=instances,
        per_rank=per_rank,
        stragglers=_straggler_table(per_rank, instances, unit_rank, clock is not None, credit),
        step_skew=step_skew(steps),
        notes=tuple(notes),
        clock=clock,
        n_matched=int(m["key"].nunique()) if len(m) else 0,
        n_inconsistent=n_inconsistent,
        ranks_given=len({t.rank for t in traces}),
        world_size=max((t.world_size or 0 for t in traces), default=0) or None,
        credit=credit,
        groups=_groups_frame(inst, traces),
        offsets_ns=tuple(int(offsets.get(u, 0)) if clock else 0 for u in units),
    )
    return coll, sets, family_causes


def _arrivals(inst: pd.DataFrame, m: pd.DataFrame, unit_rank: I64) -> None:
    """Per row of ``inst`` (in place): ``aligned_start`` (own start where not matched),
    ``last_arrival`` (its instance's latest aligned start, -1 unmatched) and ``waited_for``
    (the rank its wait part is credited to, -1 when it has no wait): docs/job-model.md."""
    aligned = inst["start_ns"].to_numpy(np.int64).copy()
    last_arrival = np.full(len(inst), -1, dtype=np.int64)
    waited_for = np.full(len(inst), -1, dtype=np.int64)
    if not m.empty:
        # positions of m's rows in inst: numpy writes, where each loc read or write costs
        # a few hundred microseconds
        at = inst.index.get_indexer(m.index)
        m_aligned = m["aligned_start"].to_numpy(np.int64)
        aligned[at] = m_aligned
        peer = inst["src_rank"].to_numpy(np.int64)[at]
        rank = unit_rank[inst["unit"].to_numpy(np.int64)[at]]
        dst = inst["dst_rank"].to_numpy(np.int64)[at]
        peer = np.where(peer == rank, dst, peer)
        target, latest = waited_for_ranks(
            m["key"].to_numpy(np.int64),
            rank,
            m_aligned,
            inst[WAIT_NS.name].to_numpy(np.int64)[at],
            peer,
        )
        last_arrival[at] = latest
        waited_for[at] = target
    inst["aligned_start"] = aligned
    inst["last_arrival"] = last_arrival
    inst["waited_for"] = waited_for


def _credit(
    inst: pd.DataFrame,
    pieces: tuple[I64, I64, I64, I64],
    sets: CauseSets,
    n_windows: int,
    row_instance: pd.Series,
    unit_rank: I64,
    window_labels: Sequence[object],
) -> pd.DataFrame:
    """The credit table (docs/job-model.md): every exposed-wait ns once, to the rank waited for."""
    p_inst, p_win, p_s, p_e = pieces
    start = inst["start_ns"].to_numpy(np.int64)
    w_end = start + inst[WAIT_NS.name].to_numpy(np.int64)
    w, row, ns = credit_segments(
        p_inst,
        p_win,
        np.maximum(p_s, start[p_inst]),
        np.minimum(p_e, w_end[p_inst]),
        inst["last_arrival"].to_numpy(np.int64)[p_inst],
        sets.wait,
        n_windows,
    )
    unit = inst["unit"].to_numpy(np.int64)[row]
    labels = np.array(list(window_labels) + ["-"], dtype=object)
    return pd.DataFrame(
        {
            "window": w,
            "unit": unit,
            "rank": unit_rank[unit] if unit.size else np.zeros(0, np.int64),
            "step": labels[w] if w.size else np.zeros(0, object),
            "instance": row_instance.reindex(row).to_numpy(np.int64),
            WAITED_FOR_RANK.name: inst["waited_for"].to_numpy(np.int64)[row],
            EXPOSED_WAIT_NS.name: ns,
        },
        columns=list(CREDIT_COLUMNS),
    )


def _groups_frame(inst: pd.DataFrame, traces: Sequence[TraceInfo]) -> pd.DataFrame:
    """One row per group key seen: its members (docs/job-model.md)."""
    cols = ["group", "members", "n_instances"]
    if inst.empty:
        return pd.DataFrame(columns=cols)
    # per group key (sorted; null keys left out, as a groupby): its first members and its
    # rows, counted on key codes
    codes, keys = _sorted_codes(inst["group_key"].to_numpy(dtype=object))
    ok = codes >= 0
    count = np.bincount(codes[ok], minlength=len(keys))
    ms = inst["members"].to_numpy(dtype=object)
    has = np.flatnonzero(ok & ~np.asarray(pd.isna(ms), dtype=bool))  # first() skips nulls
    first = np.full(len(keys), len(ms), dtype=np.int64)
    np.minimum.at(first, codes[has], has)
    return pd.DataFrame(
        {
            "group": [str(k) for k in keys],
            "members": [ms[f] if f < len(ms) else None for f in first.tolist()],
            "n_instances": count.astype(np.int64),
        },
        columns=cols,
    )


def _p2p_waits(m: pd.DataFrame) -> None:
    """Directed point-to-point pairs (in place): each side's wait part is the time before its
    peer started, on the aligned clock (the receiver's is the pipeline bubble, waited for the
    sending stage); its transfer the rest of its span (diagnosis.md §6)."""
    directed = (m["src_rank"] >= 0).to_numpy() if "src_rank" in m else np.zeros(len(m), bool)
    if not directed.any():
        return
    d = m[directed]
    a_start = d["aligned_start"].to_numpy(np.int64)
    a_end = a_start + d["dur_ns"].to_numpy(np.int64)
    # per key the latest aligned start (a groupby transform max), on key codes
    _, kinv = np.unique(d["key"].to_numpy(), return_inverse=True)
    kinv = kinv.reshape(-1)
    most = np.full(int(kinv.max()) + 1, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(most, kinv, a_start)
    latest = most[kinv]
    wait = np.clip(np.minimum(a_end, latest) - a_start, 0, None).astype(np.int64)
    waits = m[WAIT_NS.name].to_numpy(np.int64).copy()
    transfer = m["transfer_ns"].to_numpy(np.int64).copy()
    waits[directed] = wait
    transfer[directed] = d["dur_ns"].to_numpy(np.int64) - wait
    m[WAIT_NS.name] = waits
    m["transfer_ns"] = transfer


def _consistent(
    keys: npt.NDArray[Any], units: list[int], start: I64, end: I64, offsets: dict[int, int]
) -> npt.NDArray[np.bool_]:
    """Per matched row: does its key's latest start (each unit's clock less its offset, 0 when
    it has none) come before the key's first end, within :data:`TOLERANCE_NS`?"""
    # the offsets of the distinct units, spread to the rows
    distinct, at = np.unique(np.asarray(units, dtype=np.int64), return_inverse=True)
    got = [offsets.get(u) for u in distinct.tolist()]
    if any(g is None for g in got):  # as pandas' map: floats, NaN where missing, then 0
        per = np.array([np.nan if g is None else g for g in got], dtype=np.float64)
        o = np.nan_to_num(per, nan=0.0).astype(np.int64)[at.reshape(-1)]
    else:
        o = np.array(got, dtype=np.int64)[at.reshape(-1)]
    # per key the latest start and the first end: a groupby transform, on key codes
    uk, kinv = np.unique(keys, return_inverse=True)
    kinv = kinv.reshape(-1)
    latest = np.full(uk.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(latest, kinv, start - o)
    first_end = np.full(uk.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(first_end, kinv, end - o)
    return np.asarray(latest[kinv] < first_end[kinv] + TOLERANCE_NS)


def _align_clocks(
    inst: pd.DataFrame, unix: bool, notes: list[str]
) -> tuple[pd.DataFrame, int, str | None, dict[int, int]]:
    """The consistent matched rows (with ``aligned_start``), the number of inconsistent matched
    instances (unmatched in ``inst``, in place), how clocks were aligned (see the module
    docstring) and the offset of each unit that has matched instances."""
    # the matched rows as arrays; the frame of the consistent ones is taken once at the end
    # (a boolean selection and a copy of every column cost a millisecond each)
    matched = inst["key"].to_numpy() >= 0
    if not matched.any():
        m = inst[matched]
        m["aligned_start"] = np.zeros(0, np.int64)
        return m, 0, None, {}
    keys_m = inst["key"].to_numpy()[matched]
    unit_m = inst["unit"].to_numpy(np.int64)[matched]
    units_m = unit_m.tolist()
    start_m = inst["start_ns"].to_numpy(np.int64)[matched]
    end_m = inst["end_ns"].to_numpy(np.int64)[matched]

    def consistent_with(offsets: dict[int, int]) -> npt.NDArray[np.bool_]:
        return _consistent(keys_m, units_m, start_m, end_m, offsets)

    # a send and its recv need not end together: offsets come from the collectives when any
    n_m = keys_m.size
    coll_rows = (
        inst["src_rank"].to_numpy()[matched] < 0 if "src_rank" in inst else np.ones(n_m, bool)
    )
    base = coll_rows if coll_rows.any() else np.ones(n_m, dtype=bool)
    estimated = _offsets_of(keys_m, unit_m, end_m, base)
    ok_est = consistent_with(estimated)
    if (ok_est & base).any() and not ok_est.all():  # re-estimate from the consistent ones only
        estimated = _offsets_of(keys_m, unit_m, end_m, ok_est & base)
        ok_est = consistent_with(estimated)
    candidates = [(ok_est, estimated)]
    if unix:
        # ranks that all claim unix time: offsets far beyond clock sync mean the matching, not
        # the clocks, is off; and on noisy end times (gloo on CPU) zero may fit better
        if any(abs(v) > MAX_UNIX_SKEW_NS for v in estimated.values()):
            notes.append(
                "clock offsets estimated from collective end times exceed "
                f"{MAX_UNIX_SKEW_NS / 1e6:.0f} ms although every rank claims unix time: not "
                "applied (the matched instances, not the clocks, look off)"
            )
            candidates = []
        zeros = {u: 0 for u in estimated}
        candidates.insert(0, (consistent_with(zeros), zeros))
    ok, off = max(candidates, key=lambda c: int(c[0].sum()))
    bad_keys = set(keys_m[~ok].tolist())
    if bad_keys:
        notes.append(
            f"{len(bad_keys)} of {np.unique(keys_m).size} matched collective instances are not "
            "consistent in time (after aligning the rank clocks, their spans on the ranks never "
            "overlap): they are not used for waiting or stragglers"
        )
        bad = inst["key"].isin(bad_keys).to_numpy()
        inst.loc[bad, "key"] = -1
        inst.loc[bad, "why"] = "its spans on the ranks are not consistent in time"
    # a key is consistent or not as a whole: the rows kept are still matched in ``inst``
    keep = np.zeros(len(inst), dtype=bool)
    keep[np.flatnonzero(matched)[ok]] = True
    m = inst[keep]
    m["aligned_start"] = start_m[ok] - _unit_offsets(unit_m[ok], off)
    clock = None
    if len(m):
        clock = "unix" if unix and all(v == 0 for v in off.values()) else "estimated"
    return m, len(bad_keys), clock, off


def _unit_offsets(unit: I64, off: dict[int, int]) -> I64:
    """Per row, its unit's offset: what ``Series.map(off).fillna(0)`` gives as int64, including
    its float64 round trip of every offset when a unit has none (0 for it)."""
    if unit.size == 0:
        return np.zeros(0, dtype=np.int64)
    units, inv = np.unique(unit, return_inverse=True)
    got = [off.get(int(u)) for u in units.tolist()]
    if any(g is None for g in got):
        o = np.array([0.0 if g is None else g for g in got], dtype=np.float64).astype(np.int64)
    else:
        o = np.array(got, dtype=np.int64)
    return np.asarray(o[inv.reshape(-1)], dtype=np.int64)


#: A matched instance whose transfer estimate exceeds this many times the median of the run's
#: instances of its family and message size has a transfer the bytes do not explain
#: (diagnosis.md §12): only the median counts as transfer, the rest is unknown.
TRANSFER_OUTLIER_RATIO = 3
#: Fewest instances of one family and size for their median to say what the size explains (a
#: median of 3 moves with one noisy instance: gloo's small all-reduces on a loaded host, grouped
#: by their place in the step across 3 steps, read 3x that median in 2-21 of 24-102 instances of
#: the reference workloads).
TRANSFER_OUTLIER_MIN = 5


def _known_transfer(
    inst: pd.DataFrame, m: pd.DataFrame, *, multi: bool, given: set[int] | None = None
) -> None:
    """Per row of ``inst`` (in place): ``xfer_start``, where its known transfer part starts
    (diagnosis.md §12), and ``transfer_outlier``. A matched row's transfer part is
    ``[start + wait, end)``; when its instance's transfer estimate is more than
    :data:`TRANSFER_OUTLIER_RATIO` x the median of the run's matched instances of the same family
    and bytes (at least :data:`TRANSFER_OUTLIER_MIN` of them), only the last ``median`` ns of it
    are transfer. An unmatched row of a run of several units has none (its split is unknown:
    ``end``); on a single unit everything past the wait is transfer (``start``), as before.
    A matched row whose group has ranks that are not among those ``given`` (its members from
    ``pg_config``: a partial run) keeps its wait among the ranks given, but the rest may be
    waiting for a missing rank: unknown (``end``), with the missing ranks in ``why``."""
    start = inst["start_ns"].to_numpy(np.int64)
    end = inst["end_ns"].to_numpy(np.int64)
    inst["xfer_start"] = end if multi else start
    inst["transfer_outlier"] = False
    if m.empty:
        return
    idx = m.index
    at = inst.index.get_indexer(idx)
    wait_end = start[at] + m[WAIT_NS.name].to_numpy(np.int64)
    xs = wait_end.copy()
    nbytes = m["bytes"]
    hit, expected, words = _transfer_outliers(
        m["key"].to_numpy(np.int64),
        m["transfer_ns"].to_numpy(np.int64),
        m["family"].astype(str).to_numpy(),
        nbytes.to_numpy(np.int64)
        if nbytes.dtype == np.int64
        else pd.to_numeric(nbytes, errors="coerce").fillna(-1).to_numpy(np.int64),
    )
    outlier = np.zeros(len(inst), dtype=bool)
    if hit.any():
        xs[hit] = np.maximum(wait_end[hit], end[at][hit] - expected[hit])
        outlier[at[hit]] = True
        inst["transfer_outlier"] = outlier
        keys = m["key"].to_numpy(np.int64)
        inst.loc[idx[hit], "why"] = [words[int(k)] for k in keys[hit].tolist()]
    if multi and given:
        mem = inst["members"].to_numpy(dtype=object)[at]
        # the ranks absent per distinct members tuple (code -1: none), spread to the rows
        codes, distinct = pd.factorize(mem, sort=False)
        per = [sorted(set(ms or ()) - given) for ms in distinct] + [[]]
        absent = [per[c] for c in codes.tolist()]
        gap = np.array([bool(a) for a in per], dtype=bool)[codes]
        if gap.any():
            xs[gap] = end[at][gap]
            inst.loc[idx[gap], "why"] = [
                f"its group's rank{'s' if len(a) > 1 else ''} {', '.join(map(str, a))} "
                f"{'are' if len(a) > 1 else 'is'} not in the trace: waiting for "
                f"{'them' if len(a) > 1 else 'it'} cannot be told from transfer"
                for a, g in zip(absent, gap, strict=True)
                if g
            ]
    xfer = (end if multi else start).copy()
    xfer[at] = xs
    inst["xfer_start"] = xfer


def _transfer_outliers(
    key: I64, transfer: I64, family: npt.NDArray[np.object_], nbytes: I64
) -> tuple[npt.NDArray[np.bool_], I64, dict[int, str]]:
    """Per matched row (its instance ``key``, ``transfer`` estimate, ``family`` and ``bytes``):
    is its instance a transfer outlier (:func:`_known_transfer`), the ns of transfer then
    expected (its family and size's median, floored), and per outlier key the words of its
    ``why``. Per key: the least transfer, the first family, the most bytes; then per (family,
    bytes) of the sized keys the median and count: sorts and reductions over the key codes,
    where a groupby, an agg and two transforms cost milliseconds per run."""
    hit = np.zeros(key.size, dtype=bool)
    expected = np.zeros(key.size, dtype=np.int64)
    words: dict[int, str] = {}
    uk, kinv = np.unique(key, return_inverse=True)
    kinv = kinv.reshape(-1)
    t = np.full(uk.size, np.iinfo(np.int64).max, dtype=np.int64)
    np.minimum.at(t, kinv, transfer)
    b = np.full(uk.size, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(b, kinv, nbytes)
    known = ~pd.isna(family)  # first() takes the first non-null family of a key
    fam = np.full(uk.size, None, dtype=object)
    first = np.unique(kinv[known], return_index=True)
    fam[first[0]] = family[np.flatnonzero(known)[first[1]]]
    sized = np.flatnonzero((b > 0) & ~pd.isna(fam))  # a groupby leaves null families out
    if sized.size == 0:
        return hit, expected, words
    ts, bs = t[sized], b[sized]
    fcode = np.unique(fam[sized], return_inverse=True)[1].reshape(-1)
    order = np.lexsort((ts, bs, fcode))
    new = np.ones(sized.size, dtype=bool)
    new[1:] = (fcode[order][1:] != fcode[order][:-1]) | (bs[order][1:] != bs[order][:-1])
    heads = np.flatnonzero(new)
    sizes = np.diff(np.append(heads, sized.size))
    v = ts[order].astype(np.float64)
    # a groupby median: the middle value, or the mean of the middle two, in float64
    med_g = (v[heads + (sizes - 1) // 2] + v[heads + sizes // 2]) / 2
    group = np.cumsum(new) - 1
    med = np.empty(sized.size, dtype=np.float64)
    n = np.empty(sized.size, dtype=np.int64)
    med[order], n[order] = med_g[group], sizes[group]
    out = (n >= TRANSFER_OUTLIER_MIN) & (med > 0) & (ts > TRANSFER_OUTLIER_RATIO * med)
    if not out.any():
        return hit, expected, words
    for i in np.flatnonzero(out).tolist():
        words[int(uk[sized[i]])] = (
            f"its transfer estimate {ts[i] / 1e6:.3f} ms is {ts[i] / med[i]:.1f}x the "
            f"median of the {int(n[i])} {fam[sized[i]]} instances of its size: waiting or "
            "contention, not bandwidth"
        )
    # the expected ns went through a float64 reindex before
    exp_k = np.zeros(uk.size, dtype=np.int64)
    exp_k[sized[out]] = np.floor(med[out]).astype(np.int64).astype(np.float64).astype(np.int64)
    is_out = np.zeros(uk.size, dtype=bool)
    is_out[sized[out]] = True
    return is_out[kinv], exp_k[kinv], words


def _cause_sets(
    inst: pd.DataFrame,
    pieces: tuple[I64, I64, I64, I64],
    exposed: dict[str, GroupedIntervals],
    n_windows: int,
) -> CauseSets:
    """Waiting carved out of the local causes: the wait part of every piece is
    ``[start, start + wait)`` of its instance on that unit, clipped to the piece. The known
    transfer part is ``[xfer_start, end)`` (:func:`_known_transfer`); exposed time between the two that no other
    instance's known part covers is ``unmatched`` (diagnosis.md §12)."""
    p_inst, p_win, p_s, p_e = pieces
    w_start = inst["start_ns"].to_numpy(np.int64)[p_inst]
    w_end = w_start + inst[WAIT_NS.name].to_numpy(np.int64)[p_inst]
    wait_set = iv.grouped_union(p_win, np.maximum(p_s, w_start), np.minimum(p_e, w_end), n_windows)
    t_start = inst["xfer_start"].to_numpy(np.int64)[p_inst]
    xfer_set = iv.grouped_union(p_win, np.maximum(p_s, t_start), p_e, n_windows)
    total_exposed = _total_exposed(exposed, n_windows)
    known = iv.grouped_union(
        np.concatenate((wait_set[0], xfer_set[0])),
        np.concatenate((wait_set[1], xfer_set[1])),
        np.concatenate((wait_set[2], xfer_set[2])),
        n_windows,
    )
    # the unknown part of a piece: past its wait, before its known transfer (a whole unmatched
    # instance of a run of several units; an outlier's excess). Exposed time outside every
    # instance (a CPU thread's launch or wake-up inside a collective's call, §11) belongs to its
    # call's instance, not to an unpaired one: it keeps the transfer rule
    unknown = iv.grouped_union(p_win, np.maximum(p_s, w_end), np.minimum(p_e, t_start), n_windows)
    return CauseSets(
        wait=iv.grouped_intersect(total_exposed, wait_set, n_windows),
        tail=iv.grouped_subtract(exposed[Cause.TAIL], wait_set, n_windows),
        dependency=iv.grouped_subtract(exposed[Cause.DEPENDENCY], wait_set, n_windows),
        host=iv.grouped_subtract(exposed[Cause.HOST], wait_set, n_windows),
        unmatched=iv.grouped_subtract(
            iv.grouped_intersect(total_exposed, unknown, n_windows), known, n_windows
        ),
    )


def _total_exposed(exposed: dict[str, GroupedIntervals], n_windows: int) -> GroupedIntervals:
    """The whole exposed set per window: the union of the local cause sets (they partition it)."""
    parts = list(exposed.values())
    return iv.grouped_union(
        np.concatenate([x[0] for x in parts]),
        np.concatenate([x[1] for x in parts]),
        np.concatenate([x[2] for x in parts]),
        n_windows,
    )


def _instance_causes(
    inst: pd.DataFrame,
    pieces: tuple[I64, I64, I64, I64],
    sets: CauseSets,
    exposed: dict[str, GroupedIntervals],
    n_windows: int,
) -> None:
    """Per (instance, unit), in place: exposed ns by cause over its piece in its own step (its
    ``window``, that of its first piece), and its ``exposed_unmatched_ns``. Its own wait part
    decides its wait (another instance's wait part is not this one's: the figure stays within
    its ``wait_ns``); the rest of its exposed time takes the local cause (tail / dependency /
    host)."""
    p_inst, p_win, p_s, p_e = pieces
    # the row's own step only: on CPU units an activity is clipped into every window it meets
    # (nested markers), and summing its pieces over them counted its ns more than once
    own = p_win == inst["window"].to_numpy(np.int64)[p_inst]
    p_inst, p_win, p_s, p_e = p_inst[own], p_win[own], p_s[own], p_e[own]
    start = inst["start_ns"].to_numpy(np.int64)[p_inst]
    w_s = np.maximum(p_s, start)
    w_e = np.maximum(w_s, np.minimum(p_e, start + inst[WAIT_NS.name].to_numpy(np.int64)[p_inst]))
    total_exposed = _total_exposed(exposed, n_windows)

    def per_row(s: GroupedIntervals, a: I64, b: I64) -> I64:
        cov = iv.grouped_covered(s, p_win, a, b, n_windows)
        return np.bincount(p_inst, weights=cov, minlength=len(inst)).astype(np.int64)

    total = per_row(total_exposed, p_s, p_e)
    own_wait = per_row(total_exposed, w_s, w_e)
    inst[EXPOSED_WAIT_NS.name] = own_wait
    for cause in CAUSES[1:]:
        inst[f"exposed_{cause}_ns"] = per_row(exposed[cause], p_s, p_e) - per_row(
            exposed[cause], w_s, w_e
        )
    inst[EXPOSED_NS.name] = total
    inst[EXPOSED_UNMATCHED_NS.name] = per_row(sets.unmatched, p_s, p_e)


def _family_causes(
    inst: pd.DataFrame, pieces: tuple[I64, I64, I64, I64], sets: CauseSets, n_windows: int
) -> pd.DataFrame:
    """Exposed ns per (window, collective family, cause), each ns counted once per family (the
    instances of a family are unioned first), plus the part on compute streams (same_stream)."""
    p_inst, p_win, p_s, p_e = pieces
    cols = ["window", "family", EXPOSED_NS.name, *(f"exposed_{c}_ns" for c in CAUSES)]
    cols += ["same_stream_ns"]
    if p_inst.size == 0:
        return pd.DataFrame(columns=cols)
    fam_code = {f: i for i, f in enumerate(FAMILIES)}
    nf = len(FAMILIES)
    of = _by_key(inst["family"].to_numpy(dtype=object), lambda f: fam_code.get(f, nf - 1))
    fam = of.astype(np.int64)[p_inst]
    out: dict[str, I64] = {}
    for name, mask in (
        ("all", np.ones(p_inst.size, dtype=bool)),
        ("same", inst["same_stream"].to_numpy(bool)[p_inst]),
    ):
        g, a, b = iv.grouped_union(p_win[mask] * nf + fam[mask], p_s[mask], p_e[mask])
        w = g // nf
        for cause, cs in sets.by_name().items():
            cov = iv.grouped_covered(cs, w, a, b, n_windows)
            out[f"{name}:{cause}"] = np.bincount(g, weights=cov, minlength=n_windows * nf).astype(
                np.int64
            )
    idx = np.arange(n_windows * nf)
    total = sum((out[f"all:{c}"] for c in CAUSES), np.zeros(idx.size, dtype=np.int64))
    keep = idx[total > 0]  # the frame of the rows kept only: a loc and reset_index cost more
    columns: dict[str, npt.NDArray[Any]] = {
        "window": idx // nf,
        "family": np.array(FAMILIES, dtype=object)[idx % nf],
        EXPOSED_NS.name: total,
        **{f"exposed_{c}_ns": out[f"all:{c}"] for c in CAUSES},
        "same_stream_ns": sum(
            (out[f"same:{c}"] for c in CAUSES), np.zeros(idx.size, dtype=np.int64)
        ),
    }
    if keep.size == 0:  # the dtypes pandas infers from every row (object texts: str)
        df = pd.DataFrame(columns)
        return df.loc[df[EXPOSED_NS.name] > 0, cols].reset_index(drop=True)
    return pd.DataFrame({c: columns[c][keep] for c in cols}, columns=cols)


def _unit_name(traces: Sequence[TraceInfo], u: int) -> str:
    t = traces[u]
    same_rank = sum(1 for x in traces if x.rank == t.rank)
    if same_rank > 1 and t.device is not None:
        return f"rank {t.rank} (GPU {t.device})"
    return f"rank {t.rank}"


def _devices(devices: list[Any], unit: I64) -> npt.NDArray[np.object_]:
    """Per row its unit's device, as ``pd.Series([devices[u] for u in unit]).astype(object)``
    gives it: the dtype pandas infers for the distinct units' values (as for all the rows'),
    spread to the rows."""
    shown, at = np.unique(unit, return_inverse=True)
    per = pd.Series([devices[u] for u in shown.tolist()]).astype(object).to_numpy()
    return np.asarray(per[at.reshape(-1)], dtype=object)


def _whys(why: npt.NDArray[Any]) -> list[str | None]:
    """``[str(w) or None for w in why]``: each row's reason, None for none; once per distinct
    text when none is null (a null's text tells None from NaN)."""
    if bool(np.asarray(pd.isna(why), dtype=bool).any()):
        return [str(w) or None for w in why.tolist()]
    return list(_by_key(why, lambda w: str(w) or None).tolist())


def _int_or_none(values: I64) -> list[int | None]:
    """``[int(v) if v >= 0 else None for v in values]``: -1 "none" as None."""
    out = values.astype(object)
    out[values < 0] = None
    return list(out.tolist())


def _tables(
    inst: pd.DataFrame,
    m: pd.DataFrame,
    traces: Sequence[TraceInfo],
    window_labels: Sequence[object],
    clock: str | None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series]:
    """The instance table (matched instances and each unit's unmatched ones, numbered by first
    start), the per-(instance, unit) table, and per row of ``inst`` its instance id."""
    # numpy columns taken once in the final row order: a copy of the frame, its column
    # assignments, take and reset_index cost milliseconds on a few hundred rows
    sel = np.flatnonzero(inst["window"].to_numpy() >= 0)
    if sel.size == 0:
        return (
            pd.DataFrame(columns=list(INSTANCE_COLUMNS)),
            pd.DataFrame(columns=list(PER_RANK_COLUMNS)),
            pd.Series(np.zeros(0, np.int64)),
        )
    key_s = inst["key"].to_numpy()[sel]
    matched_s = key_s >= 0
    # one group per matched key, one per unmatched local instance
    grp = np.where(matched_s, key_s, -1 - np.arange(sel.size)).astype(np.int64)
    # number the groups by their first start (ties by group key)
    ugrp, ginv = np.unique(grp, return_inverse=True)
    start_s = inst["start_ns"].to_numpy(np.int64)[sel]
    gfirst = iv.group_min_max(ginv, start_s, start_s, ugrp.size)[0]
    rank_of = np.empty(ugrp.size, dtype=np.int64)
    rank_of[np.lexsort((ugrp, gfirst))] = np.arange(ugrp.size, dtype=np.int64)
    inst_s = rank_of[ginv]
    by = np.lexsort((inst["unit"].to_numpy(np.int64)[sel], inst_s))  # stable
    at = sel[by]  # positions in ``inst``, in the tables' row order
    ids = inst_s[by]
    matched = matched_s[by]

    def col(name: str) -> npt.NDArray[Any]:
        return np.asarray(inst[name].to_numpy()[at])

    def ns(name: str) -> I64:
        return np.asarray(inst[name].to_numpy(np.int64)[at], dtype=np.int64)

    window = inst["window"].to_numpy()[at]
    labels = np.array(list(window_labels) + ["-"], dtype=object)
    step = labels[window]
    unit = inst["unit"].to_numpy(np.int64)[at]
    rank = np.array([t.rank for t in traces], dtype=np.int64)[unit]
    device = _devices([t.device for t in traces], unit)
    dur = ns("dur_ns")
    aligned = ns("aligned_start")
    per_rank = pd.DataFrame(
        {
            "instance": ids,
            "unit": unit,
            "rank": rank,
            "device": device,
            "step": step,
            "window": window.astype(np.int64),
            "name": inst["label"].astype(str).to_numpy()[at],
            "kernel": inst["kernel"].astype(str).to_numpy()[at],
            "family": col("family"),
            "lane": inst["lane"].astype(str).to_numpy()[at],
            "start_ns": ns("start_ns"),
            "end_ns": ns("end_ns"),
            "dur_ns": dur,
            WAIT_NS.name: ns(WAIT_NS.name),
            EXPOSED_NS.name: ns(EXPOSED_NS.name),
            **{f"exposed_{c}_ns": ns(f"exposed_{c}_ns") for c in CAUSES},
            EXPOSED_UNMATCHED_NS.name: ns(EXPOSED_UNMATCHED_NS.name),
            "unmatched_why": _whys(col("why")),
            "same_stream": inst["same_stream"].astype(bool).to_numpy()[at],
            # nullable: <NA> where the launch is unknown (internally -1)
            "queued_ns": known_ns(ns("queued_ns")),
            "behind_comm_ns": known_ns(ns("behind_comm_ns")),
            "matched": matched,
            "aligned_start_ns": aligned,
            "aligned_end_ns": aligned + dur,
            WAITED_FOR_RANK.name: _int_or_none(ns("waited_for")),
        },
        columns=list(PER_RANK_COLUMNS),
    )
    row_instance = pd.Series(ids, index=inst.index.to_numpy()[at])
    # rows sorted by instance: each instance's rows are a run, its first row starts it
    new = np.ones(ids.size, dtype=bool)
    new[1:] = ids[1:] != ids[:-1]
    heads = np.flatnonzero(new)
    sizes = np.diff(np.append(heads, ids.size))
    first_matched = matched[heads]

    def firsts(name: str) -> list[Any]:
        """Per instance, ``groupby("instance")[name].first()``: the first non-null value."""
        values = col(name)
        if bool(pd.isna(values).any()):  # first() skips nulls (never there in practice)
            s = pd.Series(values, dtype=inst[name].dtype)
            return list(s.groupby(ids, sort=True).first().tolist())
        return list(values[heads].tolist())

    def per_run(values: I64, op: np.ufunc) -> I64:
        return np.asarray(op.reduceat(values, heads), dtype=np.int64)

    def first_ints(name: str) -> list[int | None]:
        """Per instance its first value, -1 (none) as None: an integer column has no nulls."""
        values = col(name)
        if values.dtype.kind == "i":
            return _int_or_none(values[heads].astype(np.int64))
        return [(int(x) if x >= 0 else None) for x in firsts(name)]

    ranks = rank.tolist()
    if inst["bytes"].dtype == np.int64:
        most_bytes = _int_or_none(per_run(ns("bytes"), np.maximum))
    else:
        most = pd.Series(col("bytes"), dtype=inst["bytes"].dtype).groupby(ids, sort=True).max()
        most_bytes = [(int(b) if b >= 0 else None) for b in most.tolist()]
    out = pd.DataFrame(
        {
            "instance": ids[heads],
            "name": per_rank["name"].to_numpy()[heads],
            "family": per_rank["family"].to_numpy()[heads],
            "process_group": [(p or None) for p in firsts("process_group")],
            "seq": first_ints("seq"),
            "bytes": most_bytes,
            "n_ranks": sizes.astype(np.int64),
            "ranks": [
                tuple(ranks[a:b])
                for a, b in zip(heads.tolist(), (heads + sizes).tolist(), strict=True)
            ],
            "step": step[heads],
            "start_ns": per_run(per_rank["start_ns"].to_numpy(np.int64), np.minimum),
            "transfer_ns": per_run(dur, np.minimum),
            WAIT_NS.name: per_run(per_rank[WAIT_NS.name].to_numpy(np.int64), np.add),
            "last_rank": [None] * heads.size,
            EXPOSED_NS.name: per_run(per_rank[EXPOSED_NS.name].to_numpy(np.int64), np.add),
            "matched": first_matched,
            "group": [str(x) for x in firsts("group_key")],
            "members": firsts("members"),
            "p2p": np.array(firsts("p2p"), dtype=bool),
            "src_rank": first_ints("src_rank"),
            "dst_rank": first_ints("dst_rank"),
            "last_arrival_ns": [
                (int(x) if f else None)
                for x, f in zip(firsts("last_arrival"), first_matched.tolist(), strict=True)
            ],
            "transfer_outlier": np.array(firsts("transfer_outlier"), dtype=bool),
        },
        columns=list(INSTANCE_COLUMNS),
    )
    if clock is not None and len(m):
        # arrival order: the unit with the latest aligned start, None on a tie
        out["last_rank"] = _last_ranks_of(matched, col("key"), ids, m, traces, len(out))
    out["last_rank"] = out["last_rank"].astype(object)
    return out, per_rank, row_instance


def _last_ranks_of(
    matched: npt.NDArray[np.bool_],
    key: npt.NDArray[Any],
    instance: I64,
    m: pd.DataFrame,
    traces: Sequence[TraceInfo],
    n: int,
) -> list[int | None]:
    """Per instance id (``0 .. n-1``): the rank of the unit with the latest aligned start among
    the matched rows of ``m`` whose key is a matched row's (``matched``, ``key`` and
    ``instance``: the instance table's columns), None on a tie (or none there)."""
    ik = np.asarray(key, dtype=np.int64)[matched]
    keys, first = np.unique(ik, return_index=True)  # a key is one instance
    inst_of_key = instance[matched][first]
    mk = m["key"].to_numpy(np.int64)
    j = np.minimum(np.searchsorted(keys, mk), max(keys.size - 1, 0))
    ok = keys[j] == mk if keys.size else np.zeros(mk.size, dtype=bool)
    mi = inst_of_key[j[ok]]
    ma = m["aligned_start"].to_numpy(np.int64)[ok]
    mu = m["unit"].to_numpy(np.int64)[ok]
    latest = np.full(n, np.iinfo(np.int64).min, dtype=np.int64)
    np.maximum.at(latest, mi, ma)
    at = ma == latest[mi]
    ties = np.bincount(mi[at], minlength=n)
    who = np.full(n, -1, dtype=np.int64)
    who[mi[at]] = mu[at]
    return [
        traces[u].rank if t == 1 else None for u, t in zip(who.tolist(), ties.tolist(), strict=True)
    ]


def _straggler_table(
    per_rank: pd.DataFrame,
    instances: pd.DataFrame,
    ranks: I64,
    aligned: bool,
    credit: pd.DataFrame,
) -> pd.DataFrame:
    rank_arr = np.unique(ranks)

    def per_rank_sum(rank: npt.NDArray[Any], weight: I64 | None = None) -> I64:
        """Per rank of ``rank_arr``: the rows' count (or ``weight`` summed, int64); rows of
        other ranks left out (the reindex of a groupby)."""
        r = np.asarray(rank, dtype=np.int64)
        at = np.minimum(np.searchsorted(rank_arr, r), max(rank_arr.size - 1, 0))
        ok = rank_arr[at] == r if rank_arr.size else np.zeros(r.size, dtype=bool)
        out = np.zeros(rank_arr.size, dtype=np.int64)
        np.add.at(out, at[ok], 1 if weight is None else np.asarray(weight, np.int64)[ok])
        return out

    z = np.zeros(0, np.int64)
    matched = per_rank["matched"].astype(bool).to_numpy() if len(per_rank) else z.astype(bool)
    pr_rank = per_rank["rank"].to_numpy(np.int64)[matched] if len(per_rank) else z
    pr_wait = per_rank[WAIT_NS.name].to_numpy(np.int64)[matched] if len(per_rank) else z
    count = per_rank_sum(pr_rank)
    own_wait = per_rank_sum(pr_rank, pr_wait)
    last_count = np.zeros(rank_arr.size, dtype=np.int64)
    waited_for = np.zeros(rank_arr.size, dtype=np.int64)
    last = instances["last_rank"] if len(instances) else None
    if aligned and last is not None and bool(last.notna().any()):
        last_count = per_rank_sum(last[last.notna().to_numpy()].astype(np.int64).to_numpy())
    if aligned and len(pr_rank):
        # every wait ns (hidden or not) of the others, credited as the exposed ones are
        wf = per_rank[WAITED_FOR_RANK.name][matched]
        known = wf.notna().to_numpy()
        waited_for = per_rank_sum(wf[known].astype(np.int64).to_numpy(), pr_wait[known])
    credited = per_rank_sum(
        credit[WAITED_FOR_RANK.name].to_numpy(np.int64),
        credit[EXPOSED_WAIT_NS.name].to_numpy(np.int64),
    )
    # most credited first, then most often last, then by rank: the stable multi-key
    # sort_values (a lexsort) on the columns before the frame, not a sort and reset_index of it
    by = np.lexsort((rank_arr, -last_count, -credited))
    ratio = [
        (lc / n if n and aligned else None)
        for lc, n in zip(last_count[by].tolist(), count[by].tolist(), strict=True)
    ]
    return pd.DataFrame(
        {
            "rank": rank_arr[by],
            "instances": count[by],
            "last_count": last_count[by],
            "last_ratio": pd.array(ratio, dtype="Float64"),
            "waited_for_ns": waited_for[by],
            WAIT_NS.name: own_wait[by],
            "exposed_waited_for_ns": credited[by],
        },
        columns=list(STRAGGLER_COLUMNS),
    )


def step_skew(steps: pd.DataFrame) -> pd.DataFrame:
    """Per step label on two or more ranks: slowest and fastest rank, and the skew (ns)."""
    if steps.empty or steps["rank"].nunique() < 2:  # one rank: no step is on two
        return pd.DataFrame(columns=list(SKEW_COLUMNS))
    key = steps["step"].astype(str)
    # per label (first seen first): its first step value, ranks, slowest and fastest (ns, rank),
    # ties to the lower rank; a dict over the windows, where groupbys and sorts cost more
    seen: dict[str, list[Any]] = {}
    for k, missing, step, rank, ns in zip(
        key.tolist(),
        key.isna().to_numpy(bool).tolist(),
        steps["step"].tolist(),
        steps["rank"].tolist(),
        steps[STEP_NS.name].to_numpy(np.int64).tolist(),
        strict=True,
    ):
        if missing:  # groupby leaves null keys out
            continue
        got = seen.get(k)
        if got is None:
            seen[k] = [step, {rank}, ns, rank, ns, rank]
            continue
        got[1].add(rank)
        if ns > got[2] or (ns == got[2] and rank < got[3]):
            got[2], got[3] = ns, rank
        if ns < got[4] or (ns == got[4] and rank < got[5]):
            got[4], got[5] = ns, rank
    rows = [v for v in seen.values() if len(v[1]) >= 2]
    if not rows:
        return pd.DataFrame(columns=list(SKEW_COLUMNS))
    max_ns = np.array([v[2] for v in rows], dtype=np.int64)
    min_ns = np.array([v[4] for v in rows], dtype=np.int64)
    step_values = np.empty(len(rows), dtype=object)
    step_values[:] = [v[0] for v in rows]
    return pd.DataFrame(
        {
            "step": step_values,
            "n_ranks": np.array([len(v[1]) for v in rows], dtype=np.int64),
            "slowest_rank": np.array([v[3] for v in rows], dtype=np.int64),
            "fastest_rank": np.array([v[5] for v in rows], dtype=np.int64),
            "max_step_ns": max_ns,
            "min_step_ns": min_ns,
            "skew_ns": max_ns - min_ns,
        },
        columns=list(SKEW_COLUMNS),
    )
