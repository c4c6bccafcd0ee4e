"""The Nsight Systems reader's numpy paths against the pandas constructs they replace (issue 40).

- the first row of each code of ``pd.factorize`` (:func:`_nvtx._first_rows`) against
  ``~pd.Series(values).duplicated()``, and the objects' addresses factorized with a smaller
  first hash table (:func:`_nvtx._factorize_addresses`) against ``pd.factorize``;
- the ranks whose rows of a category have a matching name (:func:`_reader._ranks_running`, on
  the Categoricals) against the event-table version it replaces (``per_category`` over the
  DataFrame's columns, ``pd.unique``);
- the stream waits resolved to their event records by one sort (:func:`_sync.latest_records`)
  against the two ``pd.merge_asof`` it replaces;
- the NULLs of a StringIds column (``np.equal`` with None) against ``pd.isna``;
- the host rows of one process placed on their ranks without a search per row
  (:meth:`_reader.Reader.place`) against the search it replaces;
- the rank texts (:meth:`_nvtx.NvtxReader.rank_texts`, which skips the rows when no text says
  ``rank N``) against looking every row up.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pandas as pd
from hypothesis import given, settings
from hypothesis import strategies as st

from traceoverlap.core.model import per_category


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.integers(0, 6), max_size=60))
def test_first_rows_are_the_rows_duplicated_does_not_mark(values: list[int]) -> None:
    # codes numbered in the order of their first rows (pd.factorize): the first row of each is
    # the one pd.Series.duplicated leaves unmarked, in the same (code) order
    from traceoverlap.readers.nsys._nvtx import _first_rows

    arr = np.array(values, dtype=np.int64)
    codes, _ = pd.factorize(arr)
    want = np.flatnonzero(~pd.Series(arr).duplicated().to_numpy())
    got = _first_rows(codes)
    assert got.tolist() == want.tolist()
    assert codes[got].tolist() == list(range(got.size))


def _ranks_running_via_events(
    events: pd.DataFrame, category: str, pattern: re.Pattern[str]
) -> set[int]:
    """The code ``_ranks_running`` replaces: pandas comparisons over the event table."""
    cat_mask = (events["category"] == category).to_numpy()
    matches = per_category(
        events["name"], lambda n: pattern.search(n) is not None, rows=cat_mask, dtype=bool
    )
    hit = cat_mask & matches[events["name"].cat.codes.to_numpy()]
    return {int(r) for r in pd.unique(events["rank"].to_numpy()[hit])}


_CATS = ["kernel", "runtime", "annotation", "memcpy"]
_NAMES = ["ncclKernel_AllReduce", "gemm", "gloo:all_reduce", "NCCL_x", "step", "gloo"]


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(0, 3), st.integers(-1, 5), st.integers(0, 4)), max_size=40),
    used_cats=st.lists(st.integers(0, 3), min_size=1, max_size=4, unique=True),
    wanted=st.sampled_from(["kernel", "annotation"]),
    constant_rank=st.booleans(),
)
def test_ranks_running_on_the_categoricals_is_the_event_table_version(
    rows: list[tuple[int, int, int]],
    used_cats: list[int],
    wanted: str,
    constant_rank: bool,
) -> None:
    # rows of (category, name code (-1: no name), rank) over a category list that may lack the
    # wanted one; the rank column a shared constant or not, as the reader builds it
    from traceoverlap.readers.nsys._reader import _GLOO_RANGE, _NCCL, _ranks_running

    cat_list = [_CATS[i] for i in used_cats]
    n = len(rows)
    cat_codes = np.array([c % len(cat_list) for c, _, _ in rows], dtype=np.int8)
    category = pd.Categorical.from_codes(cat_codes, categories=cat_list)
    name = pd.Categorical.from_codes(
        np.array([k for _, k, _ in rows], dtype=np.int32), categories=_NAMES
    )
    if constant_rank:
        rank = np.broadcast_to(np.int32(3), (n,))
    else:
        rank = np.array([r for _, _, r in rows], dtype=np.int32)
    events = pd.DataFrame({"rank": rank, "category": category, "name": name})
    for pattern in (_NCCL, _GLOO_RANGE):
        got = _ranks_running(rank, category, name, wanted, pattern)
        assert got == _ranks_running_via_events(events, wanted, pattern)


@settings(max_examples=100, deadline=None)
@given(
    rows=st.lists(st.tuples(st.integers(-1, 3), st.integers(0, 4), st.integers(1, 3)), max_size=30),
    texts=st.lists(st.sampled_from(["rank 1", "Rank 2", "fwd", "RANK: 3", "x"]), max_size=4),
    pool=st.lists(st.sampled_from(["rank 4", "bwd", "[rank 5]", "y"]), max_size=4),
    pick=st.data(),
)
def test_rank_texts_skipping_the_rows_is_looking_every_row_up(
    rows: list[tuple[int, int, int]], texts: list[str], pool: list[str], pick: st.DataObject
) -> None:
    # rows of (inline text code (-1: none), StringIds id, pid), a subset of them the marks and
    # ranges: the (pid, N) of those whose text says "rank N" (inline first, else registered),
    # as the code it replaces finds them by looking every selected row up
    from traceoverlap.readers.nsys._nvtx import NvtxReader, _rank_numbers
    from traceoverlap.readers.nsys._strings import StringIds

    uniques = np.array(texts, dtype=object).reshape(len(texts))
    text_code = np.array([c if c < len(texts) else -1 for c, _, _ in rows], dtype=np.int64)
    text_id = np.array([i for _, i, _ in rows], dtype=np.int64)
    gtid = np.array([p << 24 | 7 for _, _, p in rows], dtype=np.int64)
    sel = np.array(
        sorted(pick.draw(st.sets(st.integers(0, max(len(rows) - 1, 0)))) if rows else []),
        dtype=np.intp,
    )
    reader = NvtxReader.__new__(NvtxReader)
    values = np.array(pool, dtype=object).reshape(len(pool))
    reader.strings = StringIds(np.arange(len(pool), dtype=np.int64), values)

    # the code it replaces
    per_text = np.r_[_rank_numbers(uniques), -1]
    code = text_code[sel]
    rank = per_text[code]
    pool_rank = _rank_numbers(reader.strings.values)
    if (pool_rank >= 0).any():
        pos, hit = reader.strings.find(text_id[sel])
        rank = np.where((code < 0) & hit, pool_rank[pos], rank)
    found = rank >= 0
    want_pid, want_rank = (gtid[sel][found] >> 24) & 0xFFFFFF, rank[found]

    got_pid, got_rank = reader.rank_texts(sel, text_code, uniques, text_id, gtid)
    assert got_pid.dtype == got_rank.dtype == np.int64
    assert got_pid.tolist() == want_pid.tolist()
    assert got_rank.tolist() == want_rank.tolist()


@settings(max_examples=100, deadline=None)
@given(
    values=st.lists(st.integers(0, 40), max_size=80),
    sample=st.integers(1, 8),
    distinct=st.integers(1, 8),
)
def test_factorize_addresses_is_pd_factorize(values: list[int], sample: int, distinct: int) -> None:
    # the hash table's first size (taken when the sampled rows repeat) changes no code: the
    # thresholds made small so that both sizes are taken on short inputs
    from traceoverlap.readers.nsys import _nvtx

    arr = (np.array(values, dtype=np.int64) * 48 + (1 << 40)).astype(np.intp)
    saved = _nvtx._SAMPLE_ROWS, _nvtx._MOSTLY_DISTINCT, _nvtx._REPEATS_HINT
    _nvtx._SAMPLE_ROWS, _nvtx._MOSTLY_DISTINCT, _nvtx._REPEATS_HINT = sample, distinct, 4
    try:
        got = _nvtx._factorize_addresses(arr)
    finally:
        _nvtx._SAMPLE_ROWS, _nvtx._MOSTLY_DISTINCT, _nvtx._REPEATS_HINT = saved
    assert got.tolist() == pd.factorize(arr)[0].tolist()


def _resolve_waits_via_pandas(
    wait: tuple[np.ndarray, ...], rec: tuple[np.ndarray, ...]
) -> tuple[list[int], list[int], list[int], list[int]]:
    """The code ``latest_records`` replaces (``_sync._resolve_waits`` before it): two
    ``pd.merge_asof`` by the keys, on the call, backward, strictly before."""
    pid, ctx, event, sync_id, corr = wait
    r_pid, r_ctx, r_event, r_sid, r_corr, r_stream = rec
    rec_df = pd.DataFrame(
        {"pid": r_pid, "ctx": r_ctx, "event": r_event, "sid": r_sid, "corr": r_corr,
         "rstream": r_stream}
    )  # fmt: skip
    rec_df = rec_df[(rec_df["event"] >= 0) & (rec_df["corr"] >= 0) & (rec_df["rstream"] >= 0)]
    rec_df = rec_df.assign(rcorr=rec_df["corr"]).sort_values("corr", kind="stable")
    w_df = pd.DataFrame({"pid": pid, "ctx": ctx, "event": event, "sid": sync_id, "corr": corr})
    w_df = w_df[(w_df["event"] >= 0) & (w_df["corr"] >= 0)].sort_values("corr", kind="stable")
    got_stream = pd.Series(-1, index=w_df.index, dtype=np.int64)
    got_corr = pd.Series(-1, index=w_df.index, dtype=np.int64)
    if (w_df["ctx"] < 0).all() or (rec_df["ctx"] < 0).all():
        w_df, rec_df = w_df.assign(ctx=-1), rec_df.assign(ctx=-1)
    by_sid = rec_df[rec_df["sid"] >= 0]
    exact = (w_df["sid"] >= 0).to_numpy() & (not by_sid.empty)
    for sel, recs, by in (
        (exact, by_sid, ["pid", "ctx", "event", "sid"]),
        (~exact, rec_df, ["pid", "ctx", "event"]),
    ):
        w = w_df[sel]
        if w.empty or recs.empty:
            continue
        m = pd.merge_asof(
            w.reset_index(),
            recs[[*by, "corr", "rcorr", "rstream"]],
            on="corr",
            by=by,
            direction="backward",
            allow_exact_matches=False,
        ).set_index("index")
        hit = m["rcorr"].notna()
        got_stream[m.index[hit]] = m.loc[hit, "rstream"].astype(np.int64)
        got_corr[m.index[hit]] = m.loc[hit, "rcorr"].astype(np.int64)
    hit = got_corr.to_numpy() >= 0
    w = w_df.loc[got_corr.index[hit]]
    return (
        w["pid"].tolist(),
        w["corr"].tolist(),
        got_stream.to_numpy()[hit].tolist(),
        got_corr.to_numpy()[hit].tolist(),
    )


_small = st.integers(-1, 3)


@settings(max_examples=120, deadline=None)
@given(
    waits=st.lists(st.tuples(_small, _small, _small, _small, st.integers(-1, 12)), max_size=12),
    recs=st.lists(
        st.tuples(_small, _small, _small, _small, st.integers(-1, 12), _small), max_size=16
    ),
    no_ctx=st.booleans(),
)
def test_latest_records_is_the_merge_asof_it_replaces(
    waits: list[tuple[int, ...]], recs: list[tuple[int, ...]], no_ctx: bool
) -> None:
    # stream waits (pid, context, event, eventSyncId, call) and event records (the same, and
    # the record's stream) drawn from a few values each, so that keys, calls and ties repeat,
    # -1s among them: the same waits resolved to the same records, in the same order
    from traceoverlap.readers.nsys._sync import latest_records

    def cols(rows: list[tuple[int, ...]], k: int) -> tuple[np.ndarray, ...]:
        return tuple(np.array([r[i] for r in rows], dtype=np.int64) for i in range(k))

    w, r = cols(waits, 5), cols(recs, 6)
    if no_ctx:  # a table without contextId: -1 everywhere on one side
        r = (r[0], np.full(r[1].size, -1, dtype=np.int64), *r[2:])
    got = latest_records(w, r)  # type: ignore[arg-type]
    want = _resolve_waits_via_pandas(w, r)
    assert (
        got.pid.tolist(),
        got.corr.tolist(),
        got.stream.tolist(),
        got.record_corr.tolist(),
    ) == want
    assert got.pid.dtype == got.stream.dtype == got.record_corr.dtype == np.int64


@settings(max_examples=100, deadline=None)
@given(values=st.lists(st.one_of(st.none(), st.text(max_size=3)), max_size=20))
def test_string_ids_nulls_are_the_ones_pd_isna_finds(values: list[str | None]) -> None:
    # a StringIds value column as the decoders give it (str or None): the NULLs compared with
    # one None at once are those pd.isna finds
    from traceoverlap.readers.nsys._metadata import _NULL

    arr = np.empty(len(values), dtype=object)
    arr[:] = values
    assert np.equal(arr, _NULL).tolist() == pd.isna(arr).tolist()


@settings(max_examples=100, deadline=None)
@given(
    first=st.sampled_from([0, 1, -3, 2**62, -(2**63)]),
    n=st.integers(1, 12),
    gap=st.booleans(),
    asked=st.lists(
        st.one_of(st.integers(-4, 16), st.sampled_from([2**63 - 1, -(2**63), 2**62 + 5])),
        max_size=20,
    ),
)
def test_string_ids_find_by_distance_is_the_binary_search(
    first: int, n: int, gap: bool, asked: list[int]
) -> None:
    # ids numbered from `first` (consecutive, or with one gap: the binary search then), in
    # shuffled order: where an id is in the table its position and value are the binary
    # search's; extreme ids wrap in the subtraction without finding a row that is not there
    from traceoverlap.readers.nsys._strings import StringIds

    ids = np.arange(n, dtype=np.int64) + np.int64(first)
    if gap and n > 1:
        ids[-1] += 1
    perm = np.random.default_rng(n).permutation(n)
    table = StringIds(ids[perm], np.array([f"s{i}" for i in ids[perm]], dtype=object))
    assert table.dense == (not (gap and n > 1))
    q = np.array(asked, dtype=np.int64)
    pos, hit = table.find(q)
    want_pos = np.minimum(np.searchsorted(table.ids, q), table.ids.size - 1)
    want_hit = table.ids[want_pos] == q
    assert hit.tolist() == want_hit.tolist()
    assert pos[hit].tolist() == want_pos[want_hit].tolist()
    assert pos.dtype == np.int64 and ((pos >= 0) & (pos < n)).all()
    assert table.lookup(q, "?").tolist() == [
        f"s{v}" if h else "?" for v, h in zip(q.tolist(), want_hit.tolist(), strict=True)
    ]


def _place_before(
    gpu: Any, host: Any, groups: list[tuple[int, int]], ranks: list[int]
) -> tuple[Any, np.ndarray]:
    """The code ``Reader.place`` replaces for its host rows (a search per row, always)."""
    from traceoverlap.readers.nsys._rows import Rows

    keys = np.array([(p << 32) | (d & 0xFFFFFFFF) for p, d in groups], dtype=np.int64)
    order = np.argsort(keys)
    gkey = (gpu.pid << 32) | (gpu.device.astype(np.int64) & 0xFFFFFFFF)
    gpu_rank = (
        np.asarray(ranks, dtype=np.int32)[order][np.searchsorted(keys[order], gkey)]
        if gkey.size
        else np.zeros(0, dtype=np.int32)
    )
    by_pid: dict[int, list[int]] = {}
    for (pid, _), r in zip(groups, ranks, strict=True):
        by_pid.setdefault(pid, []).append(r)
    pids = np.array(sorted(by_pid), dtype=np.int64)
    first = np.array([by_pid[int(p)][0] for p in pids], dtype=np.int32)
    pos = np.minimum(np.searchsorted(pids, host.pid), max(pids.size - 1, 0))
    mine = pids[pos] == host.pid
    if not mine.all():
        host = host.take(np.flatnonzero(mine))
        pos = pos[mine]
    blocks, rank_parts = [gpu, host], [gpu_rank, first[pos]]
    for pid, rs in by_pid.items():
        if len(rs) > 1:
            idx = np.flatnonzero(host.pid == pid)
            for r in rs[1:]:
                blocks.append(host.take(idx))
                rank_parts.append(np.full(idx.size, r, dtype=np.int32))
    return Rows.concat(blocks, trim=True), np.concatenate(rank_parts)


@settings(max_examples=100, deadline=None)
@given(
    gpu_rows=st.lists(st.sampled_from([(1, 0), (1, 1), (2, 0)]), max_size=8),
    host_pids=st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=10),
    constant=st.booleans(),
    groups=st.sampled_from(
        [[(1, 0), (2, 0)], [(1, 0), (1, 1), (2, 0)], [(2, 0)], [(1, 0), (1, 1)]]
    ),
)
def test_place_of_one_process_host_rows_is_the_search_per_row(
    gpu_rows: list[tuple[int, int]],
    host_pids: list[int],
    constant: bool,
    groups: list[tuple[int, int]],
) -> None:
    # host rows of one process (a one-process read: no search per row) or of several, that
    # process among the groups or not, driving one GPU or two (its rows copied to each rank):
    # the same rows, in the same order, with the same ranks
    from traceoverlap.readers.nsys._reader import Reader
    from traceoverlap.readers.nsys._rows import Rows

    def rows(pids: list[int], devices: list[int]) -> Rows:
        n = len(pids)
        i64 = np.arange(n, dtype=np.int64)
        i32 = np.arange(n, dtype=np.int32)
        return Rows(
            start=i64 * 10, end=i64 * 10 + 5, pid=np.array(pids, dtype=np.int64),
            device=np.array(devices, dtype=np.int32), stream=i64, tid=i64, correlation=i64,
            category=i32 % 3, name=i32, lane=i32, thread_name=i32, shape=i32,
        )  # fmt: skip

    gpu_rows = [g for g in gpu_rows if g in groups]  # GPU rows are of the groups
    pids = [host_pids[0]] * len(host_pids) if constant else host_pids
    ranks = list(range(len(groups)))[::-1]

    def blocks() -> tuple[Rows, Rows]:  # fresh ones for each: a concatenation empties them
        gpu = rows([p for p, _ in gpu_rows], [d for _, d in gpu_rows])
        return gpu, rows(pids, [-1] * len(pids))

    want_rows, want_rank = _place_before(*blocks(), groups, ranks)
    got_rows, got_rank = Reader.place(Reader.__new__(Reader), *blocks(), groups, ranks)
    assert got_rank.dtype == want_rank.dtype and got_rank.tolist() == want_rank.tolist()
    for k, v in want_rows.__dict__.items():
        assert getattr(got_rows, k).tolist() == v.tolist(), k
        assert getattr(got_rows, k).dtype == v.dtype, k
