"""The planted hangs (workloads/hangs.py) and their real Flight Recorder dumps
(fixtures/flightrec/): each committed dump holds the structure its README row plants, read raw
(independent of the reader); with ``--runslow`` fresh runs hold it too; and, once the reader and
the hang analysis exist, the first line of the diagnosis names the planted group, sequence id,
rank and what it did instead.

Every expectation below is the README's "answer by construction": what the workload's code for
that case does (see the case's branch in ``workloads/hangs.py``), not what a tool printed.
"""

from __future__ import annotations

import importlib.util
import json
import os
import pickle
import re
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parent.parent
FIX = ROOT / "fixtures" / "flightrec"
README = FIX / "README.md"


def _hangs() -> ModuleType:
    """workloads/hangs.py from this checkout (torch-free to import; the installed
    ``traceoverlap_workloads`` may point at another checkout)."""
    spec = importlib.util.spec_from_file_location(
        "_hangs_under_test", ROOT / "workloads" / "hangs.py"
    )
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


@dataclass(frozen=True)
class Plant:
    """What a case plants (fixtures/flightrec/README.md)."""

    world: int
    dumped: tuple[int, ...]  # ranks that wrote a dump
    # the stuck group's name (process_group[0]; pg_id is per rank, see "chain"); None: healthy
    pg: str | None
    seq: int  # the stuck collective's collective_seq_id in that group
    rank: int  # the planted rank
    kind: str  # missing | crash | desync | mismatch | late | healthy
    instead: str | None = None  # desync: the op the planted rank called at (pg, seq)
    sizes: Any = None  # mismatch: the planted rank's input_sizes / input_dtypes there
    dtypes: Any = None
    members: tuple[int, ...] = ()  # the stuck group's members (default: the world)
    words: tuple[str, ...] = ()  # what the diagnosis' first line must also say
    also: tuple[int, ...] = ()  # more planted ranks that did the same
    common: Any = None  # the others' input_sizes at (pg, seq), when not [[1000]]

    @property
    def planted(self) -> tuple[int, ...]:
        return (self.rank, *self.also)


PLANTED: dict[str, Plant] = {
    # rank 1 sleeps instead of calling all_reduce #6 (hangs.py "skip")
    "skip": Plant(2, (0, 1), "0", 6, 1, "missing", words=("all_reduce",)),
    "skip_8": Plant(8, tuple(range(8)), "0", 12, 5, "missing", words=("all_reduce",)),
    # ranks 2 and 3 of 4 both skip all_reduce #6
    "skip_two": Plant(4, (0, 1, 2, 3), "0", 6, 2, "missing", words=("all_reduce",), also=(3,)),
    # rank 1 of 4 exits (code 3) before all_reduce #6: no dump; the others called #6
    "crash": Plant(4, (0, 2, 3), "0", 6, 1, "crash", words=("all_reduce",)),
    # rank 1 calls barrier / broadcast at #6 where the others all_reduce
    "other-op": Plant(2, (0, 1), "0", 6, 1, "desync", "gloo:barrier", words=("barrier",)),
    "other-op-broadcast": Plant(
        2, (0, 1), "1", 6, 1, "desync", "gloo:broadcast", words=("broadcast",)
    ),
    # rank 3 reduces 1001 floats at #6; rank 2 aborts inside gloo (no dump)
    "size": Plant(4, (0, 1, 3), "0", 6, 3, "mismatch", sizes=[[1001]], words=("1001",)),
    # rank 1 reduces int32 at #6 (same bytes): gloo completes, only the dumps show it
    "dtype": Plant(2, (0, 1), "0", 6, 1, "mismatch", dtypes=["Int"], words=("Int",)),
    # rank 3 enters group 2 before group 1 at step 6: missing from group 1 #6, found in group 2 #6
    "group-order": Plant(
        4, (0, 1, 2, 3), "1", 6, 3, "missing", members=(0, 1, 2, 3), words=("group 2",)
    ),
    # rank 2 never calls group 2's all_reduce #6; rank 1 waits there, rank 0 waits for rank 1 in
    # group 1 #6: the chain 0 -> 1 -> 2 ends at rank 2
    "chain": Plant(3, (0, 1, 2), "2", 6, 2, "missing", members=(1, 2), words=("all_reduce",)),
    # rank 2 blocks in a recv (not recorded on gloo) instead of all_reduce #6
    "recv-no-send": Plant(3, (0, 1, 2), "0", 6, 2, "missing", words=("all_reduce",)),
    # rank 1 sleeps timeout + 1.5 s, then calls all_reduce #6
    "sleep": Plant(2, (0, 1), "0", 6, 1, "late", words=("all_reduce",)),
    # DDP, rank 1 one batch short: its epoch-end barrier is #11 where rank 0's step-6 bucket
    # all_reduce (1089 floats: 32*32 + 32 + 32 + 1) is. #1-#3: DDP's construction (all_gather,
    # 2 broadcasts); #4: step 1's bucket; #5, #6: the bucket rebuild's broadcasts; #7-#11 steps 2-6
    "ddp-uneven": Plant(
        2, (0, 1), "0", 11, 1, "desync", "gloo:barrier", words=("barrier",), common=[[1089]]
    ),
    "healthy": Plant(2, (0, 1), None, 0, -1, "healthy"),
    # the issue's own example, committed with the reader (its folder has its own README and
    # make.py): rank 1 calls barrier where rank 0 calls all_reduce #6 (4 s timeout, ring 2000)
    "sample_gloo_2rank": Plant(2, (0, 1), "0", 6, 1, "desync", "gloo:barrier", words=("barrier",)),
}


def _folder(name: str) -> Path:
    """The fixture's folder; a folder another branch commits is skipped until it is here."""
    folder = FIX / name
    if name not in _hangs().FIXTURES and not folder.is_dir():
        pytest.skip(f"{folder} is not in this checkout")
    return folder


def _ranks_in(folder: Path) -> list[int]:
    return sorted(int(p.name[3:]) for p in folder.glob("fr_*") if p.name[3:].isdigit())


def _load(folder: Path, rank: int) -> tuple[dict[str, Any], dict[str, Any]]:
    # pickle.load is safe here only because these are this repository's own fixtures, written by
    # torch (or fresh runs of our own workload in tmp_path); dumps from users go through the
    # reader's restricted unpickler, never pickle.load.
    with open(folder / f"fr_{rank}", "rb") as f:
        pkl = pickle.load(f)
    with open(folder / f"fr_{rank}.json", encoding="utf-8") as f:
        js = json.load(f)
    return pkl, js


def _at(entries: list[dict[str, Any]], pg: str, seq: int) -> dict[str, Any] | None:
    hits = [e for e in entries if e["process_group"][0] == pg and e["collective_seq_id"] == seq]
    assert len(hits) <= 1, (pg, seq)
    return hits[0] if hits else None


def _last_seq(entries: list[dict[str, Any]], pg: str) -> int:
    return max((e["collective_seq_id"] for e in entries if e["process_group"][0] == pg), default=0)


def check_planted(folder: Path, name: str) -> None:
    """The dumps in ``folder`` hold what case ``name`` plants (raw pickle and JSON)."""
    plant = PLANTED[name]
    assert _ranks_in(folder) == list(plant.dumped)
    dumps = {r: _load(folder, r) for r in plant.dumped}
    for r, (pkl, js) in dumps.items():
        assert pkl["version"] == js["version"] == "2.10"
        # the two files are two snapshots of one ring: the same entries (retired / pg_status may
        # differ, README); JSON has no frames
        key = ("record_id", "pg_id", "collective_seq_id", "profiling_name", "input_sizes")
        assert [tuple(json.dumps(e[k]) for k in key) for e in pkl["entries"]] == [
            tuple(json.dumps(e[k]) for k in key) for e in js["entries"]
        ], r
        assert all("frames" in e for e in pkl["entries"]) and not any(
            "frames" in e for e in js["entries"]
        )
        # gloo: every entry 'scheduled', no p2p entries, no discovered start/completion times
        assert {e["state"] for e in pkl["entries"]} == {"scheduled"}
        assert not any(e["is_p2p"] for e in pkl["entries"])
        assert all(e["time_discovered_completed_ns"] is None for e in pkl["entries"])
        assert all(e["time_discovered_completed_ns"] == 0 for e in js["entries"])
    entries = {r: pkl["entries"] for r, (pkl, _) in dumps.items()}

    if plant.kind == "healthy":
        # every rank is in every group (world 2): the same (pg, seq) -> (op, sizes) everywhere
        seen = [
            {
                (e["process_group"][0], e["collective_seq_id"]): (
                    e["profiling_name"],
                    e["input_sizes"],
                    e["input_dtypes"],
                )
                for e in es
            }
            for es in entries.values()
        ]
        assert all(s == seen[0] for s in seen)
        assert {pg for pg, _ in seen[0]} == {"0", "1", "2"}
        # 6 all_reduces per group, then the barrier #7 of group 0
        assert seen[0][("0", 7)] == ("gloo:barrier", [], [])
        assert max(seq for pg, seq in seen[0] if pg != "0") == 6
        return

    assert plant.pg is not None
    members = plant.members or tuple(range(plant.world))
    # every other member that dumped called all_reduce #seq of 1,000 floats
    others = [r for r in plant.dumped if r in members and r not in plant.planted]
    assert others
    for r in others:
        e = _at(entries[r], plant.pg, plant.seq)
        assert e is not None, r
        got = (e["profiling_name"], e["input_sizes"], e["input_dtypes"])
        assert got == ("gloo:all_reduce", plant.common or [[1000]], ["Float"]), r
    if plant.kind == "crash":
        assert plant.rank not in entries  # it died before dumping
        return
    mine = _at(entries[plant.rank], plant.pg, plant.seq)
    if plant.kind == "missing":
        for r in plant.planted:
            assert _at(entries[r], plant.pg, plant.seq) is None, r
            assert _last_seq(entries[r], plant.pg) == plant.seq - 1, r
    elif plant.kind == "desync":
        assert mine is not None and mine["profiling_name"] == plant.instead
    elif plant.kind == "mismatch":
        assert mine is not None and mine["profiling_name"] == "gloo:all_reduce"
        assert mine["input_sizes"] == (plant.sizes or [[1000]])
        assert mine["input_dtypes"] == (plant.dtypes or ["Float"])
    elif plant.kind == "late":
        # it arrived after the others' timeout had passed (slept timeout + 1.5 s)
        assert mine is not None and mine["profiling_name"] == "gloo:all_reduce"
        latest_other = max(_at(entries[r], plant.pg, plant.seq)["time_created_ns"] for r in others)  # type: ignore[index]
        assert mine["time_created_ns"] - latest_other > mine["timeout_ms"] * 1_000_000
    if name == "group-order":
        # rank 3 is in group 2's all_reduce #6; its group-2 peer, rank 2, stopped at #5 there
        # (it waits in group 1 #6): the cycle 3 -> 2 -> 3
        assert _at(entries[3], "2", 6) is not None
        assert _last_seq(entries[2], "2") == 5
        assert not any(e["process_group"][0] == "2" for r in (0, 1) for e in entries[r])
    if name == "chain":
        # rank 0 waits in group 1 #6 for rank 1, which is in group 2 #6 (so group 1 stops at #5
        # on rank 1); rank 2 is not in group 1
        assert _at(entries[0], "1", 6) is not None
        assert _last_seq(entries[1], "1") == 5
        assert not any(e["process_group"][0] == "1" for e in entries[2])
        # pg_id is the rank's own count of its groups: group 2 is pg_id 2 on rank 1, 1 on rank 2
        assert {e["pg_id"] for e in entries[1] if e["process_group"][0] == "2"} == {2}
        assert {e["pg_id"] for e in entries[2]} == {1}
    if name == "skip_8":
        # the ring keeps 8 entries: #5-#12 (record_id 4-11), the planted rank #4-#11
        assert [e["record_id"] for e in entries[0]] == list(range(4, 12))
        assert [e["record_id"] for e in entries[5]] == list(range(3, 11))


def test_every_fixture_has_a_planted_answer_and_a_readme_row() -> None:
    fixtures = _hangs().FIXTURES
    on_disk = {p.name for p in FIX.iterdir() if p.is_dir()}
    assert set(fixtures) <= on_disk
    # every folder has its answer here; one made elsewhere documents itself
    assert on_disk <= set(PLANTED)
    for other in on_disk - set(fixtures):
        assert (FIX / other / "README.md").is_file(), other
    text = README.read_text(encoding="utf-8")
    for name, args in fixtures.items():
        rows = [ln for ln in text.splitlines() if ln.startswith(f"| `{name}` |")]
        assert len(rows) == 1, name
        cells = [c.strip() for c in rows[0].strip("|").split("|")]
        assert cells[1] == str(PLANTED[name].world), name
        assert cells[3] == f"`{' '.join(args)}`", name


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_committed_dump_holds_the_planted_hang(name: str) -> None:
    check_planted(_folder(name), name)


def test_committed_frames_point_at_the_calls_in_hangs_py() -> None:
    # The README says the frames' line numbers match workloads/hangs.py as committed: each
    # entry's innermost hangs.py frame is a line that makes that call (ddp-uneven: DDP's own
    # collectives come from its construction, forward and backward lines).
    src = (ROOT / "workloads" / "hangs.py").read_text(encoding="utf-8").splitlines()
    ddp_lines = ("DistributedDataParallel(", "model(batch)", "loss.backward()")
    checked = 0
    for name in _hangs().FIXTURES:
        for r in _ranks_in(FIX / name):
            for e in _load(FIX / name, r)[0]["entries"]:
                mine = [f for f in e["frames"] if f["filename"].endswith("hangs.py")]
                line = src[mine[0]["line"] - 1]
                op = e["profiling_name"].split(":", 1)[1]
                if mine[0]["name"] == "ddp_uneven" and op != "barrier":
                    assert any(d in line for d in ddp_lines), (name, r, line)
                else:
                    assert f"dist.{op}(" in line, (name, r, e["profiling_name"], line)
                checked += 1
    assert checked > 100


def test_hangs_cli_rejects_impossible_cases(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    hangs = _hangs()
    # group-order needs group B (the last two ranks) to be a strict subset with the planted rank in it
    assert hangs.main(["--case", "group-order", "--world-size", "2", "--out", str(tmp_path)]) == 2
    assert hangs.main(["--case", "skip", "--rank", "2", "--out", str(tmp_path)]) == 2
    assert hangs.main(["--case", "skip"]) == 2
    # several planted ranks only where each does the same thing (skip, crash)
    assert hangs.main(["--case", "other-op", "--rank", "0,1", "--out", str(tmp_path)]) == 2
    assert hangs.main(["--case", "skip", "--rank", "x", "--out", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert err.count("traceoverlap-workloads:") == 5
    assert not list(tmp_path.iterdir())  # nothing started, nothing written


@pytest.mark.slow
@pytest.mark.timeout(300)  # ranks, a 3 s timeout and an 8 s watchdog: ~15-30 s each on 2 cores
@pytest.mark.parametrize("name", ["skip", "group-order"])
def test_fresh_run_plants_the_same_hang(name: str, tmp_path: Path) -> None:
    pytest.importorskip("torch")
    # run this checkout's workloads/ as traceoverlap_workloads (the installed one may be another)
    pkg = tmp_path / "pkg"
    pkg.mkdir()
    os.symlink(ROOT / "workloads", pkg / "traceoverlap_workloads")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(pkg), str(ROOT)]))
    out = tmp_path / name
    args = _hangs().FIXTURES[name]
    proc = subprocess.run(
        [sys.executable, "-m", "traceoverlap_workloads.hangs", *args, "--out", str(out)],
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    check_planted(out, name)


# --- through the reader and the hang analysis (issue 39; skipped until they are merged) --------


def _flightrec() -> Any:
    return pytest.importorskip("traceoverlap.readers.flightrec")


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_reader_sees_the_planted_entries(name: str) -> None:
    folder = _folder(name)
    records = _flightrec().read_flight_records(folder)
    plant = PLANTED[name]
    assert tuple(records.ranks) == plant.dumped
    if len(plant.dumped) < plant.world:
        # size, crash: only the world group exists, so pg_config names its ranks ('[0, 1, 2, 3]')
        # and the rank that wrote nothing is known to be missing
        assert set(records.missing_ranks) == set(range(plant.world)) - set(plant.dumped)
    if plant.pg is None or plant.kind == "crash":
        return
    e = records.entries
    mine = e[
        (e["rank"] == plant.rank)
        & (e["pg_name"] == plant.pg)
        & (e["collective_seq_id"] == plant.seq)
    ]
    if plant.kind == "missing":
        assert len(mine) == 0
    else:
        assert len(mine) == 1
        want = plant.instead or "gloo:all_reduce"
        assert mine["op"].iloc[0] == want


@pytest.mark.parametrize("name", sorted(PLANTED))
def test_diagnosis_first_line_names_the_planted_hang(name: str) -> None:
    folder = _folder(name)
    records = _flightrec().read_flight_records(folder)
    hang = pytest.importorskip("traceoverlap.run.hang")
    report = hang.diagnose_hang(records)
    plant = PLANTED[name]
    answer = report.answer
    assert "\n" not in answer
    if plant.pg is None:
        assert report.verdict == "healthy", answer
        return
    if plant.also:  # "ranks 2 and 3" / "ranks 2, 3"
        a, b = plant.planted
        assert re.search(rf"\branks {a}(,| and) {b}\b", answer), answer
    else:
        assert re.search(rf"\brank {plant.rank}\b", answer), answer
    assert re.search(rf"#{plant.seq}\b", answer), answer
    assert re.search(rf"\bgroup {plant.pg}\b", answer), answer
    for word in plant.words:
        assert word in answer, (word, answer)
