"""The Kineto reader's C scanner (readers/kineto/_kscan.c) against the msgspec path it speeds up.

The property: for any JSON array of events, :meth:`Columns.add_scanned` either declines (and the
msgspec path reads the chunk, as without a scanner) or takes exactly the columns that
``Columns.add(decode_chunk(...))`` takes from the typed decode. Checked on every fixture and real
trace (whole Timelines), on random documents that mix every value type, escape, number form and
layout the scanner treats specially, and on random byte mutations of them (never a crash).
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import Any

import msgspec
import numpy as np
import pytest
from conftest import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from traceoverlap.readers.kineto import _columns, _decode, read_kineto

HERE = Path(__file__).resolve().parent
FIXTURES = HERE.parent / "fixtures" / "workloads"
REAL = Path(
    os.environ.get("TRACEOVERLAP_REAL_TRACES", str(HERE.parent.parent / "shared" / "real-traces"))
)
# random documents per property: 200 in CI, 20 in the fast loop (conftest.examples;
# TRACEOVERLAP_FUZZ_EXAMPLES=5000 for a campaign)
EXAMPLES = examples(200)

needs_scanner = pytest.mark.skipif(
    _columns._kscan is None, reason="the C scanner is not built (no C compiler at install)"
)


def test_scanner_is_built_where_ci_requires_it() -> None:
    # .ci/run sets TRACEOVERLAP_REQUIRE_KSCAN=1: a CI install that silently lost the extension
    # (no compiler, a build error swallowed by `optional`) fails here instead of running slower
    if os.environ.get("TRACEOVERLAP_REQUIRE_KSCAN") == "1":
        assert _columns._kscan is not None
        assert _columns.SCANNER == "c"


# ---------------------------------------------------------------------------------------------
# the state a chunk leaves in Columns


def _state(cols: _columns.Columns) -> dict[str, Any]:
    def cat(arrays: list[np.ndarray]) -> list[Any]:
        return np.concatenate(arrays).tolist() if arrays else []

    out: dict[str, Any] = {
        k: cat(getattr(cols, k))
        for k in ("cat", "name", "ts", "dur", "pid", "tid", "device", "stream", "corr")
    }
    # NaN != NaN: compare floats by their bits
    for k in ("ts", "dur"):
        arrays = getattr(cols, k)
        out[k] = np.concatenate(arrays).view(np.int64).tolist() if arrays else []
    out["src"] = list(cols.src.items())
    out["names"] = list(cols.names.items())
    out["shape"] = [(r.tolist(), d.tolist()) for r, d in cols.shape]
    out["op_shape"] = [(r.tolist(), c.tolist()) for r, c in cols.op_shape]
    out["coll"] = [tuple(a.tolist() for a in t) for t in cols.coll]
    out["p2p"] = [tuple(a.tolist() for a in t) for t in cols.p2p]
    out["coll_names"] = list(cols.coll_names.items())
    out["pg_names"] = list(cols.pg_names.items())
    out["meta"] = [repr(m) for m in cols.meta]
    out["offset"] = cols.offset
    out["bad_args"] = cols.bad_args
    return out


def _check(buf: bytes, must_scan: bool = False) -> bool:
    """Both paths on one chunk; returns whether the scanner took it."""
    scanned = _columns.Columns()
    took = scanned.add_scanned(buf)
    try:
        chunk = _decode.decode_chunk("t.json", buf, split_deep=False)
    except (msgspec.DecodeError, RecursionError, _decode.TraceFormatError):
        assert not took, "the scanner read a chunk the typed decode refuses"
        return took
    if chunk.loose:
        assert not took, "the scanner read a chunk only the lenient decoder reads"
        return took
    if took:
        bytes(buf).decode("utf-8")  # the scanner declines any invalid UTF-8
        reference = _columns.Columns()
        reference.add(chunk)
        assert _state(scanned) == _state(reference)
    elif must_scan:
        pytest.fail("the scanner declined a plain chunk")
    return took


# ---------------------------------------------------------------------------------------------
# whole traces


def _traces() -> list[Path]:
    found = sorted(FIXTURES.glob("*/*.json*"))
    if (REAL / "kineto").is_dir():
        found += sorted((REAL / "kineto").rglob("*.json*"))
    return found


@needs_scanner
@pytest.mark.parametrize("path", _traces(), ids=lambda p: f"{p.parent.name}/{p.name}")
def test_every_trace_reads_the_same_with_and_without_the_scanner(
    path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(_columns, "SCANNER", "c")
    fast = read_kineto(path)
    monkeypatch.setattr(_columns, "SCANNER", "msgspec")
    slow = read_kineto(path)
    assert list(fast.events.columns) == list(slow.events.columns)
    for column in fast.events.columns:
        assert fast.events[column].equals(slow.events[column]), column
    assert repr(fast.traces) == repr(slow.traces)  # notes, ranks, clocks


@needs_scanner
def test_the_scanner_reads_the_real_traces_itself(monkeypatch: pytest.MonkeyPatch) -> None:
    # not a silent fallback: every chunk of the Kineto-layout fixtures is the scanner's (the
    # tail's last event is msgspec's, by design: _document._decode_tail)
    calls = {"scanned": 0, "declined": 0}
    real = _columns._kscan.scan

    def counting(buf: Any) -> Any:
        got = real(buf)
        calls["scanned" if got is not None else "declined"] += 1
        return got

    monkeypatch.setattr(_columns._kscan, "scan", counting)
    read_kineto(FIXTURES / "ddp_8" / "rank0.json.gz")
    assert calls["scanned"] >= 1 and calls["declined"] == 0


# ---------------------------------------------------------------------------------------------
# hand-picked chunks: what the scanner reads itself, what it leaves to Python, what it declines


def _doc(*events: str) -> bytes:
    return ("[\n  " + ",\n  ".join(events) + "\n]").encode()


X = '"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": 7, "ts": 10.5, "dur": 2.25'
#: A point-to-point op with its Concrete Inputs (``name``, ``ci``: the raw list)
P2P = (
    '{{"ph": "X", "cat": "cpu_op", "name": "{name}", "pid": 1, "tid": 2, "ts": 0, "dur": 1,'
    ' "args": {{"Concrete Inputs": {ci}, "Input type": ["TensorList", "", "Scalar", "Scalar"]}}}}'
)


@needs_scanner
@pytest.mark.parametrize(
    "event",
    [
        "{" + X + "}",
        "{" + X + ', "args": {"correlation": 5, "device": 0, "stream": 7, "grid": [1, 2, 3],'
        ' "block": [128, 1, 1], "External id": 9, "kind": "x"}}',
        '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 0, "dur": 1,'
        ' "args": {"Input Dims": [[64, 512], [512, 64]], "Input type": ["float", "float"]}}',
        '{"ph": "X", "cat": "cpu_op", "name": "aten::mm", "pid": 1, "tid": 2, "ts": 0, "dur": 1,'
        ' "args": {"Input Dims": [[64,512],\n [512, 64]]}}',  # same code as without the spaces
        # point-to-point ops: their peer and tag from Concrete Inputs (an aten op's are not read)
        P2P.format(name="c10d::send", ci='["", "", "2", "0"]'),
        P2P.format(name="c10d::recv_", ci='["",\n "", "3", "17"]'),
        P2P.format(name="c10d::recv_any_source_", ci='["", "", "5"]'),
        P2P.format(name="c10d::send", ci='["", "", "x", "0"]'),  # not a number: -1
        P2P.format(name="c10d::send", ci='["", "", "-2", "0"]'),
        P2P.format(name="c10d::recv_", ci="[]"),
        P2P.format(name="c10d::recv_", ci='{"a": 1}'),
        P2P.format(name="c10d::send", ci='["", "", 2, 0]'),  # numbers, not strings: read too
        P2P.format(name="aten::add", ci='["", "", "2", "0"]'),
        '{"cat": "kernel", "ph": "X", "ts": 1e3, "dur": 2E-1, "name": "\\u00e9t\\u00e9 \\"q\\""}',
        '{"ph": "X", "name": "€ and 漢字", "cat": "cpu_op", "ts": -0.0, "dur": 0.000}',
        '{"ph": "X", "ts": 1234567890123456789012, "dur": 0.1234567890123456789}',  # slow parse
        '{"ph": "X", "ts": 4693679512466.250, "dur": 9007199254740993}',  # beyond 2**53
        '{"ph": "X"}',  # every field missing: the structs' defaults
        '{"ph": "s", "id": 1, "cat": "ac2g", "ts": "odd", "pid": [1]}',  # skipped phase
        '{"ph": "i", "s": "t", "name": 5}',
    ],
)
def test_plain_events_are_read_by_the_scanner(event: str) -> None:
    assert _check(_doc(event, "{" + X + "}"), must_scan=True)


@pytest.mark.parametrize("scan", [True, False], ids=["scanner", "msgspec"])
def test_point_to_point_peer_and_tag_are_read(scan: bool) -> None:
    # the schema c10d::send(Tensor[] tensors, ProcessGroup pg, int dst, int tag): inputs 2 and
    # 3 are the peer (a rank of the op's group) and the tag; recv_any_source_ names no peer,
    # its tag is input 2; an unreadable peer is -1 (rows with neither are not kept)
    buf = _doc(
        P2P.format(name="c10d::send", ci='["", "", "2", "0"]'),
        P2P.format(name="c10d::recv_", ci='["", "", "3", "17"]'),
        P2P.format(name="c10d::recv_any_source_", ci='["", "", "5"]'),
        P2P.format(name="c10d::send", ci='["", "", "x", "y"]'),
        P2P.format(name="aten::add", ci='["", "", "2", "0"]'),
    )
    cols = _columns.Columns()
    if not (scan and _columns._kscan is not None and cols.add_scanned(buf)):
        cols.add(_decode.decode_chunk("t.json", buf, split_deep=False))
    got = [tuple(a.tolist() for a in t) for t in cols.p2p]
    assert got == [([0, 1, 2], [2, 3, -1], [0, 17, 5])]


@needs_scanner
@pytest.mark.parametrize(
    "event",
    [
        '{"ph": "M", "name": "thread_name", "pid": 1, "tid": 2, "args": {"name": "main"}}',
        '{"ph": "M", "name": "process_name", "pid": "Spans", "tid": 0, "args": {"name": "x"}}',
        '{"ph": "X", "cat": "Trace", "name": "PyTorch Profiler (0)", "pid": "Spans",'
        ' "tid": "PyTorch Profiler", "ts": 1, "dur": 2}',  # string pid / tid
        '{"ph": "X", "cat": "kernel", "name": "nccl", "pid": 0, "tid": 7, "ts": 1, "dur": 2,'
        ' "args": {"Collective name": "allreduce", "In msg nelems": 1024, "Out msg nelems":'
        ' 1024, "dtype": "Float", "Group size": 2, "Process Group Name": "0", "Seq": 3}}',
        '{"ph": "X", "cat": "cpu_op", "name": "record_param_comms", "pid": 0, "tid": 1, "ts": 1,'
        ' "dur": 2, "args": {"Collective name": "broadcast", "seq": 1, "Process Group Name": 7}}',
        '{"ph": "X", "cat": "kernel", "name": "k", "pid": 99999999999999999999, "ts": 1}',
        '{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "ts": 2}',  # duplicate: last wins
        '{"ph": "X", "cat": "kernel", "name": "k", "ts": 1, "args": {"device": 1, "device": 2}}',
        '{"ph": "X", "cat": "kernel", "name": "k", "args": {"grid": [1, 2], "block": [1, 2, 3]}}',
        '{"ph": "X", "cat": "kernel", "name": "k", "args": {"grid": [1, 2, 3, 4]}}',
        '{"ph": "X", "cat": "kernel", "name": "k", "args": {"grid": [99999999999999999999, 1, 1]}}',
        '{"ph": "X", "cat": "kernel", "name": "k", "args": {"\\u0064evice": 3}}',  # escaped key
        '{"ph": "X", "cat": "kernel", "name": "k", "args": {"name": "n", "stream": 7}}',
        # a duplicate Concrete Inputs (msgspec keeps the last), one after a name the scanner
        # leaves to Python, one with an escaped key
        '{"ph": "X", "cat": "cpu_op", "name": "c10d::send", "args": {"Concrete Inputs": '
        '["", "", "1", "0"], "Concrete Inputs": ["", "", "3", "4"]}}',
        '{"ph": "X", "cat": "cpu_op", "name": "c10d::recv_", "args": {"name": "n", '
        '"Concrete Inputs": ["", "", "1", "9"]}}',
        '{"ph": "X", "cat": "cpu_op", "name": "c10d::recv_", "args": {"Concrete \\u0049nputs": '
        '["", "", "1", "9"]}}',
        '{"ph": "X", "cat": "cpu_op", "name": "c10d::send", "args": {"Concrete Inputs": 5}}',
        '{"ph": "X", "cat": "kernel", "name": "k", "args": {"correlation": 1.0}}',
        '{"ph": "X", "cat": "kernel", "name": "k", "ts": 1e400}',  # out of range: declined
        '{"ph": "X", "cat": 5, "name": "k"}',  # not a string: declined
        '{"ph": "X", "cat": "kernel", "args": null}',
        '{"ph": "Q", "name": "k"}',  # unknown phase: the lenient decoder's
        '{"name": "k"}',  # no phase
        '{"ph": "X", "ph": "X"}',
        '{"\\u0070h": "X"}',
        '{"ph": "\\u0058", "name": "k"}',
        '{"ph": "X", "name": "k\\ud800"}',  # a lone surrogate escape
        # ... in events and values the scanner only skips (issue 41: it took what msgspec
        # refuses, so the file read or not depending on whether the install had a compiler)
        '{"ph": "s", "id": 1, "x": "a\\ud800c2g"}',
        '{"ph": "X", "cat": "kernel", "name": "k", "args": {"note": "a\\ud800c2g"}}',
        '{"ph": "X", "cat": "kernel", "name": "k", "args": {"a\\udc00": 1}}',  # lone low, a key
        '{"ph": "M", "name": "thread_name", "args": {"name": "\\ud800\\u0041"}}',
        '{"ph": "f", "x": ["\\udbff\\udfff", "\\ud800\\ud800"]}',  # a pair, then two highs
        '{"ph": "s", "x": "\\ud83d\\ude00 \\uD83D\\uDE00"}',  # valid pairs: read
        '{"ph": "s", "x": "\\ud800"}',  # a high surrogate, then the string ends
        '{"ph": "s", "x": "\\ud800\\n"}',
        '{"ph": "s", "x": "\\u12g4"}',  # not four hex digits
        '{"ph": "s", "x": "\\x41"}',  # not an escape
        '{"ph": "s", "x": "nul\x00"}',  # a raw control character in a skipped string
        '{"ph": "X", "name": "tab\there"}',  # a raw control character: invalid JSON
        '{"ph": "X", "ts": 01}',
        '{"ph": "X", "ts": 1.}',
        '{"ph": "X", "ts": -}',
        # "-0" is the integer 0 (msgspec reads an int, then a float); "-0.0" and "-0e1" are
        # floats, negative zero (found under the sanitizers' longer hypothesis run)
        '{"ph": "X", "cat": "kernel", "name": "k", "ts": -0, "dur": -0}',
        '{"ph": "X", "cat": "kernel", "name": "k", "ts": -0.0, "dur": -0e1}',
        '{"ph": "X", "ts": .5}',
        '{"ph": "X", "ts": 1e}',
        '{"ph": "X", "ts": NaN}',
        '{"ph": "X", "x": tru}',
        '{"ph": "X", "x": [1, 2,]}',
        '{"ph": "X", "x": {"a" 1}}',
        '{"ph": "X",}',
        '{"ph": "X", "x": ' + "[" * 300 + "]" * 300 + "}",  # deeper than the scanner goes
    ],
)
def test_odd_events_give_what_the_typed_decode_gives(event: str) -> None:
    _check(_doc("{" + X + "}", event, "{" + X + ', "args": {"correlation": 1}}'))


#: String tids (the PyTorch 1.8 schema writes "stream 7" and "3004819264"). The typed path makes
#: the column of a chunk with numpy, or with _values.to_int (the first number in the string) for
#: every row once one value fails numpy: the scanner reads the ASCII strings whose number both
#: rules agree on (plain digits) or that numpy cannot convert (so to_int decides), and leaves the
#: rest (escapes, non-ASCII, `1_2`, `+5`, ` 12`) to Python, flagged: each string and whether
#: the scanner reads it itself.
STRING_TIDS = {
    "stream 7": True,
    "3004819264": True,
    "PyTorch Profiler": True,  # no number: -1
    "-5": True,
    "stream -3": True,
    "x-": True,
    "-": True,
    "": True,
    "0007": True,
    "99999999999999999999": True,  # beyond int64: -1
    "-9223372036854775808": True,
    "9223372036854775807": True,
    "9223372036854775808": True,
    "a-9223372036854775809 7": True,
    "7 8": False,
    "1_2": False,
    "+5": False,
    " 12": False,
    "\\u0037": False,  # an escape
    "流7": False,
    "\\t7": False,
}


@needs_scanner
@pytest.mark.parametrize("tid", sorted(STRING_TIDS))
def test_string_tids_read_as_the_typed_decode_reads_them(tid: str) -> None:
    odd = '{"ph": "X", "cat": "kernel", "name": "k", "pid": 0, "tid": "' + tid + '", "ts": 1}'
    # alone with plain events (read, or flagged and decoded by Python) ...
    assert _check(_doc("{" + X + "}", odd), must_scan=True)
    # ... and next to a string only to_int converts, in one chunk: a string left to Python
    # would convert the other way in a batch without that one, so such a chunk is declined
    other = '{"ph": "X", "cat": "kernel", "name": "k", "tid": "stream 9", "ts": 2}'
    assert _check(_doc(odd, "{" + X + "}", other)) == STRING_TIDS[tid]
    # ... and next to one only numpy reads that way, in one chunk
    _check(_doc(odd, '{"ph": "X", "cat": "kernel", "name": "k", "tid": "1_0", "ts": 3}'))


@needs_scanner
@pytest.mark.parametrize(
    "raw",
    [
        b'[{"ph": "X", "name": "\xff"}]',  # invalid UTF-8 in a name
        b'[{"ph": "s", "x": "\xc3\x28"}]',  # ... in a skipped string
        b'[{"ph": "X", "name": "\xed\xa0\x80"}]',  # an encoded surrogate
        b'[{"ph": "X", "name": "\xf4\x90\x80\x80"}]',  # beyond U+10FFFF
        b'[{"ph": "X", "name": "\xe0\x80\xaf"}]',  # overlong
        b'[{"ph": "X", "name": "ok"}] x',  # trailing bytes
        b'[{"ph": "X", "name": "ok"}',  # truncated
        b"",
        b"[]",
        b" [ ] ",
        b"[1]",
        b'[{"ph": "X"}, 2]',
        b'["X"]',
    ],
)
def test_byte_level_oddities(raw: bytes) -> None:
    _check(raw)


# ---------------------------------------------------------------------------------------------
# random documents


_KEYS = st.sampled_from(
    [
        "ph", "cat", "name", "pid", "tid", "ts", "dur", "args", "id", "s", "bp",
        "device", "stream", "correlation", "grid", "block", "Input Dims", "External id",
        "Collective name", "In msg nelems", "Out msg nelems", "dtype", "Group size",
        "Process Group Name", "Seq", "seq", "kind", "\\u0064evice", "n\\u0061me", "\\udc00k",
        "Concrete Inputs", "Input type",
        "k\\ud83d\\ude00",
    ]
)  # fmt: skip
_NUMBERS = st.one_of(
    st.integers(-(2**70), 2**70).map(str),
    st.integers(0, 10**6).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.sampled_from(
        ["0", "-0", "-0.0", "1e3", "1E+3", "2.5e-3", "1e400", "-1e400", "4693679512466.250",
         "0.000001", "123456789012345678901", "9007199254740993", "1.7976931348623157e308",
         "5e-324", "0.1e1", "1.0"]
    ),
)  # fmt: skip
# Pieces of strings with escapes: valid and invalid surrogates (pairs, lone highs and lows, a
# high before a non-surrogate), control characters raw and escaped, bad \\u and \\x escapes.
# Drawn for every string, they land in kept fields (names) and in values and events the scanner
# only skips, where it must refuse exactly what msgspec refuses (issue 41).
_ESCAPE_PIECES = st.sampled_from(
    ["\\ud800", "\\udbff", "\\udc00", "\\uDFFF", "\\ud83d\\ude00", "\\uD800\\uDC00",
     "\\ud800\\u0041", "\\ud800\\ud800", "\\u0000", "\\u001f", "\\u00e9", "\\u12g4",
     "\\u12", "\\x41", "\\'", "\\/", "\\b\\f\\r", "\\\\", '\\"', "\t", "\x01", "\x7f",
     "\x1f", "\\ud800\\", "\\U0041", "\\a"]
)  # fmt: skip
_ESCAPED = st.lists(st.one_of(_ESCAPE_PIECES, st.text("ab\u00e9", max_size=2)), max_size=4).map(
    lambda xs: '"' + "".join(xs) + '"'
)
_VALID_STRINGS = st.one_of(
    st.sampled_from(
        ['"X"', '"M"', '"s"', '"f"', '"i"', '"Q"', '""', '"kernel"', '"cpu_op"', '"cuda_runtime"',
         '"gpu_memcpy"', '"user_annotation"', '"python_function"', '"record_param_comms"',
         '"c10d::send"', '"c10d::recv_"', '"c10d::recv_any_source_"', '"2"', '"0"',
         '"Float"', '"\\u0058"', '"a\\"b"', '"\\\\"', '"\\n\\t"', '"\\ud83d\\ude00"']
    ),
    st.text(max_size=12).map(lambda s: json.dumps(s, ensure_ascii=False)),
    st.text(max_size=12).map(json.dumps),
)  # fmt: skip
_STRINGS = st.one_of(_VALID_STRINGS, _ESCAPED)
_WS = st.sampled_from(["", " ", "\n    ", "\t", "\r\n  "])


def _value(depth: int) -> st.SearchStrategy[str]:
    leaf = st.one_of(_NUMBERS, _STRINGS, st.sampled_from(["true", "false", "null"]))
    if depth <= 0:
        return leaf
    inner = _value(depth - 1)
    return st.one_of(
        leaf,
        leaf,
        st.lists(inner, max_size=4).map(lambda xs: "[" + ", ".join(xs) + "]"),
        st.lists(st.tuples(_KEYS, inner), max_size=4).map(
            lambda kv: "{" + ", ".join(f'"{k}": {v}' for k, v in kv) + "}"
        ),
    )


@st.composite
def _event(draw: st.DrawFn) -> str:
    fields: list[tuple[str, str]] = []
    # mostly what the typed decode takes (else the whole chunk is the lenient decoder's, and
    # only the scanner's declining is tested): a known phase, string names, number times
    ph = draw(st.sampled_from(['"X"'] * 12 + ['"M"', '"s"', '"f"', '"Q"', "1", None]))
    if ph is not None:
        fields.append(("ph", ph))
    for key in draw(st.lists(_KEYS, max_size=8)):
        typed = {"cat": _STRINGS, "name": _STRINGS, "ts": _NUMBERS, "dur": _NUMBERS}.get(key)
        if typed is not None and draw(st.integers(0, 9)):
            fields.append((key, draw(typed)))
            continue
        if key == "args":
            args = draw(
                st.lists(
                    st.tuples(
                        _KEYS,
                        st.one_of(
                            _value(2),
                            st.lists(_NUMBERS, min_size=2, max_size=4).map(
                                lambda xs: "[" + ",".join(xs) + "]"
                            ),
                        ),
                    ),
                    max_size=6,
                )
            )
            value = "{" + ", ".join(f'"{k}": {v}' for k, v in args) + "}"
            fields.append((key, draw(st.one_of(st.just(value), st.just(value), _value(1)))))
        else:
            fields.append((key, draw(_value(1))))
    draw(st.randoms()).shuffle(fields)
    ws = draw(_WS)
    return "{" + ws + ("," + ws).join(f'"{k}":{draw(_WS)}{v}' for k, v in fields) + ws + "}"


_PLAIN = st.builds(
    lambda cat, name, pid, ts, dur, corr, dims: (
        f'{{"ph": "X", "cat": {cat}, "name": {name}, "pid": {pid}, "tid": {pid}, "ts": {ts}, '
        f'"dur": {dur}, "args": {{"correlation": {corr}, "grid": [{dims}], "block": [{dims}]}}}}'
    ),
    st.sampled_from(['"kernel"', '"cpu_op"', '"cuda_runtime"', '"python_function"']),
    _VALID_STRINGS,
    st.integers(-5, 2**40),
    st.floats(-1e15, 1e15, allow_nan=False).map(repr),
    st.floats(0, 1e6, allow_nan=False).map(repr),
    st.integers(-1, 2**40),
    st.just("1, 2, 3"),
)


@needs_scanner
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_event(), _PLAIN), max_size=12), _WS)
def test_random_documents_match_the_typed_decode(events: list[str], ws: str) -> None:
    _check(("[" + ws + ("," + ws).join(events) + ws + "]").encode())


@needs_scanner
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(_PLAIN, min_size=1, max_size=8))
def test_plain_documents_are_the_scanners(events: list[str]) -> None:
    # what Kineto writes (with any names): read by the scanner itself, never declined
    assert _check(_doc(*events))


@needs_scanner
@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.one_of(_event(), _PLAIN), min_size=1, max_size=6), st.randoms())
def test_mutated_documents_never_crash_and_still_match(
    events: list[str], rnd: random.Random
) -> None:
    data = bytearray(("[\n" + ",\n".join(events) + "\n]").encode())
    for _ in range(rnd.randint(1, 4)):
        at = rnd.randrange(len(data) + 1)
        kind = rnd.randrange(3)
        byte = rnd.choice(b'"\\{}[],:0123456789.eE-+ \n\x00\x1f\x80\xc3\xff')
        if kind == 0 and at < len(data):
            del data[at]
        elif kind == 1:
            data.insert(at, byte)
        elif at < len(data):
            data[at] = byte
    _check(bytes(data))


def test_the_scanner_can_be_switched_off() -> None:
    # TRACEOVERLAP_KSCAN=0: the msgspec path reads everything (what an install without a C
    # compiler does), for comparing the two or working around a scanner bug
    import subprocess
    import sys

    code = "from traceoverlap.readers.kineto import _columns; print(_columns.SCANNER)"
    env = {**os.environ, "TRACEOVERLAP_KSCAN": "0"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True)
    assert out.stdout.strip() == "msgspec", out.stderr


@needs_scanner
@pytest.mark.parametrize("layout", ["compact", "array", "indent"])
def test_other_layouts_read_the_same(
    layout: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # not one event per line (json.dumps without indent, Chrome's bare array, indent=1): the
    # general path, whose chunks the scanner reads too
    import gzip

    doc = json.loads(gzip.open(FIXTURES / "moe_slow" / "rank1.json.gz").read())
    text = {
        "compact": lambda: json.dumps(doc),
        "array": lambda: json.dumps(doc["traceEvents"]),
        "indent": lambda: json.dumps(doc, indent=1),
    }[layout]()
    path = tmp_path / "rank1.json"
    path.write_text(text)
    monkeypatch.setattr(_columns, "SCANNER", "c")
    fast = read_kineto(path)
    monkeypatch.setattr(_columns, "SCANNER", "msgspec")
    slow = read_kineto(path)
    for column in fast.events.columns:
        assert fast.events[column].equals(slow.events[column]), column
    assert len(fast.events) > 1000
