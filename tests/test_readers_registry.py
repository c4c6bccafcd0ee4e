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


def test_the_registry_gives_the_words_and_suffixes() -> None:
    # the texts users read, word for word as before the registry: built from its entries
    from traceoverlap.readers import SUPPORTED
    from traceoverlap.readers.paths import TRACE_SUFFIXES

    assert SUPPORTED == (
        "PyTorch profiler / Kineto Chrome-trace JSON (.json, .json.gz), "
        "Nsight Systems SQLite export (.sqlite) or report (.nsys-rep)"
    )
    assert TRACE_SUFFIXES == (".json", ".json.gz", ".sqlite", ".nsys-rep")


def test_the_surest_sniff_wins() -> None:
    from traceoverlap.readers.formats import sniff_bytes

    def name(head: bytes, file: str = "") -> str | None:
        fmt = sniff_bytes(head, file)
        return None if fmt is None else fmt.name

    # content beats a name: JSON called .nsys-rep is JSON, an export called .nsys-rep an export
    assert name(b'{"traceEvents": []}', "x.nsys-rep") == "kineto"
    assert name(b"SQLite format 3\x00", "x.nsys-rep") == "nsys-sqlite"
    # a name beats a guess: whitespace only so far says nothing
    assert name(b"   \n", "x.nsys-rep") == "nsys-rep" and name(b"   \n", "x.qdrep") == "nsys-rep"
    assert name(b"   \n") == "kineto"  # the JSON reader then says what is wrong
    # gzip and UTF-16 JSON by content; anything else is nothing
    assert name(gzip.compress(b"{}")) == "kineto" and name('{"a": 1}'.encode("utf-16")) == "kineto"
    assert name(b"\x00\x01binary", "profile.bin") is None


def test_a_format_that_needs_a_file_is_refused_from_a_pipe(tmp_path: Path) -> None:
    import os
    import threading

    fifo = tmp_path / "export.fifo"
    os.mkfifo(fifo)
    writer = threading.Thread(target=fifo.write_bytes, args=(b"SQLite format 3\x00" + b"\0" * 84,))
    writer.start()
    with pytest.raises(
        TraceFormatError, match="an Nsight Systems export cannot be read from a pipe"
    ):
        read_trace(fifo)
    writer.join()
