"""Round 3 fast paths of the cross-rank reduce (issue 40) against the pandas code they replace:
each must give the same answer to the bit on random inputs, or an output would move."""

from __future__ import annotations

from collections.abc import Sequence
from types import SimpleNamespace
from typing import Any, cast

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st
from test_fast_paths_reduce import _last_ranks  # the frame-taking form, as the reduce used it

from traceoverlap.core import intervals as iv
from traceoverlap.core.model import TraceInfo
from traceoverlap.core.schema import (
    EXPOSED_NS,
    EXPOSED_UNMATCHED_NS,
    WAIT_NS,
    WAITED_FOR_RANK,
)
from traceoverlap.core.vocab import CAUSES, FAMILIES
from traceoverlap.rank.instances import known_ns
from traceoverlap.run.findings import _sum_where, _top_family
from traceoverlap.run.job import waited_for_ranks
from traceoverlap.run.matching import (
    I64,
    INSTANCE_COLUMNS,
    MAX_UNIX_SKEW_NS,
    PER_RANK_COLUMNS,
    CauseSets,
    _align_clocks,
    _arrivals,
    _consistent,
    _family_causes,
    _groups_frame,
    _ngroup,
    _offsets,
    _p2p_direction,
    _p2p_waits,
    _tables,
    _transfer_outliers,
    _unit_offsets,
    _units_by_group,
)
from traceoverlap.run.matching import TRANSFER_OUTLIER_MIN as MIN
from traceoverlap.run.matching import TRANSFER_OUTLIER_RATIO as RATIO


def _tables_frame(
    inst: pd.DataFrame,
    m: pd.DataFrame,
    traces: Sequence[TraceInfo],
    window_labels: Sequence[object],
    clock: str | None,
) -> tuple[pd.DataFrame, pd.DataFrame, pd.Series]:
    """The replaced ``matching._tables``: the instance table (matched instances and each unit's unmatched ones, numbered by first
    start), the per-(instance, unit) table, and per row of ``inst`` its instance id."""
    inst = inst[inst["window"] >= 0].copy()
    if inst.empty:
        return (
            pd.DataFrame(columns=list(INSTANCE_COLUMNS)),
            pd.DataFrame(columns=list(PER_RANK_COLUMNS)),
            pd.Series(np.zeros(0, np.int64)),
        )
    inst["_row"] = inst.index.to_numpy()
    labels = np.array(list(window_labels) + ["-"], dtype=object)
    inst["step"] = labels[inst["window"].to_numpy()]
    unit = inst["unit"].to_numpy(np.int64)
    inst["rank"] = np.array([t.rank for t in traces], dtype=np.int64)[unit]
    devices = [t.device for t in traces]
    inst["device"] = [devices[u] for u in unit.tolist()]  # a list: pandas infers as it did
    inst["matched"] = inst["key"] >= 0
    # one group per matched key, one per unmatched local instance
    grp = np.where(inst["matched"], inst["key"], -1 - np.arange(len(inst))).astype(np.int64)
    # number the groups by their first start (ties by group key): numpy on a few hundred rows,
    # where pandas' groupby / sort / reindex cost milliseconds
    ugrp, ginv = np.unique(grp, return_inverse=True)
    gfirst = iv.group_min_max(ginv, *(2 * (inst["start_ns"].to_numpy(np.int64),)), ugrp.size)[0]
    rank_of = np.empty(ugrp.size, dtype=np.int64)
    rank_of[np.lexsort((ugrp, gfirst))] = np.arange(ugrp.size, dtype=np.int64)
    inst["instance"] = rank_of[ginv]
    by = np.lexsort((inst["unit"].to_numpy(np.int64), inst["instance"].to_numpy()))  # stable
    inst = inst.take(by).reset_index(drop=True)
    per_rank = pd.DataFrame(
        {
            "instance": inst["instance"].to_numpy().astype(np.int64),
            "unit": inst["unit"].to_numpy().astype(np.int64),
            "rank": inst["rank"].to_numpy().astype(np.int64),
            "device": inst["device"].astype(object).to_numpy(),
            "step": inst["step"].to_numpy(),
            "window": inst["window"].to_numpy().astype(np.int64),
            "name": inst["label"].astype(str).to_numpy(),
            "kernel": inst["kernel"].astype(str).to_numpy(),
            "family": inst["family"].to_numpy(),
            "lane": inst["lane"].astype(str).to_numpy(),
            "start_ns": inst["start_ns"].to_numpy(np.int64),
            "end_ns": inst["end_ns"].to_numpy(np.int64),
            "dur_ns": inst["dur_ns"].to_numpy(np.int64),
            WAIT_NS.name: inst[WAIT_NS.name].to_numpy(np.int64),
            EXPOSED_NS.name: inst[EXPOSED_NS.name].to_numpy(np.int64),
            **{f"exposed_{c}_ns": inst[f"exposed_{c}_ns"].to_numpy(np.int64) for c in CAUSES},
            EXPOSED_UNMATCHED_NS.name: inst[EXPOSED_UNMATCHED_NS.name].to_numpy(np.int64),
            "unmatched_why": [(str(w) or None) for w in inst["why"].tolist()],
            "same_stream": inst["same_stream"].astype(bool).to_numpy(),
            # nullable: <NA> where the launch is unknown (internally -1)
            "queued_ns": known_ns(inst["queued_ns"].to_numpy(np.int64)),
            "behind_comm_ns": known_ns(inst["behind_comm_ns"].to_numpy(np.int64)),
            "matched": inst["matched"].to_numpy(bool),
            "aligned_start_ns": inst["aligned_start"].to_numpy(np.int64),
            "aligned_end_ns": (inst["aligned_start"] + inst["dur_ns"]).to_numpy(np.int64),
            WAITED_FOR_RANK.name: [(int(r) if r >= 0 else None) for r in inst["waited_for"]],
        },
        columns=list(PER_RANK_COLUMNS),
    )
    row_instance = pd.Series(inst["instance"].to_numpy(np.int64), index=inst["_row"].to_numpy())
    # rows sorted by instance: each instance's rows are a run, its first row starts it
    ids = inst["instance"].to_numpy(np.int64)
    new = np.ones(ids.size, dtype=bool)
    new[1:] = ids[1:] != ids[:-1]
    heads = np.flatnonzero(new)
    sizes = np.diff(np.append(heads, ids.size))
    first = per_rank.iloc[heads]
    matched = first["matched"].to_numpy(bool)

    def firsts(col: str) -> list[Any]:
        """Per instance, ``inst.groupby("instance")[col].first()``: the first non-null value."""
        values = inst[col]
        if bool(values.isna().any()):  # first() skips nulls (never there in practice)
            return list(values.groupby(ids, sort=True).first().tolist())
        return list(values.to_numpy()[heads].tolist())

    def per_run(col: pd.Series, op: np.ufunc) -> I64:
        return np.asarray(op.reduceat(col.to_numpy(np.int64), heads), dtype=np.int64)

    ranks = per_rank["rank"].to_numpy(np.int64).tolist()
    nbytes = inst["bytes"]
    if nbytes.dtype == np.int64:
        most = per_run(nbytes, np.maximum).tolist()
    else:
        most = nbytes.groupby(ids, sort=True).max().tolist()
    out = pd.DataFrame(
        {
            "instance": ids[heads],
            "name": first["name"].to_numpy(),
            "family": first["family"].to_numpy(),
            "process_group": [(p or None) for p in firsts("process_group")],
            "seq": [(int(s) if s >= 0 else None) for s in firsts("seq")],
            "bytes": [(int(b) if b >= 0 else None) for b in most],
            "n_ranks": sizes.astype(np.int64),
            "ranks": [
                tuple(ranks[a:b])
                for a, b in zip(heads.tolist(), (heads + sizes).tolist(), strict=True)
            ],
            "step": first["step"].to_numpy(),
            "start_ns": per_run(per_rank["start_ns"], np.minimum),
            "transfer_ns": per_run(per_rank["dur_ns"], np.minimum),
            WAIT_NS.name: per_run(per_rank[WAIT_NS.name], np.add),
            "last_rank": [None] * len(first),
            EXPOSED_NS.name: per_run(per_rank[EXPOSED_NS.name], np.add),
            "matched": matched,
            "group": [str(x) for x in firsts("group_key")],
            "members": firsts("members"),
            "p2p": np.array(firsts("p2p"), dtype=bool),
            "src_rank": [(int(x) if x >= 0 else None) for x in firsts("src_rank")],
            "dst_rank": [(int(x) if x >= 0 else None) for x in firsts("dst_rank")],
            "last_arrival_ns": [
                (int(x) if f else None)
                for x, f in zip(firsts("last_arrival"), matched.tolist(), strict=True)
            ],
            "transfer_outlier": np.array(firsts("transfer_outlier"), dtype=bool),
        },
        columns=list(INSTANCE_COLUMNS),
    )
    if clock is not None and len(m):
        # arrival order: the unit with the latest aligned start, None on a tie
        out["last_rank"] = _last_ranks(inst, m, traces, len(out))
    out["last_rank"] = out["last_rank"].astype(object)
    return out, per_rank, row_instance


def _assert_same_frames(a: pd.DataFrame, b: pd.DataFrame) -> None:
    assert list(a.columns) == list(b.columns)
    assert list(a.dtypes.astype(str)) == list(b.dtypes.astype(str))
    pd.testing.assert_frame_equal(a, b, check_exact=True)
    for c in a.columns:  # the same Python types in object columns (the json writer sees them)
        assert [type(x) for x in a[c].tolist()] == [type(x) for x in b[c].tolist()], c


ROWS = st.lists(
    st.tuples(
        st.integers(-1, 4),  # key (-1: unmatched)
        st.integers(0, 2),  # unit
        st.integers(-1, 2),  # window (-1: outside every step)
        st.integers(0, 30),  # start
        st.integers(0, 9),  # duration, and the other ns columns derived from it
        st.sampled_from(["", "pg0", "pg1"]),  # process group
        st.booleans(),  # p2p, same_stream, transfer_outlier
    ),
    max_size=12,
)


@settings(max_examples=40, deadline=None)
@given(
    ROWS,
    st.sampled_from(["int", "none", "mixed"]),
    st.sampled_from(["int", "float"]),
    st.sampled_from([None, "estimated"]),
    st.lists(st.tuples(st.integers(-1, 5), st.integers(0, 2), st.integers(0, 9)), max_size=8),
)
def test_tables_are_the_frame_code(rows, devices, nbytes, clock, m_rows):
    # the numpy columns of _tables against the copy / assign / take / reset_index it replaces,
    # on a shuffled unique index (row_instance keys on it) and every device dtype pandas infers
    n = len(rows)
    r = np.array(rows, dtype=object).reshape(n, 7) if n else np.zeros((0, 7), dtype=object)
    ints = [[int(x) for x in r[:, j]] for j in (0, 1, 2, 3, 4)]
    key, unit, window, start, dur = (np.array(c, dtype=np.int64) for c in ints)
    flag = np.array([bool(x) for x in r[:, 6]], dtype=bool)
    pg = [str(x) for x in r[:, 5]]
    by = {"bytes": (dur * 100 - 300) if nbytes == "int" else np.where(dur > 4, dur * 100.0, np.nan)}
    inst = pd.DataFrame(
        {
            "window": window,
            "key": key,
            "unit": unit,
            "start_ns": start,
            "end_ns": start + dur,
            "dur_ns": dur,
            "label": [f"AllReduce{k}" for k in key.tolist()],
            "kernel": [f"k{u}" for u in unit.tolist()],
            "family": ["all_reduce" if f else "send_recv" for f in flag.tolist()],
            "lane": [f"stream {u}" for u in unit.tolist()],
            WAIT_NS.name: dur // 2,
            **{f"exposed_{c}_ns": (dur + i) % 3 for i, c in enumerate(CAUSES)},
            EXPOSED_NS.name: dur % 4,
            EXPOSED_UNMATCHED_NS.name: dur % 2,
            "why": ["" if k >= 0 else "absent on rank 1" for k in key.tolist()],
            "same_stream": flag,
            "queued_ns": dur - 3,
            "behind_comm_ns": start % 3 - 1,
            "aligned_start": start - unit,
            "waited_for": np.where(flag, unit, -1),
            **by,
            "process_group": pg,
            "seq": key - 1,
            "group_key": pg,
            "members": [(0, 1) if f else (0, 1, 2) for f in flag.tolist()],
            "p2p": flag,
            "src_rank": np.where(flag, unit, -1),
            "dst_rank": np.where(flag, 2 - unit, -1),
            "last_arrival": start + 5,
            "transfer_outlier": ~flag,
        },
        index=np.random.default_rng(n).permutation(n) * 3 + 7,
    )
    m = pd.DataFrame(
        {
            "key": np.array([x[0] for x in m_rows], np.int64),
            "unit": np.array([x[1] for x in m_rows], np.int64),
            "aligned_start": np.array([x[2] for x in m_rows], np.int64),
        }
    )
    dev: dict[str, list[Any]] = {"int": [0, 1, 2], "none": [None] * 3, "mixed": [0, None, 2]}
    traces = [SimpleNamespace(rank=10 + u, device=dev[devices][u]) for u in range(3)]
    labels = ["step 1", "step 2", 3]
    got = _tables(inst, m, cast(Any, traces), labels, clock)
    want = _tables_frame(inst, m, cast(Any, traces), labels, clock)
    _assert_same_frames(got[0], want[0])
    _assert_same_frames(got[1], want[1])
    pd.testing.assert_series_equal(got[2], want[2], check_exact=True)


def _transfer_outliers_frame(
    key: I64, transfer: I64, family: np.ndarray, nbytes: I64
) -> tuple[np.ndarray, I64, dict[int, str]]:
    """The replaced outlier search of ``matching._known_transfer``: a groupby agg per key, then
    a median and a size transform per (family, bytes), and a reindex back to the rows."""
    per_key = (
        pd.DataFrame({"key": key, "transfer": transfer, "family": family, "bytes": nbytes})
        .groupby("key", sort=True)
        .agg(transfer=("transfer", "min"), family=("family", "first"), bytes=("bytes", "max"))
    )
    hit = np.zeros(key.size, dtype=bool)
    expected_row = np.zeros(key.size, dtype=np.int64)
    words: dict[int, str] = {}
    sized = per_key[per_key["bytes"].to_numpy() > 0]
    if len(sized):
        g = sized.groupby(["family", "bytes"], sort=False)["transfer"]
        med = g.transform("median").to_numpy(np.float64)
        n = g.transform("size").to_numpy(np.int64)
        t = sized["transfer"].to_numpy(np.int64)
        out = (n >= MIN) & (med > 0) & (t > RATIO * med)
        if out.any():
            expected = pd.Series(np.floor(med[out]).astype(np.int64), index=sized.index[out])
            words = {
                int(k): (
                    f"its transfer estimate {t[i] / 1e6:.3f} ms is {t[i] / med[i]:.1f}x the "
                    f"median of the {int(n[i])} {fam} instances of its size: waiting or "
                    "contention, not bandwidth"
                )
                for i, (k, fam) in enumerate(
                    zip(sized.index.tolist(), sized["family"].tolist(), strict=True)
                )
                if out[i]
            }
            exp_row = expected.reindex(key).to_numpy(np.float64)
            hit = ~np.isnan(exp_row)
            expected_row[hit] = exp_row[hit].astype(np.int64)
    return hit, expected_row, words


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 12),  # key
            st.integers(0, 40),  # transfer: 3x a median of small integers happens often
            st.sampled_from(["all_reduce", "all_gather", "all_to_all"]),
            st.sampled_from([-1, 0, 64, 128]),  # bytes (<= 0: unsized)
        ),
        max_size=40,
    ),
    st.sampled_from([1, 1_000_000_007, 2**40 + 1]),
)
def test_transfer_outliers_are_the_groupby(rows, scale):
    # per key the least transfer, its first family, the most bytes; an outlier is over 3x the
    # median (a middle value, or the mean of the middle two) of at least 5 keys of its family
    # and size: the numpy reduction must give the groupby's rows, expected ns and words
    key = np.array([r[0] for r in rows], np.int64)
    transfer = np.array([r[1] for r in rows], np.int64) * scale
    family = np.array([r[2] for r in rows], dtype=object)
    nbytes = np.array([r[3] for r in rows], np.int64)
    # a key's family may differ by row: first() keeps the first
    hit, expected, words = _transfer_outliers(key, transfer, family, nbytes)
    want_hit, want_expected, want_words = _transfer_outliers_frame(key, transfer, family, nbytes)
    assert hit.tolist() == want_hit.tolist()
    assert expected[hit].tolist() == want_expected[want_hit].tolist()
    assert words == want_words


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.integers(0, 4), max_size=10),
    st.dictionaries(
        st.integers(0, 4), st.one_of(st.integers(-50, 50), st.integers(2**53, 2**53 + 99))
    ),
)
def test_unit_offsets_are_the_map(units, off):
    # a unit without an offset takes 0, and then every offset goes through float64 (ns past
    # 2**53 round to even), as Series.map(off).fillna(0) gave
    unit = np.array(units, dtype=np.int64)
    want = pd.Series(unit).map(off).fillna(0).to_numpy(np.int64)
    got = _unit_offsets(unit, off)
    assert got.dtype == np.int64
    assert got.tolist() == want.tolist()


def _arrivals_loc(inst: pd.DataFrame, m: pd.DataFrame, unit_rank: I64) -> None:
    """The replaced ``matching._arrivals``: loc reads and writes by m's index labels."""
    inst["aligned_start"] = inst["start_ns"].to_numpy(np.int64)
    inst["last_arrival"] = -1
    inst["waited_for"] = -1
    if m.empty:
        return
    idx = m.index
    inst.loc[idx, "aligned_start"] = m["aligned_start"].to_numpy(np.int64)
    peer = inst.loc[idx, "src_rank"].to_numpy(np.int64)
    rank = unit_rank[inst.loc[idx, "unit"].to_numpy(np.int64)]
    dst = inst.loc[idx, "dst_rank"].to_numpy(np.int64)
    peer = np.where(peer == rank, dst, peer)
    target, latest = waited_for_ranks(
        m["key"].to_numpy(np.int64),
        rank,
        m["aligned_start"].to_numpy(np.int64),
        inst.loc[idx, WAIT_NS.name].to_numpy(np.int64),
        peer,
    )
    inst.loc[idx, "last_arrival"] = latest
    inst.loc[idx, "waited_for"] = target


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(-1, 3),  # key
            st.integers(0, 2),  # unit
            st.integers(0, 20),  # start
            st.integers(0, 5),  # wait
            st.integers(-1, 2),  # src rank (-1: a collective)
        ),
        max_size=12,
    )
)
def test_arrivals_are_the_loc_code(rows):
    # on a shuffled index: the numpy writes at m's positions must be the loc writes at its labels
    n = len(rows)
    cols = list(zip(*rows, strict=True)) if rows else [()] * 5
    key, unit, start, wait, src = (np.array(c, dtype=np.int64) for c in cols)
    inst = pd.DataFrame(
        {
            "key": key,
            "unit": unit,
            "start_ns": start,
            WAIT_NS.name: wait,
            "src_rank": src,
            "dst_rank": np.where(src >= 0, 2 - src, -1),
        },
        index=np.random.default_rng(n).permutation(n) * 2 + 1,
    )
    m = inst[inst["key"] >= 0].copy()
    m["aligned_start"] = m["start_ns"].to_numpy(np.int64) - m["unit"].to_numpy(np.int64)
    unit_rank = np.array([0, 1, 2], dtype=np.int64)
    got, want = inst.copy(), inst.copy()
    _arrivals(got, m, unit_rank)
    _arrivals_loc(want, m, unit_rank)
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["", "pg0", "\x00stream#1", None]),
            st.sampled_from(["allreduce", "p2p:0>1", "p2p:1>0"]),
            st.integers(-1, 2),
            st.integers(0, 2),
        ),
        max_size=16,
    )
)
def test_ngroup_is_the_groupby(rows):
    # groups numbered by their first row, a row with a null key in none (-1)
    frame = pd.DataFrame(
        {
            "g": pd.array([r[0] for r in rows], dtype="str"),
            "k": pd.array([r[1] for r in rows], dtype="str"),
            "s": np.array([r[2] for r in rows], np.int64),
            "o": np.array([r[3] for r in rows], np.int64),
        }
    )
    want = frame.groupby(["g", "k", "s", "o"], sort=False).ngroup().to_numpy(np.float64)
    # pandas gives NaN for a null key (the old code then failed at int(ids.max())): -1 here
    want = np.nan_to_num(want, nan=-1.0).astype(np.int64)
    got = _ngroup(*(frame[c].to_numpy(dtype=object if c in "gk" else None) for c in "gkso"))
    assert got.tolist() == want.tolist()


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["", "pg1", "pg0", "\x00stream#0", "?", None]), st.integers(0, 3)
        ),
        max_size=12,
    )
)
def test_units_by_group_is_the_groupby(rows):
    # per group key, sorted and null keys left out, the units that ran it
    frame = pd.DataFrame(
        {
            "group_key": pd.array([r[0] for r in rows], dtype="str"),
            "unit": np.array([r[1] for r in rows], np.int64),
        }
    )
    want = {
        g: {int(u) for u in us} for g, us in frame.groupby("group_key")["unit"].unique().items()
    }
    got = _units_by_group(frame)
    assert list(got) == list(want)
    assert got == want


def _p2p_direction_map(
    inst: pd.DataFrame, unit_rank: I64, members: dict[object, tuple[int, ...]]
) -> tuple[np.ndarray, I64, I64]:
    """The replaced ``matching._p2p_direction``: Series.map and fillna, Series text sums."""
    kind = inst["kind_key"].to_numpy(dtype=object).copy()
    src = np.full(len(inst), -1, dtype=np.int64)
    dst = np.full(len(inst), -1, dtype=np.int64)
    if inst.empty:
        return kind, src, dst
    is_send = np.isin(kind, ["send", "isend"])
    is_recv = np.isin(kind, ["recv", "irecv", "recvanysource"])
    rank = unit_rank[inst["unit"].to_numpy(np.int64)]
    pair = {g: m for g, m in members.items() if len(m) == 2}
    gk = inst["group_key"]
    m0 = gk.map({g: m[0] for g, m in pair.items()}).fillna(-1).to_numpy(np.int64)
    m1 = gk.map({g: m[1] for g, m in pair.items()}).fillna(-1).to_numpy(np.int64)
    ok = (is_send | is_recv) & (m0 >= 0) & ((rank == m0) | (rank == m1))
    peer = np.where(rank == m0, m1, m0)
    src[ok] = np.where(is_send, rank, peer)[ok]
    dst[ok] = np.where(is_send, peer, rank)[ok]
    if ok.any():
        names = pd.Series(src[ok]).astype(str) + ">" + pd.Series(dst[ok]).astype(str)
        kind[ok] = ("p2p:" + names).to_numpy(dtype=object)
    return kind, src, dst


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["send", "irecv", "recv", "allreduce", "isend"]),
            st.sampled_from(["pg2", "pg3", "pgx", None]),
            st.integers(0, 3),
        ),
        max_size=12,
    )
)
def test_p2p_direction_is_the_map(rows):
    # in a group of two (pg2: ranks 10, 11; pg3 has three; pgx unknown) a send/recv of a member
    # is directed from the sender to the receiver; the rest keep their kind
    inst = pd.DataFrame(
        {
            "kind_key": pd.array([r[0] for r in rows], dtype="str"),
            "group_key": pd.array([r[1] for r in rows], dtype="str"),
            "unit": np.array([r[2] for r in rows], np.int64),
        }
    )
    unit_rank = np.array([10, 11, 12, 13], dtype=np.int64)
    members: dict[object, tuple[int, ...]] = {"pg2": (10, 11), "pg3": (10, 11, 12)}
    got = _p2p_direction(inst, unit_rank, members)
    want = _p2p_direction_map(inst, unit_rank, members)
    assert got[0].tolist() == want[0].tolist()
    assert [type(x) for x in got[0].tolist()] == [type(x) for x in want[0].tolist()]
    assert got[1].tolist() == want[1].tolist() and got[2].tolist() == want[2].tolist()


def _align_clocks_frame(
    inst: pd.DataFrame, unix: bool, notes: list[str]
) -> tuple[pd.DataFrame, int, str | None, dict[int, int]]:
    """The replaced ``matching._align_clocks``: the matched frame copied first, then filtered."""
    m = inst[inst["key"] >= 0].copy()
    if m.empty:
        m["aligned_start"] = np.zeros(0, np.int64)
        return m, 0, None, {}
    keys_m = m["key"].to_numpy()
    units_m = m["unit"].to_numpy(np.int64).tolist()
    start_m, end_m = m["start_ns"].to_numpy(np.int64), m["end_ns"].to_numpy(np.int64)

    def consistent_with(offsets: dict[int, int]) -> np.ndarray:
        return _consistent(keys_m, units_m, start_m, end_m, offsets)

    coll_rows = (m["src_rank"] < 0).to_numpy() if "src_rank" in m else np.ones(len(m), bool)
    base = coll_rows if coll_rows.any() else np.ones(len(m), dtype=bool)
    estimated = _offsets(m, base)
    ok_est = consistent_with(estimated)
    if (ok_est & base).any() and not ok_est.all():
        estimated = _offsets(m, ok_est & base)
        ok_est = consistent_with(estimated)
    candidates = [(ok_est, estimated)]
    if unix:
        if any(abs(v) > MAX_UNIX_SKEW_NS for v in estimated.values()):
            notes.append("too far")
            candidates = []
        zeros = {u: 0 for u in estimated}
        candidates.insert(0, (consistent_with(zeros), zeros))
    ok, off = max(candidates, key=lambda c: int(c[0].sum()))
    bad_keys = set(keys_m[~ok].tolist())
    if bad_keys:
        notes.append(f"{len(bad_keys)} of {m['key'].nunique()} matched")
        bad = inst["key"].isin(bad_keys).to_numpy()
        inst.loc[bad, "key"] = -1
        inst.loc[bad, "why"] = "its spans on the ranks are not consistent in time"
    m = m[ok].copy()
    m["aligned_start"] = m["start_ns"].to_numpy(np.int64) - m["unit"].map(off).fillna(0).to_numpy(
        np.int64
    )
    clock = None
    if len(m):
        clock = "unix" if unix and all(v == 0 for v in off.values()) else "estimated"
    return m, len(bad_keys), clock, off


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(-1, 3),  # key
            st.integers(0, 2),  # unit
            st.one_of(st.integers(0, 40), st.integers(20_000_000, 20_000_040)),  # start
            st.integers(0, 30),  # duration
            st.integers(-1, 1),  # src rank (-1: a collective)
        ),
        max_size=12,
    ),
    st.booleans(),
)
def test_align_clocks_is_the_frame_code(rows, unix):
    # the same consistent rows, offsets, clock and notes; inconsistent keys unmatched in inst
    n = len(rows)
    cols = list(zip(*rows, strict=True)) if rows else [()] * 5
    key, unit, start, dur, src = (np.array(c, dtype=np.int64) for c in cols)
    inst = pd.DataFrame(
        {
            "key": key,
            "unit": unit,
            "start_ns": start,
            "end_ns": start + dur,
            "src_rank": src,
            "why": pd.array([""] * n, dtype="str"),
        },
        index=np.random.default_rng(n).permutation(n) * 2 + 1,
    )
    got_inst, want_inst = inst.copy(), inst.copy()
    got_notes: list[str] = []
    want_notes: list[str] = []
    got = _align_clocks(got_inst, unix, got_notes)
    want = _align_clocks_frame(want_inst, unix, want_notes)
    pd.testing.assert_frame_equal(got[0], want[0], check_exact=True)
    assert got[1:] == want[1:]
    pd.testing.assert_frame_equal(got_inst, want_inst, check_exact=True)
    assert [x.split(" matched")[0] for x in got_notes if " of " in x] == [
        x.split(" matched")[0] for x in want_notes if " of " in x
    ]


def _family_causes_loc(
    inst: pd.DataFrame, pieces: tuple[I64, I64, I64, I64], sets: CauseSets, n_windows: int
) -> pd.DataFrame:
    """The replaced ``matching._family_causes``: a frame of every (window, family), then a loc
    of the rows with exposed time and a reset_index."""
    p_inst, p_win, p_s, p_e = pieces
    cols = ["window", "family", EXPOSED_NS.name, *(f"exposed_{c}_ns" for c in CAUSES)]
    cols += ["same_stream_ns"]
    if p_inst.size == 0:
        return pd.DataFrame(columns=cols)
    fam_code = {f: i for i, f in enumerate(FAMILIES)}
    nf = len(FAMILIES)
    fam = np.array([fam_code.get(f, nf - 1) for f in inst["family"]], dtype=np.int64)[p_inst]
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
    df = pd.DataFrame(
        {
            "window": idx // nf,
            "family": np.array(FAMILIES, dtype=object)[idx % nf],
            **{f"exposed_{c}_ns": out[f"all:{c}"] for c in CAUSES},
            "same_stream_ns": sum(out[f"same:{c}"] for c in CAUSES),
        }
    )
    df[EXPOSED_NS.name] = sum(df[f"exposed_{c}_ns"] for c in CAUSES)
    return df.loc[df[EXPOSED_NS.name] > 0, cols].reset_index(drop=True)


SPANS = st.lists(st.tuples(st.integers(0, 2), st.integers(0, 30), st.integers(0, 8)), max_size=6)


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),  # instance row
            st.integers(0, 2),  # window
            st.integers(0, 30),  # start
            st.integers(0, 8),  # length
        ),
        max_size=10,
    ),
    st.lists(st.tuples(st.sampled_from(FAMILIES), st.booleans()), min_size=4, max_size=4),
    st.lists(SPANS, min_size=4, max_size=4),
)
def test_family_causes_is_the_loc_code(pieces, fams, spans):
    # per (window, family) the ns of each cause set under the family's union, rows with none
    # left out: the frame of the kept rows must be the loc of the whole one (also when empty)
    def grouped(rows: list[tuple[int, int, int]]) -> Any:
        g = np.array([r[0] for r in rows], np.int64)
        s = np.array([r[1] for r in rows], np.int64)
        return iv.grouped_union(g, s, s + np.array([r[2] for r in rows], np.int64), 3)

    sets = CauseSets(*(grouped(x) for x in spans))
    inst = pd.DataFrame(
        {
            "family": pd.array([f for f, _ in fams], dtype="str"),
            "same_stream": np.array([b for _, b in fams], bool),
        }
    )
    p = tuple(np.array([r[j] for r in pieces], np.int64) for j in range(3))
    ps = (p[0], p[1], p[2], p[2] + np.array([r[3] for r in pieces], np.int64))
    got = _family_causes(inst, ps, sets, 3)
    want = _family_causes_loc(inst, ps, sets, 3)
    assert list(got.dtypes.astype(str)) == list(want.dtypes.astype(str))
    pd.testing.assert_frame_equal(got, want, check_exact=True)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["all_reduce", "all_gather", "send_recv"]), st.integers(0, 9)),
        min_size=1,
        max_size=10,
    )
)
def test_top_family_is_the_groupby(rows):
    # the family with the most ns summed, ties to the first in name order (a groupby sum, then
    # a stable sort by the sums, largest first)
    df = pd.DataFrame(
        {
            "family": pd.array([r[0] for r in rows], dtype="str"),
            "x_ns": np.array([r[1] for r in rows], np.int64),
        }
    )
    want = df.groupby("family")["x_ns"].sum().sort_values(ascending=False, kind="stable")
    assert _top_family(df, "x_ns") == str(want.index[0])


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.tuples(st.integers(0, 3), st.integers(0, 99)), max_size=10),
    st.sampled_from(["int", "Int64"]),
)
def test_sum_where_is_the_selection_sum(rows, dtype):
    # an int64 column summed under a mask as the selected frame's column sum; a nullable one
    # (its nulls skipped) through the Series
    flag = np.array([r[0] == 0 for r in rows], dtype=bool)
    vals = [r[1] if r[0] != 3 else None for r in rows] if dtype == "Int64" else [r[1] for r in rows]
    frame = pd.DataFrame({"x": pd.array(vals, dtype="Int64" if dtype == "Int64" else "int64")})
    assert _sum_where(frame, "x", flag) == int(frame[flag]["x"].sum())


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["", "pg1", "pg0", "\x00stream#0", None]), st.integers(0, 3)),
        min_size=1,
        max_size=10,
    )
)
def test_groups_frame_is_the_groupby(rows):
    # one row per group key (sorted, nulls left out): its first members and its row count
    inst = pd.DataFrame(
        {
            "group_key": pd.array([r[0] for r in rows], dtype="str"),
            "members": _objects([tuple(range(r[1])) for r in rows]),
        }
    )
    g = inst.groupby("group_key", sort=True)
    want = pd.DataFrame(
        {
            "group": [str(k) for k in g.size().index],
            "members": g["members"].first().tolist(),
            "n_instances": g.size().to_numpy(np.int64),
        },
        columns=["group", "members", "n_instances"],
    )
    pd.testing.assert_frame_equal(_groups_frame(inst, []), want, check_exact=True)


def _objects(values: list[Any]) -> np.ndarray:
    out = np.empty(len(values), dtype=object)
    for i, v in enumerate(values):
        out[i] = v
    return out


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 3),  # key
            st.integers(0, 20),  # aligned start
            st.integers(0, 9),  # duration
            st.integers(-1, 1),  # src rank (-1: a collective, its wait left alone)
        ),
        max_size=10,
    )
)
def test_p2p_waits_are_the_transform(rows):
    # a directed row waits until its key's latest aligned start, within its span; the rest of
    # its span is transfer (a groupby transform max, then loc writes, before)
    n = len(rows)
    cols = list(zip(*rows, strict=True)) if rows else [()] * 4
    key, a_start, dur, src = (np.array(c, dtype=np.int64) for c in cols)
    m = pd.DataFrame(
        {
            "key": key,
            "aligned_start": a_start,
            "dur_ns": dur,
            "src_rank": src,
            WAIT_NS.name: dur // 3,
            "transfer_ns": dur - dur // 3,
        },
        index=np.random.default_rng(n).permutation(n) * 2 + 1,
    )
    want = m.copy()
    directed = (want["src_rank"] >= 0).to_numpy()
    if directed.any():
        d = want[directed]
        a = d["aligned_start"].to_numpy(np.int64)
        latest = pd.Series(a).groupby(d["key"].to_numpy()).transform("max").to_numpy(np.int64)
        wait = np.clip(np.minimum(a + d["dur_ns"].to_numpy(np.int64), latest) - a, 0, None)
        want.loc[directed, WAIT_NS.name] = wait.astype(np.int64)
        want.loc[directed, "transfer_ns"] = d["dur_ns"].to_numpy(np.int64) - wait
    got = m.copy()
    _p2p_waits(got)
    pd.testing.assert_frame_equal(got, want, check_exact=True)
