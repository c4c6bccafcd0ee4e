"""The Flight Recorder reader (issue 39): real torch 2.13 gloo dumps
(fixtures/flightrec/sample_gloo_2rank, see its README), both writers, every bad input, and a
crafted pickle that would run code."""

from __future__ import annotations

import copy
import json
import os
import pickle
import shutil
from pathlib import Path
from typing import Any

import pandas as pd
import pytest

from traceoverlap.core.errors import NotATraceError, TraceFormatError
from traceoverlap.core.flightrec import ENTRY_COLUMNS, GROUP_COLUMNS, FlightRecords
from traceoverlap.readers import read_trace, sniff_format
from traceoverlap.readers.flightrec import (
    combine,
    holds_flight_records,
    is_flight_record,
    read_dump,
    read_flight_records,
)
from traceoverlap.readers.flightrec._load import PlainUnpickler
from traceoverlap.readers.paths import resolve_inputs

SAMPLE = Path(__file__).resolve().parents[1] / "fixtures" / "flightrec" / "sample_gloo_2rank"
KINETO = Path(__file__).resolve().parents[1] / "fixtures" / "gloo_collectives" / "rank0.json.gz"


def _sample(rank: int) -> dict[str, Any]:
    """The sample's pickle dump of ``rank`` as plain data (to build variants from)."""
    with open(SAMPLE / f"fr_{rank}", "rb") as f:
        return PlainUnpickler(f).load()  # type: ignore[no-any-return]


def _write(path: Path, dump: object, how: str = "pickle") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    if how == "pickle":
        path.write_bytes(pickle.dumps(dump, protocol=2))
    else:
        path.write_text(json.dumps(dump))
    return path


def _copy(tmp: Path, names: tuple[str, ...]) -> Path:
    tmp.mkdir(parents=True, exist_ok=True)
    for n in names:
        shutil.copy(SAMPLE / n, tmp / n)
    return tmp


def _row(fr: FlightRecords, rank: int, seq: int) -> pd.Series:
    e = fr.entries
    rows = e[(e["rank"] == rank) & (e["collective_seq_id"] == seq)]
    assert len(rows) == 1
    return rows.iloc[0]


# --- the real sample --------------------------------------------------------------------------


def test_sample_pickles_read_as_the_hang_they_hold() -> None:
    fr = read_flight_records([SAMPLE])
    # the folder holds fr_0, fr_1 (pickle) and fr_0.json, fr_1.json: one dump per rank, pickled
    assert fr.ranks == (0, 1) and fr.world == (0, 1) and fr.missing_ranks == ()
    assert fr.files == {0: str(SAMPLE / "fr_0"), 1: str(SAMPLE / "fr_1")}
    assert fr.versions == {0: "2.10", 1: "2.10"}
    # make.py: five all_reduces on both ranks, then a sixth (rank 0) or a barrier (rank 1)
    assert fr.entries.groupby("rank").size().tolist() == [6, 6]
    r0, r1 = _row(fr, 0, 6), _row(fr, 1, 6)
    assert (r0["op"], r1["op"]) == ("gloo:all_reduce", "gloo:barrier")
    # torch.ones(1000): one input of shape [1000], 1,000 floats; barrier has no tensor
    assert (r0["input_sizes"], r0["input_dtypes"], r0["numel_in"]) == (
        "[[1000]]",
        '["Float"]',
        1000,
    )
    assert (r1["input_sizes"], r1["input_dtypes"], r1["numel_in"]) == ("[]", "[]", 0)
    assert r0["pg_id"] == 0 and (r0["pg_name"], r0["pg_desc"]) == ("0", "default_pg")
    assert r1["state"] == "scheduled" and not r1["retired"] and not r1["is_p2p"]
    assert r1["timeout_ms"] == 4000  # timeout=timedelta(seconds=4)
    # make.py line 9 is rank 1's barrier, line 10 rank 0's sixth all_reduce, line 7 the loop;
    # torch's own frames (distributed_c10d.py, c10d_logger.py) are skipped
    assert r1["frame"] == "/tmp/fr/hang.py:9 in main"
    assert r0["frame"] == "/tmp/fr/hang.py:10 in main"
    assert _row(fr, 0, 1)["frame"] == "/tmp/fr/hang.py:7 in main"
    assert r1["stack"].splitlines()[0].endswith("distributed_c10d.py:5349 in barrier")
    assert len(r1["stack"].splitlines()) == 13  # every frame the dump recorded
    # gloo records no start / completion time: null, never 0
    assert fr.entries["time_started_ns"].isna().all()
    assert fr.entries["time_completed_ns"].isna().all()
    assert fr.entries["duration_ns"].isna().all()
    assert (fr.entries["time_created_ns"] > 0).all()
    # the ring's order within a rank: record ids 0-5
    assert fr.entries["record_id"].tolist() == [0, 1, 2, 3, 4, 5] * 2


def test_sample_groups_reconcile_glooes_nameless_config() -> None:
    fr = read_flight_records([SAMPLE / "fr_0", SAMPLE / "fr_1"])
    g = fr.groups
    assert g["rank"].tolist() == [0, 1] and g["pg_id"].tolist() == [0, 0]
    assert g["pg_name"].tolist() == ["0", "0"] and g["pg_desc"].tolist() == ["default_pg"] * 2
    # pg_config {'': {'ranks': '[0, 1]'}} paired with the entries' only group, ('0', 'default_pg')
    assert g["members"].tolist() == ["[0,1]", "[0,1]"] and g["size"].tolist() == [2, 2]
    # pg_status {'0': {enqueued 6, started -1, completed 3 (rank 1) / 6 (rank 0)}}; -1 is null
    assert g["last_enqueued"].tolist() == [6, 6]
    assert g["last_started"].isna().all()
    assert g["last_completed"].tolist() == [6, 3]
    assert any("pg_config's group '' taken to be group 0" in n for n in fr.notes), fr.notes
    assert any("no start or completion times" in n for n in fr.notes)


def test_pickle_and_json_give_the_same_tables(tmp_path: Path) -> None:
    pk = read_flight_records([_copy(tmp_path / "p", ("fr_0", "fr_1"))])
    js = read_flight_records([_copy(tmp_path / "j", ("fr_0.json", "fr_1.json"))])
    # what differs, and why: the JSON has no frames (torch writes none into it) ...
    assert js.entries["frame"].isna().all() and js.entries["stack"].isna().all()
    assert any("no stack frames" in n for n in js.notes)
    # ... and was written a moment later: rank 1's barrier retired by then, and pg_status moved
    assert not _row(pk, 1, 6)["retired"] and _row(js, 1, 6)["retired"]
    assert pk.groups["last_completed"].tolist() == [6, 3]
    assert js.groups["last_completed"].tolist() == [6, 6]
    same = [c for c, _ in ENTRY_COLUMNS if c not in ("frame", "stack", "retired")]
    pd.testing.assert_frame_equal(pk.entries[same], js.entries[same])
    # the rest of retired agrees; JSON's 0 times read as null like the pickle's None
    pd.testing.assert_series_equal(pk.entries["retired"][:-1], js.entries["retired"][:-1])
    cols = [c for c, _ in GROUP_COLUMNS if c != "last_completed"]
    pd.testing.assert_frame_equal(pk.groups[cols], js.groups[cols])
    assert pk.world == js.world == (0, 1)


def test_a_pickle_beside_its_json_is_one_dump() -> None:
    fr = read_flight_records([SAMPLE])
    assert "ranks 0, 1: a pickle and a JSON dump each; read the pickles" in "\n".join(fr.notes)


def test_dtypes_are_the_contracts(tmp_path: Path) -> None:
    for fr in (
        read_flight_records([SAMPLE]),
        read_flight_records([_copy(tmp_path, ("fr_0.json",))]),
        combine([]),
    ):
        assert [(c, str(t)) for c, t in fr.entries.dtypes.items()] == list(ENTRY_COLUMNS)
        assert [(c, str(t)) for c, t in fr.groups.dtypes.items()] == list(GROUP_COLUMNS)


def test_the_map_can_be_the_callers(tmp_path: Path) -> None:
    seen: list[tuple[int, str]] = []

    def reverse_map(pairs):  # type: ignore[no-untyped-def]
        seen.extend(pairs)
        return [read_dump(p, r) for r, p in reversed(pairs)]  # any order: combined by rank

    fr = read_flight_records([SAMPLE], map_parts=reverse_map)
    assert seen == [(0, str(SAMPLE / "fr_0")), (1, str(SAMPLE / "fr_1"))]
    assert fr.ranks == (0, 1) and fr.entries["rank"].tolist() == [0] * 6 + [1] * 6
    # the run's map: one unit a file, the rank from its name
    from traceoverlap.run.parallel import run_map

    mapped = read_flight_records(
        [SAMPLE], lambda pairs: run_map([Path(p) for _, p in pairs], read_dump, jobs=1)
    )
    pd.testing.assert_frame_equal(mapped.entries, fr.entries)
    # a part crosses process boundaries (run_map's workers): it pickles and reads the same
    part = read_dump(SAMPLE / "fr_1", 1)
    again = pickle.loads(pickle.dumps(part))
    pd.testing.assert_frame_equal(combine([again]).entries, combine([part]).entries)


def test_entries_with_other_fields_and_shared_values(tmp_path: Path) -> None:
    # a ring whose entries do not all have the same keys (one lacks thread_name and has a key
    # no other has): read field by field, the missing one null in that entry only
    d = _sample(0)
    del d["entries"][2]["thread_name"]
    d["entries"][2]["new_field"] = 1
    fr = read_flight_records([_write(tmp_path / "a" / "fr_0", d)])
    base = read_flight_records([SAMPLE / "fr_0"])
    names = fr.entries["thread_name"]
    assert names.isna().tolist() == [False, False, True, False, False, False]
    keep = [c for c, _ in ENTRY_COLUMNS if c != "thread_name"]
    pd.testing.assert_frame_equal(fr.entries[keep], base.entries[keep])
    # equal values as one shared object (a pickle's memo) or as copies: the same table
    shared = _sample(0)
    sizes, pg = [[1000]], ["0", "default_pg"]
    for e in shared["entries"]:
        e["input_sizes"], e["output_sizes"], e["process_group"] = sizes, sizes, pg
    copies = copy.deepcopy(shared)
    for e in copies["entries"]:
        e["input_sizes"], e["output_sizes"] = [[1000]], [[1000]]
        e["process_group"] = ["0", "default_pg"]
    one = read_flight_records([_write(tmp_path / "b" / "fr_0", shared)])
    two = read_flight_records([_write(tmp_path / "c" / "fr_0", copies)])
    pd.testing.assert_frame_equal(one.entries, two.entries)
    assert one.entries["numel_in"].tolist() == [1000] * 6  # [[1000]]: 1,000 elements


def test_a_boolean_size_among_equal_integer_ones_is_refused(tmp_path: Path) -> None:
    # shapes are found equal by list equality, and True == 1: a [[True]] among [[1]]s must
    # still be refused, not read as 1
    d = _sample(1)
    for e in d["entries"]:
        e["input_sizes"] = [[1]]
    d["entries"][5]["input_sizes"] = [[True]]
    _fails([_write(tmp_path / "fr_1", d)], "entry 5 `input_sizes` is a list ([[True]]), not a list")


def test_many_distinct_stacks_each_its_own_text(tmp_path: Path) -> None:
    # 24 entries, each its own frames list (as torch writes them), 12 distinct call sites
    # (line i % 12 of one user file) in turn: more than the few a ring's stacks are peeled off
    # by; every entry still gets its own site, "/u/train.py:<line> in step"
    d = _sample(0)
    ring = [dict(d["entries"][i % 5]) for i in range(24)]
    sites = [{"filename": "/u/train.py", "line": k, "name": "step"} for k in range(12)]
    for i, e in enumerate(ring):
        e.update(record_id=i, collective_seq_id=i + 1, frames=[sites[i % 12]])
    d["entries"] = ring
    fr = read_flight_records([_write(tmp_path / "fr_0", d)])
    want = [f"/u/train.py:{i % 12} in step" for i in range(24)]
    assert fr.entries["frame"].tolist() == want and fr.entries["stack"].tolist() == want


@pytest.mark.timeout(120)
def test_dumps_read_in_processes_are_the_same_tables() -> None:
    # the run's map in 2 worker processes (hang -j 2): each sends back its rank's compact part;
    # the tables equal those read here, notes included
    from traceoverlap.run.flightrec import read_dumps

    folder = SAMPLE.parent / "skip_8"
    here = read_flight_records([folder])
    there = read_dumps([folder], jobs=2)
    pd.testing.assert_frame_equal(there.entries, here.entries)
    pd.testing.assert_frame_equal(there.groups, here.groups)
    assert (there.ranks, there.world, there.notes) == (here.ranks, here.world, here.notes)


@pytest.mark.timeout(120)
def test_a_bad_dump_read_in_a_worker_is_the_same_one_line_error(tmp_path: Path) -> None:
    # the worker's error comes back as the error, not as "the worker died"
    from traceoverlap.run.flightrec import read_dumps

    folder = _copy(tmp_path / "d", ("fr_0",))
    (folder / "fr_1").write_bytes((SAMPLE / "fr_1").read_bytes()[:500])
    texts = []
    for jobs in (1, 2):
        with pytest.raises(TraceFormatError) as info:
            read_dumps([folder], jobs=jobs)
        texts.append(str(info.value))
    assert texts[0] == texts[1] and "truncated pickle" in texts[0], texts


# --- the registry: a dump is recognised, and is not a trace ------------------------------------


def test_dumps_are_sniffed_and_kept_out_of_analyze(tmp_path: Path) -> None:
    for name in ("fr_0", "fr_1", "fr_0.json", "fr_1.json"):
        assert is_flight_record(SAMPLE / name), name
        assert sniff_format(SAMPLE / name) == "flightrec"
    assert not is_flight_record(KINETO) and not is_flight_record(SAMPLE / "README.md")
    with pytest.raises(NotATraceError, match="Flight Recorder dump, not a trace.*hang"):
        read_trace(SAMPLE / "fr_0.json")
    only = _copy(tmp_path / "dumps", ("fr_0", "fr_1"))
    with pytest.raises(TraceFormatError, match=r"Flight Recorder dumps, not traces.*hang"):
        resolve_inputs([only])
    jsons = _copy(tmp_path / "jdumps", ("fr_0.json", "fr_1.json"))
    with pytest.raises(TraceFormatError, match=r"Flight Recorder dumps, not traces.*hang"):
        resolve_inputs([jsons])
    assert holds_flight_records([SAMPLE]) and holds_flight_records([only, jsons])
    assert not holds_flight_records([KINETO]) and not holds_flight_records([only, KINETO])


def test_a_json_with_other_first_keys_is_not_a_dump() -> None:
    from traceoverlap.readers.formats import flightrec_head

    assert not flightrec_head(b'{"schemaVersion": 1, "traceEvents": []}')
    assert not flightrec_head(b'{"version": 1, "traceEvents": []}')  # "version" alone: common
    assert flightrec_head(b'{"version": "2.10", "pg_config": {}}')
    for proto in (2, 3, 4, 5):
        assert flightrec_head(pickle.dumps(_sample(0), protocol=proto)[:64])
        assert not flightrec_head(pickle.dumps({"a": 1}, protocol=proto)[:64])
        assert not flightrec_head(pickle.dumps([1, 2], protocol=proto)[:64])


# --- versions and fields ----------------------------------------------------------------------


def _legacy(dump: dict[str, Any]) -> dict[str, Any]:
    """A 1.x-style dump: ``seq_id``, no ``p2p_seq_id`` / ``op_id`` / ``is_p2p`` / dtypes /
    threads / ``pg_status``, ``nccl_version``."""
    old = {"version": "1.5", "pg_config": dump["pg_config"], "nccl_version": "2.18.1"}
    entries = []
    for e in dump["entries"]:
        e = {k: v for k, v in e.items() if k not in (
            "p2p_seq_id", "op_id", "is_p2p", "input_dtypes", "output_dtypes", "thread_id",
            "thread_name", "timeout_ms", "collective_seq_id",
        )}  # fmt: skip
        e["seq_id"] = e["record_id"] + 1
        entries.append(e)
    entries[-1]["profiling_name"] = "nccl:send 0->1"
    old["entries"] = entries
    return old


def test_an_old_schema_reads_by_its_names(tmp_path: Path) -> None:
    _write(tmp_path / "d" / "trace_0", _legacy(_sample(0)))
    _write(tmp_path / "d" / "trace_1", _legacy(_sample(1)))
    fr = read_flight_records([tmp_path / "d"])
    # seq_id 1..6 (record_id + 1 by construction) read as the collective sequence id
    assert fr.entries["collective_seq_id"].tolist() == [1, 2, 3, 4, 5, 6] * 2
    assert fr.entries["p2p_seq_id"].isna().all() and fr.entries["thread_id"].isna().all()
    # no is_p2p: from the op's name; only the last entry of each rank is a send
    assert fr.entries["is_p2p"].tolist() == ([False] * 5 + [True]) * 2
    assert fr.groups["last_enqueued"].isna().all()  # no pg_status
    text = "\n".join(fr.notes)
    assert (
        "seq_id` read as the collective sequence id" in text and "taken from the op's name" in text
    )
    assert fr.versions == {0: "1.5", 1: "1.5"}


def test_newer_versions_nccl_fields_and_durations(tmp_path: Path) -> None:
    d = _sample(0)
    d["version"] = "3.1"
    d["nccl_comm_state"] = {"comm0": {"state": "x"}}
    d["entries"][0]["duration_ms"] = 1.5  # 1.5 ms -> 1,500,000 ns
    d["entries"][0]["time_discovered_started_ns"] = 10
    d["entries"][0]["time_discovered_completed_ns"] = 20
    fr = read_flight_records([_write(tmp_path / "fr_0", d)])
    e = fr.entries.iloc[0]
    assert (e["duration_ns"], e["time_started_ns"], e["time_completed_ns"]) == (1_500_000, 10, 20)
    text = "\n".join(fr.notes)
    assert "version 3.1 dumps, newer than 2.10" in text
    assert "`nccl_comm_state` of 1 communicator(s) left unread" in text
    assert "no start or completion times" not in text  # rank 0 has one now


def _nccl_two_groups(rank: int, world: int = 8) -> dict[str, Any]:
    """A dump of ``rank`` in an NCCL job of ``world`` ranks with a default group and a group of
    the even ranks named ``"1"`` ("tp"), as NCCL names them in ``pg_config``."""
    base = _sample(0)
    e0 = copy.deepcopy(base["entries"][0])
    e1 = copy.deepcopy(e0)
    e1.update(pg_id=1, process_group=("1", "tp"), record_id=1, collective_seq_id=1)
    evens = list(range(0, world, 2))
    return {
        "version": "2.10",
        "comm_lib_version": "2.21.5",
        "pg_config": {
            "0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(world)))},
            "1": {"name": "1", "desc": "tp", "ranks": str(evens)},
        },
        "pg_status": {"0": {"last_enqueued_collective": 1, "last_started_collective": 1,
                            "last_completed_collective": 0},
                      "1": {"last_enqueued_collective": 1, "last_started_collective": -1,
                            "last_completed_collective": -1}},
        "entries": [e0, e1] if rank % 2 == 0 else [e0],
    }  # fmt: skip


def test_groups_by_name_and_missing_ranks_are_stated(tmp_path: Path) -> None:
    for r in (0, 1, 2, 4, 6, 7):  # 3 and 5 dumped nothing
        _write(tmp_path / "job" / f"nccl_trace_rank_{r}.pkl", _nccl_two_groups(r))
    fr = read_flight_records([tmp_path / "job"])
    assert fr.world == tuple(range(8)) and fr.missing_ranks == (3, 5)
    assert any(n.startswith("ranks 3, 5 of 8 dumped nothing") for n in fr.notes), fr.notes
    g = fr.groups[fr.groups["rank"] == 0]
    assert g["pg_name"].tolist() == ["0", "1"] and g["pg_desc"].tolist() == ["default_pg", "tp"]
    assert g["members"].tolist() == ["[0,1,2,3,4,5,6,7]", "[0,2,4,6]"]
    assert g["size"].tolist() == [8, 4]
    assert g["last_started"].tolist()[0] == 1 and pd.isna(g["last_started"].tolist()[1])
    assert not any("taken to be group" in n for n in fr.notes)  # matched by name: no guess
    # rank 1 (odd) never used group 1; its dump still names it (pg_config, pg_status)
    assert fr.groups[fr.groups["rank"] == 1]["pg_id"].tolist() == [0, 1]


def test_ranks_spans_in_notes(tmp_path: Path) -> None:
    for r in (0, 1, 7):
        _write(tmp_path / "job" / f"fr_{r}", _nccl_two_groups(r, world=8))
    fr = read_flight_records([tmp_path / "job"])
    assert any(n.startswith("ranks 2-6 of 8 dumped nothing") for n in fr.notes), fr.notes


# --- file names -------------------------------------------------------------------------------


def test_rank_from_the_trailing_number_with_any_suffix(tmp_path: Path) -> None:
    a = shutil.copy(SAMPLE / "fr_0", tmp_path / "nccl_trace_rank_12.pkl")
    b = shutil.copy(SAMPLE / "fr_1.json", tmp_path / "host3_rank_7.json")
    fr = read_flight_records([a, b])
    assert fr.ranks == (7, 12)
    # the world its dumps name is {0, 1}: 7 and 12 fall outside it, 0 and 1 dumped nothing
    assert fr.missing_ranks == (0, 1)
    assert any("ranks 7, 12: outside the world of 2" in n for n in fr.notes), fr.notes


def test_mixed_prefixes_keep_the_common_one(tmp_path: Path) -> None:
    job = _copy(tmp_path / "job", ("fr_0", "fr_1"))
    shutil.copy(SAMPLE / "fr_0", job / "old_0")
    fr = read_flight_records([job])
    assert fr.ranks == (0, 1) and fr.files[0].endswith("fr_0")
    assert any("left out 1 other Flight Recorder dump(s) (old_0)" in n for n in fr.notes)


def test_two_equal_sets_are_an_error(tmp_path: Path) -> None:
    job = _copy(tmp_path / "job", ("fr_0", "fr_1"))
    shutil.copy(SAMPLE / "fr_0", job / "old_0")
    shutil.copy(SAMPLE / "fr_1", job / "old_1")
    _fails([job], "two sets of dumps: 2 named fr_<rank> and 2 named old_<rank>")


# --- bad input: one line naming the file, never a traceback ----------------------------------


def _fails(paths: list[Path], match: str) -> str:
    with pytest.raises(TraceFormatError) as info:
        read_flight_records(paths)
    text = str(info.value)
    assert "\n" not in text, text
    assert match in text, text
    return text


def _bad_field(key: str, value: object, i: int = 5) -> dict[str, Any]:
    d = _sample(1)
    d["entries"][i][key] = value
    return d


@pytest.mark.parametrize(
    ("dump", "how", "match"),
    [
        ([1, 2], "pickle", "a pickle of a list, not a Flight Recorder dump"),
        (["text"], "json", "a JSON of a list, not a Flight Recorder dump"),
        ("text", "pickle", "a pickle of a string, not a Flight Recorder dump"),
        ({"traceEvents": []}, "json", "no `entries`"),
        ({"pg_config": {}}, "pickle", "no `entries`"),
        ({"version": "2.10", "entries": {"a": 1}}, "pickle", "`entries` is a mapping, not a list"),
        (_bad_field("collective_seq_id", "6"), "pickle",
         "entry 5 `collective_seq_id` is a string ('6'), not an integer"),
        (_bad_field("collective_seq_id", True), "json",
         "entry 5 `collective_seq_id` is a boolean (True), not an integer"),
        (_bad_field("input_sizes", [1000]), "pickle", "entry 5 `input_sizes` is a list"),
        (_bad_field("input_dtypes", [1]), "json", "not a list of strings"),
        (_bad_field("retired", "yes"), "pickle", "`retired` is a string ('yes'), not true or false"),
        # 1 == True: the column's types are checked, not only its distinct values
        (_bad_field("retired", 1), "pickle", "entry 5 `retired` is an integer (1), not true or"),
        (_bad_field("thread_id", True), "pickle", "entry 5 `thread_id` is a boolean (True)"),
        (_bad_field("profiling_name", ["x"]), "pickle", "entry 5 `profiling_name` is a list"),
        (_bad_field("state", 1.0), "json", "entry 5 `state` is a number (1.0), not a string"),
        (_bad_field("process_group", 7), "json", "not a (name, description) pair"),
        (_bad_field("frames", [{"filename": 3}]), "pickle", "`frames` is a mapping"),
        (_bad_field("time_created_ns", 1 << 70), "pickle", "not an integer"),
        (_bad_field("duration_ms", float("nan")), "pickle", "not a duration in milliseconds"),
        ({**_sample(1), "entries": [1]}, "json", "entry 0 is an integer (1), not a mapping"),
        ({**_sample(1), "pg_config": {"": {"ranks": "[0, x]"}}}, "pickle",
         "`pg_config` of group '': `ranks` is a string ('[0, x]'), not a list of ranks"),
        ({**_sample(1), "pg_status": {"0": {"last_enqueued_collective": "six"}}}, "json",
         "`pg_status` of group '0': `last_enqueued_collective` is a string ('six')"),
        ({**_sample(1), "pg_status": []}, "pickle", "`pg_status` is a list, not a mapping"),
        ({**_sample(1), "version": ["2"]}, "pickle", "`version` is a list"),
        ({**_sample(1), "nccl_comm_state": "x"}, "pickle", "`nccl_comm_state` is a string"),
    ],
)  # fmt: skip
def test_bad_dumps(tmp_path: Path, dump: object, how: str, match: str) -> None:
    f = _write(tmp_path / "fr_1", dump, how)
    text = _fails([f], match)
    assert text.startswith(f"{f}: ")


def test_bad_bytes(tmp_path: Path) -> None:
    raw = (SAMPLE / "fr_0").read_bytes()
    text = (SAMPLE / "fr_0.json").read_bytes()
    cases = {
        b"": "file is empty",
        b"  \n": "file is empty",
        raw[: len(raw) // 2]: "truncated pickle",
        raw[:-1]: "truncated pickle",  # the STOP opcode gone
        raw[:40] + b"\xff" * 40: "corrupt or truncated pickle",
        text[: len(text) // 2]: "truncated JSON",
        text[:20] + b"}}}" + text[20:]: "invalid JSON at line 1 column 21",
        b"hello": "neither a pickle nor JSON",
    }
    for data, match in cases.items():
        f = tmp_path / "fr_0"
        f.write_bytes(data)
        _fails([f], match)


def test_a_damaged_dump_in_a_folder_is_read_not_skipped(tmp_path: Path) -> None:
    # an empty or cut dump does not sniff as one: named like the others, it is read and refused
    job = _copy(tmp_path / "job", ("fr_0",))
    (job / "fr_1").write_bytes(b"")
    _fails([job], "fr_1: file is empty")
    (job / "fr_1").write_bytes((SAMPLE / "fr_1").read_bytes()[:30])
    _fails([job], "fr_1: truncated pickle")


def test_names_and_repeats(tmp_path: Path) -> None:
    bare = shutil.copy(SAMPLE / "fr_0", tmp_path / "dump.pkl")
    text = _fails([Path(bare)], "no rank number at the end of the file name")
    assert "<prefix><rank>" in text
    a = _copy(tmp_path / "a", ("fr_0",))
    b = _copy(tmp_path / "b", ("fr_0",))
    _fails([a, b], "a second dump for rank 0")
    only = tmp_path / "only"
    only.mkdir()
    shutil.copy(SAMPLE / "fr_0", only / "dump")
    _fails([only], "no rank number at the end of the dump's file name")
    empty = tmp_path / "nothing"
    empty.mkdir()
    (empty / "notes.txt").write_text("x")
    _fails([empty], "folder holds no Flight Recorder dumps")
    _fails([tmp_path / "absent"], "no such file or folder")


def test_a_trace_given_as_a_dump_is_named_a_trace(tmp_path: Path) -> None:
    # a Kineto trace named without a rank number is not a badly named dump: the error says it is
    # no dump and which command reads traces (it said how to name dumps)
    trace = tmp_path / "trace.json"
    trace.write_text('{"traceEvents": [{"ph": "X", "name": "x", "ts": 1, "dur": 2}]}')
    text = _fails([trace], "not a PyTorch Flight Recorder dump")
    assert "traceoverlap analyze" in text and "<prefix><rank>" not in text


# --- a crafted pickle runs nothing ------------------------------------------------------------


class _Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):  # type: ignore[no-untyped-def]
        return (os.system, (f"touch {self.marker}",))


class _Build:
    """A payload through BUILD / NEWOBJ: an object whose state would be set."""

    def __init__(self) -> None:
        self.x = 1


@pytest.mark.parametrize("proto", [2, 5])
def test_a_crafted_pickle_runs_no_code(tmp_path: Path, proto: int) -> None:
    marker = tmp_path / "pwned"
    # the payload alone, and hidden inside an otherwise real dump
    hidden = _sample(0)
    hidden["entries"][3]["frames"] = [_Payload(marker)]
    for i, dump in enumerate((_Payload(marker), hidden, {"version": "2.10", "x": _Build()})):
        f = tmp_path / f"fr_{i}"
        f.write_bytes(pickle.dumps(dump, protocol=proto))
        text = _fails([f], "the pickle names a Python object (")
        assert "refused, nothing in it was run" in text
        assert not marker.exists()
    # proof the payload is live: an ordinary unpickler would run it
    pickle.loads((tmp_path / "fr_0").read_bytes())
    assert marker.exists()


def test_analyze_given_dumps_names_the_command(tmp_path: Path) -> None:
    from click.testing import CliRunner
    from conftest import one_error_line

    from traceoverlap.cli import main

    for sub, names in (("p", ("fr_0", "fr_1")), ("j", ("fr_0.json", "fr_1.json"))):
        folder = _copy(tmp_path / sub, names)
        line = one_error_line(CliRunner().invoke(main, ["analyze", str(folder)]))
        assert "Flight Recorder dumps, not traces" in line and "traceoverlap hang" in line
    line = one_error_line(CliRunner().invoke(main, ["analyze", str(SAMPLE / "fr_1.json")]))
    assert "a PyTorch Flight Recorder dump, not a trace" in line


def test_every_cut_and_flipped_byte_is_one_line_or_a_dump(tmp_path: Path) -> None:
    import random

    from traceoverlap.readers.flightrec._load import loads_dump
    from traceoverlap.readers.flightrec._table import dump_part

    def outcome(data: bytes) -> None:
        try:
            dump_part("fr_0", 0, *loads_dump("fr_0", data))
        except TraceFormatError as exc:
            assert "\n" not in str(exc) and str(exc).startswith("fr_0: ")

    rng = random.Random(39)
    for name in ("fr_0", "fr_0.json"):
        raw = (SAMPLE / name).read_bytes()
        for cut in range(len(raw)):  # every truncation
            outcome(raw[:cut])
        for _ in range(400):  # bytes flipped at random
            at = rng.randrange(len(raw))
            outcome(raw[:at] + bytes([rng.randrange(256)]) + raw[at + 1 :])


def test_a_rank_with_an_empty_ring(tmp_path: Path) -> None:
    # torch leaves `entries` out of the JSON when the ring is empty; pg_config / pg_status stay
    job = _copy(tmp_path / "job", ("fr_0.json",))
    d = json.loads((SAMPLE / "fr_1.json").read_text())
    del d["entries"]
    d["version"] = "2.9"
    _write(job / "fr_1.json", d, "json")
    fr = read_flight_records([job])
    assert fr.ranks == (0, 1) and fr.entries.groupby("rank").size().to_dict() == {0: 6}
    # rank 1 still names its group: pg_status's id 0, the nameless config's members [0, 1]
    g = fr.groups[fr.groups["rank"] == 1].iloc[0]
    assert (g["pg_id"], g["pg_name"], g["members"], g["last_enqueued"]) == (0, "0", "[0,1]", 6)
    assert fr.world == (0, 1) and fr.versions == {0: "2.10", 1: "2.9"}
    text = "\n".join(fr.notes)
    assert "rank 1 dumped no entries" in text
    assert "the dumps are of 2 schema versions: 2.10, 2.9" in text
    assert "no default process group" not in text


def test_a_dump_naming_another_rank(tmp_path: Path) -> None:
    d = _sample(0)
    d["rank"] = 5  # older writers and hand-made dumps may say; the name decides
    fr = read_flight_records([_write(tmp_path / "fr_0", d)])
    assert fr.ranks == (0,)
    assert "rank 0: the dump says rank 5; the file name's number is used" in fr.notes


def test_gzip_dumps(tmp_path: Path) -> None:
    import gzip

    job = tmp_path / "job"
    job.mkdir()
    (job / "fr_0.gz").write_bytes(gzip.compress((SAMPLE / "fr_0").read_bytes()))
    (job / "fr_1.json.gz").write_bytes(gzip.compress((SAMPLE / "fr_1.json").read_bytes()))
    assert is_flight_record(job / "fr_0.gz") and is_flight_record(job / "fr_1.json.gz")
    assert holds_flight_records([job])
    with pytest.raises(TraceFormatError, match=r"Flight Recorder dumps, not traces.*hang"):
        resolve_inputs([job])  # fr_1.json.gz is a trace's name: its content says otherwise
    fr = read_flight_records([job])
    assert fr.ranks == (0, 1) and _row(fr, 1, 6)["op"] == "gloo:barrier"
    (job / "fr_1.json.gz").write_bytes(gzip.compress((SAMPLE / "fr_1.json").read_bytes())[:-30])
    _fails([job], "fr_1.json.gz: truncated gzip")
