"""Issue 11, the Kineto reader's side: inputs that used to give silently wrong numbers, a
traceback, a hang or a "damaged file" verdict. Each test builds its input by hand; the expected
values are derived in the comments."""

from __future__ import annotations

import gzip
import json
import tracemalloc
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import traceoverlap
from traceoverlap.core.errors import TraceFormatError
from traceoverlap.readers import _bytes as _input
from traceoverlap.readers.kineto import MAX_WORLD_SIZE, _document, read_kineto

INT64_MAX = 2**63 - 1


def _x(cat: str, name: str, pid: Any, tid: Any, ts: Any, dur: Any, **args: Any) -> dict[str, Any]:
    ev: dict[str, Any] = {"ph": "X", "cat": cat, "name": name, "pid": pid, "tid": tid}
    if ts is not ...:
        ev["ts"] = ts
    if dur is not ...:
        ev["dur"] = dur
    if args:
        ev["args"] = args
    return ev


def _lines(events: list[dict[str, Any]], **top: Any) -> str:
    """A document laid out as Kineto writes it: header fields, one event per line, trailer."""
    head = "".join(f"  {json.dumps(k)}: {json.dumps(v)},\n" for k, v in top.items())
    body = ",\n".join("  " + json.dumps(e) for e in events)
    return "{\n" + head + '  "traceEvents": [\n' + body + "\n  ]\n}\n"


def _write(tmp_path: Path, text: str | bytes, name: str = "rank0.json") -> Path:
    p = tmp_path / name
    p.write_bytes(text.encode() if isinstance(text, str) else text)
    return p


def _row(events: Any, name: str) -> Any:
    rows = events[events["name"] == name]
    assert len(rows) == 1, f"expected one {name!r}, found {len(rows)}"
    return rows.iloc[0]


# ---------------------------------------------------------------------------------------------
# ts / dur


def test_unusable_ts_or_dur_drops_the_event_with_a_counted_note(tmp_path: Path) -> None:
    good = [
        _x("cuda_runtime", "cudaLaunchKernel", 10, 10, 1.0, 0.5, correlation=1),
        _x("kernel", "good", 0, 7, 2.0, 3.0, device=0, stream=7, correlation=1),
    ]
    bad = [
        _x("kernel", "dur_null", 0, 7, 4.0, None, correlation=2),
        _x("kernel", "dur_missing", 0, 7, 4.0, ..., correlation=3),
        _x("kernel", "dur_text", 0, 7, 4.0, "abc", correlation=4),
        _x("cuda_runtime", "ts_null", 10, 10, None, 1.0, correlation=5),
        _x("cuda_runtime", "ts_missing", 10, 10, ..., 1.0, correlation=6),
        _x("cpu_op", "ts_bool", 10, 10, True, 1.0),
        # 1e16 µs = 1e19 ns > 2**63 - 1 ns: would wrap to a negative time.
        _x("user_annotation", "ProfilerStep#1", 10, 10, 1e16, 5.0),
        _x("kernel", "dur_huge", 0, 7, 5.0, 1e16, correlation=7),
        _x("kernel", "ts_negative_huge", 0, 7, -1e16, 1.0, correlation=8),
    ]
    text = _lines(good + bad)
    # A bare NaN (not JSON, but written by some tools): repaired to null, then dropped.
    text = text.replace('"dur": "abc"', '"dur": "abc"').replace(
        '"name": "dur_text", "pid": 0, "tid": 7, "ts": 4.0, "dur": "abc"',
        '"name": "dur_text", "pid": 0, "tid": 7, "ts": 4.0, "dur": NaN',
    )
    tl = read_kineto(_write(tmp_path, text))
    ev = tl.events
    assert sorted(ev["name"].astype(str)) == ["cudaLaunchKernel", "good"]
    # 2 µs -> 2000 ns; 3 µs -> end 5000 ns. Nothing negative, nothing wrapped.
    k = _row(ev, "good")
    assert (k["start_ns"], k["end_ns"]) == (2_000, 5_000)
    (info,) = tl.traces
    (note,) = [n for n in info.notes if n.startswith("dropped")]
    # 9 bad events: 5 kernels, 2 launches, 1 cpu_op, 1 step marker (annotation).
    assert note.startswith(
        "dropped 9 events with unusable ts/dur (null, NaN, non-numeric or out of range)"
    )
    assert "kernel (5)" in note and "runtime (2)" in note and "annotation (1)" in note


@pytest.mark.parametrize("base", [0, 10**18])
def test_int64_bounds_are_exact(tmp_path: Path, base: int) -> None:
    # With base B, an event fits iff ts_ns + B and ts_ns + dur_ns + B are <= 2**63 - 1.
    # Largest ts (µs, an integer so that the float is exact) that fits: floor((2**63-1-B)/1000).
    top_us = (INT64_MAX - base) // 1000  # B=0: 9223372036854775; B=1e18: 8223372036854775
    # Floats above 2**53 are spaced by 2: use an even value at or below the top.
    fit_us = top_us - (top_us % 2)
    fit_ns = fit_us * 1000 + base
    room_ns = INT64_MAX - fit_ns  # the largest duration that still fits, in ns
    assert 0 < room_ns < 10_000
    room_us = room_ns / 1000  # three decimals: exact in the reader's conversion
    events = [
        _x("cpu_op", "fits", 1, 1, float(fit_us), 0.0),
        _x("cpu_op", "fits_to_the_last_ns", 1, 1, float(fit_us), room_us),
        _x("cpu_op", "one_ns_too_long", 1, 1, float(fit_us), (room_ns + 1) / 1000),
        _x("cpu_op", "starts_too_late", 1, 1, float(fit_us + 2), 0.0),
    ]
    doc: dict[str, Any] = {"traceEvents": events}
    if base:
        doc["baseTimeNanoseconds"] = base
    tl = read_kineto(_write(tmp_path, json.dumps(doc)))
    ev = tl.events
    assert sorted(ev["name"].astype(str)) == ["fits", "fits_to_the_last_ns"]
    assert _row(ev, "fits")["start_ns"] == fit_ns
    assert _row(ev, "fits_to_the_last_ns")["end_ns"] == INT64_MAX
    assert (ev["end_ns"] >= ev["start_ns"]).all()
    assert any(n.startswith("dropped 2 events") for n in tl.traces[0].notes)


def test_a_chunk_with_odd_values_keeps_its_good_events(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 200 kernels one per line in small chunks; every 10th has dur null (that chunk goes
    # through the lenient decoder): the other 180 are read exactly, 20 dropped and counted.
    monkeypatch.setattr(_document, "CHUNK_BYTES", 2000)
    events = [
        _x("kernel", f"k{i}", 0, 7, float(i), None if i % 10 == 0 else 0.5, correlation=i)
        for i in range(200)
    ]
    tl = read_kineto(_write(tmp_path, _lines(events)))
    names = tl.events["name"].astype(str).tolist()
    assert names == [f"k{i}" for i in range(200) if i % 10]
    # ts i µs -> i * 1000 ns, dur 0.5 µs -> 500 ns.
    assert tl.events["start_ns"].tolist() == [i * 1000 for i in range(200) if i % 10]
    assert (tl.events["end_ns"] - tl.events["start_ns"]).eq(500).all()
    assert any(n.startswith("dropped 20 events") for n in tl.traces[0].notes)


# ---------------------------------------------------------------------------------------------
# baseTimeNanoseconds


@pytest.mark.parametrize("base", [2**64, [1, 2], "1711964646000000000", -5, True, 1.5e300])
@pytest.mark.parametrize("ts", [2.0, 1_650_000_000_000_000.0])
def test_unusable_base_time_means_a_relative_clock_and_a_note(
    tmp_path: Path, base: Any, ts: float
) -> None:
    # Even when the timestamps look like absolute epoch µs (> 1e15, the second case): the
    # trace claims they are relative to a base we cannot read.
    events = [_x("cpu_op", "aten::mm", 1, 1, ts, 3.0)]
    tl = read_kineto(
        _write(tmp_path, json.dumps({"traceEvents": events, "baseTimeNanoseconds": base}))
    )
    (info,) = tl.traces
    assert info.clock == "relative"
    assert any(n.startswith("baseTimeNanoseconds") and "not a usable time" in n for n in info.notes)
    # The base is not added: ts µs -> ts * 1000 ns.
    assert tl.events["start_ns"].tolist() == [int(ts) * 1000]


def test_usable_base_time(tmp_path: Path) -> None:
    events = [_x("cpu_op", "aten::mm", 1, 1, 2.0, 3.0)]
    doc = {"traceEvents": events, "baseTimeNanoseconds": 10**18, "distributedInfo": {"rank": 0}}
    tl = read_kineto(_write(tmp_path, json.dumps(doc)))
    (info,) = tl.traces
    # 1e18 + 2000 ns, unix clock, no note.
    assert info.clock == "unix" and info.notes == ()
    assert tl.events["start_ns"].tolist() == [10**18 + 2_000]


# ---------------------------------------------------------------------------------------------
# Deep nesting


def _deep(depth: int) -> str:
    return "[" * depth + "]" * depth


def test_an_event_nested_too_deeply_is_dropped_and_counted(tmp_path: Path) -> None:
    events = [json.dumps(_x("cpu_op", f"op{i}", 1, 1, float(i), 1.0)) for i in range(4)]
    # op1 carries 10,000 levels of nesting in its args (beyond the decoder's recursion limit).
    events[1] = events[1][:-1] + ', "args": {"deep": ' + _deep(10_000) + "}}"
    text = '{\n  "traceEvents": [\n  ' + ",\n  ".join(events) + "\n  ]\n}\n"
    tl = read_kineto(_write(tmp_path, text))
    assert tl.events["name"].astype(str).tolist() == ["op0", "op2", "op3"]
    assert any("1 events nested too deeply" in n for n in tl.traces[0].notes)


def test_deep_nesting_outside_the_events_is_a_clean_error(tmp_path: Path) -> None:
    text = '{"deviceProperties": ' + _deep(10_000) + ', "traceEvents": []}'
    with pytest.raises(TraceFormatError, match="nested too deeply") as info:
        read_kineto(_write(tmp_path, text))
    assert "rank0.json" in str(info.value)


# ---------------------------------------------------------------------------------------------
# distributedInfo


@pytest.mark.parametrize(
    ("rank", "world", "want_rank", "want_world", "n_notes"),
    [
        # rank 2**31 overflows int32; world 1e8 would make a 100M-element set downstream.
        (2**31, 1e8, 5, None, 3),
        (3, -2, 3, None, 1),
        (3, True, 3, None, 1),
        (-1, 4, 5, 4, 2),
        ("2", "4", 2, 4, 0),  # digit strings are accepted
        (1.0, 8.0, 1, 8, 0),  # so are integral floats
        (MAX_WORLD_SIZE, MAX_WORLD_SIZE, 5, MAX_WORLD_SIZE, 2),
    ],
)
def test_rank_and_world_size_are_validated(
    tmp_path: Path, rank: Any, world: Any, want_rank: int, want_world: int | None, n_notes: int
) -> None:
    events = [_x("cpu_op", "aten::mm", 1, 1, 2.0, 3.0)]
    doc = {"traceEvents": events, "distributedInfo": {"rank": rank, "world_size": world}}
    # Unusable rank: the file name's rank (5) is used instead, and a note says so.
    tl = read_kineto(_write(tmp_path, json.dumps(doc), "trace_rank5.json"))
    (info,) = tl.traces
    assert (info.rank, info.world_size) == (want_rank, want_world)
    assert len(info.notes) == n_notes, info.notes
    assert (tl.events["rank"] == want_rank).all()


def test_absurd_world_size_analyzes_quickly(tmp_path: Path) -> None:
    # The whole pipeline on the file: no traceback, and no per-rank structure of 1e8 entries.
    events = [
        _x("user_annotation", "ProfilerStep#1", 1, 1, 0.0, 10.0),
        _x("cpu_op", "aten::mm", 1, 1, 1.0, 3.0),
    ]
    doc = {"traceEvents": events, "distributedInfo": {"rank": 2**40, "world_size": 1e8}}
    result = traceoverlap.analyze(str(_write(tmp_path, json.dumps(doc))))
    assert len(result.steps) == 1
    assert result.traces[0].world_size is None


# ---------------------------------------------------------------------------------------------
# gzip


def _forged_truncated_gzip(text: bytes) -> bytes:
    gz = gzip.compress(text)
    cut = gz[: len(gz) // 2]
    return cut + (0xFFFFFFFF).to_bytes(4, "little")  # the trailer claims 4 GiB


def test_truncated_gzip_claiming_4_gib_allocates_little_and_fails_cleanly(tmp_path: Path) -> None:
    text = _lines([_x("cpu_op", f"op{i}", 1, 1, float(i), 1.0) for i in range(2000)]).encode()
    p = _write(tmp_path, _forged_truncated_gzip(text), "rank0.json.gz")
    tracemalloc.start()
    try:
        with pytest.raises(TraceFormatError) as info:
            read_kineto(p)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "truncated gzip" in info.value.reason and "re-collect" in str(info.value)
    # The preallocation is bounded by 32x the compressed size (a few KB here), not 4 GiB.
    assert peak < 32 * p.stat().st_size + (8 << 20)


def test_gzip_preallocation_is_bounded_but_grows_when_needed() -> None:
    # Highly compressible: 10 MB of spaces compress ~1000x, beyond the 32x bound: the buffer
    # grows past its preallocation and the content is intact.
    text = b"{" + b" " * 10_000_000 + b"}"
    out = _input.gunzip(gzip.compress(text), "x")
    assert bytes(out) == text


# ---------------------------------------------------------------------------------------------
# Encodings and odd args


@pytest.mark.parametrize(
    "encoding", ["utf-8-sig", "utf-16", "utf-16-le", "utf-16-be", "utf-32", "utf-32-be"]
)
def test_utf16_utf32_and_bom_json_is_decoded(tmp_path: Path, encoding: str) -> None:
    # "utf-16" / "utf-32" / "utf-8-sig" write a byte order mark; -le / -be write none.
    events = [_x("cpu_op", "aten::mm", 1, 1, 2.0, 3.0), _x("cpu_op", "é", 1, 1, 4.0, 1.0)]
    p = _write(tmp_path, json.dumps({"traceEvents": events}).encode(encoding))
    tl = traceoverlap.readers.read_trace(p)
    assert tl.events["name"].astype(str).tolist() == ["aten::mm", "é"]
    # ts 2 µs -> 2000 ns, dur 3 µs -> 5000 ns.
    assert tl.events["end_ns"].tolist() == [5_000, 5_000]


@pytest.mark.parametrize("args", ["a string", ["a", "list"], 7, True])
def test_args_of_the_wrong_type_degrade_that_event_only(tmp_path: Path, args: Any) -> None:
    events: list[dict[str, Any]] = [
        _x("cuda_runtime", "cudaLaunchKernel", 10, 10, 1.0, 0.5, correlation=1),
        _x("kernel", "k", 0, 7, 2.0, 3.0, device=0, stream=7, correlation=1),
        _x("cpu_op", "odd", 10, 10, 1.0, 5.0),
    ]
    events[2]["args"] = args
    tl = read_kineto(_write(tmp_path, _lines(events)))
    ev = tl.events
    assert sorted(ev["name"].astype(str)) == ["cudaLaunchKernel", "k", "odd"]
    assert _row(ev, "k")["correlation"] == _row(ev, "cudaLaunchKernel")["correlation"] == 1
    odd = _row(ev, "odd")
    # 1 µs -> 1000 ns, 5 µs -> end 6000 ns: the event stays, only its args are ignored.
    assert (odd["start_ns"], odd["end_ns"], odd["correlation"]) == (1_000, 6_000, -1)
    assert any(n.startswith("1 events had args that could not be read") for n in tl.traces[0].notes)


def test_correlation_ids_beyond_32_bits_survive(tmp_path: Path) -> None:
    big = 2**32 + 5
    events = [
        _x("cuda_runtime", "launch_big", 10, 10, 1.0, 0.5, correlation=big),
        _x("cuda_runtime", "launch_small", 10, 10, 2.0, 0.5, correlation=5),
        _x("kernel", "k_big", 0, 7, 3.0, 1.0, device=0, stream=7, correlation=big),
        _x("kernel", "k_small", 0, 7, 5.0, 1.0, device=0, stream=7, correlation=5),
    ]
    ev = read_kineto(_write(tmp_path, _lines(events))).events
    assert _row(ev, "k_big")["correlation"] == _row(ev, "launch_big")["correlation"] == big
    assert _row(ev, "k_small")["correlation"] == 5
    assert ev["correlation"].dtype == np.int64


def test_invalid_utf8_and_truncation_still_handled(tmp_path: Path) -> None:
    text = _lines([_x("cpu_op", "ok", 1, 1, 1.0, 1.0), _x("cpu_op", "badXX", 1, 1, 2.0, 1.0)])
    raw = text.encode().replace(b"badXX", b"bad\xff")  # a lone 0xff byte: invalid UTF-8
    tl = read_kineto(_write(tmp_path, raw))
    assert tl.events["name"].astype(str).tolist() == ["ok", "bad\ufffd"]
    with pytest.raises(TraceFormatError, match="truncated"):
        read_kineto(_write(tmp_path, raw[: len(raw) // 2], "cut.json"))


def test_odd_value_and_invalid_utf8_in_one_chunk(tmp_path: Path) -> None:
    # Found by fuzzing: a null dur (lenient decoder) and a 0xdd byte (invalid UTF-8) in the same
    # chunk used to end in a UnicodeDecodeError traceback.
    events = [
        _x("cpu_op", "nulldur", 1, 1, 1.0, None),
        _x("cpu_op", "badXX", 1, 1, 2.0, 1.0),
        _x("cpu_op", "ok", 1, 1, 3.0, 1.0),
    ]
    raw = _lines(events).encode().replace(b"badXX", b"bad\xdd")
    tl = read_kineto(_write(tmp_path, raw))
    # nulldur dropped (counted); the invalid byte became U+FFFD.
    assert tl.events["name"].astype(str).tolist() == ["bad\ufffd", "ok"]
    assert any(n.startswith("dropped 1 events") for n in tl.traces[0].notes)


def test_numbers_beyond_float_range_drop_only_their_event(tmp_path: Path) -> None:
    # JSON allows 1e400; no float holds it. The event with it as ts is dropped (counted), the
    # one with it in args keeps its times and loses its args (counted); the rest is read.
    events = [
        _x("cpu_op", "ok", 1, 1, 1.0, 1.0),
        _x("cpu_op", "huge_ts", 1, 1, 7.0, 1.0),
        _x("cpu_op", "huge_arg", 1, 1, 2.0, 1.0, correlation=7),
    ]
    text = (
        _lines(events)
        .replace('"ts": 7.0', '"ts": 1e400')
        .replace('"correlation": 7', '"correlation": 1e400')
    )
    tl = read_kineto(_write(tmp_path, text))
    assert tl.events["name"].astype(str).tolist() == ["ok", "huge_arg"]
    notes = tl.traces[0].notes
    assert any(n.startswith("dropped 1 events") for n in notes)
    assert any(n.startswith("1 events had args that could not be read") for n in notes)


def test_unreadable_metadata_costs_only_that_field(tmp_path: Path) -> None:
    # 1e400 is valid JSON but no float: the base time and distributedInfo are unusable (notes),
    # the events are read, the clock is relative, the rank comes from the file name.
    ev = '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 2, "dur": 3}'
    text = (
        '{"distributedInfo": {"rank": 1e400}, "traceEvents": [' + ev + "], "
        '"baseTimeNanoseconds": 1e400}'
    )
    tl = read_kineto(_write(tmp_path, text, "rank6.json"))
    (info,) = tl.traces
    assert (info.rank, info.rank_source, info.clock) == (6, "filename", "relative")
    assert any(n.startswith("baseTimeNanoseconds (unreadable") for n in info.notes)
    assert any(n.startswith("distributedInfo (unreadable") for n in info.notes)
    assert tl.events["start_ns"].tolist() == [2_000]


def test_invalid_utf8_in_the_metadata(tmp_path: Path) -> None:
    # Found by fuzzing: an invalid byte in a top-level field (kept raw, then decoded alone)
    # was a UnicodeDecodeError traceback. It is replaced like anywhere else.
    ev = '{"ph": "X", "cat": "cpu_op", "name": "a", "pid": 1, "tid": 1, "ts": 2, "dur": 3}'
    text = '{"distributedInfo": {"rank": 2, "backend": "ncXX"}, "traceEvents": [' + ev + "]}"
    tl = read_kineto(_write(tmp_path, text.encode().replace(b"XX", b"\xf6")))
    (info,) = tl.traces
    assert (info.rank, info.backend) == (2, "nc\ufffd")


def test_flow_ids_of_odd_types(tmp_path: Path) -> None:
    # Found by fuzzing: a flow id that is a list made a 2-D id array (traceback). Ids of any
    # type still bind their two ends: here ["a"] links the launch to the kernel (no
    # args.correlation anywhere, as in older traces).
    events: list[dict[str, Any]] = [
        _x("cuda_runtime", "cudaLaunchKernel", 5, 5, 1.0, 2.0),
        _x("kernel", "k", 0, 7, 10.0, 1.0),
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": ["a"], "pid": 5, "tid": 5, "ts": 1.0},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": ["a"], "pid": 0, "tid": 7, "ts": 10.0},
    ]
    ev = read_kineto(_write(tmp_path, _lines(events))).events
    launch, kernel = _row(ev, "cudaLaunchKernel"), _row(ev, "k")
    assert launch["correlation"] == kernel["correlation"] >= 2**62  # a hashed, non-int id


# ---------------------------------------------------------------------------------------------
# gzip read as a stream: the decompressed document is never whole in memory


def _kineto_doc(n: int) -> str:
    events = [
        _x("cuda_runtime", "cudaLaunchKernel", 10, 10, float(2 * i), 0.5, correlation=i)
        for i in range(n)
    ] + [
        _x("kernel", f"k{i % 7}", 0, 7, float(2 * i + 1), 0.25, device=0, stream=7, correlation=i)
        for i in range(n)
    ]
    return _lines(events, schemaVersion=1, distributedInfo={"rank": 1, "world_size": 2}).replace(
        "\n}\n", ',\n  "baseTimeNanoseconds": 1000000000000000000\n}\n'
    )


def test_gzip_stream_equals_plain_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # Small chunks and pieces: many cuts, pieces ending anywhere. Same table as the plain file.
    monkeypatch.setattr(_document, "CHUNK_BYTES", 3000)
    monkeypatch.setattr(_input, "PIECE_BYTES", 777)
    text = _kineto_doc(500)
    plain = read_kineto(_write(tmp_path, text, "rank1.json"))
    packed = read_kineto(_write(tmp_path, gzip.compress(text.encode()), "rank1.json.gz"))
    assert packed.events.drop(columns=[]).equals(plain.events)
    assert packed.traces[0].notes == plain.traces[0].notes
    assert (packed.traces[0].rank, packed.traces[0].clock) == (1, "unix")
    # kernel i at (2i + 1) µs after the base 1e18 ns; 0.25 µs long.
    k = packed.events[packed.events["category"] == "kernel"]
    assert k["start_ns"].tolist() == [10**18 + (2 * i + 1) * 1000 for i in range(500)]


def test_gzip_stream_holds_a_chunk_not_the_document(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_document, "CHUNK_BYTES", 64 << 10)
    monkeypatch.setattr(_input, "PIECE_BYTES", 64 << 10)
    # 5,000 ops with 1 KB of args each (shapes the reader skips, as in real traces): ~5.5 MB
    # of JSON for ~0.3 MB of columns.
    pad = list(range(250))
    events = [_x("cpu_op", f"op{i % 9}", 1, 1, float(i), 0.5, dims=pad) for i in range(5000)]
    text = _lines(events).encode()
    p = _write(tmp_path, gzip.compress(text), "rank1.json.gz")
    calls: list[int] = []
    monkeypatch.setattr(_input, "gunzip", lambda *a: calls.append(1) or bytearray())
    layout = _document.read_gzip_layout
    peaks: list[int] = []

    def measured(*a: Any) -> Any:
        tracemalloc.start()
        try:
            return layout(*a)
        finally:
            peaks.append(tracemalloc.get_traced_memory()[1])
            tracemalloc.stop()

    monkeypatch.setattr(_document, "read_gzip_layout", measured)
    tl = read_kineto(p)
    assert calls == []  # the streaming path did it all: no whole-file decompression
    assert len(tl.events) == 5000
    # While streaming: a 64 KB chunk and its structs, a 64 KB piece, the compressed file, the
    # columns; never the whole 6 MB document (the whole-file path holds it all at once).
    assert peaks[0] < len(text) / 4


def test_truncated_gzip_stream_fails_cleanly(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_document, "CHUNK_BYTES", 3000)
    gz = gzip.compress(_kineto_doc(500).encode())
    with pytest.raises(TraceFormatError, match="truncated gzip"):
        read_kineto(_write(tmp_path, gz[: len(gz) - 200], "rank1.json.gz"))


def test_gzip_old_trace_with_flows_falls_back_to_the_whole_document(tmp_path: Path) -> None:
    # No args.correlation: flows carry the link, which needs a second pass over the events.
    events: list[dict[str, Any]] = [
        _x("cuda_runtime", "cudaLaunchKernel", 5, 5, 1.0, 2.0),
        _x("kernel", "k", 0, 7, 10.0, 1.0),
        {"ph": "s", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 5, "tid": 5, "ts": 1.0},
        {"ph": "f", "cat": "ac2g", "name": "ac2g", "id": 9, "pid": 0, "tid": 7, "ts": 10.0},
    ]
    tl = read_kineto(_write(tmp_path, gzip.compress(_lines(events).encode()), "r.json.gz"))
    assert (
        _row(tl.events, "k")["correlation"]
        == _row(tl.events, "cudaLaunchKernel")["correlation"]
        == 9
    )


# ---------------------------------------------------------------------------------------------
# a duplicate top-level "traceEvents" key (issue 41)


def _two_lists(first: int, second: int, layout: str) -> bytes:
    """A document with two top-level ``traceEvents`` lists of ``first`` and ``second`` kernels.
    ``kineto``: one event per line (the one-pass reader; with one event in the second list its
    tail held the second list, so the file once read as the union of both), ``compact``: one
    line (the general path, where the decoder kept the last list only)."""
    ev = [_x("kernel", f"k{i}", 0, 7, float(10 * i), 2.0, correlation=i + 1) for i in range(9)]
    a, b = ev[:first], ev[first : first + second]
    if layout == "compact":
        return (
            '{"traceEvents": ' + json.dumps(a) + ', "traceEvents": ' + json.dumps(b) + "}"
        ).encode()
    lists = ["\n" + ",\n".join("  " + json.dumps(e) for e in x) + "\n  " for x in (a, b)]
    return (
        '{\n  "traceEvents": [' + lists[0] + '],\n  "traceEvents": [' + lists[1] + "]\n}\n"
    ).encode()


@pytest.mark.parametrize("scanner", ["c", "msgspec"])
@pytest.mark.parametrize("layout", ["kineto", "compact"])
@pytest.mark.parametrize("gz", [False, True], ids=["json", "gzip"])
@pytest.mark.parametrize("second", [1, 3])
def test_two_trace_events_lists_are_refused_in_every_layout(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    scanner: str,
    layout: str,
    gz: bool,
    second: int,
) -> None:
    from traceoverlap.readers.kineto import _columns

    if scanner == "c" and _columns._kscan is None:
        pytest.skip("the C scanner is not built")
    monkeypatch.setattr(_columns, "SCANNER", scanner)
    doc = _two_lists(3, second, layout)
    path = _write(tmp_path, gzip.compress(doc) if gz else doc, "rank0.json.gz" if gz else "r.json")
    with pytest.raises(TraceFormatError, match="holds the key `traceEvents` twice"):
        read_kineto(path)


def test_trace_events_in_strings_is_not_a_second_key(tmp_path: Path) -> None:
    # the key's text inside a header string and an event's name and args: one list, 2 events
    events = [
        _x("kernel", '"traceEvents": [', 0, 7, 1.0, 2.0, correlation=1, note='"traceEvents":'),
        _x("kernel", "k", 0, 7, 5.0, 2.0, correlation=2),
    ]
    for text in (
        _lines(events, note='"traceEvents": ['),
        json.dumps({"a": '"traceEvents": [', "traceEvents": events}),
    ):
        assert len(read_kineto(_write(tmp_path, text)).events) == 2
