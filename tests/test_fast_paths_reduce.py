"""The cross-rank reduce's fast paths (issue 40) against the pandas code they replace: each must
give the same answer to the bit on random inputs, or an output would move."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import numpy.typing as npt
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from traceoverlap.core import intervals as iv
from traceoverlap.core.fmt import ms_unit as _ms
from traceoverlap.core.schema import (
    BOTTLENECK,
    COMM_NS,
    DEVICE,
    EXPOSED_COMM_NS,
    EXPOSED_UNMATCHED_NS,
    EXPOSED_WAIT_NS,
    IDEAL_NS,
    IDLE_NS,
    NS_METRICS,
    OVERLAP_NS,
    RANK,
    RATIO_METRICS,
    REASON,
    STEP,
    STEP_NS,
    WAIT_NS,
    WAITED_FOR_RANK,
)
from traceoverlap.core.vocab import BOTTLENECKS, as_label
from traceoverlap.rank.hostranges import COMM_CALLS
from traceoverlap.run.analysis import _gather_instances, _unmatched_why, _waited_for
from traceoverlap.run.findings import _names
from traceoverlap.run.job import _blame_keys, _factorize, _Ranges, top_blame
from traceoverlap.run.matching import (
    I64,
    SKEW_COLUMNS,
    STRAGGLER_COLUMNS,
    TOLERANCE_NS,
    UNKNOWN_GROUP,
    _consistent,
    _count_notes_of,
    _describe_group,
    _last_ranks_of,
    _offsets,
    _straggler_table,
    step_skew,
)
from traceoverlap.run.results import RunSummary, StepRef, Summary
from traceoverlap.run.summary import _ns_stats, _stats, summarize_run, unit_key

#: end times near a unix-clock epoch (float64 steps of 256 ns there) and small ones
ENDS = st.one_of(
    st.integers(0, 50), st.integers(1_700_000_000_000_000_000, 1_700_000_000_000_009_000)
)


def _offsets_pandas(m: pd.DataFrame, use: npt.NDArray[np.bool_]) -> dict[int, int]:
    """The replaced ``matching._offsets``: a pivot table and a BFS over its column pairs."""
    sub = m[use]
    off: dict[int, int] = {}
    if sub.empty:
        return off
    ends = sub.pivot_table(index="key", columns="unit", values="end_ns", aggfunc="max")
    cols = [int(c) for c in ends.columns]
    for root in cols:
        if root in off:
            continue
        off[root] = 0
        frontier = [root]
        while frontier:
            a = frontier.pop()
            for b in cols:
                if b in off:
                    continue
                both = ends[[a, b]].dropna()
                if both.empty:
                    continue
                d = (both[b].to_numpy(np.int64) - both[a].to_numpy(np.int64)).astype(np.float64)
                off[b] = off[a] + int(np.median(d))
                frontier.append(b)
    return off


@settings(max_examples=80, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 6), st.integers(0, 5), ENDS, st.booleans()), max_size=40))
def test_offsets_match_the_pivot_table_bfs(rows):
    # (key, unit, end, used): duplicate (key, unit) cells take their max; a missing cell makes
    # the pivot float64, rounding every end (the numpy table must round them alike)
    m = pd.DataFrame(
        {
            "key": np.array([r[0] for r in rows], np.int64),
            "unit": np.array([r[1] for r in rows], np.int64),
            "end_ns": np.array([r[2] for r in rows], np.int64),
        }
    )
    use = np.array([r[3] for r in rows], dtype=bool)
    assert _offsets(m, use) == _offsets_pandas(m, use)


def _unmatched_why_pandas(pr: pd.DataFrame, n_windows: int) -> list[str | None]:
    """The replaced ``analysis._unmatched_why``: a groupby of the texts, sorted per window."""
    out: list[str | None] = [None] * n_windows
    ns = pr[EXPOSED_UNMATCHED_NS.name].to_numpy(np.int64)
    rows = pr[ns > 0]
    if rows.empty:
        return out
    why = rows["unmatched_why"].fillna("no peer to match it with").astype(str)
    text = rows["name"].astype(str) + " on rank " + rows["rank"].astype(str) + ": " + why
    g = (
        pd.DataFrame(
            {"window": rows["window"].to_numpy(np.int64), "text": text.to_numpy(), "ns": ns[ns > 0]}
        )
        .groupby(["window", "text"], sort=False)
        .agg(ns=("ns", "sum"), n=("ns", "size"))
        .reset_index()
        .sort_values(["window", "ns", "text"], ascending=[True, False, True], kind="stable")
    )
    for w, part in g.groupby("window", sort=False):
        said = [
            (f"{n}x " if n > 1 else "") + t
            for t, n in zip(part["text"].tolist()[:2], part["n"].tolist()[:2], strict=True)
        ]
        more = len(part) - len(said)
        out[int(w)] = "; ".join(said) + (f"; and {more} more" if more > 0 else "")
    return out


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.sampled_from(["ncclAllReduce", "allgather", "b", "Ab"]),
            st.integers(0, 3),
            st.sampled_from([None, "count differs", "no peer", "a"]),
            st.integers(0, 4),
        ),
        max_size=30,
    )
)
def test_unmatched_why_matches_the_groupby(rows):
    # (window, name, rank, why, ns): texts summed per window, most ns first, ties by text
    pr = pd.DataFrame(
        {
            "window": np.array([r[0] for r in rows], np.int64),
            "name": [r[1] for r in rows],
            "rank": np.array([r[2] for r in rows], np.int64),
            "unmatched_why": [r[3] for r in rows],
            EXPOSED_UNMATCHED_NS.name: np.array([r[4] for r in rows], np.int64),
        }
    )
    got = _unmatched_why(cast(Any, SimpleNamespace(per_rank=pr)), 4)
    assert got == _unmatched_why_pandas(pr, 4)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(["a", "b", "\x01k", "c"]), st.none()), max_size=30))
def test_factorize_is_pandas_factorize(names):
    # str names take the dict; a null among them (code -1) takes pandas itself
    arr = np.array(names, dtype=object)
    codes, uniq = _factorize(arr)
    want_codes, want_uniq = pd.factorize(arr)
    assert codes.tolist() == want_codes.tolist()
    assert list(uniq) == list(want_uniq)


def _totals_all(r: _Ranges, lo: int, hi: int) -> dict[str, int]:
    """The replaced ``_Ranges.totals``: every range and call, not only those meeting [lo, hi)."""
    if r.s.size == 0 or hi <= lo:
        return {}
    a = np.maximum(r.s, lo)
    b = np.maximum(np.minimum(r.e, hi), a)
    inside = iv.grouped_covered(r.calls, np.zeros(a.size, np.int64), a, b, 1)
    if r.kernel.any():
        inside = np.where(r.kernel[r.codes], 0, inside)
    per = np.bincount(r.codes, weights=(b - a) - inside, minlength=r.names.size)
    hit = np.flatnonzero(per > 0)
    return {str(r.names[i]): int(per[i]) for i in hit.tolist()}


SPANS = st.tuples(st.integers(0, 60), st.integers(0, 20))


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(st.sampled_from(["a", "b", "\x01k"]), SPANS), max_size=20),
    st.lists(SPANS, max_size=6),
    SPANS,
)
def test_totals_on_the_ranges_met_are_totals_on_all(ranges, calls, window):
    # the calls are a union (disjoint), as host_ranges gives them
    cs, ce = iv.union(
        np.array([s for s, _ in calls], np.int64), np.array([s + d for s, d in calls], np.int64)
    )
    frame = pd.DataFrame(
        {
            "name": [n for n, _ in ranges] + [COMM_CALLS] * cs.size,
            "start_ns": np.array([s for _, (s, _) in ranges] + cs.tolist(), np.int64),
            "end_ns": np.array([s + d for _, (s, d) in ranges] + ce.tolist(), np.int64),
        }
    )
    r = _Ranges(frame)
    lo, hi = window[0], window[0] + window[1]
    assert r.totals(lo, hi) == _totals_all(r, lo, hi)


def _ref_row(row: pd.Series) -> StepRef:
    dev = row[DEVICE.name]
    return StepRef(
        rank=int(row[RANK.name]),
        device=None if dev is None or pd.isna(dev) else int(dev),
        step=as_label(row[STEP.name]),
        step_ns=int(row[STEP_NS.name]),
        exposed_comm_ns=int(row[EXPOSED_COMM_NS.name]),
        bottleneck=str(row[BOTTLENECK.name]),
        reason=str(row[REASON.name]),
    )


def _summarize_frame(df: pd.DataFrame) -> Summary:
    """The replaced ``summary.summarize``: read from the (sub-)frame, rows by label."""
    if df.empty:
        return Summary(n_steps=0)
    ns_cols = [col for col in NS_METRICS if col in df.columns]
    ns = np.stack([df[col].to_numpy(np.int64) for col in ns_cols])
    metrics = _ns_stats(ns_cols, ns)
    for col in RATIO_METRICS:
        if col in df.columns:
            metrics[col] = _stats(df[col])
    totals = dict(zip(ns_cols, ns.sum(axis=1).tolist(), strict=True))
    tc, ts, ti = totals[COMM_NS.name], totals[STEP_NS.name], totals[IDEAL_NS.name]
    counts = df[BOTTLENECK.name].value_counts()
    bottlenecks = {b: int(counts.get(b, 0)) for b in BOTTLENECKS if counts.get(b, 0)}
    dominant = max(BOTTLENECKS, key=lambda b: (int(counts.get(b, 0)), -BOTTLENECKS.index(b)))
    worst = df.loc[df[EXPOSED_COMM_NS.name].astype(np.int64).idxmax()]
    slowest = df.loc[df[STEP_NS.name].astype(np.int64).idxmax()]
    return Summary(
        n_steps=int(len(df)),
        metrics=metrics,
        totals=totals,
        overlap_ratio=totals[OVERLAP_NS.name] / tc if tc else None,
        exposed_comm_ratio=totals[EXPOSED_COMM_NS.name] / ts if ts else None,
        idle_ratio=totals[IDLE_NS.name] / ts if ts else None,
        potential_speedup=ts / ti if ti else None,
        bottlenecks=bottlenecks,
        dominant_bottleneck=dominant,
        worst_step=_ref_row(worst),
        slowest_step=_ref_row(slowest),
    )


def _summarize_run_groupby(df: pd.DataFrame) -> RunSummary:
    """The replaced ``summary.summarize_run``: a groupby, one sub-frame per unit."""
    per: dict[str, Summary] = {}
    if not df.empty:
        dev = df[DEVICE.name].astype(object)
        keyed = df.assign(_d=dev.where(dev.notna(), -1))
        n_units = keyed.groupby(RANK.name)["_d"].nunique()
        groups = list(keyed.groupby([RANK.name, "_d"], sort=True))
        if len(groups) == 1 and len(groups[0][1]) == len(df):
            (rank, d), _ = groups[0]
            run = _summarize_frame(df)
            per[unit_key(int(rank), None if d == -1 else int(d), int(n_units[rank]) > 1)] = run
            return RunSummary(run=run, ranks=per)
        for (rank, d), g in groups:
            several = int(n_units[rank]) > 1
            per[unit_key(int(rank), None if d == -1 else int(d), several)] = _summarize_frame(g)
    return RunSummary(run=_summarize_frame(df), ranks=per)


@settings(max_examples=25, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),  # rank
            st.sampled_from([None, 0, 1]),  # device
            st.integers(0, 3),  # step ns (ties: the first row wins)
            st.integers(0, 3),  # exposed ns
            st.one_of(st.none(), st.floats(0, 2)),  # a ratio, None where undefined
            st.sampled_from(BOTTLENECKS),
        ),
        max_size=12,
    )
)
def test_summarize_run_on_positions_is_the_groupby(rows):
    n = len(rows)
    df = pd.DataFrame(
        {
            **{
                col: np.array([(r[2] if col == STEP_NS.name else r[3]) + k for r in rows], np.int64)
                for k, col in enumerate(NS_METRICS)
            },
            **{col: pd.array([r[4] for r in rows], dtype="Float64") for col in RATIO_METRICS},
            RANK.name: np.array([r[0] for r in rows], np.int64),
            DEVICE.name: pd.array([r[1] for r in rows], dtype=object),
            STEP.name: pd.array([str(i % 3) if i % 4 else "all" for i in range(n)], dtype=object),
            BOTTLENECK.name: [r[5] for r in rows],
            REASON.name: [f"why {i}" for i in range(n)],
        }
    )
    assert repr(summarize_run(df)) == repr(_summarize_run_groupby(df))


def _blame_keys_pandas(credit: pd.DataFrame) -> list[tuple[object, ...]]:
    """The replaced head of ``job.blame_table``: groupby, sort, drop_duplicates, reindex."""
    key = ["window", "rank", "step", WAITED_FOR_RANK.name]
    cr = credit.assign(step=credit["step"].astype(str))
    by_inst = cr.groupby([*key, "instance"], sort=True)[EXPOSED_WAIT_NS.name].sum().reset_index()
    top = by_inst.sort_values([*key, EXPOSED_WAIT_NS.name], ascending=[*[True] * 4, False])
    top = top.drop_duplicates(key)
    total = cr.groupby(key, sort=True)[EXPOSED_WAIT_NS.name].sum()
    totals = total.reindex(pd.MultiIndex.from_frame(top[key])).to_numpy(np.int64)
    top = top.assign(total_ns=totals).sort_values(
        ["total_ns", "window", "rank"], ascending=[False, True, True], kind="stable"
    )
    return [
        (
            int(r.window),
            int(r.rank),
            r.step,
            int(r.waited_for_rank),
            int(r.instance),
            int(r.total_ns),
        )
        for r in top.itertuples(index=False)
    ]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),  # window
            st.integers(0, 2),  # rank
            st.sampled_from(["3", "10", "all", "2#2"]),  # step (not tied to the window here)
            st.integers(0, 2),  # rank waited for
            st.integers(0, 3),  # instance
            st.integers(1, 4),  # exposed wait ns
        ),
        min_size=1,
        max_size=25,
    )
)
def test_blame_keys_are_the_groupby_chain(rows):
    # per key, its summed wait and the instance holding most of it (ties: the lower one); keys
    # most waiting first, ties by window, rank, step and the rank waited for
    credit = pd.DataFrame(
        {
            "window": np.array([r[0] for r in rows], np.int64),
            "rank": np.array([r[1] for r in rows], np.int64),
            "step": np.array([r[2] for r in rows], dtype=object),
            "instance": np.array([r[4] for r in rows], np.int64),
            WAITED_FOR_RANK.name: np.array([r[3] for r in rows], np.int64),
            EXPOSED_WAIT_NS.name: np.array([r[5] for r in rows], np.int64),
        }
    )
    assert [tuple(k) for k in _blame_keys(credit)] == _blame_keys_pandas(credit)


def _step_skew_groupby(steps: pd.DataFrame) -> pd.DataFrame:
    """Per step label on two or more ranks: slowest and fastest rank, and the skew (ns)."""
    if steps.empty or steps["rank"].nunique() < 2:  # one rank: no step is on two
        return pd.DataFrame(columns=list(SKEW_COLUMNS))
    df = steps[["rank", "step", STEP_NS.name]].copy()
    df["key"] = df["step"].astype(str)
    df[STEP_NS.name] = df[STEP_NS.name].astype(np.int64)
    n_ranks = df.groupby("key", sort=False)["rank"].nunique()
    df = df[df["key"].map(n_ranks).to_numpy() >= 2]
    if df.empty:
        return pd.DataFrame(columns=list(SKEW_COLUMNS))
    hi = df.sort_values(["key", STEP_NS.name, "rank"], ascending=[True, False, True], kind="stable")
    lo = df.sort_values(["key", STEP_NS.name, "rank"], ascending=[True, True, True], kind="stable")
    hi = hi.drop_duplicates("key").set_index("key")
    lo = lo.drop_duplicates("key").set_index("key")
    order = df.drop_duplicates("key")
    keys = order["key"].to_numpy()
    max_ns = hi[STEP_NS.name].reindex(keys).to_numpy().astype(np.int64)
    min_ns = lo[STEP_NS.name].reindex(keys).to_numpy().astype(np.int64)
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


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),  # rank
            st.sampled_from([1, 2, 3, "2#2", "all"]),  # step label
            st.integers(0, 3),  # step ns (ties: the lower rank)
        ),
        max_size=20,
    ),
    st.booleans(),
)
def test_step_skew_in_a_dict_is_the_groupby(rows, ints):
    # labels all ints (an int64 column) or mixed (object); per label on 2+ ranks: the slowest
    # and fastest (ties to the lower rank), labels in order of first appearance
    steps = pd.DataFrame(
        {
            "rank": [r[0] for r in rows],
            "step": [r[1] if not ints or isinstance(r[1], int) else 9 for r in rows],
            STEP_NS.name: np.array([r[2] for r in rows], np.int64),
        }
    )
    got, want = step_skew(steps), _step_skew_groupby(steps)
    assert got.columns.tolist() == want.columns.tolist()
    assert got.dtypes.tolist() == want.dtypes.tolist()
    assert got.to_dict("list") == want.to_dict("list")


def _names_sorted(df: pd.DataFrame, col: str, limit: int = 3) -> tuple[str, ...]:
    """The collectives behind a finding, most exposed first: ``AllReduce #7 (rank 0 step 5,
    2.10 ms)``."""
    # only the four columns used, and no itertuples (a namedtuple type per call)
    cols = list(dict.fromkeys(("display", "where", col, "start_ns")))
    hit = df.loc[(df[col] > 0).to_numpy(), cols]
    top = hit.sort_values([col, "start_ns"], ascending=[False, True], kind="stable").head(limit)
    return tuple(
        f"{d} ({w}, {_ms(v)})"
        for d, w, v in zip(
            top["display"].tolist(), top["where"].tolist(), top[col].tolist(), strict=True
        )
    )


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.tuples(st.integers(-1, 3), st.integers(0, 3)), max_size=12),
    st.sampled_from(["int", "float", "Int64"]),
)
def test_names_by_lexsort_are_the_sorted_frame(rows, kind):
    # (ns, start): rows with ns > 0, most first, then the earlier start, then row order
    ns = [r[0] for r in rows]
    df = pd.DataFrame(
        {
            "display": [f"AllReduce #{i}" for i in range(len(rows))],
            "where": [f"rank {i % 2} step 1" for i in range(len(rows))],
            "x_ns": np.array(ns, np.int64) * 1000
            if kind == "int"
            else pd.array([v * 1000 for v in ns], dtype="Float64" if kind == "float" else "Int64"),
            "start_ns": np.array([r[1] for r in rows], np.int64),
        }
    )
    assert _names(df, "x_ns") == _names_sorted(df, "x_ns")
    assert _names(df, "x_ns", 1) == _names_sorted(df, "x_ns", 1)


def _last_ranks(inst: pd.DataFrame, m: pd.DataFrame, traces: Any, n: int) -> list[int | None]:
    """:func:`_last_ranks_of` on an instance frame's columns (how the reduce calls it)."""
    matched = inst["matched"].to_numpy(bool)
    key, ids = inst["key"].to_numpy(np.int64), inst["instance"].to_numpy(np.int64)
    return _last_ranks_of(matched, key, ids, m, traces, n)


def _count_notes(work: pd.DataFrame, *args: Any) -> list[str]:
    """:func:`_count_notes_of` on a frame's group key, match kind, unit and label columns."""
    rows = tuple(work[c].to_numpy(dtype=object) for c in ("group_key", "match_kind", "unit"))
    return _count_notes_of(cast(Any, rows), work["label"].to_numpy(dtype=object), *args)


def _last_ranks_merge(
    inst: pd.DataFrame, m: pd.DataFrame, traces: list[Any], out: pd.DataFrame
) -> list[int | None]:
    """The replaced arrival order of ``matching._tables``: a merge, a transform, a groupby."""
    key_to_inst = inst.loc[inst["matched"], ["key", "instance"]].drop_duplicates()
    al = m[["key", "unit", "aligned_start"]].merge(key_to_inst, on="key", how="inner")
    latest = al.groupby("instance")["aligned_start"].transform("max")
    at_latest = al[al["aligned_start"].to_numpy() == latest.to_numpy()]
    ties = at_latest.groupby("instance").size()
    last = {
        int(r.instance): traces[int(r.unit)].rank
        for r in at_latest.itertuples(index=False)
        if int(ties[r.instance]) == 1
    }
    return [last.get(int(i)) for i in out["instance"]]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.integers(-1, 4), max_size=12),
    st.lists(st.tuples(st.integers(0, 5), st.integers(0, 2), st.integers(0, 3)), max_size=15),
)
def test_last_ranks_are_the_merge(inst_keys, m_rows):
    # instances: one per matched key (key 5 in m is in no instance), one per unmatched row;
    # per instance the unit with the latest aligned start, None on a tie
    keys = sorted({k for k in inst_keys if k >= 0})
    ids = {k: i for i, k in enumerate(keys)}
    n_unmatched = sum(1 for k in inst_keys if k < 0)
    instance, extra = [], len(keys)
    for k in inst_keys:
        if k >= 0:
            instance.append(ids[k])
        else:
            instance.append(extra)
            extra += 1
    inst = pd.DataFrame(
        {
            "key": np.array(inst_keys, np.int64),
            "matched": np.array([k >= 0 for k in inst_keys], bool),
            "instance": np.array(instance, np.int64),
        }
    )
    m = pd.DataFrame(
        {
            "key": np.array([r[0] for r in m_rows], np.int64),
            "unit": np.array([r[1] for r in m_rows], np.int64),
            "aligned_start": np.array([r[2] for r in m_rows], np.int64),
        }
    )
    traces = [SimpleNamespace(rank=10 + u) for u in range(3)]
    n = len(keys) + n_unmatched
    out = pd.DataFrame({"instance": np.arange(n)})
    assert _last_ranks(inst, m, cast(Any, traces), n) == _last_ranks_merge(inst, m, traces, out)


def _straggler_table_groupby(
    per_rank: pd.DataFrame,
    instances: pd.DataFrame,
    ranks: I64,
    aligned: bool,
    credit: pd.DataFrame,
) -> pd.DataFrame:
    rank_arr = np.unique(ranks)
    pr = per_rank[per_rank["matched"].astype(bool)] if len(per_rank) else per_rank
    count = pr.groupby("rank")["instance"].size().reindex(rank_arr, fill_value=0)
    own_wait = pr.groupby("rank")[WAIT_NS.name].sum().reindex(rank_arr, fill_value=0)
    last_count = pd.Series(0, index=rank_arr, dtype=np.int64)
    waited_for = pd.Series(0, index=rank_arr, dtype=np.int64)
    inst = instances[instances["last_rank"].notna().to_numpy()] if len(instances) else instances
    if aligned and len(inst):
        last = inst["last_rank"].astype(np.int64)
        last_count = last.value_counts().reindex(rank_arr, fill_value=0).astype(np.int64)
    if aligned and len(pr):
        # every wait ns (hidden or not) of the others, credited as the exposed ones are
        wf = pr[pr[WAITED_FOR_RANK.name].notna().to_numpy()]
        waited_for = (
            wf.groupby(wf[WAITED_FOR_RANK.name].astype(np.int64))[WAIT_NS.name]
            .sum()
            .reindex(rank_arr, fill_value=0)
            .astype(np.int64)
        )
    out = pd.DataFrame(
        {
            "rank": rank_arr,
            "instances": count.to_numpy().astype(np.int64),
            "last_count": last_count.to_numpy().astype(np.int64),
            "last_ratio": pd.array(
                [
                    (lc / n if n and aligned else None)
                    for lc, n in zip(last_count.tolist(), count.tolist(), strict=True)
                ],
                dtype="Float64",
            ),
            "waited_for_ns": waited_for.to_numpy().astype(np.int64),
            WAIT_NS.name: own_wait.to_numpy().astype(np.int64),
            "exposed_waited_for_ns": credit.groupby(WAITED_FOR_RANK.name)[EXPOSED_WAIT_NS.name]
            .sum()
            .reindex(rank_arr, fill_value=0)
            .to_numpy()
            .astype(np.int64),
        },
        columns=list(STRAGGLER_COLUMNS),
    )
    out = out.sort_values(
        ["exposed_waited_for_ns", "last_count", "rank"],
        ascending=[False, False, True],
        kind="stable",
    )
    return out.reset_index(drop=True)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),  # rank (3: not a unit's, left out)
            st.booleans(),  # matched
            st.integers(0, 5),  # wait ns
            st.sampled_from([None, 0, 1, 2, 7]),  # rank waited for
        ),
        max_size=15,
    ),
    st.lists(st.sampled_from([None, 0, 1, 2, 5]), max_size=8),
    st.lists(st.tuples(st.sampled_from([-1, 0, 1, 2, 9]), st.integers(1, 5)), max_size=8),
    st.booleans(),
)
def test_straggler_table_sums_are_the_groupbys(pr_rows, last, credit_rows, aligned):
    # per rank: matched rows, their wait, times last, wait credited to it (hidden / exposed)
    per_rank = pd.DataFrame(
        {
            "instance": np.arange(len(pr_rows), dtype=np.int64),
            "rank": np.array([r[0] for r in pr_rows], np.int64),
            "matched": np.array([r[1] for r in pr_rows], bool),
            WAIT_NS.name: np.array([r[2] for r in pr_rows], np.int64),
            WAITED_FOR_RANK.name: [r[3] for r in pr_rows],
        }
    )
    instances = pd.DataFrame({"last_rank": pd.Series(last, dtype=object)})
    credit = pd.DataFrame(
        {
            WAITED_FOR_RANK.name: np.array([c[0] for c in credit_rows], np.int64),
            EXPOSED_WAIT_NS.name: np.array([c[1] for c in credit_rows], np.int64),
        }
    )
    ranks = np.array([0, 1, 2, 1], np.int64)
    got = _straggler_table(per_rank, instances, ranks, aligned, credit)
    want = _straggler_table_groupby(per_rank, instances, ranks, aligned, credit)
    pd.testing.assert_frame_equal(got, want)


def _gather_instances_per_unit(units: list[Any], offsets: I64) -> pd.DataFrame:
    """The replaced ``analysis._gather_instances``: an assign per unit, then one concat."""
    frames = []
    for i, u in enumerate(units):
        off = int(offsets[i])
        w = u.instances["window"]
        frames.append(u.instances.assign(unit=i, window=np.where(w >= 0, w + off, -1)))
    typed = [f for f in frames if len(f)] or frames
    if not typed:
        return pd.DataFrame(columns=["unit", "window"])
    return pd.concat(typed, ignore_index=True)


@settings(max_examples=50, deadline=None)
@given(st.lists(st.lists(st.integers(-1, 3), max_size=5), max_size=4))
def test_gather_instances_is_an_assign_per_unit(windows):
    # per unit its instances' local windows (-1: in none); a unit with none has the untyped
    # empty frame the rank stage gives; global window = local + the unit's offset
    units = [
        SimpleNamespace(
            instances=pd.DataFrame(
                {"name": [f"c{j}" for j in range(len(w))], "window": np.array(w, np.int64)}
            )
            if w
            else pd.DataFrame(columns=["name", "window"])
        )
        for w in windows
    ]
    offsets = np.cumsum([0] + [4] * len(units)).astype(np.int64)
    got = _gather_instances(cast(Any, units), cast(Any, SimpleNamespace(offsets=offsets)))
    pd.testing.assert_frame_equal(got, _gather_instances_per_unit(units, offsets))


def _waited_for_groupby(coll: Any, n_windows: int) -> list[int | None]:
    """Per window: the rank credited with most of its exposed waiting (docs/job-model.md;
    ties: the lower rank), None when it has none."""
    out: list[int | None] = [None] * n_windows
    cr = coll.credit
    if cr.empty:
        return out
    tot = cr.groupby(["window", WAITED_FOR_RANK.name])[EXPOSED_WAIT_NS.name].sum().reset_index()
    tot = tot.sort_values(
        ["window", EXPOSED_WAIT_NS.name, WAITED_FOR_RANK.name], ascending=[True, False, True]
    )
    for w, r in tot.drop_duplicates("window")[["window", WAITED_FOR_RANK.name]].itertuples(
        index=False
    ):
        out[int(w)] = int(r)
    return out


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(-1, 3), st.integers(0, 3), st.integers(1, 4)),
        max_size=20,
    )
)
def test_waited_for_in_dicts_is_the_groupby(rows):
    # (window, rank waited for, ns): per window the rank with the most ns, ties the lower
    credit = pd.DataFrame(
        {
            "window": np.array([r[0] for r in rows], np.int64),
            WAITED_FOR_RANK.name: np.array([r[1] for r in rows], np.int64),
            EXPOSED_WAIT_NS.name: np.array([r[2] for r in rows], np.int64),
        }
    )
    coll = cast(Any, SimpleNamespace(credit=credit))
    assert _waited_for(coll, 4) == _waited_for_groupby(coll, 4)


def _consistent_pandas(m: pd.DataFrame, offsets: dict[int, int]) -> npt.NDArray[np.bool_]:
    """The replaced ``consistent_with`` of ``matching._align_clocks``."""
    keys_m = m["key"].to_numpy()
    o = m["unit"].map(offsets).fillna(0).to_numpy(np.int64)
    latest = pd.Series(m["start_ns"].to_numpy(np.int64) - o).groupby(keys_m).transform("max")
    first_end = pd.Series(m["end_ns"].to_numpy(np.int64) - o).groupby(keys_m).transform("min")
    return np.asarray(latest.to_numpy() < first_end.to_numpy() + TOLERANCE_NS)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.integers(0, 3), ENDS, st.integers(0, 30_000)), max_size=20
    ),
    st.dictionaries(
        st.integers(0, 3),
        st.one_of(st.integers(-20_000, 20_000), st.integers(10**17, 10**17 + 999)),
        max_size=4,
    ),
)
def test_consistent_is_the_groupby_transform(rows, offsets):
    # (key, unit, start, duration); a unit without an offset takes 0, and then (as pandas' map
    # gave floats) every offset goes through float64: large ones round alike
    m = pd.DataFrame(
        {
            "key": np.array([r[0] for r in rows], np.int64),
            "unit": np.array([r[1] for r in rows], np.int64),
            "start_ns": np.array([r[2] for r in rows], np.int64),
            "end_ns": np.array([r[2] + r[3] for r in rows], np.int64),
        }
    )
    got = _consistent(
        m["key"].to_numpy(),
        m["unit"].tolist(),
        m["start_ns"].to_numpy(np.int64),
        m["end_ns"].to_numpy(np.int64),
        offsets,
    )
    assert got.tolist() == _consistent_pandas(m, offsets).tolist()


def _top_blame_groupby(blame: pd.DataFrame, limit: int = 3) -> pd.DataFrame:
    """The blame rows summed over steps per (waiting rank, chain, cause, whether the lateness
    began before the capture), most waiting first: what the reports print
    (``exposed_wait_ns``, ``lateness_ns``, ``cause_ns`` and ``late_at_start_ns`` summed;
    ``explained_ratio`` recomputed from the sums)."""
    if blame.empty:
        return blame
    before = blame["late_at_start_ns"]
    b = blame.assign(
        cause=blame["cause"].fillna(""),
        before=before.notna().to_numpy(),
        late_at_start_ns=before.fillna(0).to_numpy(np.int64),
    )
    key = ["rank", WAITED_FOR_RANK.name, "chain", "root_rank", "cause", "before"]
    summed = [EXPOSED_WAIT_NS.name, "lateness_ns", "cause_ns", "late_at_start_ns"]
    g = b.groupby(key, sort=False)[summed].sum()
    g = g.reset_index().sort_values([EXPOSED_WAIT_NS.name, "rank"], ascending=[False, True])
    g["cause"] = [c or None for c in g["cause"]]
    g["late_at_start_ns"] = pd.array(
        [int(v) if k else None for v, k in zip(g["late_at_start_ns"], g["before"], strict=True)],
        dtype="Int64",
    )
    g = g.drop(columns="before")
    late = g["lateness_ns"].to_numpy(np.int64)
    g["explained_ratio"] = [
        (int(c) / int(x)) if x > 0 else None for c, x in zip(g["cause_ns"], late, strict=True)
    ]
    return g.head(limit).reset_index(drop=True)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 2),  # rank
            st.sampled_from([(1,), (1, 2), (2,)]),  # chain (its first: the rank waited for)
            st.sampled_from([None, "expert", "aten::mm"]),  # cause
            st.one_of(st.none(), st.integers(0, 5)),  # late at start
            st.integers(1, 5),  # exposed wait
            st.integers(0, 5),  # lateness (0: no ratio)
            st.integers(0, 5),  # cause ns
        ),
        min_size=1,
        max_size=12,
    ),
    st.integers(1, 4),
)
def test_top_blame_in_a_dict_is_the_groupby(rows, limit):
    # summed per (rank, chain, cause, late before the capture), most waiting first
    blame = pd.DataFrame(
        {
            "rank": np.array([r[0] for r in rows], np.int64),
            WAITED_FOR_RANK.name: np.array([r[1][0] for r in rows], np.int64),
            "chain": pd.Series([r[1] for r in rows], dtype=object),
            "root_rank": np.array([r[1][-1] for r in rows], np.int64),
            "cause": [r[2] for r in rows],
            "late_at_start_ns": pd.array([r[3] for r in rows], dtype="Int64"),
            EXPOSED_WAIT_NS.name: np.array([r[4] for r in rows], np.int64),
            "lateness_ns": np.array([r[5] for r in rows], np.int64),
            "cause_ns": np.array([r[6] for r in rows], np.int64),
        }
    )
    got, want = top_blame(blame, limit), _top_blame_groupby(blame, limit)
    pd.testing.assert_frame_equal(got, want)


def _unequal_note(lab: object, g: object, desc: str, n_ok: int) -> str:
    """The note of a (group, kind) whose instance counts differ (both references' wording)."""
    return (
        f"{lab} in {_describe_group(str(g))}: instance counts differ across ranks "
        f"({desc}); matched the {n_ok} present on every rank, the rest left unmatched"
    )


def _count_notes_groupby(
    work: pd.DataFrame,
    ids: npt.NDArray[np.int64],
    complete: npt.NDArray[np.bool_],
    units_of: dict[object, tuple[int, ...]],
    unit_label: dict[int, str],
) -> list[str]:
    """A note per (group, kind) whose instance counts differ across its member units."""
    notes: list[str] = []
    w = work[work["group_key"] != UNKNOWN_GROUP]
    counts = w.groupby(["group_key", "match_kind", "unit"], sort=True).size()
    for (g, k), per in counts.groupby(level=[0, 1], sort=True):
        vals = per.droplevel([0, 1])
        expected = len(units_of.get(g, ()))
        if str(k).startswith("p2p:"):
            expected = 2
        if vals.nunique() > 1 or len(vals) != expected:
            sel = (work["group_key"] == g).to_numpy() & (work["match_kind"] == k).to_numpy()
            lab = work.loc[sel, "label"].iloc[0]
            desc = ", ".join(
                f"{unit_label[int(u)]}: {c}" for u, c in zip(vals.index, vals.tolist(), strict=True)
            )
            n_ok = len(np.unique(ids[sel & complete]))
            notes.append(_unequal_note(lab, g, desc, n_ok))
    return notes


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["g0", "g1", "\x00unknown", "\x00s7"]),  # group key
            st.sampled_from(["all_reduce", "p2p:0>1", "broadcast"]),  # match kind
            st.integers(0, 2),  # unit
        ),
        max_size=20,
    )
)
def test_count_notes_in_dicts_are_the_groupby(rows):
    # a note per (group, kind), in sorted order, whose per-unit counts differ or whose units
    # are not all its members (two for a p2p pair); units listed in order
    work = pd.DataFrame(
        {
            "group_key": [r[0] for r in rows],
            "match_kind": [r[1] for r in rows],
            "unit": np.array([r[2] for r in rows], np.int64),
            "label": [f"{r[1]}#{i}" for i, r in enumerate(rows)],
        }
    )
    ids = np.arange(len(rows), dtype=np.int64) % 3
    complete = ids != 1
    units_of: dict[object, tuple[int, ...]] = {"g0": (0, 1, 2), "g1": (0, 1), "\x00s7": (1, 2)}
    label = {0: "rank 0", 1: "rank 1", 2: "rank 2"}
    got = _count_notes(work, ids, complete, units_of, label)
    assert got == _count_notes_groupby(work, ids, complete, units_of, label)


# --- round 4: per-row Python loops of the reduce replaced by codes --------------------------------

#: texts as the traces give them: plain, non-ASCII, control characters, a surrogate escape
#: (a name that was not UTF-8), the empty text, the unknown group and nulls
TEXTS = st.one_of(
    st.sampled_from(["g0", "g1", "", "grüppe", "\x00stream#3", "a\x1fb", "x\udcff", UNKNOWN_GROUP]),
    st.none(),
    st.just(float("nan")),
)


def _texts(values: list[Any]) -> npt.NDArray[np.object_]:
    out = np.empty(len(values), dtype=object)
    out[:] = values
    return out


def _units_by_group_dicts(inst: pd.DataFrame) -> dict[object, set[int]]:
    """The replaced ``matching._units_by_group``: a dict per row."""
    seen: dict[object, set[int]] = {}
    for g, u in zip(inst["group_key"].tolist(), inst["unit"].tolist(), strict=True):
        if g is None or (isinstance(g, float) and g != g):
            continue
        got = seen.get(g)
        if got is None:
            seen[g] = {int(u)}
        else:
            got.add(int(u))
    return {g: seen[g] for g in sorted(seen)}  # type: ignore[type-var]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(TEXTS, st.integers(0, 4)), max_size=30), st.booleans())
def test_units_by_group_on_codes_is_the_dict_loop(rows, as_str):
    from traceoverlap.run.matching import _units_by_group

    keys = _texts([r[0] for r in rows])
    inst = pd.DataFrame(
        {
            # the analysis' column is pandas' str dtype (nulls NaN); object columns too
            "group_key": pd.array(keys, dtype="str") if as_str else keys,
            "unit": np.array([r[1] for r in rows], np.int64),
        }
    )
    got, want = _units_by_group(inst), _units_by_group_dicts(inst)
    assert got == want
    assert list(got) == list(want)  # sorted alike


def _count_notes_dicts(
    rows: tuple[npt.NDArray[Any], npt.NDArray[Any], npt.NDArray[Any]],
    label: npt.NDArray[np.object_],
    ids: npt.NDArray[np.int64],
    complete: npt.NDArray[np.bool_],
    units_of: dict[object, tuple[int, ...]],
    unit_label: dict[int, str],
) -> list[str]:
    """The replaced ``matching._count_notes_of``: rows counted in dicts, one per row."""
    notes: list[str] = []
    group, kind, unit = rows
    counts: dict[tuple[Any, Any], dict[Any, int]] = {}
    for g, k, u in zip(group.tolist(), kind.tolist(), unit.tolist(), strict=True):
        if g == UNKNOWN_GROUP or pd.isna(g) or pd.isna(k) or pd.isna(u):
            continue
        per_unit = counts.setdefault((g, k), {})
        per_unit[u] = per_unit.get(u, 0) + 1
    for g, k in sorted(counts):
        per_unit = counts[(g, k)]
        vals = [per_unit[u] for u in sorted(per_unit)]
        expected = len(units_of.get(g, ()))
        if str(k).startswith("p2p:"):
            expected = 2
        if len(set(vals)) > 1 or len(vals) != expected:
            sel = (group == g) & (kind == k)
            lab = label[np.flatnonzero(sel)[0]]
            desc = ", ".join(f"{unit_label[int(u)]}: {per_unit[u]}" for u in sorted(per_unit))
            n_ok = len(np.unique(ids[sel & complete]))
            notes.append(_unequal_note(lab, g, desc, n_ok))
    return notes


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.tuples(
            # few keys, so that a (group, kind) often has every member unit, in unequal counts
            st.sampled_from(["g0", "", "x\udcff", UNKNOWN_GROUP, None, float("nan")]),
            st.sampled_from(["all_reduce", "p2p:0>1", "bröadcast\x07", None]),
            st.integers(0, 3),
            st.integers(-1, 3),  # instance id
            st.booleans(),  # complete
        ),
        max_size=30,
    )
)
def test_count_notes_on_codes_are_the_dict_loop(rows):
    group = _texts([r[0] for r in rows])
    kind = _texts([r[1] for r in rows])
    unit = np.array([r[2] for r in rows], np.int64)
    label = _texts([f"{r[1]}#{i}" for i, r in enumerate(rows)])
    ids = np.array([r[3] for r in rows], np.int64)
    complete = np.array([r[4] for r in rows], dtype=bool)
    units_of: dict[object, tuple[int, ...]] = {"g0": (0, 1, 2), "": (0, 1), "x\udcff": (3,)}
    label_of = {u: f"rank {u}" for u in range(4)}
    args = ((group, kind, unit), label, ids, complete, units_of, label_of)
    assert _count_notes_of(*args) == _count_notes_dicts(*args)


def test_count_notes_of_unequal_counts_on_every_member():
    # g0's all_reduce on its 3 member units, twice on unit 0: counts differ (2, 1, 1) although
    # every member ran it; g1's p2p pair once on each of its 2 units: no note
    rows = [("g0", "all_reduce", 0), ("g0", "all_reduce", 0), ("g0", "all_reduce", 1)]
    rows += [("g0", "all_reduce", 2), ("g1", "p2p:0>1", 0), ("g1", "p2p:0>1", 1)]
    group, kind = _texts([r[0] for r in rows]), _texts([r[1] for r in rows])
    unit = np.array([r[2] for r in rows], np.int64)
    ids = np.array([0, 1, 0, 0, 2, 2], np.int64)
    complete = np.array([True, False, True, True, True, True])
    args = (
        (group, kind, unit),
        _texts(["ar#0", "ar#1", "ar#2", "ar#3", "p#4", "p#5"]),
        ids,
        complete,
        {"g0": (0, 1, 2), "g1": (0, 1)},
        {0: "rank 0", 1: "rank 1", 2: "rank 2"},
    )
    got = _count_notes_of(*args)  # type: ignore[arg-type]
    assert got == _count_notes_dicts(*args)  # type: ignore[arg-type]
    assert got == [
        "ar#0 in group 'g0': instance counts differ across ranks (rank 0: 2, rank 1: 1, "
        "rank 2: 1); matched the 1 present on every rank, the rest left unmatched"
    ]


def _groups_frame_dicts(inst: pd.DataFrame) -> pd.DataFrame:
    """The replaced ``matching._groups_frame``: first members and counts in dicts per row."""
    cols = ["group", "members", "n_instances"]
    if inst.empty:
        return pd.DataFrame(columns=cols)
    first: dict[Any, Any] = {}
    count: dict[Any, int] = {}
    for k, ms in zip(inst["group_key"].tolist(), inst["members"].tolist(), strict=True):
        if k is None or (isinstance(k, float) and k != k):
            continue
        count[k] = count.get(k, 0) + 1
        if k not in first and ms is not None and not (isinstance(ms, float) and ms != ms):
            first[k] = ms
    keys = sorted(count)
    return pd.DataFrame(
        {
            "group": [str(k) for k in keys],
            "members": [first.get(k) for k in keys],
            "n_instances": np.array([count[k] for k in keys], dtype=np.int64),
        },
        columns=cols,
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            TEXTS,
            st.one_of(st.none(), st.just(()), st.tuples(st.integers(0, 3), st.integers(0, 3))),
        ),
        max_size=25,
    )
)
def test_groups_frame_on_codes_is_the_dict_loop(rows):
    from traceoverlap.run.matching import _groups_frame

    inst = pd.DataFrame(
        {"group_key": _texts([r[0] for r in rows]), "members": _texts([r[1] for r in rows])}
    )
    got, want = _groups_frame(inst, []), _groups_frame_dicts(inst)
    pd.testing.assert_frame_equal(got, want)
    assert got["members"].tolist() == want["members"].tolist()  # the same tuples, not equal NaN


@settings(max_examples=60, deadline=None)
@given(st.lists(TEXTS, max_size=30))
def test_by_key_is_the_listcomp(keys):
    from traceoverlap.run.matching import _by_key

    table: dict[object, tuple[int, ...]] = {"g0": (0, 1), "grüppe": (2,), "x\udcff": ()}
    col = _texts(keys)
    got = _by_key(col, lambda g: table.get(g, ()))
    want = [table.get(g, ()) for g in col.tolist()]  # no null key: a null gets the default
    assert got.dtype == object and got.shape == (len(keys),)
    assert got.tolist() == want
    sizes = _by_key(col, lambda g: len(table.get(g, ()))).astype(np.int64)
    assert sizes.tolist() == [len(w) for w in want]


def _consistent_rows(
    units: list[int], offsets: dict[int, int]
) -> npt.NDArray[np.int64]:  # the replaced per-row offsets of _consistent
    got = [offsets.get(u) for u in units]
    if any(g is None for g in got):
        o = np.array([np.nan if g is None else g for g in got], dtype=np.float64)
        return np.nan_to_num(o, nan=0.0).astype(np.int64)
    return np.array(got, dtype=np.int64)


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 4), ENDS, ENDS), max_size=20),
    st.dictionaries(st.integers(0, 4), st.integers(-(2**60), 2**60), max_size=5),
)
def test_consistent_offsets_per_distinct_unit_are_the_per_row_ones(rows, offsets):
    # (key, unit, start, end): _consistent with the per-row offsets it replaced, through the
    # float64 round trip when a unit has none (the big offsets round there alike)
    keys = np.array([r[0] for r in rows], np.int64)
    units = [r[1] for r in rows]
    start = np.array([r[2] for r in rows], np.int64)
    end = np.array([r[3] for r in rows], np.int64)
    o = _consistent_rows(units, offsets)
    want = np.zeros(len(rows), dtype=bool)
    for k in set(keys.tolist()):
        sel = keys == k
        want[sel] = (start[sel] - o[sel]).max() < (end[sel] - o[sel]).min() + TOLERANCE_NS
    assert _consistent(keys, units, start, end, offsets).tolist() == want.tolist()


def _known_transfer_rows(
    inst: pd.DataFrame, m: pd.DataFrame, *, multi: bool, given: set[int] | None = None
) -> None:
    """The replaced ``matching._known_transfer``: absent ranks sorted per row."""
    from traceoverlap.run.matching import _transfer_outliers

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
        absent = [sorted(set(ms or ()) - given) for ms in mem]
        gap = np.array([bool(a) for a in absent], dtype=bool)
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


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(st.none(), st.just(()), st.sampled_from([(0, 1), (0, 1, 2, 3), (2, 3)])),
            st.integers(0, 3),  # key
            st.integers(0, 50),  # wait
            st.integers(1, 100),  # transfer
            st.booleans(),  # matched
        ),
        max_size=25,
    ),
    st.sampled_from([None, set(), {0, 1}, {0, 1, 2}]),
    st.booleans(),
)
def test_known_transfer_absent_ranks_per_distinct_members_are_per_row(rows, given_, multi):
    from traceoverlap.run.matching import _known_transfer

    n = len(rows)
    inst = pd.DataFrame(
        {
            "start_ns": np.arange(n, dtype=np.int64) * 1000,
            "end_ns": np.arange(n, dtype=np.int64) * 1000 + 200,
            "members": _texts([r[0] for r in rows]),
            "why": _texts([""] * n),
        },
        index=pd.RangeIndex(n) * 2,
    )
    matched = np.array([r[4] for r in rows], dtype=bool)
    m = pd.DataFrame(
        {
            WAIT_NS.name: np.array([r[2] for r in rows], np.int64),
            "key": np.array([r[1] for r in rows], np.int64),
            "transfer_ns": np.array([r[3] for r in rows], np.int64),
            "family": ["all_reduce"] * n,
            "bytes": np.full(n, 1024, np.int64),
        },
        index=inst.index,
    )[matched]
    a, b = inst.copy(), inst.copy()
    _known_transfer(a, m, multi=multi, given=given_)
    _known_transfer_rows(b, m, multi=multi, given=given_)
    pd.testing.assert_frame_equal(a, b)


def _size_words_dicts(coll: Any, pr: pd.DataFrame) -> list[str]:
    """The replaced ``analysis._size_words``: a dict over every instance row."""
    from traceoverlap.run.analysis import _float_or_nan

    inst = coll.instances
    if "busbw_gbps" not in inst.columns or inst.empty:
        return [""] * len(pr)
    of: dict[Any, tuple[Any, Any]] = {}
    for i, nb, bw in zip(
        inst["instance"].tolist(), inst["bytes"].tolist(), inst["busbw_gbps"].tolist(), strict=True
    ):
        of.setdefault(i, (nb, bw))
    got = [of.get(i, (None, None)) for i in pr["instance"].tolist()]
    size = np.array([_float_or_nan(x) for x, _ in got], dtype=np.float64)
    bus = np.array([_float_or_nan(x) for _, x in got], dtype=np.float64)
    return [
        ""
        if not b > 0
        else f" [{int(b) / 1e6:.2f} MB" + ("]" if w != w else f", {w:.1f} GB/s bus]")
        for b, w in zip(size.tolist(), bus.tolist(), strict=True)
    ]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 6),  # instance (repeated: the first row counts)
            st.one_of(st.none(), st.integers(-1, 1 << 40)),  # bytes
            st.one_of(st.none(), st.just(float("nan")), st.floats(0, 1e3)),  # bus bandwidth
        ),
        max_size=20,
    ),
    st.lists(st.integers(-1, 8), max_size=20),
    st.booleans(),
)
def test_size_words_by_unique_are_the_dict(inst_rows, want_ids, as_float):
    from traceoverlap.run.analysis import _size_words

    inst = pd.DataFrame(
        {
            "instance": np.array([r[0] for r in inst_rows], np.int64),
            "bytes": _texts([r[1] for r in inst_rows]),
            "busbw_gbps": _texts([r[2] for r in inst_rows]),
        }
    )
    ids = np.array(want_ids, np.int64)
    pr = pd.DataFrame({"instance": ids.astype(np.float64) if as_float else ids})
    coll = SimpleNamespace(instances=inst)
    assert _size_words(coll, pr) == _size_words_dicts(coll, pr)  # type: ignore[arg-type]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 2), st.integers(0, 2), TEXTS), max_size=30),
)
def test_cumcount_is_the_groupby_cumcount(rows):
    from traceoverlap.run.analysis import _cumcount

    df = pd.DataFrame(
        {
            "a": np.array([r[0] for r in rows], np.int64),
            "b": np.array([r[1] for r in rows], np.int64),
            "c": _texts([r[2] if isinstance(r[2], str) else "null" for r in rows]),
        }
    )
    codes = [np.asarray(pd.factorize(df[c].to_numpy())[0], dtype=np.int64) for c in df.columns]
    want = (df.groupby(["a", "b", "c"]).cumcount() + 1).tolist()
    assert _cumcount(*codes).tolist() == want


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),
            st.one_of(TEXTS, st.integers(0, 3), st.just(1.0), st.just(True), st.just(-0.0)),
        ),
        max_size=30,
    ),
    st.booleans(),
)
def test_where_words_per_distinct_pair_are_per_row(rows, several):
    from traceoverlap.run.analysis import _where_words

    rank = np.array([r[0] for r in rows], np.int64)
    step = _texts([r[1] for r in rows])
    want = [
        (f"rank {r} step {s}" if several else f"step {s}")
        for r, s in zip(rank.tolist(), step.tolist(), strict=True)
    ]
    assert _where_words(rank, step, several) == want


def _add_bandwidth_rows(instances: pd.DataFrame, world_size: int | None) -> pd.DataFrame:
    """The replaced ``bandwidth.add_bandwidth``: the bus factor per row."""
    from traceoverlap.run.bandwidth import bus_factor

    df = instances.copy()
    if df.empty:
        return df.assign(group_ranks=[], algbw_gbps=[], busbw_gbps=[])
    nbytes = pd.to_numeric(df["bytes"], errors="coerce").fillna(-1).to_numpy(np.float64)
    transfer = pd.to_numeric(df["transfer_ns"], errors="coerce").fillna(0).to_numpy(np.float64)
    n_ranks = df["n_ranks"].astype(np.int64).to_numpy()
    matched = df["matched"].astype(bool).to_numpy()
    group = [
        int(k) if (m and k >= 2) else world_size
        for k, m in zip(n_ranks.tolist(), matched.tolist(), strict=True)
    ]
    ok = (nbytes > 0) & (transfer > 0)
    alg = np.where(ok, nbytes / np.where(transfer > 0, transfer, 1), np.nan)
    factors = [bus_factor(str(nm), g) for nm, g in zip(df["name"], group, strict=True)]
    bus = [
        None if (not o or f is None) else float(a * f)
        for a, f, o in zip(alg.tolist(), factors, ok.tolist(), strict=True)
    ]
    df["group_ranks"] = pd.array(group, dtype=object)
    df["algbw_gbps"] = pd.array(
        [float(a) if o else None for a, o in zip(alg, ok, strict=True)], dtype=object
    )
    df["busbw_gbps"] = pd.array(bus, dtype=object)
    return df


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.one_of(
                st.sampled_from(["ncclAllReduce", "all_gather", "bröadcast", "x\udcff", "send"]),
                st.none(),
            ),
            st.one_of(st.none(), st.integers(-1, 1 << 40)),  # bytes
            st.integers(0, 10**6),  # transfer
            st.integers(0, 8),  # n_ranks
            st.booleans(),  # matched
        ),
        max_size=20,
    ),
    st.sampled_from([None, 0, 1, 8]),
)
def test_add_bandwidth_factor_per_distinct_name_is_per_row(rows, world):
    from traceoverlap.run.bandwidth import add_bandwidth

    inst = pd.DataFrame(
        {
            "name": pd.array([r[0] for r in rows], dtype="str"),
            "bytes": _texts([r[1] for r in rows]),
            "transfer_ns": np.array([r[2] for r in rows], np.int64),
            "n_ranks": np.array([r[3] for r in rows], np.int64),
            "matched": np.array([r[4] for r in rows], dtype=bool),
        }
    )
    got, want = add_bandwidth(inst, world), _add_bandwidth_rows(inst, world)
    pd.testing.assert_frame_equal(got, want)
    for c in ("group_ranks", "algbw_gbps", "busbw_gbps"):  # the same objects: float, not numpy
        assert [type(x) for x in got[c]] == [type(x) for x in want[c]]


@settings(max_examples=80, deadline=None)
@given(
    st.lists(
        st.one_of(
            st.none(),
            st.just(float("nan")),
            st.just(pd.NA),
            st.integers(-(2**63), 2**63 - 1),
            st.integers(0, 5).map(np.int64),
        ),
        max_size=20,
    ),
    st.sampled_from([None, 1.5, "3", True]),  # a value that is not an integer, or none
)
def test_object_int_casts_are_pandas_casts(values, other):
    from traceoverlap.core.schema import _as_nullable_int, _label_texts, _unknown_as_na

    if other is not None:
        values = [*values, other]
    s = pd.Series(_texts(values), index=pd.RangeIndex(len(values)) + 3, name="c")

    def outcome(f: Any) -> Any:
        try:
            return ("ok", f())
        except (TypeError, ValueError, OverflowError) as e:
            return ("raised", type(e).__name__)

    def same(a: Any, b: Any) -> None:
        assert a[0] == b[0]
        if a[0] == "ok":
            pd.testing.assert_series_equal(a[1], b[1], check_exact=True)
        else:  # pandas' cast and ours refuse alike (the error's kind may differ)
            pass

    same(outcome(lambda: _as_nullable_int(s)), outcome(lambda: s.astype("Int64")))
    same(
        outcome(lambda: _label_texts(s).astype("string")),
        outcome(lambda: s.map(str, na_action="ignore").astype("string")),
    )
    same(
        outcome(lambda: _unknown_as_na(s)),
        outcome(lambda: s.astype("Int64").mask((s.astype("Int64") < 0).fillna(False))),
    )


@settings(max_examples=60, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.integers(0, 7), st.just(2**63 + 1)), min_size=1, max_size=4),
    st.lists(st.integers(0, 3), max_size=20),
)
def test_devices_per_distinct_unit_infer_as_per_row(devices, units):
    from traceoverlap.run.matching import _devices

    unit = np.array([u % len(devices) for u in units], np.int64)
    want = pd.Series([devices[u] for u in unit.tolist()]).astype(object).to_numpy()
    got = _devices(devices, unit)
    assert got.dtype == want.dtype == object
    # the same values of the same types (1 and 1.0 differ in a text; NaN equals NaN here)
    assert [(type(x), str(x)) for x in got] == [(type(x), str(x)) for x in want]


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(TEXTS, st.just("its group's rank 3 is not in the trace")), max_size=20))
def test_whys_per_distinct_text_are_per_row(whys):
    from traceoverlap.run.matching import _whys

    why = _texts(whys)
    want = [str(w) or None for w in why.tolist()]
    assert _whys(why) == want


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(-(2**63), 2**63 - 1), max_size=20))
def test_int_or_none_is_the_listcomp(values):
    from traceoverlap.run.matching import _int_or_none

    a = np.array(values, dtype=np.int64)
    want = [(int(r) if r >= 0 else None) for r in a]
    got = _int_or_none(a)
    assert got == want and [type(x) for x in got] == [type(x) for x in want]


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["all_reduce", "all_to_all", "send_recv", "allgather_reducescatter"]),
            st.sampled_from(["nccl:all_reduce", "deep_ep dispatch", "grüppe\x07", "x\udcff"]),
            st.sampled_from(["", "ncclKernel_Broadcast", "fsdp gather", "combine"]),
            st.integers(0, 2**20 - 1),  # one bit per flag (a bit past them: unused)
        ),
        max_size=30,
    ),
    st.booleans(),
    st.booleans(),
    st.sampled_from([0, 1024]),
)
def test_purposes_per_distinct_signature_are_per_row(rows, ddp, bwd, per_row_below):
    from traceoverlap.rank import purpose
    from traceoverlap.rank.purpose import PATTERNS, _purpose, _purposes

    fam = _texts([r[0] for r in rows])
    label, kernel = _texts([r[1] for r in rows]), _texts([r[2] for r in rows])
    names = [*PATTERNS, "side"]
    bits = [r[3] for r in rows]
    flag = {k: np.array([bool(b >> j & 1) for b in bits], dtype=bool) for j, k in enumerate(names)}
    want = [
        _purpose(i, fam[i], f"{label[i]} {kernel[i]}", flag, ddp, bwd) for i in range(len(rows))
    ]
    saved = purpose._PER_ROW_BELOW
    purpose._PER_ROW_BELOW = per_row_below  # 0: the codes path even for a few rows
    try:
        got = _purposes(fam, (label, kernel), flag, ddp, bwd)
    finally:
        purpose._PER_ROW_BELOW = saved
    assert got.dtype == object and got.tolist() == want
