"""One collective matched across ranks: waiting vs transfer, and the stragglers behind the wait.

Exposed communication on one rank is often another rank's late arrival. This module matches
every collective *instance* across the ranks of a run and splits its time.

Instances (the ``kind == "comm"`` activities of the classified timeline):
  - GPU ranks: NCCL kernels; CPU ranks (gloo): the ``gloo:*`` work items.
  - When an activity carries a process group and a sequence number (newer Kineto copies
    ``Process Group Name`` and ``Seq`` onto NCCL kernels), the instance is (process group, seq);
    several kernels of one (rank, group, seq) form one instance spanning [first start, last end].
  - Otherwise the n-th activity of the same collective kind in the same process group on each
    rank is one instance. The kind is the trace's collective name when given, else parsed from the
    activity name (``ncclKernel_AllReduce_RING_LL_Sum_float`` / ``ncclDevKernel_AllReduce_...`` ->
    ``AllReduce``, ``gloo:all_reduce`` -> ``all_reduce``). On GPU ranks without a process group the
    NCCL stream stands in for it (NCCL runs one stream per process group and device; streams are
    numbered per rank in order of first use, since stream ids differ between ranks).
  - An instance must be present on every rank that runs that process group. When counts differ,
    a note names the ranks and counts and only the consistent prefix (or the sequence numbers
    every rank has) is matched.

Per matched instance (all times integer ns):
  - ``transfer_ns`` = the shortest duration across ranks: the part that is real data movement once
    everyone has arrived; each rank's ``wait_ns`` = its duration - ``transfer_ns``.
    Both use durations only, so they hold even when clocks cannot be aligned.
  - ``last_rank``: the rank that started last (the one the others waited for; None when several
    share the latest start). This compares start times across ranks, so it needs every rank on the
    unix clock (Kineto ``baseTimeNanoseconds`` or absolute µs, nsys session start); otherwise it
    is None and a note says so.
  - each rank's ``exposed_ns``: the part of the instance (clipped to its step window) that the
    rank's compute union in that step does not cover.

Exposed communication of a (rank, step), split without double counting:
  a nanosecond of the step's exposed set E (comm union minus compute union, exactly as in
  :mod:`traceoverlap.metrics`) is *waiting* when it lies in the first ``wait_ns`` of any matched
  instance on that rank, otherwise *transfer*:
  ``exposed_wait_ns = |E ∩ W|`` with W = union over instances of [start, start + wait_ns), and
  ``exposed_transfer_ns = |E| - exposed_wait_ns``, so the two always add up to
  ``exposed_comm_ns``. Unmatched activities count as transfer.

Stragglers: per rank, how often it arrived last and the total time the other ranks waited in
the instances where it arrived last (``waited_for_ns``); per step label, the slowest rank and the
step-time skew (max - min ``step_ns`` across ranks).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pandas as pd

from . import intervals as iv
from .intervals import _packing
from .metrics import ActivityRows, activity_rows, grouped_sets
from .model import Timeline
from .steps import StepTable

I64 = npt.NDArray[np.int64]

INSTANCE_COLUMNS = (
    "instance",
    "name",
    "process_group",
    "seq",
    "bytes",
    "n_ranks",
    "ranks",
    "step",
    "start_ns",
    "transfer_ns",
    "wait_ns",
    "last_rank",
    "exposed_ns",
)
PER_RANK_COLUMNS = (
    "instance",
    "rank",
    "step",
    "step_index",
    "start_ns",
    "end_ns",
    "dur_ns",
    "wait_ns",
    "exposed_ns",
)
STRAGGLER_COLUMNS = (
    "rank",
    "instances",
    "last_count",
    "last_ratio",
    "waited_for_ns",
    "wait_ns",
)
SKEW_COLUMNS = (
    "step",
    "n_ranks",
    "slowest_rank",
    "fastest_rank",
    "max_step_ns",
    "min_step_ns",
    "skew_ns",
)


class _AnalysisLike(Protocol):
    @property
    def timeline(self) -> Timeline: ...
    @property
    def step_table(self) -> StepTable: ...
    @property
    def steps(self) -> pd.DataFrame: ...


@dataclass(frozen=True)
class Collectives:
    """Collective instances of a run, matched across ranks (see the module docstring).

    ``instances``: one row per matched instance (:data:`INSTANCE_COLUMNS`); ``wait_ns`` is the sum
    over ranks; ``seq``/``bytes``/``process_group``/``last_rank`` are None when unknown.
    ``per_rank``: one row per (instance, rank) (:data:`PER_RANK_COLUMNS`).
    ``stragglers``: one row per rank, most waited-for first (:data:`STRAGGLER_COLUMNS`).
    ``step_skew``: one row per step label present on two or more ranks (:data:`SKEW_COLUMNS`).
    ``step_split``: per step window (``step_index``): ``exposed_wait_ns``, ``exposed_transfer_ns``.
    ``aligned``: every rank is on the unix clock, so start times compare across ranks.
    """

    instances: pd.DataFrame
    per_rank: pd.DataFrame
    stragglers: pd.DataFrame
    step_skew: pd.DataFrame
    step_split: pd.DataFrame
    notes: tuple[str, ...]
    aligned: bool

    def to_json(self) -> dict[str, Any]:
        """The JSON shape (plain Python types), merged into the top level of the JSON report:
        ``{"collectives": [...], "stragglers": {"clock_aligned", "ranks": [...], "steps": [...]}}``.
        Notes go to the analysis notes, not here."""
        per: dict[int, dict[str, dict[str, int]]] = {}
        for inst, rank, s, d, w, e in zip(
            self.per_rank["instance"].tolist(),
            self.per_rank["rank"].tolist(),
            self.per_rank["start_ns"].tolist(),
            self.per_rank["dur_ns"].tolist(),
            self.per_rank["wait_ns"].tolist(),
            self.per_rank["exposed_ns"].tolist(),
            strict=True,
        ):
            per.setdefault(inst, {})[str(rank)] = {
                "start_ns": int(s),
                "dur_ns": int(d),
                "wait_ns": int(w),
                "exposed_ns": int(e),
            }
        colls = []
        for row in self.instances.to_dict("records"):
            colls.append(
                {
                    "name": str(row["name"]),
                    "process_group": row["process_group"],
                    "seq": _opt_int(row["seq"]),
                    "bytes": _opt_int(row["bytes"]),
                    "step": _plain(row["step"]),
                    "ranks": [int(r) for r in row["ranks"]],
                    "transfer_ns": int(row["transfer_ns"]),
                    "wait_ns": int(row["wait_ns"]),
                    "last_rank": _opt_int(row["last_rank"]),
                    "per_rank": per.get(int(row["instance"]), {}),
                }
            )
        return {
            "collectives": colls,
            "stragglers": {
                "clock_aligned": self.aligned,
                "ranks": [
                    {k: (_opt_float(v) if k == "last_ratio" else int(v)) for k, v in r.items()}
                    for r in _records(self.stragglers)
                ],
                "steps": [
                    {k: (_plain(v) if k == "step" else int(v)) for k, v in r.items()}
                    for r in _records(self.step_skew)
                ],
            },
        }

    def render_text(self) -> str:
        """The straggler section of the text report (formatting lives in the reporters)."""
        from .reporters.collectives_text import render_stragglers

        return render_stragglers(self)

    @property
    def top_straggler(self) -> int | None:
        """The rank others waited for the longest, or None when no rank was ever last."""
        s = self.stragglers
        if s.empty or int(s["last_count"].max()) == 0:
            return None
        return int(s["rank"].iloc[0])


def _opt_int(v: Any) -> int | None:
    if v is None or (isinstance(v, float) and np.isnan(v)) or v is pd.NA:
        return None
    return int(v)


def _opt_float(v: Any) -> float | None:
    return None if v is None or v is pd.NA else float(v)


def _records(df: pd.DataFrame) -> list[dict[str, Any]]:
    return [{str(k): v for k, v in r.items()} for r in df.to_dict("records")]


def _plain(v: Any) -> Any:
    if isinstance(v, np.integer):
        return int(v)
    return v


# --- collective kind from a name --------------------------------------------------------------

_NCCL_KERNEL = re.compile(r"(?i)^(?:nccl|rccl|hccl)\w*?Kernel_([A-Za-z]+)")
_LIB_PREFIX = re.compile(r"(?i)^(?:gloo|nccl|rccl|hccl|mpi|ucc)[:_](\w+)")


def collective_kind(name: str) -> str:
    """A collective's kind from an activity name: ``AllReduce``, ``all_reduce``, ``SendRecv``...

    Unknown shapes give the name itself (so identical names still match one another).
    """
    m = _NCCL_KERNEL.search(name)
    if m:
        return m.group(1)
    m = _LIB_PREFIX.search(name)
    if m:
        return m.group(1)
    return name


def _kind_labels(names: pd.Series, coll_names: pd.Series) -> npt.NDArray[np.object_]:
    """Per row: the trace's collective name, else the kind parsed from the name (per category)."""
    cats = names.cat.categories
    parsed = np.array([collective_kind(str(c)) for c in cats] + [""], dtype=object)
    label = parsed[names.cat.codes.to_numpy()]  # code -1 picks the trailing ""
    given = coll_names.astype(object).fillna("").astype(str).to_numpy(dtype=object)
    has = given != ""
    label[has] = given[has]
    return label


def _norm_kind(labels: npt.NDArray[np.object_]) -> npt.NDArray[np.object_]:
    # "allreduce" (Kineto args), "AllReduce" (kernel name) and "all_reduce" (gloo) are one kind
    uniq, inv = np.unique(labels.astype(str), return_inverse=True)
    norm = np.array([u.lower().replace("_", "") for u in uniq], dtype=object)
    return norm[inv]


# --- matching -----------------------------------------------------------------------------------


def _comm_rows(timeline: Timeline) -> pd.DataFrame:
    """Every comm activity with its matching key (group key, kind key, seq, ordinal)."""
    ev = timeline.events
    sel = np.flatnonzero((ev["kind"] == "comm").to_numpy())
    c = ev.iloc[sel]
    label = _kind_labels(c["name"], c["coll_name"])
    pg = c["process_group"].astype(object).fillna("").astype(str).to_numpy(dtype=object)
    df = pd.DataFrame(
        {
            "row": sel.astype(np.int64),
            "rank": c["rank"].to_numpy().astype(np.int64),
            "start_ns": c["start_ns"].to_numpy(),
            "end_ns": c["end_ns"].to_numpy(),
            "label": label,
            "kind_key": _norm_kind(label),
            "pg": pg,
            "seq": c["seq"].to_numpy().astype(np.int64),
            "bytes": c["coll_bytes"].to_numpy().astype(np.int64),
            "stream": c["stream"].to_numpy().astype(np.int64),
            "gpu": (c["category"] == "kernel").to_numpy(),
        }
    )
    df = df.sort_values(["rank", "start_ns", "row"], kind="stable").reset_index(drop=True)
    # GPU activity with no process group: its stream (ordinal by first use on the rank) stands in
    no_pg = (df["pg"] == "") & df["gpu"]
    group_key = df["pg"].copy()
    if no_pg.any():
        sub = df.loc[no_pg, ["rank", "stream"]]
        first = sub.drop_duplicates(["rank", "stream"])
        ordinal = first.groupby("rank").cumcount()
        key = pd.Series(
            ordinal.to_numpy(), index=pd.MultiIndex.from_frame(first[["rank", "stream"]])
        )
        ords = key.reindex(pd.MultiIndex.from_frame(sub)).to_numpy().astype(np.int64)
        names = np.array([f"\x00stream#{o}" for o in range(int(ords.max()) + 1)], dtype=object)
        group_key.loc[no_pg] = names[ords]
    df["group_key"] = group_key
    df["use_seq"] = (df["seq"] >= 0) & (df["pg"] != "")
    df["ordinal"] = np.where(
        df["use_seq"], -1, df.groupby(["rank", "group_key", "kind_key"]).cumcount()
    ).astype(np.int64)
    df.loc[~df["use_seq"], "seq"] = -1
    return df


def _describe_group(g: str) -> str:
    if g.startswith("\x00stream#"):
        return f"NCCL stream #{g[len(chr(0)) + len('stream#') :]}"
    return f"group {g!r}" if g else "the default group"


def _match(rows: pd.DataFrame, loaded_ranks: list[int]) -> tuple[pd.DataFrame, list[str]]:
    """Per (instance, rank) spans of the instances present on every rank of their group."""
    notes: list[str] = []
    keys = ["group_key", "kind_key", "seq", "ordinal"]
    span = (
        rows.groupby(keys + ["rank"], sort=False)
        .agg(
            start_ns=("start_ns", "min"),
            end_ns=("end_ns", "max"),
            label=("label", "first"),
            pg=("pg", "first"),
            bytes=("bytes", "max"),
        )
        .reset_index()
    )
    group_ranks = rows.groupby("group_key")["rank"].unique()
    expected = {g: len(r) for g, r in group_ranks.items()}
    for g, ranks in group_ranks.items():
        missing = sorted(set(loaded_ranks) - {int(r) for r in ranks})
        if missing and not str(g).startswith("\x00") and g != "":
            continue  # a sub-group: ranks outside it rightly have none of its collectives
        if missing and len(loaded_ranks) > 1:
            notes.append(
                f"collectives of {_describe_group(str(g))} appear on ranks "
                f"{sorted(int(r) for r in ranks)} but not on {missing}"
            )
    n_present = span.groupby(keys, sort=False)["rank"].transform("size")
    exp = span["group_key"].map(expected)
    complete = n_present.to_numpy() == exp.to_numpy()
    # one note per (group, kind) whose counts differ across its ranks
    counts = span.groupby(["group_key", "kind_key", "rank"], sort=True).size()
    for gk, per in counts.groupby(level=[0, 1], sort=True):
        g, _k = str(gk[0]), str(gk[1])
        vals = per.droplevel([0, 1])
        if vals.nunique() > 1 or len(vals) != expected[g]:
            lab = span.loc[(span["group_key"] == g) & (span["kind_key"] == _k), "label"].iloc[0]
            desc = ", ".join(
                f"rank {r}: {n}" for r, n in zip(vals.index.tolist(), vals.tolist(), strict=True)
            )
            n_ok = int(
                span.loc[(span["group_key"] == g) & (span["kind_key"] == _k) & complete, keys]
                .drop_duplicates()
                .shape[0]
            )
            notes.append(
                f"{lab} in {_describe_group(str(g))}: instance counts differ across ranks ({desc}); "
                f"matched the {n_ok} present on every rank, the rest left unmatched"
            )
    if len(loaded_ranks) > 1:
        single = {g for g, n in expected.items() if n == 1}
        if single:
            complete &= ~span["group_key"].isin(single).to_numpy()
        for g in sorted(str(x) for x in single):
            if g and not g.startswith("\x00"):  # unnamed groups were noted above
                only = int(group_ranks[g][0])
                notes.append(
                    f"collectives of {_describe_group(g)} appear only on rank {only}: "
                    "nothing to match them with (is a rank trace missing?)"
                )
    matched = span[complete].copy()
    inst = matched.groupby(keys, sort=False).ngroup()
    matched["instance_key"] = inst.to_numpy()
    return matched, notes


# --- exposure helpers ---------------------------------------------------------------------------


def _covered(c: tuple[I64, I64, I64], q_group: I64, q_start: I64, q_end: I64, n_groups: int) -> I64:
    """|[q_start, q_end) ∩ C[q_group]| per query, for grouped disjoint sets C (sorted by group)."""
    cg, cs, ce = c
    out = np.zeros(q_group.size, dtype=np.int64)
    if q_group.size == 0 or cg.size == 0:
        return out
    allg = np.concatenate((cg, q_group))
    origin, span = _packing(
        allg, np.concatenate((cs, q_start)), np.concatenate((ce, q_end)), n_groups
    )
    # groups laid end to end on one axis: C becomes one disjoint sorted set
    ps = cg * span + (cs - origin[cg])
    pe = cg * span + (ce - origin[cg])
    cum = np.concatenate(([0], np.cumsum(pe - ps)))

    def before(x: I64) -> I64:
        k = np.searchsorted(ps, x, side="right") - 1
        kk = np.maximum(k, 0)
        part = np.clip(x - ps[kk], 0, pe[kk] - ps[kk])
        return np.where(k >= 0, cum[kk] + part, 0)

    base = q_group * span - origin[q_group]
    qs = q_start + base
    qe = np.maximum(q_end, q_start) + base
    return (before(qe) - before(qs)).astype(np.int64)


def _pieces(matched: pd.DataFrame, rows: pd.DataFrame, acts: ActivityRows) -> pd.DataFrame:
    """Per (matched rank instance, step window): the instance's span clipped to the window."""
    comm = acts.kind == 1
    piece = pd.DataFrame(
        {
            "row": acts.event_row[comm],
            "group": acts.group[comm],
            "ps": acts.start_ns[comm],
            "pe": acts.end_ns[comm],
        }
    )
    keys = ["group_key", "kind_key", "seq", "ordinal", "rank"]
    link = rows[["row"] + keys].merge(matched[keys + ["instance_key"]], on=keys, how="inner")
    piece = piece.merge(link[["row", "instance_key", "rank"]], on="row", how="inner")
    return (
        piece.groupby(["instance_key", "rank", "group"], sort=False)
        .agg(ps=("ps", "min"), pe=("pe", "max"))
        .reset_index()
    )


# --- the public entry points ---------------------------------------------------------------------


def match_collectives(analysis: _AnalysisLike) -> Collectives:
    """Match every collective across the ranks of an analysed run (see the module docstring)."""
    timeline = analysis.timeline
    table = analysis.step_table
    win = table.windows
    n_groups = len(win)
    ranks = timeline.ranks or sorted(np.unique(timeline.events["rank"]).tolist())
    aligned = bool(timeline.traces) and all(t.clock == "unix" for t in timeline.traces)
    notes: list[str] = []
    if len(ranks) > 1 and not aligned:
        off = [t.rank for t in timeline.traces if t.clock != "unix"]
        notes.append(
            f"clocks of ranks {off} could not be aligned to unix time: arrival order "
            "(last rank, stragglers by arrival) is not reported; wait and transfer use durations only"
        )

    rows = _comm_rows(timeline)
    matched, match_notes = _match(rows, ranks)
    notes.extend(match_notes)

    acts = activity_rows(timeline, table)
    sets = grouped_sets(acts, n_groups) if n_groups else {}
    pieces = (
        _pieces(matched, rows, acts)
        if n_groups
        else pd.DataFrame(columns=["instance_key", "rank", "group", "ps", "pe"])
    )

    # only instances every rank ran inside an analysed step are reported
    in_step = pieces.groupby("instance_key")["rank"].nunique()
    n_ranks_of = matched.groupby("instance_key")["rank"].size()
    keep_keys = in_step.index[in_step.to_numpy() == n_ranks_of.reindex(in_step.index).to_numpy()]
    outside = int(n_ranks_of.size - len(keep_keys))
    if outside:
        notes.append(
            f"{outside} matched collective instance(s) fall outside the analysed steps on some "
            "rank and are not reported"
        )
    m = matched[matched["instance_key"].isin(keep_keys)].copy()
    pieces = pieces[pieces["instance_key"].isin(keep_keys)]

    # per rank instance: duration, wait, step (the window of its first piece)
    m["dur_ns"] = (m["end_ns"] - m["start_ns"]).astype(np.int64)
    m["transfer_ns"] = m.groupby("instance_key")["dur_ns"].transform("min").astype(np.int64)
    m["wait_ns"] = (m["dur_ns"] - m["transfer_ns"]).astype(np.int64)
    first_piece = (
        pieces.sort_values(["instance_key", "rank", "ps"])
        .drop_duplicates(["instance_key", "rank"])
        .set_index(["instance_key", "rank"])["group"]
    )
    m["step_index"] = (
        first_piece.reindex(pd.MultiIndex.from_frame(m[["instance_key", "rank"]]))
        .to_numpy()
        .astype(np.int64)
    )
    step_label = win["step"].to_numpy(dtype=object)
    m["step"] = step_label[m["step_index"].to_numpy()] if len(m) else []

    # exposure of each piece: its span minus the window's compute union
    if len(pieces) and n_groups:
        pg_ = pieces["group"].to_numpy().astype(np.int64)
        ps_ = pieces["ps"].to_numpy().astype(np.int64)
        pe_ = pieces["pe"].to_numpy().astype(np.int64)
        cov = _covered(sets["compute"], pg_, ps_, pe_, n_groups)
        exp_piece = pd.Series((pe_ - ps_) - cov)
        exp = exp_piece.groupby(
            [pieces["instance_key"].to_numpy(), pieces["rank"].to_numpy()]
        ).sum()
        m["exposed_ns"] = (
            exp.reindex(pd.MultiIndex.from_frame(m[["instance_key", "rank"]]))
            .to_numpy()
            .astype(np.int64)
        )
    else:
        m["exposed_ns"] = np.zeros(len(m), dtype=np.int64)

    # instance numbering: by earliest start (unix clock) or by rank 0's order
    first_start = m.groupby("instance_key")["start_ns"].min().sort_values(kind="stable")
    number = pd.Series(np.arange(len(first_start)), index=first_start.index)
    m["instance"] = number.reindex(m["instance_key"]).to_numpy().astype(np.int64)
    m = m.sort_values(["instance", "rank"], kind="stable").reset_index(drop=True)

    instances = _instance_table(m, aligned)
    per_rank = m[list(PER_RANK_COLUMNS)].reset_index(drop=True)
    stragglers = _straggler_table(m, instances, ranks, aligned)
    skew = step_skew(analysis.steps)
    split = _step_split(m, pieces, sets, n_groups)
    return Collectives(instances, per_rank, stragglers, skew, split, tuple(notes), aligned)


def _instance_table(m: pd.DataFrame, aligned: bool) -> pd.DataFrame:
    if m.empty:
        return pd.DataFrame(columns=list(INSTANCE_COLUMNS))
    g = m.groupby("instance", sort=True)
    first = g.first()
    out = pd.DataFrame(
        {
            "instance": first.index.to_numpy().astype(np.int64),
            "name": first["label"].astype(str).to_numpy(),
            "process_group": [p if p else None for p in first["pg"].tolist()],
            "seq": [int(s) if s >= 0 else None for s in first["seq"].tolist()],
            "bytes": [int(b) if b >= 0 else None for b in g["bytes"].max().tolist()],
            "n_ranks": g["rank"].size().to_numpy().astype(np.int64),
            "ranks": [
                tuple(x.tolist())
                for x in np.split(m["rank"].to_numpy(), np.cumsum(g["rank"].size().to_numpy())[:-1])
            ],
            "step": first["step"].to_numpy(dtype=object),
            "start_ns": g["start_ns"].min().to_numpy().astype(np.int64),
            "transfer_ns": first["transfer_ns"].to_numpy().astype(np.int64),
            "wait_ns": g["wait_ns"].sum().to_numpy().astype(np.int64),
            "last_rank": [None] * len(first),
            "exposed_ns": g["exposed_ns"].sum().to_numpy().astype(np.int64),
        },
        columns=list(INSTANCE_COLUMNS),
    )
    if aligned:
        idx = g["start_ns"].idxmax()
        last = m.loc[idx.to_numpy(), "rank"].to_numpy()
        latest = m["start_ns"].to_numpy()[idx.to_numpy()]
        latest_of = pd.Series(latest, index=first.index).reindex(m["instance"]).to_numpy()
        n_latest = (m["start_ns"].to_numpy() == latest_of).astype(np.int64)
        n_latest = np.bincount(m["instance"].to_numpy(), weights=n_latest, minlength=len(first))
        # nobody waits in a 1-rank instance; a latest start shared by several ranks names no one
        ok = (out["n_ranks"].to_numpy() >= 2) & (n_latest == 1)
        out["last_rank"] = [int(r) if k else None for r, k in zip(last, ok, strict=True)]
    out["last_rank"] = out["last_rank"].astype(object)
    return out


def _straggler_table(
    m: pd.DataFrame, instances: pd.DataFrame, ranks: list[int], aligned: bool
) -> pd.DataFrame:
    rank_arr = np.asarray(ranks, dtype=np.int64)
    count = m.groupby("rank")["instance"].size().reindex(rank_arr, fill_value=0)
    own_wait = m.groupby("rank")["wait_ns"].sum().reindex(rank_arr, fill_value=0)
    last_count = pd.Series(0, index=rank_arr, dtype=np.int64)
    waited_for = pd.Series(0, index=rank_arr, dtype=np.int64)
    if not instances.empty:
        instances = instances[instances["last_rank"].notna().to_numpy()]
    if aligned and not instances.empty:
        last = instances["last_rank"].astype(np.int64)
        last_count = last.value_counts().reindex(rank_arr, fill_value=0).astype(np.int64)
        # the others' wait in instances where this rank came last
        last_of = pd.Series(last.to_numpy(), index=instances["instance"].to_numpy())
        li = last_of.reindex(m["instance"]).to_numpy()
        others = m["wait_ns"].to_numpy()[li != m["rank"].to_numpy()]
        who = li[li != m["rank"].to_numpy()]
        waited_for = (
            pd.Series(others).groupby(who).sum().reindex(rank_arr, fill_value=0).astype(np.int64)
        )
    out = pd.DataFrame(
        {
            "rank": rank_arr,
            "instances": count.to_numpy().astype(np.int64),
            "last_count": last_count.to_numpy().astype(np.int64),
            "last_ratio": [
                (lc / n if n and aligned else None)
                for lc, n in zip(last_count.tolist(), count.tolist(), strict=True)
            ],
            "waited_for_ns": waited_for.to_numpy().astype(np.int64),
            "wait_ns": own_wait.to_numpy().astype(np.int64),
        },
        columns=list(STRAGGLER_COLUMNS),
    )
    out = out.sort_values(
        ["waited_for_ns", "last_count", "rank"], ascending=[False, False, True], kind="stable"
    )
    return out.reset_index(drop=True)


def step_skew(steps: pd.DataFrame) -> pd.DataFrame:
    """Per step label on two or more ranks: slowest and fastest rank, and the skew (ns)."""
    if steps.empty:
        return pd.DataFrame(columns=list(SKEW_COLUMNS))
    df = steps[["rank", "step", "step_ns"]].copy()
    df["key"] = df["step"].astype(str)
    df["step_ns"] = df["step_ns"].astype(np.int64)
    n_ranks = df.groupby("key", sort=False)["rank"].nunique()
    df = df[df["key"].map(n_ranks).to_numpy() >= 2]
    if df.empty:
        return pd.DataFrame(columns=list(SKEW_COLUMNS))
    # first row per step after sorting: the slowest (or fastest) rank, ties to the lowest rank
    hi = df.sort_values(["key", "step_ns", "rank"], ascending=[True, False, True], kind="stable")
    lo = df.sort_values(["key", "step_ns", "rank"], ascending=[True, True, True], kind="stable")
    hi = hi.drop_duplicates("key").set_index("key")
    lo = lo.drop_duplicates("key").set_index("key")
    order = df.drop_duplicates("key")  # steps in their order of appearance
    keys = order["key"].to_numpy()
    max_ns = hi["step_ns"].reindex(keys).to_numpy().astype(np.int64)
    min_ns = lo["step_ns"].reindex(keys).to_numpy().astype(np.int64)
    return pd.DataFrame(
        {
            "step": order["step"].to_numpy(dtype=object),
            "n_ranks": n_ranks.reindex(keys).to_numpy().astype(np.int64),
            "slowest_rank": hi["rank"].reindex(keys).to_numpy().astype(np.int64),
            "fastest_rank": lo["rank"].reindex(keys).to_numpy().astype(np.int64),
            "max_step_ns": max_ns,
            "min_step_ns": min_ns,
            "skew_ns": max_ns - min_ns,
        },
        columns=list(SKEW_COLUMNS),
    )


def _step_split(
    m: pd.DataFrame, pieces: pd.DataFrame, sets: dict[str, Any], n_groups: int
) -> pd.DataFrame:
    """exposed_wait_ns / exposed_transfer_ns per step window (see the module docstring)."""
    idx = np.arange(n_groups, dtype=np.int64)
    if n_groups == 0:
        return pd.DataFrame({"step_index": idx, "exposed_wait_ns": idx, "exposed_transfer_ns": idx})
    eg, es, ee = sets["exposed"]
    exposed = np.bincount(eg, weights=(ee - es), minlength=n_groups).astype(np.int64)
    wait_end = pieces.merge(
        m[["instance_key", "rank", "start_ns", "wait_ns"]], on=["instance_key", "rank"]
    )
    ws = np.maximum(wait_end["ps"].to_numpy(), wait_end["start_ns"].to_numpy())
    we = np.minimum(
        wait_end["pe"].to_numpy(), (wait_end["start_ns"] + wait_end["wait_ns"]).to_numpy()
    )
    w = iv.grouped_union(wait_end["group"].to_numpy().astype(np.int64), ws, we, n_groups)
    ew = iv.grouped_intersect(sets["exposed"], w, n_groups)
    wait = np.bincount(ew[0], weights=(ew[2] - ew[1]), minlength=n_groups).astype(np.int64)
    return pd.DataFrame(
        {"step_index": idx, "exposed_wait_ns": wait, "exposed_transfer_ns": exposed - wait}
    )


def add_wait_transfer(
    steps: pd.DataFrame, windows: pd.DataFrame, coll: Collectives
) -> pd.DataFrame:
    """``steps`` (one row per window, in window order) with ``exposed_wait_ns`` and
    ``exposed_transfer_ns`` columns (ns) added; they sum to ``exposed_comm_ns`` on every row."""
    out = steps.copy()
    split = coll.step_split.set_index("step_index")
    key = (
        windows[["rank", "step", "step_index"]]
        .assign(step=lambda d: d["step"].astype(str))
        .set_index(["rank", "step"])["step_index"]
    )
    si = key.reindex(
        pd.MultiIndex.from_arrays([out["rank"].to_numpy(), out["step"].astype(str).to_numpy()])
    ).to_numpy()
    out["exposed_wait_ns"] = split["exposed_wait_ns"].reindex(si).to_numpy().astype(np.int64)
    out["exposed_transfer_ns"] = (
        split["exposed_transfer_ns"].reindex(si).to_numpy().astype(np.int64)
    )
    return out
