"""``traceoverlap export``: the run on one clock as Trace Event Format JSON (issue 23)."""

from __future__ import annotations

import gzip
import io
import json
import subprocess
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from conftest import WORKLOAD_FIXTURES, real_trace, sample

import traceoverlap
from traceoverlap.cli import main
from traceoverlap.reporters import perfetto as export
from traceoverlap.run.matching import TOLERANCE_NS

DLRM = "kineto/dlrm_v100_8rank"


def _export(paths: Any) -> tuple[dict[str, Any], traceoverlap.Analysis, export.ExportStats]:
    result = traceoverlap.analyze(paths)
    buf = io.BytesIO()
    stats = export.write_trace(result, buf)
    return json.loads(buf.getvalue()), result, stats


def _tracks(doc: dict[str, Any]) -> dict[int, set[str]]:
    out: dict[int, set[str]] = defaultdict(set)
    for e in doc["traceEvents"]:
        if e["ph"] == "M" and e["name"] == "thread_name":
            out[e["pid"]].add(e["args"]["name"])
    return out


def _is_track(e: dict[str, Any], name: str) -> bool:
    """On the analysis track ``name`` or one of its sub-tracks."""
    base = export._TID[name]
    return base <= e["tid"] < base + export.SUB_TRACKS


def _instances(doc: dict[str, Any]) -> dict[int, list[tuple[int, float, float]]]:
    """Matched collective instances on the analysis track: instance -> (rank, start, end) µs."""
    by: dict[int, list[tuple[int, float, float]]] = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and _is_track(e, "collectives") and e["args"]["matched"]:
            by[e["args"]["instance"]].append((e["pid"], e["ts"], e["ts"] + e["dur"]))
    return by


def _check_run(doc: dict[str, Any], result: traceoverlap.Analysis) -> None:
    ranks = result.ranks
    procs = {e["pid"] for e in doc["traceEvents"] if e.get("name") == "process_name"}
    assert procs == set(ranks)
    tracks = _tracks(doc)
    for r in ranks:
        # every analysis track, and at least one activity lane (a stream or a thread)
        assert {f"analysis: {t}" for t in export.ANALYSIS_TRACKS} <= tracks[r]
        assert any(not t.startswith("analysis:") for t in tracks[r])
    # every step window of the analysis is on its rank's steps track
    steps = [e for e in doc["traceEvents"] if e["ph"] == "X" and e["tid"] == export._TID["steps"]]
    assert len(steps) == len(result.steps)
    # each flow start has its finish, same id, on the last-arriving rank's collectives track
    flows = [e for e in doc["traceEvents"] if e["ph"] in ("s", "f")]
    starts = {e["id"]: e for e in flows if e["ph"] == "s"}
    ends = {e["id"]: e for e in flows if e["ph"] == "f"}
    assert starts.keys() == ends.keys()
    for i, f in ends.items():
        assert f["bp"] == "e" and _is_track(f, "collectives")
        assert _is_track(starts[i], "waits")
        assert f["pid"] != starts[i]["pid"]
        assert f["name"] == f"waits for rank {f['pid']}"


WORKLOADS = sorted(p.name for p in WORKLOAD_FIXTURES.iterdir() if p.is_dir())


@pytest.mark.parametrize("name", sample(WORKLOADS))
def test_every_workload_fixture_exports_one_run(name: str) -> None:
    # every rank and analysis track, flows paired, tracks nesting, and every matched instance
    # sharing an instant on all its ranks on the exported clock (diagnosis.md §5)
    doc, result, _ = _export(WORKLOAD_FIXTURES / name)
    _check_run(doc, result)
    assert _nest(doc) == {}
    for spans in _instances(doc).values():
        assert max(s for _, s, _ in spans) < min(e for _, _, e in spans) + TOLERANCE_NS / 1000


def test_bucketed_fixture_every_rank_and_track() -> None:
    doc, result, stats = _export(WORKLOAD_FIXTURES / "bucketed")
    _check_run(doc, result)
    assert set(stats.events) == {0, 1}
    # exposed time by cause: the slices sum to the step table's exposed split
    # (each exposed ns has exactly one cause: wait + tail + dependency + host = exposed)
    exp = [
        e
        for e in doc["traceEvents"]
        if e["ph"] == "X" and e["tid"] == export._TID["exposed communication"]
    ]
    total_ns = sum(e["args"]["exposed_ns"] for e in exp)
    assert total_ns == int(result.steps["exposed_comm_ns"].sum())
    # consistent matched instances share an instant on every rank (diagnosis.md §5); gloo on CPU
    # ends are noisy, so the share-an-instant rule, not equal ends, is what holds here
    inst = _instances(doc)
    assert inst
    for spans in inst.values():
        assert {r for r, _, _ in spans} == {0, 1}
        latest_start = max(s for _, s, _ in spans)
        first_end = min(e for _, _, e in spans)
        assert latest_start < first_end + TOLERANCE_NS / 1000


def _nest(doc: dict[str, Any]) -> dict[tuple[int, int], int]:
    """Per analysis track: slices that overlap another without nesting in it (Perfetto needs
    the slices of one track to nest), with ts and dur as Perfetto reads them (ns, rounded)."""
    by: dict[tuple[int, int], list[tuple[int, int]]] = defaultdict(list)
    for e in doc["traceEvents"]:
        if e["ph"] == "X" and e["tid"] < export.FIRST_LANE_TID:
            s = round(e["ts"] * 1000)
            by[(e["pid"], e["tid"])].append((s, s + round(e["dur"] * 1000)))
    bad: dict[tuple[int, int], int] = {}
    for k, spans in by.items():
        open_ends: list[int] = []
        for s, e in sorted(spans, key=lambda x: (x[0], -x[1])):
            while open_ends and open_ends[-1] <= s:
                open_ends.pop()
            if open_ends and e > open_ends[-1]:
                bad[k] = bad.get(k, 0) + 1
            open_ends.append(e)
    return bad


def test_analysis_tracks_nest() -> None:
    # gloo on CPU runs several all-reduces at once: they go to sub-tracks ("collectives (2)")
    doc, _, _ = _export(WORKLOAD_FIXTURES / "bucketed")
    assert _nest(doc) == {}
    names = {e["args"]["name"] for e in doc["traceEvents"] if e.get("name") == "thread_name"}
    assert "analysis: collectives (2)" in names


def test_pack_sub_tracks() -> None:
    # [0, 10) and [5, 15) overlap: two tracks; [10, 20) fits after the first on track 0
    start = np.array([0, 5, 10], np.int64)
    end = np.array([10, 15, 20], np.int64)
    assert export.pack(start, end).tolist() == [0, 1, 0]


def test_one_process_two_gpus() -> None:
    """One process drove GPUs 0 and 1 (two analysis units of rank 0): one process in the trace,
    the host thread once, each GPU's streams and analysis tracks apart, all tracks nesting."""
    from test_runs import _two_gpus_one_process

    tl = _two_gpus_one_process()
    result = traceoverlap.analyze(tl)
    buf = io.BytesIO()
    export.write_trace(result, buf, source=tl)
    doc = json.loads(buf.getvalue())
    procs = [e for e in doc["traceEvents"] if e.get("name") == "process_name"]
    assert [(p["pid"], p["args"]["name"]) for p in procs] == [(0, "rank 0")]
    tracks = _tracks(doc)[0]
    assert {"analysis: steps (GPU 0)", "analysis: steps (GPU 1)"} <= tracks
    assert {"GPU 0 stream 7", "GPU 0 stream 20", "GPU 1 stream 8", "GPU 1 stream 21"} <= tracks
    # the launch thread's events once: 1 marker + 4 launches
    host = [
        e
        for e in doc["traceEvents"]
        if e["ph"] == "X" and e.get("cat", "").startswith(("annotation", "runtime"))
    ]
    assert len(host) == 5
    assert _nest(doc) == {}


def _shifted_copy(src: Path, dst: Path, rank: int, shift_us: int) -> None:
    """The run with rank ``rank``'s clock moved by ``shift_us`` (every event ts)."""
    dst.mkdir()
    for f in sorted(src.iterdir()):
        data = json.loads(gzip.decompress(f.read_bytes()))
        if f.name.startswith(f"worker{rank}_"):
            for e in data["traceEvents"]:
                if "ts" in e:
                    e["ts"] = float(e["ts"]) + shift_us
        (dst / f.name).write_bytes(gzip.compress(json.dumps(data).encode()))


def _ends_within_tolerance(doc: dict[str, Any], n_ranks: int) -> int:
    inst = _instances(doc)
    for spans in inst.values():
        assert len({r for r, _, _ in spans}) == n_ranks
        ends = [e for _, _, e in spans]
        # a collective completes together on every rank: its ends agree within the tolerance
        assert (max(ends) - min(ends)) * 1000 <= TOLERANCE_NS
    return len(inst)


def test_dlrm_8_ranks_one_clock() -> None:
    path = real_trace(DLRM)
    doc, result, stats = _export(path)
    _check_run(doc, result)
    assert len(stats.events) == 8
    assert _ends_within_tolerance(doc, 8) > 0
    assert _nest(doc) == {}
    # the wait slices carry the job model's blame chain of their step (rank 7 is late)
    waits = [e for e in doc["traceEvents"] if e["ph"] == "X" and _is_track(e, "waits")]
    assert waits and any("for rank 7" in (e["args"]["blame"] or "") for e in waits)


def test_dlrm_skewed_rank_is_aligned(tmp_path: Path) -> None:
    """Rank 3's clock moved 3 ms later: the export takes the analysis' offset (3 ms, estimated
    from collective end times) off rank 3, so its collectives end with the others' again."""
    src = real_trace(DLRM)
    _shifted_copy(src, tmp_path / "run", rank=3, shift_us=3000)
    doc, result, stats = _export(tmp_path / "run")
    assert result.collectives is not None and result.collectives.clock == "estimated"
    off = stats.offsets_ns
    assert abs(off[3] - off[0] - 3_000_000) <= TOLERANCE_NS
    assert _ends_within_tolerance(doc, 8) > 0
    assert doc["otherData"]["offsets_ns"]["3"] == off[3]


class _Recorder(io.BytesIO):
    def __init__(self) -> None:
        super().__init__()
        self.sizes: list[int] = []

    def write(self, b: Any) -> int:
        self.sizes.append(len(b))
        return super().write(b)


def test_streamed_in_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    """With chunks of 500 events, no single write holds more than one chunk's events, and the
    file is the same JSON as with one big chunk."""
    result = traceoverlap.analyze(WORKLOAD_FIXTURES / "bucketed")
    whole = io.BytesIO()
    export.write_trace(result, whole)
    monkeypatch.setattr(export, "CHUNK_EVENTS", 500)
    rec = _Recorder()
    export.write_trace(result, rec)
    assert json.loads(rec.getvalue()) == json.loads(whole.getvalue())
    n_events = len(json.loads(whole.getvalue())["traceEvents"])
    assert n_events > 10 * 500
    per_event = len(whole.getvalue()) / n_events
    assert len(rec.sizes) >= n_events // 500
    assert max(rec.sizes) < 500 * per_event * 4  # one chunk (event sizes vary), never the run


def test_cli_export(tmp_path: Path) -> None:
    out = tmp_path / "run.json"
    r = CliRunner().invoke(main, ["export", str(WORKLOAD_FIXTURES / "bucketed"), "-o", str(out)])
    assert r.exit_code == 0, r.output
    assert "2 ranks" in r.output
    doc = json.loads(out.read_text())
    # ts in µs (no displayTimeUnit: some Perfetto versions read "ns" there as the ts unit)
    assert "displayTimeUnit" not in doc and doc["traceEvents"]


def test_cli_export_from_standard_input_says_to_save_it(tmp_path: Path) -> None:
    data = (WORKLOAD_FIXTURES / "bucketed" / "rank0.json.gz").read_bytes()
    cmd = [sys.executable, "-m", "traceoverlap", "export", "-", "-o", str(tmp_path / "x.json")]
    r = subprocess.run(cmd, input=data, capture_output=True, timeout=120, check=False)
    assert r.returncode == 2
    err = r.stderr.decode()
    assert "save it to a file" in err and "Traceback" not in err


def test_cli_export_interrupted_keeps_the_old_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An interrupt in the middle of write_trace (rank events already written) leaves the old
    file as it was and no temporary file: the export is a temporary file replaced when whole."""
    out = tmp_path / "run.json"
    out.write_bytes(b'{"old": true}')
    write = export._Writer.write
    calls = []

    def interrupted(self: Any, events: Any) -> int:
        calls.append(len(events))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return write(self, events)

    monkeypatch.setattr(export._Writer, "write", interrupted)
    r = CliRunner().invoke(main, ["export", str(WORKLOAD_FIXTURES / "bucketed"), "-o", str(out)])
    assert r.exit_code == 130 and "interrupted" in r.output, r.output
    assert len(calls) == 3 and sum(calls[:2]) > 0
    assert out.read_bytes() == b'{"old": true}'
    assert [p.name for p in tmp_path.iterdir()] == ["run.json"]


def test_cli_export_to_standard_output(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["export", str(WORKLOAD_FIXTURES / "bucketed"), "-o", "-"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout_bytes)
    assert doc["traceEvents"] and doc["otherData"]["generator"] == "traceoverlap export"
    assert "wrote standard output: 2 ranks" in r.stderr
    assert list(tmp_path.iterdir()) == []  # no file named "-"
    # the same bytes as the file
    f = CliRunner().invoke(main, ["export", str(WORKLOAD_FIXTURES / "bucketed"), "-o", "f.json"])
    assert f.exit_code == 0 and f.stdout_bytes == b""
    assert (tmp_path / "f.json").read_bytes() == r.stdout_bytes


def test_cli_export_unwritable(tmp_path: Path) -> None:
    out = tmp_path / "missing" / "run.json"
    r = CliRunner().invoke(main, ["export", str(WORKLOAD_FIXTURES / "bucketed"), "-o", str(out)])
    assert r.exit_code == 2
    assert "cannot write the output" in r.output and "Traceback" not in r.output
