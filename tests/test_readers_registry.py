"""read_trace sniffs the format by content, not by file name."""

from __future__ import annotations

import gzip
import json
import sys
import types
from pathlib import Path

import pytest

from traceoverlap.core.errors import TraceFormatError
from traceoverlap.core.model import Timeline, TraceInfo, empty_events
from traceoverlap.readers import read_trace, sniff_format

DOC = {
    "traceEvents": [
        {"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 1, "ts": 2, "dur": 3}
    ]
}


def test_json_and_gzip_by_content(tmp_path: Path) -> None:
    # Misleading names on purpose: the content decides.
    plain = tmp_path / "rank1.bin"
    plain.write_text(json.dumps(DOC))
    packed = tmp_path / "rank2.json"
    packed.write_bytes(gzip.compress(json.dumps(DOC).encode()))
    bom = tmp_path / "rank3.txt"
    bom.write_bytes(b"\xef\xbb\xbf  \n" + json.dumps(DOC).encode())
    for p, rank in ((plain, 1), (packed, 2), (bom, 3)):
        assert sniff_format(p) == "kineto"
        tl = read_trace(p)
        # One cpu_op at ts 2 µs, dur 3 µs -> [2000, 5000] ns; rank from the file name.
        assert tl.events["start_ns"].tolist() == [2_000]
        assert tl.events["end_ns"].tolist() == [5_000]
        assert tl.traces[0].rank == rank


def test_sqlite_and_nsys_rep_dispatch(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The nsys reader is another module: stand in for it to check only the dispatch.
    calls: list[tuple[str, str]] = []

    def fake(kind: str):  # type: ignore[no-untyped-def]
        def read(path):  # type: ignore[no-untyped-def]
            calls.append((kind, str(path)))
            return Timeline(empty_events(), (TraceInfo(path=str(path), format="nsys", rank=0),))

        return read

    mod = types.ModuleType("traceoverlap.readers.nsys")
    mod.read_nsys = fake("sqlite")  # type: ignore[attr-defined]
    mod.read_nsys_rep = fake("rep")  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "traceoverlap.readers.nsys", mod)
    import traceoverlap.readers as readers

    monkeypatch.setattr(readers, "nsys", mod, raising=False)
    db = tmp_path / "export.dat"
    db.write_bytes(b"SQLite format 3\x00" + b"\x00" * 84)
    rep = tmp_path / "profile.nsys-rep"
    rep.write_bytes(b"\x00\x01binary report")
    assert sniff_format(db) == "nsys-sqlite" and sniff_format(rep) == "nsys-rep"
    read_trace(db)
    read_trace(rep)
    assert calls == [("sqlite", str(db)), ("rep", str(rep))]


def test_unknown_empty_missing_and_folder(tmp_path: Path) -> None:
    odd = tmp_path / "notes.txt"
    odd.write_text("hello\n")
    with pytest.raises(TraceFormatError, match="supported") as info:
        read_trace(odd)
    assert str(odd) in str(info.value) and ".sqlite" in str(info.value)
    empty = tmp_path / "rank0.json"
    empty.write_bytes(b"")
    with pytest.raises(TraceFormatError, match="empty"):
        read_trace(empty)
    with pytest.raises(TraceFormatError, match="not found"):
        read_trace(tmp_path / "missing.json")
    with pytest.raises(TraceFormatError, match="directory"):
        read_trace(tmp_path)
