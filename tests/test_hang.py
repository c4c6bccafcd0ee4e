"""The hang analysis (run/hang.py) on hand-built Flight Recorder records: each case's expected
answer derived in its comment from the rules of docs/hang.md; then the real sample dumps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fr_builders import entry, records

from traceoverlap.run.hang import diagnose_hang

AR = "gloo:all_reduce"


def _seqs(rank: int, n: int, **kw: object) -> list[dict[str, object]]:
    return [entry(rank, s, **kw) for s in range(1, n + 1)]  # type: ignore[arg-type]


def test_missing_rank_is_named_with_its_last_entry() -> None:
    # 4 ranks in the default group; 0, 1, 3 enqueued all_reduce #1-#6, rank 2 only #1-#5.
    # Lowest furthest seq 5 < highest 6 -> first stuck point #6 (missing). Rank 2 has no entry
    # there: missing; its last entry is #5 (frame train.py:15 by the builder's 10 + seq).
    # Ranks 0, 1, 3 called the majority's all_reduce: waiting, all the other members.
    rows = _seqs(0, 6) + _seqs(1, 6) + _seqs(2, 5) + _seqs(3, 6)
    h = diagnose_hang(records(rows, world=(0, 1, 2, 3)))
    assert h.verdict == "missing"
    assert h.answer == (
        "rank 2 never called all_reduce #6 of group 0 (default_pg): its last entry is "
        "all_reduce #5 of group 0 (default_pg), at train.py:15 in step; every other rank is "
        "waiting for it"
    )
    g = h.groups.iloc[0]
    assert (g["last_ok_seq"], g["stuck_seq"], g["kind"]) == (5, 6, "missing")
    st = dict(zip(h.stuck["rank"], h.stuck["status"], strict=True))
    assert st == {0: "waiting", 1: "waiting", 2: "missing", 3: "waiting"}
    assert json.loads(h.stuck.loc[h.stuck["rank"] == 0, "waits_for"].iloc[0]) == [2]


def test_desync_names_the_rank_against_the_majority() -> None:
    # 4 ranks agree on #1-#2; at #3 ranks 1, 2, 3 call all_reduce, rank 0 broadcast: 3 against
    # 1, so rank 0 deviated (the majority wins over the lowest-rank tie-break).
    rows = []
    for r in range(4):
        rows += _seqs(r, 2)
        rows.append(entry(r, 3, op="gloo:broadcast" if r == 0 else AR))
    h = diagnose_hang(records(rows))
    assert h.verdict == "desync"
    assert h.answer == (
        "rank 0 never called all_reduce #3 of group 0 (default_pg): it called broadcast; every "
        "other rank is waiting for it"
    )
    assert "no majority" not in " ".join(h.evidence)


def test_desync_tie_takes_the_lowest_ranks_call_and_says_so() -> None:
    # 2 ranks: rank 0 all_reduce #2, rank 1 barrier #2: 1 against 1, no majority; the side
    # holding rank 0 is the reference, so rank 1 deviated, and the evidence says it was a tie.
    rows = [entry(0, 1), entry(1, 1), entry(0, 2), entry(1, 2, op="gloo:barrier", sizes=())]
    h = diagnose_hang(records(rows))
    assert h.answer.startswith(
        "rank 1 never called all_reduce #2 of group 0 (default_pg): it called barrier"
    )
    assert any("no majority" in line for line in h.evidence)


@pytest.mark.parametrize(
    ("kw", "shown"),
    [({"sizes": ((500,),)}, "[[500]] Float"), ({"dtypes": ("Half",)}, "[[1000]] Half")],
    ids=["size", "dtype"],
)
def test_size_or_dtype_mismatch(kw: dict[str, object], shown: str) -> None:
    # 3 ranks, all call all_reduce #1; rank 1's inputs differ (500 elements, or Half): the
    # same op, a different signature -> mismatch; the majority (ranks 0, 2) used [[1000]] Float.
    rows = [entry(0, 1), entry(1, 1, **kw), entry(2, 1)]  # type: ignore[arg-type]
    h = diagnose_hang(records(rows))
    assert h.verdict == "mismatch"
    assert h.answer == (
        f"rank 1 called all_reduce #1 of group 0 (default_pg) with {shown} where the others used "
        "[[1000]] Float (a mismatch hangs, aborts a rank, or silently gives wrong results)"
    )


def test_chain_across_groups_ends_at_the_rank_that_waits_nowhere() -> None:
    # World 4. Group 1 (tp) = ranks 2, 3 (members recorded). Everyone did all_reduce #1-#3 of
    # group 0; ranks 0, 1 then enqueued #4 of group 0. Rank 2 then called #1 of group 1 and
    # waits there; rank 3 called nothing more (last entry: #3 of group 0, train.py:13).
    # Group 0: furthest seqs 4, 4, 3, 3 -> stuck at #4, ranks 2, 3 missing. Rank 2's last
    # entry is a waiting point (group 1 #1, where it called the only call) -> follow it:
    # group 1: rank 2 at 1, rank 3 at 0 -> stuck at #1, rank 3 missing, waiting nowhere: the
    # end of the chain. Group 1 explains the waits of ranks 2, 0, 1 (3 ranks), group 0 only of
    # ranks 0, 1: group 1 is the answer, group 0's wait is the rest of the chain.
    rows = _seqs(0, 4) + _seqs(1, 4) + _seqs(2, 3) + _seqs(3, 3)
    rows.append(entry(2, 1, pg="1", desc="tp"))
    groups = [{"rank": r, "pg_name": "1", "pg_desc": "tp", "members": "[2, 3]"} for r in (2, 3)]
    h = diagnose_hang(records(rows, groups, world=(0, 1, 2, 3)))
    assert h.verdict == "missing"
    assert h.answer == (
        "rank 3 never called all_reduce #1 of group 1 (tp): its last entry is all_reduce #3 of "
        "group 0 (default_pg), at train.py:13 in step; rank 2 waits for it; "
        "ranks 0 and 1 wait in all_reduce #4 of group 0 (default_pg) for ranks 2 and 3"
    )
    assert list(h.chain["pg"]) == ["0", "1", "1"]
    assert json.loads(h.chain["ranks"].iloc[-1]) == [3]


def test_groups_entered_in_a_different_order_is_a_deadlock() -> None:
    # Groups a and b, both ranks 0 and 1. Rank 0 calls a #1 then would call b #1; rank 1 calls
    # b #1 first. a: rank 1 missing, rank 1 waits in b; b: rank 0 missing, rank 0 waits in a:
    # the chain returns to itself, no rank waits nowhere -> deadlock.
    rows = [entry(0, 1, pg="a", desc="A"), entry(1, 1, pg="b", desc="B")]
    groups = [{"rank": r, "pg_name": k, "members": "[0, 1]"} for r in (0, 1) for k in ("a", "b")]
    h = diagnose_hang(records(rows, groups))
    assert h.verdict == "deadlock"
    assert h.answer.startswith(
        "deadlock: rank 0 waits in all_reduce #1 of group a (A) for rank 1; rank 1 waits in "
        "all_reduce #1 of group b (B) for rank 0"
    )


def test_recv_whose_send_never_came() -> None:
    # NCCL-style, 3 ranks. All did all_reduce #1-#2. Rank 0 then enqueued #3; rank 2 posted a
    # recv from rank 1 (its p2p #1, "recv 2<-1"); rank 1's last entry is #2 (busy elsewhere):
    # no "send 1->2" anywhere. Group 0 at #3: ranks 1, 2 missing; rank 2 waits in the recv,
    # whose peer rank 1 waits nowhere: the chain ends at rank 1 through the recv. The recv
    # explains ranks 2 and 0, group 0 alone only rank 0 -> the recv is the answer.
    rows = []
    for r in range(3):
        rows += _seqs(r, 2, op="nccl:all_reduce")
    rows.append(entry(0, 3, op="nccl:all_reduce"))
    rows.append(entry(2, 0, op="nccl:recv 2<-1", p2p_seq=1))
    h = diagnose_hang(records(rows))
    assert h.verdict == "p2p"
    assert h.answer == (
        "rank 2 waits in recv from rank 1 (p2p #1) of group 0 (default_pg): rank 1 never posted "
        "the matching send; its last entry is all_reduce #2 of group 0 (default_pg), at "
        "train.py:12 in step; rank 0 waits in all_reduce #3 of group 0 (default_pg) for ranks 1 "
        "and 2"
    )


def test_matched_send_and_recv_are_not_stuck() -> None:
    # send 0->1 (rank 0's p2p #1) and recv 1<-0 (rank 1's p2p #1) pair: the 1st send from 0 to
    # 1 with the 1st recv on 1 from 0. Nothing else: nothing stuck.
    rows = [
        entry(0, 1, op="nccl:all_reduce"),
        entry(1, 1, op="nccl:all_reduce"),
        entry(0, 0, op="nccl:send 0->1", p2p_seq=1),
        entry(1, 0, op="nccl:recv 1<-0", p2p_seq=1),
    ]
    h = diagnose_hang(records(rows))
    assert h.verdict == "healthy"


def test_healthy_says_nothing_is_stuck() -> None:
    # 2 ranks, the same all_reduce #1-#5: no disagreement, equal furthest seqs.
    h = diagnose_hang(records(_seqs(0, 5) + _seqs(1, 5)))
    assert h.verdict == "healthy"
    assert h.answer == (
        "nothing is stuck: every rank of every group reached the same collectives with the same "
        "ops, sizes and dtypes (group 0 (default_pg): all_reduce #5 last)"
    )
    assert h.stuck.empty


def test_partial_dumps_are_hedged() -> None:
    # World 4, ranks 0-2 dumped and agree up to #5 (their last); rank 3 dumped nothing: nothing
    # is stuck among the dumps, but rank 3 may be the one stuck, at #5.
    rows = _seqs(0, 5) + _seqs(1, 5) + _seqs(2, 5)
    h = diagnose_hang(records(rows, world=(0, 1, 2, 3)))
    assert h.verdict == "partial"
    assert h.answer == (
        "every rank that dumped reached all_reduce #5 of group 0 (default_pg) last, with the same "
        "ops, sizes and dtypes; rank 3 dumped nothing: it may be the one stuck (a member that "
        "never called #5 keeps the others waiting there)"
    )
    # and with a stuck point among the dumps, the answer stands and the evidence hedges
    rows = _seqs(0, 6) + _seqs(1, 6) + _seqs(2, 5)
    h = diagnose_hang(records(rows, world=(0, 1, 2, 3)))
    assert h.answer.startswith("rank 2 never called all_reduce #6")
    assert h.missing_ranks == (3,)
    assert any(line.startswith("rank 3 dumped nothing") for line in h.evidence)


def test_stalled_when_everyone_arrived_and_it_did_not_complete() -> None:
    # States recorded (NCCL): #1 completed on both, #2 started on both and not completed:
    # every member arrived -> stalled, not a missing rank.
    rows = [
        entry(r, 1, op="nccl:all_reduce", state="completed", time_completed_ns=10) for r in (0, 1)
    ] + [entry(r, 2, op="nccl:all_reduce", state="started") for r in (0, 1)]
    h = diagnose_hang(records(rows))
    assert h.verdict == "stalled"
    assert h.answer.startswith("every member of group 0 (default_pg) called all_reduce #2")


def test_arrival_spread_and_credit() -> None:
    # 3 ranks, 2 collectives, creation times (ns):
    #   #1: r0 100, r1 300, r2 150 -> last rank 1, spread 200; waits r0 200, r2 150 (350 to r1)
    #       completed at 400, 420, 410 on all -> duration 420 - 300 = 120
    #   #2: r0 1000, r1 1010, r2 1500 -> last rank 2, spread 500; waits r0 500, r1 490 (990
    #       to r2); no completion time -> duration null
    # late: r0 last 0 times, caused 0, waited 700; r1 once, caused 350, waited 490;
    #       r2 once, caused 990, waited 150. States "completed" so nothing is stalled.
    t1 = {0: 100, 1: 300, 2: 150}
    d1 = {0: 400, 1: 420, 2: 410}
    t2 = {0: 1000, 1: 1010, 2: 1500}
    rows = []
    for r in range(3):
        rows.append(
            entry(
                r,
                1,
                op="nccl:all_reduce",
                state="completed",
                time_created_ns=t1[r],
                time_completed_ns=d1[r],
            )
        )
        rows.append(entry(r, 2, op="nccl:all_reduce", state="completed", time_created_ns=t2[r]))
    h = diagnose_hang(records(rows))
    assert h.verdict == "healthy"
    t = h.timings.set_index("seq")
    assert list(t["arrival_spread_ns"]) == [200, 500]
    assert list(t["last_rank"]) == [1, 2]
    assert t.loc[1, "duration_ns"] == 120
    assert t["duration_ns"].isna().tolist() == [False, True]
    late = h.late.set_index("rank")
    assert late["times_last"].tolist() == [0, 1, 1]
    assert late["caused_wait_ns"].tolist() == [0, 350, 990]
    assert late["waited_ns"].tolist() == [700, 490, 150]
    # the caused waiting sums to the waited (credited once)
    assert late["caused_wait_ns"].sum() == late["waited_ns"].sum()
    assert any("slowest arrival in group 0 (default_pg): rank 2" in x for x in h.evidence)


def test_no_creation_times_says_so() -> None:
    h = diagnose_hang(records(_seqs(0, 2) + _seqs(1, 2)))
    assert h.timings.empty
    assert any("no creation times" in n for n in h.notes)


_FR = Path(__file__).resolve().parents[1] / "fixtures" / "flightrec"
#: the issue's sample (/work/fr-sample/hang.py), and the same made by workloads/hangs.py
#: (--case other-op --other barrier)
SAMPLES = [_FR / "sample_gloo_2rank", _FR / "other-op"]


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_real_sample_gloo_barrier_instead_of_all_reduce(sample: Path) -> None:
    # the sample: 2 ranks, 5 all_reduces, then rank 0 all_reduce #6 and rank 1
    # barrier #6 (by construction): desync at #6, rank 1 against rank 0 (a tie: rank 0's call
    # is the reference), rank 0 waiting.
    if not (sample / "fr_0").exists():
        pytest.skip("the sample dumps are not in fixtures/flightrec yet")
    try:
        from traceoverlap.readers.flightrec import read_flight_records
    except ImportError:
        from fr_builders import load_pickles as read_flight_records  # type: ignore[assignment]
    recs = read_flight_records([sample / "fr_0", sample / "fr_1"])  # type: ignore[list-item]
    h = diagnose_hang(recs)
    assert h.answer == (
        "rank 1 never called all_reduce #6 of group 0 (default_pg): it called barrier; every "
        "other rank is waiting for it"
    )
    assert int(h.groups.iloc[0]["last_ok_seq"]) == 5
    assert len(h.timings) == 5  # the five all_reduces both reached; arrivals only (gloo)
    assert h.timings["duration_ns"].isna().all()


# --- reporters and the command -------------------------------------------------------------


def test_text_report_wraps_and_strips_terminal_control() -> None:
    # a desync whose op name carries an OSC title sequence (a crafted dump): the text report
    # never shows the escape, and every line fits the width
    evil = "gloo:broadcast\x1b]0;pwned\x07"
    rows = [entry(0, 1), entry(1, 1), entry(2, 1, op=evil)]
    from traceoverlap.reporters.hang_report import render_text

    text = render_text(diagnose_hang(records(rows)), width=60)
    assert "\x1b" not in text and "\x07" not in text
    assert text.splitlines()[0] == "rank 2 never called all_reduce #1 of group 0 (default_pg):"
    assert text.splitlines()[1] == "  it called broadcast; every other rank is waiting for it"
    assert max(len(line) for line in text.splitlines()) <= 60


def test_json_report_is_the_report_as_data() -> None:
    from traceoverlap.reporters.hang_report import HANG_SCHEMA_VERSION, render_json

    rows = _seqs(0, 6) + _seqs(1, 6) + _seqs(2, 5)
    h = diagnose_hang(records(rows))
    obj = json.loads(render_json(h))
    assert obj["schema_version"] == HANG_SCHEMA_VERSION
    assert obj["answer"] == h.answer and obj["verdict"] == "missing"
    assert [r["rank"] for r in obj["stuck"] if r["status"] == "missing"] == [2]
    assert obj["stuck"][0]["waits_for"] == [2]  # a list, not JSON text
    assert obj["groups"][0]["stuck_seq"] == 6
    assert obj["timings"] == [] and obj["late"] == []  # no creation times: nothing invented
    assert "NaN" not in render_json(h)


def test_hang_help_teaches_how_to_get_a_dump() -> None:
    from click.testing import CliRunner

    from traceoverlap.cli import main

    out = CliRunner().invoke(main, ["hang", "--help"], terminal_width=100).output
    for needle in ("TORCH_FR_BUFFER_SIZE", "_dump_fr_trace", "TORCH_FR_DUMP_TEMP_FILE", "--traces"):
        assert needle in out, needle
    assert "hang" in CliRunner().invoke(main, ["--help"]).output


def _reader() -> object:
    return pytest.importorskip("traceoverlap.readers.flightrec")


def test_hang_command_on_the_sample(tmp_path: Path) -> None:
    sample = SAMPLES[0]
    # the command end to end: the same answer as the analysis, text and JSON
    _reader()
    if not (sample / "fr_0").exists():
        pytest.skip("the sample dumps are not in fixtures/flightrec yet")
    from click.testing import CliRunner

    from traceoverlap.cli import main

    r = CliRunner().invoke(main, ["hang", str(sample / "fr_0"), str(sample / "fr_1")])
    assert r.exit_code == 0, r.output
    assert r.output.startswith("rank 1 never called all_reduce #6 of group 0 (default_pg)")
    out = tmp_path / "h.json"
    r = CliRunner().invoke(
        main,
        ["hang", str(sample / "fr_0"), str(sample / "fr_1"), "--format", "json", "-o", str(out)],
    )
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["verdict"] == "desync"


@pytest.mark.timeout(120)
def test_hang_jobs_read_the_dumps_in_processes_with_the_same_answer() -> None:
    # -j means what it means for analyze: the per-rank reading in N processes; the answer and
    # the JSON are the same as read in one
    from click.testing import CliRunner

    from traceoverlap.cli import main

    folder = SAMPLES[0].parent / "skip_8"
    outs = {}
    for jobs in ("1", "2"):
        for fmt in ("text", "json"):
            r = CliRunner().invoke(main, ["hang", str(folder), "-j", jobs, "--format", fmt])
            assert r.exit_code == 0, r.output
            outs[jobs, fmt] = r.output
    assert outs["1", "text"] == outs["2", "text"] and outs["1", "json"] == outs["2", "json"]
    assert "--jobs" in CliRunner().invoke(main, ["hang", "--help"]).output


def test_hang_command_bad_input_is_one_line(tmp_path: Path) -> None:
    _reader()
    from click.testing import CliRunner

    from traceoverlap.cli import main

    bad = tmp_path / "fr_0"
    bad.write_bytes(b"not a dump")
    r = CliRunner().invoke(main, ["hang", str(bad)])
    assert r.exit_code == 2
    assert r.output.startswith("traceoverlap: error: ") and r.output.count("\n") == 1


def test_late_not_missing_when_the_last_arrival_passed_the_timeout() -> None:
    # 2 ranks, timeout 3,000 ms. #1: created at 0 and 1 ms (spread 1 ms); #2: rank 0 at
    # 10 ms, rank 1 at 5,010 ms: spread 5,000 ms > 3,000 ms -> rank 1 was late at #2, 5.000 s
    # after rank 0; every rank reached every collective, so nothing is missing.
    rows = [
        entry(0, 1, time_created_ns=0, timeout_ms=3000),
        entry(1, 1, time_created_ns=1_000_000, timeout_ms=3000),
        entry(0, 2, time_created_ns=10_000_000, timeout_ms=3000),
        entry(1, 2, time_created_ns=5_010_000_000, timeout_ms=3000),
    ]
    h = diagnose_hang(records(rows))
    assert h.verdict == "late"
    assert h.answer == (
        "rank 1 was late, not missing: it called all_reduce #2 of group 0 (default_pg) 5.000 s "
        "after rank 0, past the op's 3.000 s timeout: the others timed out waiting for it"
    )
    assert h.evidence[0].startswith("no rank is missing: every rank of every group reached")


# --- the planted hangs: real gloo dumps (fixtures/flightrec/, workloads/hangs.py) ------------

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "flightrec"

#: case -> the first line's start, from the case's construction (fixtures/flightrec/README.md):
#: which rank did what, at which group and sequence id.
PLANTED = {
    # rank 1 sleeps instead of calling all_reduce #6: its last entry is #5
    "skip": "rank 1 never called all_reduce #6 of group 0 (default_pg): its last entry is "
    "all_reduce #5 of group 0 (default_pg)",
    # 8 ranks, rank 5 stops before #12, rings of 8 entries
    "skip_8": "rank 5 never called all_reduce #12 of group 0 (default_pg): its last entry is "
    "all_reduce #11 of group 0 (default_pg)",
    # the example: barrier where rank 0 calls all_reduce (a tie: rank 0 is the reference)
    "other-op": "rank 1 never called all_reduce #6 of group 0 (default_pg): it called barrier; "
    "every other rank is waiting for it",
    "other-op-broadcast": "rank 1 never called all_reduce #6 of group 1 (group_a): it called "
    "broadcast",
    # 3 of 4 dumps (rank 2 aborted): ranks 0, 1 say 1,000 -> rank 3 (1,001) deviates
    "size": "rank 3 called all_reduce #6 of group 0 (default_pg) with [[1001]] Float where the "
    "others used [[1000]] Float",
    "dtype": "rank 1 called all_reduce #6 of group 0 (default_pg) with [[1000]] Int where the "
    "others used [[1000]] Float",
    # rank 3 entered group 2 first: 3 waits for 2 in group 2, 2 waits for 3 in group 1
    "group-order": "deadlock: ranks 0, 1 and 2 wait in all_reduce #6 of group 1 (group_a) for "
    "rank 3; rank 3 waits in all_reduce #6 of group 2 (group_b) for rank 2",
    # 0 -> 1 (group 1) -> 2 (group 2, sleeping): the chain ends at rank 2
    "chain": "rank 2 never called all_reduce #6 of group 2 (group_b): its last entry is "
    "all_reduce #5 of group 2 (group_b)",
    # gloo records no recv: indistinguishable from skip
    "recv-no-send": "rank 2 never called all_reduce #6 of group 0 (default_pg): its last entry "
    "is all_reduce #5 of group 0 (default_pg)",
    # rank 1 called #6 4.5 s after rank 0; the timeout is 3 s
    "sleep": "rank 1 was late, not missing: it called all_reduce #6 of group 0 (default_pg)",
    "healthy": "nothing is stuck",
    # ranks 2 and 3 both sleep instead of calling #6
    "skip_two": "ranks 2 and 3 never called all_reduce #6 of group 0 (default_pg): rank 2's last "
    "entry is all_reduce #5 of group 0 (default_pg)",
    # rank 1 exits before #6 and dumps nothing; ranks 0, 2, 3 called #6 (their last)
    "crash": "every rank that dumped reached all_reduce #6 of group 0 (default_pg) last, with the "
    "same ops, sizes and dtypes; rank 1 dumped nothing: it may be the one stuck",
    # DDP, rank 1 one batch short: its barrier is #11 where rank 0 is in a bucket all_reduce
    "ddp-uneven": "rank 1 never called all_reduce #11 of group 0 (default_pg): it called barrier; "
    "every other rank is waiting for it",
}


@pytest.mark.parametrize("case", sorted(PLANTED))
def test_planted_hang_first_line(case: str) -> None:
    reader = pytest.importorskip("traceoverlap.readers.flightrec")
    folder = FIXTURES / case
    if not folder.is_dir():
        pytest.skip(f"fixtures/flightrec/{case} is not here yet")
    h = diagnose_hang(reader.read_flight_records(folder))
    assert h.answer.startswith(PLANTED[case]), h.answer
    if case == "chain":
        assert "rank 0 waits in all_reduce #6 of group 1 (group_a) for rank 1" in h.answer
    if case == "size":
        assert h.missing_ranks == (2,)


def test_not_completed_with_a_rank_that_dumped_nothing_is_not_stalled() -> None:
    # NCCL-like, world 3: ranks 0, 1 completed #1 and started #2, which has not completed;
    # rank 2 dumped nothing. Every rank that dumped called #2: the one that did not dump is
    # the likely culprit, not the network.
    rows = [
        entry(r, 1, op="nccl:all_reduce", state="completed", time_completed_ns=10) for r in (0, 1)
    ] + [entry(r, 2, op="nccl:all_reduce", state="started") for r in (0, 1)]
    h = diagnose_hang(records(rows, world=(0, 1, 2)))
    assert h.verdict == "partial"
    assert h.answer == (
        "every rank that dumped called all_reduce #2 of group 0 (default_pg), and it has not "
        "completed on ranks 0 and 1; rank 2 dumped nothing: it is the likely one stuck"
    )


def _cases() -> dict[str, list[dict[str, object]]]:
    """Small hand-built cases, one per verdict, for the reporters."""
    ar = "nccl:all_reduce"
    return {
        "missing": [entry(0, 1, op=ar, time_created_ns=5), entry(1, 1, op=ar, time_created_ns=9)]
        + [entry(0, 2, op=ar)],
        "desync": [entry(0, 1), entry(1, 1, op="gloo:barrier", sizes=())],
        "mismatch": [entry(0, 1), entry(1, 1, dtypes=("Int",))],
        "p2p": [
            entry(0, 1, op=ar),
            entry(1, 1, op=ar),
            entry(1, 0, op="nccl:recv 1<-0", p2p_seq=1),
        ],
        "deadlock": [entry(0, 1, pg="a"), entry(1, 1, pg="b")],
        "healthy": [entry(0, 1), entry(1, 1)],
    }


@pytest.mark.parametrize("case", sorted(_cases()))
def test_every_verdict_renders(case: str) -> None:
    # the text's first line is the answer's start; the JSON says the same verdict, no NaN
    from traceoverlap.reporters.hang_report import render_json, render_text

    groups = [{"rank": r, "pg_name": k, "members": "[0, 1]"} for r in (0, 1) for k in ("a", "b")]
    h = diagnose_hang(records(_cases()[case], groups if case == "deadlock" else None))
    assert h.verdict == case
    text = render_text(h, width=200)
    assert " ".join(text.split("\n\n")[0].split()) == h.answer  # the first paragraph
    raw = render_json(h)
    assert json.loads(raw)["verdict"] == case and "NaN" not in raw


def test_last_step_summary_from_a_trace() -> None:
    # rank 1's trace (ms): ProfilerStep#1 [0, 100), ProfilerStep#2 [100, 600); in step 2 a
    # data_loader range [110, 510) = 400 ms, aten::add [520, 530) = 10 ms, and
    # record_param_comms of group 0, seq 5, [540, 590) = 50 ms (a communication call). The
    # last step is #2 (500 ms); its host ran data_loader 400 ms then aten::add 10 ms; 50 ms in
    # communication calls; the dumps' last collective (#5 of group 0) is in that step.
    from traceoverlap.core.model import make_events
    from traceoverlap.rank.hosttrace import last_step_summary

    ms = 1_000_000
    rows = [
        ("annotation", "ProfilerStep#1", 0, 100, "", -1),
        ("annotation", "ProfilerStep#2", 100, 600, "", -1),
        ("cpu_op", "aten::mm", 10, 20, "", -1),
        ("annotation", "data_loader", 110, 510, "", -1),
        ("cpu_op", "aten::add", 520, 530, "", -1),
        ("cpu_op", "record_param_comms", 540, 590, "0", 5),
    ]
    ev = make_events(
        len(rows),
        {
            "rank": 1,
            "tid": 7,
            "category": [r[0] for r in rows],
            "name": [r[1] for r in rows],
            "start_ns": [r[2] * ms for r in rows],
            "end_ns": [r[3] * ms for r in rows],
            "process_group": [r[4] for r in rows],
            "seq": [r[5] for r in rows],
        },
    )
    assert last_step_summary(ev, 1, "0", 5) == (
        "rank 1's trace: in its last traced step, ProfilerStep#2 (500.00 ms) its host ran "
        "data_loader 400.00 ms, aten::add 10.00 ms; 50.00 ms inside communication calls; its "
        "last collective in the dumps, #5 of group 0, is traced in that step"
    )
    assert last_step_summary(ev, 0) is None  # no events of rank 0
    # a trace without sequence ids (older torch) is said not to be joined
    assert "records no sequence ids" in (last_step_summary(ev, 1, "1", 5) or "")


def test_the_answer_names_its_culprits() -> None:
    # missing: rank 2 (its last entry all_reduce #5 of group 0); deadlock: both ranks
    rows = _seqs(0, 6) + _seqs(1, 6) + _seqs(2, 5)
    assert diagnose_hang(records(rows)).culprits == ((2, "0", 5),)
    groups = [{"rank": r, "pg_name": k, "members": "[0, 1]"} for r in (0, 1) for k in ("a", "b")]
    h = diagnose_hang(records([entry(0, 1, pg="a"), entry(1, 1, pg="b")], groups))
    assert h.culprits == ((0, "a", 1), (1, "b", 1))


def test_hang_command_with_traces() -> None:
    # the dumps of other-op blame rank 1; the bundled naive_slow traces have a rank 1: its line
    # is added (the two are different runs: this checks the join's plumbing, not its numbers)
    _reader()
    sample = SAMPLES[1]
    traces = Path(__file__).resolve().parents[1] / "fixtures" / "workloads" / "naive_slow"
    if not (sample / "fr_0").exists() or not traces.is_dir():
        pytest.skip("fixtures not here")
    from click.testing import CliRunner

    from traceoverlap.cli import main

    r = CliRunner().invoke(main, ["hang", str(sample), "--traces", str(traces)])
    assert r.exit_code == 0, r.output
    assert "rank 1's trace: in its last traced step, ProfilerStep#" in " ".join(r.output.split())
