"""Why is it stuck: who did not arrive, from a job's Flight Recorder dumps (docs/hang.md).

:func:`diagnose_hang` reads :class:`~traceoverlap.core.flightrec.FlightRecords` (every rank's
ring buffer of collectives and point-to-point ops) and answers in one line which rank(s) the
others wait for and why, then gives the evidence as tables. Columnar throughout: the per-entry
work is pandas group-bys over (group, sequence id); Python loops run only over the stuck points
(a few per job) and the chain between them.

The rules (docs/hang.md derives each):

- A process group is known across ranks by its name (``pg_name``, the same on every member);
  its members from ``pg_config`` when a dump says, else every rank whose dump names it (the
  default group: the world). Collectives of a group are compared by ``collective_seq_id``.
- Reasoning is from what each rank *enqueued* (its entries and their sequence ids), which every
  backend records; ``state`` and the ``time_discovered_*`` fields are used only where a dump
  shows they are kept (gloo leaves every entry ``scheduled`` and its ``pg_status`` behind).
- Per group, the first stuck point is the lowest sequence id where the members disagree (ops:
  desync; sizes or dtypes: mismatch) or that some member never enqueued while another went
  further (missing). Each member there is waiting (called the majority's op), desync, mismatch,
  missing, or has no dump.
- A missing rank whose last entry is itself a waiting point (another group's stuck collective, a
  recv whose send never came) is followed to the ranks *that* point waits for, until a rank that
  is not waiting (the blame chain of diagnosis.md §6); a chain that returns to itself is a
  deadlock.
- Timings: arrival (``time_created_ns``, the host enqueue) spread per collective every member
  reached; the wait it caused credited once, to the last arrival.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd

from ..core import fmt

if TYPE_CHECKING:
    from ..core.flightrec import FlightRecords

#: The verdicts :attr:`HangReport.verdict` takes (docs/hang.md "Verdicts").
VERDICTS = (
    "missing",  # a rank never called the collective the others wait in
    "desync",  # a rank called a different collective at the same sequence id
    "mismatch",  # same collective, different sizes or dtypes
    "p2p",  # a send or recv whose peer never posted the other half
    "deadlock",  # ranks waiting for each other across groups
    "stalled",  # every member called it, and it did not complete (states recorded)
    "late",  # every member called it, the last after the op's timeout had passed
    "partial",  # nothing stuck among the dumps given, but ranks dumped nothing
    "healthy",  # nothing stuck
    "empty",  # no entries at all
)

#: The columns of :attr:`HangReport.stuck`: one row per member at each stuck point.
STUCK_COLUMNS = (
    "pg",  # the group's name (``pg_name``)
    "pg_desc",
    "seq",  # the stuck point's collective_seq_id (p2p: the op's p2p_seq_id)
    "rank",
    "status",  # waiting / missing / desync / mismatch / no dump / p2p
    "op",  # what the rank called at this point (null: nothing)
    "input_sizes",
    "input_dtypes",
    "last_op",  # the rank's last entry: op, group, sequence id, frame
    "last_pg",
    "last_seq",
    "frame",
    "waits_for",  # ranks it waits for here (JSON list), waiting ranks only
)

#: How many other independent stuck points the evidence explains, one line each.
ALSO_STUCK = 5
#: How many stuck groups get a line of side-by-side evidence.
POINT_LINES = 5

_P2P = re.compile(r"\b(send|recv)\s+(\d+)\s*(->|<-)\s*(\d+)")
_EMPTY_STR: pd.Series = pd.Series([], dtype="string")


@dataclass(frozen=True)
class HangReport:
    """What :func:`diagnose_hang` found: the answer first, then the evidence."""

    #: the one-line answer
    answer: str
    #: one of :data:`VERDICTS`
    verdict: str
    #: lines of evidence after the answer, most important first
    evidence: tuple[str, ...]
    #: one row per group: pg, pg_desc, members, members_known, dumped, last_ok_seq, last_ok_op,
    #: stuck_seq, stuck_op, kind (null where the group is not stuck)
    groups: pd.DataFrame
    #: one row per member at each stuck point: :data:`STUCK_COLUMNS`
    stuck: pd.DataFrame
    #: the wait-for chain of the answer, first waiters to the rank(s) at its end:
    #: :data:`CHAIN_COLUMNS` (``ranks`` a JSON list)
    chain: pd.DataFrame
    #: one row per collective every member reached: :data:`TIMING_COLUMNS` (``duration_ns``
    #: null without completion times)
    timings: pd.DataFrame
    #: one row per (group, rank) with arrivals: pg, rank, times_last, caused_wait_ns, waited_ns
    late: pd.DataFrame
    #: the ranks whose dumps were read, and the world's ranks that dumped nothing
    ranks: tuple[int, ...] = ()
    missing_ranks: tuple[int, ...] = ()
    #: what was guessed or cannot be told (unreliable states, unknown members, ...)
    notes: tuple[str, ...] = field(default_factory=tuple)
    #: the ranks the answer names as the cause, each with its last entry's group and collective
    #: sequence id (null for a p2p entry): (rank, pg, seq)
    culprits: tuple[tuple[int, str | None, int | None], ...] = ()


# --- naming -------------------------------------------------------------------------------


def _short_op(op: Any) -> str:
    """``gloo:all_reduce`` -> ``all_reduce``; null -> ``?``."""
    if op is None or op is pd.NA or (isinstance(op, float) and np.isnan(op)):
        return "?"
    s = fmt.safe_text(str(op))
    return s.split(":", 1)[1] if ":" in s else s


def _group_name(pg: str, desc: Any) -> str:
    d = "" if desc is None or desc is pd.NA else fmt.safe_text(str(desc))
    pg = fmt.safe_text(pg)
    return f"group {pg} ({d})" if d and d != pg else f"group {pg}"


def _ranks_text(ranks: list[int]) -> str:
    rs = sorted(ranks)
    if len(rs) == 1:
        return f"rank {rs[0]}"
    if len(rs) <= 6:
        return "ranks " + ", ".join(map(str, rs[:-1])) + f" and {rs[-1]}"
    return f"{len(rs)} ranks ({rs[0]}, {rs[1]}, ... {rs[-1]})"


def _json_list(v: Any) -> list[Any] | None:
    if v is None or v is pd.NA or not isinstance(v, str):
        return None
    try:
        out = json.loads(v)
    except ValueError:
        return None
    return out if isinstance(out, list) else None


# --- the tables ---------------------------------------------------------------------------


@dataclass
class _Groups:
    """Per group key: description, members (global ranks), whether the dumps say so."""

    desc: dict[str, Any]
    members: dict[str, list[int]]
    known: dict[str, bool]
    last_enqueued: dict[tuple[str, int], int]


def _group_key(pg_name: pd.Series, pg_id: pd.Series) -> pd.Series:
    """The group's name; ``#<pg_id>`` where a dump gives none."""
    key = pg_name.astype("string")
    if not key.isna().any():
        return key
    return key.fillna("#" + pg_id.astype("string").fillna("?"))


def _most_common(keys: pd.Series, values: pd.Series) -> dict[str, Any]:
    """Per key, the value most rows give (nulls and empty strings ignored)."""
    kc, ku = pd.factorize(keys)
    vc, vu = pd.factorize(values)
    pairs = pd.DataFrame({"k": kc, "v": vc})
    top = pairs[(pairs["k"] >= 0) & (pairs["v"] >= 0)].value_counts().reset_index(name="n")
    top = top.sort_values(["k", "n", "v"], ascending=[True, False, True])
    out: dict[str, Any] = {}
    for k, v in zip(top["k"], top["v"], strict=True):
        if vu[v] != "" and str(ku[k]) not in out:
            out[str(ku[k])] = vu[v]
    return out


def _groups(records: FlightRecords, e: pd.DataFrame) -> tuple[_Groups, list[str]]:
    """The groups the entries name: description, members, and pg_status's last enqueued."""
    g = records.groups
    gk = _group_key(g["pg_name"], g["pg_id"]) if len(g) else _EMPTY_STR
    desc = _most_common(e["g"], e["pg_desc"])
    for k, d in _most_common(gk, g["pg_desc"] if len(g) else _EMPTY_STR).items():
        desc.setdefault(k, d)
    members: dict[str, list[int]] = {}
    known: dict[str, bool] = {}
    last_enq: dict[tuple[str, int], int] = {}
    if len(g):
        for k, m in _most_common(gk, g["members"]).items():
            lst = _json_list(m)
            if lst and all(isinstance(x, int) for x in lst):
                members[k] = sorted(int(x) for x in lst)
                known[k] = True
        ok = g["last_enqueued"].notna().to_numpy(bool)
        for k, r, v in zip(gk[ok], g["rank"][ok], g["last_enqueued"][ok], strict=True):
            last_enq[(str(k), int(r))] = int(v)
    named = set(e["g"].astype(str).unique())
    members = {k: v for k, v in members.items() if k in named}
    # each (group, rank) pair the entries name, once (by the integer codes: a ring repeats it
    # thousands of times)
    pair = e["gc"].to_numpy(np.int64) * (int(e["rank"].max()) + 1) + e["rank"].to_numpy(np.int64)
    once = np.sort(np.unique(pair, return_index=True)[1])
    seen = pd.concat(
        [e[["g", "rank"]].iloc[once], pd.DataFrame({"g": gk, "rank": g["rank"] if len(g) else []})]
    )
    seen = seen[seen["g"].astype(str).isin(named)]
    world = list(records.world) if records.world else list(records.ranks)
    guessed = []
    for k, rs in seen.groupby("g")["rank"].unique().items():
        k = str(k)
        if k in members:
            continue
        known[k] = False
        if k == "0" or desc.get(k) == "default_pg":
            members[k] = sorted(set(world) | {int(x) for x in rs})
        else:
            members[k] = sorted(int(x) for x in rs)
            guessed.append(k)
    notes = []
    if guessed:
        notes.append(
            f"{fmt.count(len(guessed), 'group')} without recorded members ("
            + ", ".join(_group_name(k, desc.get(k)) for k in sorted(guessed)[:5])
            + (", ..." if len(guessed) > 5 else "")
            + "): taken as the ranks whose dumps name them; a member whose dump never names its "
            "group is not seen (gloo records no members)"
        )
    return _Groups(desc, members, known, last_enq), notes


def _codes(s: pd.Series) -> np.ndarray:
    return np.asarray(pd.factorize(s, use_na_sentinel=False)[0], dtype=np.int64)


def _signature(c: pd.DataFrame) -> np.ndarray:
    """One integer per row for (op, input sizes, input dtypes, output sizes, output dtypes)."""
    cols = [c["op_code"].to_numpy(np.int64)] + [
        _codes(c[k]) for k in ("input_sizes", "input_dtypes", "output_sizes", "output_dtypes")
    ]
    sig = np.zeros(len(c), dtype=np.int64)
    span = 1
    for col in cols:
        n = int(col.max()) + 1 if len(col) else 1
        if span * n > 2**62:  # too many distinct values to pack: sort rows instead
            stacked = np.stack(cols, axis=1)
            return np.asarray(np.unique(stacked, axis=0, return_inverse=True)[1], np.int64)
        sig = sig * n + col
        span *= n
    return sig


# --- the analysis -------------------------------------------------------------------------


def diagnose_hang(records: FlightRecords) -> HangReport:
    """Who the others wait for, and why: see the module docstring and docs/hang.md."""
    notes = list(records.notes)
    if records.entries.empty:
        answer = (
            "no Flight Recorder entries in the dumps: nothing to tell (no rank called a "
            "collective, or the recorder was off: set TORCH_FR_BUFFER_SIZE)"
        )
        return _empty_report(records, answer, notes)
    e = records.entries.reset_index(drop=True)
    e["g"] = _group_key(e["pg_name"], e["pg_id"])
    e["gc"] = pd.factorize(e["g"])[0].astype(np.int64)
    op_codes, op_names = pd.factorize(e["op"], use_na_sentinel=False)
    e["op_code"] = op_codes.astype(np.int64)
    grp, gnotes = _groups(records, e)
    notes += gnotes
    dumped = set(records.ranks) | {int(r) for r in e["rank"].unique()}
    states_kept = bool(
        e["time_completed_ns"].notna().any() or (e["state"] == "completed").fillna(False).any()
    )
    if not states_kept:
        notes.append(
            "no entry is marked completed (state is 'scheduled' everywhere, no completion "
            "times; gloo keeps neither): which collectives completed is told from what each "
            "rank enqueued after them, and no durations are shown"
        )
    is_p2p = e["is_p2p"].fillna(False).to_numpy(bool)
    c = _collectives(e, is_p2p)
    mem, span = _members(grp, c, dumped)
    gtab = _first_stuck(c, span, grp)
    last = e.drop_duplicates("rank", keep="last").set_index("rank")
    stuck_rows, waiters_of, culprits_of, status_at = _stuck_points(c, mem, gtab, last)
    p2p_nodes = _p2p_stuck(e, is_p2p, grp, dumped)
    where = _where(last, p2p_nodes, status_at, gtab)

    def culprits(node: tuple[str, Any]) -> list[int]:
        if node[0] == "c":
            return culprits_of.get(node[1], [])
        return [p2p_nodes[node]["peer"]]

    def waiters(node: tuple[str, Any]) -> list[int]:
        if node[0] == "c":
            return waiters_of.get(node[1], [])
        return [int(node[1])]

    ctx = _Ctx(grp, c, last, dumped, mem, stuck_rows, p2p_nodes, where, culprits, waiters)
    nodes: list[tuple[str, Any]] = [("c", k) for k in culprits_of] + list(p2p_nodes)
    timings, late, tnotes = _timings(c, gtab, mem)
    verdict, answer, chain_rows, evidence = _answer(
        ctx, nodes, gtab, span, states_kept, tuple(records.missing_ranks)
    )
    if verdict in ("healthy", "partial"):
        late_answer = _late_answer(timings, ctx)
        if late_answer is not None:
            evidence.insert(0, answer.replace("nothing is stuck", "no rank is missing", 1))
            verdict, answer = "late", late_answer
    if records.missing_ranks and verdict != "partial":
        gone = list(records.missing_ranks)
        evidence.insert(
            0,
            f"{_ranks_text(gone)} dumped nothing: {'it' if len(gone) == 1 else 'they'} may be "
            "stuck too (a rank stuck outside a collective, or killed, dumps nothing); the "
            "answer is from the ranks that dumped",
        )
    unrecorded = _p2p_unrecorded(op_names, is_p2p)
    notes += unrecorded
    if unrecorded and verdict == "missing":
        evidence.append(
            "a rank that never called the collective may be blocked outside the collectives "
            "since its last entry: in a send or recv (gloo records none), a data loader, a "
            "sleep, a host sync; its stack at the last entry says where it last was"
        )
    groups_out = _groups_table(gtab, grp, mem, span, c)
    evidence[:0] = _point_lines(ctx, gtab, groups_out)
    notes += tnotes
    evidence += _slow_lines(late, timings, grp)
    for d in stuck_rows:
        d["pg_desc"] = grp.desc.get(d["pg"])
    blamed = _blamed(verdict, chain_rows, timings, stuck_rows)
    return HangReport(
        answer=answer,
        verdict=verdict,
        evidence=tuple(evidence),
        groups=groups_out,
        stuck=pd.DataFrame(stuck_rows, columns=list(STUCK_COLUMNS)).astype(_STUCK_DTYPES),
        chain=pd.DataFrame(chain_rows, columns=list(CHAIN_COLUMNS)),
        timings=timings,
        late=late,
        ranks=tuple(sorted(dumped)),
        missing_ranks=tuple(records.missing_ranks),
        notes=tuple(notes),
        culprits=tuple(_last_of(r, last) for r in blamed),
    )


def _blamed(
    verdict: str,
    chain_rows: list[dict[str, Any]],
    timings: pd.DataFrame,
    stuck_rows: list[dict[str, Any]],
) -> list[int]:
    """The ranks the answer names as the cause: the end of the chain (every rank of a deadlock's
    loop), the late rank; none for a healthy set."""
    if verdict == "late" and not timings.empty:
        tmo = timings["timeout_ms"].astype("Float64") * 1e6
        over = timings[(timings["arrival_spread_ns"] > tmo).fillna(False).to_numpy(bool)]
        return sorted({int(r) for r in over["last_rank"]})
    if not chain_rows:
        return []
    if verdict == "deadlock":
        return sorted({int(r) for d in chain_rows for r in json.loads(d["ranks"])})
    top = max(int(d["step"]) for d in chain_rows)
    return sorted({int(r) for d in chain_rows if d["step"] == top for r in json.loads(d["ranks"])})


def _last_of(r: int, last: pd.DataFrame) -> tuple[int, str | None, int | None]:
    if r not in last.index:
        return (r, None, None)
    row = last.loc[r]
    if _truthy(row["is_p2p"]) or pd.isna(row["collective_seq_id"]):
        return (r, str(row["g"]), None)
    return (r, str(row["g"]), int(row["collective_seq_id"]))


def with_evidence(report: HangReport, lines: list[str]) -> HangReport:
    """``report`` with ``lines`` added to its evidence."""
    import dataclasses

    return dataclasses.replace(report, evidence=(*report.evidence, *lines))


_STUCK_DTYPES = {
    k: ("Int64" if k in ("seq", "last_seq") else "int64" if k == "rank" else "string")
    for k in STUCK_COLUMNS
}
#: The columns of :attr:`HangReport.chain`.
CHAIN_COLUMNS = ("step", "ranks", "pg", "seq", "op", "status")


#: The columns the collectives' table keeps (of the entries, plus the group key and op code).
_C_COLUMNS = (
    "g",
    "gc",
    "rank",
    "collective_seq_id",
    "op",
    "op_code",
    "input_sizes",
    "input_dtypes",
    "output_sizes",
    "output_dtypes",
    "state",
    "time_created_ns",
    "time_completed_ns",
    "timeout_ms",
    "frame",
)


def _collectives(e: pd.DataFrame, is_p2p: np.ndarray) -> pd.DataFrame:
    """One row per (group, rank, collective seq): the last entry when a ring repeats one."""
    seq = e["collective_seq_id"]
    keep = ~is_p2p & seq.notna().to_numpy(bool) & (seq.fillna(0) > 0).to_numpy(bool)
    cols = [k for k in _C_COLUMNS if k in e.columns]
    # every row kept (a ring of collectives): the columns themselves, not a copy (copy on write)
    c = e[cols] if keep.all() else e.loc[keep, cols]
    c["seq"] = c["collective_seq_id"].astype("int64")
    dup = c.duplicated(["gc", "rank", "seq"], keep="last").to_numpy(bool)
    if dup.any():
        c = c[~dup]
    c["sig"] = _signature(c)
    return c


def _members(grp: _Groups, c: pd.DataFrame, dumped: set[int]) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One row per (group, member): dumped or not, and the furthest collective seq it enqueued
    (a dumped member with no entry of the group: pg_status's last enqueued, else 0); per group
    the lowest and highest of those among dumped members."""
    mrows = [(k, r) for k, ms in grp.members.items() for r in ms]
    mem = pd.DataFrame(mrows, columns=["g", "rank"]).astype({"g": "string", "rank": "int64"})
    mem["dumped"] = mem["rank"].isin(dumped)
    furthest = c.groupby(["g", "rank"], as_index=False)["seq"].max()
    mem = mem.merge(furthest.rename(columns={"seq": "top"}), on=["g", "rank"], how="left")
    no_entry = mem["top"].isna() & mem["dumped"]
    if no_entry.any():
        pairs = mem.loc[no_entry, ["g", "rank"]].itertuples(index=False)
        mem.loc[no_entry, "top"] = [grp.last_enqueued.get((str(k), int(r)), 0) for k, r in pairs]
    span = mem[mem["dumped"]].groupby("g")["top"].agg(["min", "max"])
    return mem, span


def _first_stuck(c: pd.DataFrame, span: pd.DataFrame, grp: _Groups) -> pd.DataFrame:
    """Per group: the lowest seq the members disagree on (op: desync; sizes or dtypes:
    mismatch) or that one never enqueued while another went further (missing)."""
    per = c.groupby(["g", "seq"]).agg(
        n=("rank", "size"),
        op_lo=("op_code", "min"),
        op_hi=("op_code", "max"),
        sig_lo=("sig", "min"),
        sig_hi=("sig", "max"),
    )
    per = per[per["n"] > 1]
    desync = per[per["op_lo"] != per["op_hi"]].reset_index().groupby("g")["seq"].min()
    mism = per[(per["op_lo"] == per["op_hi"]) & (per["sig_lo"] != per["sig_hi"])]
    gtab = pd.DataFrame(index=pd.Index(sorted(grp.members), name="g"))
    gtab["missing_at"] = (span["min"] + 1).where(span["min"] < span["max"])
    gtab["desync_at"] = desync
    gtab["mismatch_at"] = mism.reset_index().groupby("g")["seq"].min()
    gtab["stuck_seq"] = gtab[["missing_at", "desync_at", "mismatch_at"]].min(axis=1)
    gtab["kind"] = None
    gtab["tie"] = False
    for col, kind in (
        ("mismatch_at", "mismatch"),
        ("desync_at", "desync"),
        ("missing_at", "missing"),
    ):
        hit = gtab[col].notna() & (gtab[col] == gtab["stuck_seq"])
        gtab.loc[hit, "kind"] = kind  # missing wins a tie (it is listed last)
    return gtab


def _where(
    last: pd.DataFrame,
    p2p_nodes: dict[tuple[str, Any], dict[str, Any]],
    status_at: dict[str, dict[int, str]],
    gtab: pd.DataFrame,
) -> dict[int, tuple[str, Any]]:
    """Where each rank waits: its last entry, when that is a stuck point (a group's first
    stuck collective it called, or a send/recv whose other half is absent)."""
    where: dict[int, tuple[str, Any]] = {}
    for r, k, p2p, s in zip(
        last.index, last["g"], last["is_p2p"], last["collective_seq_id"], strict=True
    ):
        r = int(r)
        if _truthy(p2p):
            if ("p", r) in p2p_nodes:
                where[r] = ("p", r)
        elif str(k) in status_at and r in status_at[str(k)]:
            st = gtab.loc[str(k), "stuck_seq"]
            if not pd.isna(s) and int(s) >= int(st):
                where[r] = ("c", str(k))
    return where


def _answer(
    ctx: _Ctx,
    nodes: list[tuple[str, Any]],
    gtab: pd.DataFrame,
    span: pd.DataFrame,
    states_kept: bool,
    missing: tuple[int, ...],
) -> tuple[str, str, list[dict[str, Any]], list[str]]:
    """The verdict, the answer, the chain's rows and the first evidence lines: the stuck
    point whose chain ends at a rank waiting nowhere and that most ranks wait on; else a loop
    (deadlock); else a collective all called that did not complete; else nothing stuck."""
    nxt: dict[tuple[str, Any], list[tuple[str, Any]]] = {}
    for n in nodes:
        out = []
        for r in ctx.culprits(n):
            w = ctx.where.get(r)
            if w is not None and w != n and r in ctx.waiters(w):
                out.append(w)
        nxt[n] = list(dict.fromkeys(out))
    ends = [
        n
        for n in nodes
        if any(
            not _waits(r, ctx.where, ctx.waiters) or ctx.where.get(r) == n for r in ctx.culprits(n)
        )
    ]
    upstream = {n: _upstream(n, nxt) for n in nodes}
    evidence: list[str] = []
    if ends:
        score = {n: len({w for m in upstream[n] for w in ctx.waiters(m)}) for n in ends}
        root = sorted(ends, key=lambda n: (-score[n], _node_order(n)))[0]
        verdict, answer, rows = _explain(root, ctx, gtab, upstream[root], nxt)
        others = [n for n in ends if n not in upstream[root]]
        others.sort(key=lambda n: (-score[n], _node_order(n)))
        for n in others[:ALSO_STUCK]:
            evidence.append("also stuck: " + _explain(n, ctx, gtab, upstream[n], nxt)[1])
        if len(others) > ALSO_STUCK:
            evidence.append(
                f"... and {len(others) - ALSO_STUCK} more stuck points (the groups and stuck "
                "tables have them all)"
            )
        return verdict, answer, rows, evidence
    if nodes:
        return (*_deadlock(nodes, nxt, ctx), evidence)
    stalled = _stalled(ctx, gtab, span) if states_kept else None
    if stalled is not None:
        return stalled[0], stalled[1], [], evidence
    return (*_healthy(span, ctx.c, ctx.grp, missing), [], evidence)


def _late_answer(timings: pd.DataFrame, ctx: _Ctx) -> str | None:
    """A collective every member reached whose last arrival came after the op's timeout had
    passed for the first: the others timed out waiting for it (late, not missing). The one
    furthest past its timeout."""
    if timings.empty:
        return None
    tmo = timings["timeout_ms"].astype("Float64") * 1e6
    over = timings[(timings["arrival_spread_ns"] > tmo).fillna(False).to_numpy(bool)]
    if over.empty:
        return None
    ratio = over["arrival_spread_ns"] / (over["timeout_ms"].astype("float64") * 1e6)
    r = over.loc[ratio.idxmax()]
    return (
        f"rank {r['last_rank']} was late, not missing: it called {_short_op(r['op'])} "
        f"#{r['seq']} of {ctx.gname(str(r['pg']))} {fmt.duration(r['arrival_spread_ns'])} after "
        f"rank {r['first_rank']}, past the op's {fmt.duration(int(r['timeout_ms']) * 1_000_000)} "
        "timeout: the others timed out waiting for it"
    )


def _stalled(ctx: _Ctx, gtab: pd.DataFrame, span: pd.DataFrame) -> tuple[str, str] | None:
    """Every dumped member called a group's last collective and it has not completed (only
    where the dumps keep states): the first such group's verdict and answer. ``stalled`` when
    every member dumped; ``partial`` when some dumped nothing (every rank that dumped called it:
    the ones that did not are the likely culprits)."""
    c = ctx.c
    free = [str(k) for k in gtab.index[gtab["stuck_seq"].isna()] if k in span.index]
    if not free or c.empty:
        return None
    top = span["max"].reindex(c["g"].to_numpy()).to_numpy(dtype=float)
    at = c[(c["seq"].to_numpy() == top) & c["g"].isin(free).to_numpy(bool)]
    done = (at["state"] == "completed").fillna(False) | at["time_completed_ns"].notna()
    undone = at[~done.to_numpy(bool)]
    if undone.empty:
        return None
    n_at = at.groupby("g").size()
    mem = ctx.mem
    n_dumped = mem[mem["dumped"]].groupby("g").size()
    for k in sorted(set(undone["g"].astype(str))):
        if int(n_at.get(k, 0)) != int(n_dumped.get(k, -1)):
            continue
        rows = undone[undone["g"] == k]
        ranks = sorted(int(r) for r in rows["rank"])
        what = f"{_short_op(rows['op'].iloc[0])} #{int(rows['seq'].iloc[0])} of {ctx.gname(k)}"
        gone = sorted(int(r) for r in mem.loc[(mem["g"] == k) & ~mem["dumped"], "rank"])
        if gone:
            return "partial", (
                f"every rank that dumped called {what}, and it has not completed on "
                f"{_ranks_text(ranks)}; {_ranks_text(gone)} dumped nothing: "
                f"{'it is' if len(gone) == 1 else 'they are'} the likely one stuck"
            )
        return "stalled", (
            f"every member of {ctx.gname(k)} called {what.split(' of ')[0]}, and it has not "
            f"completed on {_ranks_text(ranks)}: all arrived, so the collective itself is stuck "
            "(the network, a device, or a kernel queued before it)"
        )
    return None


# --- the stuck points ---------------------------------------------------------------------


def _stuck_points(
    c: pd.DataFrame, mem: pd.DataFrame, gtab: pd.DataFrame, last: pd.DataFrame
) -> tuple[
    list[dict[str, Any]], dict[str, list[int]], dict[str, list[int]], dict[str, dict[int, str]]
]:
    """Each member's row at each group's first stuck point; per group its waiting ranks, its
    culprits (missing, desync, mismatch) and the status of the ranks with an entry there."""
    sp = gtab["stuck_seq"].dropna().astype("int64").rename("seq").reset_index()
    gtab["stuck_op"] = None
    if sp.empty:
        return [], {}, {}, {}
    sp["g"] = sp["g"].astype("string")
    at = c.merge(sp, on=["g", "seq"])

    # the majority's op, then the majority's signature among those: most ranks, a tie to the
    # side holding the lowest rank
    def majority(by: str, frame: pd.DataFrame) -> pd.Series:
        t = frame.groupby(["g", by], as_index=False).agg(n=("rank", "size"), lo=("rank", "min"))
        t = t.sort_values(["g", "n", "lo"], ascending=[True, False, True])
        return t.drop_duplicates("g").set_index("g")[by]

    maj_op = majority("op_code", at)
    maj_sig = majority("sig", at[at["op_code"].to_numpy() == maj_op.reindex(at["g"]).to_numpy()])
    ties = at.groupby(["g", "op_code"]).size().groupby("g").agg(lambda s: list(s))
    rows = mem.merge(sp, on="g").merge(
        at[["g", "rank", "op", "op_code", "sig", "input_sizes", "input_dtypes", "frame"]].rename(
            columns={"frame": "frame_at"}
        ),
        on=["g", "rank"],
        how="left",
    )
    has = rows["op_code"].notna()
    mop = maj_op.reindex(rows["g"]).to_numpy()
    msig = maj_sig.reindex(rows["g"]).to_numpy()
    status = np.where(
        ~rows["dumped"],
        "no dump",
        np.where(
            ~has,
            "missing",
            np.where(
                rows["op_code"].to_numpy() != mop,
                "desync",
                np.where(rows["sig"].to_numpy() != msig, "mismatch", "waiting"),
            ),
        ),
    )
    rows["status"] = status
    lr = last.reindex(rows["rank"].to_numpy())
    out: list[dict[str, Any]] = []
    waiters: dict[str, list[int]] = {}
    culprits: dict[str, list[int]] = {}
    status_at: dict[str, dict[int, str]] = {}
    maj_name = at.drop_duplicates(["g", "op_code"]).set_index(["g", "op_code"])["op"]
    for k in sp["g"]:
        gtab.loc[k, "stuck_op"] = maj_name.get((k, maj_op.get(k)))
        counts = ties.get(k, [])
        if len(counts) > 1 and sorted(counts)[-1] == sorted(counts)[-2]:
            gtab.loc[k, "tie"] = True
    for i, row in enumerate(rows.itertuples(index=False)):
        k, r, st = str(row.g), int(row.rank), str(row.status)
        if st == "waiting":
            waiters.setdefault(k, []).append(r)
        elif st in ("missing", "desync", "mismatch"):
            culprits.setdefault(k, []).append(r)
        if st in ("waiting", "desync", "mismatch"):
            status_at.setdefault(k, {})[r] = st
        lrow = lr.iloc[i]
        dumped = bool(row.dumped) and not pd.isna(lrow["op"])
        out.append(
            {
                "pg": k,
                "pg_desc": None,
                "seq": int(row.seq),
                "rank": r,
                "status": st,
                "op": row.op if has.iloc[i] else None,
                "input_sizes": row.input_sizes if has.iloc[i] else None,
                "input_dtypes": row.input_dtypes if has.iloc[i] else None,
                "last_op": lrow["op"] if dumped else None,
                "last_pg": lrow["g"] if dumped else None,
                "last_seq": _entry_seq(lrow) if dumped else None,
                "frame": row.frame_at if has.iloc[i] else (lrow["frame"] if dumped else None),
                "waits_for": None,
            }
        )
    for row_d in out:
        if row_d["status"] == "waiting":
            row_d["waits_for"] = json.dumps(culprits.get(row_d["pg"], []))
    return out, waiters, culprits, status_at


def _entry_seq(row: pd.Series) -> int | None:
    v = row["p2p_seq_id"] if _truthy(row["is_p2p"]) else row["collective_seq_id"]
    return None if pd.isna(v) else int(v)


def _truthy(v: Any) -> bool:
    return False if v is None or v is pd.NA else bool(v)


def _p2p_stuck(
    e: pd.DataFrame,
    is_p2p: np.ndarray,
    grp: _Groups,
    dumped: set[int],
) -> dict[tuple[str, Any], dict[str, Any]]:
    """Sends and recvs that are their rank's last entry and whose other half the peer never
    posted: the n-th send from A to B pairs with the n-th recv on B from A, within a group."""
    p = e[is_p2p]
    if p.empty:
        return {}
    m = p["op"].astype("string").str.extract(_P2P)
    ok = m[0].notna()
    p, m = p[ok.to_numpy(bool)], m[ok]
    if p.empty:
        return {}
    a = m[1].astype("int64").to_numpy()
    b = m[3].astype("int64").to_numpy()
    send = (m[0] == "send").to_numpy(bool)
    src_l = np.where(send, a, b)
    dst_l = np.where(send, b, a)
    g = p["g"].astype(str).to_numpy()

    def to_global(k: str, local: int) -> int:
        ms = grp.members.get(k)
        if ms and grp.known.get(k) and 0 <= local < len(ms):
            return ms[local]
        return local

    src = np.array([to_global(k, int(x)) for k, x in zip(g, src_l, strict=True)], dtype=np.int64)
    dst = np.array([to_global(k, int(x)) for k, x in zip(g, dst_l, strict=True)], dtype=np.int64)
    t = pd.DataFrame(
        {
            "g": g,
            "src": src,
            "dst": dst,
            "send": send,
            "rank": p["rank"].to_numpy(),
            "idx": p.index.to_numpy(),
            "seq": p["p2p_seq_id"].to_numpy(),
            "op": p["op"].to_numpy(),
        }
    )
    t["n"] = t.groupby(["g", "src", "dst", "send"]).cumcount()
    sends = set(
        zip(
            t.loc[t["send"], "g"],
            t.loc[t["send"], "src"],
            t.loc[t["send"], "dst"],
            t.loc[t["send"], "n"],
            strict=True,
        )
    )
    recvs = set(
        zip(
            t.loc[~t["send"], "g"],
            t.loc[~t["send"], "src"],
            t.loc[~t["send"], "dst"],
            t.loc[~t["send"], "n"],
            strict=True,
        )
    )
    last_idx = set(e.reset_index().drop_duplicates("rank", keep="last")["index"])
    out: dict[tuple[str, Any], dict[str, Any]] = {}
    for row in t[t["idx"].isin(last_idx)].itertuples(index=False):
        key = (row.g, int(row.src), int(row.dst), int(row.n))
        peer = int(row.dst) if row.send else int(row.src)
        if peer in dumped and key in (recvs if row.send else sends):
            continue  # the other half was posted: waiting on the transfer, not a peer
        out[("p", int(row.rank))] = {
            "rank": int(row.rank),
            "peer": peer,
            "kind": "send" if row.send else "recv",
            "g": str(row.g),
            "seq": None if pd.isna(row.seq) else int(row.seq),
            "op": row.op,
            "n": int(row.n),
        }
    return out


def _waits(r: int, where: dict[int, tuple[str, Any]], waiters: Any) -> bool:
    w = where.get(r)
    return w is not None and r in waiters(w)


def _upstream(n: tuple[str, Any], nxt: dict[tuple[str, Any], list[Any]]) -> list[tuple[str, Any]]:
    """``n`` and every stuck point whose chain leads to it, nearest first."""
    rev: dict[Any, list[Any]] = {}
    for a, bs in nxt.items():
        for b in bs:
            rev.setdefault(b, []).append(a)
    seen = [n]
    i = 0
    while i < len(seen):
        for m in rev.get(seen[i], []):
            if m not in seen:
                seen.append(m)
        i += 1
    return seen


def _node_order(n: tuple[str, Any]) -> tuple[int, str]:
    return (0, str(n[1])) if n[0] == "c" else (1, str(n[1]))


@dataclass
class _Ctx:
    grp: _Groups
    c: pd.DataFrame
    last: pd.DataFrame
    dumped: set[int]
    mem: pd.DataFrame
    stuck_rows: list[dict[str, Any]]
    p2p: dict[tuple[str, Any], dict[str, Any]]
    where: dict[int, tuple[str, Any]]
    culprits: Any
    waiters: Any

    def gname(self, k: str) -> str:
        return _group_name(k, self.grp.desc.get(k))

    def row(self, k: str, r: int) -> dict[str, Any]:
        for d in self.stuck_rows:
            if d["pg"] == k and d["rank"] == r:
                return d
        return {}

    def last_entry(self, r: int) -> str:
        if r not in self.last.index:
            return "it has no entries"
        row = self.last.loc[r]
        s = _entry_seq(row)
        where = f"{_short_op(row['op'])}" + (f" #{s}" if s is not None else "")
        where += f" of {self.gname(str(row['g']))}"
        fr = row["frame"]
        if isinstance(fr, str) and fr:
            where += f", at {fmt.safe_text(fr)}"
        return where

    def point(self, n: tuple[str, Any]) -> str:
        """``all_reduce #6 of group 0 (default_pg)`` / ``recv #3 from rank 1 in group 0``."""
        if n[0] == "c":
            k = str(n[1])
            s = self.seq_of(n)
            op = next(
                (d["op"] for d in self.stuck_rows if d["pg"] == k and d["status"] == "waiting"),
                None,
            )
            return f"{_short_op(op)} #{s} of {self.gname(k)}"
        d = self.p2p[n]
        way = "from" if d["kind"] == "recv" else "to"
        return f"{d['kind']} {way} rank {d['peer']} (p2p #{d['seq']}) of {self.gname(d['g'])}"

    def seq_of(self, n: tuple[str, Any]) -> int | None:
        if n[0] == "c":
            return next((int(d["seq"]) for d in self.stuck_rows if d["pg"] == str(n[1])), None)
        s = self.p2p[n]["seq"]
        return None if s is None else int(s)


def _chain_path(
    root: tuple[str, Any], ups: list[tuple[str, Any]], nxt: dict[tuple[str, Any], list[Any]]
) -> list[tuple[str, Any]]:
    """The longest path of stuck points ending at ``root`` (its furthest upstream first)."""
    best: list[tuple[str, Any]] = [root]
    for start in ups:
        path, cur, seen = [start], start, {start}
        while cur != root:
            step = next((m for m in nxt.get(cur, []) if m in ups and m not in seen), None)
            if step is None:
                break
            path.append(step)
            seen.add(step)
            cur = step
        if cur == root and len(path) > len(best):
            best = path
    return best


def _explain(
    root: tuple[str, Any],
    ctx: _Ctx,
    gtab: pd.DataFrame,
    ups: list[tuple[str, Any]],
    nxt: dict[tuple[str, Any], list[Any]],
) -> tuple[str, str, list[dict[str, Any]]]:
    """The verdict, the one-line answer and the chain rows for the stuck point ``root``."""
    ends = [
        r
        for r in ctx.culprits(root)
        if not _waits(r, ctx.where, ctx.waiters) or ctx.where.get(r) == root
    ]
    if root[0] == "p":
        verdict, answer = "p2p", _p2p_clause(root, ctx)
    else:
        verdict, answer = _collective_clause(root, ctx, gtab, ends)
    w = sorted(ctx.waiters(root))
    it = "it" if len(ends) == 1 else "them"
    if verdict == "mismatch":
        # gloo may abort a rank, or return wrong numbers without hanging: the others may not
        # be waiting at all (the dtype fixture: both ranks went on)
        answer += " (a mismatch hangs, aborts a rank, or silently gives wrong results)"
    elif root[0] == "c" and w:
        everyone = len(w) + len(ctx.culprits(root)) >= len(ctx.dumped)
        if everyone:
            answer += f"; every other rank is waiting for {it}"
        else:
            answer += f"; {_ranks_text(w)} {'waits' if len(w) == 1 else 'wait'} for {it}"
    path = _chain_path(root, ups, nxt)
    for m in reversed(path[:-1]):
        wm = sorted(ctx.waiters(m))
        answer += (
            f"; {_ranks_text(wm)} {'waits' if len(wm) == 1 else 'wait'} in {ctx.point(m)} for "
            f"{_ranks_text(sorted(ctx.culprits(m)))}"
        )
    return verdict, answer, _chain_rows(path, root, ends, verdict, ctx)


def _p2p_clause(root: tuple[str, Any], ctx: _Ctx) -> str:
    d = ctx.p2p[root]
    peer = d["peer"]
    head = f"rank {d['rank']} waits in {ctx.point(root)}: "
    if peer not in ctx.dumped:
        return head + f"rank {peer} dumped nothing: it may be the one stuck"
    other = "send" if d["kind"] == "recv" else "recv"
    return head + (
        f"rank {peer} never posted the matching {other}; its last entry is {ctx.last_entry(peer)}"
    )


def _collective_clause(
    root: tuple[str, Any], ctx: _Ctx, gtab: pd.DataFrame, ends: list[int]
) -> tuple[str, str]:
    """``rank 1 never called all_reduce #6 of group 0 (default_pg): it called barrier``, per
    kind of culprit at the stuck point."""
    k = str(root[1])
    what = f"{_short_op(gtab.loc[k, 'stuck_op'])} #{ctx.seq_of(root)} of {ctx.gname(k)}"
    by: dict[str, list[int]] = {}
    for r in ends:
        by.setdefault(str(ctx.row(k, r).get("status")), []).append(r)
    clauses: list[str] = []
    for st in ("desync", "missing", "mismatch"):
        rs = sorted(by.get(st, []))
        if not rs:
            continue
        who = _ranks_text(rs)
        if st == "desync":
            did = " / ".join(sorted({_short_op(ctx.row(k, r)["op"]) for r in rs}))
            clauses.append(
                f"{who} never called {what}: {'it' if len(rs) == 1 else 'they'} called {did}"
            )
        elif st == "missing":
            if len(rs) <= 3:
                lasts = "; ".join(
                    ("its" if len(rs) == 1 else f"rank {r}'s")
                    + f" last entry is {ctx.last_entry(r)}"
                    for r in rs
                )
            else:
                lasts = f"the first one's last entry is {ctx.last_entry(rs[0])}"
            clauses.append(f"{who} never called {what}: {lasts}")
        else:
            ref = next((d for d in ctx.stuck_rows if d["pg"] == k and d["status"] == "waiting"), {})
            clauses.append(
                f"{who} called {what} with {_shape(ctx.row(k, rs[0]))} where the others used "
                f"{_shape(ref)}"
            )
    if not clauses:
        return "missing", f"{what}: no member's call explains it"
    return str(gtab.loc[k, "kind"]), "; ".join(clauses)


def _chain_rows(
    path: list[tuple[str, Any]],
    root: tuple[str, Any],
    ends: list[int],
    verdict: str,
    ctx: _Ctx,
) -> list[dict[str, Any]]:
    """The chain as rows: each stuck point's waiting ranks, then the rank(s) at its end with
    what they called there (or their last entry)."""
    rows = [
        {
            "step": i,
            "ranks": json.dumps(sorted(ctx.waiters(m))),
            "pg": _pg_of(m, ctx),
            "seq": ctx.seq_of(m),
            "op": _op_of(m, ctx),
            "status": "waiting",
        }
        for i, m in enumerate(path)
    ]
    for r in sorted(ends):
        d = ctx.row(str(root[1]), r) if root[0] == "c" else {}
        # what it called at the point (desync, mismatch); null: it never called it (missing,
        # or the peer of a send/recv)
        did = d.get("op")
        rows.append(
            {
                "step": len(path),
                "ranks": json.dumps([r]),
                "pg": _pg_of(root, ctx),
                "seq": ctx.seq_of(root),
                "op": did,
                "status": d.get("status", verdict) if d else verdict,
            }
        )
    return rows


def _point_lines(ctx: _Ctx, gtab: pd.DataFrame, groups: pd.DataFrame) -> list[str]:
    """Per stuck group: the last collective all agree on, and each member's call side by side
    (the first few, then a count)."""
    out = []
    stuck_groups = [str(k) for k in gtab.index[gtab["stuck_seq"].notna()]]
    # the answer's groups first
    first = {str(d["pg"]) for d in ctx.stuck_rows if d["status"] != "waiting"}
    stuck_groups.sort(key=lambda k: (k not in first, k))
    for k in stuck_groups[:POINT_LINES]:
        g = groups[groups["pg"] == k].iloc[0]
        s = int(g["stuck_seq"])
        ok = g["last_ok_seq"]
        head = f"{ctx.gname(k)}: "
        head += (
            f"every member reached {_short_op(g['last_ok_op'])} #{int(ok)}; "
            if not pd.isna(ok)
            else ""
        )
        head += f"at #{s} ({g['kind']}):"
        rows = [d for d in ctx.stuck_rows if d["pg"] == k]
        # the deviating ranks first, then one line per distinct call of the rest
        rows.sort(key=lambda d: (d["status"] == "waiting", d["rank"]))
        parts = []
        shown = 0
        waiting = [d for d in rows if d["status"] == "waiting"]
        for d in rows:
            if d["status"] == "waiting":
                continue
            if shown == 8:
                break
            shown += 1
            if d["status"] == "missing":
                parts.append(f"rank {d['rank']} missing (last: {ctx.last_entry(d['rank'])})")
            elif d["status"] == "no dump":
                parts.append(f"rank {d['rank']} no dump")
            else:
                parts.append(
                    f"rank {d['rank']} {d['status']}: {_short_op(d['op'])} {_shape(d)}"
                    + _at(d.get("frame"))
                )
        if waiting:
            w = waiting[0]
            parts.append(
                f"{_ranks_text([d['rank'] for d in waiting])} waiting in {_short_op(w['op'])} "
                f"{_shape(w)}" + _at(w.get("frame"))
            )
        rest = len([d for d in rows if d["status"] != "waiting"]) - shown
        if rest > 0:
            parts.append(f"{rest} more ranks not shown (the stuck table has them)")
        if bool(gtab.loc[k, "tie"]):
            parts.append(
                "no majority (as many ranks each way): the call of the side holding the lowest "
                "rank is taken as the reference"
            )
        out.append(head + " " + "; ".join(parts))
    if len(stuck_groups) > POINT_LINES:
        out.append(f"... {len(stuck_groups) - POINT_LINES} more stuck groups in the groups table")
    return out


def _at(frame: Any) -> str:
    """`` at train.py:12 in step`` (empty without a frame)."""
    return f" at {fmt.safe_text(frame)}" if isinstance(frame, str) and frame else ""


def _pg_of(n: tuple[str, Any], ctx: _Ctx) -> str:
    return str(n[1]) if n[0] == "c" else str(ctx.p2p[n]["g"])


def _op_of(n: tuple[str, Any], ctx: _Ctx) -> str | None:
    if n[0] == "p":
        return str(ctx.p2p[n]["op"])
    return next(
        (d["op"] for d in ctx.stuck_rows if d["pg"] == str(n[1]) and d["status"] == "waiting"), None
    )


def _shape(row: dict[str, Any]) -> str:
    """``[[1000]] Float``: the input sizes and dtypes as recorded."""
    sz = row.get("input_sizes")
    if sz == "[]":
        return "(no inputs)"
    dts = _json_list(row.get("input_dtypes"))
    dt = ",".join(str(x) for x in dts) if dts else "-"
    return fmt.safe_text(f"{sz if isinstance(sz, str) else '?'} {dt}")


def _deadlock(
    nodes: list[tuple[str, Any]],
    nxt: dict[tuple[str, Any], list[Any]],
    ctx: _Ctx,
) -> tuple[str, str, list[dict[str, Any]]]:
    """Every culprit waits elsewhere: follow the chain until it repeats; the loop is the answer."""
    cur = sorted(nodes, key=_node_order)[0]
    path: list[tuple[str, Any]] = []
    while cur not in path:
        path.append(cur)
        if not nxt.get(cur):
            break
        cur = nxt[cur][0]
    cycle = path[path.index(cur) :] if cur in path else path
    parts = []
    rows = []
    for i, m in enumerate(cycle):
        wm = sorted(ctx.waiters(m))
        parts.append(
            f"{_ranks_text(wm)} {'waits' if len(wm) == 1 else 'wait'} in {ctx.point(m)} for "
            f"{_ranks_text(sorted(ctx.culprits(m)))}"
        )
        rows.append(
            {
                "step": i,
                "ranks": json.dumps(wm),
                "pg": _pg_of(m, ctx),
                "seq": ctx.seq_of(m),
                "op": _op_of(m, ctx),
                "status": "waiting",
            }
        )
    why = (
        "their groups' collectives called in a different order"
        if all(m[0] == "c" for m in cycle)
        else "a send or recv waiting on a rank that waits for it"
    )
    answer = "deadlock: " + "; ".join(parts) + f": each waits for the other ({why})"
    return "deadlock", answer, rows


def _healthy(
    span: pd.DataFrame, c: pd.DataFrame, grp: _Groups, missing: tuple[int, ...]
) -> tuple[str, str]:
    tops = []
    firsts = c.drop_duplicates(["g", "seq"]).set_index(["g", "seq"])["op"]
    for k in list(span.index)[:3]:
        s = int(span.loc[k, "max"])
        if s > 0:
            tops.append(
                f"{_group_name(str(k), grp.desc.get(str(k)))}: {_short_op(firsts.get((k, s)))} #{s} last"
            )
    more = f", and {len(span) - 3} more groups" if len(span) > 3 else ""
    where = f" ({'; '.join(tops)}{more})" if tops else ""
    if missing:
        gone = _ranks_text(list(missing))
        it = "it" if len(missing) == 1 else "they"
        # the group the missing ranks belong to (the world's first): where the others would
        # wait for them
        k = next(
            (str(k) for k in span.index if set(missing) & set(grp.members.get(str(k), []))), None
        )
        top = int(span.loc[k, "max"]) if k is not None else 0
        if k is not None and top > 0:
            what = f"{_short_op(firsts.get((k, top)))} #{top} of {_group_name(k, grp.desc.get(k))}"
            return "partial", (
                f"every rank that dumped reached {what} last, with the same ops, sizes and "
                f"dtypes; {gone} dumped nothing: {it} may be the one stuck (a member that never "
                f"called #{top} keeps the others waiting there)"
            )
        return "partial", (
            f"nothing is stuck among the ranks that dumped: they reached the same collectives with "
            f"the same ops, sizes and dtypes{where}; {gone} dumped nothing: {it} may be the one "
            "stuck"
        )
    return "healthy", (
        "nothing is stuck: every rank of every group reached the same collectives with the same "
        f"ops, sizes and dtypes{where}"
    )


def _p2p_unrecorded(op_names: Any, is_p2p: np.ndarray) -> list[str]:
    if is_p2p.any():
        return []
    if not any(isinstance(o, str) and o.startswith("gloo:") for o in op_names):
        return []
    return [
        "gloo records no send/recv in the Flight Recorder: a rank blocked in one shows only its "
        "last collective"
    ]


def _groups_table(
    gtab: pd.DataFrame, grp: _Groups, mem: pd.DataFrame, span: pd.DataFrame, c: pd.DataFrame
) -> pd.DataFrame:
    firsts = c.drop_duplicates(["g", "seq"]).set_index(["g", "seq"])["op"]
    rows = []
    for k in gtab.index:
        k = str(k)
        st = gtab.loc[k, "stuck_seq"]
        stuck = None if pd.isna(st) else int(st)
        top = int(span.loc[k, "max"]) if k in span.index else 0
        ok = (stuck - 1) if stuck is not None else top
        rows.append(
            {
                "pg": k,
                "pg_desc": grp.desc.get(k),
                "members": len(grp.members.get(k, [])),
                "members_known": bool(grp.known.get(k, False)),
                "dumped": int(((mem["g"] == k) & mem["dumped"]).sum()),
                "last_ok_seq": ok if ok > 0 else None,
                "last_ok_op": firsts.get((k, ok)) if ok > 0 else None,
                "stuck_seq": stuck,
                "stuck_op": gtab.loc[k, "stuck_op"] if stuck is not None else None,
                "kind": gtab.loc[k, "kind"] if stuck is not None else None,
            }
        )
    cols = [
        "pg",
        "pg_desc",
        "members",
        "members_known",
        "dumped",
        "last_ok_seq",
        "last_ok_op",
        "stuck_seq",
        "stuck_op",
        "kind",
    ]
    out = pd.DataFrame(rows, columns=cols)
    return out.astype(
        {
            "pg": "string",
            "pg_desc": "string",
            "members": "int64",
            "members_known": "boolean",
            "dumped": "int64",
            "last_ok_seq": "Int64",
            "last_ok_op": "string",
            "stuck_seq": "Int64",
            "stuck_op": "string",
            "kind": "string",
        }
    )


# --- timings ------------------------------------------------------------------------------

TIMING_COLUMNS = (
    "pg",
    "seq",
    "op",
    "ranks",
    "first_arrival_ns",
    "arrival_spread_ns",
    "first_rank",
    "last_rank",
    "duration_ns",
    "timeout_ms",
)
LATE_COLUMNS = ("pg", "rank", "times_last", "caused_wait_ns", "waited_ns")


def _timings(
    c: pd.DataFrame, gtab: pd.DataFrame, mem: pd.DataFrame
) -> tuple[pd.DataFrame, pd.DataFrame, list[str]]:
    """Per collective every dumped member reached (before any stuck point): arrival spread and
    the first and last arrival; per (group, rank) the wait it caused (credited once, to the last
    arrival of each collective) and the wait it spent. Integer keys and numpy throughout."""
    notes: list[str] = []
    empty_t = pd.DataFrame({k: pd.Series(dtype="Int64") for k in TIMING_COLUMNS}).astype(
        {"pg": "string", "op": "string"}
    )
    empty_l = pd.DataFrame({k: pd.Series(dtype="int64") for k in LATE_COLUMNS}).astype(
        {"pg": "string"}
    )
    gc_all = c["gc"].to_numpy(np.int64)
    seq_all = c["seq"].to_numpy(np.int64)
    # each group's stuck seq by its code (inf: not stuck)
    codes = pd.Series(gc_all).groupby(c["g"].to_numpy()).first()
    stuck_by_code = np.full(int(gc_all.max()) + 1 if len(gc_all) else 1, np.inf)
    st = gtab["stuck_seq"].reindex(codes.index).to_numpy(dtype=float)
    stuck_by_code[codes.to_numpy(np.int64)] = np.where(np.isnan(st), np.inf, st)
    keep = c["time_created_ns"].notna().to_numpy(bool) & (seq_all < stuck_by_code[gc_all])
    if not keep.any():
        notes.append("no creation times recorded: no arrival spread or lateness to show")
        return empty_t, empty_l, notes
    gc = gc_all[keep]
    seq = seq_all[keep]
    rank = c["rank"].to_numpy(np.int64)[keep]
    tc = c["time_created_ns"].to_numpy(dtype=np.int64, na_value=0)[keep]
    done = c["time_completed_ns"].to_numpy(dtype=float, na_value=np.nan)[keep]
    tmo = c["timeout_ms"].to_numpy(dtype=float, na_value=np.nan)[keep]
    kept = np.flatnonzero(keep)  # the names are taken at the few rows they are shown for
    key = gc * (int(seq.max()) + 1) + seq
    inv, uniq = pd.factorize(key)
    del key  # the per-row arrays go as soon as they are used: 2M rows are 16 MB each
    n = len(uniq)
    count = np.bincount(inv, minlength=n)
    # sort by (collective, arrival, rank): each collective's rows in arrival order
    order = np.lexsort((rank, tc, inv))
    starts = np.searchsorted(inv[order], np.arange(n))
    ends = np.append(starts[1:], len(order))
    first_i, last_i = order[starts], order[ends - 1]
    del order
    ndumped = mem[mem["dumped"]].groupby("g").size()
    gname = c["g"].to_numpy()[kept[first_i]]
    need = ndumped.reindex(gname).fillna(0).to_numpy(np.int64)
    ok = (count == need) & (count >= 2)
    if not ok.any():
        notes.append("no collective with two or more ranks' creation times: no arrival spread")
        return empty_t, empty_l, notes
    lastt = tc[last_i]
    ndone = np.bincount(inv, weights=~np.isnan(done), minlength=n)
    maxdone = np.full(n, -np.inf)
    np.maximum.at(maxdone, inv, np.where(np.isnan(done), -np.inf, done))
    mintmo = np.full(n, np.inf)
    np.minimum.at(mintmo, inv, np.where(np.isnan(tmo), np.inf, tmo))
    dur = np.where(ndone == count, maxdone - lastt, np.nan)
    del done, tmo
    sel = np.flatnonzero(ok)
    timings = pd.DataFrame(
        {
            "pg": pd.array(gname[sel], dtype="string"),
            "seq": seq[first_i][sel],
            "op": pd.array(c["op"].to_numpy()[kept[last_i][sel]], dtype="string"),
            "ranks": count[sel],
            "first_arrival_ns": tc[first_i][sel],
            "arrival_spread_ns": (lastt - tc[first_i])[sel],
            "first_rank": rank[first_i][sel],
            "last_rank": rank[last_i][sel],
            "duration_ns": pd.array(np.round(dur[sel]), dtype="Float64").astype("Int64"),
            "timeout_ms": pd.array(
                np.where(np.isinf(mintmo[sel]), np.nan, mintmo[sel]), dtype="Float64"
            ).astype("Int64"),
        }
    )
    timings = timings.sort_values(["pg", "seq"], kind="stable").reset_index(drop=True)
    if timings["duration_ns"].isna().all() and c["time_completed_ns"].notna().any():
        notes.append(
            "no collective every member reached has completion times on every rank: "
            "durations are not shown, only arrival times"
        )
    notes.append(
        "arrivals are the host's enqueue times (time_created_ns) on each host's clock: across "
        "hosts they are only as close as the clocks are synchronised"
    )
    # the waits: each row's (last arrival - its arrival), credited to the last arrival
    row_ok = ok[inv]
    wait = (lastt[inv] - tc)[row_ok]
    # per (group, rank) the waits summed: numpy on one integer key (a pandas group-by on two
    # keys held ~10 arrays of all rows at once)
    m = int(rank.max()) + 1
    pairs, at = np.unique(gc[row_ok] * m + rank[row_ok], return_inverse=True)
    sums = np.zeros(len(pairs), dtype=np.int64)
    np.add.at(sums, at.reshape(-1), wait)
    waited = pd.Series(
        sums,
        index=pd.MultiIndex.from_arrays([pairs // m, pairs % m], names=["gc", "rank"]),
        name="wait",
    )
    cred = pd.DataFrame(
        {"gc": gc[last_i][sel], "rank": rank[last_i][sel],
         "wait": np.bincount(inv[row_ok], weights=wait, minlength=n)[sel]}
    )  # fmt: skip
    caused = cred.groupby(["gc", "rank"])["wait"].agg(["sum", "size"])
    late = waited.rename("waited_ns").to_frame()
    late["caused_wait_ns"] = caused["sum"].reindex(late.index).fillna(0).round()
    late["times_last"] = caused["size"].reindex(late.index).fillna(0)
    late = late.reset_index()
    names = pd.Series(codes.index.to_numpy(), index=codes.to_numpy())
    late["pg"] = names.reindex(late["gc"]).to_numpy()
    late = late[list(LATE_COLUMNS)].astype(
        {
            "pg": "string",
            "rank": "int64",
            "times_last": "int64",
            "caused_wait_ns": "int64",
            "waited_ns": "int64",
        }
    )
    late = late.sort_values(["pg", "rank"], kind="stable").reset_index(drop=True)
    return timings, late, notes


def _slow_lines(late: pd.DataFrame, timings: pd.DataFrame, grp: _Groups) -> list[str]:
    """Per group (the three with most waiting), the rank the others waited for most."""
    if late.empty:
        return []
    out = []
    top = late.sort_values(["caused_wait_ns", "rank"], ascending=[False, True]).drop_duplicates(
        "pg"
    )
    top = top[top["caused_wait_ns"] > 0].head(3)
    for row in top.itertuples(index=False):
        k = str(row.pg)
        n = int((timings["pg"] == k).sum())
        total = int(late.loc[late["pg"] == k, "caused_wait_ns"].sum())
        spread = int(timings.loc[timings["pg"] == k, "arrival_spread_ns"].max())
        out.append(
            f"slowest arrival in {_group_name(k, grp.desc.get(k))}: rank {row.rank} arrived last at "
            f"{row.times_last} of {n} collectives; the others waited {fmt.duration(row.caused_wait_ns)} "
            f"for it in all ({fmt.pct(row.caused_wait_ns / total) if total else '-'} of the group's "
            f"waiting; widest arrival spread {fmt.duration(spread)})"
        )
    return out


def _empty_report(records: FlightRecords, answer: str, notes: list[str]) -> HangReport:
    empty = pd.DataFrame()
    return HangReport(
        answer=answer,
        verdict="empty",
        evidence=(),
        groups=empty,
        stuck=pd.DataFrame(columns=list(STUCK_COLUMNS)),
        chain=pd.DataFrame(columns=["step", "ranks", "pg", "seq", "op", "status"]),
        timings=pd.DataFrame(columns=list(TIMING_COLUMNS)),
        late=pd.DataFrame(columns=list(LATE_COLUMNS)),
        ranks=tuple(records.ranks),
        missing_ranks=tuple(records.missing_ranks),
        notes=tuple(notes),
    )


def with_note(report: HangReport, note: str) -> HangReport:
    """``report`` with one more note."""
    import dataclasses

    return dataclasses.replace(report, notes=(*report.notes, note))
